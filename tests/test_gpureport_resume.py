"""gpu-report across ~10-minute reservations: every step estimated, a cut tier or plain run rerun on
--resume, a failed step kept (unless --retry-failed), nothing bulky left in --out (review G13-G16)."""

from __future__ import annotations

import re
from pathlib import Path

from gpucourse.tooling import gpureport, plainrun

ROOT = Path(__file__).resolve().parents[1]


def test_the_full_plan_estimates_every_step():  # G13: 45 steps were estimated at 0.0 s
    steps = gpureport.plan_steps(quick=False)
    zero = [s.name for s in steps if s.estimate_s <= 0]
    assert not zero, f"estimated at 0 s: {zero}"
    # every lesson and lab solution runs once (issue 48): a lesson in its widgets step, a lab in its grade step
    once = sorted(stem for s in steps if s.name.startswith(("widgets ", "grade ", "plain "))
                  for stem in s.name.split()[1:])
    assert once == sorted(p.stem for p in plainrun.sources())
    assert gpureport.estimate_s(quick=False) > 2 * gpureport.estimate_s(quick=True)


def test_reservations_count_whole_steps_in_plan_order(monkeypatch):
    usable = gpureport.RESERVATION_S - gpureport.RESERVATION_STARTUP_S - gpureport.STARTUP_S - gpureport.RESERVE_S
    monkeypatch.setattr(gpureport, "plan_steps", lambda quick: [gpureport.Step(str(i), usable * 0.6) for i in range(3)])
    assert gpureport.reservations() == 3  # two 60 % steps never share a reservation
    monkeypatch.setattr(gpureport, "plan_steps", lambda quick: [gpureport.Step("a", usable * 0.3)] * 3)
    assert gpureport.reservations() == 1


def test_readme_says_how_many_reservations_the_plan_takes():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    said = re.search(r"full H100 recording takes (\d+) reservations of ~10 minutes", text)
    assert said, "README's GPU-report section must say how many ~10-minute reservations a full recording takes"
    assert int(said.group(1)) == gpureport.reservations(quick=False)


def test_a_tier_cut_by_its_time_limit_is_partial_and_rerun(tmp_path, monkeypatch):  # G14
    def cut(out, *, run, **kwargs):
        run.timed_out = True
        return [{"outcome": "passed"}, {"outcome": "not run"}]

    monkeypatch.setattr(gpureport, "run_gpu_tier", cut)
    step = gpureport.Step("tier", 1.0)
    gpureport._run_step(step, tmp_path, tmp_path, "c", False, True, None, {}, gpureport.TierRun(), {}, None)
    assert step.status == "partial" and "time limit" in step.detail


def test_a_plain_run_out_of_time_is_not_a_failure(tmp_path, monkeypatch):  # G15
    def out_of_time(path, timeout_s):
        return plainrun.PlainRun(path, False, 2.0, "stopped after 2 s", timed_out=True)

    monkeypatch.setattr(plainrun, "run", out_of_time)
    step = gpureport.Step(f"plain {plainrun.sources()[0].stem}", 1.0)
    gpureport._run_step(step, tmp_path, tmp_path, "c", False, False, 5.0, {}, gpureport.TierRun(), {}, None)
    assert step.status == "not run (time)"


def test_resume_keeps_a_failed_step_unless_asked_to_retry(tmp_path, monkeypatch):  # G15
    calls = []

    def step_run(step, *args):
        calls.append(step.name)
        step.status, step.detail = "failed", "broken"
        return ""

    monkeypatch.setattr(gpureport, "_run_step", step_run)
    monkeypatch.setattr(gpureport, "plan_steps", lambda quick: [gpureport.Step("sweep demo", 1.0)])
    gpureport.build(tmp_path, practice=True, run_tier=False, quick=True)
    again = gpureport.build(tmp_path, practice=True, run_tier=False, quick=True, resume=True)
    assert calls == ["sweep demo"] and again.steps[0].status == "failed" and again.steps[0].detail.endswith("(resumed)")
    gpureport.build(tmp_path, practice=True, run_tier=False, quick=True, resume=True, retry_failed=True)
    assert calls == ["sweep demo"] * 2


def test_the_tier_leaves_no_bytecode_in_the_report_folder(tmp_path, monkeypatch):  # G16
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)  # as on a GPU node
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_gpu_a.py").write_text("import pytest\n\npytestmark = pytest.mark.gpu\n\n\ndef test_x():\n    pass\n")
    gpureport.run_gpu_tier(tmp_path / "out", practice=False, tests=tests, timeout_s=120)
    assert not [p for p in (tmp_path / "out").rglob("*") if "pycache" in str(p) or p.suffix == ".pyc"]


def test_a_grade_step_runs_the_lab_as_plain_python_where_nbgrader_is_missing(monkeypatch, tmp_path):
    """A bare GPU node (the site's stack and the wheelhouse) has no nbgrader or jupytext: the full report's
    grade steps say so and run the lab's solution as plain Python instead (the lab's one run on the GPU),
    and gpureport itself imports without jupytext."""
    import importlib.util

    from gpucourse.tooling import gpureport

    real = importlib.util.find_spec
    monkeypatch.setattr(gpureport.util, "find_spec", lambda name, *a: None if name == "nbgrader" else real(name, *a))
    ran = []
    monkeypatch.setattr(plainrun, "run", lambda path, timeout_s: ran.append(path.stem) or plainrun.PlainRun(
        path, True, 2.0, "last line"))
    status, detail = gpureport._lesson_step(gpureport.Step("grade lab01_warps", 10.0), tmp_path, None)
    assert status == "done" and "nbgrader" in detail and "plain Python" in detail and ran == ["lab01_warps"]
    assert not (tmp_path / "grading.json").exists()
    source = Path(gpureport.__file__).read_text(encoding="utf-8")
    assert "tooling import build" not in source and "tooling.build import" not in source  # jupytext at import
