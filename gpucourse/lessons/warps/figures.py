"""Lesson 01 "Warps and SIMT": charts and widgets."""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go

from gpucourse import validate
from gpucourse.hardware import WARP_SIZE
from gpucourse.lessons.warps.experiments import STAIRCASE_THREADS, measure_staircase
from gpucourse.lessons.warps.model import lane_map, staircase_model
from gpucourse.measure import harness, reference, runtime
from gpucourse.viz import charts, cited


def lane_map_figure(block_x: int = 16, block_y: int = 4) -> go.Figure:
    """The threads of a 2-D block laid out as (x, y), coloured by warp, each labelled warp:lane."""
    table = lane_map((block_x, block_y))
    warps = int(table.warp.max()) + 1
    grid_warp = table.warp.to_numpy().reshape(block_y, block_x)
    grid_lane = table.lane.to_numpy().reshape(block_y, block_x)
    label = np.char.add(np.char.add(grid_warp.astype(str), ":"), grid_lane.astype(str))
    partial = (block_x * block_y) % WARP_SIZE
    title = (f"A {block_x}×{block_y} block = {block_x * block_y} threads = {warps} warp(s)"
             + (f"; the last warp has {partial} of 32 lanes busy" if partial else ""))
    fig = charts.figure(title, "threadIdx.x", "threadIdx.y", charts.source_caption(
        "model", "the hardware numbers threads x-fastest and cuts every 32 consecutive threads into a warp"))
    colours = [charts.PALETTE[w % len(charts.PALETTE)] for w in range(warps)]
    if warps > 1:
        scale = [[i / (warps - 1), c] for i, c in enumerate(colours)]
    else:
        scale = [[0, colours[0]], [1, colours[0]]]
    fig.add_heatmap(
        z=grid_warp, text=label if block_x * block_y <= 256 else None, texttemplate="%{text}",
        colorscale=scale, showscale=False, xgap=1, ygap=1, zmin=0, zmax=max(warps - 1, 1),
        hovertemplate="threadIdx=(%{x}, %{y})<br>warp:lane %{text}<extra></extra>", name="warp of each thread",
    )
    fig.update_yaxes(autorange="reversed", dtick=1 if block_y <= 32 else None)
    fig.update_xaxes(dtick=1 if block_x <= 32 else None)
    return fig


def staircase_figure(max_threads: int = 128) -> go.Figure:
    """Measured (GPU) or recorded time vs threads per block, with the ⌈T/32⌉ staircase model."""
    max_threads = validate.integer("largest block size", max_threads, minimum=1, maximum=1024)
    threads = [t for t in STAIRCASE_THREADS if t <= max_threads] or [max_threads]
    if runtime.is_gpu():
        # a widget redraws this chart: the live contract, as lesson 02's explorer (measure.harness)
        data = measure_staircase(threads, min_total_ms=harness.LIVE_MIN_TOTAL_MS)
        source = charts.source_caption("measured", runtime.device().name)
    else:
        rec = reference.load("warps.staircase")
        data = None if rec is None else rec.data[rec.data.threads_per_block <= max_threads]
        source = charts.source_caption("recorded", rec.caption(bars=True)) if rec else charts.source_caption(
            "none", "no GPU here and no recording of this sweep yet (run `make record` on a GPU)")
    fig = charts.figure("Compute-bound kernel: time vs threads per block", "threads per block",
                        "time relative to one warp (×)", source)
    model = staircase_model(threads)
    charts.line(fig, threads, model, "model: ⌈threads/32⌉ warps per block", 1, line_shape="hv")
    if data is not None and len(data):
        one_warp = float(data.median_ms[data.warps_per_block == 1].median())
        charts.line(fig, data.threads_per_block, data.median_ms / one_warp, "time (÷ time of 1-warp blocks)", 0,
                    error_y=reference.spread(data, "median_ms", scale=1 / one_warp))
    else:
        cited.no_data(fig, "No GPU timing to show: the dashed staircase is the model", "warp staircase")
    return fig


def coverage_figure(rows: int, cols: int, block_x: int = 16, block_y: int = 16) -> go.Figure:
    """Which launched threads fall inside a rows × cols array, and which must skip the work."""
    rows = validate.integer("rows", rows, minimum=1, maximum=4096)
    cols = validate.integer("cols", cols, minimum=1, maximum=4096)
    bx, by, _ = validate.block((block_x, block_y))
    grid_x, grid_y = math.ceil(cols / bx), math.ceil(rows / by)
    launched_y, launched_x = grid_y * by, grid_x * bx
    inside = np.zeros((launched_y, launched_x), dtype=int)
    inside[:rows, :cols] = 1
    idle = launched_x * launched_y - rows * cols
    fig = charts.figure(
        f"{rows}×{cols} array, {by}×{bx} blocks → grid {grid_y}×{grid_x}: {idle} threads must skip the work",
        "global x (column)", "global y (row)",
        charts.source_caption("model", "threads outside the array are launched because blocks are whole"),
    )
    fig.add_heatmap(z=inside, colorscale=[[0, "#D55E00"], [1, "#56B4E9"]], showscale=False,
                    hovertemplate="x=%{x}, y=%{y}: %{customdata}<extra></extra>",
                    customdata=np.where(inside == 1, "inside the array", "outside: bounds check skips it"),
                    name="inside (blue) / outside (orange, hatched by block lines)")
    for x in range(0, launched_x + 1, bx):
        fig.add_vline(x=x - 0.5, line_color="#000", line_width=1)
    for y in range(0, launched_y + 1, by):
        fig.add_hline(y=y - 0.5, line_color="#000", line_width=1)
    fig.update_yaxes(autorange="reversed")
    return fig
