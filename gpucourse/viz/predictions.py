"""The learner's own prediction, read back after the reveal: predict, run, compare.

    predictions.read_back(prediction_stride_32_fraction, model="1/8 (8 sectors per request)",
                          stands_in="the microscope's sector counts on the chart above")
    predictions.mark(fig, prediction_interleaved_half, x=0.5, unit="×")   # a number: a marker on the chart

``read_back`` is one line: "You predicted X; the model says Y; the measurement says Z" — the
measurement only in GPU mode; in the simulator the line says what stands in for it. A prediction
left as ``...`` or ``"..."`` gets a gentle nudge (never an error): the reveal still shows.
"""

from __future__ import annotations

import functools
import html
import numbers
from collections.abc import Callable

import plotly.graph_objects as go

from gpucourse.measure import runtime
from gpucourse.viz import charts

NUDGE = ("You have not written a prediction yet. It is worth it: scroll up to the Predict cell, "
         "write your guess, run it, then run this cell again.")
PREDICTION_NAME = "your prediction"


def untouched(value) -> bool:
    """Still the placeholder the lesson wrote (``...``, ``"..."``, empty), or a dict/list of only those."""
    if value is Ellipsis or value is None:
        return True
    if isinstance(value, str):
        return value.strip() in ("", "...", "…")
    if isinstance(value, dict):
        return all(untouched(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(untouched(v) for v in value)
    return False


def _format(value, unit: str = "") -> str:
    if isinstance(value, dict):
        return "; ".join(f"{key}: {'—' if untouched(v) else _format(v, unit)}" for key, v in value.items())
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, numbers.Real):
        text = f"{value:.3g}" if isinstance(value, float) else str(value)
        return f"{text} {unit}".strip() if unit and unit != "×" else f"{text}{unit}"
    return str(value)


class ReadBack:
    """One displayable line (HTML in a notebook, text elsewhere)."""

    def __init__(self, text: str, nudge: bool):
        self.text = text
        self.nudge = nudge

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return self.text

    def _repr_html_(self) -> str:
        style = "border-left:4px solid #E69F00" if self.nudge else "border-left:4px solid #009E73"
        return (f'<p class="gpucourse-readback" style="{style};padding:0.2em 0.6em">'
                f"{html.escape(self.text)}</p>")


def _caption(shown) -> str:
    """What a chart (a figure, or a LiveChart's figure) says its numbers are."""
    from gpucourse.viz.charts import caption_of

    return caption_of(getattr(shown, "figure", shown))


def read_back(prediction, model, *, measured=None, stands_in="the chart above", counted: str | None = None,
              unit: str = "") -> ReadBack:
    """"You predicted X; the model says Y; the measurement says Z" (Z on a GPU only).

    ``model``: the answer of the lesson's model (or hardware rule). ``measured``: the value measured
    now, used in GPU mode only (a callable is called then, so the simulator never runs it).
    ``stands_in``: what the simulator shows instead of a measurement: words, or the chart itself
    (a figure or LiveChart), whose source caption is then quoted. ``counted``: an exact count that
    holds in both modes (the microscope's, the calculator's), said instead of a measurement.
    """
    said = f"the model says {_format(model, unit)}"
    if counted is not None:
        tail = counted
    elif runtime.is_gpu():
        value = measured() if callable(measured) else measured
        tail = (f"the measurement says {_format(value, unit)}" if value is not None
                else "the measurement is on the chart above")
    elif isinstance(stands_in, str):
        tail = f"no GPU here, so {stands_in} stands in for a measurement"
    else:
        tail = f"no GPU here; the chart above shows, in place of a measurement: {_caption(stands_in)}"
    if untouched(prediction):
        return ReadBack(f"{NUDGE} (For comparison: {said}; {tail}.)", nudge=True)
    return ReadBack(f"You predicted {_format(prediction, unit)}; {said}; {tail}.", nudge=False)


def mark(fig: go.Figure, prediction, *, x=None, label: str = "", vertical: bool = False, unit: str = "") -> go.Figure:
    """The learner's number on the chart: a star at (x, prediction), or a labelled line across the
    chart when ``x`` is None (vertical when the prediction is an x value). Untouched, or not a
    number: a short note on the chart instead. ``label`` tells several predictions on one chart
    apart. Returns fig (marked again, not twice, when called again)."""
    name = f"{PREDICTION_NAME} ({label})" if label else PREDICTION_NAME
    fig.data = [t for t in fig.data if t.name != name]
    fig.layout.annotations = [a for a in fig.layout.annotations if a.name != name]
    fig.layout.shapes = [s for s in fig.layout.shapes if s.name != name]
    is_number = isinstance(prediction, numbers.Real) and not isinstance(prediction, bool)
    if not is_number:
        text = (f"{name}: not written yet (fill in the Predict cell)" if untouched(prediction)
                else f"{name}: {_format(prediction, unit)}")
        shift = 16 * sum(1 for a in fig.layout.annotations if (a.name or "").startswith(PREDICTION_NAME))
        fig.add_annotation(name=name, text=html.escape(text), showarrow=False, xref="paper", yref="paper",
                           x=1, y=1, xanchor="right", yanchor="bottom", yshift=shift,
                           font={"size": 12, "color": "#000"})
        return charts.fit(fig)  # the note stands on the plot, under the legend
    text = html.escape(f"{name}: {_format(prediction, unit)}")
    if x is None:
        line = {"line_dash": "longdashdot", "line_color": "#000", "name": name,
                "annotation": {"text": text, "name": name}}
        if vertical:
            fig.add_vline(x=prediction, annotation_position="top right", **line)
        else:
            fig.add_hline(y=prediction, annotation_position="bottom right", **line)
        return fig
    fig.add_scatter(x=[x], y=[prediction], name=name, mode="markers",
                    marker={"symbol": "star", "size": 16, "color": "#000", "line": {"color": "#FFF", "width": 1}},
                    hovertemplate=f"{text}<extra></extra>")
    return fig


def _where(where: dict, values: dict) -> dict:
    return {k: (v(**values) if callable(v) else v) for k, v in where.items()}


def marking(compute: Callable[..., go.Figure], prediction, **where) -> Callable[..., go.Figure]:
    """``compute`` (a LiveChart's) with the prediction marked on every figure it returns; ``where``
    holds ``mark``'s keywords, each a value or a function of the chart's control values."""

    @functools.wraps(compute)
    def wrapped(*args, **kwargs):
        values = {k: v for k, v in kwargs.items() if k != "progress"}
        return mark(compute(*args, **kwargs), prediction, **_where(where, values))

    return wrapped


def mark_chart(chart, prediction, **where):
    """Mark the prediction on a LiveChart now and after every run its controls start; returns the chart.
    On a GPU the chart's first run may still be measuring: its figure is marked when that run ends."""
    chart.decorations.append(lambda fig, values: mark(fig, prediction, **_where(where, values)))
    if chart.figure is not None and chart.runs:
        mark(chart.figure, prediction, **_where(where, chart.values()))
        chart._draw()
    return chart
