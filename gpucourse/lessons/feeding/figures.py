"""Lesson 08's charts and widgets. Every chart says where its numbers came from.

On a GPU the charts are measured now; without one they draw the course's recording from a real
GPU where one exists, and otherwise the **model** (``feeding.model``) with its parameters and
where each came from in the caption. A simulator's time is never drawn.
"""

from __future__ import annotations

import contextlib
import functools

import ipywidgets as w
import numpy as np
import pandas as pd
import plotly.graph_objects as go

from gpucourse import validate
from gpucourse.errors import InvalidConfig
from gpucourse.lessons.feeding import experiments, model
from gpucourse.measure import published, reference, runtime
from gpucourse.viz import charts, cited
from gpucourse.viz.widgets import LiveChart

KIND_COLOURS = {"launch": charts.PALETTE[5], "host": charts.PALETTE[1], "wait": "#BBBBBB",
                "copy": charts.PALETTE[0], "kernel": charts.PALETTE[2]}
KIND_LABELS = {"launch": "host: issuing a launch or copy", "host": "host: Python / data work",
               "wait": "host: waiting for the GPU", "copy": "copy engine: transfer", "kernel": "SMs: kernel"}
KIND_PATTERNS = {"launch": "|", "host": "/", "wait": ".", "copy": "x", "kernel": ""}


def _recorded(source: str) -> bool:
    """Whether a chart's caption is a recording's (charts.source_caption("recorded", …))."""
    return source.startswith(charts.source_caption("recorded"))


def published_hbm_gbps(gpu: str = "NVIDIA H100 PCIe") -> float:
    """The best streaming-kernel GB/s published for ``gpu`` (gpu-benches, data/published/)."""
    table = published.load("gpu-benches-stream", "scale_gbps_vs_occupancy")
    return float(table.loc[table.gpu == gpu, "scale_gbps"].max())


def _params_text(params: model.Params) -> str:
    return (f"launch {params.launch_us:g} µs, pinned {params.pinned_gbps:g} GB/s, pageable "
            f"{params.pageable_gbps:g} GB/s, copy latency {params.copy_latency_us:g} µs, graph gap "
            f"{params.graph_gap_us:g} µs")


def model_caption(params: model.Params, extra: str = "") -> str:
    changed = [name for name in model.PARAM_SOURCES if getattr(params, name) != getattr(model.DEFAULTS, name)]
    note = "; changed by you: " + ", ".join(changed) if changed else ""
    return charts.source_caption("model", f"the lesson's timeline model, not a measurement ({_params_text(params)}"
                                 f"{note}; defaults are assumptions or claims: feeding.PARAM_SOURCES){extra}")


# --- timelines ----------------------------------------------------------------------------------


def timeline_figure(tl: pd.DataFrame, title: str, source: str) -> go.Figure:
    """One row per engine (host, copy engines, SMs), one bar per operation, time in µs."""
    lanes = [e for e in model.ENGINES if e in set(tl.engine)] or list(model.ENGINES)
    fig = charts.figure(title, "time (µs)", "", source, height=160 + 55 * len(lanes))
    for kind, label in KIND_LABELS.items():
        part = tl[tl.kind == kind]
        if part.empty:
            continue
        fig.add_bar(y=list(part.engine), x=list(part.end_us - part.start_us), base=list(part.start_us),
                    orientation="h", name=label, marker_color=KIND_COLOURS[kind],
                    marker_pattern_shape=KIND_PATTERNS[kind], marker_line={"color": "#333", "width": 0.5},
                    hovertext=list(part.name), hoverinfo="text+x")
    fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(lanes)))
    fig.update_layout(barmode="overlay")
    return fig


SCENARIOS = ("one stream, no chunks", "4 chunks on 2 streams (pinned)", "4 chunks on 2 streams (pageable)",
             "training loop with .item() each step", "training loop, no sync in the loop",
             "16 small kernels, launched one by one", "16 small kernels, one CUDA graph")


# the data knob's default per scenario: the pipelines move 8 MiB; a training step's batch is 0.25 MiB,
# small enough that a per-step .item() shows in the SMs' idle share (at 8 MiB the copy hides it)
DATA_MIB = {scenario: 0.25 if scenario.startswith("training loop") else 8.0 for scenario in SCENARIOS}


def scenario_ops(scenario: str, kernel_us: float = 200.0, batch_mib: float | None = None,
                 host_us: float = 60.0) -> list:
    scenario = validate.choice("scenario", scenario, SCENARIOS)
    batch_mib = DATA_MIB[scenario] if batch_mib is None else batch_mib
    nbytes = int(validate.number("batch_mib", batch_mib, minimum=0.001, maximum=4096) * 2**20)
    if scenario == "one stream, no chunks":
        return model.pipeline(nbytes, kernel_us)
    if scenario.startswith("4 chunks"):
        return model.pipeline(nbytes, kernel_us, chunks=4, streams=2, pinned="pinned" in scenario)
    if scenario.startswith("training loop"):
        return model.training_loop(steps=3, kernels_per_step=4, kernel_us=kernel_us / 4, host_us=host_us,
                                   batch_bytes=nbytes, item_each_step=".item()" in scenario)
    return model.small_kernels(16, kernel_us / 100, graph="graph" in scenario)


def model_timeline_figure(scenario: str = SCENARIOS[1], kernel_us: float = 200.0, batch_mib: float | None = None,
                          host_us: float = 60.0, launch_us: float = model.DEFAULTS.launch_us,
                          pinned_gbps: float = model.DEFAULTS.pinned_gbps) -> go.Figure:
    params = model.with_params(launch_us=launch_us, pinned_gbps=pinned_gbps)
    tl = model.timeline(scenario_ops(scenario, kernel_us, batch_mib, host_us), params)
    s = model.summary(tl)
    title = f"{scenario}: {s['makespan_us']:.0f} µs, SMs idle {100 * s['sm_idle_fraction']:.0f} %"
    return timeline_figure(tl, title, model_caption(params))


def timeline_explorer() -> LiveChart:
    """The model's timeline: pick a scenario, then move launch cost, bandwidth and kernel time."""
    controls = {
        "scenario": w.Dropdown(options=list(SCENARIOS), value=SCENARIOS[1], description="scenario",
                               layout=w.Layout(width="420px")),
        "kernel_us": w.FloatLogSlider(value=200.0, base=10, min=0, max=4, description="kernel µs"),
        "batch_mib": w.FloatLogSlider(value=8.0, base=2, min=-4, max=8, description="data MiB"),
        "launch_us": w.FloatSlider(value=model.DEFAULTS.launch_us, min=0.5, max=50, step=0.5,
                                   description="launch µs"),
        "pinned_gbps": w.FloatSlider(value=model.DEFAULTS.pinned_gbps, min=1, max=100, step=1,
                                     description="pinned GB/s"),
    }
    def scenario_default(change):  # a new scenario starts from its own data size (DATA_MIB)
        controls["batch_mib"].value = DATA_MIB[change["new"]]

    controls["scenario"].observe(scenario_default, names="value")
    return LiveChart(controls, compute=model_timeline_figure, threaded=False,
                     description="The timeline model (not a measurement): host, copy engines and SMs. "
                                 "Picking a scenario resets data MiB to that scenario's default.")


EVENT_BARS = {model.H2D: ("copy in (H2D)", charts.PALETTE[0], "x"), model.SMS: ("kernels", charts.PALETTE[2], ""),
              model.D2H: ("copy out (D2H)", charts.PALETTE[4], "\\")}
EVENTS_ARE = ("each bar is a stream interval between two CUDA events: when its stream reached them, queueing "
              "behind other work included; not when a copy engine or the SMs were busy (that is profiler "
              "activity: torch.profiler, Nsight Systems)")


def stream_timeline_figure(events: pd.DataFrame, title: str, source: str) -> go.Figure:
    """Event data (``experiments.overlap_events``): one row per *stream*, one bar per interval between
    the events recorded around an operation. Events time a stream's progress, not an engine's work."""
    streams = sorted(int(s) for s in set(events.stream))
    lanes = [f"stream {s}" for s in streams]
    fig = charts.figure(title, "time (µs)", "", f"{source} · {EVENTS_ARE}", height=200 + 55 * len(lanes))
    for engine, (label, colour, pattern) in EVENT_BARS.items():
        part = events[events.engine == engine]
        if part.empty:
            continue
        fig.add_bar(y=[f"stream {int(s)}" for s in part.stream], x=list(part.end_us - part.start_us),
                    base=list(part.start_us), orientation="h", name=f"{label}: stream interval between events",
                    marker_color=colour, marker_pattern_shape=pattern, marker_line={"color": "#333", "width": 0.5},
                    opacity=0.8, hovertext=list(part.name), hoverinfo="text+x")
    fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(lanes)))
    fig.update_layout(barmode="overlay")
    return fig


def measured_overlap_figure(streams: int = 2) -> go.Figure:
    """The overlap experiment drawn from events: measured now, or the recording, or a plain 'no data'."""
    streams = validate.choice("streams", streams, (1, 2))
    title = f"Copy → kernel → copy, 4 chunks on {streams} stream{'s' if streams > 1 else ''} (stream intervals)"
    if runtime.is_gpu():
        return stream_timeline_figure(experiments.overlap_events(streams=streams), title,
                                      charts.source_caption("measured", f"{runtime.device().name}, CUDA events"))
    rec = reference.load("feeding.overlap")
    if rec is not None:
        return stream_timeline_figure(rec.data[rec.data.streams == streams], title,
                                      charts.source_caption("recorded", rec.caption()))
    fig = charts.figure(title, "time (µs)", "", charts.source_caption(
        "none", "no GPU here and no recording of feeding.overlap yet; the model above is the stand-in"))
    return cited.no_data(fig, "No GPU timing to show here", "copy overlap")


# --- copies -------------------------------------------------------------------------------------


def copy_figure() -> go.Figure:
    """Host→device GB/s against size, pageable vs pinned."""
    title = "Host → device copies: effective GB/s against size"
    if runtime.is_gpu():
        data, source = experiments.copy_sweep(), charts.source_caption("measured", runtime.device().name)
    elif (rec := reference.load("feeding.copy")) is not None:
        data, source = rec.data, charts.source_caption("recorded", rec.caption())
    else:
        p = model.DEFAULTS
        sizes = experiments.COPY_SIZES
        data = pd.DataFrame(
            [{"bytes": b, "memory": kind, "gbps": model.copy_gbps(b, gbps, p.copy_latency_us)}
             for kind, gbps in (("pageable", p.pageable_gbps), ("pinned", p.pinned_gbps)) for b in sizes])
        source = model_caption(p, " · no GPU here and no recording of feeding.copy yet")
    fig = charts.figure(title, "bytes per copy (log)", "GB/s (log)", source)
    for i, kind in enumerate(("pageable", "pinned")):
        part = data[data.memory == kind]
        charts.line(fig, part.bytes, part.gbps, f"{kind} host memory", i)
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    return fig if _recorded(source) or runtime.is_gpu() else cited.because(fig, "host copies")


# --- launches and graphs ------------------------------------------------------------------------


def launch_figure() -> go.Figure:
    """µs per kernel of a chain of tiny kernels: launched one by one vs one CUDA graph."""
    title = "A chain of tiny kernels: time per kernel"
    if runtime.is_gpu():
        data, source = experiments.launch_sweep(), charts.source_caption("measured", runtime.device().name)
    elif (rec := reference.load("feeding.launch")) is not None:
        data, source = rec.data, charts.source_caption("recorded", rec.caption())
    else:
        counts = (1, 4, 16, 64)
        data = pd.DataFrame([{"kernels": c, "way": way, "us_per_kernel": model.per_kernel_us(c, 2.0, graph)}
                             for way, graph in (("eager launches", False), ("CUDA graph replay", True))
                             for c in counts])
        source = model_caption(model.DEFAULTS, " · 2 µs kernels · no GPU here and no recording of feeding.launch")
    fig = charts.figure(title, "kernels in the chain (log)", "µs per kernel", source)
    for i, way in enumerate(("eager launches", "CUDA graph replay")):
        part = data[data.way == way]
        charts.line(fig, part.kernels, part.us_per_kernel, way, i)
    fig.update_xaxes(type="log")
    return fig if _recorded(source) or runtime.is_gpu() else cited.because(fig, "launch timing")


# --- hidden synchronisations --------------------------------------------------------------------


def sync_figure() -> go.Figure:
    """ms per step with and without a ``.item()`` each step."""
    title = "One .item() per step: time per step"
    if runtime.is_gpu():
        data, source = experiments.sync_sweep(), charts.source_caption("measured", runtime.device().name)
    elif (rec := reference.load("feeding.sync")) is not None:
        data, source = rec.data, charts.source_caption("recorded", rec.caption())
    else:
        rows = []
        for way, item in (("no sync in the loop", False), (".item() every step", True)):
            tl = model.timeline(model.training_loop(steps=20, item_each_step=item))
            rows.append({"way": way, "ms_per_step": model.summary(tl)["makespan_us"] / 20 / 1e3})
        data = pd.DataFrame(rows)
        source = model_caption(model.DEFAULTS, " · the training_loop scenario's defaults · no GPU, no recording")
    fig = charts.figure(title, "", "ms per step", source)
    fig.add_bar(x=list(data.way), y=list(data.ms_per_step), marker_color=charts.PALETTE[:2], name="ms per step",
                text=[f"{v:.3g} ms" for v in data.ms_per_step], textposition="outside")
    return fig if _recorded(source) or runtime.is_gpu() else cited.because(fig, "host sync")


# --- fusion -------------------------------------------------------------------------------------


def fusion_figure(n: int = 1 << 24) -> go.Figure:
    """The chain at size n: counted bytes (exact) and time (measured, recorded or the bandwidth model)."""
    n = validate.integer("n", n, minimum=1 << 10, maximum=1 << 28)
    counted = {v: model.chain_bytes(n, 4, v == "fused") for v in ("unfused", "fused")}
    if runtime.is_gpu():
        data = experiments.fusion_sweep(sizes=(n,))
        ms = dict(zip(data.version, data.median_ms))
        source = charts.source_caption("measured", f"{runtime.device().name}; bytes counted, not measured")
    elif (rec := reference.load("feeding.fusion")) is not None and n in set(rec.data.n):
        part = rec.data[rec.data.n == n]
        ms = dict(zip(part.version, part.median_ms))
        source = charts.source_caption("recorded", rec.caption() + "; bytes counted")
    else:
        gbps = published_hbm_gbps()
        ms = {v: model.chain_time_us(n, gbps, fused=v == "fused") / 1e3 for v in counted}
        source = ("Bytes counted (exact); times from the bandwidth model at the streaming rate "
                  f"{published.caption('gpu-benches-stream')} published for an H100 PCIe ({gbps:.0f} GB/s) "
                  "— a model, not your GPU")
    modelled = not runtime.is_gpu() and not _recorded(source)  # the published rate × counted bytes
    time_is = "model: published H100 PCIe rate × counted bytes" if modelled else (
        "measured" if runtime.is_gpu() else "recorded")
    fig = charts.figure(f"The chain y = (max(2x + b, 0))² + 1, n = {n:,}", "", "", source, height=460)
    fig.set_subplots(1, 2, horizontal_spacing=0.16)  # two panels: bytes and time never share an axis
    versions = ["unfused", "fused"]
    fig.add_bar(x=versions, y=[counted[v] / 1e6 for v in versions], name="MB moved (counted)",
                marker_color=charts.PALETTE[0], text=[f"{counted[v] / 1e6:.3g} MB" for v in versions],
                textposition="outside", row=1, col=1)
    fig.add_bar(x=versions, y=[ms[v] for v in versions],
                name="published H100 PCIe rate × counted bytes, ms (model)" if modelled else f"time, ms ({time_is})",
                marker_color=charts.PALETTE[1], marker_pattern_shape="/",
                text=[f"{ms[v]:.3g} ms" for v in versions], textposition="outside", row=1, col=2)
    fig.update_yaxes(title_text="MB moved (counted)", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text=f"ms ({'model' if modelled else time_is})", rangemode="tozero", row=1, col=2)
    return fig


def fusion_claim_figure(byte_ratio: float | None = None) -> go.Figure:
    """Amdahl's law for fusion: step speed-up against the share of the step that is the fused chain."""
    ratio = byte_ratio or model.chain_bytes(1) / model.chain_bytes(1, fused=True)
    f = np.linspace(0, 1, 51)
    fig = charts.figure(f"What fusing a {ratio:.2f}× smaller chain can give the whole step",
                        "share of the step spent in the chain before fusion (fraction)", "step speed-up (×)",
                        charts.source_caption("model", "Amdahl's law on counted bytes; the 1.8× is a claim of "
                                                       "source 001, not a measurement"))
    charts.line(fig, f, [model.speedup_from_fusion(x, ratio) for x in f], "bytes-bound chain, fused", 0,
                mode="lines")
    charts.hline(fig, 1.8, "source 001's claim: 1.8× throughput", faint=True)
    need = model.fraction_for_speedup(1.8, ratio)
    if need <= 1:
        fig.add_annotation(x=need, y=1.8, text=f"needs ≥ {100 * need:.0f} % of the step in such chains",
                           showarrow=True, arrowhead=1, ax=-60, ay=-40)
    return fig


# --- the L2 -------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _measured_l2() -> pd.DataFrame:
    """One L2 sweep a session: the chart and the table after it show the same measurement."""
    return experiments.l2_sweep()


def l2_model_table() -> pd.DataFrame:
    """The L2 sweep (measured now on a GPU, else the newest recording) beside the model at its plateaus."""
    if runtime.is_gpu():
        data = _measured_l2()
    elif (rec := reference.load("feeding.l2")) is not None:
        data = rec.data
    else:
        return pd.DataFrame({"feeding.l2": ["no GPU here and no recording yet: nothing to set beside the model"]})
    return model.l2_model_vs(data).round(3)


def l2_figure() -> go.Figure:
    """Effective bandwidth of a warm copy against its working set, around the L2's size."""
    title = "Bandwidth against working set: the L2 plateau, then HBM"
    if runtime.is_gpu():
        data = _measured_l2()
        l2_mib = data.l2_bytes.iloc[0] / 2**20
        source = charts.source_caption("measured", f"{runtime.device().name}, L2 {l2_mib:.0f} MiB")
    elif (rec := reference.load("feeding.l2")) is not None:
        data, source = rec.data, charts.source_caption("recorded", rec.caption())
    else:
        hbm = published_hbm_gbps()
        l2 = model.H100_L2_BYTES
        sizes = [int(l2 * 2 ** (k / 2)) for k in range(-8, 9)]
        data = pd.DataFrame([{"working_set_bytes": s, "l2_bytes": l2, "gbps": model.l2_gbps(s, l2, hbm)}
                             for s in sizes])
        source = charts.source_caption(
            "model", f"L2 50 MB (H100 whitepaper); HBM {hbm:.0f} GB/s {published.caption('gpu-benches-stream')}; "
                     f"L2 = {model.L2_OVER_HBM}× HBM is an assumption · no GPU, no recording of feeding.l2")
    fig = charts.figure(title, "working set (MiB, log)", "GB/s", source, height=460)
    modelled = not runtime.is_gpu() and not _recorded(source)  # the published HBM rate, L2 assumed
    charts.line(fig, data.working_set_bytes / 2**20, data.gbps,
                "published HBM rate, L2 an assumed multiple (model)" if modelled else "copy (read + write)", 0)
    if not modelled:  # the model beside the data, anchored at the data's own two plateaus
        with contextlib.suppress(InvalidConfig):  # a sweep without both plateaus: the data alone
            vs = model.l2_model_vs(data)
            charts.line(fig, vs["working set / L2"] * float(data.l2_bytes.iloc[0]) / 2**20, vs["model GB/s"],
                        "model (L2 serves L2 ÷ working set), at these plateaus", 1, dash="dot")
    fig.add_vline(x=float(data.l2_bytes.iloc[0]) / 2**20, line_dash="dash", annotation_text="L2 size")
    fig.update_xaxes(type="log")
    return fig
