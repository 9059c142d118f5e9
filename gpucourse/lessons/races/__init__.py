"""Lesson 06 "Races and the memory consistency model": kernels, GPU sweeps, figures and widgets.

1. Lost updates — a histogram three ways: ``histogram_racy`` (plain ``+=``), ``histogram_atomic``
   (``cuda.atomic.add`` on global memory) and ``histogram_privatised`` (shared-memory atomics per
   block, merged at the end). ``lost_updates`` counts what each loses (GPU: measured; simulator:
   the plain simulator, which hides races, beside the race scheduler); ``histogram_figure`` adds
   the time per variant (GPU, or the ``races.histogram`` recording).
2. Message passing across blocks — ``mp_kernel`` (one producer, one consumer: the litmus test the
   race scheduler runs against the weak-memory model) and ``mp_harness`` (the GPU version: many
   pairs at once under memory stress, every spin-wait capped). ``run_litmus`` runs it on a GPU;
   ``races.litmus_mp`` records it with provenance (``make record``).
3. The weak-memory model lives in ``gpucourse.lessons.races.weakmemory``; the pictures are here.
4. Correct patterns — ``reduce_last_block`` (NVIDIA's threadFenceReduction: atomic ticket +
   ``threadfence``) and a small training loop whose loss drifts when blocks merge their
   gradients with a racy ``+=`` (``training_figure``).
"""

from __future__ import annotations

from gpucourse.lessons.races import weakmemory
from gpucourse.lessons.races.experiments import (
    HANDOFF_ITEMS,
    HIST_THREADS,
    HISTOGRAM_BINS,
    HISTOGRAM_ITEMS,
    OUTCOMES,
    counter_demo,
    litmus_recording,
    litmus_recording_table,
    litmus_weak_per_million,
    lost_updates,
    measure_histogram,
    run_handoff,
    run_litmus,
    train,
)
from gpucourse.lessons.races.figures import (
    PATTERNS,
    VARIANT_LABELS,
    _canvas,
    histogram_figure,
    histogram_widget,
    litmus_figure,
    lost_update_timeline,
    memory_model_picture,
    scopes_picture,
    show_handoff,
    show_histogram,
    training_figure,
)
from gpucourse.lessons.races.kernels import (
    LITMUS_SLOT_STRIDE,
    MAX_BINS,
    MAX_FEATURES,
    REDUCE_THREADS,
    _reset_litmus,
    _zero_int32,
    gradient_kernel,
    handoff_kernel,
    histogram_atomic,
    histogram_privatised,
    histogram_racy,
    mp_harness,
    mp_kernel,
    racing_counter,
    reduce_last_block,
)
from gpucourse.lessons.races.model import (
    GPU_MAX_ITEMS,
    HISTOGRAM_KERNELS,
    LAB_BLOCKS,
    LAB_THREADS,
    LITMUS_FENCES,
    SIM_BLOCKS,
    SIM_MAX_ITEMS,
    SIM_THREADS,
    VARIANTS,
    _arrow,
    _box,
    check_histogram,
    fence_reduction,
    fence_reduction_table,
    handoff,
    handoff_table,
    histogram_reference,
    histogram_values,
    mp_outcomes,
    race_histogram,
    training_data,
)
