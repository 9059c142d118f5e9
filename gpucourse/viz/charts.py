"""Figure builders every lesson uses: one colour-blind-safe palette, titles, units, provenance.

Every chart says where its numbers came from with a caption under the plot:
  measured now on <device>   ·   recorded on <device>, <date> (<file>)
  counted by the microscope  ·   model (what the hardware rule predicts)
and carries its data as a table (``data_table``) for readers who cannot use the chart.
"""

from __future__ import annotations

import html
import textwrap

import pandas as pd
import plotly.graph_objects as go

from gpucourse.measure import runtime

# Okabe & Ito (2008): distinguishable with every common form of colour blindness.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]
# Shapes and dashes so that no series relies on colour alone.
MARKERS = ["circle", "square", "diamond", "triangle-up", "x", "cross", "star", "triangle-down"]
DASHES = ["solid", "dash", "dot", "dashdot", "longdash", "longdashdot"]

SOURCES = ("measured", "recorded", "counted", "model", "none")


def source_caption(kind: str, detail: str = "") -> str:
    """The provenance line under a chart."""
    text = {
        "measured": "Measured now",
        "recorded": "Recorded on a real GPU",
        "counted": "Counted by the microscope (exact, not a timing)",
        "model": "Model: what the hardware rule predicts",
        "none": "No data",
    }[kind]
    return f"{text}{': ' + detail if detail else ''}"


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


CAPTION_CHARS = 100  # a caption line longer than this ran off the right edge of a 700-px-wide chart


def measured_here(source: str) -> bool:
    return source.lower().startswith("measured now")


def sharing_note(source: str) -> str:
    """For a timing measured now on a GPU: whether other processes were on it (gpuinfo)."""
    if not (runtime.is_gpu() and measured_here(source)):
        return ""
    from gpucourse.measure import gpuinfo

    return gpuinfo.gpu_sharing().note()


def set_source(fig: go.Figure, source: str) -> None:
    fig.layout.annotations = [a for a in fig.layout.annotations if a.name != "source"]
    from gpucourse.measure import rehearsal

    if rehearsal.active():  # a rehearsal's numbers are never shown as measurements
        source = rehearsal.caption(source)
    note = sharing_note(source) if not rehearsal.active() else ""
    if note:
        source = f"{source} · {note}"
    lines = textwrap.wrap(source, CAPTION_CHARS, break_long_words=False, break_on_hyphens=False) or [""]
    fig.add_annotation(
        name="source", text="<br>".join(html.escape(line) for line in lines), showarrow=False,
        xref="paper", yref="paper", x=0, y=0, yshift=-62, xanchor="left", yanchor="top", align="left",
        font={"size": 11, "color": "#444"},
    )


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
    fig.add_hline(
        y=y, line_dash="dot" if faint else "dash", line_color="#999" if faint else "#000",
        annotation_text=label, annotation_position="top left", opacity=0.6 if faint else 0.9,
    )
    return fig


def rules(fig: go.Figure, axis: str, positions, **line) -> go.Figure:
    """Full-width (axis "y") or full-height (axis "x") lines at ``positions``, added in one layout update:
    the same shapes as one ``add_hline``/``add_vline`` per position, whose plotly bookkeeping cost ~20 ms each
    (block edges redrawn at every move of a widget: half of lesson 00a's explorer, tools/learner_cost.py)."""
    if axis == "y":
        shapes = [{"type": "line", "xref": "x domain", "x0": 0, "x1": 1, "yref": "y", "y0": p, "y1": p, "line": line}
                  for p in positions]
    else:
        shapes = [{"type": "line", "xref": "x", "x0": p, "x1": p, "yref": "y domain", "y0": 0, "y1": 1, "line": line}
                  for p in positions]
    fig.update_layout(shapes=list(fig.layout.shapes) + shapes)
    return fig


def no_data(fig: go.Figure, message: str) -> go.Figure:
    """Say plainly on the chart that there is nothing to show (nothing is ever invented)."""
    fig.add_annotation(
        text=html.escape(message), showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5,
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
