"""The first reservation (issue 48): `gpu-report --targets` runs lessons 03, 04, 04a and 05's expectations first,
under the full contract and never cut by a budget, then the sweeps behind those lessons' charts; planned ≤ 8 min."""

from __future__ import annotations

import time
from pathlib import Path

from gpucourse.__main__ import main
from gpucourse.measure import reference
from gpucourse.tooling import gpureport, reportplan

TESTS = Path(__file__).parent


def test_the_first_reservation_is_planned_within_eight_minutes():
    steps = gpureport.plan_steps(quick=True, targets=True)
    total = gpureport.STARTUP_S + sum(s.estimate_s for s in steps)
    assert gpureport.estimate_s(targets=True) == total <= reportplan.TARGETS_PLAN_LIMIT_S == 480.0
    assert gpureport.reservations(targets=True) == 1
    assert all(s.estimate_s > 0 for s in steps)


def test_the_targets_come_first_in_lesson_order_then_every_chart_of_their_lessons():
    steps = gpureport.plan_steps(quick=True, targets=True)
    assert steps[0].name == gpureport.TARGETS_TIER
    assert [p.name for p in gpureport.target_test_files(TESTS)] == [
        "test_gpu_coalescing.py", "test_gpu_tiling.py", "test_gpu_reductions.py", "test_gpu_occupancy.py"]
    assert all(p.exists() and p in gpureport.gpu_test_files(TESTS) for p in gpureport.target_test_files(TESTS))
    assert steps[0].estimate_s == round(gpureport.count_gpu_tests(files=gpureport.target_test_files(TESTS))
                                        * gpureport.TIER_S_PER_TEST, 1)
    lessons = {name for name in reference.load_all_sweeps()
               if name.split(".")[0] in ("coalescing", "tiling", "reductions", "occupancy")}
    assert {s.name.removeprefix("sweep ") for s in steps[1:]} == lessons == set(gpureport.TARGET_SWEEPS)


def _steps_under_a_budget(monkeypatch, tmp_path, budget_s: float) -> list:
    ran = []

    def fake_step(step, *args):
        ran.append(step.name)
        step.status = "done"
        return ""

    monkeypatch.setattr(gpureport, "_run_step", fake_step)
    steps = gpureport.plan_steps(quick=True, targets=True)
    gpureport._run_steps(steps, budget_s, time.monotonic(), tmp_path, tmp_path, "make gpu-report TARGETS=1", False,
                         True, {}, gpureport.TierRun(), {}, None, lambda meta: None, {})
    return ran, steps


def test_no_budget_can_cut_the_targets(monkeypatch, tmp_path):
    ran, steps = _steps_under_a_budget(monkeypatch, tmp_path, budget_s=1.0)
    assert ran == [gpureport.TARGETS_TIER]  # the sweeps are what a short budget skips
    assert {s.status for s in steps[1:]} == {"skipped"}
    ran, _ = _steps_under_a_budget(monkeypatch, tmp_path, budget_s=10_000.0)
    assert ran == [s.name for s in steps]


def test_the_targets_tier_runs_the_four_files_under_the_full_contract_with_the_reports_ceiling(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(gpureport, "ceilings_handed_on", lambda: {"GPUCOURSE_FRESH_CEILINGS": "{}"})
    monkeypatch.setattr(gpureport, "run_gpu_tier", lambda out, **kw: calls.append(kw) or [])
    step = gpureport.Step(gpureport.TARGETS_TIER, 100.0)
    state, tier = {}, gpureport.TierRun()
    gpureport._run_step(step, tmp_path, tmp_path, "make gpu-report TARGETS=1", False, True, 5.0, state, tier,
                        {"written": []}, None)
    (kw,) = calls
    assert kw["files"] == gpureport.target_test_files()
    assert kw["env_extra"] == {"GPUCOURSE_FRESH_CEILINGS": "{}", "GPUCOURSE_MEASURE": "full"}
    assert kw.get("timeout_s") is None and not kw.get("quick")  # 5 s left in the budget: the tier is not cut


def test_the_plan_command_shows_the_first_reservation(capsys):
    assert main(["gpu-report", "--targets", "--plan"]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0].startswith(gpureport.TARGETS_TIER)
    assert f"{gpureport.estimate_s(targets=True):6.1f} s" in text and "reservations with --resume: 1" in text


def test_the_readme_gives_the_first_reservation_command_and_its_planned_seconds():
    text = (TESTS.parent / "README.md").read_text(encoding="utf-8")
    line = next(x for x in text.splitlines() if x.startswith("make gpu-report TARGETS=1"))
    assert f"planned {gpureport.estimate_s(targets=True):.0f} s" in line
    assert "--targets" in text and "never cut by `BUDGET`" in text


# --- the plan's inputs (issue 48, item 4) ----------------------------------------------------------------------


def test_tests_sharing_a_module_fixture_count_as_one_measurement(tmp_path):
    sample = tmp_path / "test_gpu_sample.py"
    sample.write_text('import pytest\n\npytestmark = pytest.mark.gpu\n\n\n@pytest.fixture(scope="module")\n'
                      'def ladder():\n    return 1\n\n\ndef test_a(ladder, record_property):\n    pass\n\n\n'
                      'def test_b(ladder):\n    pass\n\n\ndef test_c():\n    pass\n\n\n'
                      'def test_d(tmp_path):\n    pass\n')
    assert gpureport.count_gpu_tests(files=[sample]) == 3  # the fixture's measurements once, then c and d


def _report(folder: Path, title: str, rows: str) -> None:
    folder.mkdir(parents=True)
    (folder / "gpu-report.md").write_text(f"# GPU report{title}: X\n\n| name | status | seconds | estimate_s | "
                                          f"detail |\n|---|---|---|---|---|\n{rows}")


def test_the_last_real_run_replaces_the_model_scaled_by_how_the_plan_moved(tmp_path, monkeypatch):
    _report(tmp_path / "gpu-a", " (QUICK)", "| tier | done | 88.6 | 214.6 | x |\n| sweep s | done | 2 | 4 | 4 rows |\n"
            "| sweep f | failed | 9 | 4 | broken |\n")
    _report(tmp_path / "gpu-b", " (QUICK)", "| sweep s | done | 3 | 4 | 4 rows |\n")
    _report(tmp_path / "rehearsal", " (REHEARSAL) (QUICK)", "| sweep s | done | 99 | 4 | x |\n")
    _report(tmp_path / "gpu-full", "", "| sweep s | done | 50 | 40 | x |\n")
    recorded = gpureport.recorded_step_seconds(quick=True, root=tmp_path)
    # the slowest GPU's; never the tier, a failed step or a rehearsal
    assert {k: v[:2] for k, v in recorded.items()} == {"sweep s": (3.0, 4.0)}
    assert {k: v[:2] for k, v in gpureport.recorded_step_seconds(quick=False, root=tmp_path).items()} == {
        "sweep s": (50.0, 40.0)}
    monkeypatch.setattr(gpureport, "recorded_step_seconds", lambda quick: recorded)
    steps = gpureport._with_recorded([gpureport.Step("sweep s", 4.0), gpureport.Step("sweep s", 40.0),
                                      gpureport.Step("sweep t", 7.0)], quick=True)
    assert [s.estimate_s for s in steps] == [3.0, 30.0, 7.0]  # as it ran; ten times the plan: ten times it; model


def test_the_committed_quick_report_feeds_the_quick_plan():
    recorded = gpureport.recorded_step_seconds(quick=True)
    assert recorded, "data/reference holds a real quick report (nvidia-h200)"
    plan = {s.name: s.estimate_s for s in gpureport.plan_steps(quick=True)}
    took, then = recorded["sweep coalescing.layout"][:2]
    model = gpureport.SWEEP_FIXED_S + 4 * gpureport.QUICK_S_PER_MEASUREMENT  # its quick plan: 4 measurements
    assert plan["sweep coalescing.layout"] == round(took * model / then, 1)
    assert plan["tier"] == round(gpureport.count_gpu_tests() * gpureport.TIER_S_PER_TEST, 1)  # the model's


def test_the_full_plan_runs_each_lesson_and_lab_once():
    names = [s.name for s in gpureport.plan_steps(quick=False)]
    assert not [n for n in names if n.startswith("plain ")]
    stems = [stem for n in names if n.startswith(("widgets ", "grade ")) for stem in n.split()[1:]]
    assert len(stems) == len(set(stems))


def test_a_targets_report_says_what_it_is(tmp_path):
    report = gpureport.write_report(tmp_path, practice=True, expectations=[], spread_table=None, widget_s=None,
                                    meta={"device": "X"}, data_folder=tmp_path / "data", quick=True, targets=True)
    text = report.read_text()
    assert text.startswith("# GPU report (REHEARSAL) (TARGETS): X") and "**TARGETS**" in text
    assert "**QUICK**" not in text
