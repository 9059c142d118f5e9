"""gpucourse.viz.predictions: the learner's prediction read back after each reveal, and every
Predict cell's answer in every lesson read back after it is assigned."""

from __future__ import annotations

import ast

import ipywidgets as w
import jupytext
import pytest

from gpucourse.measure import runtime
from gpucourse.tooling.build import lesson_sources
from gpucourse.viz import charts, predictions
from gpucourse.viz.widgets import LiveChart


def _figure(scale: float = 1.0):
    fig = charts.figure("t", "x (index)", "y (×)", charts.source_caption("model", "the rule"))
    return charts.line(fig, [0, 1, 2], [0, scale, 2 * scale], "model", 0)


@pytest.mark.parametrize("placeholder", [..., "...", " ... ", "", None, {"a": ..., "b": "..."}, [..., "..."]])
def test_an_untouched_prediction_gets_a_nudge_not_an_error(placeholder):
    said = predictions.read_back(placeholder, "4 sectors")
    assert said.nudge and said.text.startswith("You have not written a prediction yet")
    assert "the model says 4 sectors" in said.text  # the reveal still shows
    assert "gpucourse-readback" in said._repr_html_()


def test_a_written_prediction_is_read_back_beside_the_model():
    said = predictions.read_back("1/32", "1/8", stands_in="the microscope's counts")
    assert not said.nudge
    assert said.text.startswith("You predicted 1/32; the model says 1/8; ")
    if not runtime.is_gpu():
        assert said.text.endswith("no GPU here, so the microscope's counts stands in for a measurement.")


def test_a_dict_is_read_back_key_by_key_and_blank_entries_show_as_dashes():
    said = predictions.read_back({"stride 2": 8, "stride 32": ...}, {"stride 2": 8, "stride 32": 32})
    assert said.text.startswith("You predicted stride 2: 8; stride 32: —; the model says stride 2: 8; stride 32: 32")


def test_units_and_counts():
    said = predictions.read_back(1.5, 2.0, unit="×", counted="the microscope counts 2× the issues")
    assert said.text == "You predicted 1.5×; the model says 2×; the microscope counts 2× the issues."
    said = predictions.read_back(5, 0.005, unit="ms", counted="c")
    assert said.text.startswith("You predicted 5 ms; the model says 0.005 ms")


@pytest.mark.skipif(runtime.is_gpu(), reason="the simulator's wording")
def test_in_the_simulator_the_chart_caption_says_what_stands_in_and_measured_is_never_called():
    def boom():
        raise AssertionError("the measurement must not run in the simulator")

    said = predictions.read_back(3, 2, measured=boom, stands_in=_figure())
    assert said.text.endswith("in place of a measurement: Model: what the hardware rule predicts: the rule.")


def test_a_number_is_a_star_on_the_chart_and_marking_again_replaces_it():
    fig = _figure()
    predictions.mark(fig, 1.5, x=1, label="half")
    predictions.mark(fig, 1.7, x=1, label="half")
    stars = [t for t in fig.data if t.name == "your prediction (half)"]
    assert len(stars) == 1 and list(stars[0].y) == [1.7] and stars[0].marker.symbol == "star"
    assert list(charts.data_table(fig).series).count("your prediction (half)") == 1  # in the data table too


def test_a_number_without_x_is_a_line_and_an_untouched_one_a_note():
    fig = predictions.mark(_figure(), 3.0, unit="ms")
    assert [s.y0 for s in fig.layout.shapes if s.name == "your prediction"] == [3.0]
    fig = predictions.mark(_figure(), 300, vertical=True, label="break-even")
    assert [s.x0 for s in fig.layout.shapes if s.name == "your prediction (break-even)"] == [300]
    fig = predictions.mark(_figure(), ...)
    notes = [a.text for a in fig.layout.annotations if a.name == "your prediction"]
    assert notes == ["your prediction: not written yet (fill in the Predict cell)"]
    assert len(fig.data) == 1  # nothing drawn for a placeholder


def test_mark_chart_keeps_the_star_through_the_chart_s_runs():
    slider = w.IntSlider(value=1, min=1, max=3)
    chart = LiveChart({"scale": slider}, compute=lambda scale: _figure(scale), threaded=False)
    predictions.mark_chart(chart, 2.5, x=lambda scale: scale, label="mine")
    assert [list(t.x) for t in chart.figure.data if t.name == "your prediction (mine)"] == [[1]]
    slider.value = 3
    chart.wait()
    assert [list(t.x) for t in chart.figure.data if t.name == "your prediction (mine)"] == [[3]]
    assert "your prediction (mine)" in str(chart.view.outputs[0]["data"])  # drawn, not only stored


# --- every Predict cell's answer is read back in its lesson ------------------------------------------------

READERS = {"read_back", "mark", "mark_chart"}


def unread_predictions(source_path) -> list[str]:
    """prediction_* names assigned in a lesson and never passed to predictions.read_back/mark/mark_chart
    in a later cell."""
    cells = [c.source for c in jupytext.read(source_path).cells if c.cell_type == "code"]
    assigned: dict[str, int] = {}
    read: dict[str, int] = {}
    for index, source in enumerate(cells):
        code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
        tree = ast.parse(code)
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id.startswith("prediction_") and isinstance(node.ctx, ast.Store):
                assigned.setdefault(node.id, index)
            if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in READERS:
                for arg in ast.walk(node):
                    if isinstance(arg, ast.Name) and arg.id.startswith("prediction_"):
                        read.setdefault(arg.id, index)
    return sorted(name for name, at in assigned.items() if read.get(name, -1) <= at)


@pytest.mark.parametrize("source", lesson_sources(), ids=lambda p: p.stem)
def test_every_prediction_is_read_back_after_it_is_assigned(source):
    assert unread_predictions(source) == []


def test_the_read_back_check_finds_a_prediction_never_read(tmp_path):
    lesson = tmp_path / "99_x.py"
    lesson.write_text("# %%\nprediction_a = ...\nprediction_b = ...\n\n# %%\nfrom gpucourse.viz import predictions\n\n"
                      "print(prediction_b)\npredictions.read_back(prediction_a, 1)\n")
    assert unread_predictions(lesson) == ["prediction_b"]
    lesson.write_text("# %%\npredictions.read_back(prediction_a, 1)\n\n# %%\nprediction_a = ...\n")
    assert unread_predictions(lesson) == ["prediction_a"]  # read before it was written is not read back


# --- every Predict cell: its answers are prediction_* names, and each is read back (issue 47) ---------------
# The convention: a markdown cell with a "### Predict" heading asks; the next code cell holds only the
# learner's answers, each a name starting with "prediction_"; a later cell passes every one of them to
# predictions.read_back / mark / mark_chart (``unread_predictions`` above). A question asked in running text
# ("Predict before you …") must be a "### Predict" cell too.

PREDICT_HEADING = "### Predict"
# Lessons that still ask without reading back (none now): each must still fail the check, so that
# converting one forces its removal here.
NOT_YET_READ_BACK: set[str] = set()


def predict_problems(source_path) -> list[str]:
    """Every way a lesson's Predict cells break the convention, one line each (empty: none)."""
    cells = jupytext.read(source_path).cells
    problems = []
    for index, cell in enumerate(cells):
        if cell.cell_type != "markdown":
            continue
        lines = [line.strip() for line in cell.source.splitlines()]
        for line in lines:
            if line.startswith("Predict ") or (line.startswith("#") and "Predict" in line
                                                and line != PREDICT_HEADING and "Predictable" not in line):
                problems.append(f"cell {index}: a question outside a '{PREDICT_HEADING}' cell: {line[:60]!r}")
        if PREDICT_HEADING not in lines:
            continue
        answer = next((c for c in cells[index + 1:] if c.cell_type == "code"), None)
        if answer is None:
            problems.append(f"cell {index}: a Predict cell with no code cell after it")
            continue
        names = [target.id for node in ast.parse(answer.source).body if isinstance(node, ast.Assign)
                 for target in ast.walk(node.targets[0]) if isinstance(target, ast.Name)]
        if not names:
            problems.append(f"cell {index}: the code cell after a Predict cell assigns no answer")
        problems += [f"cell {index}: answer {name!r} is not named prediction_…" for name in names
                     if not name.startswith("prediction_")]
    return problems + [f"{name} is never read back" for name in unread_predictions(source_path)]


@pytest.mark.parametrize("source", lesson_sources(), ids=lambda p: p.stem)
def test_every_predict_cell_is_answered_by_predictions_that_are_read_back(source):
    problems = predict_problems(source)
    if source.stem in NOT_YET_READ_BACK:
        assert problems, f"{source.stem} now reads every prediction back: remove it from NOT_YET_READ_BACK"
    else:
        assert problems == []


def test_the_predict_check_fails_on_lessons_09_and_10_as_they_were(tmp_path):
    old_09 = ("# %% [markdown]\n# ### Predict\n# For 8 ranks, at what size?\n\n# %%\npredict_crossover_bytes = ...\n\n"
              "# %%\ncollectives.time_vs_size_figure('all_reduce', 8, 'nvlink4')\n")
    lesson = tmp_path / "09_x.py"
    lesson.write_text(old_09)
    assert predict_problems(lesson) == ["cell 0: answer 'predict_crossover_bytes' is not named prediction_…"]
    lesson.write_text(old_09.replace("predict_crossover", "prediction_crossover"))
    assert predict_problems(lesson) == ["prediction_crossover_bytes is never read back"]
    lesson.write_text(old_09.replace("predict_crossover", "prediction_crossover")
                      + "\n# %%\npredictions.read_back(prediction_crossover_bytes, 7.2e6)\n")
    assert predict_problems(lesson) == []
    old_10 = ("# %% [markdown]\n# FSDP's all-gathers can hide too.\n# Predict before you move the slider: how many "
              "waits?\n\n# %%\ndataparallel.fsdp_explorer()\n")
    lesson.write_text(old_10)
    assert predict_problems(lesson) == ["cell 0: a question outside a '### Predict' cell: 'Predict before you "
                                        "move the slider: how many waits?'"[:len("cell 0: a question outside a "
                                                                                "'### Predict' cell: ") + 62]]
