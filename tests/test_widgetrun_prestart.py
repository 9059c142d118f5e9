"""A lesson's child Python started ahead (issue 48 item 4): gpu-report starts the next lesson's child while a lesson
runs; it imports, waits for its go, then runs as a child started on demand does; one left waiting is stopped; and the
plan takes the start-up off every lesson that follows a lesson, and off no other."""

from __future__ import annotations

import time
from pathlib import Path

from gpucourse.tooling import gpureport, reportplan, widgetrun

MARKING = "# %%\nfrom pathlib import Path\n\nPath('ran.txt').write_text('ran')\n"


def _lesson(tmp_path: Path) -> Path:
    path = tmp_path / "98_marking.py"
    path.write_text(MARKING, encoding="utf-8")
    return path


def test_a_child_started_ahead_waits_for_its_go_then_runs_the_lesson(tmp_path):
    path = _lesson(tmp_path)
    widgetrun.prestart(path, "quick")
    try:
        assert widgetrun.prestarted() == ["98_marking"]
        process = next(iter(widgetrun._STARTED.values()))[0]
        assert process.stdout.readline().strip() == widgetrun.WAITING  # its imports done
        time.sleep(3.0)
        assert process.poll() is None and not (tmp_path / "ran.txt").exists()  # no cell runs before its go
        result = widgetrun.run(path, timeout_s=300, contract="quick")
    finally:
        widgetrun.stop_prestarted()
    assert not result.errors and not result.timed_out, result
    assert (tmp_path / "ran.txt").read_text() == "ran" and widgetrun.prestarted() == []


def test_a_child_left_waiting_is_stopped_without_running(tmp_path):
    path = _lesson(tmp_path)
    widgetrun.prestart(path, "quick")
    process = next(iter(widgetrun._STARTED.values()))[0]
    widgetrun.stop_prestarted()
    assert process.poll() is not None and widgetrun.prestarted() == []
    assert not (tmp_path / "ran.txt").exists()


def test_the_report_starts_the_next_pending_lesson_ahead_and_only_a_lesson(monkeypatch):
    started = []
    monkeypatch.setattr(widgetrun, "prestart", lambda path, contract=None: started.append((path.stem, contract)))
    lessons = [p.stem for p in widgetrun.lessons()]
    done = gpureport.Step(f"widgets {lessons[1]}", 1.0, status="done")  # kept from a resumed report: skipped
    gpureport._prestart_next([done, gpureport.Step(f"widgets {lessons[2]}", 1.0)])
    assert started == [(lessons[2], gpureport.WIDGETS_CONTRACT)]
    gpureport._prestart_next([gpureport.Step("grade lab01_warps", 1.0), gpureport.Step(f"widgets {lessons[3]}", 1.0)])
    gpureport._prestart_next([])
    assert len(started) == 1


def test_the_plan_takes_off_the_start_up_that_overlaps_the_step_before():
    steps = gpureport.plan_steps(quick=False)
    paths = widgetrun.lessons()
    first = next(i for i, s in enumerate(steps) if s.name.startswith("widgets "))
    lessons = steps[first:first + len(paths)]
    assert [s.name for s in lessons] == [f"widgets {p.stem}" for p in paths]
    before = steps[first - 1]
    for step, path in zip(lessons, paths):
        model = reportplan.widgets_estimate(path)[0]
        ahead = round(min(reportplan.STARTUP_S, before.estimate_s), 1)  # it overlaps the step before, no more
        assert step.estimate_s == round(model - ahead, 1), (step, before)
        assert step.source.endswith(f"started ahead, {ahead:g} s of its start-up during {before.name}")
        before = step
    assert any(s.estimate_s < reportplan.STARTUP_S for s in lessons[:-1])  # so a short step gives a partial overlap


def test_a_recorded_lesson_keeps_its_seconds(monkeypatch):
    """widgetrun.run counts from the go: a real report's seconds for a lesson already leave its start-up out."""
    stem = widgetrun.lessons()[3].stem
    recorded = {f"widgets {stem}": reportplan.Recorded(7.0, 20.0, "NVIDIA X", "2026-12-01")}
    monkeypatch.setattr(gpureport, "recorded_step_seconds", lambda quick: recorded)
    step = next(s for s in gpureport.plan_steps(quick=False) if s.name == f"widgets {stem}")
    assert step.estimate_s > 0 and "started ahead" not in step.source and step.source.startswith("measured")


def test_the_report_starts_a_lesson_ahead_on_a_gpu_run_and_never_in_a_rehearsal(monkeypatch, tmp_path):
    started, ran = [], []
    monkeypatch.setattr(widgetrun, "prestart", lambda path, contract=None: started.append(path.stem))
    monkeypatch.setattr(gpureport, "_run_step", lambda step, *a: ran.append((step.name, list(started))) or "")
    lesson = widgetrun.lessons()[0].stem
    for practice in (True, False):
        steps = [gpureport.Step("ncu catalogue", 10.0), gpureport.Step(f"widgets {lesson}", 10.0)]
        gpureport._run_steps(steps, None, time.monotonic(), tmp_path, tmp_path, "c", practice, False, {},
                             gpureport.TierRun(), {}, None, lambda meta: None, {})
    # the rehearsal started nothing; the GPU run started the lesson before the step ahead of it ran
    assert ran[:2] == [("ncu catalogue", []), (f"widgets {lesson}", [])]
    assert ran[2] == ("ncu catalogue", [lesson]) and len(ran) == 4
