"""Lesson 03 "Memory coalescing": what one warp's addresses cost, in 32-byte sectors.

* The sector model (pure arithmetic): lane ``l`` of warp ``w`` reads element
  ``(32·w + l)·stride + offset``; the memory system fetches every 32-byte sector holding one of
  those elements. ``sectors_per_request``, ``useful_fraction`` (useful bytes ÷ fetched bytes) and
  ``model_gbps`` (that fraction × the device's measured copy ceiling).
* Kernels: ``strided_copy`` (stride 1…64 and offset 0…32 elements, fp16/fp32/fp64), the particle
  update ``drift_aos`` / ``drift_soa`` (array of structs vs struct of arrays), and the matrix copies
  ``copy_rows`` / ``copy_columns`` (a warp walks along a row, or down a column).
* The microscope counts the sectors per request of those kernels (exact, in both modes):
  ``counted_sectors_per_request``, ``layout_counts``.
* GPU sweeps (``coalescing.stride``, ``coalescing.offset``, ``coalescing.layout``) timed by the harness;
  figures that show them measured (GPU), recorded (``data/reference``) or say there is no data.
* Figures: ``warp_figure`` (the lesson's picture: 32 lanes above the sectors they touch),
  ``stride_figure``, ``sectors_figure``, ``offset_figure``, ``layout_figure``, ``layout_bandwidth_figure``;
  widget builders return ``LiveChart``s.

* Within reach of the ceiling (work per thread): ``copy_ilp4`` (four independent loads per thread before
  the stores, grid-stride, same lane-to-element mapping as ``strided_copy``) and ``best_copy`` (the same at
  stride 1, on 8-byte lanes: the course's best Numba copy, for other lessons' ladders to compare with).
  ``inflight`` is the Little's-law model (bytes in flight per SM ÷ latency, capped by the ceiling), calibrated
  on the H200 recording; ``rung_counts`` the microscope's counts per rung; ``compiled.loads_as_compiled`` the
  load widths ptxas emits (LDG.E / LDG.E.64); ``work_figure`` / ``work_widget`` the chart.

Effective GB/s counts useful bytes only: elements copied × element size × 2 (read + write).
"""

from __future__ import annotations

from gpucourse.lessons.coalescing import inflight
from gpucourse.lessons.coalescing.experiments import (
    BEST_RUNG,
    LAUNCHES_PER_SAMPLE,
    LESSON,
    MEMORY_HEADROOM,
    OFFSETS,
    RUNGS,
    SWEEP_USEFUL_BYTES,
    THREADS_PER_BLOCK,
    counts_table,
    layout_sweep,
    measure_copy,
    measure_rung,
    offset_sweep,
    resident_grid,
    run_copy,
    run_drift,
    run_matrix_copy,
    run_rung,
    rung_counts,
    stride_sweep,
    sweep_elements,
)
from gpucourse.lessons.coalescing.figures import (
    _MEASURED,
    LINE_BYTES,
    layout_bandwidth_figure,
    layout_figure,
    layout_widget,
    measured_offset_text,
    measured_rung_text,
    measured_stride_text,
    offset_figure,
    offset_widget,
    picture_widget,
    sectors_figure,
    sectors_widget,
    stride_figure,
    stride_widget,
    warp_figure,
    work_figure,
    work_widget,
)
from gpucourse.lessons.coalescing.kernels import (
    best_copy,
    copy_columns,
    copy_ilp4,
    copy_rows,
    drift_aos,
    drift_soa,
    strided_copy,
)
from gpucourse.lessons.coalescing.model import (
    DRIFT_DT,
    DRIFT_FIELDS,
    DTYPES,
    FIELDS,
    LAYOUTS,
    MATRIX_BLOCK,
    MAX_OFFSET,
    MAX_STRIDE,
    SECTOR_BYTES,
    SIM_MAX_ELEMENTS,
    STRIDES,
    TRACE_ELEMENTS,
    TRACE_MATRIX,
    TRACE_PARTICLES,
    _trace,
    check_copied,
    check_copy,
    check_layout,
    check_offset,
    check_stride,
    copy_arrays,
    copy_bytes_allocated,
    counted_sectors_per_request,
    counted_sectors_table,
    drift_reference,
    dtype_name,
    ideal_sectors_per_request,
    itemsize,
    kernel_source,
    lane_addresses,
    lane_elements,
    layout_counts,
    layout_model,
    layout_model_fractions,
    make_particles,
    matrix_launch,
    model_gbps,
    model_table,
    pattern,
    sectors_per_request,
    sectors_touched,
    slowdown,
    span_elements,
    to_soa,
    trace_copy,
    trace_layout,
    useful_bytes,
    useful_fraction,
)
