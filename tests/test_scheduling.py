"""How `make test` shares its work between two pytest workers (tests/conftest.py): tests that share an
expensive fixture run on one worker, so the fixture is made once per run; the slow tests go first.

Checked on a small suite of its own, run the way the Makefile runs the real one."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SHARED = '''
import os, pathlib, pytest
{mark}
@pytest.fixture(scope="module")
def made():
    # one file per time the fixture is made, named by the worker that made it
    out = pathlib.Path(__file__).parent / "made"
    out.mkdir(exist_ok=True)
    (out / f"{{__name__}}-{{os.environ.get('PYTEST_XDIST_WORKER', 'main')}}-{{os.getpid()}}").touch()
    return 1
''' + "".join(f"\ndef test_{i}(made):\n    assert made\n" for i in range(6))
QUICK = "import pytest\n\n@pytest.mark.parametrize('i', range(40))\ndef test_quick(i):\n    pass\n"
SLOW = "import pytest\n\n@pytest.mark.slow\ndef test_slow():\n    pass\n"


def _run(folder: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args], cwd=folder,
                          capture_output=True, text=True, env=env, timeout=300)


def test_a_shared_module_fixture_is_made_once_and_slow_tests_go_first(tmp_path):
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: slow\n    gpu: gpu\n")
    (tmp_path / "test_grouped.py").write_text(SHARED.format(mark='pytestmark = pytest.mark.xdist_group("site")'))
    (tmp_path / "test_module_fixture.py").write_text(SHARED.format(mark=""))
    (tmp_path / "test_quick.py").write_text(QUICK)
    (tmp_path / "test_zslow.py").write_text(SLOW)
    done = _run(tmp_path, "-n", "2", "--dist", "loadgroup", "--no-loadscope-reorder")
    assert done.returncode == 0 and "53 passed" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]
    made = sorted(p.name.split("-")[0] for p in (tmp_path / "made").iterdir())
    assert made == ["test_grouped", "test_module_fixture"], f"a fixture was made on each worker: {made}"
    # the order work is handed out in: the slow test, then the groups, then the quick ones
    listed = _run(tmp_path, "--collect-only").stdout.split()
    files = [line.split("::")[0] for line in listed if "::" in line]
    assert files[0] == "test_zslow.py" and set(files[1:13]) == {"test_grouped.py", "test_module_fixture.py"}
    assert set(files[13:]) == {"test_quick.py"}, files


def test_the_last_runs_times_order_the_slow_tests_longest_first(tmp_path):
    """build/test-durations.json (tools/suite_times.py) orders the next run: a group by its tests' sum, a test the
    last run did not time first; without it, the collection's order."""
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: slow\n    gpu: gpu\n")
    slow = "import pytest\n\npytestmark = pytest.mark.slow\n" + "".join(f"\ndef test_{i}():\n    pass\n"
                                                                   for i in range(3))
    for name in ("a", "b", "c", "d"):
        (tmp_path / f"test_{name}.py").write_text(slow)
    grouped = slow.replace("pytest.mark.slow", '[pytest.mark.slow, pytest.mark.xdist_group("e")]')
    (tmp_path / "test_e.py").write_text(grouped)

    def order():
        listed = _run(tmp_path, "--collect-only").stdout.split()
        return list(dict.fromkeys(line.split("::")[0] for line in listed if "::" in line))

    assert order() == ["test_e.py", "test_a.py", "test_b.py", "test_c.py", "test_d.py"]
    assert not (tmp_path / "build").exists(), "a run that ran no test keeps the last run's record"
    seconds = {"test_a.py": 1.0, "test_b.py": 9.0, "test_c.py": 5.0, "test_e.py": 0.5}  # test_d.py: not timed
    tests = {f"{f}::test_{i}" + ("@e" if f == "test_e.py" else ""): s for f, s in seconds.items() for i in range(3)}
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "test-durations.json").write_text(json.dumps(tests))
    assert order() == ["test_e.py", "test_d.py", "test_b.py", "test_c.py", "test_a.py"]
