"""Lesson 04a "Reductions, scans and warp primitives": a tree reduction and its variants (interleaved
and divergent, strided index with bank conflicts, sequential addressing, first add during load),
warp shuffles for the last 32 values, ballot/any votes for warp-uniform branches, block scans
(Hillis–Steele against Blelloch), atomics for the last step, and the libraries as the ceiling.

``kernels`` holds exactly the kernels learners read; ``model`` the counted quantities; ``experiments``
launches, the microscope's counts and the GPU sweep ``reductions.sum``; ``figures`` the charts.
"""

from gpucourse.lessons.reductions.experiments import (
    LIBRARIES,
    ballot_counts,
    block_scan,
    check_n,
    count_above,
    counts_table,
    ladder_data,
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
    REDUCTION_KERNEL_SOURCE,
    REDUCTIONS,
    SCANS,
    blelloch_kernel,
    count_above_ballot,
    count_above_per_lane,
    first_add_kernel,
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
    check_block,
    hillis_steele_adds,
    hillis_steele_steps,
    idle_lanes,
    model_table,
    strided_index_max_ways,
    tree_adds,
    tree_steps,
)

__all__ = [
    "ELEMENTS_PER_THREAD", "LIBRARIES", "REDUCTIONS", "REDUCTION_KERNEL_SOURCE", "SCANS", "add_warp_issues",
    "ballot_counts", "blelloch_adds", "blelloch_kernel", "blelloch_steps", "block_scan", "check_block", "check_n",
    "count_above", "count_above_ballot", "count_above_per_lane", "counts_figure", "counts_table",
    "first_add_kernel", "hillis_steele_adds", "hillis_steele_kernel", "hillis_steele_steps", "idle_lanes",
    "interleaved_kernel", "ladder_data", "ladder_figure", "measure_reductions", "model_figure", "model_table",
    "random_input", "reduce_sum", "reduction_counts", "reduction_explorer", "reduction_kernel",
    "reference_block_scan", "scan_counts", "scan_figure", "scan_kernel", "sequential_kernel",
    "strided_index_kernel", "strided_index_max_ways", "trace_reduction", "tree_adds", "tree_picture",
    "tree_steps", "variant_figure", "warp_shuffle_kernel",
]
