"""Widget → sweep → chart glue used by every lesson.

    chart = LiveChart({"stride": IntSlider(...), "dtype": Dropdown(...)}, compute=stride_figure)
    chart   # displays the controls, a status line, the chart and a "show data" table

``compute(**values)`` returns a plotly Figure (measured on a GPU, recorded or counted in the
simulator). Without a GPU, where more than one GPU has recorded sweeps in data/reference/, the
chart gets a "recorded on" dropdown: ``compute`` then runs inside ``reference.chosen(gpu)``, so every
``reference.load`` it makes takes that GPU's recording (default: the newest). On a GPU there is no
such choice: the live measurement is the chart.

A change re-runs it, updates the chart's figure in place and redraws it. Changes made while a run
is in flight coalesce: when it finishes, only the latest values run (no queue of stale runs).
Runs longer than a second show progress; errors appear as one line in the widget.

On a GPU every run measures under the harness's live contract (``harness.live()``: ~30 ms of GPU
time a point, not the 0.5 s of ``make record``) and holds the process-wide measurement lock
(``harness.MEASURING``), so two charts never time each other's launches; a chart that waits for
another's measurement says so. The first run then starts in the worker thread once the chart
exists, so the status line and progress bar are there while it measures (on the simulator it runs
before the chart is shown: recorded data draws in a fraction of a second).

The chart is drawn by an ``Output`` widget holding the figure as plotly's JSON mimetype, which
JupyterLab's plotly extension renders with the one plotly.js it loads per page. Not a plotly
``FigureWidget``: that one sends updates as transient messages, so a chart whose view was still
loading stayed empty for good (the browser tests caught it under load), and since plotly 6 it
stores the whole plotly.js bundle (~4.8 MB) in every chart's saved widget state.
"""

from __future__ import annotations

import contextlib
import html
import inspect
import os
import threading
import time
from collections.abc import Callable

import ipywidgets as widgets
import plotly.graph_objects as go
import plotly.io as pio

from gpucourse.errors import CourseError, explain_gpu_error
from gpucourse.measure import harness, reference, runtime
from gpucourse.viz.charts import data_table, fit

NEWEST_RECORDING = "the newest recording"
WAITING = "⏳ waiting for another chart's measurement…"


def recorded_gpu_choice() -> widgets.Dropdown | None:
    """Without a GPU, where several GPUs recorded sweeps: a dropdown of them (value None: the newest)."""
    if runtime.is_gpu():
        return None
    found = reference.gpus()
    if len(found) < 2:
        return None
    options = [(NEWEST_RECORDING, None)] + [(reference.device_name(gpu), gpu) for gpu in found]
    choice = widgets.Dropdown(options=options, value=None, description="recorded on",
                              tooltip="Which GPU's recording the chart draws (the course's, never yours)")
    choice.without_gpu_only = True  # widget-run --count leaves it out: a GPU's run never makes it
    return choice


class LiveChart(widgets.VBox):
    def __init__(
        self,
        controls: dict[str, widgets.ValueWidget],
        compute: Callable[..., go.Figure],
        *,
        threaded: bool = True,
        description: str = "",
    ):
        self.controls = controls
        self.compute = compute
        self.threaded = threaded
        self.runs = 0
        self.errors = 0
        self._lock = threading.Lock()
        self._pending: dict | None = None
        self._busy = False
        self._wants_progress = "progress" in inspect.signature(compute).parameters
        # f(figure, values) applied to every run's figure after compute (a prediction's mark): read when
        # the run ends, so one added while the first run measures (on a GPU) still marks its figure
        self.decorations: list[Callable[[go.Figure, dict], object]] = []
        self.status = widgets.HTML(layout=widgets.Layout(min_height="1.6em"))
        self.progress = widgets.FloatProgress(min=0.0, max=1.0, description="progress",
                                              layout=widgets.Layout(visibility="hidden"))
        self.figure: go.Figure | None = None  # the first run's figure, updated in place (see _apply)
        self.view = widgets.Output()  # draws self.figure (see _draw)
        self.show_data = widgets.ToggleButton(description="Show data table", icon="table",
                                              tooltip="Show the chart's numbers as a table")
        self.table = widgets.HTML()
        self.show_data.observe(self._toggle_table, names="value")
        self.recorded_gpu = recorded_gpu_choice()
        shown = list(controls.values()) + ([self.recorded_gpu] if self.recorded_gpu is not None else [])
        for control in shown:
            control.observe(self._on_change, names="value")
        box = widgets.HBox(shown, layout=widgets.Layout(flex_flow="row wrap"))
        head = [widgets.HTML(f"<p>{html.escape(description)}</p>")] if description else []
        measuring_first = threaded and runtime.is_gpu()
        if measuring_first:  # shown first, measured in the worker: progress is visible (G5)
            self.status.value = self._busy_line()
        else:
            self._run(self.values())
        if self.figure is None:  # not run yet, or the first run failed: an empty chart
            self.figure = go.Figure()
            self._draw()
        super().__init__(head + [box, widgets.HBox([self.status, self.progress]), self.view,
                                 self.show_data, self.table])
        self.add_class("gpucourse-livechart")  # a hook for the browser tests and for styling
        if measuring_first:
            self._on_change()

    def _repr_mimebundle_(self, **kwargs):
        # On the static website (GPUCOURSE_STATIC=1) there is no kernel behind the controls:
        # show the chart as a plain interactive plotly figure, the controls' values, and the table.
        if os.environ.get("GPUCOURSE_STATIC") != "1":
            return super()._repr_mimebundle_(**kwargs)
        bundle = go.Figure(self.figure)._repr_mimebundle_()
        settings = ", ".join(f"{name} = {value!r}" for name, value in self.values().items())
        note = (f'<p class="gpucourse-static-note"><em>Static page: in JupyterLab the controls '
                f"({html.escape(settings)}) re-run this experiment.</em></p>")
        table = data_table(self.figure).to_html(index=False, max_rows=200)
        details = f"<details><summary>Show data table</summary>{table}</details>"
        bundle["text/html"] = note + bundle.get("text/html", "") + details
        return bundle

    def values(self) -> dict:
        return {name: control.value for name, control in self.controls.items()}

    def _on_change(self, _change=None) -> None:
        with self._lock:
            self._pending = self.values()
            if self._busy:
                return  # the running worker picks up the latest values when it finishes
            self._busy = True
        if self.threaded:
            threading.Thread(target=self._drain, daemon=True).start()
        else:
            self._drain()

    def _drain(self) -> None:
        while True:
            with self._lock:
                values, self._pending = self._pending, None
                if values is None:
                    self._busy = False
                    return
            self._run(values)

    def wait(self, timeout_s: float = 30.0) -> None:
        """Block until no run is in flight (for tests and scripted use)."""
        deadline = time.monotonic() + timeout_s
        while self._busy and time.monotonic() < deadline:
            time.sleep(0.01)

    def _report_progress(self, fraction: float) -> None:
        self.progress.value = max(0.0, min(1.0, float(fraction)))
        if time.monotonic() - self._started > 1.0:
            self.progress.layout.visibility = "visible"

    def _run(self, values: dict) -> None:
        self._started = time.monotonic()
        self.status.value = self._busy_line()
        self.progress.value = 0.0
        kwargs = dict(values, progress=self._report_progress) if self._wants_progress else values
        try:
            with self._measuring(), harness.live(), \
                    reference.chosen(self.recorded_gpu.value if self.recorded_gpu is not None else None):
                fig = self.compute(**kwargs)
            for decorate in list(self.decorations):
                decorate(fig, values)
        except CourseError as exc:
            self._fail(str(exc))
            return
        except Exception as exc:  # a learner should see one line, not a traceback
            line = explain_gpu_error(exc, "the experiment")
            self._fail(line or f"something went wrong ({type(exc).__name__}: {exc})")
            return
        finally:
            self.progress.layout.visibility = "hidden"
        self._apply(fig)
        self.runs += 1
        elapsed_s = time.monotonic() - self._started
        self.status.value = f'<span {self._counts()}>✓ updated in {elapsed_s:.2f} s</span>'

    def _measuring(self):
        """On a GPU: the process-wide measurement lock, saying so while another chart holds it."""
        if not runtime.is_gpu():
            return contextlib.nullcontext()
        if not harness.MEASURING.acquire(blocking=False):
            self.status.value = f"<span>{WAITING}</span>"
            harness.MEASURING.acquire()
            self._started = time.monotonic()
            self.status.value = self._busy_line()
        return _Held(harness.MEASURING)

    @staticmethod
    def _busy_line() -> str:
        if runtime.is_gpu():
            return f"<span>⏳ measuring on {html.escape(runtime.device().name)}…</span>"
        return "<span>⏳ running…</span>"

    def _fail(self, message: str) -> None:
        self.errors += 1
        self.status.value = f'<span role="alert" {self._counts()} style="color:#D55E00">⚠ {html.escape(message)}</span>'

    def _counts(self) -> str:
        # Finished runs, on the page: a browser (or test) waits for these, never for a fixed time.
        return f'data-runs="{self.runs}" data-errors="{self.errors}"'

    def _apply(self, fig: go.Figure) -> None:
        if self.figure is None:
            self.figure = fig
        else:
            target = self.figure
            same_shape = len(target.data) == len(fig.data) and all(
                a.type == b.type for a, b in zip(target.data, fig.data)
            )
            with target.batch_update():
                if same_shape:
                    for old, new in zip(target.data, fig.data):
                        old.update(new.to_plotly_json(), overwrite=True)
                else:
                    target.data = []
                    target.add_traces(list(fig.data))
                target.layout = fig.layout
        self.figure.layout.datarevision = self.runs + 1  # which run the chart shows (see _counts)
        self._draw()
        if self.show_data.value:
            self._toggle_table()

    def _draw(self) -> None:
        # The whole figure is the Output's state (not a transient message): a view that renders
        # late, or again after a reload, always shows the latest run. Its texts get their room first
        # (the lesson, or a marked prediction, may have added some since the figure's caption was set).
        fit(self.figure)
        bundle = pio.renderers["plotly_mimetype"].to_mimebundle(self.figure.to_dict())
        bundle["text/plain"] = f"<chart: {self.figure.layout.title.text or 'untitled'}>"
        self.view.outputs = ({"output_type": "display_data", "data": bundle, "metadata": {}},)

    def _toggle_table(self, _change=None) -> None:
        self.table.value = data_table(self.figure).to_html(index=False, max_rows=200) if self.show_data.value else ""


class _Held:
    """Releases a lock already acquired, on leaving the block."""

    def __init__(self, lock):
        self.lock = lock

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.lock.release()
        return False
