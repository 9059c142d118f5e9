"""tools/suite_times.py (issue 50): every run reports its wall time and slowest tests and keeps them in
build/test-times.json; the CI budget check fails a run over its budget, naming where the time went."""

import json
import subprocess
import sys
from types import SimpleNamespace

from gpucourse.tooling.build import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import suite_times  # noqa: E402


def _report(nodeid, when, seconds, worker="gw0", outcome="passed"):
    return SimpleNamespace(nodeid=nodeid, when=when, duration=seconds, failed=outcome == "failed",
                           skipped=outcome == "skipped", node=SimpleNamespace(gateway=SimpleNamespace(id=worker)))


def _record(tmp_path):
    """What the plugin writes for a run of three tests on two workers."""
    config = SimpleNamespace(rootpath=tmp_path, invocation_params=SimpleNamespace(args=("-n", "2")))
    times = suite_times.SuiteTimes(config)
    for nodeid, worker, (setup, call) in [("tests/test_a.py::test_site", "gw0", (40.0, 2.0)),
                                          ("tests/test_a.py::test_page", "gw0", (0.0, 1.0)),
                                          ("tests/test_b.py::test_lab", "gw1", (0.5, 30.0))]:
        times.pytest_runtest_logreport(_report(nodeid, "setup", setup, worker))
        times.pytest_runtest_logreport(_report(nodeid, "call", call, worker))
        times.pytest_runtest_logreport(_report(nodeid, "teardown", 0.1, worker))
    times.pytest_runtest_logreport(_report("tests/test_b.py::test_skipped", "setup", 0.0, "gw1", "skipped"))
    times.pytest_sessionfinish(None)
    return json.loads((tmp_path / "build" / "test-times.json").read_text())


def test_each_test_counts_its_set_up_and_teardown_and_files_and_workers_add_up(tmp_path):
    record = _record(tmp_path)
    assert list(record["tests"])[0] == "tests/test_a.py::test_site"  # slowest first
    assert record["tests"]["tests/test_a.py::test_site"]["seconds"] == 42.1  # the shared fixture's set-up too
    assert record["tests"]["tests/test_b.py::test_skipped"]["outcome"] == "skipped"
    assert record["per_file_s"] == {"tests/test_a.py": 43.2, "tests/test_b.py": 30.6}
    assert record["per_worker_s"] == {"gw0": 43.2, "gw1": 30.6}
    assert record["tests_run"] == 4 and record["args"] == ["-n", "2"] and record["wall_s"] >= 0


def test_a_narrow_run_updates_the_durations_it_timed_and_keeps_the_others(tmp_path):
    _record(tmp_path)
    durations = tmp_path / "build" / "test-durations.json"
    assert json.loads(durations.read_text())["tests/test_b.py::test_lab"] == 30.6
    config = SimpleNamespace(rootpath=tmp_path, invocation_params=SimpleNamespace(args=()))
    narrow = suite_times.SuiteTimes(config)
    narrow.pytest_runtest_logreport(_report("tests/test_b.py::test_lab@grp", "call", 12.0))
    narrow.pytest_sessionfinish(None)
    known = suite_times.recorded_seconds(tmp_path)
    assert known["tests/test_b.py::test_lab"] == 12.0 and known["tests/test_a.py::test_site"] == 42.1
    assert json.loads((tmp_path / "build" / "test-times.json").read_text())["tests_run"] == 1  # the last run's


def test_the_budget_check_fails_a_run_over_budget_and_names_its_slowest_tests(tmp_path):
    record = _record(tmp_path)
    record["wall_s"] = 901.0
    ok, lines = suite_times.check(record, 900)
    text = "\n".join(lines)
    assert not ok and "budget: 900 s: OVER (901 s)" in text, text
    assert text.index("tests/test_a.py::test_site") < text.index("tests/test_b.py::test_lab"), text
    record["wall_s"] = 899.0
    ok, lines = suite_times.check(record, 900)
    assert ok and "budget: 900 s: within (899 s)" in "\n".join(lines)


def test_the_command_exits_1_over_budget_and_says_why(tmp_path):
    record = _record(tmp_path)
    record["wall_s"] = 1000.0
    path = tmp_path / "times.json"
    path.write_text(json.dumps(record))
    command = [sys.executable, str(ROOT / "tools" / "suite_times.py"), "--times", str(path)]
    over = subprocess.run(command + ["--budget-s", "900"], capture_output=True, text=True)
    assert over.returncode == 1 and "over its budget of 900 s" in over.stderr, over.stderr
    assert "tests/test_a.py::test_site" in over.stdout
    assert subprocess.run(command + ["--budget-s", "1200"], capture_output=True).returncode == 0
    assert subprocess.run(command, capture_output=True).returncode == 0  # no budget: the summary alone
    missing = subprocess.run(command[:-1] + [str(tmp_path / "none.json")], capture_output=True, text=True)
    assert missing.returncode == 2 and "run pytest first" in missing.stderr


def test_the_ci_budget_leaves_room_for_a_loaded_machine():
    """Half as much again as the README's 10 minutes: a regression of minutes fails, a busy machine does not."""
    assert 1.5 * 600 <= suite_times.CI_BUDGET_S <= 2 * 600  # never so wide that a slower suite of minutes passes
    ci = (ROOT / ".ci" / "run").read_text()
    assert f"make test-times TIME_BUDGET={suite_times.CI_BUDGET_S}" in ci
    assert ci.index("make test\n") < ci.index("make test-times") < ci.index("make test-extra\n")  # before test-extra
