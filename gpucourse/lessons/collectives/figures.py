"""Lesson 09's charts and widgets. Every chart says where its numbers came from: counted by the microscope,
the α-β model (with its link's source), published by others (Azure, nccl-tests threads), or measured now
between gloo processes on this computer. No GPU number here is the course's own: none was recorded yet.
"""

from __future__ import annotations

import ipywidgets as w
import numpy as np
import plotly.graph_objects as go

from gpucourse.errors import InvalidConfig
from gpucourse.lessons.collectives import experiments, kernels, model
from gpucourse.measure import published
from gpucourse.viz import charts
from gpucourse.viz.widgets import LiveChart

AZURE = "azure-nccl-allreduce"
# Numbers quoted in maintainers' threads (the course's multi-GPU review, §4.3), drawn as labelled lines.
NVLINK4_LINE_RATE_GBPS = 450.0  # 18 links × 25 GB/s per direction (jax-ml/scaling-book gpus.md)
RING_PLATEAU_GBPS = 370.0  # 8×H100 ring busbw, "protocol overhead (~20%)" (sjeaugey, NVIDIA/nccl-tests#212)
NVLS_QUOTES = (
    '"With NVLink SHARP neither the algbw nor busbw correspond to the bandwidth on the wire" (NCCL staff, '
    "NVIDIA/nccl-tests#212)",
    '"look at NVLS BusBw as effectively the NVLink BW you would need to achieve the AllReduce performance using '
    'say the RING" (NCCL staff, NVIDIA/nccl-tests#366)',
)


def _model_caption(link: model.Link) -> str:
    return charts.source_caption("model", f"the α-β model on {link.name}, α = {link.alpha_s * 1e6:g} µs, "
                                          f"β = {link.bandwidth_bytes_per_s / 1e9:g} GB/s: model parameters, "
                                          f"not measurements ({link.source[:90]}…)")


# --- the ring step view -----------------------------------------------------------------------------------

def step_states(op: str, algorithm: str, ranks: int) -> tuple[list[np.ndarray], list[list[kernels.Message]]]:
    """What each rank holds of each chunk after every step: for reductions, how many ranks' contributions
    (1 … p); for gathers and broadcasts, 1 where the chunk has arrived. One element per chunk, every input 1."""
    world = kernels.World(ranks, ranks, out=op == "all_to_all")
    for r in range(ranks):
        world.data[r][:] = 1.0
    if op in ("all_gather",):
        for r in range(ranks):
            world.data[r][:] = 0.0
            world.data[r][r] = 1.0
    if op == "broadcast":
        for r in range(1, ranks):
            world.data[r][:] = 0.0
    states = [np.array([d.copy() for d in world.data])]
    deliver = world.step

    def step_and_keep():
        deliver()
        states.append(np.array([d.copy() for d in (world.out if op == "all_to_all" else world.data)]))

    world.step = step_and_keep
    kernels.ALGORITHM_FUNCTIONS[(op, algorithm)](world)
    return states, world.history


def ring_steps_figure(op: str = "all_reduce", algorithm: str = "ring", ranks: int = 4) -> go.Figure:
    """A slider over the steps: ranks × chunks, each cell the contributions it holds; arrows: what moves."""
    model.collective_time_s(op, algorithm, 0, ranks, model.LINKS["loopback"])  # one-line errors
    ranks = int(ranks)
    if ranks > 16:
        raise InvalidConfig(f"the step view draws at most 16 ranks, got {ranks}")
    states, history = step_states(op, algorithm, ranks)
    top = max(float(s.max()) for s in states) or 1.0
    fig = charts.figure(f"{op} ({algorithm}) on {ranks} ranks, step by step", "chunk (index)", "rank (index)",
                        charts.source_caption("counted", "the microscope's messages, step by step; a cell's number "
                                              "is how many ranks' data it holds"),
                        height=260 + 28 * ranks)
    scale = [[0, "#FFFFFF"], [1, charts.PALETTE[0]]]

    def traces(k: int):
        z = states[k]
        heat = go.Heatmap(z=z, zmin=0, zmax=top, colorscale=scale, showscale=False, xgap=2, ygap=2,
                          text=z.astype(int), texttemplate="%{text}", name="contributions held")
        xs, ys = [], []
        for m in (history[k - 1] if k > 0 else []):
            mid = (m.part.start + m.part.stop - 1) / 2 if m.part.stop > m.part.start else 0
            xs += [mid, mid, None]
            ys += [m.src, m.dst, None]
        arrows = go.Scatter(x=xs, y=ys, mode="lines+markers", name="message this step (sender → receiver)",
                            line={"color": charts.PALETTE[3], "dash": "dot"},
                            marker={"symbol": "triangle-up", "size": 9, "color": charts.PALETTE[3]})
        return [heat, arrows]

    for trace in traces(0):
        fig.add_trace(trace)
    fig.frames = [go.Frame(data=traces(k), name=str(k)) for k in range(len(states))]
    fig.update_layout(sliders=[{"active": 0, "currentvalue": {"prefix": "after step "}, "pad": {"t": 40},
                                "steps": [{"label": str(k), "method": "animate",
                                           "args": [[str(k)], {"mode": "immediate", "frame": {"duration": 0}}]}
                                          for k in range(len(states))]}])
    fig.update_yaxes(autorange="reversed", dtick=1)
    fig.update_xaxes(dtick=1)
    return fig


def link_bytes_figure(run: experiments.CollectiveRun | None = None) -> go.Figure:
    """Bytes each rank sent to each rank (the per-link heat map): a ring uses p links, a root p − 1."""
    run = experiments.run("all_reduce", "ring", 8, 8 * 4 * 1024) if run is None else run
    p = run.ranks
    z = np.zeros((p, p))
    for (src, dst), nbytes in run.link_bytes.items():
        z[src, dst] = nbytes
    fig = charts.figure(f"Bytes per link: {run.op} ({run.algorithm}), {p} ranks, {run.nbytes:,} bytes",
                        "receiver (rank)", "sender (rank)",
                        charts.source_caption("counted", "bytes on each sender → receiver link"),
                        height=300 + 14 * p)
    fig.add_heatmap(z=z, colorscale=[[0, "#FFFFFF"], [1, charts.PALETTE[3]]], showscale=True, xgap=1, ygap=1,
                    colorbar={"title": "bytes"}, name="bytes sent")
    fig.update_yaxes(autorange="reversed")
    return fig


# --- the model against size, and published curves ---------------------------------------------------------

KNEE_MARKS = {"ring": "ring's knee p·αβ", "tree": "tree's knee αβ"}  # the algorithms whose knees the chart marks


def time_vs_size_figure(op: str = "all_reduce", ranks: int = 8, link_name: str = "nvlink4",
                        alpha_us: float | None = None, beta_gbps: float | None = None) -> go.Figure:
    """log-log: the model's time of ``op`` against size, one line per algorithm, and each marked algorithm's
    knee (``model.knee_bytes``: where its α-terms equal its β-terms; the ring's is p·αβ, the tree's αβ)."""
    base = model.LINKS[link_name]
    link = model.Link(base.name, base.alpha_s if alpha_us is None else alpha_us * 1e-6,
                      base.bandwidth_bytes_per_s if beta_gbps is None else beta_gbps * 1e9, base.source)
    sizes = experiments.sizes_bytes(8, 8 << 30, 4)
    fig = charts.figure(f"{op} on {ranks} ranks: modelled time against size", "size S (bytes)", "time (µs)",
                        _model_caption(link))
    for i, alg in enumerate(a for a in model.MODELLED[op] if model.is_power_of_two(ranks) or a != "recursive"):
        table = experiments.model_sweep(op, alg, ranks, link, sizes)
        charts.line(fig, table.size_bytes, table.time_us, alg, i)
    for k, (alg, label) in enumerate((a, t) for a, t in KNEE_MARKS.items() if a in model.MODELLED[op]):
        knee = model.knee_bytes(op, alg, ranks, link)
        fig.add_vline(x=knee, line_dash="dot" if alg == "ring" else "dash", line_color="#555")
        # one line of text per knee, in pixels (a share of the plot's height let two lines touch in a browser)
        fig.add_annotation(x=np.log10(knee), y=1, yshift=-24 * k, yref="paper", showarrow=False, xanchor="left",
                           yanchor="top", text=f"{label} ≈ {knee:,.0f} B")
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    return fig


def azure_busbw():
    return published.load(AZURE, "allreduce_busbw")


def busbw_figure(ranks: int = 8, link_name: str = "nvlink4_achieved") -> go.Figure:
    """busbw against size: the model's ring and tree on ``link_name`` beside Azure's published 8-GPU NVLS curves,
    with NVLink 4's 450 GB/s line rate and the ≈ 370 GB/s ring plateau quoted by NCCL staff."""
    link = model.LINKS[link_name]
    table = azure_busbw()
    sizes = sorted(set(int(s) for s in table.size_bytes))
    fig = charts.figure(f"All-reduce busbw on {ranks} GPUs: model and published measurements", "size S (bytes)",
                        "busbw (GB/s)",
                        f"{published.caption(AZURE)} (NVLS, in-place) · {_model_caption(link)} · lines: NVLink 4 "
                        "line rate (scaling-book), ring plateau ≈ 370 GB/s (nccl-tests#212)", height=520)
    for i, alg in enumerate(("ring", "tree")):
        sweep = experiments.model_sweep("all_reduce", alg, ranks, link, sizes)
        charts.line(fig, sweep.size_bytes, sweep.busbw_gbps, f"model: {alg} on {link.name}", i)
    for j, (gpu, part) in enumerate(table.groupby("gpu")):
        charts.line(fig, part.size_bytes, part.busbw_gbps,
                    f"published: {gpu}, NCCL {part.nccl_version.iloc[0]} (Azure)", 2 + j, mode="markers")
    charts.hline(fig, NVLINK4_LINE_RATE_GBPS, "NVLink 4 line rate 450 GB/s")
    charts.hline(fig, RING_PLATEAU_GBPS, "ring plateau ≈ 370 GB/s (quoted)", faint=True)
    fig.update_xaxes(type="log")
    return fig


def pingpong_figure(table, fitted: model.Link | None) -> go.Figure:
    """Your computer's one-message times (gloo, measured now) and the fitted line α + n/β (none when the times
    did not grow with size: the chart says so)."""
    if fitted is None:
        fit_text = "no α, β fitted: the times did not grow with size (a busy computer?); run the cell again"
    else:
        fit_text = (f"fitted α = {fitted.alpha_s * 1e6:.1f} µs, β = {fitted.bandwidth_bytes_per_s / 1e9:.2f} GB/s")
    fig = charts.figure("One message between two gloo processes", "message (bytes)", "time (µs)",
                        charts.source_caption("measured", f"now, on this computer's CPU (gloo over loopback), not a "
                                              f"GPU; {fit_text}"))
    charts.line(fig, table.size_bytes, table.time_s * 1e6, "measured (half a round trip)", 0, mode="markers")
    if fitted is not None:
        charts.line(fig, table.size_bytes, table.model_time_s * 1e6, "least-squares fit α + n/β", 1, mode="lines")
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    return fig


# --- the explorer ------------------------------------------------------------------------------------------

def _explorer_compute(op: str, algorithm: str, ranks: int, size_kib: float, link_name: str) -> go.Figure:
    nbytes = max(int(size_kib * 1024) // (4 * ranks), 1) * 4 * ranks
    try:
        run = experiments.run(op, algorithm, ranks, nbytes, model.LINKS[link_name])
    except InvalidConfig as err:  # a pair that does not apply: said on the chart, not as an error
        fig = charts.figure(f"{op} · {algorithm} · {ranks} ranks: not available", "rank (index)", "bytes",
                            charts.source_caption("none", "nothing to count for this choice"))
        return charts.no_data(fig, str(err))
    s = run.summary()
    fig = charts.figure(
        f"{op} · {algorithm} · {ranks} ranks · {nbytes:,} B: {s['time_us']:.1f} µs (model), {run.steps} steps, "
        f"busbw {s['busbw_gbps']:.1f} GB/s", "rank (index)", "bytes",
        f"{charts.source_caption('counted', 'bytes per rank')} · time: {_model_caption(run.link)}")
    fig.add_bar(x=list(range(ranks)), y=list(run.bytes_sent), name="bytes sent", marker_color=charts.PALETTE[0])
    fig.add_bar(x=list(range(ranks)), y=list(run.bytes_reduced), name="bytes reduced",
                marker_color=charts.PALETTE[1], marker_pattern_shape="/")
    fig.add_bar(x=list(range(ranks)), y=list(run.peak_buffer_bytes), name="peak buffer",
                marker_color=charts.PALETTE[2], marker_pattern_shape="x")
    return fig


def explorer_widget() -> LiveChart:
    """Ranks slider, size slider, op and algorithm dropdowns: the microscope's counts and the model's time."""
    controls = {
        "op": w.Dropdown(options=list(model.OPS), value="all_reduce", description="collective"),
        "algorithm": w.Dropdown(options=list(model.ALGORITHMS), value="ring", description="algorithm"),
        "ranks": w.IntSlider(value=8, min=2, max=64, description="ranks"),
        "size_kib": w.FloatLogSlider(value=64.0, base=2, min=0, max=8, description="size KiB"),
        "link_name": w.Dropdown(options=list(model.LINKS), value="nvlink4", description="link"),
    }
    return LiveChart(controls, compute=_explorer_compute, threaded=False,
                     description="The microscope runs the collective on simulated ranks and counts bytes; the "
                                 "time is the α-β model's (not a measurement). A choice that does not apply "
                                 "(recursive on 6 ranks, a tree all-gather) says so on the chart.")
