"""Lesson 04a "Reductions, scans and warp primitives": a tree reduction and its variants (interleaved
and divergent, strided index with bank conflicts, sequential addressing, first add during load),
warp shuffles for the last 32 values, many elements per thread (a resident grid, grid-stride partial
sums), ballot/any votes for warp-uniform branches, block scans
(Hillis–Steele against Blelloch), atomics for the last step, and the libraries as the ceiling.

``kernels`` holds exactly the kernels learners read; ``model`` the counted quantities; ``experiments``
launches, the microscope's counts and the GPU sweep ``reductions.sum``; ``figures`` the charts.
"""

from gpucourse.lessons.reductions.experiments import (
    LADDER_N,
    LIBRARIES,
    available_libraries,
    ballot_counts,
    block_scan,
    check_n,
    count_above,
    counts_table,
    in_flight_model,
    ladder_data,
    launch_blocks,
    measure_reductions,
    random_input,
    reduce_sum,
    reduction_counts,
    reference_block_scan,
    scan_counts,
    trace_reduction,
)
from gpucourse.lessons.reductions.figures import (
    counts_figure,
    ladder_figure,
    model_figure,
    reduction_explorer,
    scan_figure,
    tree_picture,
    variant_figure,
)
from gpucourse.lessons.reductions.kernels import (
    ELEMENTS_PER_THREAD,
    GRID_STRIDE_PARTIALS,
    REDUCTION_KERNEL_SOURCE,
    REDUCTIONS,
    SCANS,
    blelloch_kernel,
    count_above_ballot,
    count_above_per_lane,
    first_add_kernel,
    grid_stride_kernel,
    hillis_steele_kernel,
    interleaved_kernel,
    reduction_kernel,
    scan_kernel,
    sequential_kernel,
    strided_index_kernel,
    warp_shuffle_kernel,
)
from gpucourse.lessons.reductions.model import (
    add_warp_issues,
    blelloch_adds,
    blelloch_steps,
    bytes_in_flight,
    check_block,
    grid_stride_blocks,
    grid_stride_loads_per_thread,
    hillis_steele_adds,
    hillis_steele_steps,
    idle_lanes,
    in_flight_table,
    littles_law_gbps,
    model_table,
    resident_blocks,
    strided_index_max_ways,
    tree_adds,
    tree_steps,
)

__all__ = [
    "ELEMENTS_PER_THREAD", "GRID_STRIDE_PARTIALS", "LADDER_N", "LIBRARIES", "REDUCTIONS", "REDUCTION_KERNEL_SOURCE",
    "SCANS", "add_warp_issues", "available_libraries", "ballot_counts", "blelloch_adds", "blelloch_kernel",
    "blelloch_steps", "block_scan", "bytes_in_flight", "check_block", "check_n", "count_above",
    "count_above_ballot", "count_above_per_lane", "counts_figure", "counts_table", "first_add_kernel",
    "grid_stride_blocks", "grid_stride_kernel", "grid_stride_loads_per_thread", "hillis_steele_adds",
    "hillis_steele_kernel", "hillis_steele_steps", "idle_lanes", "in_flight_model", "in_flight_table",
    "interleaved_kernel", "ladder_data", "ladder_figure", "launch_blocks", "littles_law_gbps", "measure_reductions",
    "model_figure", "model_table", "random_input", "reduce_sum", "reduction_counts", "reduction_explorer",
    "reduction_kernel", "reference_block_scan", "resident_blocks", "scan_counts", "scan_figure", "scan_kernel",
    "sequential_kernel", "strided_index_kernel", "strided_index_max_ways", "trace_reduction", "tree_adds",
    "tree_picture", "tree_steps", "variant_figure", "warp_shuffle_kernel",
]
