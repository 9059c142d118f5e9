"""gpu-report's steps on the CPU (rehearsal): each isolated, the report rewritten after each, the budget,
a sticky GPU error, resume, the archive, and a tier that does not run cleanly (collection error, time limit)."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pandas as pd
import pytest

from gpucourse.errors import CourseError
from gpucourse.measure import plans, reference, rehearsal
from gpucourse.tooling import gpureport


@pytest.fixture
def two_sweeps(monkeypatch):
    """The registry cut to the staircase and one sweep that raises what the test says."""
    failure = {"error": RuntimeError("a bug in this sweep")}

    def broken():
        raise failure["error"]

    staircase = reference.load_all_sweeps()["warps.staircase"]
    monkeypatch.setattr(reference, "SWEEP_MODULES", ())
    monkeypatch.setattr(reference, "SWEEPS", {"warps.staircase": staircase})
    reference.register_sweep("demo.broken", lesson="99_demo", description="raises", columns=("x",))(broken)
    monkeypatch.setitem(rehearsal.SWEEP_PLANS, "demo.broken", plans.SweepPlan())
    monkeypatch.setitem(plans.QUICK_PLANS, "demo.broken", plans.SweepPlan(measurements=1))
    return failure


def _steps(report) -> dict[str, gpureport.Step]:
    return {step.name: step for step in report.steps}


def test_a_failing_sweep_is_reported_and_the_run_goes_on(tmp_path, two_sweeps):
    report = gpureport.build(tmp_path, practice=True, run_tier=False, quick=True)
    steps = _steps(report)
    assert steps["sweep demo.broken"].status == "failed"
    assert "a bug in this sweep" in steps["sweep demo.broken"].detail
    assert steps["sweep warps.staircase"].status == "done" and steps["spread"].status == "done"
    text = report.path.read_text()
    assert "(QUICK)" in text and "| sweep demo.broken | failed |" in text
    assert report.data_folder.name == "quick" and (report.data_folder / "warps.staircase.csv").exists()
    with tarfile.open(report.archive) as tar:
        names = tar.getnames()
    assert f"{tmp_path.name}/gpu-report.md" in names and any(n.endswith("quick/warps.staircase.csv") for n in names)


def test_after_a_sticky_gpu_error_the_remaining_gpu_steps_are_not_run(tmp_path, two_sweeps):
    class CudaAPIError(Exception):
        __module__ = "numba.cuda.cudadrv.driver"

    two_sweeps["error"] = CudaAPIError("[CUDA_ERROR_ILLEGAL_ADDRESS: 700] an illegal memory access")
    report = gpureport.build(tmp_path, practice=True, run_tier=False, quick=True)
    steps = _steps(report)
    assert steps["sweep demo.broken"].status == "failed" and "restart" in steps["sweep demo.broken"].detail.lower()
    for later in ("sweep warps.staircase", "spread", "widget"):  # alphabetical: the broken sweep runs first
        assert steps[later].status == "not run" and "unusable" in steps[later].detail


def test_the_budget_skips_and_lists_what_does_not_fit(tmp_path, two_sweeps, monkeypatch):
    monkeypatch.setitem(plans.QUICK_PLANS, "warps.staircase", plans.SweepPlan(measurements=10_000))
    report = gpureport.build(tmp_path, practice=True, run_tier=False, quick=True, budget_s=60)
    step = _steps(report)["sweep warps.staircase"]
    assert step.status == "skipped" and "the budget" in step.detail
    assert "| sweep warps.staircase | skipped |" in report.path.read_text()


def test_resume_keeps_what_was_done_and_refuses_another_profile(tmp_path, two_sweeps):
    gpureport.build(tmp_path, practice=True, run_tier=False, quick=True)
    state = json.loads((tmp_path / gpureport.STATE_FILE).read_text())
    assert state["steps"]["sweep warps.staircase"]["status"] == "done"
    again = gpureport.build(tmp_path, practice=True, run_tier=False, quick=True, resume=True)
    kept = _steps(again)["sweep warps.staircase"]
    assert kept.status == "done" and kept.detail.endswith("(resumed)")
    assert _steps(again)["sweep demo.broken"].status == "failed"  # kept as failed (--retry-failed runs it again)
    with pytest.raises(CourseError, match="another device, stack or profile"):
        gpureport.build(tmp_path, practice=True, run_tier=False, quick=False, resume=True)


def test_the_quick_contract_does_not_leak_out_of_the_report(tmp_path, two_sweeps, monkeypatch):
    monkeypatch.delenv("GPUCOURSE_MEASURE", raising=False)
    gpureport.build(tmp_path, practice=True, run_tier=False, quick=True)
    from gpucourse.measure import harness

    assert harness.contract().name == "full"


def test_the_quick_plan_is_estimated_within_eight_minutes():
    # the goal for one H100, from the report's own plan and its time model
    assert gpureport.estimate_s(quick=True) <= 8 * 60
    steps = gpureport.plan_steps(quick=True)
    assert {s.name.removeprefix("sweep ") for s in steps} >= set(reference.load_all_sweeps())
    assert all(s.estimate_s > 0 for s in steps)


def test_a_tier_that_does_not_import_or_runs_out_of_time_says_so(tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_gpu_a.py").write_text(
        "import pytest\nimport time\n\npytestmark = pytest.mark.gpu\n\n\n"
        "def test_quick():\n    assert True\n\n\ndef test_slow():\n    time.sleep(600)\n")
    (tests / "test_gpu_b.py").write_text(
        "import pytest\nimport no_such_module_here\n\npytestmark = pytest.mark.gpu\n\n\ndef test_x():\n    pass\n")
    run = gpureport.TierRun()
    rows = {r["test"].split("::")[-1].rsplit("/", 1)[-1]: r for r in gpureport.run_gpu_tier(
        tmp_path / "out", practice=False, tests=tests, timeout_s=25, run=run)}
    assert rows["test_gpu_b.py"]["outcome"] == "collection error"
    assert "no_such_module_here" in rows["test_gpu_b.py"]["message"]
    assert rows["test_quick"]["outcome"] == "passed"  # written as it ran: a killed tier keeps it
    assert rows["test_slow"]["outcome"] == "not run" and "time limit" in rows["test_slow"]["message"]
    assert run.timed_out and run.seconds >= 25


def test_only_files_that_mark_gpu_tests_in_code_are_collected(tmp_path):
    (tmp_path / "test_real.py").write_text("import pytest\n\npytestmark = [pytest.mark.gpu]\n")
    (tmp_path / "test_deco.py").write_text("import pytest\n\n\n@pytest.mark.gpu\ndef test_x():\n    pass\n")
    (tmp_path / "test_text.py").write_text('CODE = "pytestmark = pytest.mark.gpu"\n# files that say `mark.gpu`\n')
    assert [p.name for p in gpureport.gpu_test_files(tmp_path)] == ["test_deco.py", "test_real.py"]


def test_a_cpu_test_that_writes_a_gpu_module_as_text_is_not_in_the_tier_or_its_estimate(tmp_path):
    """A GPU module held in a string (at a line's start, as tests/test_tierplugin.py's DEMO) marks nothing: the tier
    neither collects that file nor counts its tests in the plan (it had counted 7 CPU tests, 26 s)."""
    (tmp_path / "test_demo.py").write_text('DEMO = """\nimport pytest\n\npytestmark = pytest.mark.gpu\n\n\n'
                                           'def test_in_text():\n    pass\n"""\n\n\ndef test_on_the_cpu():\n'
                                           '    pass\n')
    (tmp_path / "test_real.py").write_text("import pytest\n\npytestmark = [pytest.mark.slow, pytest.mark.gpu]\n\n\n"
                                           "def test_a():\n    pass\n")
    assert [p.name for p in gpureport.gpu_test_files(tmp_path)] == ["test_real.py"]
    assert gpureport.count_gpu_tests(tmp_path) == 1
    tests = Path(__file__).parent
    assert "test_tierplugin.py" not in {p.name for p in gpureport.gpu_test_files(tests)}
    assert all(p.name.startswith(("test_gpu_", "test_grading_gpu")) for p in gpureport.gpu_test_files(tests))


def test_spread_table_survives_the_state_file(tmp_path):
    table = gpureport.spread(pd.DataFrame({"t": [1, 2], "median_ms": [1.0, 2.0]}),
                             pd.DataFrame({"t": [1, 2], "median_ms": [1.01, 2.0]}))
    assert pd.DataFrame(json.loads(json.dumps(table.to_dict("records")))).equals(table)


def test_a_stopped_report_still_writes_its_report_and_archive(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "report"
    env = {**os.environ, "PYTHONPATH": str(gpureport.ROOT)}
    child = subprocess.Popen([sys.executable, "-m", "gpucourse", "gpu-report", "--rehearsal", "--quick", "--out",
                              str(out)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while not (out / "gpu-report.md").exists() and time.monotonic() < deadline and child.poll() is None:
        time.sleep(0.2)  # the report is first written before any step runs: that is the signal to stop it
    child.send_signal(signal.SIGTERM)
    output, _ = child.communicate(timeout=120)
    text = (out / "gpu-report.md").read_text()
    assert "stopped by signal 15" in text, output[-2000:]
    assert "| tier | not run |" in text and (out / gpureport.ARCHIVE).exists()
