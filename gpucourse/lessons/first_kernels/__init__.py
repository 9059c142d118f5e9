"""Lesson 00a "Your first kernels": a kernel as a function of its thread's coordinates, the launch and
its bounds check, 2-D grids, grid-stride loops, host and device arrays, and the same SAXPY in Numba,
CuPy and CUDA C++."""

from gpucourse.lessons.first_kernels.experiments import (
    coordinates_table,
    kernel_source,
    numba_ptx,
    nvrtc_ptx,
    out_of_bounds,
    ptx_body,
    ptx_counts_side_by_side,
    ptx_instruction_counts,
    reference,
    run_saxpy,
    three_ways,
    trace_grid_stride,
    trace_saxpy,
    trace_saxpy_2d,
    transfer_timings,
)
from gpucourse.lessons.first_kernels.figures import (
    coordinates_figure,
    copies_explorer,
    copies_figure,
    grid_2d_figure,
    launch_explorer,
    launch_figure,
    sources_side_by_side,
)
from gpucourse.lessons.first_kernels.kernels import (
    SAXPY_CUDA_SOURCE,
    SAXPY_ELEMENTWISE,
    saxpy,
    saxpy_2d,
    saxpy_grid_stride,
    saxpy_unguarded,
    who_am_i,
)
from gpucourse.lessons.first_kernels.model import blocks_for, elements_per_thread, grid_2d, launch_plan, transfers

__all__ = [
    "SAXPY_CUDA_SOURCE", "SAXPY_ELEMENTWISE", "saxpy_2d", "blocks_for", "coordinates_figure", "copies_explorer",
    "copies_figure", "elements_per_thread", "grid_2d", "grid_2d_figure", "launch_explorer", "launch_figure",
    "launch_plan", "numba_ptx", "nvrtc_ptx", "out_of_bounds", "ptx_body", "ptx_counts_side_by_side",
    "ptx_instruction_counts", "reference",
    "run_saxpy", "saxpy", "saxpy_grid_stride", "saxpy_unguarded", "sources_side_by_side", "three_ways",
    "trace_saxpy_2d", "trace_grid_stride", "trace_saxpy", "transfer_timings", "transfers", "who_am_i",
    "coordinates_table", "kernel_source",
]
