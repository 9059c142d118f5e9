"""Figure builders every lesson uses: one colour-blind-safe palette, titles, units, provenance.

Every chart says where its numbers came from with a caption under the plot:
  measured now on <device>   ·   recorded on <device>, <date> (<file>)
  counted by the microscope  ·   model (what the hardware rule predicts)
and carries its data as a table (``data_table``) for readers who cannot use the chart.
"""

from __future__ import annotations

import html

import pandas as pd
import plotly.graph_objects as go

from gpucourse.chartlayout import (  # noqa: F401  the layout's names stay charts' too (charts.fit, charts.rules...)
    CAPTION_CHARS,
    CEILING_LABEL,
    FIGURE_WIDTH_PX,
    LEGEND_CHAR_PX,
    LEGEND_PAD_PX,
    LEGEND_ROW_PX,
    LEGEND_SYMBOL_PX,
    NOTE_LINE_PX,
    SOURCES,
    TITLE_LINE_PX,
    TITLE_TOP_PX,
    fit,
    legend_below,
    legend_px,
    legend_rows,
    note_text,
    place_caption,
    rules,
    source_caption,
)
from gpucourse.measure import runtime

# Okabe & Ito (2008): distinguishable with every common form of colour blindness.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]
# Shapes and dashes so that no series relies on colour alone.
MARKERS = ["circle", "square", "diamond", "triangle-up", "x", "cross", "star", "triangle-down"]
DASHES = ["solid", "dash", "dot", "dashdot", "longdash", "longdashdot"]


def figure(title: str, x_title: str, y_title: str, source: str, *, height: int = 420) -> go.Figure:
    """An empty figure with the course's layout; ``source`` is the caption (see source_caption)."""
    fig = go.Figure()
    fig.update_layout(
        title={"text": title, "x": 0.02, "y": 0.97, "yanchor": "top"},
        xaxis_title=x_title,
        yaxis_title=y_title,
        colorway=PALETTE,
        template="plotly_white",
        height=height,
        margin={"l": 70, "r": 20, "t": 100, "b": 105},
        # legend above the plot, caption below the x-axis title: they never overlap
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
        font={"size": 13},
    )
    set_source(fig, source)
    return fig


# Text sizes as Chromium draws the course's fonts (measured in the browser tests' JupyterLab, where a
# chart is 964-968 px wide at a 1400-px window): ``fit`` sizes the margins from them.

def measured_here(source: str) -> bool:
    return source.lower().startswith("measured now")


def sharing_note(source: str) -> str:
    """For a timing measured now on a GPU: whether other processes were on it (gpuinfo)."""
    if not (runtime.is_gpu() and measured_here(source)):
        return ""
    from gpucourse.measure import gpuinfo

    return gpuinfo.gpu_sharing().note()


def set_source(fig: go.Figure, source: str) -> None:
    """The caption under the plot (``chartlayout.place_caption``), marked in a rehearsal and, for a timing measured
    now, with whether the GPU was shared; a caption set again keeps the place the first one was given."""
    from gpucourse.measure import rehearsal

    if rehearsal.active():  # a rehearsal's numbers are never shown as measurements
        source = rehearsal.caption(source)
    note = sharing_note(source) if not rehearsal.active() else ""
    if note:
        source = f"{source} · {note}"
    place_caption(fig, source)


def line(fig: go.Figure, x, y, name: str, index: int = 0, *, dash: str | None = None, **kwargs) -> go.Figure:
    """A series with its own colour, marker and dash (never colour alone)."""
    kwargs.setdefault("mode", "lines+markers")
    fig.add_scatter(
        x=list(x), y=list(y), name=name,
        line={"color": PALETTE[index % len(PALETTE)], "dash": dash or DASHES[index % len(DASHES)]},
        marker={"symbol": MARKERS[index % len(MARKERS)], "size": 7}, **kwargs,
    )
    return fig


def hline(fig: go.Figure, y: float, label: str, *, faint: bool = False) -> go.Figure:
    """A ceiling (measured copy bandwidth, datasheet figure) as a labelled horizontal line."""
    fig.add_hline(y=y, line_dash="dot" if faint else "dash", line_color="#999" if faint else "#000",
                  opacity=0.6 if faint else 0.9)
    # the label as an annotation on the line's left end; its name keeps the value, so that ``fit`` can
    # place it on a log axis (set after this call, often), where plotly wants log10(y): add_hline's own
    # label sat at log10's place of y, near 1, for every line
    fig.add_annotation(name=f"{CEILING_LABEL}{float(y)!r}", text=label, showarrow=False, xref="x domain", x=0,
                       xanchor="left", yref="y", y=y, yanchor="bottom")
    return fig


def no_data(fig: go.Figure, message: str, *, y: float = 0.5, yref: str = "paper") -> go.Figure:
    """Say plainly on the chart that there is nothing to show (nothing is ever invented); ``y`` (in
    ``yref``'s units): how high on the plot, clear of the chart's labelled lines."""
    fig.add_annotation(
        text=html.escape(message), showarrow=False, xref="paper", yref=yref, x=0.5, y=y,
        font={"size": 14, "color": "#444"},
    )
    return fig


def data_table(fig: go.Figure) -> pd.DataFrame:
    """Every series of the chart as rows (series, x, y): the chart's text alternative."""
    rows = []
    for trace in fig.data:
        xs = getattr(trace, "x", None)
        ys = getattr(trace, "y", None)
        if xs is None or ys is None:
            continue
        rows.extend({"series": trace.name, "x": x, "y": y} for x, y in zip(xs, ys))
    return pd.DataFrame(rows, columns=["series", "x", "y"])


def caption_of(fig: go.Figure) -> str:
    for annotation in fig.layout.annotations:
        if annotation.name == "source":
            return html.unescape(annotation.text.replace("<br>", " "))
    return ""
