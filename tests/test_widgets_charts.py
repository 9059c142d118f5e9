import threading

import ipywidgets as w

from gpucourse.errors import InvalidConfig
from gpucourse.viz import charts
from gpucourse.viz.widgets import LiveChart


def small_figure(n):
    fig = charts.figure("demo", "x (elements)", "time (ms)", charts.source_caption("model", "demo"))
    return charts.line(fig, range(n), range(n), "series", 0)


def test_a_change_updates_the_chart_in_place():
    slider = w.IntSlider(value=3, min=1, max=10)
    chart = LiveChart({"n": slider}, small_figure, threaded=False)
    figure = chart.figure
    slider.value = 6
    assert chart.figure is figure and list(figure.data[0].x) == list(range(6))
    assert chart.runs == 2 and "updated" in chart.status.value


def test_changes_during_a_run_coalesce_to_the_latest():
    calls, gate = [], threading.Event()

    def slow(n):
        calls.append(n)
        if len(calls) > 1:
            gate.wait(10)  # the background run lasts until every change is made: no race with the clock
        return small_figure(n)

    slider = w.IntSlider(value=2, min=1, max=10)
    chart = LiveChart({"n": slider}, slow)
    for value in (3, 4, 5, 6, 7):
        slider.value = value
    gate.set()
    chart.wait()
    # the first run (2, in the constructor), at most one run that began during the changes, the latest
    assert calls[0] == 2 and calls[-1] == 7 and len(calls) <= 3
    assert list(chart.figure.data[0].x) == list(range(7))


def test_errors_show_as_one_line_in_the_widget_not_a_traceback():
    def bad(n):
        raise InvalidConfig("n must be ≥ 1")

    chart = LiveChart({"n": w.IntSlider(value=1)}, bad, threaded=False)
    assert chart.errors == 1 and 'role="alert"' in chart.status.value and "n must be ≥ 1" in chart.status.value

    def broken(n):
        return 1 / 0

    chart = LiveChart({"n": w.IntSlider(value=1)}, broken, threaded=False)
    assert "something went wrong (ZeroDivisionError" in chart.status.value


def test_progress_is_reported_for_long_runs():
    def with_progress(n, progress):
        progress(0.5)
        return small_figure(n)

    chart = LiveChart({"n": w.IntSlider(value=2)}, with_progress, threaded=False)
    assert chart.progress.value == 0.5 and chart.runs == 1


def test_show_data_table_is_the_text_alternative():
    chart = LiveChart({"n": w.IntSlider(value=3)}, small_figure, threaded=False)
    chart.show_data.value = True
    assert "<table" in chart.table.value and "series" in chart.table.value


def test_every_chart_carries_its_source_and_units():
    fig = small_figure(3)
    assert charts.caption_of(fig).startswith("Model")
    assert "(ms)" in fig.layout.yaxis.title.text
    charts.set_source(fig, charts.source_caption("recorded", "H200, 2026-10-28"))
    assert charts.caption_of(fig) == "Recorded on a real GPU: H200, 2026-10-28"
    assert len([a for a in fig.layout.annotations if a.name == "source"]) == 1
    table = charts.data_table(fig)
    assert list(table.columns) == ["series", "x", "y"] and len(table) == 3


def test_a_gpu_error_in_a_widget_is_one_line_with_what_to_do():
    from cupy_backends.cuda.api.runtime import CUDARuntimeError

    def faulty(n):
        raise CUDARuntimeError(700)  # cudaErrorIllegalAddress

    chart = LiveChart({"n": w.IntSlider(value=1)}, faulty, threaded=False)
    assert "illegal memory access" in chart.status.value and "restart the kernel" in chart.status.value
