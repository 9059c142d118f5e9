"""`make loadtest`'s arithmetic and report, without a hub (the hub runs in tests/test_hub_faults.py and
`make loadtest` itself): percentiles, the per-N summary, the Markdown and CSV tables, the hub log's errors."""

from __future__ import annotations

import csv

from gpucourse.tooling import loadtest
from gpucourse.tooling.loadtest import Learner


def test_percentiles_interpolate_between_ranks():
    assert loadtest.percentile([], 95) is None
    assert loadtest.percentile([3.0], 95) == 3.0
    assert loadtest.percentile([1.0, 2.0, 3.0, 4.0, 5.0], 50) == 3.0
    assert abs(loadtest.percentile(list(map(float, range(1, 21))), 95) - 19.05) < 1e-9


def test_summary_table_and_files(tmp_path):
    a = Learner("a", server_start_s=10.0, run_all_s=20.0, widget_s=[0.2, 0.4], submitted=True, collected=True,
                cpu_s=15.0, peak_rss_bytes=600 * 2**20, peak_pss_bytes=400 * 2**20)
    b = Learner("b", server_start_s=12.0, errors=["run all: KernelTimeout: no answer"], cpu_s=5.0)
    row = {"learners": 2, "cores": 2, "load1_start": 1.0, "load1_end": 2.0, "timed_out": False,
           **loadtest.summarise([a, b])}
    assert row["server_start_max_s"] == 12.0 and row["run_all_p50_s"] == 20.0
    assert row["widget_moves"] == 2 and row["widget_max_s"] == 0.4
    assert row["cpu_s_per_learner"] == 10.0 and row["peak_pss_mib_per_learner"] == 200
    assert (row["submitted"], row["collected"], row["all_collected"], row["learner_errors"]) == (1, 1, False, 1)
    table = loadtest.markdown_table([row]).splitlines()
    assert len(table) == 3 and table[0].count("|") == table[2].count("|") == len(loadtest.COLUMNS) + 1
    assert "| 1/2 |" in table[2] and "–" not in table[2].split("|")[5]
    loadtest.write_results(tmp_path, [row], {2: [a, b]}, "header\n")
    assert (tmp_path / "results.md").read_text().startswith("header\n")
    learners = list(csv.DictReader(open(tmp_path / "learners.csv")))
    assert [r["name"] for r in learners] == ["a", "b"] and learners[0]["widget_s"] == "0.20 0.40"
    assert list(csv.DictReader(open(tmp_path / "results.csv")))[0]["collected"] == "1"


def test_hub_log_errors_are_counted(tmp_path):
    log = tmp_path / "jupyterhub.log"
    log.write_text("[I 2026-01-01 app:1] 200 GET /hub/api/ (@127.0.0.1) 1.00ms\n"
                   "[E 2026-01-01 log:1] 500 GET /hub/api/users (@127.0.0.1) 9.00ms\n"
                   "[W 2026-01-01 log:1] 503 GET /user/x/api/status (@127.0.0.1) 2.00ms\n"
                   "18:00:00.000 [ConfigProxy] error: 503 GET /user/x/ connect ECONNREFUSED\n")
    assert loadtest._hub_log_errors(log) == (2, 1)
    assert loadtest._hub_log_errors(tmp_path / "missing.log") == (0, 0)


def test_the_learners_flag_takes_several_counts(monkeypatch, capsys):
    monkeypatch.setattr(loadtest, "run_once", lambda *a, **k: (_ for _ in ()).throw(AssertionError("no hub here")))
    monkeypatch.setattr("gpucourse.tooling.hubrig.skip_reason", lambda: "not here")
    assert loadtest.main(["--learners", "2 4,8"]) == 2
    assert "cannot run here: not here" in capsys.readouterr().err


def test_a_memory_error_is_one_line_and_still_fails_the_cell(capsys):
    """The kernel's message past the server's memory limit (deploy/ipython_kernel_config.py): one line, and the
    cell still fails, so that nbgrader never counts a test cell that ran out of memory as passed."""
    from IPython.core.interactiveshell import InteractiveShell

    from gpucourse.tooling import memlimit

    assert "1.5 GiB per process" in memlimit.message(3 * 2**30 // 2)
    shell = InteractiveShell.instance()
    try:
        memlimit.install(shell)
        result = shell.run_cell("raise MemoryError()")
        assert isinstance(result.error_in_exec, MemoryError) and not result.success
        out = capsys.readouterr().out
        assert "more memory than your server may use" in out and "Traceback" not in out
    finally:
        shell.set_custom_exc((), None)
        InteractiveShell.clear_instance()
