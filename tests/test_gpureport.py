"""`make gpu-report` end to end in rehearsal on the CPU: one report marked rehearsal, every GPU
expectation listed, every sweep recorded or accounted for, spread and widget time, provenance."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pandas as pd
import pytest

from gpucourse.__main__ import main
from gpucourse.errors import NoGPU
from gpucourse.measure import reference, rehearsal
from gpucourse.tooling import gpureport
from gpucourse.tooling.build import ROOT

# one full rehearsal, shared with tests/test_rehearsal.py (conftest's gpu_report_rehearsal): one worker
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("rehearsal")]


@pytest.fixture(scope="module")
def report(gpu_report_rehearsal):
    return gpu_report_rehearsal


def test_the_report_is_one_file_marked_rehearsal(report):
    text = report.path.read_text()
    assert text.startswith("# GPU report (REHEARSAL)") and "**REHEARSAL**" in text
    for section in ("## Device and provenance", "## GPU expectations", "## Harness run-to-run spread",
                    "## Widget response", "## Recorded data"):
        assert section in text
    assert '"rehearsal": true' in text


def test_every_gpu_expectation_is_a_row(report):
    assert len(report.expectations) >= 50  # the gpu tier: every test marked gpu
    lessons = {row["lesson"] for row in report.expectations}
    assert len(lessons) >= 7
    assert all(row["outcome"] == "not run (rehearsal: no GPU)" for row in report.expectations)
    text = report.path.read_text()
    assert all(f"| {row['claim']} |" in text for row in report.expectations)


def test_the_recorded_folder_has_provenance_and_is_refused_by_the_loader(report):
    meta = json.loads((report.data_folder / reference.PROVENANCE_FILE).read_text())
    assert set(meta["sweeps"]) | set(meta["not_rehearsed"]) == set(reference.load_all_sweeps())
    assert any("rehearsal" in p for p in reference.missing_provenance(report.data_folder))
    text = report.path.read_text()
    assert all(f"| {name} |" in text for name in meta["not_rehearsed"])  # each with its reason


def test_spread_and_widget_time_are_reported(report):
    assert len(report.spread) == 3 and report.spread.meets_target.all()
    assert report.widget_s > 0
    assert "rehearsal: simulator time" in report.path.read_text()


def test_without_a_gpu_the_real_report_says_how_to_rehearse(tmp_path, capsys):
    with pytest.raises(NoGPU, match="REHEARSAL=1"):
        gpureport.build(tmp_path)
    assert main(["gpu-report", "--out", str(tmp_path)]) == 2
    assert "REHEARSAL=1" in capsys.readouterr().err


def test_spread_compares_each_point_of_two_runs():
    first = pd.DataFrame({"threads": [1, 32, 64], "median_ms": [0.200, 0.050, 1.000]})
    second = pd.DataFrame({"threads": [1, 32, 64], "median_ms": [0.202, 0.060, 1.050]})
    table = gpureport.spread(first, second).set_index("threads")
    assert table.relative_spread[1] == pytest.approx(0.002 / 0.201)
    assert table.meets_target[1] and not table.meets_target[64]  # 4.9 % on a 1 ms kernel
    assert table.meets_target[32] and not table.counts[32]  # 50 µs: below the target's range
    assert rehearsal.SLUG == "rehearsal"


def test_the_tier_records_what_each_assert_compared(tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_gpu_demo.py").write_text(
        '"""Lesson 99 on a real GPU: demo."""\n'
        "import pytest\n\n"
        "pytestmark = pytest.mark.gpu\n\n\n"
        "def test_ratio_holds():\n"
        '    """stride 8 costs what the model says"""\n'
        "    fast, slow = 1000.0, 300.0\n"
        "    assert slow <= 0.35 * fast\n\n\n"
        "def test_ratio_fails():\n"
        "    assert 2.0 <= 1.0\n")
    rows = {r["claim"]: r for r in gpureport.run_gpu_tier(tmp_path / "out", practice=False, tests=tests)}
    held = rows["stride 8 costs what the model says"]
    assert held["lesson"] == "Lesson 99 on a real GPU" and held["outcome"] == "passed"
    assert held["checked"] == "300.0 <= (0.35 * 1000.0)"
    failed = rows["ratio fails"]
    assert failed["outcome"] == "failed" and "2.0 <= 1.0" in failed["message"]


def test_a_gpu_test_in_a_file_the_report_would_not_collect_stops_the_run(tmp_path):
    # `make gpu-report` collects only the files that say `mark.gpu` (gpureport.gpu_test_files)
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path)
    (tmp_path / "test_hidden.py").write_text(
        "import pytest\n\nGPU = getattr(pytest.mark, 'g' + 'pu')\n\n\n@GPU\ndef test_on_the_gpu():\n    pass\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           str(tmp_path)], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode != 0 and "test_hidden.py holds a GPU test but not `mark.gpu`" in done.stdout + done.stderr
    assert gpureport.gpu_test_files(tmp_path) == []
    assert "test_gpu_tiling.py" in {p.name for p in gpureport.gpu_test_files(ROOT / "tests")}
