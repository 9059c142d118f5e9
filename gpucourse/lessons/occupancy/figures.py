"""Lesson 05 "Occupancy": charts and widgets."""

from __future__ import annotations

import html

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from gpucourse.errors import CourseError, InvalidConfig
from gpucourse.lessons.occupancy.calculator import (
    KB,
    LIMITERS,
    SUB_PARTITIONS,
    WARP_SIZE,
    architecture,
    occupancy,
)
from gpucourse.lessons.occupancy.experiments import AXES, KINDS, driver_comparison, measure_speed, sweep_axis
from gpucourse.lessons.occupancy.model import (
    CANNOT_LAUNCH,
    FIRST_ATTEMPT_SWEEP,
    KERNELS,
    SWEEP_THREADS,
    SpeedModel,
    _sm_summary,
    lesson_cc,
    lesson_speed_model,
    limiter_style,
    speed_model,
    usage,
)
from gpucourse.measure import reference, runtime
from gpucourse.viz import charts, cited


def _room_for_caption(fig: go.Figure) -> go.Figure:
    """charts.figure's caption sits below its bottom margin once a legend is shown; make room for it."""
    fig.update_layout(height=(fig.layout.height or 420) + 40, margin={"b": 140})
    return fig
TYPED = "typed"  # the explorer's "I'll type the register count" choice


def _add_axis_traces(
    fig: go.Figure,
    data: pd.DataFrame,
    axis: str,
    current_x: float | None,
    *,
    row=None,
    col=None,
    shown: set | None = None,
) -> None:
    where = {"row": row, "col": col} if row else {}
    fig.add_scatter(
        x=data.x,
        y=data.occupancy_pct,
        mode="lines",
        line={"color": "#bbbbbb", "width": 1},
        name="occupancy",
        showlegend=False,
        hoverinfo="skip",
        **where,
    )
    for limiter, group in data.groupby("limiter", sort=False):
        colour, symbol = limiter_style(limiter)
        first = shown is None or limiter not in shown
        if shown is not None:
            shown.add(limiter)
        fig.add_scatter(
            x=group.x,
            y=group.occupancy_pct,
            mode="markers",
            name=limiter if limiter == CANNOT_LAUNCH else f"limited by {limiter}",
            legendgroup=limiter,
            showlegend=first,
            marker={
                "color": colour,
                "symbol": symbol,
                "size": 5 if len(data) > 64 else 7,
                "line": {"width": 0.5, "color": "#000"},
            },
            customdata=np.stack([group.active_blocks, group.active_warps], axis=-1),
            hovertemplate=(
                f"{AXES[axis]}: %{{x}}<br>occupancy %{{y:.1f}} %<br>%{{customdata[0]}} blocks, "
                f"%{{customdata[1]}} warps<br>limited by {limiter}<extra></extra>"
            ),
            **where,
        )
    if current_x is not None:
        fig.add_vline(x=current_x, line_dash="dash", line_color="#000", opacity=0.6, **where)


def occupancy_chart(
    axis: str,
    threads_per_block: int = 256,
    registers_per_thread: int = 32,
    shared_bytes_per_block: int = 0,
    cc=(9, 0),
) -> go.Figure:
    """One classic chart: occupancy vs ``axis``; the dashed line marks the current configuration."""
    data = sweep_axis(axis, threads_per_block, registers_per_thread, shared_bytes_per_block, cc)
    now = occupancy(threads_per_block, registers_per_thread, shared_bytes_per_block, cc)
    current = {
        "threads_per_block": threads_per_block,
        "registers_per_thread": registers_per_thread,
        "shared_bytes_per_block": shared_bytes_per_block / KB,
    }[axis]
    arch = architecture(cc)
    fig = charts.figure(
        f"Occupancy vs {AXES[axis]} (cc {arch.name}); now: {now.occupancy_pct:.1f} %"
        + (f", limited by {now.limiter}" if now.launches else ", cannot launch"),
        AXES[axis],
        "occupancy (% of warp slots)",
        charts.source_caption("model", f"NVIDIA's occupancy rules for cc {arch.name} (exact, not a timing)"),
    )
    _add_axis_traces(fig, data, axis, current)
    fig.update_yaxes(range=[0, 105])
    return _room_for_caption(fig)


def occupancy_charts(
    threads_per_block: int = 256,
    registers_per_thread: int = 32,
    shared_bytes_per_block: int = 0,
    cc=(9, 0),
    *,
    registers_source: str = "",
    title: str | None = None,
) -> go.Figure:
    """The calculator's three classic charts side by side, coloured and shaped by the limiter."""
    from plotly.subplots import make_subplots

    now = occupancy(threads_per_block, registers_per_thread, shared_bytes_per_block, cc)
    arch = architecture(cc)
    fig = make_subplots(
        rows=1,
        cols=3,
        shared_yaxes=True,
        horizontal_spacing=0.04,
        subplot_titles=("vs block size", "vs registers per thread", "vs shared memory per block"),
    )
    shown: set = set()
    current = {
        "threads_per_block": threads_per_block,
        "registers_per_thread": registers_per_thread,
        "shared_bytes_per_block": shared_bytes_per_block / KB,
    }
    for col, axis in enumerate(AXES, start=1):
        data = sweep_axis(axis, threads_per_block, registers_per_thread, shared_bytes_per_block, cc)
        _add_axis_traces(fig, data, axis, current[axis], row=1, col=col, shown=shown)
        fig.update_xaxes(title_text=AXES[axis], row=1, col=col)
    headline = (
        f"{now.active_blocks} blocks × {now.warps_per_block} warps = {now.occupancy_pct:.1f} % "
        f"occupancy, limited by {now.limiter}"
        if now.launches
        else f"cannot launch: {now.reason}"
    )
    fig.update_layout(
        title={
            "text": title
            or f"cc {arch.name} · {threads_per_block} threads, {registers_per_thread} registers, "
            f"{shared_bytes_per_block:,} B shared → {headline}",
            "x": 0.02,
            "font": {"size": 14},
        },
        template="plotly_white",
        height=480,
        margin={"l": 70, "r": 20, "t": 80, "b": 160},
        font={"size": 12},
        colorway=charts.PALETTE,
    )
    fig.update_yaxes(title_text="occupancy (% of warp slots)", range=[0, 105], row=1, col=1)
    if registers_source:
        fig.layout.title.text += f"<br><sup>registers: {html.escape(registers_source)}</sup>"
    detail = f"NVIDIA's occupancy rules for cc {arch.name} (exact, not a timing)"
    charts.set_source(fig, charts.source_caption("model", detail))
    return charts.legend_below(fig, 64)  # under the axis titles (subplot titles stand on the plots), caption under it


def learner_curve_figure(occupancy_fn, registers_per_thread: int, shared_bytes_per_block: int = 0, cc=(9, 0)):
    """Occupancy vs block size computed by a learner's function (lab 05), shaped by the limiters it names.

    ``occupancy_fn(threads, registers, shared_bytes, cc)`` returns a dict with "blocks",
    "occupancy_pct" and "limiters" (a set). Nothing from the course's calculator is drawn, so
    the chart shows the learner's own answer.
    """
    rows = []
    for threads in range(WARP_SIZE, 1025, WARP_SIZE):
        answer = occupancy_fn(threads, registers_per_thread, shared_bytes_per_block, cc)
        limiters = [name for name in LIMITERS if name in set(answer["limiters"])]
        rows.append(
            {
                "x": threads,
                "occupancy_pct": float(answer["occupancy_pct"]),
                "active_blocks": int(answer["blocks"]),
                "active_warps": int(answer["blocks"]) * -(-threads // WARP_SIZE),
                "limiter": " + ".join(limiters) if int(answer["blocks"]) else CANNOT_LAUNCH,
            }
        )
    data = pd.DataFrame(rows)
    fig = charts.figure(
        f"Your occupancy_by_hand: {registers_per_thread} registers, {shared_bytes_per_block:,} B shared, "
        f"cc {cc[0]}.{cc[1]}",
        "threads per block",
        "occupancy (% of warp slots)",
        charts.source_caption("model", "computed by your function (not a measurement)"),
    )
    _add_axis_traces(fig, data, "threads_per_block", None)
    fig.update_yaxes(range=[0, 105])
    return _room_for_caption(fig)


# --- the picture: one SM filled by resident blocks ---------------------------------------------

BLOCK_COLOURS = charts.PALETTE[:7]  # black is left out: block numbers are printed on the squares


SM_PICTURE_BOTTOM_PX = 180


def sm_picture(
    threads_per_block: int = 128, registers_per_thread: int = 37, shared_bytes_per_block: int = 0, cc=(9, 0)
) -> go.Figure:
    """One SM: its warp slots, its four register-file quarters and its shared memory, filled by blocks."""
    from plotly.subplots import make_subplots

    r = occupancy(threads_per_block, registers_per_thread, shared_bytes_per_block, cc)
    arch = architecture(cc)
    slots_per_sp = arch.max_warps_per_sm // SUB_PARTITIONS
    fig = make_subplots(
        rows=1,
        cols=3,
        column_widths=[0.42, 0.33, 0.25],
        horizontal_spacing=0.07,
        subplot_titles=(
            f"warp slots ({arch.max_warps_per_sm}: 4 sub-partitions × {slots_per_sp})",
            f"registers (4 × {arch.registers_per_sm // SUB_PARTITIONS:,})",
            f"shared memory<br>({r.shared_per_sm_bytes // KB} KB)",  # one line was cut off at ~700 px
        ),
    )
    # Warp slots: warp g of the resident warps goes to sub-partition g % 4 (round-robin).
    xs, ys, texts, colours, symbols = [], [], [], [], []
    per_sp = [0] * SUB_PARTITIONS
    for g in range(arch.max_warps_per_sm):
        sp, column = g % SUB_PARTITIONS, g // SUB_PARTITIONS
        xs.append(column)
        ys.append(f"SP {sp}")
        if g < r.active_warps:
            block = g // r.warps_per_block
            per_sp[sp] += 1
            texts.append(str(block))
            colours.append(BLOCK_COLOURS[block % len(BLOCK_COLOURS)])
            symbols.append("square")
        else:
            texts.append("")
            colours.append("#999999")
            symbols.append("square-open")
    fig.add_scatter(
        x=xs,
        y=ys,
        mode="markers+text",
        text=texts,
        textfont={"size": 9, "color": "#000"},
        marker={"symbol": symbols, "size": 20, "color": colours, "line": {"color": "#666", "width": 1}},
        name="warp slots (number = block)",
        showlegend=False,
        hovertemplate="slot %{x} of %{y}: block %{text}<extra></extra>",
        row=1,
        col=1,
    )
    fig.update_xaxes(visible=False, row=1, col=1)
    # Registers per sub-partition: used, lost to rounding to 256 per warp, free.
    per_sp_regs = arch.registers_per_sm // SUB_PARTITIONS
    used = [n * registers_per_thread * WARP_SIZE for n in per_sp]
    rounding = [n * (r.registers_per_warp - registers_per_thread * WARP_SIZE) for n in per_sp]
    free = [per_sp_regs - n * r.registers_per_warp for n in per_sp]
    names = [f"SP {i}" for i in range(SUB_PARTITIONS)]
    for label, values, colour, pattern in (
        ("used by resident warps", used, charts.PALETTE[0], ""),
        ("allocated, unused (rounding to 256 per warp)", rounding, charts.PALETTE[1], "/"),
        ("free registers", free, "#eeeeee", "."),
    ):
        fig.add_bar(
            y=names,
            x=values,
            orientation="h",
            name=label,
            marker={"color": colour, "pattern_shape": pattern, "line": {"color": "#444", "width": 0.5}},
            legendgroup=label,
            hovertemplate=f"%{{y}}: %{{x:,}} registers {label}<extra></extra>",
            row=1,
            col=2,
        )
    # Shared memory: data, the driver's 1 KB per block, rounding to the granularity, free.
    blocks = r.active_blocks
    reserved = arch.reserved_shared_per_block_bytes
    data_bytes = blocks * shared_bytes_per_block
    reserve_bytes = blocks * reserved
    round_bytes = blocks * (r.shared_bytes_allocated - shared_bytes_per_block - reserved)
    free_bytes = max(r.shared_per_sm_bytes - blocks * r.shared_bytes_allocated, 0)
    for label, value, colour, pattern in (
        ("blocks' shared data", data_bytes, charts.PALETTE[2], ""),
        ("driver's 1 KB per block", reserve_bytes, charts.PALETTE[3], "x"),
        ("rounding to the granularity", round_bytes, charts.PALETTE[1], "/"),
        ("free shared memory", free_bytes, "#eeeeee", "."),
    ):
        fig.add_bar(
            x=["SM"],
            y=[value / KB],
            name=label,
            marker={"color": colour, "pattern_shape": pattern, "line": {"color": "#444", "width": 0.5}},
            hovertemplate=f"{label}: %{{y:.1f}} KB<extra></extra>",
            row=1,
            col=3,
        )
    fig.update_layout(
        barmode="stack",
        template="plotly_white",
        height=500,
        font={"size": 12},
        title={"text": f"One SM, cc {arch.name}: {_sm_summary(r)}", "x": 0.02, "font": {"size": 14}},
        # legend and caption in the bottom margin, in pixels: the legend can take three rows at ~700 px
        margin={"l": 60, "r": 20, "t": 80, "b": SM_PICTURE_BOTTOM_PX},
        legend={"orientation": "h", "yref": "container", "y": (SM_PICTURE_BOTTOM_PX - 45) / 500,
                "yanchor": "top", "x": 0},
    )
    fig.update_xaxes(title_text="registers", row=1, col=2)
    fig.update_yaxes(title_text="KB", row=1, col=3)
    charts.set_source(
        fig,
        charts.source_caption(
            "model",
            f"{threads_per_block} threads, {registers_per_thread} registers/thread, "
            f"{shared_bytes_per_block:,} B shared per block; NVIDIA's occupancy rules",
        ),
    )
    # inside the bottom margin, under the legend (at y = -0.4 it fell outside the figure)
    fig.layout.annotations[-1].update(y=0, yanchor="top", yshift=-(SM_PICTURE_BOTTOM_PX - 62))
    return fig


# --- the explorer widget -------------------------------------------------------------------------

MAX_REGISTER_CHOICES = ("none", 24, 32, 40, 48, 64, 80, 96, 128, 168, 255)


def explorer_figure(
    kernel: str = "accumulators",
    threads_per_block: int = 128,
    max_registers="none",
    typed_registers: int = 32,
    dynamic_shared_kb: int = 0,
    cc=None,
) -> go.Figure:
    """The explorer's chart: the kernel's real registers (capped) and shared memory → the three charts."""
    cc = cc or lesson_cc()
    cap = None if max_registers in (None, "none", 0) else int(max_registers)
    dynamic_bytes = int(dynamic_shared_kb) * KB
    if kernel == TYPED:
        regs = min(int(typed_registers), cap) if cap else int(typed_registers)
        static, source = 0, f"{regs} typed by you"
    else:
        u = usage(kernel, cap, cc)
        if u.known:
            regs, static = u.registers, u.shared_bytes or 0
            spill = f", spills {u.spill_store_bytes} B" if u.spill_store_bytes else ""
            source = f"{kernel}: {regs} registers, {static:,} B static shared{spill} ({u.source})"
            if u.note:
                source += f"; {u.note}"
        else:
            regs = min(int(typed_registers), cap) if cap else int(typed_registers)
            static, source = 0, f"{kernel}'s registers are unknown ({u.reason}); using your {regs}"
    return occupancy_charts(threads_per_block, regs, static + dynamic_bytes, cc, registers_source=source)


def occupancy_explorer(cc=None, *, threaded: bool = True):
    """Kernel, block size, max_registers, typed registers, dynamic shared memory → the three charts."""
    import ipywidgets as w

    from gpucourse.viz.widgets import LiveChart

    cc = cc or lesson_cc()
    arch = architecture(cc)
    options = [(f"{k.name} ({k.role})", k.name) for k in KERNELS.values()] + [
        ("type a register count", TYPED)
    ]
    style = {"description_width": "initial"}
    return LiveChart(
        {
            "kernel": w.Dropdown(options=options, value="accumulators", description="kernel", style=style),
            "threads_per_block": w.IntSlider(
                value=128,
                min=32,
                max=1024,
                step=32,
                description="threads/block",
                style=style,
                continuous_update=False,
            ),
            "max_registers": w.SelectionSlider(
                options=list(MAX_REGISTER_CHOICES),
                value="none",
                description="max_registers",
                style=style,
                continuous_update=False,
            ),
            "typed_registers": w.BoundedIntText(
                value=32, min=1, max=255, description="registers (if unknown)", style=style
            ),
            "dynamic_shared_kb": w.IntSlider(
                value=0,
                min=0,
                max=arch.shared_per_block_optin_bytes // KB,
                step=1,
                description="dynamic shared (KB)",
                style=style,
                continuous_update=False,
            ),
        },
        compute=lambda **v: explorer_figure(cc=cc, **v),
        threaded=threaded,
        description="Choose a kernel (its registers come from the compiler), a block size, a register cap "
        "and dynamic shared memory; the charts are the occupancy calculator's answer.",
    )


def calculator_widget(cc=None, *, threaded: bool = True):
    """A bare calculator: block size, registers and shared memory typed in → the SM picture."""
    import ipywidgets as w

    from gpucourse.viz.widgets import LiveChart

    cc = cc or lesson_cc()
    arch = architecture(cc)
    style = {"description_width": "initial"}
    return LiveChart(
        {
            "threads_per_block": w.IntSlider(
                value=128,
                min=32,
                max=1024,
                step=32,
                description="threads/block",
                style=style,
                continuous_update=False,
            ),
            "registers_per_thread": w.IntSlider(
                value=37, min=1, max=255, description="registers/thread", style=style, continuous_update=False
            ),
            "shared_kb": w.IntSlider(
                value=0,
                min=0,
                max=arch.shared_per_block_optin_bytes // KB,
                description="shared (KB)",
                style=style,
                continuous_update=False,
            ),
        },
        compute=lambda threads_per_block, registers_per_thread, shared_kb: sm_picture(
            threads_per_block, registers_per_thread, shared_kb * KB, cc
        ),
        threaded=threaded,
    )


def driver_comparison_figure() -> go.Figure:
    """Calculator vs driver, one point per configuration (on the diagonal = they agree)."""
    if runtime.is_gpu():
        data = driver_comparison()
        source = charts.source_caption("measured", f"asked the driver now on {runtime.device().name}")
    else:
        rec = reference.load("occupancy.driver")
        data = rec.data if rec else None
        source = (
            charts.source_caption("recorded", rec.caption(bars=True))
            if rec
            else charts.source_caption(
                "none", "no GPU here and no recording of this comparison yet (run `make record` on a GPU)"
            )
        )
    fig = charts.figure(
        "Blocks per SM: our calculator (x) vs the driver (y)",
        "calculator: blocks per SM",
        "driver: blocks per SM",
        source,
    )
    _room_for_caption(fig)
    if data is None or not len(data):
        return cited.no_data(fig, "No driver to ask here: the comparison needs a GPU or a recording",
                             "occupancy driver")
    top = int(max(data.model_blocks.max(), data.driver_blocks.max())) + 1
    fig.add_scatter(
        x=[0, top], y=[0, top], mode="lines", line={"dash": "dash", "color": "#999"}, name="agreement (y = x)"
    )
    for index, (name, group) in enumerate(data.groupby("kernel", sort=False)):
        fig.add_scatter(
            x=group.model_blocks,
            y=group.driver_blocks,
            mode="markers",
            name=name,
            marker={"color": charts.PALETTE[index % 8], "symbol": charts.MARKERS[index % 8], "size": 9},
            customdata=np.stack(
                [group.threads_per_block, group.dynamic_shared_bytes, group.registers], axis=-1
            ),
            hovertemplate=(
                f"{name}: %{{customdata[0]}} threads, %{{customdata[1]}} B dynamic, "
                "%{customdata[2]} regs<br>calculator %{x}, driver %{y}<extra></extra>"
            ),
        )
    agree = int((data.model_blocks == data.driver_blocks).sum())
    fig.update_layout(title={"text": f"Blocks per SM: calculator vs driver — {agree} of {len(data)} agree"})
    return fig


def _add_speed_model(fig: go.Figure, model: SpeedModel, names, *, axis: str) -> None:
    """Dashed model curves (one per kernel, in the kernel's colour) and a line saying what they assume."""
    warps = np.arange(SWEEP_THREADS // WARP_SIZE, model.max_warps + 1, SWEEP_THREADS // WARP_SIZE)
    op = "loads" if model.kind == "memory" else "FMAs"
    for index, (name, ilp) in enumerate(names):
        charts.line(
            fig, 100.0 * warps / model.max_warps, model.relative_speed(warps, ilp),
            f"model: {name} (ILP {ilp})", index,
            dash=("dash", "dashdot")[index % 2], mode="lines", yaxis=axis,
        )
    fig.add_annotation(
        name="model", showarrow=False, xref="paper", yref="paper", x=0, y=0, yshift=-80,
        xanchor="left", yanchor="top", font={"size": 11, "color": "#444"},
        text=charts.note_text("Dashed: Little's-law model, speed ∝ min(1, resident warps × "
                              f"{op} in flight per warp (= ILP) ÷ warps needed); each curve is 1 at full occupancy.")
        + "<br>" + charts.note_text(model.assumptions + " (model assumptions, not measurements)."),
    )
    fig.update_layout(height=(fig.layout.height or 420) + 30, margin={"b": 175})


_MEASURED: dict[str, pd.DataFrame] = {}  # live GPU sweeps, measured once per session


SPEED_SWEEPS = {"memory": "occupancy.memory_resident", "first_attempt": FIRST_ATTEMPT_SWEEP,
                "compute": "occupancy.compute_unrolled"}
_TITLES = {
    "memory": "Memory-bound copy (grid = resident blocks): bandwidth vs occupancy",
    "first_attempt": "The first attempt (one element per thread, ~1 M blocks): bandwidth vs occupancy",
    "compute": "Compute-bound FMA chains (8 FMAs per iteration): throughput vs occupancy",
}


def _model_for(kind: str, rec) -> SpeedModel:
    """The chart's model: the one the lesson's text and ``predictions()`` state (``lesson_speed_model``) for this
    GPU or, without one, for the course's calibration GPU; a recording of another GPU gets that GPU's model."""
    model_kind = "compute" if kind == "compute" else "memory"
    if runtime.is_gpu() or rec is None:
        return lesson_speed_model(model_kind)
    return speed_model(model_kind, rec)


def speed_figure(kind: str = "memory", progress=None) -> go.Figure:
    """Measured (GPU) or recorded speed vs occupancy: the resident-grid copies ("memory"), the first attempt's
    one-element copies ("first_attempt") or the FMA chains ("compute"); the dashed lines are the model."""
    if kind not in KINDS:
        raise InvalidConfig(f"kind must be one of {', '.join(KINDS)}; got {kind!r}")
    column, unit = (
        ("gbps", "bandwidth (GB/s)") if kind != "compute" else ("tflops", "FP32 FMA throughput (TFLOP/s)")
    )
    ceiling, rec = None, None
    if runtime.is_gpu():
        if kind not in _MEASURED:
            _MEASURED[kind] = measure_speed(kind, progress=progress)
        data = _MEASURED[kind]
        source = charts.source_caption(
            "measured", f"{runtime.device().name}; occupancy from the calculator, confirmed by the driver"
        )
        if kind != "compute":
            from gpucourse.measure import ceilings

            ceiling = ceilings.copy_gbps()
    else:
        rec = reference.load(SPEED_SWEEPS[kind])
        data = rec.data if rec else None
        source = (
            charts.source_caption("recorded", rec.caption(bars=True))
            if rec
            else charts.source_caption(
                "none", "no GPU here and no recording of this sweep yet (run `make record` on a GPU); "
                "the dashed lines are the model"
            )
        )
    fig = _room_for_caption(
        charts.figure(_TITLES[kind], "occupancy (% of warp slots, from the calculator)", unit, source)
    )
    try:
        model = _model_for(kind, rec)
    except CourseError as error:  # nothing to calibrate the latency on: no dashed lines, and the chart says why
        model = None
        fig.add_annotation(name="model", showarrow=False, xref="paper", yref="paper", x=0, y=0, yshift=-80,
                           xanchor="left", yanchor="top", font={"size": 11, "color": "#444"},
                           text=charts.note_text(f"No model drawn: {error}."))
    kernels = list(zip(KINDS[kind], (1, 4), strict=True))
    if data is None or not len(data):
        fig.update_yaxes(title_text="model: speed ÷ speed at 100 % occupancy", range=[0, 1.1])
        if model is not None:
            _add_speed_model(fig, model, kernels, axis="y")
        fig.update_xaxes(range=[0, 105])
        topic = {"compute": "compute occupancy", "memory": "resident copy occupancy"}.get(kind, "first-attempt copy")
        return cited.no_data(fig, "No timing to show: there is no GPU here and no recording yet", topic)
    for index, (name, group) in enumerate(data.groupby("kernel", sort=False)):
        ilp = int(group.ilp.iloc[0])
        charts.line(fig, group.occupancy_pct, group[column], f"{name} (ILP {ilp})", index, dash="solid",
                    error_y=reference.spread(group, column))
    if model is not None:
        _add_speed_model(fig, model, kernels, axis="y2")
    fig.update_layout(
        yaxis2={"title": "model: speed ÷ speed at 100 % occupancy", "overlaying": "y", "side": "right",
                "range": [0, 1.1], "showgrid": False},
        margin={"r": 80},
    )
    if ceiling:
        charts.hline(fig, ceiling, f"measured copy ceiling {ceiling:.0f} GB/s")
    datasheet = runtime.device().datasheet_bandwidth_gbps if runtime.is_gpu() else None
    if kind != "compute" and datasheet:
        charts.hline(fig, datasheet, f"datasheet {datasheet:.0f} GB/s", faint=True)
    fig.update_xaxes(range=[0, 105])
    return cited.stack_below(fig)  # the caption (a recording's runs to three lines) above the model's note


def measured_ratios() -> dict | None:
    """The live sweeps' low ÷ full-occupancy speeds, keyed as ``predictions()`` (GPU mode, after the chart
    measured them; None before)."""
    out = {}
    for kind, low, column in (("memory", 25.0, "gbps"), ("compute", 12.5, "tflops")):
        data = _MEASURED.get(kind)
        if data is None or not len(data):
            continue
        for name, group in data.groupby("kernel", sort=False):
            ilp = int(group.ilp.iloc[0])
            by = group.set_index("occupancy_pct")[column]
            nearest = by.index[np.argmin(np.abs(by.index - low))]
            label = f"{name} at {low:g} %" if kind == "memory" else f"FMA ILP {ilp} at {low:g} %"
            out[label] = round(float(by.loc[nearest] / by.loc[by.index.max()]), 2)
    return out or None


def speed_explorer(*, threaded: bool = True):
    """A LiveChart over the kind of kernel: memory-bound or compute-bound, speed vs occupancy."""
    import ipywidgets as w

    from gpucourse.viz.widgets import LiveChart

    return LiveChart(
        {
            "kind": w.ToggleButtons(
                options=[("memory-bound copy", "memory"), ("compute-bound FMA", "compute"),
                         ("first attempt (one element per thread)", "first_attempt")],
                value="memory",
                description="kernel",
            )
        },
        compute=speed_figure,
        threaded=threaded,
        description="Each kernel runs at several occupancies (lowered by unused shared memory per block).",
    )
