"""Lesson 02 "Warp divergence": what a data-dependent branch costs when both sides are real work.

* ``lane_flags(n, fraction, placement)``: which threads take path A — a fraction of the lanes,
  placed ``interleaved`` inside every warp, ``clustered`` in whole warps, ``sorted`` (all A first)
  or ``random`` (unsorted sparse data).
* The model (``warp_costs``, ``model_relative_time``, ``model_simt_efficiency``): a warp pays for
  every path any of its lanes takes; its lanes that are not on the path it is issuing sit masked.
* Kernels: ``two_paths`` (a branch whose two bodies are loops of FMAs the compiler must keep),
  ``two_paths_remapped`` (the same work, thread t handles element ``order[t]``) and
  ``predicated`` (a trivial branch the compiler turns into a select: it shows no gap).
* ``ptx_of`` / ``flag_test``: compile a kernel to PTX (without a GPU, in a child process) and
  find what the compiler made of the ``if`` on the loaded flag: a branch, a select or predication.
* Figures: ``warp_timeline_figure`` (the concept), ``fraction_figure`` (time vs fraction, one
  curve per placement, model beside measurement), ``simt_figure`` / ``lanes_picture`` (the
  microscope), ``predicated_figure`` and ``sort_pays_figure`` (the sparse-data story).
"""

from __future__ import annotations

from gpucourse.lessons.divergence.experiments import (
    GPU_THREADS,
    PTX_CC,
    SPARSE_BODIES,
    SPARSE_DENSITIES,
    SWEEP_FRACTIONS,
    claims,
    measure_fraction_curve,
    measure_sort_pays,
    prefetch_ptx,
    ptx_evidence,
    ptx_of,
    ptx_of_many,
    run_sorted,
    run_two_paths,
    trace_two_paths,
)
from gpucourse.lessons.divergence.figures import (
    PtxView,
    fraction_chart,
    fraction_figure,
    lanes_chart,
    lanes_picture,
    predicated_figure,
    show_ptx,
    simt_chart,
    simt_figure,
    sort_pays_figure,
    timeline_chart,
    warp_timeline_figure,
)
from gpucourse.lessons.divergence.kernels import (
    SIG_PREDICATED,
    SIG_REMAPPED,
    SIG_TWO_PATHS,
    predicated,
    two_paths,
    two_paths_remapped,
)
from gpucourse.lessons.divergence.model import (
    A_ADD,
    A_MUL,
    B_ADD,
    B_MUL,
    BLOCK_THREADS,
    BODY_COSTS,
    BODY_LINES,
    GPU_MEASURED_COLUMN,
    GPU_RECORDED_COLUMN,
    MAX_BODY,
    MAX_GPU_THREADS,
    MAX_SIM_THREADS,
    MICROSCOPE_BODY,
    MICROSCOPE_THREADS,
    MODEL_FRACTIONS,
    MODEL_THREADS,
    PATH_B,
    PLACEMENT_TEXT,
    PLACEMENTS,
    FlagTest,
    PtxResult,
    _host_inputs,
    blocks_for,
    body_efficiency,
    check_body,
    check_fraction,
    check_placement,
    check_threads,
    claims_table,
    flag_test,
    kernel_source,
    lane_flags,
    model_curves,
    model_relative_time,
    model_simt_efficiency,
    path_b_body,
    reference_two_paths,
    simt_table,
    sorted_order,
    sparse_table,
    trace_flags,
    warp_costs,
    warp_table,
)
