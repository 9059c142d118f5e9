"""The attention lesson's charts and explorer: naive against FlashAttention bytes as n grows, every placement on
the roofline of lesson 00, and (on a GPU) the kernel's measured TFLOP/s against SDPA's on that roofline."""

from __future__ import annotations

import ipywidgets as widgets
import pandas as pd
import plotly.graph_objects as go

from gpucourse.lessons.attention import model
from gpucourse.lessons.attention.kernels import HEAD_DIMS, TILE_SIZES
from gpucourse.lessons.attention.recorded import interpreter_results  # noqa: F401  the lesson calls it here
from gpucourse.measure import runtime
from gpucourse.viz import charts
from gpucourse.viz.widgets import LiveChart

GPU = "NVIDIA H200"  # the datasheet roofline without a GPU (the course's recorded GPU); on a GPU, its own
SEQUENCE_LENGTHS = tuple(2 ** p for p in range(8, 17))  # 256 … 65,536 tokens
COUNTED = "bytes and FLOPs counted exactly from the shapes and tiles (attention.model), per (batch, head)"


def roofline_gpu() -> str:
    """The GPU whose datasheet roofline the charts draw: this one where it is listed, else the H200's."""
    if runtime.is_gpu():
        name = runtime.device().name
        if runtime.datasheet_tflops(name).get("fp16") and runtime.datasheet_bandwidth_gbps(name):
            return name
    return GPU


def bytes_table(d: int = 64, br: int = 64, bc: int = 64, dtype: str = "fp16", causal: bool = False,
                lengths=SEQUENCE_LENGTHS) -> pd.DataFrame:
    """HBM bytes per (batch, head) as n grows: naive, FlashAttention-2 (no L2) and the compulsory minimum."""
    rows = []
    for n in lengths:
        naive, flash = model.naive_bytes(n, d, dtype), model.flash_bytes(n, d, br, bc, dtype, causal)
        rows.append({"n": n, "naive bytes": naive, "FlashAttention bytes (no L2)": flash,
                     "compulsory bytes": model.compulsory_bytes(n, d, dtype), "naive ÷ flash": naive / flash})
    return pd.DataFrame(rows)


def bytes_figure(d: int = 64, br: int = 64, bc: int = 64, dtype: str = "fp16", causal: bool = False) -> go.Figure:
    """Naive attention's bytes against FlashAttention's, per (batch, head), on log axes."""
    table = bytes_table(d, br, bc, dtype, causal)
    fig = charts.figure(f"HBM bytes per head, d = {d}, {dtype}, {br}×{bc} tiles{', causal' if causal else ''}",
                        "sequence length n (tokens)", "bytes per (batch, head)",
                        charts.source_caption("model", COUNTED))
    charts.line(fig, table.n, table["naive bytes"], "naive: S and P through HBM (4n² + 4nd elements)", 0)
    charts.line(fig, table.n, table["FlashAttention bytes (no L2)"], "FlashAttention-2, K and V re-read per Q "
                "tile (no L2)", 1)
    charts.line(fig, table.n, table["compulsory bytes"], "compulsory: Q, K, V, O once (+ logsumexp)", 2)
    fig.update_xaxes(type="log", dtick=0.30102999566)
    fig.update_yaxes(type="log")
    return charts.fit(fig)


def placements_table(n: int = 4096, d: int = 64, br: int = 64, bc: int = 64, dtype: str = "fp16",
                     causal: bool = False, gpu: str | None = None) -> pd.DataFrame:
    """Each way of computing attention on one GPU's roofline: FLOPs, bytes, intensity, bound, attainable share."""
    gpu = roofline_gpu() if gpu is None else gpu
    return pd.DataFrame([{"what": p.what, "FLOPs": p.flops, "bytes": p.bytes,
                          "FLOP per byte": round(p.intensity_flop_per_byte, 1),
                          "ridge (FLOP per byte)": round(p.ridge_flop_per_byte, 1), "bound": p.bound,
                          "attainable share of peak": round(p.attainable_fraction, 3)}
                         for p in model.placements(n, d, br, bc, dtype, causal, gpu)])


def roofline_figure(n: int = 4096, d: int = 64, br: int = 64, bc: int = 64, dtype: str = "fp16",
                    causal: bool = False, gpu: str | None = None, measured: dict | None = None) -> go.Figure:
    """The datasheet roofline of ``gpu`` with naive attention and FlashAttention placed on it; ``measured`` (from
    ``timing.against_sdpa``) adds the kernel's and SDPA's achieved TFLOP/s at the FlashAttention intensity."""
    gpu = roofline_gpu() if gpu is None else gpu
    found = model.placements(n, d, br, bc, dtype, causal, gpu)
    peak = runtime.datasheet_tflops(gpu)[dtype]
    ridge = found[0].ridge_flop_per_byte
    if measured is None:
        source = charts.source_caption("model", f"{gpu} datasheet roofline; {COUNTED}")
    else:
        source = charts.source_caption("measured", f"{runtime.device().name}, {measured['contract']} contract; "
                                                   f"the roofline is the datasheet's")
    fig = charts.figure(f"Attention on the {gpu} roofline: n = {n:,}, d = {d}{', causal' if causal else ''}",
                        "arithmetic intensity (FLOP per byte)", f"attainable {dtype} (TFLOP/s)", source)
    xs = [min(p.intensity_flop_per_byte for p in found) / 4, ridge, max(ridge, *(p.intensity_flop_per_byte
                                                                                  for p in found)) * 4]
    charts.line(fig, xs, [min(peak, x * peak / ridge) for x in xs], f"roofline: {peak:g} TFLOP/s, ridge "
                f"{ridge:.0f} FLOP/B", 7, mode="lines")
    for i, p in enumerate(found):
        charts.line(fig, [p.intensity_flop_per_byte], [peak * p.attainable_fraction],
                    f"{p.what}: {p.intensity_flop_per_byte:.0f} FLOP/B, {p.bound}", i, mode="markers")
    if measured is not None:
        at = found[1].intensity_flop_per_byte
        charts.line(fig, [at], [measured["kernel_tflops"]], f"measured: this Triton kernel, "
                    f"{measured['kernel_ms']:.3g} ms", 3, mode="markers")
        charts.line(fig, [at], [measured["sdpa_tflops"]], f"measured: SDPA's flash backend, "
                    f"{measured['sdpa_ms']:.3g} ms", 4, mode="markers")
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    return charts.fit(fig)


def explorer_figure(n: int = 4096, d: int = 64, tiles: int = 64, causal: bool = False) -> go.Figure:
    """The explorer's chart: the placements for these values and, on a GPU, the kernel and SDPA measured now."""
    measured = None
    if runtime.is_gpu():
        from gpucourse.lessons.attention import timing

        measured = timing.against_sdpa(n, d, causal, block_m=tiles, block_n=tiles if tiles <= 64 else 64)
    return roofline_figure(n, d, tiles, tiles, "fp16", causal, measured=measured)


def attention_explorer() -> LiveChart:
    """Sequence length, head dimension, tiles and causal → bytes, intensity, placement (and, on a GPU, time)."""
    controls = {
        "n": widgets.SelectionSlider(options=list(SEQUENCE_LENGTHS), value=4096, description="n (tokens)"),
        "d": widgets.Dropdown(options=list(HEAD_DIMS), value=64, description="head dim"),
        "tiles": widgets.Dropdown(options=list(TILE_SIZES), value=64, description="Q tile rows"),
        "causal": widgets.Checkbox(value=False, description="causal"),
    }
    return LiveChart(controls, explorer_figure, description="Move n, d, the tile and causal: the FlashAttention "
                     "point (no L2) moves right with the Q tile's rows; naive attention's does not move with n")


def tiles_figure(n: int = 512, br: int = 64, bc: int = 64, causal: bool = True) -> go.Figure:
    """The picture: the n × n score matrix in br × bc tiles, the ones the forward computes and the ones it skips."""
    visited = set(model.visited_tiles(n, br, bc, causal))
    rows, cols = model.q_tiles(n, br), model.q_tiles(n, bc)
    z = [[1 if (i, j) in visited else 0 for j in range(cols)] for i in range(rows)]
    text = [["computed" if (i, j) in visited else "skipped" for j in range(cols)] for i in range(rows)]
    fig = charts.figure(f"The score matrix S = QKᵀ in {br}×{bc} tiles, n = {n}{', causal' if causal else ''}: "
                        f"{len(visited)} of {rows * cols} tiles computed", "K/V tile j (columns of S)",
                        "Q tile i (one program each)", charts.source_caption("model", "model.visited_tiles"))
    fig.add_heatmap(z=z, text=text, texttemplate="%{text}", colorscale=[[0, "#f0f0f0"], [1, charts.PALETTE[0]]],
                    showscale=False, xgap=2, ygap=2, zmin=0, zmax=1, name="tiles",
                    hovertemplate="Q tile %{y}, K/V tile %{x}: %{text}<extra></extra>")
    fig.update_yaxes(autorange="reversed", dtick=1)
    fig.update_xaxes(dtick=1)
    return charts.fit(fig)


def online_check(n: int = 256, d: int = 64, block: int = 64, causal: bool = True, seed: int = 0) -> pd.DataFrame:
    """Online softmax against the whole-row softmax on random float64 inputs: the largest differences."""
    import numpy as np

    from gpucourse.lessons.attention import online

    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((n, d)) for _ in range(3))
    exact = online.exact_attention(q, k, v, causal)
    out, lse = online.online_attention(q, k, v, block, causal, return_lse=True)
    s = online.scores(q, k, causal)
    reference_lse = s.max(axis=1) + np.log(np.exp(s - s.max(axis=1, keepdims=True)).sum(axis=1))
    return pd.DataFrame([{"n": n, "d": d, "block": block, "causal": causal,
                          "max |O online − O exact|": float(np.abs(out - exact).max()),
                          "max |logsumexp online − exact|": float(np.abs(lse - reference_lse).max())}])


def extra_memory_table(d: int = 64, dtype: str = "fp16", lengths=(4096, 65536)) -> pd.DataFrame:
    """Memory beyond Q, K, V and O per (batch, head): naive keeps S and P, FlashAttention the logsumexp."""
    return pd.DataFrame([{"n": n, "naive: S and P (MB)": model.extra_memory_bytes(n, dtype, flash=False) / 1e6,
                          "FlashAttention: logsumexp (MB)": model.extra_memory_bytes(n, dtype, flash=True) / 1e6,
                          "Q, K, V, O (MB)": model.compulsory_bytes(n, d, dtype, lse=False) / 1e6}
                         for n in lengths])


def traffic_check(results: pd.DataFrame) -> pd.DataFrame:
    """Each interpreted case's counted bytes against ``model.flash_traffic``'s prediction (batch·heads times)."""
    rows = []
    for case in results.to_dict("records"):
        size = 2 if case["dtype"] == "float16" else 4
        traffic = model.flash_traffic(case["n"], case["d"], case["block_m"], case["block_n"], size, case["causal"])
        heads = case["batch"] * case["heads"]
        read = heads * sum(v for k, v in traffic.items() if k.startswith("read"))
        written = heads * sum(v for k, v in traffic.items() if k.startswith("write"))
        rows.append({"n": case["n"], "d": case["d"], "dtype": case["dtype"], "causal": case["causal"],
                     "model: bytes read": read, "counted: bytes read": case["bytes read"],
                     "model: bytes written": written, "counted: bytes written": case["bytes written"],
                     "equal": read == case["bytes read"] and written == case["bytes written"]})
    return pd.DataFrame(rows)


def intensity_by_tile(n: int = 4096, d: int = 64, dtype: str = "fp16", causal: bool = False,
                      gpu: str | None = None) -> pd.DataFrame:
    """FlashAttention's intensity without the L2 for each Q tile height, against the ridge."""
    gpu = roofline_gpu() if gpu is None else gpu
    rows = []
    for br in TILE_SIZES:
        p = model.placements(n, d, br, 64, dtype, causal, gpu)[1]
        rows.append({"Q tile rows br": br, "FLOP per byte (no L2)": round(p.intensity_flop_per_byte, 1),
                     "ridge": round(p.ridge_flop_per_byte, 1), "bound": p.bound,
                     "attainable share of peak": round(p.attainable_fraction, 3)})
    return pd.DataFrame(rows)
