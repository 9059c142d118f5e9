"""Lesson 03 "Within reach of the ceiling": more work per thread (host side, microscope, compiler, GPU, chart).

Rungs of the stride-1 float32 copy, named by (elements per thread, bytes per load):

* ``(1, 4)``: ``strided_copy``, one 4-byte load per thread, one block per 256 elements (the lesson's kernel);
* ``(4, 4)``: ``copy_ilp4``, a grid-stride loop over a resident grid with four independent loads per trip;
* ``(1, 8)`` and ``(4, 8)``: the same kernels on 8-byte lanes (the float32 arrays viewed as float64: one
  ``LDG.E.64`` per load). ``(4, 8)`` is ``best_copy``, the course's best Numba copy.
* 16-byte loads (CUDA C's ``float4``, ``LDG.E.128``): numba-cuda 0.30 has no way to issue one from a plain
  array (a complex128 view compiles to two ``LDG.E.64``), so they appear in the model only.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from numba import cuda

from gpucourse import validate
from gpucourse.errors import InvalidConfig, WrongResult
from gpucourse.hardware import WARP_SIZE
from gpucourse.lessons.coalescing import inflight
from gpucourse.lessons.coalescing.kernels import ILP, best_copy, copy_ilp4, strided_copy
from gpucourse.lessons.coalescing.model import _cupy, _device_pattern, _free_pool, _trace, pattern
from gpucourse.measure import runtime
from gpucourse.measure.harness import Measurement, measure
from gpucourse.viz import charts

THREADS_PER_BLOCK = 256
RUNGS = ((1, 4), (4, 4), (1, 8), (4, 8))  # (elements per thread, bytes per load) that a kernel here runs
BEST_RUNG = (4, 8)
LAUNCHES_PER_SAMPLE = 4
WORK_USEFUL_BYTES = 1 << 30  # per side: 1 GiB each way, like the copy ceiling itself
TRACE_THREADS = 2 * WARP_SIZE  # the microscope's grid: two warps

_MEASURED: dict[tuple, pd.DataFrame] = {}


def check_rung(elements_per_thread, bytes_per_load) -> tuple[int, int]:
    k = validate.integer("elements_per_thread", elements_per_thread, minimum=1)
    width = validate.integer("bytes_per_load", bytes_per_load, minimum=1)
    if (k, width) not in RUNGS:
        raise InvalidConfig(f"no kernel runs {k} element(s) of {width} bytes per thread; the rungs are {RUNGS} "
                            "(16-byte loads are in the model only: numba-cuda cannot issue them)")
    return k, width


def lanes(array: np.ndarray, bytes_per_load: int):
    """A float32 array seen as lanes of ``bytes_per_load`` (4: itself; 8: a float64 view, no copy)."""
    if bytes_per_load == 4:
        return array
    if bytes_per_load == 8:
        return array.view(np.float64)
    raise InvalidConfig(f"bytes_per_load is {bytes_per_load}; the kernels here load 4 or 8 bytes")


def resident_grid(sm_count: int, threads_per_block: int = THREADS_PER_BLOCK, waves: int = 1,
                  threads_per_sm: int = inflight.MAX_THREADS_PER_SM) -> int:
    """Blocks for a grid-stride kernel: ``waves`` full rounds of resident blocks on every SM (no tail)."""
    sms = validate.integer("sm_count", sm_count, minimum=1)
    per_sm = threads_per_sm // validate.integer("threads_per_block", threads_per_block, minimum=WARP_SIZE)
    return sms * max(per_sm, 1) * validate.integer("waves", waves, minimum=1)


def launch(elements_per_thread: int, bytes_per_load: int, n_lanes: int, blocks_resident: int,
           threads_per_block: int = THREADS_PER_BLOCK):
    """(kernel, blocks, threads per block, arguments after src and dst) for one rung over ``n_lanes`` lanes:
    one block per 256 lanes for the one-element kernel, at most ``blocks_resident`` for the grid-stride ones."""
    k, _ = check_rung(elements_per_thread, bytes_per_load)
    if k == 1:
        return strided_copy, math.ceil(n_lanes / threads_per_block), threads_per_block, (n_lanes, 1, 0)
    blocks = min(blocks_resident, math.ceil(n_lanes / (ILP * threads_per_block)))
    if bytes_per_load == 8:
        return best_copy, blocks, threads_per_block, (n_lanes,)
    return copy_ilp4, blocks, threads_per_block, (n_lanes, 1, 0)


def run_rung(elements_per_thread=4, bytes_per_load=8, n_elements=1024, blocks_resident=2):
    """Copy ``n_elements`` float32 with one rung (GPU or simulator), check it, return the copy."""
    k, width = check_rung(elements_per_thread, bytes_per_load)
    n = validate.integer("n_elements", n_elements, minimum=1, maximum=1 << 16)
    if n % (width // 4):
        raise InvalidConfig(f"{n} float32 do not split into {width}-byte lanes")
    src = pattern(n)
    dst = np.full_like(src, np.nan)
    kernel, blocks, threads, extra = launch(k, width, n * 4 // width, blocks_resident, WARP_SIZE)
    kernel[blocks, threads](lanes(src, width), lanes(dst, width), *extra)
    if not np.array_equal(src, dst):
        raise WrongResult(f"the {k}×{width}-byte copy missed elements")
    return dst


def trace_rung(elements_per_thread=4, bytes_per_load=4):
    """Microscope counts of one rung on two warps of threads: requests, sectors, bytes per thread."""
    k, width = check_rung(elements_per_thread, bytes_per_load)
    n = TRACE_THREADS * ILP * width // 4  # float32 elements: four grid-stride trips' worth at ILP 4
    src = pattern(n)
    dst = np.full_like(src, np.nan)
    kernel, blocks, threads, extra = launch(k, width, n * 4 // width, TRACE_THREADS // WARP_SIZE, WARP_SIZE)
    report = _trace(kernel, blocks, threads, lanes(src, width), lanes(dst, width), *extra)
    if not np.array_equal(src, dst):
        raise WrongResult("the traced copy missed elements")
    return report


def rung_counts(elements_per_thread=4, bytes_per_load=4) -> dict:
    """What the microscope counts for one rung's loads: sectors per request, bytes per load and per thread."""
    k, width = check_rung(elements_per_thread, bytes_per_load)
    report = trace_rung(k, width)
    loads = report.requests()
    loads = loads[loads.op == "load"]
    per_thread = report.per_thread_max("load", array="src")
    return {"elements_per_thread": k, "bytes_per_load": width,
            "sectors_per_request": float(report.sectors_per_request(array="src", op="load")),
            "load_requests": len(loads), "loads_per_thread": per_thread,
            "bytes_per_thread": per_thread * width, "bytes_copied": int(report.requests().query("op == 'load'")
                                                                           .bytes_requested.sum()),
            "bytes_in_flight_per_sm": inflight.bytes_in_flight_per_sm(inflight.MAX_THREADS_PER_SM, k, width)}


def counts_table() -> pd.DataFrame:
    return pd.DataFrame([rung_counts(k, w) for k, w in RUNGS])


# --- the GPU -------------------------------------------------------------------------------------------------


def measure_rung(elements_per_thread=4, bytes_per_load=8, *, n_elements=None, copy_ceiling_gbps=None,
                 min_total_ms: float = 500.0) -> Measurement:
    """Time one rung with the harness (GPU). Effective GB/s = useful bytes × 2 ÷ time."""
    k, width = check_rung(elements_per_thread, bytes_per_load)
    label = f"float32 copy, {k} element(s) of {width} B per thread"
    if not runtime.is_gpu():
        return measure(lambda: None, label=label)  # "not measured": nothing runs in the simulator
    n = validate.integer("n_elements", n_elements or WORK_USEFUL_BYTES // 4, minimum=WARP_SIZE)
    n -= n % 4
    _free_pool()
    try:
        src = _device_pattern(n, "float32")
        dst = _cupy().empty_like(src)
        dst.fill(np.nan)
        d_src, d_dst = cuda.as_cuda_array(lanes(src, width)), cuda.as_cuda_array(lanes(dst, width))
        kernel, blocks, threads, extra = launch(k, width, n * 4 // width, resident_grid(runtime.device().sm_count))
        configured = kernel[blocks, threads]

        def run():
            for _ in range(LAUNCHES_PER_SAMPLE):
                configured(d_src, d_dst, *extra)

        def check():
            return bool((dst == src).all())

        return measure(run, label=label, check=check, bytes_moved=LAUNCHES_PER_SAMPLE * 2 * n * 4,
                       copy_ceiling_gbps=copy_ceiling_gbps, min_total_ms=min_total_ms)
    finally:
        _free_pool()


def _measured_rungs(min_total_ms: float) -> pd.DataFrame:
    from gpucourse.measure import ceilings

    if "rungs" not in _MEASURED:
        ceiling = ceilings.copy_gbps()
        rows = []
        for k, width in RUNGS:
            m = measure_rung(k, width, copy_ceiling_gbps=ceiling, min_total_ms=min_total_ms)
            rows.append({"elements_per_thread": k, "bytes_per_load": width, "gbps": m.gbps,
                         "copy_ceiling_gbps": ceiling})
        _MEASURED["rungs"] = pd.DataFrame(rows)
    return _MEASURED["rungs"]


# --- the chart -----------------------------------------------------------------------------------------------


def work_figure(elements_per_thread=4, bytes_per_load=8) -> go.Figure:
    """Effective bandwidth vs bytes in flight per SM: the model (calibrated on the H200 recording), and on a
    GPU the measured rungs; the chosen rung's microscope counts in the title."""
    from gpucourse.measure import harness

    k, width = check_rung(elements_per_thread, bytes_per_load)
    cal = inflight.h200_calibration()
    counts = rung_counts(k, width)
    title = (f"{k} element(s) × {width} B per thread: {counts['sectors_per_request']:.0f} sectors/request, "
             f"{counts['bytes_per_thread']} B per thread, {counts['load_requests']} load requests for "
             f"{counts['bytes_copied']} B")
    if runtime.is_gpu():
        data = _measured_rungs(harness.LIVE_MIN_TOTAL_MS)
        caption = charts.source_caption("measured", f"{runtime.device().name}, by the course harness (1 GiB each "
                                        "way); the model line: Little's law calibrated on the course's H200 "
                                        "recording (a model, not this GPU)")
    else:
        data = None
        caption = charts.source_caption("model", "Little's law, calibrated on one recorded point: "
                                        + (cal.source if cal else "no recording here"))
    fig = charts.figure(title, "bytes of reads in flight per SM (KiB, log scale)",
                        "effective GB/s (useful bytes, read + write)", caption)
    if cal is None:
        charts.no_data(fig, "no H200 recording here: the model has nothing to be calibrated on")
        return fig
    flights = [2 ** e for e in range(12, 19)]
    model = [inflight.predicted_gbps(f, cal.sm_count, cal.latency_ns, cal.ceiling_gbps) for f in flights]
    charts.line(fig, [f / 1024 for f in flights], model,
                f"model: min(2 × bytes in flight × {cal.sm_count} SMs ÷ {cal.latency_ns:.0f} ns, ceiling)", 1,
                dash="dash")
    charts.hline(fig, cal.ceiling_gbps, f"{cal.device} copy ceiling {cal.ceiling_gbps:.0f} GB/s (recorded)")
    fig.add_scatter(x=[8], y=[cal.one_element_gbps], mode="markers", name=f"{cal.device}, 1 × 4 B (recorded)",
                    marker={"symbol": "circle", "size": 11, "color": charts.PALETTE[0]})
    if data is not None:
        flight = [inflight.bytes_in_flight_per_sm(inflight.MAX_THREADS_PER_SM, r.elements_per_thread,
                                                  r.bytes_per_load) / 1024 for r in data.itertuples()]
        charts.line(fig, flight, data.gbps, "measured now: the rungs (1×4, 4×4, 1×8, 4×8 B)", 0, mode="markers")
    chosen = counts["bytes_in_flight_per_sm"]
    fig.add_scatter(x=[chosen / 1024], y=[inflight.predicted_gbps(chosen, cal.sm_count, cal.latency_ns,
                                                                  cal.ceiling_gbps)],
                    mode="markers", name=f"your rung: model ({chosen // 1024} KiB/SM)",
                    marker={"symbol": "star", "size": 16, "color": charts.PALETTE[3]})
    fig.update_xaxes(type="log")
    fig.update_yaxes(rangemode="tozero")
    return fig


def work_widget(elements_per_thread=4, bytes_per_load=8, threaded=True):
    import ipywidgets as w

    from gpucourse.viz.widgets import LiveChart

    controls = {"elements_per_thread": w.Dropdown(options=[1, 4], value=elements_per_thread,
                                                  description="elements"),
                "bytes_per_load": w.Dropdown(options=[4, 8], value=bytes_per_load, description="bytes/load")}
    return LiveChart(controls, work_figure, threaded=threaded,
                     description="Elements per thread and bytes per load → bytes in flight, the model, the counts.")
