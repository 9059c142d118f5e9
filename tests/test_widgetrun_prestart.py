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


def test_the_plan_takes_the_start_up_off_each_lesson_that_follows_a_lesson():
    steps = [s for s in gpureport.plan_steps(quick=False) if s.name.startswith("widgets ")]
    paths = widgetrun.lessons()
    assert [s.name for s in steps] == [f"widgets {p.stem}" for p in paths]
    alone = [reportplan.widgets_estimate(p)[0] for p in paths]
    assert steps[0].estimate_s == round(alone[0], 1) and "started ahead" not in steps[0].source
    for step, model in zip(steps[1:], alone[1:]):
        assert step.estimate_s == round(model - reportplan.STARTUP_S, 1) and step.source.endswith("started ahead")
