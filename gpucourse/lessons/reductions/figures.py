"""Lesson 04a's pictures, charts and widgets. Every chart says where its numbers came from."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from gpucourse import validate
from gpucourse.errors import InvalidConfig
from gpucourse.lessons.reductions import experiments, kernels, model
from gpucourse.measure import runtime
from gpucourse.viz import charts, cited

_LAYOUT = {"template": "plotly_white", "colorway": charts.PALETTE, "font": {"size": 13}}
_LEGEND_ROW_PX = 22  # one row of a horizontal legend


def _room_below(fig: go.Figure, tick_labels_px: int) -> go.Figure:
    """Below the plots, stacked: the x tick labels (``tick_labels_px`` tall: more for rotated labels), the
    x-axis title if there is one, then the caption; the bottom margin fits them all."""
    titled = any(getattr(fig.layout[key].title, "text", None) for key in fig.layout if key.startswith("xaxis"))
    below = tick_labels_px + (24 if titled else 0)
    captions = [a for a in fig.layout.annotations if a.name == "source"]
    lines = max(1, sum(a.text.count("<br>") + 1 for a in captions))
    for annotation in captions:
        annotation.yshift = -(below + 10)
    fig.update_layout(margin={"b": below + 10 + 16 * lines + 14})
    return fig


def _layout(fig: go.Figure, title: str, height: int = 460, *, tick_labels_px: int = 30,
            legend_rows: int = 2) -> go.Figure:
    """Title, then the legend, then the plots (with their subplot titles), then what ``_room_below`` stacks:
    no two of them overlap at any width (the legend used to sit below the plots, where the caption is)."""
    fig.update_layout(
        title={"text": title, "x": 0.02, "xanchor": "left", "yref": "container", "y": 1 - 12 / height,
               "yanchor": "top"},
        height=height, margin={"l": 80, "r": 24, "t": 44 + _LEGEND_ROW_PX * legend_rows + 34},
        legend={"orientation": "h", "yref": "container", "y": 1 - 44 / height, "yanchor": "top", "x": 0},
        **_LAYOUT)
    return _room_below(fig, tick_labels_px)


def _set_source(fig: go.Figure, source: str, title: str, height: int, *, tick_labels_px: int = 30,
                legend_rows: int = 2) -> go.Figure:
    """The caption first (its line count sets the bottom margin), then the layout around it."""
    charts.set_source(fig, source)
    return _layout(fig, title, height, tick_labels_px=tick_labels_px, legend_rows=legend_rows)


# --- the picture: two trees over 16 slots --------------------------------------------------------------------


def tree_picture(block: int = 16, warp_lanes: int = 4) -> go.Figure:
    """Interleaved (left) and sequential (right) addressing of a tree over ``block`` shared slots.

    Each row is a step; an arrow joins the two slots one thread adds; squares mark the slots written.
    Threads are grouped in "warps" of ``warp_lanes`` (4 here, so that 16 slots show 4 warps): the
    shaded bands count the warps that must issue the step."""
    block = validate.integer("block", block, minimum=4, maximum=32)
    if block & (block - 1):
        raise InvalidConfig(f"block must be a power of two from 4 to 32; got {block}")
    steps = block.bit_length() - 1
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.08, subplot_titles=(
        "interleaved: thread tid adds if tid % (2s) == 0", "sequential: thread tid adds if tid < s"))
    for col, variant in ((1, "interleaved"), (2, "sequential")):
        strides = [1 << k for k in range(steps)]
        if variant == "sequential":
            strides = strides[::-1]
        for row, s in enumerate(strides, start=1):
            if variant == "interleaved":
                adders = [(t, t, t + s) for t in range(0, block, 2 * s)]
            else:
                adders = [(t, t, t + s) for t in range(s)]
            warps = sorted({t // warp_lanes for t, _, _ in adders})
            for w in warps:  # a band per warp that has to issue this step
                fig.add_shape(type="rect", x0=w * warp_lanes - 0.45, x1=(w + 1) * warp_lanes - 0.55, y0=row - 0.42,
                              y1=row + 0.42, fillcolor="#e8e8e8", line={"width": 0}, layer="below", row=1, col=col)
            for _, dst, src in adders:
                fig.add_annotation(x=dst, y=row + 0.3, ax=src, ay=row - 0.3, xref=f"x{col}", yref=f"y{col}",
                                   axref=f"x{col}", ayref=f"y{col}", showarrow=True, arrowhead=2, arrowsize=1,
                                   arrowwidth=1.2, arrowcolor=charts.PALETTE[0])
            fig.add_scatter(x=[d for _, d, _ in adders], y=[row + 0.3] * len(adders), mode="markers",
                            marker={"symbol": "square", "size": 9, "color": charts.PALETTE[1]},
                            name="slot written (an add)", showlegend=(row == 1 and col == 1),
                            hovertext=[f"step {row}, s = {s}: slot {d} += slot {src}" for _, d, src in adders],
                            hoverinfo="text", row=1, col=col)
            fig.add_annotation(text=f"{len(warps)} warp{'s' if len(warps) > 1 else ''}", x=block - 0.5, y=row,
                               xref=f"x{col}", yref=f"y{col}", showarrow=False, xanchor="left",
                               font={"size": 11, "color": "#444"})
        fig.update_xaxes(range=[-0.8, block + 2.2], dtick=warp_lanes, title_text="shared slot (= thread index)",
                         row=1, col=col)
        fig.update_yaxes(autorange="reversed", dtick=1, title_text="step (index)", row=1, col=col)
    fig.add_scatter(x=[None], y=[None], mode="markers",
                    marker={"symbol": "square-open", "color": "#999", "size": 12, "line": {"width": 6}},
                    name=f"a warp ({warp_lanes} lanes drawn) that issues the step")
    return _set_source(fig, charts.source_caption("model", f"the kernels' index arithmetic, {warp_lanes}-lane warps "
                                                                "drawn so that the picture fits (real warps have 32)"),
                       f"A tree over {block} slots: the same {block - 1} adds, different threads doing them", 520,
                       tick_labels_px=50)


# --- the model ------------------------------------------------------------------------------------------------


def model_figure() -> go.Figure:
    """Left: warp issues of the tree's adds, interleaved vs sequential; right: scan work, serial vs trees."""
    table = model.model_table()
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12, subplot_titles=(
        "tree reduction: warp issues of the add (idle lanes dashed)", "block scan: adds (work) and steps"))
    for i, v in enumerate(("interleaved", "sequential")):
        fig.add_scatter(x=table.block, y=table[f"{v} add issues"], name=f"{v}: warp issues", mode="lines+markers",
                        line={"color": charts.PALETTE[i]}, marker={"symbol": charts.MARKERS[i]}, row=1, col=1)
        fig.add_scatter(x=table.block, y=table[f"{v} idle lanes"], name=f"{v}: idle lanes", mode="lines+markers",
                        line={"color": charts.PALETTE[i], "dash": "dash"}, marker={"symbol": charts.MARKERS[i]},
                        row=1, col=1)
    for i, (name, column) in enumerate((("serial scan adds", None), ("Hillis-Steele adds", "Hillis-Steele adds"),
                                        ("Blelloch adds", "Blelloch adds")), start=2):
        y = [model.serial_scan_adds(b) for b in table.block] if column is None else table[column]
        fig.add_scatter(x=table.block, y=y, name=name, mode="lines+markers", line={"color": charts.PALETTE[i]},
                        marker={"symbol": charts.MARKERS[i]}, row=1, col=2)
    for i, column in ((3, "Hillis-Steele steps"), (4, "Blelloch steps")):
        fig.add_scatter(x=table.block, y=table[column], name=column, mode="lines+markers",
                        line={"color": charts.PALETTE[i], "dash": "dot"}, marker={"symbol": charts.MARKERS[i]},
                        row=1, col=2)
    for col in (1, 2):
        fig.update_xaxes(type="log", tickvals=list(table.block), title_text="block size (threads)", row=1, col=col)
        fig.update_yaxes(type="log", row=1, col=col)
    fig.update_yaxes(title_text="count per block (log)", row=1, col=1)
    fig.update_yaxes(title_text="adds or steps per block (log)", row=1, col=2)
    return _set_source(fig, charts.source_caption("model", "gpucourse.lessons.reductions.model, 32-lane warps"),
                       "What the model counts per block: the same adds, very different warp issues and steps", 580,
                       tick_labels_px=50, legend_rows=4)


# --- the microscope's counts ----------------------------------------------------------------------------------


def counts_figure(n: int = 1000, block: int = 256) -> go.Figure:
    """Three panels per rung: warp issues of the adds (active vs idle lanes), bank ways, load sectors."""
    table = experiments.counts_table(n, block)
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.13, subplot_titles=(
        "lanes in the add's warp issues", "max bank-conflict ways", "warp line issues (all lines)"))
    active = table["add issues"] * table["active lanes per add issue"]
    fig.add_bar(x=table.variant, y=active, name="active lanes (adding)", marker={"color": charts.PALETTE[0]},
                row=1, col=1)
    fig.add_bar(x=table.variant, y=table["idle lanes in adds"], name="idle lanes (riding along)",
                marker={"color": charts.PALETTE[1], "pattern": {"shape": "/"}}, row=1, col=1)
    fig.add_bar(x=table.variant, y=table["max bank ways"], name="max bank ways (1 = conflict-free)",
                marker={"color": charts.PALETTE[3], "pattern": {"shape": "x"}}, text=table["max bank ways"],
                textposition="outside", row=1, col=2)
    fig.add_bar(x=table.variant, y=table["warp line issues"], name="warp line issues",
                marker={"color": charts.PALETTE[5], "pattern": {"shape": "."}}, text=table["warp line issues"],
                textposition="outside", row=1, col=3)
    fig.update_layout(barmode="stack")
    fig.update_yaxes(title_text="lanes", row=1, col=1)
    fig.update_yaxes(range=[0, max(4, int(table["max bank ways"].max()) + 2)], title_text="bank ways (1 = none)",
                     row=1, col=2)
    fig.update_yaxes(range=[0, 1.2 * float(table["warp line issues"].max())], title_text="warp line issues (count)",
                     row=1, col=3)
    fig.update_xaxes(tickangle=-35)
    return _set_source(fig, charts.source_caption("counted", f"first pass, n = {n}, {block}-thread blocks; no timing"),
                       f"The ladder under the microscope: n = {n}, {block}-thread blocks, first pass", 580,
                       tick_labels_px=80)


def _step_counts(report, variant: str):
    """(step labels, active lanes, idle lanes) of the add line, all blocks, from the microscope's report."""
    if variant in ("warp shuffle", "atomic"):
        branches = report.branches()
        shuffles = branches[branches.source.str.contains("shfl_down_sync", regex=False)]
        labels, active, idle = [], [], []
        for _line, part in shuffles.groupby("line", sort=True):
            issues = int(part.issues.sum())
            lanes = int(round(float((part.issues * part.active_lanes_mean).sum())))
            labels.append("warp sums" if not labels else "sum of the warps' sums")
            active.append(lanes)
            idle.append(32 * issues - lanes)
        return labels, active, idle
    requests = report.requests("shared")
    source = experiments.ADD_LINES[variant]
    adds = requests[(requests.op == "store") & requests.source.str.contains(source, regex=False)]
    per_step = adds.groupby("occurrence").lanes.agg(["sum", "count"])
    labels = [f"step {k + 1}" for k in per_step.index]
    return labels, list(per_step["sum"]), list(32 * per_step["count"] - per_step["sum"])


def variant_figure(variant: str = "interleaved", n: int = 1000, block: int = 256) -> go.Figure:
    """One rung re-run under the microscope: active and idle lanes of its add, step by step."""
    variant = experiments.check_variant(variant)
    report, correct = experiments.trace_reduction(variant, n, block)
    counts = experiments.reduction_counts(variant, n, block)
    labels, active, idle = _step_counts(report, variant)
    fig = charts.figure(
        f"{variant}, n = {n}, {block}-thread blocks: {counts['add issues']} warp issues of the add, "
        f"max {counts['max bank ways']}-way banks, {'correct' if correct else 'WRONG'} sum",
        "step of the tree (first pass, all blocks)", "lanes in the add's warp issues",
        charts.source_caption("counted", f"the microscope ran {counts['blocks']} block(s) just now; no timing"),
        height=460)
    fig.add_bar(x=labels, y=active, name="active lanes (adding)", marker={"color": charts.PALETTE[0]})
    fig.add_bar(x=labels, y=idle, name="idle lanes (in a warp that issues the add)",
                marker={"color": charts.PALETTE[1], "pattern": {"shape": "/"}})
    fig.update_layout(barmode="stack")
    return _room_below(fig, 30)


def reduction_explorer(*, threaded: bool = True):
    import ipywidgets as w

    from gpucourse.viz.widgets import LiveChart

    return LiveChart({
        "variant": w.Dropdown(options=list(kernels.REDUCTIONS), value="interleaved", description="variant"),
        "n": w.SelectionSlider(options=[33, 200, 1000, 1500, 2049], value=1000, description="n"),
        "block": w.Dropdown(options=[32, 64, 128, 256, 512], value=256, description="block"),
    }, compute=variant_figure, threaded=threaded,
        description="A reduction rung under the microscope: active and idle lanes of its add, step by step.")


def scan_figure(block: int = 64) -> go.Figure:
    """Hillis–Steele against Blelloch: adds per block (counted and model) and barriers per warp."""
    table = experiments.scan_counts(block)
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.14, subplot_titles=(
        "adds per block (work)", "barriers each warp crosses (steps + 1)"))
    fig.add_bar(x=table.scan, y=table["adds per block (counted)"], name="adds, counted by the microscope",
                marker={"color": charts.PALETTE[0]}, text=[f"{v:.0f}" for v in table["adds per block (counted)"]],
                textposition="outside", row=1, col=1)
    fig.add_scatter(x=table.scan, y=table["adds per block (model)"], name="adds, model", mode="markers",
                    marker={"symbol": "line-ew", "size": 40, "line": {"width": 3, "color": "#000"}}, row=1, col=1)
    fig.add_bar(x=table.scan, y=table["barriers per warp"], name="barriers, counted",
                marker={"color": charts.PALETTE[2], "pattern": {"shape": "/"}},
                text=[f"{v:.0f}" for v in table["barriers per warp"]], textposition="outside", row=1, col=2)
    fig.update_yaxes(range=[0, 1.25 * float(table["adds per block (counted)"].max())], title_text="adds per block",
                     row=1, col=1)
    fig.update_yaxes(range=[0, 1.3 * float(table["barriers per warp"].max())], title_text="barriers per warp",
                     row=1, col=2)
    return _set_source(fig, charts.source_caption("counted", f"the microscope, one block of {block}; "
                                                                  "model: gpucourse.lessons.reductions.model"),
                       f"Block scans of {block} elements: Hillis–Steele takes fewer steps, Blelloch less work", 500)


# --- the ladder with the library ceiling ----------------------------------------------------------------------


def _in_flight_bound(variants):
    """The model's upper bound per kernel rung shown (a Series by variant), or None where no GPU facts exist."""
    from gpucourse.errors import NoGPU

    try:
        table = experiments.in_flight_model().set_index("variant")
    except NoGPU:
        return None
    return table.loc[[v for v in variants if v in table.index], "Little's law bound (GB/s)"]


def ladder_figure(n: int = experiments.LADDER_N) -> go.Figure:
    """GB/s of every rung next to CuPy's and torch's sums, measured in one run on a GPU (or recorded);
    without either, the microscope's warp line issues per element, and the chart says so."""
    data, source = experiments.ladder_data(n) if runtime.is_gpu() or n in experiments.SWEEP_SIZES else (None, "")
    if data is not None:
        kind = "measured" if runtime.is_gpu() else "recorded"
        shown = int(data.n.iloc[0])
        bound = _in_flight_bound(list(data.variant))
        missing = [v for v in kernels.REDUCTIONS if v not in set(data.variant)]
        unrecorded = _in_flight_bound(missing) if missing else None
        if bound is not None:
            source += (". Black ticks: the upper bound of Little’s law (model: reads in flight ÷ the loaded latency "
                       "calibrated on lesson 03’s one-element copy, gpucourse.measure.calibration)")
        if unrecorded is not None and len(unrecorded):
            source += (f". The hollow diamond ({', '.join(unrecorded.index)}) is that bound only: the model, "
                       "never measured in this recording")
        fig = charts.figure(f"Summing {shown:,} float32 values: our ladder against the libraries", "kernel or library",
                            "bandwidth (GB/s, 4 bytes read per element)", charts.source_caption(kind, source),
                            height=560)  # the axis title's length: a shorter plot lifts it into the title
        colours = [charts.PALETTE[0] if k == "kernel" else charts.PALETTE[6] for k in data.kind]
        fig.add_bar(x=list(data.variant), y=list(data.gbps), name=f"GB/s ({kind})", marker={"color": colours},
                    text=[f"{g:.0f}" for g in data.gbps], textposition="outside")
        if bound is not None:
            fig.add_scatter(x=list(bound.index), y=list(bound.values), mode="markers",
                            name="Little's law bound (model: loads in flight per thread)",
                            marker={"symbol": "line-ew", "size": 30, "line": {"width": 3, "color": "#000"}})
        if unrecorded is not None and len(unrecorded):
            fig.add_scatter(x=list(unrecorded.index), y=list(unrecorded.values), mode="markers+text",
                            name="model, no recording: Little's law bound of a rung not measured here",
                            text=["model only"] * len(unrecorded), textposition="top center",
                            marker={"symbol": "diamond-open", "size": 14, "line": {"width": 2, "color": "#000"}})
        best = data[data.kind == "library"].gbps.max()
        charts.hline(fig, float(best), "best library (the ceiling)")
        fig.update_xaxes(tickangle=-30)
        return _room_below(fig, 80)
    table = experiments.counts_table(1000, 256)
    per_element = table["warp line issues"] / table["n"]
    fig = charts.figure(
        "No GPU here: the microscope's counts instead of timings", "kernel",
        "warp line issues per element (first pass)",
        charts.source_caption("counted", f"{table.attrs['source']}. Executed source lines, not a speed ranking: "
                                         "what a rung keeps in flight decides its speed (Little's law). "
                                         f"{source or 'No GPU and no recording'}: CuPy's ReductionKernel, "
                                         "cupy.sum and torch.sum are measured only on a GPU"),
        height=560)
    fig.add_bar(x=list(table.variant), y=list(per_element), name="warp line issues per element (counted)",
                marker={"color": charts.PALETTE[5], "pattern": {"shape": "."}},
                text=[f"{v:.2f}" for v in per_element], textposition="outside")
    fig.update_xaxes(tickangle=-30)
    fig.update_yaxes(range=[0, 1.25 * float(per_element.max())])
    return _room_below(cited.because(fig, "reduction ladder"), 80)
