"""widget-run (issue 39 part 3): a lesson run as plain Python with every control moved and timed; planted
lessons show that an erroring callback is an error, a slow one is the slowest move, a lesson past its time
limit is out of time, and gpu-report's step fails a GPU move over 1 s."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from gpucourse.tooling import gpureport, widgetrun

PLANTED = '''# %% [markdown]
# A planted lesson.

# %%
import time

import ipywidgets as widgets
import plotly.graph_objects as go

from gpucourse.viz.widgets import LiveChart


def slow(n):
    time.sleep(3.0 if n == 7 else 0.0)
    return go.Figure()


def broken(kind):
    if kind == "bad":
        raise ValueError("planted chart error")
    return go.Figure()


# %%
LiveChart({"n": widgets.IntSlider(value=1, min=0, max=7, description="slow one")}, slow)
LiveChart({"kind": widgets.Dropdown(options=["good", "bad"], description="breaks")}, broken)
raw = widgets.ToggleButtons(options=["a", "b"], description="raw")
raw.observe(lambda change: 1 / 0 if change["new"] == "b" else None, names="value")
name = widgets.Text(description="left alone")

# %%
raise RuntimeError("planted cell error")
'''


def _lesson(tmp_path: Path, text: str = PLANTED) -> Path:
    path = tmp_path / "99_planted.py"
    path.write_text(text, encoding="utf-8")
    return path


def test_every_control_is_moved_timed_and_its_errors_reported(tmp_path):
    result = widgetrun.run(_lesson(tmp_path), timeout_s=120)
    assert "slow one" in result.slowest and "-> 7" in result.slowest, result
    # 3 s: no other move of a busy machine comes near it (0.4 s once lost to a chart's first draw under load)
    assert 3.0 <= result.slowest_s < 60
    errors = " | ".join(result.errors)
    assert "Dropdown 'breaks' -> 'bad'" in errors and "planted chart error" in errors, errors
    assert "ToggleButtons 'raw' -> 'b'" in errors and "ZeroDivisionError" in errors, errors
    assert "cell 3: RuntimeError: planted cell error" in errors, errors
    assert "left alone" not in errors and not result.timed_out
    # slider: min, max, middle, back; dropdown, toggles: each option, back; the charts' "show data": on, off
    assert result.moves == 4 + 3 + 3 + 2 * 2, result
    assert result.row(gpu=True)["≤ 1 s"] == "FAIL"  # a GPU's move over 1 s fails the row
    assert dataclasses.replace(result, slowest_s=0.4).row(gpu=True)["≤ 1 s"] == "pass"
    assert result.row(gpu=False)["≤ 1 s"].startswith("recorded (simulator")


def test_count_mode_runs_the_cells_and_counts_the_moves_without_making_one(tmp_path):
    result = widgetrun.run(_lesson(tmp_path), timeout_s=120, count_only=True)
    assert result.planned_moves == 4 + 3 + 3 + 2 * 2 and result.moves == 0 and result.slowest_s is None, result
    assert result.seconds < 30  # the slow move (3 s) was never made
    assert any("planted cell error" in e for e in result.errors)  # the lesson's own error is still reported


def test_a_control_made_only_without_a_gpu_is_not_counted(tmp_path, monkeypatch):
    """The count is a GPU run's: the "recorded on" choice of GPU recordings exists only without a GPU."""
    from gpucourse.measure import reference
    from gpucourse.viz import widgets as course

    monkeypatch.setattr(reference, "gpus", lambda: ["nvidia-h100-80gb-hbm3", "nvidia-h200"])
    assert course.recorded_gpu_choice().without_gpu_only
    lesson = ("# %%\nimport ipywidgets as widgets\n\n"
              "both = widgets.Dropdown(options=['a', 'b'])\nonly = widgets.Dropdown(options=['x', 'y', 'z'])\n"
              "only.without_gpu_only = True  # as recorded_gpu_choice marks its dropdown\n")
    result = widgetrun.run(_lesson(tmp_path, lesson), timeout_s=120, count_only=True)
    assert result.planned_moves == 2 + 1 and not result.errors, result


def test_the_plan_prices_a_lesson_s_widgets_step_by_its_counted_moves(tmp_path, monkeypatch):
    lesson = _lesson(tmp_path)
    startup_s, per_cell_s, move_s = 15.0, 0.4, 0.5
    cells = 3 * per_cell_s
    monkeypatch.setattr(widgetrun, "MOVES_FILE", tmp_path / "moves.json")
    charts = 2 * widgetrun.MOVES_PER_CHART  # not counted: the rule of ten moves a chart
    assert widgetrun.estimate_s(lesson, startup_s, per_cell_s, move_s) == startup_s + cells + charts * move_s
    (tmp_path / "moves.json").write_text(json.dumps({"moves": {"99_planted": 14}}))
    assert widgetrun.estimate_s(lesson, startup_s, per_cell_s, move_s) == startup_s + cells + 14 * move_s


def test_a_lesson_past_its_time_limit_is_out_of_time(tmp_path):
    hang = "# %%\nimport time\n\ntime.sleep(60)\n"
    result = widgetrun.run(_lesson(tmp_path, hang), timeout_s=8)
    assert result.timed_out and "its time limit" in result.errors[-1]


def test_the_gpu_report_step_fails_a_move_over_one_second(tmp_path, monkeypatch):
    slow = widgetrun.WidgetRun("03_coalescing", 9.0, 12, "IntSlider 'stride' -> 32", 1.4)
    monkeypatch.setattr(widgetrun, "run", lambda path, timeout_s, contract=None: slow)
    step = gpureport.Step("widgets 03_coalescing", 50.0)
    gpureport._run_step(step, tmp_path, tmp_path, "c", False, False, 500.0, {}, gpureport.TierRun(), {}, None)
    assert step.status == "failed" and "1.400 s (FAIL)" in step.detail, step.detail
    assert json.loads((tmp_path / "widget-run.json").read_text())[0]["slowest_s"] == 1.4
    assert "| 03_coalescing |" in (tmp_path / "widget-run.md").read_text()
    fine = widgetrun.WidgetRun("03_coalescing", 9.0, 12, "IntSlider 'stride' -> 32", 0.2)
    monkeypatch.setattr(widgetrun, "run", lambda path, timeout_s, contract=None: fine)
    gpureport._run_step(step, tmp_path, tmp_path, "c", False, False, 500.0, {}, gpureport.TierRun(), {}, None)
    assert step.status == "done" and "(pass)" in step.detail, step.detail


def test_the_full_plan_moves_every_lesson_and_grades_every_lab():
    names = [s.name for s in gpureport.plan_steps(quick=False)]
    assert sum(n.startswith("widgets ") for n in names) == len(widgetrun.lessons()) >= 10
    assert any(n.startswith("grade ") and "lab01_warps" in n.split() for n in names)
    assert not any(n.startswith(("widgets ", "grade ")) for n in (s.name for s in gpureport.plan_steps(quick=True)))


def test_the_command_refuses_an_unknown_lesson(capsys):
    from gpucourse.__main__ import main

    assert main(["widget-run", "--lesson", "zz"]) == 2
    assert "no lesson" in capsys.readouterr().err


def test_a_rehearsal_skips_the_lesson_steps_and_says_where_they_run(tmp_path):
    for name in ("widgets 01_warps", "grade lab01_warps"):
        step = gpureport.Step(name, 10.0)
        gpureport._run_step(step, tmp_path, tmp_path, "c", True, False, 500.0, {}, gpureport.TierRun(), {}, None)
        assert step.status == "skipped" and "widget-run" in step.detail, step
