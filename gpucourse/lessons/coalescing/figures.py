"""Lesson 03 "Memory coalescing": charts and widgets."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

# Importing gpucourse.coalescing runs gpucourse/__init__ first, which chooses the mode before numba
# loads: numba.cuda is the GPU or the simulator.
from gpucourse import validate
from gpucourse.hardware import WARP_SIZE
from gpucourse.lessons.coalescing import inflight
from gpucourse.lessons.coalescing.experiments import (
    OFFSETS,
    SWEEP_USEFUL_BYTES,
    WORK_SWEEP,
    _measured_rungs,
    check_rung,
    layout_sweep,
    offset_sweep,
    rung_counts,
    stride_sweep,
)
from gpucourse.lessons.coalescing.model import (
    LAYOUTS,
    SECTOR_BYTES,
    STRIDES,
    _access_label,
    _bandwidth_title,
    _controls,
    check_copy,
    check_layout,
    check_offset,
    check_stride,
    counted_sectors_table,
    dtype_name,
    ideal_sectors_per_request,
    itemsize,
    lane_addresses,
    layout_counts,
    layout_model,
    layout_model_fractions,
    sectors_touched,
    useful_fraction,
)
from gpucourse.measure import reference, runtime
from gpucourse.viz import charts, cited

LINE_BYTES = 128  # a cache line = 4 sectors (what older GPUs fetched as one "transaction")


# --- where chart data comes from: measured now, recorded, or none ----------------------------------

_MEASURED: dict[tuple, pd.DataFrame] = {}  # GPU mode: a widget that moves a highlight does not re-measure


def _bandwidth_data(sweep: str, name: str | None, progress=None):
    """(data or None, copy ceiling or None, datasheet or None, caption) for a chart."""
    if runtime.is_gpu():
        key = (sweep, name)
        if key not in _MEASURED:
            if sweep == "coalescing.stride":
                _MEASURED[key] = stride_sweep((name,), progress=progress)
            elif sweep == "coalescing.offset":
                _MEASURED[key] = offset_sweep((name,), progress=progress)
            else:
                _MEASURED[key] = layout_sweep(progress=progress)
        data = _MEASURED[key]
        caption = charts.source_caption("measured", f"{runtime.device().name}, by the course harness "
                                        f"(median of ≥ 10 samples; no L2 flush; ≥ {SWEEP_USEFUL_BYTES >> 20} "
                                        f"MiB per side, far beyond the L2)")
    else:
        rec = reference.load(sweep)
        if rec is None:
            return None, None, None, charts.source_caption(
                "none", "no GPU here and no recording of this sweep yet (run `make record` on a GPU); "
                "the dashed line is the sector model")
        data = rec.data if name is None else rec.data[rec.data.dtype == name]
        if not len(data):
            return None, None, None, charts.source_caption("none", f"the recording has no {name} rows")
        caption = charts.source_caption("recorded", rec.caption(bars=True))
    ceiling = float(data.copy_ceiling_gbps.median())
    datasheet = data.datasheet_gbps.dropna() if "datasheet_gbps" in data else pd.Series(dtype=float)
    return data, ceiling, (float(datasheet.iloc[0]) if len(datasheet) else None), caption


def _who(sweep: str) -> str:
    """Whose numbers a bandwidth series is, for its legend entry: measured now, or the course's recording."""
    rec = None if runtime.is_gpu() else reference.load(sweep)
    return "measured now" if rec is None else f"recorded on the course's {rec.device} ({rec.contract})"


def _ceiling_lines(fig: go.Figure, ceiling, datasheet) -> None:
    if ceiling:
        charts.hline(fig, ceiling, f"measured copy ceiling {ceiling:.0f} GB/s")
        if datasheet:
            charts.hline(fig, datasheet, f"datasheet {datasheet:.0f} GB/s", faint=True)
    else:
        charts.hline(fig, 1.0, "copy ceiling (1.0)")


# --- figures ---------------------------------------------------------------------------------------


def warp_figure(stride=1, offset=0, dtype="float32") -> go.Figure:
    """The lesson's picture: one warp's 32 lanes above the 32-byte sectors their elements lie in."""
    stride, offset, name = check_copy(stride, offset, dtype)
    size = itemsize(name)
    addresses = lane_addresses(stride, offset, name)
    touched = sectors_touched(stride, offset, name)
    first_sector, last_sector = 0, int(touched.max())
    every = np.arange(first_sector, last_sector + 1)
    idle = np.setdiff1d(every, touched)
    fetched = len(touched) * SECTOR_BYTES
    useful = WARP_SIZE * size
    # two lines: as one, the title was cut off at ~700 px
    title = (f"stride {stride}, offset {offset}, {name}: one warp touches {len(touched)} sectors<br>"
             f"{fetched} bytes fetched for {useful} useful ({100 * useful / fetched:.1f} %)")
    fig = charts.figure(title, "byte address from the start of the array (bytes)", "", charts.source_caption(
        "model", f"lane l copies element l·{stride} + {offset}; each 32-byte sector holding one is fetched "
        "whole"),
        height=380)
    centre = every * SECTOR_BYTES + SECTOR_BYTES / 2
    width = SECTOR_BYTES * 0.96
    fig.add_bar(x=list(touched * SECTOR_BYTES + SECTOR_BYTES / 2), y=[1.0] * len(touched), width=width,
                name=f"sector fetched ({len(touched)})",
                marker={"color": charts.PALETTE[5], "line": {"color": "#000"}},
                hovertemplate="sector at byte %{x}: fetched<extra></extra>")
    if len(idle):
        fig.add_bar(x=list(idle * SECTOR_BYTES + SECTOR_BYTES / 2), y=[1.0] * len(idle), width=width,
                    name="sector not fetched", marker={"color": "#ffffff", "line": {"color": "#999"},
                                                        "pattern": {"shape": "/", "fgcolor": "#bbb"}},
                    hovertemplate="sector at byte %{x}: not fetched<extra></extra>")
    fig.add_bar(x=list(addresses + size / 2), y=[1.0] * WARP_SIZE, width=size, name="bytes a lane asked for",
                marker={"color": charts.PALETTE[0], "pattern": {"shape": "x", "fgcolor": "#fff"}},
                hovertemplate="lane's element at byte %{x}<extra></extra>")
    # Lanes above, each joined to the element it copies.
    lanes = np.arange(WARP_SIZE)
    lane_x = np.linspace(centre.min(), centre.max(), WARP_SIZE) if last_sector else addresses + size / 2
    xs, ys = [], []
    for lx, ax in zip(lane_x, addresses + size / 2, strict=True):
        xs += [lx, ax, None]
        ys += [2.0, 1.05, None]
    fig.add_scatter(x=xs, y=ys, mode="lines", line={"color": "#777", "width": 1}, name="lane → element",
                    hoverinfo="skip")
    fig.add_scatter(x=list(lane_x), y=[2.05] * WARP_SIZE, mode="markers+text", name="lanes 0–31 of one warp",
                    marker={"symbol": "triangle-down", "size": 9, "color": charts.PALETTE[1]},
                    text=[str(lane) for lane in lanes],
                    textposition="top center", textfont={"size": 9},
                    customdata=addresses, hovertemplate="lane %{text}: byte %{customdata}<extra></extra>")
    span_bytes = (last_sector + 1) * SECTOR_BYTES
    if span_bytes <= 16 * LINE_BYTES:  # beyond that the line boundaries would hide the sectors
        for line_start in range(0, span_bytes + 1, LINE_BYTES):
            fig.add_vline(x=line_start, line_dash="dot", line_color="#444", line_width=1)
        fig.add_annotation(text="dotted lines: 128-byte cache lines (4 sectors)", showarrow=False,
                           xref="paper", yref="paper", x=1, y=1.02, xanchor="right",
                           font={"size": 11, "color": "#444"})
    fig.update_layout(barmode="overlay", bargap=0)
    fig.update_yaxes(visible=False, range=[0, 2.6])
    fig.update_xaxes(range=[-4, span_bytes + 4])
    return fig


def _log_strides(fig: go.Figure, strides) -> None:
    fig.update_xaxes(type="log", tickvals=list(strides), ticktext=[str(s) for s in strides])


def stride_figure(dtype="float32", stride=None, progress=None) -> go.Figure:
    """Effective GB/s vs stride: measured (GPU) or recorded, the sector model, the ceiling and datasheet."""
    name = dtype_name(dtype)
    chosen = check_stride(stride) if stride is not None else None
    data, ceiling, datasheet, caption = _bandwidth_data("coalescing.stride", name, progress)
    strides = list(STRIDES)
    scale = ceiling or 1.0
    y_title = _bandwidth_title(ceiling)
    copied, per_stride_mib = copied_text(data, name)
    fig = charts.figure(f"Strided {name} copy: effective bandwidth vs stride",
                        f"stride (elements, log scale) · {copied}; the arrays span stride × that", y_title, caption)
    model = [useful_fraction(s, 0, name) * scale for s in strides]
    charts.line(fig, strides, model, "sector model: useful ÷ fetched bytes × copy ceiling", 1)
    if data is not None:
        data = data.sort_values("stride")
        charts.line(fig, data.stride, data.gbps, f"{_who('coalescing.stride')}: effective GB/s (useful bytes)", 0,
                    dash="solid", error_y=reference.spread(data, "gbps"))
    else:
        cited.no_data(fig, "No GPU timing to show here: the dashed line is the sector model", "strided copy")
    _ceiling_lines(fig, ceiling, datasheet)
    charts.hline(fig, scale / 32, "folklore: 1/32 of the bandwidth", faint=True)
    if chosen is not None:
        fig.add_scatter(x=[chosen], y=[useful_fraction(chosen, 0, name) * scale], mode="markers",
                        name=f"your stride ({chosen}): model", marker={"symbol": "star", "size": 16,
                                                                        "color": charts.PALETTE[3]})
    _log_strides(fig, strides)
    if per_stride_mib and len(set(per_stride_mib.values())) == 1:  # one size: every tick can say its span
        per_stride_mib = dict.fromkeys(strides, next(iter(per_stride_mib.values())))
    if per_stride_mib:  # the second axis: how far the arrays reach (TLB and DRAM pages see this)
        fig.update_xaxes(ticktext=[f"{st}<br>{_span_text(per_stride_mib[st] * st)}" if st in per_stride_mib
                                   else str(st) for st in strides])
    fig.update_yaxes(rangemode="tozero")
    return fig


def copied_text(data, name: str) -> tuple[str, dict[int, int]]:
    """(what every point copies, in words; useful MiB per side by stride) for the stride chart's axis. A GPU
    whose memory cannot hold stride × the sweep's bytes copies fewer at the large strides (sweep_elements),
    and the label says from which stride on (W8: it once said "the same bytes" there)."""
    if data is None or "n_elements" not in data or not len(data):
        return "every point copies the same bytes of useful data each way", {}
    mib = {int(r.stride): int(r.n_elements) * itemsize(name) >> 20 for r in data.itertuples()}
    most = max(mib.values())
    fewer = sorted(st for st, m in mib.items() if m < most)
    if not fewer:
        return f"every point copies {most} MiB of useful data each way", mib
    return (f"every point copies {most} MiB of useful data each way, fewer at strides ≥ {fewer[0]} on this GPU "
            f"(the arrays must fit in its memory)", mib)


def _span_text(mib: int) -> str:
    return f"{mib / 1024:g} GiB" if mib >= 1024 else f"{mib} MiB"


def sectors_figure(dtype="float32", offset=0) -> go.Figure:
    """Sectors per warp request vs stride: counted by the microscope, beside the model and the ideal."""
    name = dtype_name(dtype)
    offset = check_offset(offset)
    table = counted_sectors_table(name, offset)
    fig = charts.figure(f"Sectors per warp request vs stride ({name}, offset {offset})",
                        "stride (elements, log scale)", "sectors per warp request (32 bytes each)",
                        charts.source_caption("counted", "the microscope ran the strided copy (two warps) "
                                              "for each stride; the dashed line is the sector model"))
    charts.line(fig, table.stride, table.counted_src, "counted: load of src", 0, dash="solid")
    charts.line(fig, table.stride, table.model, "sector model", 1)
    ideal = ideal_sectors_per_request(name)
    charts.hline(fig, ideal, f"ideal: 32 lanes × {itemsize(name)} bytes ÷ 32 = {ideal}", faint=True)
    charts.hline(fig, WARP_SIZE, "one sector per lane (32)", faint=True)
    _log_strides(fig, STRIDES)
    fig.update_yaxes(rangemode="tozero")
    return fig


def offset_figure(dtype="float32", offset=None, progress=None) -> go.Figure:
    """Effective GB/s vs misalignment (stride 1): measured or recorded, and the sector model."""
    name = dtype_name(dtype)
    chosen = check_offset(offset) if offset is not None else None
    data, ceiling, datasheet, caption = _bandwidth_data("coalescing.offset", name, progress)
    scale = ceiling or 1.0
    y_title = _bandwidth_title(ceiling)
    fig = charts.figure(f"Misaligned {name} copy: effective bandwidth vs offset", "offset (elements)",
                        y_title, caption)
    offsets = list(OFFSETS)
    charts.line(fig, offsets, [useful_fraction(1, o, name) * scale for o in offsets],
                "sector model (each warp on its own, no cache reuse)", 1, line_shape="hv")
    if data is not None:
        data = data.sort_values("offset")
        charts.line(fig, data.offset, data.gbps, f"{_who('coalescing.offset')}: effective GB/s", 0, dash="solid",
                    error_y=reference.spread(data, "gbps"))
    else:
        cited.no_data(fig, "No GPU timing to show here: the dashed line is the sector model", "strided copy")
    _ceiling_lines(fig, ceiling, datasheet)
    if chosen is not None:
        fig.add_scatter(x=[chosen], y=[useful_fraction(1, chosen, name) * scale], mode="markers",
                        name=f"your offset ({chosen}): model", marker={"symbol": "star", "size": 16,
                                                                        "color": charts.PALETTE[3]})
    fig.update_yaxes(rangemode="tozero")
    return fig


def layout_figure(layout="array of structs") -> go.Figure:
    """Sectors per request of each memory access of a layout's kernel, counted by the microscope."""
    layout = check_layout(layout)
    table = layout_counts(layout)
    fig = charts.figure(f"{layout}: sectors per warp request of each access",
                        "access (source line, op, array)", "sectors per warp request", charts.source_caption(
                            "counted", f"the microscope ran the {layout} kernel on a small input; "
                            "dashed: the sector model"))
    labels = [_access_label(r) for r in table.itertuples()]
    fig.add_bar(x=labels, y=list(table.sectors_per_request), name="counted by the microscope",
                marker={"color": charts.PALETTE[0], "pattern": {"shape": ""}},
                customdata=list(table.source),
                hovertemplate="%{x}<br>%{customdata}<br>%{y} sectors<extra></extra>")
    fig.add_scatter(x=labels, y=[layout_model(layout)] * len(labels), mode="lines+markers",
                    name="sector model", line={"dash": "dash", "color": charts.PALETTE[1]},
                    marker={"symbol": "square"})
    charts.hline(fig, ideal_sectors_per_request("float32"), "ideal for float32: 4", faint=True)
    fig.update_yaxes(range=[0, WARP_SIZE + 2])
    return fig


def layout_bandwidth_figure(progress=None) -> go.Figure:
    """Effective GB/s of the four layout kernels (measured, recorded or none) between the model's bounds."""
    data, ceiling, datasheet, caption = _bandwidth_data("coalescing.layout", None, progress)
    scale = ceiling or 1.0
    fig = charts.figure("Array of structs vs struct of arrays, row vs column traversal", "kernel",
                        _bandwidth_title(ceiling), caption)
    fig.update_xaxes(categoryorder="array", categoryarray=list(LAYOUTS))
    if data is not None:
        fig.add_bar(x=list(data.layout), y=list(data.gbps), error_y=reference.spread(data, "gbps"),
                    name=f"{_who('coalescing.layout')}: GB/s",  # short: the axis says which bytes
                    marker={"color": charts.PALETTE[5], "line": {"color": "#000"}})
    else:
        cited.no_data(fig, "No GPU timing to show here: the markers are the model's bounds", "strided copy")
    bounds = layout_model_fractions()
    fig.add_scatter(x=list(bounds.layout), y=list(bounds.no_reuse * scale), mode="markers",
                    name="sector model, no cache reuse", marker={"symbol": "triangle-down", "size": 13,
                                                                 "color": charts.PALETTE[3]})
    fig.add_scatter(x=list(bounds.layout), y=list(bounds.full_reuse * scale), mode="markers",
                    name="sector model, perfect reuse", marker={"symbol": "triangle-up", "size": 13,
                                                                "color": charts.PALETTE[2]})
    _ceiling_lines(fig, ceiling, datasheet)
    fig.update_yaxes(rangemode="tozero")
    return fig


def picture_widget(stride=8, offset=0, dtype="float32", threaded=True):
    from gpucourse.viz.widgets import LiveChart

    return LiveChart(_controls(stride=stride, offset=offset, dtype=dtype), warp_figure, threaded=threaded,
                     description="Stride, offset and element size → the sectors one warp touches.")


def stride_widget(dtype="float32", stride=8, threaded=True):
    from gpucourse.viz.widgets import LiveChart

    return LiveChart(_controls(dtype=dtype, stride=stride), stride_figure, threaded=threaded,
                     description="Effective bandwidth of the strided copy; the star marks your stride.")


def sectors_widget(dtype="float32", offset=0, threaded=True):
    from gpucourse.viz.widgets import LiveChart

    return LiveChart(_controls(dtype=dtype, offset=offset), sectors_figure, threaded=threaded,
                     description="Sectors per warp request, counted by the microscope for every stride.")


def offset_widget(dtype="float32", offset=1, threaded=True):
    from gpucourse.viz.widgets import LiveChart

    return LiveChart(_controls(dtype=dtype, offset=offset), offset_figure, threaded=threaded,
                     description="Effective bandwidth of a copy that starts `offset` elements late.")


def layout_widget(layout="array of structs", threaded=True):
    from gpucourse.viz.widgets import LiveChart

    return LiveChart(_controls(layout=layout), layout_figure, threaded=threaded,
                     description="Each memory access of the chosen kernel, as the microscope counts it.")


# --- within reach of the ceiling: more work per thread ------------------------------------------------------


def work_figure(elements_per_thread=4, bytes_per_load=8) -> go.Figure:
    """Effective bandwidth vs bytes in flight per SM: the model (calibrated on the H200 recording), and on a
    GPU the measured rungs; the chosen rung's microscope counts in the title."""
    from gpucourse.measure import harness

    if bytes_per_load == 16:  # CUDA C's float4: in the model only, no kernel here can issue it
        k, width = validate.integer("elements_per_thread", elements_per_thread, minimum=1), 16
        counts = {"bytes_in_flight_per_sm": inflight.bytes_in_flight_per_sm(inflight.MAX_THREADS_PER_SM, k, width)}
        title = (f"{k} element(s) × 16 B per thread: the model only (CUDA C's float4, LDG.E.128; numba-cuda's "
                 "array indexing never issues one)")
    else:
        k, width = check_rung(elements_per_thread, bytes_per_load)
        counts = rung_counts(k, width)
        title = (f"{k} element(s) × {width} B per thread: {counts['sectors_per_request']:.0f} sectors/request, "
                 f"{counts['bytes_per_thread']} B per thread, {counts['load_requests']} load requests for "
                 f"{counts['bytes_copied']} B")
    cal = inflight.h200_calibration()
    rec = None
    if runtime.is_gpu():
        data = _measured_rungs(harness.LIVE_MIN_TOTAL_MS)
        caption = charts.source_caption("measured", f"{runtime.device().name}, by the course harness (1 GiB each "
                                        "way); the model line: Little's law calibrated on the course's H200 "
                                        "recording (a model, not this GPU)")
    else:  # the rungs' recording (sweep coalescing.work) where one exists; else the model alone, and it says so
        rec = reference.load(WORK_SWEEP)
        data = rec.data if rec is not None else None
        model_line = "the model line: Little's law, calibrated on one recorded point: " + (
            cal.source if cal else "no recording here")
        caption = (charts.source_caption("recorded", f"the rungs: {rec.caption(bars=True)}; {model_line}")
                   if rec is not None else
                   charts.source_caption("model", f"no recording of the rungs yet ({WORK_SWEEP}: run `make record` "
                                         f"on a GPU); {model_line}"))
    fig = charts.figure(title, "bytes of reads in flight per SM (KiB, log scale)",
                        "effective GB/s (useful bytes, read + write)", caption)
    if cal is None:
        charts.no_data(fig, "no H200 recording here: the model has nothing to be calibrated on")
        return fig
    flights = [2 ** e for e in range(12, 19)]
    model = [inflight.predicted_gbps(f, cal.sm_count, cal.latency_ns, cal.ceiling_gbps) for f in flights]
    charts.line(fig, [f / 1024 for f in flights], model,
                f"model: min(2 × bytes in flight × {cal.sm_count} SMs ÷ {cal.latency_ns:.0f} ns, ceiling)", 1,
                dash="dash")
    charts.hline(fig, cal.ceiling_gbps, f"{cal.device} copy ceiling {cal.ceiling_gbps:.0f} GB/s (recorded)")
    fig.add_scatter(x=[8], y=[cal.one_element_gbps], mode="markers", name=f"{cal.device}, 1 × 4 B (recorded)",
                    marker={"symbol": "circle", "size": 11, "color": charts.PALETTE[0]})
    if data is not None:
        flight = [inflight.bytes_in_flight_per_sm(inflight.MAX_THREADS_PER_SM, r.elements_per_thread,
                                                  r.bytes_per_load) / 1024 for r in data.itertuples()]
        charts.line(fig, flight, data.gbps, ("measured now" if runtime.is_gpu() else f"recorded on {rec.device}")
                    + ": the rungs (1×4, 4×4, 1×8, 4×8 B)", 0, mode="markers", error_y=reference.spread(data, "gbps"))
    chosen = counts["bytes_in_flight_per_sm"]
    fig.add_scatter(x=[chosen / 1024], y=[inflight.predicted_gbps(chosen, cal.sm_count, cal.latency_ns,
                                                                  cal.ceiling_gbps)],
                    mode="markers", name=f"your rung: model ({chosen // 1024} KiB/SM)",
                    marker={"symbol": "star", "size": 16, "color": charts.PALETTE[3]})
    fig.update_xaxes(type="log")
    fig.update_yaxes(rangemode="tozero")
    # no GPU and no recording of the rungs: the caption says why nothing published stands in for them
    return fig if data is not None or runtime.is_gpu() else cited.because(fig, "work per thread")


def work_widget(elements_per_thread=4, bytes_per_load=8, threaded=True):
    import ipywidgets as w

    from gpucourse.viz.widgets import LiveChart

    controls = {"elements_per_thread": w.Dropdown(options=[1, 4], value=elements_per_thread,
                                                  description="elements"),
                "bytes_per_load": w.Dropdown(options=[4, 8, 16], value=bytes_per_load, description="bytes/load")}
    return LiveChart(controls, work_figure, threaded=threaded,
                     description="Elements per thread and bytes per load → bytes in flight, the model, the counts.")


def measured_stride_text(dtype="float32", stride=32) -> str | None:
    """GPU mode, after the stride chart measured: stride ``stride`` as a fraction of stride 1 and of the
    copy ceiling ("1/15.4 of stride 1, 1/25 of the copy ceiling"); None if the chart has not measured it."""
    data = _MEASURED.get(("coalescing.stride", dtype_name(dtype)))
    if data is None:
        return None
    by_stride = data.set_index("stride")
    if stride not in by_stride.index or 1 not in by_stride.index:
        return None
    gbps, base = float(by_stride.loc[stride, "gbps"]), float(by_stride.loc[1, "gbps"])
    ceiling = float(by_stride.loc[stride, "copy_ceiling_gbps"])
    return (f"1/{base / gbps:.1f} of stride 1 and 1/{ceiling / gbps:.0f} of the copy ceiling at stride {stride} "
            f"({gbps:,.0f} GB/s)")


def measured_rung_text(elements_per_thread=4, bytes_per_load=8) -> str | None:
    """GPU mode, after the work chart measured: that rung's GB/s and fraction of the copy ceiling, or None."""
    from gpucourse.lessons.coalescing import experiments

    data = experiments._MEASURED_RUNGS.get("rungs")
    if data is None:
        return None
    row = data[(data.elements_per_thread == elements_per_thread) & (data.bytes_per_load == bytes_per_load)]
    if not len(row):
        return None
    gbps, ceiling = float(row.gbps.iloc[0]), float(row.copy_ceiling_gbps.iloc[0])
    return f"{gbps / ceiling:.2f} of the copy ceiling ({gbps:,.0f} of {ceiling:,.0f} GB/s, measured now)"


def measured_offset_text(dtype="float32", offset=1) -> str | None:
    """GPU mode, after the offset chart measured: offset ``offset`` as a fraction of the aligned copy; else None."""
    data = _MEASURED.get(("coalescing.offset", dtype_name(dtype)))
    if data is None:
        return None
    by_offset = data.set_index("offset")
    if offset not in by_offset.index or 0 not in by_offset.index:
        return None
    ratio = float(by_offset.loc[offset, "gbps"]) / float(by_offset.loc[0, "gbps"])
    return f"{ratio:.0%} of the aligned bandwidth at offset {offset}"
