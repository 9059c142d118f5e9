"""tools/mutate.py: every mutation on its list is killed by the tests it names.

The full pass runs one pytest per mutation (49 of them), plus one unmutated run per group of test
files: about 4 minutes of CPU (the first 23 took 538 s of wall-clock time on a busy 2-core machine), so
it is marked ``extra``: ``make test-extra`` runs it (``.ci/run`` does, after ``make test``); ``make test``
and ``make test-fast`` do not. It is given at most an hour. The list's shape is
checked on every run.
"""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import mutate  # noqa: E402


def test_every_mutation_names_text_found_once_and_tests_that_exist():
    assert len(mutate.MUTATIONS) >= 15 and len({m.name for m in mutate.MUTATIONS}) == len(mutate.MUTATIONS)
    for m in mutate.MUTATIONS:
        count = (ROOT / m.file).read_text().count(m.old)
        assert count == 1 or (m.optional and count == 0), f"{m.name}: its text occurs {count} times in {m.file}"
        assert m.old != m.new and m.breaks and m.tests, m.name
        files = [t for t in m.tests if t.endswith(".py")]
        assert files and all((ROOT / f).is_file() for f in files), m.name
        assert m.tests.count("-k") <= 1, f"{m.name}: a second -k replaces the first (pytest keeps the last)"


def test_apply_mutates_a_copy_and_reports_missing_text(tmp_path):
    (tmp_path / "a.py").write_text("X = 1\n")
    m = mutate.Mutation("x", "a.py", "X = 1", "X = 2", "x is one", ["t.py"])
    assert mutate.apply(tmp_path, m) == "X = 1\n" and (tmp_path / "a.py").read_text() == "X = 2\n"
    assert mutate.apply(tmp_path, m) is None  # the text is gone: stale (or not applicable)


def test_the_unmutated_runs_hold_every_selection_in_fewer_start_ups():
    def m(*tests):
        return mutate.Mutation("x", "a.py", "X", "Y", "x", list(tests))

    chosen = [m("a.py", "-k", "one"), m("a.py", "-k", "two"), m("b.py"), m("b.py", "-k", "three"),
              m("b.py", "c.py", "-k", "four")]
    assert mutate.baseline_selections(chosen) == [["b.py"], ["a.py", "-k", "(one) or (two)"],
                                                  ["b.py", "c.py", "-k", "(four)"]]
    runs = mutate.baseline_selections(mutate.MUTATIONS)
    assert len(runs) < len({tuple(m.tests) for m in mutate.MUTATIONS})
    for one in mutate.MUTATIONS:  # each mutation's tests pass unmutated in some run before it is applied
        cut = one.tests.index("-k") if "-k" in one.tests else len(one.tests)
        files, k = set(one.tests[:cut]), one.tests[cut + 1] if cut < len(one.tests) else None
        assert any(files <= set(r[:r.index("-k") if "-k" in r else len(r)])
                   and ("-k" not in r or (k is not None and f"({k})" in r[-1])) for r in runs), one.name


@pytest.mark.slow
@pytest.mark.extra
def test_no_mutation_survives():
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "mutate.py")], cwd=ROOT, capture_output=True,
                          text=True, timeout=3600, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
