"""Lesson 02 "Warp divergence": charts and widgets."""

from __future__ import annotations

import html
import math

import numpy as np
import plotly.graph_objects as go

from gpucourse import validate
from gpucourse.errors import InvalidConfig
from gpucourse.hardware import WARP_SIZE
from gpucourse.lessons.divergence.experiments import (
    GPU_THREADS,
    PTX_CC,
    SPARSE_BODIES,
    SPARSE_DENSITIES,
    SWEEP_FRACTIONS,
    _evidence_results,
    _live_curve,
    measure_fraction_curve,
    measure_sort_pays,
    trace_two_paths,
)
from gpucourse.lessons.divergence.model import (
    BODY_COSTS,
    MICROSCOPE_BODY,
    MICROSCOPE_THREADS,
    MODEL_THREADS,
    PATH_B,
    PLACEMENTS,
    FlagTest,
    PtxResult,
    _recorded_curve,
    check_body,
    check_fraction,
    check_placement,
    flag_test,
    lane_flags,
    model_curves,
    model_relative_time,
    path_b_body,
    simt_table,
    warp_table,
)
from gpucourse.measure import harness, reference, runtime
from gpucourse.viz import charts, cited


class PtxView:
    """The PTX around the flag test, with the lines that matter marked (what the notebook shows)."""

    def __init__(self, result: PtxResult, context: int = 2, load: str = "ld.global.u8"):
        self.result = result
        self.test = flag_test(result.ptx, load) if result.available else FlagTest("not found")
        self.context = context

    def excerpt(self) -> list[tuple[int, str, bool]]:
        if not self.result.available or not self.test.lines:
            return []
        lines = self.result.ptx.splitlines()
        marked = {n for n, _ in self.test.lines}
        near = {k for n in marked for k in range(n - self.context, n + self.context + 1)}
        keep = sorted(k for k in near if 1 <= k <= len(lines))
        return [(k, lines[k - 1].strip(), k in marked) for k in keep]

    def _rows(self, mark_line) -> list[str]:
        rows, last = [], None
        for number, line, mark in self.excerpt():
            if last is not None and number > last + 1:
                rows.append("        …")
            rows.append(mark_line(number, line, mark))
            last = number
        return rows

    def text(self) -> str:
        if not self.result.available:
            return f"PTX of {self.result.name}: not available here — {self.result.reason}"
        head = f"PTX of {self.result.name} (cc {PTX_CC[0]}.{PTX_CC[1]}): {self.test.summary()}"
        rows = self._rows(lambda n, line, mark: f"{'►' if mark else ' '} {n:4d}  {line}")
        return "\n".join([head, *rows])

    __repr__ = text

    def _repr_html_(self) -> str:
        name = html.escape(self.result.name)
        if not self.result.available:
            return f"<p><b>PTX of {name}</b>: not available here — {html.escape(self.result.reason)}</p>"

        def mark_line(number, line, mark):
            text = f"{number:4d}  {html.escape(line)}"
            return f"<b style='background:#F0E442;color:#000'>► {text}</b>" if mark else f"  {text}"

        rows = "\n".join(self._rows(mark_line))
        return f"<p><b>PTX of {name}</b>: {html.escape(self.test.summary())}</p><pre>{rows}</pre>"


def show_ptx(kernel: str = "two_paths") -> PtxView:
    """The PTX of ``two_paths`` or ``predicated`` around its flag test, the deciding lines marked."""
    validate.choice("kernel", kernel, ("two_paths", "predicated"))
    real, trivial = _evidence_results()
    return PtxView(real if kernel == "two_paths" else trivial)


# --- figures -----------------------------------------------------------------------------------

_STATE_COLOURS = {0: "#DDDDDD", 1: charts.PALETTE[0], 2: charts.PALETTE[1]}


def _room_for_two_legend_rows(fig: go.Figure) -> go.Figure:
    """More room above the plot, where the course's layout puts the legend, for two rows of it."""
    fig.update_layout(height=(fig.layout.height or 420) + 40, margin={"t": 140})
    return fig


def _source_or_none(data, rec, missing: str, *, absent: str = "") -> str:
    """The caption: the recording, or why nothing is drawn (``absent``: what the recording lacks, where one exists)."""
    if data is not None:
        return charts.source_caption("recorded", rec.caption())
    if rec is not None and absent:
        return charts.source_caption("none", f"the course's recording ({rec.caption()}) has no {absent}; {missing}")
    return charts.source_caption(
        "none", f"no GPU here and no recording of this sweep yet (`make record` on a GPU makes one); "
                f"{missing}")


def warp_timeline_figure(fraction: float = 0.5, placement: str = "interleaved", body_a: int = 4,
                         body_b: int = 4, warps: int = 2) -> go.Figure:
    """The concept: each warp issues path A (if any lane wants it) then path B; other lanes sit masked."""
    f, placement = check_fraction(fraction), check_placement(placement)
    body_a, body_b = check_body("path A cost", body_a, minimum=1), check_body("path B cost", body_b)
    warps = validate.integer("warps", warps, minimum=1, maximum=8)
    if body_a + body_b > 64:
        raise InvalidConfig(f"the picture draws at most 64 issue slots per warp; got {body_a} + {body_b}")
    flags = lane_flags(warps * WARP_SIZE, f, placement).astype(bool).reshape(warps, WARP_SIZE)
    slots = body_a + body_b
    z = np.full((warps * WARP_SIZE, slots), np.nan)  # NaN: the warp has finished
    used = []
    for w in range(warps):
        col = 0
        for on_path, body, state in ((flags[w], body_a, 1), (~flags[w], body_b, 2)):
            if on_path.any() and body:
                z[w * WARP_SIZE:(w + 1) * WARP_SIZE, col:col + body] = np.where(on_path, state, 0)[:, None]
                col += body
        used.append(col)
    busy = 100 * np.sum(z > 0) / (WARP_SIZE * sum(used))
    span = f"{min(used)}" if min(used) == max(used) else f"{min(used)}–{max(used)}"
    fig = charts.figure(
        f"{placement.capitalize()}, {f:.0%} of lanes on A: {span} issue slots per warp, "
        f"{busy:.0f} % of lanes busy",
        "issue slot (time →)", "warp · lane",
        charts.source_caption("model", f"a warp issues each path any of its lanes takes, one after the other "
                                       f"(path A {body_a} slots, path B {body_b})"),
        height=220 + 8 * warps * WARP_SIZE // 2,
    )
    labels = np.array(["masked (idle)", "path A", "path B"], dtype=object)
    text = np.where(np.isnan(z), "finished", labels[np.nan_to_num(z).astype(int)])
    fig.add_heatmap(
        z=z, x=list(range(slots)), y=[f"w{w}·{lane:02d}" for w in range(warps) for lane in range(WARP_SIZE)],
        colorscale=[[0, _STATE_COLOURS[0]], [0.5, _STATE_COLOURS[1]], [1, _STATE_COLOURS[2]]],
        zmin=0, zmax=2, showscale=False, xgap=1, customdata=text, name="lane state",
        hovertemplate="%{y}, slot %{x}: %{customdata}<extra></extra>",
    )
    # each entry its own symbol, and A and B named by when they run (A first): not colour alone
    for state, label, symbol in ((1, "path A (active, issued first)", "square"),
                                 (2, "path B (active, issued after A)", "diamond"),
                                 (0, "masked lane (idle)", "circle")):
        fig.add_scatter(x=[None], y=[None], mode="markers", name=label,
                        marker={"symbol": symbol, "size": 12, "color": _STATE_COLOURS[state],
                                "line": {"color": "#000", "width": 1}})
    for w in range(1, warps):
        fig.add_hline(y=w * WARP_SIZE - 0.5, line_color="#000", line_width=2)
    fig.update_yaxes(autorange="reversed", dtick=8)
    return fig


def fraction_figure(fraction: float = 0.5, placement: str = "interleaved", body_cost: int = 128,
                    path_b: str = "same", progress=None) -> go.Figure:
    """Time vs fraction of lanes on path A, one curve per placement — measured (GPU) or recorded —
    each beside its model; the chosen fraction and placement are marked."""
    f, placement = check_fraction(fraction), check_placement(placement)
    body_a = check_body("body cost", body_cost, minimum=1)
    body_b = path_b_body(body_a, path_b)
    if runtime.is_gpu():
        data = _live_curve(body_a, body_b)
        source = charts.source_caption("measured", f"{runtime.device().name}, {GPU_THREADS:,} threads, "
                                                   f"quick samples (≥ 30 ms of GPU time per point)")
        kind = "measured"
    else:
        if body_a not in BODY_COSTS:
            raise InvalidConfig(f"body cost must be one of {BODY_COSTS} without a GPU (the recorded sweep); "
                                f"got {body_a}")
        data, rec = _recorded_curve(body_a, body_b)
        source, kind = _source_or_none(data, rec, "the dotted lines are the model"), "recorded"
    b_text = {"same": "the same work", "cheap": f"{body_b} FMAs", "none": "nothing"}[path_b]
    fig = charts.figure(f"Time vs lanes on path A (path A {body_a} FMAs; path B {b_text})",
                        "fraction of lanes on path A", "time ÷ time with every lane on A (×)", source)
    model = model_curves(body_a, body_b)
    for index, name in enumerate(PLACEMENTS):
        opacity = 1.0 if name == placement else 0.4
        m = model[model.placement == name]
        charts.line(fig, m.fraction, m.relative_time, f"model: {name}", index, dash="dot", opacity=opacity)
        if data is not None:
            d = data[data.placement == name].sort_values("fraction")
            charts.line(fig, d.fraction, d.relative_time, f"{kind}: {name}", index, dash="solid",
                        opacity=opacity)
    predicted = model_relative_time(lane_flags(MODEL_THREADS, f, placement), body_a, body_b)
    note = f"{placement}, f = {f:.3g}: model {predicted:.2f}×"
    if data is not None:
        d = data[data.placement == placement]
        if len(d):
            nearest = d.iloc[(d.fraction - f).abs().argsort()[:1]]
            at, ratio = float(nearest.fraction.iloc[0]), float(nearest.relative_time.iloc[0])
            note += f"; {kind} at f = {at:.3g}: {ratio:.2f}×"
        else:  # e.g. a quick recording: only some placements were recorded
            note += f"; no {kind} points for {placement}"
    else:
        cited.no_data(fig, "No GPU timing to show: the dotted lines are the model", "divergence")
    fig.add_vline(x=f, line_dash="dash", line_color="#000", opacity=0.5)
    fig.update_layout(title_text=f"{fig.layout.title.text}<br><sup>{html.escape(note)}</sup>")
    fig.update_yaxes(rangemode="tozero")
    return cited.stack_below(_room_for_two_legend_rows(fig))


def predicated_figure() -> go.Figure:
    """The trivial branch: interleaved vs clustered lanes at each fraction (measured or recorded)."""
    if runtime.is_gpu():
        data = measure_fraction_curve(1, 1, kernel="predicated", placements=("interleaved", "clustered"),
                                      min_total_ms=harness.LIVE_MIN_TOTAL_MS)
        source = charts.source_caption("measured", f"{runtime.device().name}, {GPU_THREADS:,} threads")
    else:
        data, rec = _recorded_curve(1, 1, kernel="predicated")
        source = _source_or_none(data, rec, "the dotted line is what the PTX predicts (no branch, no gap)")
    fig = charts.figure("A trivial branch compiled to a select: no divergence gap expected",
                        "fraction of lanes on path A", "time ÷ time with every lane on A (×)", source)
    ones = [1.0] * len(SWEEP_FRACTIONS)
    charts.line(fig, SWEEP_FRACTIONS, ones, "model: no branch, so no gap", 2, dash="dot")
    if data is not None:
        for index, name in enumerate(("interleaved", "clustered")):
            d = data[data.placement == name].sort_values("fraction")
            charts.line(fig, d.fraction, d.relative_time, name, index, dash="solid")
    else:
        cited.no_data(fig, "No GPU timing to show", "divergence")
    fig.update_yaxes(rangemode="tozero")
    return fig


def sort_pays_figure(density: float = 1 / 32) -> go.Figure:
    """Speed-up of sorting (or compacting) first, preprocessing included, vs path A's cost."""
    if runtime.is_gpu():
        density = validate.number("density", density, minimum=1 / 1024, maximum=1.0)
        data = measure_sort_pays(density, min_total_ms=50.0)
        source = charts.source_caption("measured", f"{runtime.device().name}, {GPU_THREADS:,} elements")
    else:
        density = validate.choice("density", density, SPARSE_DENSITIES)
        rec = reference.load("divergence.sort_pays")
        data = None if rec is None else rec.data[np.isclose(rec.data.density, density)]
        data = data if data is not None and len(data) else None
        recorded = "" if rec is None else ", ".join(f"{d:.3g}" for d in sorted(set(rec.data.density)))
        source = _source_or_none(data, rec, "the dotted line is a model upper bound (branch bodies only)",
                                 absent=f"rows at density {density:.3g} (it has {recorded})")
    fig = charts.figure(f"Sparse data, {density:.3g} non-zero: speed-up from sorting first",
                        "path A cost (FMA iterations)", "unsorted time ÷ time with the fix (×)", source)
    flags = lane_flags(MODEL_THREADS, density, "random")
    ideal = (warp_table(flags).lanes_a > 0).sum() / max(1, math.ceil(flags.sum() / WARP_SIZE))
    charts.line(fig, SPARSE_BODIES, [ideal] * len(SPARSE_BODIES),
                "model upper bound: branch bodies only (approached when path A dominates)", 2, dash="dot")
    charts.line(fig, SPARSE_BODIES, [1.0] * len(SPARSE_BODIES),
                "break-even (1×): below it the fix costs more than it saves", 7, dash="dash")
    if data is not None:
        charts.line(fig, data.body_a, data.sort_speedup, "sort, then run (argsort + remapped kernel)", 0)
        charts.line(fig, data.body_a, data.compact_speedup, "compact, then run (non-zeros only)", 1)
    else:
        cited.no_data(fig, "No GPU timing to show: the sort's own cost can only be measured", "divergence")
    fig.update_layout(showlegend=True)
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    return cited.stack_below(_room_for_two_legend_rows(fig))


def simt_figure(fraction: float = 0.5, path_b: str = "same") -> go.Figure:
    """SIMT efficiency of the branch bodies per placement, counted by the microscope, beside the model."""
    f = check_fraction(fraction)
    body_b = {"same": MICROSCOPE_BODY, "cheap": 1, "none": 0}[validate.choice("path B", path_b, PATH_B)]
    table = simt_table(f, MICROSCOPE_BODY, body_b)
    fig = charts.figure(
        f"SIMT efficiency of the loop bodies, {f:.3g} of lanes on A ({MICROSCOPE_THREADS} threads)",
        "placement", "SIMT efficiency (active lanes ÷ 32)", charts.source_caption(
            "counted", f"one launch of two_paths, path A {MICROSCOPE_BODY} FMAs, path B {body_b}; "
                       f"hatched bars: the model"))
    fig.add_bar(x=list(table.placement), y=list(table.counted_bodies), name="counted by the microscope",
                marker={"color": charts.PALETTE[0]}, text=[f"{v:.2f}" if v == v else "" for v in table.counted_bodies],
                textposition="outside")
    for placement, value in zip(table.placement, table.counted_bodies, strict=True):
        if value != value:  # NaN: e.g. 1/32 of 8 warps rounds to no whole warp on A, and B is empty
            fig.add_annotation(x=placement, y=0.05, text="no lane ran a body", showarrow=False)
    fig.add_bar(x=list(table.placement), y=list(table.model_bodies), name="model",
                marker={"color": charts.PALETTE[1], "pattern": {"shape": "/"}})
    fig.update_layout(barmode="group")
    fig.update_yaxes(range=[0, 1.05])
    return fig


def lanes_picture(fraction: float = 0.5, placement: str = "interleaved", warp: int = 0):
    """The microscope's active-lane picture of one warp of a small ``two_paths`` launch."""
    warp = validate.integer("warp", warp, minimum=0, maximum=MICROSCOPE_THREADS // WARP_SIZE - 1)
    report = trace_two_paths(fraction, placement, body_a=2, body_b=2)
    return report.picture_lanes(warp=warp % 2, block=warp // 2)


# --- widgets (the notebook displays these) ---------------------------------------------------


def _fraction_slider(value: float = 0.5):
    import ipywidgets as w

    return w.FloatSlider(value=value, min=0.0, max=1.0, step=1 / 32, description="on path A",
                         readout_format=".3f", continuous_update=False)


def _placement_dropdown(value: str = "interleaved"):
    import ipywidgets as w

    return w.Dropdown(options=list(PLACEMENTS), value=value, description="placement")


def timeline_chart(threaded: bool = True):
    """Fraction and placement → the issue-slot picture of two warps."""
    from gpucourse.viz.widgets import LiveChart

    return LiveChart({"fraction": _fraction_slider(), "placement": _placement_dropdown()},
                     compute=warp_timeline_figure, threaded=threaded,
                     description="Each row is a lane, each column one issue slot; grey lanes are masked.")


def fraction_chart(threaded: bool = True):
    """Fraction, placement, path A's cost and path B's → time vs fraction, model beside measurement."""
    import ipywidgets as w

    from gpucourse.viz.widgets import LiveChart

    return LiveChart(
        {
            "fraction": _fraction_slider(),
            "placement": _placement_dropdown(),
            "body_cost": w.SelectionSlider(options=list(BODY_COSTS), value=128, description="path A FMAs",
                                           continuous_update=False),
            "path_b": w.Dropdown(options=list(PATH_B), value="same", description="path B"),
        },
        compute=fraction_figure, threaded=threaded,
        description="Time of the two-path kernel vs the share of lanes on path A; one curve per placement.",
    )


def simt_chart(threaded: bool = True):
    """Fraction and path B → SIMT efficiency per placement, counted by the microscope and modelled."""
    import ipywidgets as w

    from gpucourse.viz.widgets import LiveChart

    return LiveChart({"fraction": _fraction_slider(),
                      "path_b": w.Dropdown(options=list(PATH_B), value="same", description="path B")},
                     compute=simt_figure, threaded=threaded,
                     description="The microscope runs two_paths once per placement and counts active lanes.")


def lanes_chart(threaded: bool = True):
    """Fraction, placement and warp → the microscope's active-lane picture of that warp."""
    import ipywidgets as w

    from gpucourse.viz.widgets import LiveChart

    return LiveChart({"fraction": _fraction_slider(), "placement": _placement_dropdown(),
                      "warp": w.BoundedIntText(value=0, min=0, max=MICROSCOPE_THREADS // WARP_SIZE - 1,
                                               description="warp")},
                     compute=lanes_picture, threaded=threaded,
                     description="Each line one warp executed (rows, in order) and which lanes took part.")
