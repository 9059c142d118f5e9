"""Lesson 00a's pictures: what each thread computes, which elements it touches, how a 2-D grid covers
an array, and what gets copied between host and device."""

from __future__ import annotations

import html

import ipywidgets as widgets
import numpy as np
import plotly.graph_objects as go
from IPython.display import HTML

from gpucourse.lessons.first_kernels import experiments, kernels, model
from gpucourse.viz import charts
from gpucourse.viz.widgets import LiveChart

KERNEL_OUTPUT = "Computed now by the kernel itself (its output values, not a timing)"


def coordinates_figure(blocks: int = 3, threads_per_block: int = 8) -> go.Figure:
    """What ``who_am_i`` wrote: for every element, the block, the thread in the block and cuda.grid(1)."""
    table = experiments.coordinates_table(blocks, threads_per_block)
    rows = ["blockIdx.x", "threadIdx.x", "cuda.grid(1)"]
    values = table[rows].to_numpy().T
    fig = charts.figure(f"{blocks} blocks × {threads_per_block} threads: each thread's coordinates",
                        "element of the output (one thread each)", "what the thread wrote", KERNEL_OUTPUT,
                        height=300)
    colour_rows = np.vstack([table["blockIdx.x"].to_numpy()] * 3)
    scale = [[i / max(blocks - 1, 1), charts.PALETTE[i % len(charts.PALETTE)]] for i in range(blocks)]
    if blocks == 1:
        scale = [[0, charts.PALETTE[0]], [1, charts.PALETTE[0]]]
    fig.add_heatmap(z=colour_rows, x=table.element, y=rows, text=values, texttemplate="%{text}",
                    colorscale=scale, showscale=False, xgap=2, ygap=2, name="coloured by block",
                    hovertemplate="element %{x}: %{y} = %{text}<extra></extra>")
    fig.update_yaxes(autorange="reversed")
    return fig


def launch_figure(n: int = 200, threads_per_block: int = 64) -> go.Figure:
    """SAXPY traced by the microscope: which thread read which element of x, with the launch's counts."""
    report = experiments.trace_saxpy(n, threads_per_block)
    plan = model.launch_plan(n, threads_per_block)
    fig = report.picture_threads("x")
    reads, writes = report.per_thread_max("load", "x"), report.per_thread_max("store", "out")
    busy = report.thread_accesses().thread.nunique()
    title = (f"n = {n}, {threads_per_block} threads per block → {plan['blocks']} blocks, "
             f"{plan['threads_launched']} threads; {busy} touch memory, {plan['threads_past_the_end']} stop at "
             f"the bounds check<br><sup>most reads of x by one thread: {reads}; most writes of out: {writes}; "
             "dotted lines: block edges</sup>")
    fig.update_layout(title={"text": title})
    return fig


def launch_explorer() -> LiveChart:
    """Sliders for n and the block size over the microscope's thread × element picture of SAXPY."""
    return LiveChart(
        {"n": widgets.IntSlider(value=200, min=1, max=600, description="n"),
         "threads_per_block": widgets.IntSlider(value=64, min=32, max=256, step=32, description="block size")},
        compute=launch_figure,
        description="SAXPY under the microscope: one marker per read of x, at (element, thread that read it).",
    )


def grid_2d_figure(rows: int = 20, cols: int = 40, block_x: int = 16, block_y: int = 8) -> go.Figure:
    """A 2-D grid over a rows × cols array: the block that owns each element, and the idle threads."""
    plan = model.grid_2d(rows, cols, block_x, block_y)
    (gx, gy), (bx, by) = plan["grid"], plan["block"]
    height, width = gy * by, gx * bx
    block = np.full((height, width), -1.0)
    ys, xs = np.mgrid[0:rows, 0:cols]
    block[:rows, :cols] = (ys // by) * gx + xs // bx
    labels = np.where(block >= 0, block.astype(int).astype(str), "idle")
    fig = charts.figure(
        f"{rows}×{cols} array, blocks of {bx}×{by} → grid ({gx}, {gy}): {plan['idle_threads']} threads idle",
        "column = cuda.grid(2)[0] (x)", "row = cuda.grid(2)[1] (y)",
        charts.source_caption("model", "block (x, y) covers columns x·bx … and rows y·by …; the rest is idle"),
    )
    blocks = gx * gy
    scale = [[0, "#DDDDDD"], [0.5 / (blocks + 0.5), "#DDDDDD"]]
    for i in range(blocks):
        scale.append([(i + 0.5) / (blocks + 0.5), charts.PALETTE[i % len(charts.PALETTE)]])
        scale.append([(i + 1) / (blocks + 0.5), charts.PALETTE[i % len(charts.PALETTE)]])
    fig.add_heatmap(z=block + 0.5, zmin=-0.5, zmax=blocks, colorscale=scale, showscale=False, customdata=labels,
                    hovertemplate="row %{y}, column %{x}: block %{customdata}<extra></extra>",
                    name="element's block (grey: idle thread)")
    charts.rules(fig, "x", [x - 0.5 for x in range(0, width + 1, bx)], color="#000000", width=1)
    charts.rules(fig, "y", [y - 0.5 for y in range(0, height + 1, by)], color="#000000", width=1)
    fig.add_shape(type="rect", x0=-0.5, y0=-0.5, x1=cols - 0.5, y1=rows - 0.5, line={"color": "#000000", "width": 3,
                                                                                       "dash": "dash"})
    fig.update_yaxes(autorange="reversed")
    return fig


def copies_figure(launches: int = 20) -> go.Figure:
    """Host↔device copies of a loop of SAXPY launches: NumPy arguments against device arrays (model)."""
    table = __import__("pandas").concat([model.transfers(launches, 2, 1, device_resident=False),
                                         model.transfers(launches, 2, 1, device_resident=True)], ignore_index=True)
    fig = charts.figure(f"{launches} launches of SAXPY (x, y in; out out): copies between host and device",
                        "how the arrays are passed", "copies (count)",
                        charts.source_caption("model", "Numba copies every NumPy argument in and back at each "
                                                       "launch; device arrays move only when you say so"))
    for i, (column, pattern) in enumerate((("copies to the device", ""), ("copies to the host", "/"))):
        fig.add_bar(x=table["arrays passed"], y=table[column], name=column, marker_color=charts.PALETTE[i],
                    marker_pattern_shape=pattern, text=table[column], textposition="outside")
    fig.update_layout(barmode="group")
    return fig


def copies_explorer() -> LiveChart:
    return LiveChart({"launches": widgets.IntSlider(value=20, min=1, max=100, description="launches")},
                     compute=copies_figure)


def sources_side_by_side(cc=(9, 0)) -> HTML:
    """The CUDA C++ SAXPY and its PTX from NVRTC, beside the Numba SAXPY and its PTX (no GPU needed)."""
    numba_source = experiments.kernel_source(kernels.saxpy)
    try:
        cuda_ptx = experiments.ptx_body(experiments.nvrtc_ptx(cc=cc))
    except Exception as error:  # noqa: BLE001 - shown to the learner instead of the PTX
        cuda_ptx = f"(NVRTC could not compile here: {error})"
    try:
        numba_ptx = experiments.ptx_body(experiments.numba_ptx(cc=cc))
    except Exception as error:  # noqa: BLE001
        numba_ptx = f"(Numba could not compile here: {error})"
    style = "font-size:11px;white-space:pre;overflow-x:auto;max-height:28em;border:1px solid #ccc;padding:4px"

    def column(title, source, ptx):
        return (f"<div style='flex:1;min-width:0'><h4>{html.escape(title)}</h4>"
                f"<pre style='{style}'>{html.escape(source)}</pre>"
                f"<p>its PTX for compute capability {cc[0]}.{cc[1]} (the kernel's body):</p>"
                f"<pre style='{style}'>{html.escape(ptx)}</pre></div>")

    return HTML("<div style='display:flex;gap:1em'>"
                + column("CUDA C++ (CuPy RawKernel), compiled by NVRTC", kernels.SAXPY_CUDA_SOURCE, cuda_ptx)
                + column("Numba @cuda.jit, compiled by numba-cuda (NVVM)", numba_source, numba_ptx)
                + "</div>")
