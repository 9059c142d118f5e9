"""Lesson 05 "Occupancy": the lesson's kernels, their real resource use, the calculator's charts,
the SM picture, and the GPU sweeps (latency hiding; our calculator against the driver).

* ``KERNELS``: the lesson's kernels (memory-bound copies, compute-bound FMA chains, a
  register-hungry kernel and a shared-memory reduction) with their signatures.
* ``usage_table(max_registers=None)``: registers / shared memory / spills of each, from
  numba-cuda on a GPU, else from PTX + ptxas, else "unknown" (gpucourse.measure.ptxinfo).
* ``sm_picture``: one SM's warp slots, register file and shared memory filled by resident blocks.
* ``occupancy_charts``: the calculator's three classic charts (vs block size, registers,
  shared memory), each point coloured *and* shaped by the limiter.
* ``occupancy_explorer()``: a LiveChart over kernel, block size, max_registers, dynamic
  shared memory (or a typed register count when the toolchain cannot tell).
* GPU sweeps (``reference.register_sweep``): memory-bound copies over a grid of exactly the
  resident blocks, the first attempt's one-element copies (dispatch-bound: the story of why
  they fooled us) and unrolled FMA chains, speed vs occupancy (lowered with dynamic
  shared-memory padding), each ILP 1 and 4; and calculator vs driver
  (``cuOccupancyMaxActiveBlocksPerMultiprocessor``). Without a GPU their charts show the
  recording, or say there is none.
"""

from __future__ import annotations

from gpucourse.lessons.occupancy import calculator
from gpucourse.lessons.occupancy.experiments import (
    AXES,
    COPY_ELEMENTS,
    DRIVER_CAPS,
    DRIVER_DYNAMIC_BYTES,
    DRIVER_THREADS,
    FMA_ITERATIONS,
    FMA_THREADS,
    KINDS,
    LESSON,
    SPEED_COLUMNS,
    SpeedRig,
    driver_blocks,
    driver_comparison,
    measure_speed,
    sweep_axis,
)
from gpucourse.lessons.occupancy.figures import (
    _MEASURED,
    BLOCK_COLOURS,
    MAX_REGISTER_CHOICES,
    SM_PICTURE_BOTTOM_PX,
    SPEED_SWEEPS,
    TYPED,
    _room_for_caption,
    calculator_widget,
    driver_comparison_figure,
    explorer_figure,
    learner_curve_figure,
    measured_ratios,
    occupancy_chart,
    occupancy_charts,
    occupancy_explorer,
    sm_picture,
    speed_explorer,
    speed_figure,
)
from gpucourse.lessons.occupancy.kernels import (
    ACCUMULATORS,
    FMA_B,
    FMA_C,
    FMAS_PER_ITERATION,
    accumulators_kernel,
    block_sum_kernel,
    copy_ilp4_kernel,
    copy_kernel,
    copy_resident_ilp4_kernel,
    copy_resident_kernel,
    fma_ilp4_kernel,
    fma_kernel,
)
from gpucourse.lessons.occupancy.model import (
    CANNOT_LAUNCH,
    CEILINGS_SWEEP,
    FIRST_ATTEMPT_SWEEP,
    KERNELS,
    MAX_PADDING_BYTES,
    MODEL_BYTES_PER_WARP_COPY,
    MODEL_FMA_LATENCY_CYCLES,
    SWEEP_THREADS,
    TARGET_OCCUPANCIES,
    LessonKernel,
    SpeedModel,
    _fma_reference,
    _tie_order,
    accumulators_answer,
    first_attempt_check,
    first_attempt_text,
    fma_chain_length,
    kernel_source,
    lesson_cc,
    lesson_kernel,
    lesson_speed_model,
    limiter_style,
    padding_levels,
    predictions,
    recorded_copy_gbps,
    recorded_latency_ns,
    resident_grid,
    speed_model,
    usage,
    usage_table,
)
