"""The layout of a course chart, with no course state (plotly alone): the provenance caption's words and its
place under the plot, margins that fit every text around the plot, full-width rules.

Below every other layer that draws: ``viz.charts`` builds the course's charts on it (and re-exports its names:
``charts.fit``, ``charts.source_caption``...) and adds what needs the measuring layer (a rehearsal's mark, a shared
GPU's note); the microscope draws its pictures with it (``microscope/pictures.py``), so it imports no ``viz``.
"""

from __future__ import annotations

import html
import math
import textwrap

import plotly.graph_objects as go

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


FIGURE_WIDTH_PX = 860  # the width legend rows are counted for (narrower than the lab's: rows to spare)
NOTE_LINE_PX = 16  # one line of an 11-px note or caption
LEGEND_ROW_PX = 20  # one row of a horizontal legend (13-px text)
LEGEND_PAD_PX = 10  # the legend box's padding
LEGEND_CHAR_PX = 6.5  # a legend item is its symbol (40 px) and its text
LEGEND_SYMBOL_PX = 40
TITLE_TOP_PX = 10  # the title's first line starts this far below the figure's top
TITLE_LINE_PX = 24  # each further line of the title (17-px text)


def _lines(text: str | None) -> int:
    return (text or "").count("<br>") + 1


def legend_rows(fig: go.Figure, width_px: float = FIGURE_WIDTH_PX) -> int:
    """The rows a horizontal legend takes across ``width_px``: one if every item fits, else plotly's
    grid (as many columns of the widest item as fit)."""
    if fig.layout.showlegend is False:
        return 0
    names = [t.name or "" for t in fig.data if t.showlegend is not False and t.name and t.type != "heatmap"]
    if not names or (len(fig.data) == 1 and fig.layout.showlegend is None):
        return 0  # plotly shows no legend for a figure of one trace unless asked to
    widths = [LEGEND_SYMBOL_PX + LEGEND_CHAR_PX * len(name) for name in names]
    if sum(widths) <= width_px:
        return 1
    columns = max(1, int(width_px // max(widths)))
    return -(-len(names) // columns)


def legend_px(fig: go.Figure, width_px: float = FIGURE_WIDTH_PX) -> int:
    rows = legend_rows(fig, width_px)
    return LEGEND_ROW_PX * rows + LEGEND_PAD_PX if rows else 0


def _below_plot(annotation) -> bool:
    return annotation.yref == "paper" and annotation.y == 0 and annotation.yanchor == "top" \
        and (annotation.yshift or 0) < 0


def _above_plot(annotation) -> bool:
    """A note that stands on the plot's top edge: a subplot's title, a prediction not yet written."""
    return annotation.yref == "paper" and annotation.y is not None and annotation.y >= 1 \
        and annotation.yanchor == "bottom" and not annotation.showarrow


def _standard_legend(fig: go.Figure) -> bool:
    legend = fig.layout.legend
    return legend.orientation == "h" and legend.yref in (None, "paper") and legend.yanchor == "bottom" \
        and (legend.y or 0) >= 1


def fit(fig: go.Figure) -> go.Figure:
    """Room for every text around the plot, in pixels, so that none overlaps another or leaves the figure.

    Above the plot, from the top: the title (its lines counted), the legend (its rows counted for
    ``FIGURE_WIDTH_PX``), then the notes standing on the plot (subplot titles, predictions). Below: the
    caption and any other notes hung under the plot (``yshift``), each line counted. A margin that is
    too small grows, and the figure's height with it (the plot keeps its size); nothing shrinks, so
    calling it again changes nothing. ``set_source`` calls it, and a LiveChart before it draws."""
    _place_ceiling_labels(fig)
    height = fig.layout.height or 450
    margin = fig.layout.margin
    top, bottom = margin.t if margin.t is not None else 100, margin.b if margin.b is not None else 80
    title = fig.layout.title
    title_lines = _lines(title.text) if title.text else 0
    if title_lines and title.yref is None:  # the course's title (an explicit yref is a lesson's own layout)
        # plotly lifts a title of several lines by about 14 px whatever its yanchor: pad it down by as much
        title.update(y=1, yanchor="top", pad={"t": TITLE_TOP_PX + (14 if title_lines > 1 else 0)})
    title_bottom = TITLE_TOP_PX + 19 + TITLE_LINE_PX * (title_lines - 1) if title_lines else 0
    above = [a for a in fig.layout.annotations if _above_plot(a)]
    band = max((NOTE_LINE_PX * _lines(a.text) + (a.yshift or 0) for a in above), default=0)
    # the course's layout (legend above the plot), or no legend and the course's title; a lesson that
    # places its legend itself sizes its own top margin
    standard = _standard_legend(fig) or (title.yref is None and legend_rows(fig) == 0)
    legend = legend_px(fig) if _standard_legend(fig) else 0
    needed_top = title_bottom + 8 + legend + (band + 6 if band else 0) + 6
    below = [a for a in fig.layout.annotations if _below_plot(a)]
    needed_bottom = max((-(a.yshift or 0) + NOTE_LINE_PX * _lines(a.text) + 8 for a in below), default=0)
    grow_top = max(0, needed_top - top) if standard else 0
    grow_bottom = max(0, needed_bottom - bottom)
    if grow_top or grow_bottom:
        height, top, bottom = height + grow_top + grow_bottom, top + grow_top, bottom + grow_bottom
        fig.update_layout(height=height, margin={"t": top, "b": bottom})
    if _legend_below(fig) and below and (grow_top or grow_bottom):
        # the legend stands between the plot and the first note: keep it there in the grown figure
        first = min(-(a.yshift or 0) for a in below)
        under_px = first - legend_px(fig) - 8
        fig.layout.legend.y = (bottom - under_px) / height
    if _standard_legend(fig):
        plot_px = max(1, height - top - bottom)
        fig.layout.legend.y = 1 + ((band + 6) if band else 6) / plot_px
    return fig


def _legend_below(fig: go.Figure) -> bool:
    legend = fig.layout.legend
    return legend.yref == "container" and legend.yanchor == "top" and legend.y is not None and legend.y < 0.5


def legend_below(fig: go.Figure, under_px: int = 64) -> go.Figure:
    """The legend under the plot, ``under_px`` below it (under the x-axis titles), for charts whose
    top edge is taken (subplot titles); the caption and the other notes hung under the plot go under
    the legend, one under another, and the bottom margin and the height grow to hold them all."""
    notes = sorted((a for a in fig.layout.annotations if _below_plot(a)), key=lambda a: -(a.yshift or 0))
    shift = under_px + legend_px(fig) + 8
    for note in notes:
        note.yshift = -shift
        shift += NOTE_LINE_PX * _lines(note.text) + 4
    height, bottom = fig.layout.height or 450, fig.layout.margin.b or 0
    needed = shift + 8
    if needed > bottom:
        height, bottom = height + needed - bottom, needed
        fig.update_layout(height=height, margin={"b": bottom})
    fig.update_layout(legend={"orientation": "h", "yref": "container", "y": (bottom - under_px) / height,
                              "yanchor": "top", "x": 0})
    return fig


def note_text(text: str) -> str:
    """Plain ``text`` as a note under a chart: escaped, in lines of at most CAPTION_CHARS."""
    lines = textwrap.wrap(text, CAPTION_CHARS, break_long_words=False, break_on_hyphens=False) or [""]
    return "<br>".join(html.escape(line) for line in lines)


CAPTION_CHARS = 100  # a caption line longer than this ran off the right edge of a 700-px-wide chart

def place_caption(fig: go.Figure, text: str) -> go.Figure:
    """``text`` as the provenance caption under the plot (replacing any), then room for every text (``fit``); a
    caption placed again keeps the place the first one was given (under a legend, say)."""
    yshift = next((a.yshift for a in fig.layout.annotations if a.name == "source" and _below_plot(a)), -62)
    fig.layout.annotations = [a for a in fig.layout.annotations if a.name != "source"]
    fig.add_annotation(
        name="source", text=note_text(text), showarrow=False,
        xref="paper", yref="paper", x=0, y=0, yshift=yshift, xanchor="left", yanchor="top", align="left",
        font={"size": 11, "color": "#444"},
    )
    return fit(fig)  # the caption's lines (and the title, legend) get their room


CEILING_LABEL = "ceiling at "


def _place_ceiling_labels(fig: go.Figure) -> None:
    log = fig.layout.yaxis.type == "log"
    for annotation in fig.layout.annotations:
        if (annotation.name or "").startswith(CEILING_LABEL) and annotation.yref == "y":
            value = float(annotation.name[len(CEILING_LABEL):])
            annotation.y = math.log10(value) if log and value > 0 else value


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
