"""Lesson 00 "Start here: measuring GPU code": asynchronous launches and the device's ceilings.

* ``async_pitfall()``: the same kernel timed three ways on a GPU — the wall clock around the
  launch alone (it returns before the GPU has finished: the "thousands-fold speed-up"
  illusion), the wall clock with ``synchronize``, and device events.
* ``async_analogy()``: the same trap on the CPU in simulator mode (a background thread stands in
  for the GPU), labelled as an analogy: no GPU time is shown.
* ``roofline_figure()``: the device's two ceilings, measured (copy GB/s, matmul TFLOP/s) and
  from the datasheet, as a roofline.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from numba import cuda  # after gpucourse.measure.runtime (imported by the package) chose the mode

from gpucourse import validate
from gpucourse.measure import reference, runtime
from gpucourse.measure.harness import measure
from gpucourse.viz import charts

# One dependent fp32 FMA per iteration (~4 cycles of latency each): about 2 ms at ~2 GHz.
SPIN_ITERATIONS = 1_000_000
SPIN_BLOCKS, SPIN_THREADS = 132, 256  # one block per SM of an H100/H200 SXM, 8 warps each


def _spin_kernel():
    @cuda.jit
    def spin(out, iterations):
        # A long dependent chain: milliseconds of GPU work from one small launch.
        i = cuda.grid(1)
        x = np.float32(i)  # fp32 throughout: a bare 1.0 or 0.9999 is a float64 in Numba
        for _ in range(iterations):
            x = x * np.float32(0.9999) + np.float32(0.0001)
        if i < out.size:
            out[i] = x

    return spin


def async_pitfall(iterations: int = SPIN_ITERATIONS) -> pd.DataFrame:
    """On a GPU: one kernel timed by the launch's wall clock, wall clock + sync, and events."""
    iterations = validate.integer("iterations", iterations, minimum=1, maximum=10**8)
    if not runtime.is_gpu():
        raise validate.InvalidConfig("async_pitfall times a GPU; in simulator mode use async_analogy()")
    spin = _spin_kernel()
    launch = spin[SPIN_BLOCKS, SPIN_THREADS]
    out = cuda.device_array(SPIN_BLOCKS * SPIN_THREADS, dtype=np.float32)
    launch(out, iterations)  # compile
    cuda.synchronize()
    rows = []
    for _ in range(5):
        t0 = time.perf_counter()
        launch(out, iterations)
        launch_ms = (time.perf_counter() - t0) * 1e3
        cuda.synchronize()
        t0 = time.perf_counter()
        launch(out, iterations)
        cuda.synchronize()
        synced_ms = (time.perf_counter() - t0) * 1e3
        rows += [{"method": "wall clock, launch only", "ms": launch_ms},
                 {"method": "wall clock + synchronize", "ms": synced_ms}]
    m = measure(lambda: launch(out, iterations), label="spin kernel")
    rows += [{"method": "device events (harness median)", "ms": s} for s in m.samples_ms]
    return pd.DataFrame(rows)


@reference.register_sweep(
    "measuring.async_pitfall", lesson="00_measuring", columns=("method", "ms"),
    description="one kernel timed by launch wall clock, wall clock + sync, and events",
)
def _async_sweep() -> pd.DataFrame:
    return async_pitfall()


def async_analogy(work_ms: float = 200.0) -> pd.DataFrame:
    """The trap without a GPU: 'launch' work on a background thread and time it like a kernel."""
    work_ms = validate.number("work_ms", work_ms, minimum=1, maximum=5000)
    done = threading.Event()

    def work():
        time.sleep(work_ms / 1e3)  # stands in for the GPU running the kernel
        done.set()

    t0 = time.perf_counter()
    threading.Thread(target=work, daemon=True).start()  # like a kernel launch: returns at once
    launch_ms = (time.perf_counter() - t0) * 1e3
    done.wait()  # like cuda.synchronize()
    synced_ms = (time.perf_counter() - t0) * 1e3
    return pd.DataFrame([{"method": "wall clock, launch only", "ms": launch_ms},
                         {"method": "wall clock + wait", "ms": synced_ms}])


def async_figure(data: pd.DataFrame, source: str) -> go.Figure:
    medians = data.groupby("method", sort=False)["ms"].median()
    ways = {2: "two", 3: "three"}.get(len(medians), str(len(medians)))
    fig = charts.figure(f"The same work, timed {ways} ways", "", "time (ms, log scale)", source)
    fig.add_bar(x=list(medians.index), y=list(medians.values), marker_color=charts.PALETTE[: len(medians)],
                text=[f"{v:.3g} ms" for v in medians.values], textposition="outside", name="median time")
    fig.update_yaxes(type="log")
    return fig


def async_pitfall_figure() -> go.Figure:
    if runtime.is_gpu():
        return async_figure(async_pitfall(), charts.source_caption("measured", runtime.device().name))
    rec = reference.load("measuring.async_pitfall")
    if rec is not None:
        return async_figure(rec.data, charts.source_caption("recorded", rec.caption()))
    data = async_analogy()
    return async_figure(data, "CPU analogy, not a GPU timing: a background thread stands in for the GPU "
                        "(no GPU here and no recording yet)")


# --- ceilings and the roofline ------------------------------------------------------------------


def ceilings() -> pd.DataFrame:
    """This GPU's measured ceilings beside the datasheet (GPU only)."""
    from gpucourse.measure import ceilings as probe

    info = runtime.device()
    sheet = runtime.datasheet_tflops(info.name)
    rows = [
        {"quantity": "copy bandwidth", "unit": "GB/s", "measured": probe.copy_gbps(),
         "datasheet": info.datasheet_bandwidth_gbps},
        {"quantity": "fp32 matmul", "unit": "TFLOP/s", "measured": probe.matmul_tflops("float32"),
         "datasheet": sheet.get("fp32")},
        {"quantity": "bf16 matmul", "unit": "TFLOP/s", "measured": probe.matmul_tflops("bfloat16"),
         "datasheet": sheet.get("bf16")},
    ]
    return pd.DataFrame(rows)


@reference.register_sweep(
    "measuring.ceilings", lesson="00_measuring", columns=("quantity", "unit", "measured", "datasheet"),
    description="device-to-device copy GB/s and fp32/bf16 library matmul TFLOP/s vs the datasheet",
)
def _ceilings_sweep() -> pd.DataFrame:
    return ceilings()


def roofline_figure(precision: str = "bf16") -> go.Figure:
    """Attainable TFLOP/s vs arithmetic intensity: min(compute ceiling, intensity × bandwidth)."""
    precision = validate.choice("precision", precision, ["fp32", "bf16"])
    if runtime.is_gpu():
        data, source = ceilings(), charts.source_caption("measured", runtime.device().name)
    else:
        rec = reference.load("measuring.ceilings")
        data = rec.data if rec is not None else None
        source = (charts.source_caption("recorded", rec.caption()) if rec is not None else
                  "Datasheet lines only (NVIDIA H200 SXM): no GPU here and no recording of measured ceilings yet")
    intensity = np.logspace(-1, 4, 200)
    fig = charts.figure(f"Roofline ({precision} matmul ceiling)", "arithmetic intensity (FLOP/byte, log)",
                        "attainable TFLOP/s (log)", source)
    quantity = f"{precision} matmul"
    curves = []
    if data is not None:
        bw = float(data.loc[data.quantity == "copy bandwidth", "measured"].iloc[0])
        peak = float(data.loc[data.quantity == quantity, "measured"].iloc[0])
        curves.append(("measured ceilings", bw, peak, 0, None))
        sheet_bw = data.loc[data.quantity == "copy bandwidth", "datasheet"].iloc[0]
        sheet_peak = data.loc[data.quantity == quantity, "datasheet"].iloc[0]
    else:
        sheet_bw = runtime.DATASHEET_BANDWIDTH_GBPS["NVIDIA H200"]
        sheet_peak = runtime.datasheet_tflops("NVIDIA H200")[precision]
    if pd.notna(sheet_bw) and pd.notna(sheet_peak):
        curves.append(("datasheet", float(sheet_bw), float(sheet_peak), 1, "dot"))
    for name, bw_gbps, peak_tflops, index, dash in curves:
        attainable = np.minimum(peak_tflops, intensity * bw_gbps / 1e3)
        charts.line(fig, intensity, attainable, f"{name}: {bw_gbps:.0f} GB/s, {peak_tflops:.0f} TFLOP/s", index,
                    dash=dash, mode="lines")
        ridge = peak_tflops * 1e3 / bw_gbps
        fig.add_annotation(x=np.log10(ridge), y=np.log10(peak_tflops), text=f"ridge ≈ {ridge:.0f} FLOP/B",
                           showarrow=True, arrowhead=1, ax=30, ay=30)
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    return fig
