"""Lesson 04 "Shared memory: tiling and bank conflicts": charts and widgets."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

# gpucourse/__init__ has chosen the mode before this runs. Kernels reach ``cuda`` through this
# module-level name so that the simulator (and the microscope) can swap in their own.
from gpucourse import validate
from gpucourse.hardware import WARP_SIZE
from gpucourse.lessons.tiling.experiments import (
    MATMUL_SIZES,
    REFERENCE_GPU,
    TILES,
    TRANSPOSE_SIZES,
    _transpose_data,
    ceilings_for_roofline,
    measure_matmul_ladder,
)
from gpucourse.lessons.tiling.kernels import check_tile, check_transpose_shape
from gpucourse.lessons.tiling.model import (
    BARRIER_CASES,
    _element_bytes,
    _style_index,
    bank_of,
    barrier_experiment,
    default_block_rows,
    intensity,
    ladder,
    transpose_counts,
    transpose_warp_words,
    warp_bank_ways,
)
from gpucourse.measure import reference, runtime
from gpucourse.viz import charts, cited

BANKS = 32


def _matmul_data() -> tuple[pd.DataFrame | None, str]:
    """(data, caption) for the ladder charts: measured now, recorded, or none."""
    if runtime.is_gpu():
        return None, charts.source_caption("measured", runtime.device().name)
    rec = reference.load("tiling.matmul")
    if rec is None:
        return None, charts.source_caption(
            "none", "no GPU here and no recording of the matmul ladder yet (run `make record` on a GPU)")
    return rec.data, charts.source_caption("recorded", rec.caption())


def _fit_bottom(fig: go.Figure) -> go.Figure:
    """Under the plot, in pixels: the axis title, the legend (its rows counted), then the caption (a caption
    set again, by cited.cite or because, keeps its place under the legend)."""
    return charts.legend_below(fig, 64)


def gflops_figure(tile: int = 16, max_n: int = 4096, progress=None) -> go.Figure:
    """GFLOP/s vs N for naive, tiled (this tile), register-blocked and cuBLAS."""
    tile = check_tile(tile)
    max_n = validate.integer("largest N", max_n, minimum=MATMUL_SIZES[0], maximum=MATMUL_SIZES[-1])
    sizes = [n for n in MATMUL_SIZES if n <= max_n]
    data, source = _matmul_data()
    if runtime.is_gpu():
        data = measure_matmul_ladder(sizes, ladder(tile), progress=progress)
    fig = charts.figure(f"Matmul ladder (fp32, tile {tile}): GFLOP/s vs N", "matrix size N (N×N×N)",
                        "throughput (GFLOP/s, log)", source)
    labels = [r.label for r in ladder(tile)]
    roof = ceilings_for_roofline()
    bw = roof["copy_gbps"] or roof["datasheet_gbps"]
    peak = roof["library_gflops"] or roof["datasheet_gflops"]
    for r in ladder(tile)[:2]:  # the two rungs the roof bounds below the compute peak
        bound = [min(peak, intensity(r, n) * bw) for n in sizes]
        charts.line(fig, sizes, bound, f"model bound, {r.label}: FLOP/byte × {bw:.0f} GB/s",
                    _style_index(r.label, r.kind), dash="dot", opacity=0.6)
    if data is not None:
        data = data[data.n.isin(sizes) & data.rung.isin(labels)]
    published = data is None or data.empty  # no GPU, no recording: SGEMM_CUDA's published ladder instead
    if published:
        cited.sgemm_ladder(fig)
    else:
        for label in labels:
            part = data[data.rung == label].sort_values("n")
            if len(part):
                kind = part.kind.iloc[0]
                charts.line(fig, part.n, part.gflops, label, _style_index(label, kind),
                            customdata=part.get("fraction_of_library"),
                            hovertemplate="N=%{x}: %{y:.0f} GFLOP/s (%{customdata:.0%} of cuBLAS)")
    fig.update_xaxes(type="log", dtick=math.log10(2))
    fig.update_yaxes(type="log")
    fig = _fit_bottom(fig)
    if published:
        note = cited.SGEMM_NOTE.format(share=cited.sgemm_tiling_share())
        cited.cite(fig, f"Dotted: the model's bounds (traffic × {bw:.0f} GB/s). Markers: published at N = "
                        f"{cited.SGEMM_N}. {note}", cited.SGEMM)
    return fig


def fraction_figure(max_n: int = 4096) -> go.Figure:
    """Each rung's fraction of cuBLAS at the same N (measured on a GPU, else recorded)."""
    max_n = validate.integer("largest N", max_n, minimum=MATMUL_SIZES[0], maximum=MATMUL_SIZES[-1])
    sizes = [n for n in MATMUL_SIZES if n <= max_n]
    data, source = _matmul_data()
    if runtime.is_gpu():
        data = measure_matmul_ladder(sizes)
    fig = charts.figure("Fraction of the library (cuBLAS fp32) each rung reaches", "matrix size N (N×N×N)",
                        "fraction of cuBLAS GFLOP/s", source)
    published = data is None or data.empty  # no GPU, no recording: SGEMM_CUDA's published ladder instead
    if published:
        cited.sgemm_ladder(fig, fraction=True, rungs=cited.SGEMM_RUNGS[:-1])
        charts.hline(fig, 1.0, "cuBLAS", faint=True)
    else:
        data = data[data.n.isin(sizes) & (data.kind != "cuBLAS")]
        for i, label in enumerate(dict.fromkeys(data.rung)):
            part = data[data.rung == label].sort_values("n")
            charts.line(fig, part.n, part.fraction_of_library, label, i)
        charts.hline(fig, 1.0, "cuBLAS", faint=True)
    fig.update_xaxes(type="log", dtick=math.log10(2))
    fig.update_yaxes(tickformat=".0%", rangemode="tozero")
    fig = _fit_bottom(fig)
    if published:
        note = cited.SGEMM_NOTE.format(share=cited.sgemm_tiling_share())
        cited.cite(fig, f"Markers: published at N = {cited.SGEMM_N}. {note}", cited.SGEMM)
    return fig


def roofline_figure(tile: int = 16, n: int = 4096) -> go.Figure:
    """Each rung at its counted FLOP/byte, under the roof min(peak, intensity × bandwidth)."""
    tile = check_tile(tile)
    n = validate.integer("n", n, minimum=MATMUL_SIZES[0], maximum=MATMUL_SIZES[-1])
    roof = ceilings_for_roofline()
    data, source = _matmul_data()
    if runtime.is_gpu():
        data = measure_matmul_ladder([n], ladder(tile))
    measured_kind = "measured" if runtime.is_gpu() else ("recorded" if data is not None else None)
    roof_kind = "measured" if runtime.is_gpu() else "recorded"
    if measured_kind is None:
        where = (f"ceilings recorded on {roof['device']}" if roof["copy_gbps"]
                 else f"NVIDIA {REFERENCE_GPU} SXM datasheet")
        source = (f"Model: roof = {where}; rungs at their counted FLOP/byte, drawn at the roof's bound "
                  "(no GPU, no recording yet)")
    fig = charts.figure(f"Roofline: the matmul ladder at N = {n} (fp32, tile {tile})",
                        "arithmetic intensity (FLOP per byte requested from global memory, log)",
                        "throughput (GFLOP/s, log)", source)
    x = np.logspace(-1.5, 3.5, 200)
    lines = []
    if roof["copy_gbps"] and roof["library_gflops"]:
        name = (f"{roof_kind} roof: copy {roof['copy_gbps']:.0f} GB/s, cuBLAS fp32 "
                f"{roof['library_gflops'] / 1e3:.1f} TFLOP/s")
        lines.append((name, roof["copy_gbps"], roof["library_gflops"], 7, "solid"))
    if roof["datasheet_gbps"] and roof["datasheet_gflops"]:
        name = (f"datasheet roof ({roof['device'] if runtime.is_gpu() else 'NVIDIA ' + REFERENCE_GPU}): "
                f"{roof['datasheet_gbps']:.0f} GB/s, fp32 {roof['datasheet_gflops'] / 1e3:.0f} TFLOP/s")
        lines.append((name, roof["datasheet_gbps"], roof["datasheet_gflops"], 5, "dot"))
    for name, gbps, gflops, index, dash in lines:
        charts.line(fig, x, np.minimum(gflops, x * gbps), name, index, dash=dash, mode="lines")
    bw, peak = (lines[0][1], lines[0][2]) if lines else (None, None)
    for i, r in enumerate(ladder(tile)):
        ai = intensity(r, n)
        style = _style_index(r.label, r.kind)
        position = "top center" if i % 2 else "bottom center"
        if data is not None and measured_kind:
            row = data[(data.rung == r.label) & (data.n == n)]
            if not len(row):
                continue
            y, symbol, kind = float(row.gflops.iloc[0]), charts.MARKERS[style % 8], measured_kind
        elif bw:
            y, symbol, kind = min(peak, ai * bw), charts.MARKERS[style % 8] + "-open", "bound, not measured"
        else:
            continue
        fig.add_scatter(x=[ai], y=[y], name=f"{r.label} ({kind})", mode="markers+text", showlegend=False,
                        text=[f"{r.label}<br>{ai:.2f} FLOP/B"], textposition=position, textfont={"size": 11},
                        hovertemplate=f"{r.label}: %{{x:.2f}} FLOP/B, %{{y:.0f}} GFLOP/s ({kind})"
                                      "<extra></extra>",
                        marker={"size": 12, "symbol": symbol, "color": charts.PALETTE[style % 8],
                                "line": {"width": 2, "color": charts.PALETTE[style % 8]}})
    fig.update_xaxes(type="log")
    tops = [g for _, _, g, _, _ in lines]
    if data is not None and len(data):
        tops.append(float(data.gflops.max()))
    top = max(tops, default=1e5)
    fig.update_yaxes(type="log", range=[2, math.log10(top) + 0.6])  # headroom for the labels
    fig = _fit_bottom(fig)
    return cited.because(fig, "tiling roofline") if measured_kind is None else fig


# --- the picture ---------------------------------------------------------------------------------


def tiling_picture(tile: int = 4, n: int = 12, step: int = 1) -> go.Figure:
    """C = A·B drawn as grids: one block's output tile, its strips of A and B, and step ``step``'s tiles."""
    tile = validate.integer("tile", tile, minimum=1, maximum=32)
    n = validate.integer("n", n, minimum=tile, maximum=64)
    steps = -(-n // tile)
    step = validate.integer("step", step, minimum=0, maximum=steps - 1)
    gap = max(1.5, n / 6)
    fig = go.Figure()
    fig.update_layout(
        title={"text": f"Tiled matmul, tile {tile}: the block that owns the orange tile of C, at step "
                       f"{step + 1} of {steps}", "x": 0.02},
        template="plotly_white", height=560, showlegend=False, margin={"l": 10, "r": 10, "t": 50, "b": 70})
    charts.set_source(fig, charts.source_caption("model", "a drawing of shared-memory tiling (CUDA C++ Programming "
                                                          "Guide, shared memory matrix multiplication)"))
    origin = {"A": (0, n + gap), "B": (n + gap, 0), "C": (n + gap, n + gap)}
    by = bx = min(1, steps - 1)  # the highlighted block: second row and column of tiles when there is one

    def rect(name, r0, c0, rows, cols, colour, opacity, width=1):
        x0, y0 = origin[name]
        fig.add_shape(type="rect", x0=x0 + c0, y0=y0 + r0, x1=x0 + c0 + cols, y1=y0 + r0 + rows,
                      line={"color": "#000", "width": width}, fillcolor=colour, opacity=opacity)

    for name, (x0, y0) in origin.items():
        rect(name, 0, 0, n, n, "#ffffff", 1.0, 2)
        for i in range(tile, n, tile):
            grid_line = {"color": "#bbb", "width": 1}
            fig.add_shape(type="line", x0=x0 + i, y0=y0, x1=x0 + i, y1=y0 + n, line=grid_line)
            fig.add_shape(type="line", x0=x0, y0=y0 + i, x1=x0 + n, y1=y0 + i, line=grid_line)
    rows_here = min(tile, n - by * tile)
    cols_here = min(tile, n - bx * tile)
    depth_here = min(tile, n - step * tile)
    rect("A", by * tile, 0, rows_here, n, charts.PALETTE[5], 0.35)  # the strip of A this block reads
    rect("B", 0, bx * tile, n, cols_here, charts.PALETTE[5], 0.35)
    rect("A", by * tile, step * tile, rows_here, depth_here, charts.PALETTE[0], 0.85, 2)  # this step's tiles
    rect("B", step * tile, bx * tile, depth_here, cols_here, charts.PALETTE[0], 0.85, 2)
    rect("C", by * tile, bx * tile, rows_here, cols_here, charts.PALETTE[1], 0.9, 2)
    notes = {"A": "A (m×k): the block's row strip", "B": "B (k×n): the block's column strip",
             "C": "C = A·B: the block's output tile"}
    for name, (x0, y0) in origin.items():
        fig.add_annotation(x=x0 + n / 2, y=y0 - 0.3, text=f"<b>{notes[name]}</b>", showarrow=False,
                           yanchor="bottom", font={"size": 12})
    fig.add_annotation(
        x=n / 2, y=n / 2, showarrow=False, font={"size": 12}, align="left",
        text=(f"each step: load one {tile}×{tile} tile of A and one of B<br>into shared memory "
              f"(dark blue), syncthreads,<br>then each thread does {tile} multiply-adds<br>from them, "
              f"syncthreads, next step.<br>Each element fetched is used {tile} times."))
    fig.update_xaxes(visible=False, range=[-0.5, 2 * n + gap + 0.5])
    fig.update_yaxes(visible=False, range=[2 * n + gap + 0.5, -2], scaleanchor="x")
    return fig


def barrier_figure(case: str = "no barrier after the load", seed: int = 0, n: int = 16,
                   tile: int = 8) -> go.Figure:
    """Which outputs come out wrong without a barrier (counted under the microscope's random schedule)."""
    result = barrier_experiment(case, n, tile, seed=seed)
    fig = charts.figure(f"Tiled matmul, {case}: {result.wrong_outputs} of {n * n} outputs wrong, "
                        f"{result.race_count} racing pairs", "output column", "output row",
                        charts.source_caption("counted", f"N = {n}, tile {tile}, random interleaving, "
                                              f"seed {seed}; ✗ (orange) = wrong output"), height=460)
    error = np.abs(result.c - result.reference)
    # Text, not numbers: a NaN (a read of a never-written shared word) cannot travel as JSON.
    error_text = np.where(np.isfinite(error), np.char.mod("%.3g", np.nan_to_num(error)),
                          "NaN (never written)")
    fig.add_heatmap(z=result.wrong.astype(int), colorscale=[[0, "#56B4E9"], [1, "#D55E00"]], zmin=0, zmax=1,
                    showscale=False, xgap=1, ygap=1, name="wrong (1) / right (0)", customdata=error_text,
                    text=np.where(result.wrong, "✗", ""), texttemplate="%{text}",  # not colour alone
                    hovertemplate="C[%{y}, %{x}]: error %{customdata}<extra></extra>")
    for edge in range(0, n + 1, tile):
        fig.add_vline(x=edge - 0.5, line_color="#000", line_width=1)
        fig.add_hline(y=edge - 0.5, line_color="#000", line_width=1)
    fig.update_yaxes(autorange="reversed")
    return _fit_bottom(fig)


def bank_picture(tile: int = 32, pad: int = 0, access: str = "column",
                 block_rows: int | None = None, dtype: str = "float32") -> go.Figure:
    """One warp's lanes placed in the 32 banks; a column of k lanes in one bank = a k-way conflict.

    For float64 each lane's element spans two banks (two squares with its number), and the warp is
    served in two phases of 16 lanes (128 bytes each): squares are stacked per phase, and the
    conflict ways are those of the worse phase."""
    block_rows = default_block_rows(tile) if block_rows is None else block_rows
    itemsize = _element_bytes(dtype)
    words = transpose_warp_words(tile, pad, block_rows, access)
    lanes, addresses = [x[0] for x in words], [x[3] * itemsize for x in words]
    ways = warp_bank_ways(lanes, addresses, itemsize)
    per_phase = WARP_SIZE if itemsize <= 4 else WARP_SIZE * 4 // itemsize
    what = "reads a column" if access == "column" else "writes a row"
    verdict = "no conflict" if ways == 1 else f"{ways}-way conflict: {ways} passes"
    phases = "" if per_phase == WARP_SIZE else f" (served in phases of {per_phase} lanes)"
    fig = charts.figure(
        f"Warp 0 {what} of a {tile}×{tile + pad} {dtype} tile{phases} → {verdict}", "bank (4-byte word index mod 32)",
        "pass (distinct words queued in the bank, per phase)",
        charts.source_caption("model", "32 banks × 4 bytes; lanes reading one word share it (broadcast); "
                                       "8-byte elements in half-warp phases"),
        height=470)
    seen: dict[tuple, list[int]] = {}
    series: dict[int, tuple] = {}
    for lane, r, c, element in words:
        phase = lane // per_phase
        xs, ys, text, hover = series.setdefault(phase, ([], [], [], []))
        first_word = element * itemsize // 4
        for w in range(first_word, first_word + max(1, itemsize // 4)):
            queue = seen.setdefault((phase, bank_of(w)), [])
            if w not in queue:
                queue.append(w)
            xs.append(bank_of(w))
            ys.append(queue.index(w) + 1)
            text.append(str(lane))
            hover.append(f"lane {lane} (phase {phase + 1}): tile[{r}][{c}] = word {w}, bank {bank_of(w)}")
    for phase, (xs, ys, text, hover) in series.items():
        name = "lane (number) in its bank" if len(series) == 1 else (
            f"lanes {phase * per_phase}–{(phase + 1) * per_phase - 1} (phase {phase + 1})")
        # later phases are drawn slightly to the right so both phases of a bank stay readable
        offset = 0.0 if len(series) == 1 else (phase - (len(series) - 1) / 2) * 0.35
        fig.add_scatter(x=[x + offset for x in xs], y=ys, mode="markers+text", text=text, hovertext=hover,
                        hoverinfo="text", name=name, textfont={"size": 9 if len(series) > 1 else 10, "color": "#000"},
                        marker={"symbol": charts.MARKERS[1 + 1 * phase % 2], "size": 20 if len(series) == 1 else 13,
                                "color": charts.PALETTE[5 + phase % 2] if len(series) > 1 else charts.PALETTE[5],
                                "line": {"color": "#000", "width": 1}})
    fig.update_xaxes(range=[-0.7, BANKS - 0.3], dtick=1, tickfont={"size": 9})
    fig.update_yaxes(range=[0.3, max(ways, 4) + 0.7], dtick=1 if ways <= 16 else 4)
    return _fit_bottom(fig)


def transpose_figure(tile: int = 32, pad: int = 0, n: int = 4096) -> go.Figure:
    """Left: GB/s per rung (measured or recorded) against the copy; right: the microscope's bank ways."""
    from plotly.subplots import make_subplots

    block_rows = default_block_rows(tile)
    tile, block_rows, pad = check_transpose_shape(tile, block_rows, pad)
    n = validate.integer("n", n, minimum=TRANSPOSE_SIZES[0], maximum=TRANSPOSE_SIZES[-1])
    data, source = _transpose_data(n, tile, pad)
    counts = transpose_counts(tile, pad)
    shared_label = "shared" if pad == 0 else f"shared+pad {pad}"
    ways = int(counts.loc[counts.variant == shared_label, "shared max ways"].iloc[0])
    fig = make_subplots(rows=1, cols=2, column_widths=[0.6, 0.4], horizontal_spacing=0.12, subplot_titles=(
        f"bandwidth at N = {n} (GB/s, read + write)", "shared-memory bank ways"))
    fig.update_layout(
        title={"text": f"Transpose ladder, {tile}×{tile + pad} tile: the shared tile's column read is "
                       f"{'conflict-free' if ways == 1 else f'a {ways}-way bank conflict'}", "x": 0.02},
        template="plotly_white", colorway=charts.PALETTE, height=440, font={"size": 13},
        margin={"l": 70, "r": 20, "t": 80, "b": 95}, legend={"orientation": "h", "y": -0.28, "x": 0})
    shared_variant = "shared" if pad == 0 else "shared+pad"
    if data is not None and len(data):
        picked = data[data.variant.isin(["copy", "naive", shared_variant])
                      & ((data.variant != "shared+pad") | (data.pad == pad))]
        labels = [v if v != "shared+pad" else shared_label for v in picked.variant]
        kind = "measured" if runtime.is_gpu() else "recorded"
        fig.add_bar(x=labels, y=list(picked.gbps), name=f"bandwidth ({kind})", row=1, col=1,
                    marker={"color": charts.PALETTE[0], "pattern": {"shape": "/"}},
                    text=[f"{v:.0f}" for v in picked.gbps], textposition="outside")
        copy = picked.loc[picked.variant == "copy", "gbps"]
        if len(copy):
            fig.add_hline(y=float(copy.iloc[0]), line_dash="dash", line_color="#000", row=1, col=1,
                          annotation_text="copy", annotation_position="top right")
    else:
        fig.add_bar(x=["copy", "naive", shared_label], y=[0, 0, 0], name="bandwidth (no data)", row=1, col=1,
                    marker={"color": "#ccc"})
        fig.add_annotation(text="no GPU timing here", showarrow=False, xref="x domain", yref="y domain",
                           x=0.5, y=0.5, font={"size": 14, "color": "#444"})
    fig.add_bar(x=list(counts.variant), y=list(counts["shared max ways"]), name="max bank ways (counted)",
                row=1, col=2, marker={"color": charts.PALETTE[3], "pattern": {"shape": "x"}},
                text=[str(v) if v else "none" for v in counts["shared max ways"]], textposition="outside")
    fig.update_yaxes(title_text="bandwidth (GB/s)", row=1, col=1, rangemode="tozero")
    fig.update_yaxes(title_text="bank ways (1 = conflict-free)", row=1, col=2, range=[0, 36])
    fig.update_xaxes(title_text="rung", row=1, col=1)
    fig.update_xaxes(title_text="rung (no shared memory: none)", row=1, col=2)
    charts.set_source(fig, f"Bandwidth: {source}. Bank ways: counted by the microscope (exact), "
                           f"N = {counts.attrs['n']}")
    fig = _fit_bottom(fig)
    return fig if data is not None and len(data) else cited.because(fig, "transpose")


# --- widget builders ------------------------------------------------------------------------------


def matmul_explorer(*, threaded: bool = True):
    import ipywidgets as w

    from gpucourse.viz.widgets import LiveChart

    return LiveChart({
        "tile": w.Dropdown(options=list(TILES), value=16, description="tile"),
        "max_n": w.SelectionSlider(options=list(MATMUL_SIZES), value=MATMUL_SIZES[-1], description="up to N"),
    }, compute=gflops_figure, threaded=threaded,
        description="Matmul ladder: GFLOP/s vs N for each rung (fp32).")


def transpose_explorer(*, threaded: bool = True):
    import ipywidgets as w

    from gpucourse.viz.widgets import LiveChart

    return LiveChart({
        "tile": w.Dropdown(options=list(TILES), value=32, description="tile"),
        "pad": w.ToggleButtons(options=[("no padding", 0), ("pad +1", 1)], value=0, description="padding"),
    }, compute=transpose_figure, threaded=threaded,
        description="Transpose ladder: bandwidth (left) and bank ways (right).")


def bank_explorer(*, threaded: bool = True):
    import ipywidgets as w

    from gpucourse.viz.widgets import LiveChart

    return LiveChart({
        "tile": w.IntSlider(value=32, min=4, max=32, step=4, description="tile"),
        "pad": w.IntSlider(value=0, min=0, max=4, description="padding"),
        "access": w.ToggleButtons(options=[("read a column", "column"), ("write a row", "row")],
                                  value="column", description="access"),
        "dtype": w.ToggleButtons(options=[("float32 (4 bytes)", "float32"), ("float64 (8 bytes)", "float64")],
                                 value="float32", description="element"),
    }, compute=bank_picture, threaded=threaded,
        description="Banks under one warp of the shared-memory transpose.")


def barrier_explorer(*, threaded: bool = True):
    import ipywidgets as w

    from gpucourse.viz.widgets import LiveChart

    return LiveChart({
        "case": w.Dropdown(options=list(BARRIER_CASES), value="no barrier after the load",
                           description="kernel"),
        "seed": w.IntSlider(value=0, min=0, max=9, description="seed"),
    }, compute=barrier_figure, threaded=threaded,
        description="The tiled matmul under the microscope's random interleaving.")
