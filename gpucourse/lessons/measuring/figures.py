"""Lesson 00 "Start here: measuring GPU code": charts and widgets."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from gpucourse import validate
from gpucourse.lessons.measuring.experiments import (
    ROOF_PRECISIONS,
    async_analogy,
    async_pitfall,
    ceilings,
    roof_precisions,
)
from gpucourse.measure import reference, runtime
from gpucourse.viz import charts, cited


def async_figure(data: pd.DataFrame, source: str) -> go.Figure:
    medians = data.groupby("method", sort=False)["ms"].median()
    ways = {2: "two", 3: "three"}.get(len(medians), str(len(medians)))
    fig = charts.figure(f"The same work, timed {ways} ways", "", "time (ms, log scale)", source)
    fig.add_bar(x=list(medians.index), y=list(medians.values), marker_color=charts.PALETTE[: len(medians)],
                text=[f"{v:.3g} ms" for v in medians.values], textposition="outside", name="median time")
    fig.update_yaxes(type="log")
    return fig


def async_pitfall_figure() -> go.Figure:
    if runtime.is_gpu():
        return async_figure(async_pitfall(), charts.source_caption("measured", runtime.device().name))
    rec = reference.load("measuring.async_pitfall")
    if rec is not None:
        return async_figure(rec.data, charts.source_caption("recorded", rec.caption()))
    data = async_analogy()
    fig = async_figure(data, "")
    return cited.because(fig, "launch timing", "CPU analogy, not a GPU timing: a background thread stands in for "
                         "the GPU (no GPU here and no recording yet)")


def roofline_figure(precision: str | None = None) -> go.Figure:
    """Attainable TFLOP/s vs arithmetic intensity: min(compute ceiling, intensity × bandwidth). ``precision``:
    the matmul ceiling drawn (default: this GPU's tensor-core format, ``roof_precisions``); on a GPU only
    that precision's matmul is measured."""
    precision = roof_precisions()[0][0] if precision is None else precision
    precision = validate.choice("precision", precision, list(ROOF_PRECISIONS))
    if runtime.is_gpu():
        data, source = ceilings((precision,)), charts.source_caption("measured", runtime.device().name)
    else:
        rec = reference.load("measuring.ceilings")
        data = rec.data if rec is not None else None
        source = (charts.source_caption("recorded", rec.caption()) if rec is not None else
                  "Datasheet lines only (NVIDIA H200 SXM): no GPU here and no recording of measured ceilings yet")
    intensity = np.logspace(-1, 4, 200)
    fig = charts.figure(f"Roofline ({precision} matmul ceiling)", "arithmetic intensity (FLOP/byte, log)",
                        "attainable TFLOP/s (log)", source)
    quantity = f"{precision} matmul"
    curves = []
    if data is not None and not (data.quantity == quantity).any():
        data = None  # the recording has no ceiling of this precision: datasheet lines only
    if data is not None:
        bw = float(data.loc[data.quantity == "copy bandwidth", "measured"].iloc[0])
        peak = float(data.loc[data.quantity == quantity, "measured"].iloc[0])
        if np.isfinite(peak):
            curves.append(("measured ceilings", bw, peak, 0, None))
        else:  # no torch on this GPU's stack: the datasheet roof only, and the reason in the caption
            from gpucourse.measure.ceilings import TORCH_MISSING

            charts.set_source(fig, f"{charts.caption_of(fig).rstrip('. ')}. {TORCH_MISSING}")
        sheet_bw = data.loc[data.quantity == "copy bandwidth", "datasheet"].iloc[0]
        sheet_peak = data.loc[data.quantity == quantity, "datasheet"].iloc[0]
    else:
        sheet_bw = runtime.DATASHEET_BANDWIDTH_GBPS["NVIDIA H200"]
        sheet_peak = runtime.datasheet_tflops("NVIDIA H200").get(precision)
    if sheet_bw is not None and sheet_peak is not None and pd.notna(sheet_bw) and pd.notna(sheet_peak):
        curves.append(("datasheet", float(sheet_bw), float(sheet_peak), 1, "dot"))
    roof = cited.h200_roof(precision) if data is None else None  # no GPU, no recording: published H200 figures
    if roof is not None:
        curves.append((roof[2].split(":")[0], roof[0], roof[1], 3, "dash"))
    ridges = []
    for name, bw_gbps, peak_tflops, index, dash in curves:
        attainable = np.minimum(peak_tflops, intensity * bw_gbps / 1e3)
        charts.line(fig, intensity, attainable, f"{name}: {bw_gbps:.0f} GB/s, {peak_tflops:.0f} TFLOP/s", index,
                    dash=dash, mode="lines")
        ridges.append((name, peak_tflops * 1e3 / bw_gbps, peak_tflops))
    if ridges:
        # the ridges lie a few pixels apart (measured and datasheet roofs differ by ~20 %): one label names them all
        _, ridge, peak = ridges[0]
        text = "<br>".join(f"ridge ≈ {r:.0f} FLOP/B ({name})" for name, r, _ in ridges)
        fig.add_annotation(x=np.log10(ridge), y=np.log10(peak), text=text, showarrow=True, arrowhead=1,
                           ax=40, ay=30 + 9 * len(ridges), align="left")
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    if data is None and roof is not None:
        return cited.cite(fig, f"Dotted: the NVIDIA H200 SXM datasheet. Dashed: {roof[2]}", cited.STREAM, cited.MAMF)
    if data is None:
        return cited.because(fig, "fp32 roofline", "Datasheet lines only (NVIDIA H200 SXM): no GPU here and no "
                             "recording of measured ceilings yet")
    return fig
