"""Published measurements (data/published/) drawn beside the lessons' models, when there is no GPU
and no recording of the course's own: each series named for the GPU and who measured it, the
caption saying who, which GPUs and software, the source (repository @ commit), the licence and how
the experiment differs from the course's kernel. Charts with nothing comparable published keep the
model and the microscope's counts, and ``because`` says why in their caption.

    fig = ...the lesson's figure, model drawn...
    cited.stream_vs_occupancy(fig)                       # lesson 05: gpu-stream, relative to its own best
    cited.cite(fig, "Model (dashed)", cited.STREAM)      # the caption names the source
    cited.because(fig, "divergence")                     # or: why nothing published is drawn

Nothing here is the learner's GPU, and nothing is ever presented as a measurement made now.
"""

from __future__ import annotations

import html
import textwrap

import pandas as pd
import plotly.graph_objects as go

from gpucourse.measure import published
from gpucourse.viz import charts

STREAM = "gpu-benches-stream"
SGEMM = "sgemm-cuda"
MAMF = "ml-engineering-mamf"

PUBLISHED_LEAD = "Published by"  # how every cited caption's published part starts (published.caption)
BECAUSE_LEAD = "Model and counts only, because"

# Experiments with nothing comparable in data/published/, and why (the caption says it).
NOTHING_PUBLISHED = {
    "divergence": "no published measurement times this sweep (two equal loop bodies, a fraction of lanes on "
                  "each) on a current GPU; divergence benchmarks time other kernels",
    "atomics": "no published histogram timing uses this kernel, bin counts and data; atomic throughput "
               "depends on all three",
    "litmus": "published litmus counts (Alglave et al., 2015) are for Fermi to Maxwell GPUs, not current ones",
    "strided copy": "no published stride sweep of a copy like this one is kept in data/published/ yet "
                    "(the CUDA Best Practices Guide shows one on a V100, as a figure)",
    "work per thread": "no published sweep of one copy's elements and bytes per thread against bytes in flight "
                       "is kept in data/published/ (vendors publish the copy ceiling, not this ladder)",
    "warp staircase": "no published time-vs-threads-per-block sweep is kept in data/published/",
    "transpose": "no published transpose sweep of these variants is kept in data/published/",
    "launch timing": "gpu-benches' launch-overhead results (gpu-small-kernels) are not extracted yet",
    "occupancy driver": "the driver's answer needs a GPU; it is a count, not a timing, and none is published",
    "compute occupancy": "gpu-benches publishes memory-bound sweeps; no FMA-chain sweep vs occupancy is published",
    "resident copy occupancy": "the published occupancy sweeps (gpu-benches' gpu-stream: H200, H100 PCIe, A100, "
                               "L40) copy one float64 element per thread over 131,073 to 4.2 M blocks, two per "
                               "SM, the block size setting the occupancy: this lesson's first-attempt launch "
                               "shape, where block turnover as well as occupancy sets the pace, with 256 B per "
                               "warp load where the model has 128 B; they answer another question than the "
                               "resident-grid copy, and none of this sweep is recorded yet",
    "first-attempt copy": "it is the course's own launch shape (one element per thread, ~1 M blocks), which "
                          "no published occupancy sweep uses",
    "fp32 roofline": "ml-engineering's table publishes bf16 and fp8 matmul maxima, no fp32 one (choose bf16)",
    "tiling roofline": "the roofline is the model itself; SGEMM_CUDA's published rungs (RTX A6000) are on the "
                       "ladder charts below, not on an H200's roof",
    "vocab shape": "no published timing of this LM-head shape pair is kept in data/published/",
    "reduction ladder": "no published timing of these rungs on a current GPU is kept in data/published/ (Harris's "
                        "reduction slides timed their ancestors on a 2007 G80)",
    "host copies": "no published pageable-vs-pinned sweep is kept in data/published/ yet (NVIDIA's "
                   "bandwidthTest sample measures one on your own machine)",
    "host sync": "a step's cost of one .item() depends on the model and the host; none is published for this loop",
    "fusion": "no published timing of this elementwise chain is kept in data/published/; source 001's 1.8× is a "
              "claim about another program",
    "l2 plateau": "gpu-benches' L2 results (gpu-l2-cache) are not extracted into data/published/ yet",
    "copy overlap": "an event timeline is a property of one run on one machine; none is published for this pipeline",
}


def software(source_id: str) -> str:
    """The first clause of the provenance's software line (the rest is in provenance.json)."""
    return published.provenance(source_id)["software"].split(";")[0].split(" (")[0]


def caption(source_id: str) -> str:
    """Who, which GPUs, software, source @ commit, licence, and how it differs from the course's kernel."""
    prov = published.provenance(source_id)
    return (f"{published.caption(source_id)}. Software: {software(source_id)}. "
            f"Differs from the course's kernel: {prov['differs_from_course']}.")


def cite(fig: go.Figure, lead: str, *source_ids: str) -> go.Figure:
    """The caption: ``lead`` (what else the chart shows), then every cited source's caption."""
    parts = [lead.rstrip(". ")] + [caption(s) for s in source_ids]
    charts.set_source(fig, ". ".join(p for p in parts if p))
    return stack_below(fig)


def because(fig: go.Figure, topic: str, lead: str | None = None) -> go.Figure:
    """Nothing comparable is published: the caption says so, and why, after what the chart does show
    (``lead``; by default the caption the figure already has)."""
    lead = charts.caption_of(fig) if lead is None else lead
    reason = f"{BECAUSE_LEAD} {NOTHING_PUBLISHED[topic]}"
    charts.set_source(fig, f"{lead.rstrip('. ')}. {reason}" if lead else reason)
    return stack_below(fig)


def stack_below(fig: go.Figure, line_px: int = 16) -> go.Figure:
    """The notes under the plot (the caption, a model's assumptions), one under the other whatever
    their number of lines, with the bottom margin and the height grown to hold them."""
    notes = [a for a in fig.layout.annotations
             if a.yref == "paper" and a.y == 0 and (a.yshift or 0) < 0 and a.yanchor == "top"]
    if not notes:
        return fig
    notes.sort(key=lambda a: -(a.yshift or 0))
    shift = notes[0].yshift
    for note in notes:
        note.yshift = shift
        shift -= line_px * (note.text.count("<br>") + 1) + 4
    needed = -shift + 12
    bottom = fig.layout.margin.b or 0
    if needed > bottom:
        fig.update_layout(margin={"b": needed}, height=(fig.layout.height or 420) + needed - bottom)
    return fig


def _hover(name: str, unit: str) -> str:
    return f"{html.escape(name)}: %{{y:.3g}} {unit} at %{{x}}<extra>published</extra>"


# --- gpu-stream (gpu-benches): bandwidth vs occupancy ------------------------------------------------


def stream_table() -> pd.DataFrame:
    return published.load(STREAM, "scale_gbps_vs_occupancy")


def stream_vs_occupancy(fig: go.Figure, *, relative: bool = True, first_index: int = 4, yaxis: str = "y") -> go.Figure:
    """One series per GPU: the scale kernel's GB/s against occupancy (%), or, with ``relative``,
    ÷ its own GB/s at its highest occupancy (the lesson's model axis). GB/s stay in the hover."""
    data = stream_table()
    for offset, (gpu, part) in enumerate(data.groupby("gpu", sort=False)):
        part = part.sort_values("occupancy_percent")
        top = float(part.scale_gbps.iloc[-1])
        y = part.scale_gbps / top if relative else part.scale_gbps
        name = f"published: {gpu.removeprefix('NVIDIA ')} (gpu-stream scale, te42kyfo)"
        charts.line(fig, part.occupancy_percent, y, name, first_index + offset, dash="solid", yaxis=yaxis,
                    customdata=part.scale_gbps,
                    hovertemplate=f"{html.escape(name)}: %{{customdata:.0f}} GB/s at %{{x}} % occupancy"
                                  "<extra>published</extra>")
    return fig


def stream_best_gbps(gpu: str = "NVIDIA H200") -> float:
    """gpu-stream's highest scale-kernel GB/s on ``gpu`` (its measured streaming bandwidth)."""
    data = stream_table()
    part = data[data.gpu == gpu]
    if part.empty:
        raise KeyError(f"gpu-stream has no {gpu}; it has {sorted(set(data.gpu))}")
    return float(part.scale_gbps.max())


# --- SGEMM_CUDA: the hand-written kernel ladder against cuBLAS --------------------------------------

SGEMM_N = 4096
# The published kernels closest to each step of the course's ladder (its provenance says how they differ).
SGEMM_RUNGS = ("Naive", "GMEM Coalescing", "SMEM Caching", "2D Blocktiling", "Warptiling", "cuBLAS")


def sgemm_table() -> pd.DataFrame:
    return published.load(SGEMM, "sgemm_4096_rtx_a6000")


def sgemm_ladder(fig: go.Figure, *, fraction: bool = False, rungs=SGEMM_RUNGS) -> go.Figure:
    """SGEMM_CUDA's kernels at N = 4096 on an RTX A6000, one marker each at x = 4096: GFLOP/s, or
    with ``fraction`` the share of cuBLAS's GFLOP/s (as published)."""
    data = sgemm_table().set_index("kernel")
    for index, kernel in enumerate(rungs):
        row = data.loc[kernel]
        y = row.percent_of_cublas / 100 if fraction else row.gflops
        name = f"published: {kernel} (SGEMM_CUDA, RTX A6000)"
        fig.add_scatter(x=[SGEMM_N], y=[y], name=name, mode="markers",
                        marker={"symbol": charts.MARKERS[index % len(charts.MARKERS)], "size": 11,
                                "color": charts.PALETTE[index % len(charts.PALETTE)],
                                "line": {"color": "#000", "width": 1}},
                        hovertemplate=(f"{html.escape(kernel)}: {row.gflops:,.0f} GFLOP/s, "
                                       f"{row.percent_of_cublas:g} % of cuBLAS<extra>published</extra>"))
    return fig


def sgemm_tiling_share() -> float:
    """What shared-memory tiling alone (SGEMM_CUDA's 'SMEM Caching') reaches, as a share of cuBLAS."""
    return float(sgemm_table().set_index("kernel").loc["SMEM Caching", "percent_of_cublas"]) / 100


SGEMM_NOTE = ("Tiling alone (SMEM Caching) reaches {share:.0%} of cuBLAS there: the lesson's traffic model "
              "bounds it by bandwidth and does not predict that; in CUDA C++, register blocking with 16-byte "
              "loads and then warp tiling narrow the gap (not the course's Numba kernels: see the ladder table)")


# --- ml-engineering: maximum achievable matmul TFLOP/s ---------------------------------------------

MAMF_DTYPES = {"bf16": "bf16", "fp8_e4m3": "fp8_e4m3fn"}


def mamf(accelerator: str, dtype: str) -> float | None:
    """The published maximum achievable matmul TFLOP/s, or None (not every row has every dtype)."""
    data = published.load(MAMF, "mamf_tflops")
    part = data[(data.accelerator == accelerator) & (data.dtype == MAMF_DTYPES.get(dtype, dtype))]
    return float(part.mamf_tflops.iloc[0]) if len(part) else None


# For an H200: the table's H200 row has fp8; its bf16 row is the H100 SXM's, whose note says "H200 is the same".
H200_MAMF_ROWS = {"bf16": "NVIDIA H100 SXM", "fp8_e4m3": "NVIDIA H200 SXM"}


def h200_mamf() -> dict[str, tuple[str, float]]:
    """dtype -> (the table row used, TFLOP/s) for the H200 the course's datasheet lines assume."""
    found = {}
    for dtype, row in H200_MAMF_ROWS.items():
        value = mamf(row, dtype)
        if value is not None:
            found[dtype] = (row, value)
    return found


def mamf_lines(fig: go.Figure, dtypes, xs, *, first_index: int = 5) -> list[str]:
    """A flat published line across ``xs`` for each dtype the table has (H200 rows); returns those drawn."""
    drawn = []
    for offset, (dtype, (row, value)) in enumerate(h200_mamf().items()):
        if dtype not in dtypes:
            continue
        name = f"published max achievable {dtype}: {value:g} ({row.removeprefix('NVIDIA ')}, ml-engineering)"
        charts.line(fig, list(xs), [value] * len(xs), name, first_index + offset, dash="longdash", mode="lines",
                    hovertemplate=f"{html.escape(name)}<extra>published, best of many shapes</extra>")
        drawn.append(dtype)
    return drawn


def mamf_bars(fig: go.Figure, dtypes) -> go.Figure:
    """One bar per dtype the table has (H200 rows): the published maximum achievable TFLOP/s."""
    found = h200_mamf()
    values = [found[d][1] if d in found else None for d in dtypes]
    fig.add_bar(x=list(dtypes), y=values, name="published max achievable (ml-engineering; H200 rows)",
                marker={"color": charts.PALETTE[5], "pattern": {"shape": "."}},
                text=[f"{v:g}" if v else "" for v in values], textposition="outside")
    return fig


def wrapped(text: str, width: int = charts.CAPTION_CHARS) -> str:
    return "<br>".join(textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False))


def h200_roof(precision: str) -> tuple[float, float, str] | None:
    """(GB/s, TFLOP/s, label) of a roof built from published H200 figures: gpu-stream's best scale-kernel
    bandwidth and ml-engineering's maximum achievable matmul; None where the table has no such dtype."""
    found = h200_mamf().get(precision)
    if found is None:
        return None
    row, tflops = found
    gbps = stream_best_gbps("NVIDIA H200")
    return gbps, tflops, (f"published H200: {gbps:.0f} GB/s (gpu-stream), {tflops:g} TFLOP/s "
                          f"({row.removeprefix('NVIDIA ')} row, ml-engineering)")


def no_data(fig: go.Figure, message: str, topic: str) -> go.Figure:
    """charts.no_data's message on the chart, and the caption saying why nothing published is drawn."""
    charts.no_data(fig, message)
    return because(fig, topic)
