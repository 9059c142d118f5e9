"""Hostile and broken submissions, graded in ONE batch by the real `make grade` path
(`grade_all`: parallel workers, nbgrader, the sandboxed kernel) and `make feedback`.

The lab is a tiny synthetic one (every normal cell runs in milliseconds), so that a short time
limit is safe and the hanging cases stay cheap; the mechanisms are the same for every lab (the
real labs go through them in their own round-trip tests). Each learner below is one case; the
scores are exact and the feedback is checked for leaks.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import nbformat
import pytest
from labtools import COURSE_PATCH, with_ipython_hooks

from gpucourse.measure import runtime
from gpucourse.tooling.build import to_notebook
from gpucourse.tooling.grading import GENERIC_FAILURE, feedback_all, grade_all, landlock_abi, nbgrader_api, read_scores

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("hostile"),
              pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning")]

LAB = "lab00_hostile"
CONFIG = {"grade": False, "locked": True, "schema_version": 3, "solution": False, "task": False}


def _meta(grade_id, **changes) -> str:
    import json

    return "nbgrader=" + json.dumps({**CONFIG, "grade_id": grade_id, **changes})


SOURCE = f'''# %% [markdown] {_meta("intro")}
# # A tiny lab for the grader's tests

# %% {_meta("setup")}
import numpy as np

from gpucourse.tooling.grading import check

# %% {_meta("ex1_solution", locked=False, solution=True)}
def add_one(x):
    ### BEGIN SOLUTION
    return x + 1
    ### END SOLUTION


# %% {_meta("ex1_test", grade=True, points=2)}
"""Check that add_one adds one."""
assert add_one(1) == 2, "add_one(1) should be 2"
### BEGIN HIDDEN TESTS
expected = {{7919: 7920, 104729: 104730, -7: -6}}  # bound BEFORE the learner's code runs: it must not matter
got = call_each(add_one, [(x,) for x in expected])
for answer, want in zip(got, expected.values(), strict=True):
    check(answer == want)
### END HIDDEN TESTS

# %% {_meta("ex2_solution", locked=False, solution=True)}
def scaled(a, k):
    ### BEGIN SOLUTION
    return np.asarray(a, dtype=np.float32) * np.float32(k)
    ### END SOLUTION


# %% {_meta("ex2_test", grade=True, points=2)}
"""Check that scaled keeps the shape, returns float32 and scales."""
out = scaled(np.ones((2, 3)), 2)
assert out.shape == (2, 3), "scaled must keep the shape of a"
assert out.dtype == np.float32, "scaled must return float32"
assert np.allclose(out, 2.0), "every element of scaled(ones, 2) should be 2"
### BEGIN HIDDEN TESTS
grid = np.arange(6.0).reshape(3, 2)
want = grid * 3
check(np.allclose(call(scaled, grid.copy(), 3), want))
check(call(scaled, np.zeros((4, 1, 2)), 5).shape == (4, 1, 2))
### END HIDDEN TESTS

# %% {_meta("ex3_solution", locked=False, solution=True)}
def warps(threads):
    ### BEGIN SOLUTION
    return (threads + 31) // 32
    ### END SOLUTION


# %% [markdown] {_meta("ex3_hint")}
# A locked cell between an answer and its test, as in most labs (lab 00a's `show` cells).

# %% {_meta("ex3_test", grade=True, points=2)}
"""Check that warps rounds up to whole warps."""
assert warps(32) == 1, "32 threads are one warp"
### BEGIN HIDDEN TESTS
FORBIDDEN = {{"fractions:Fraction": "exact fractions do the rounding for you"}}
got = call_each(warps, [(1,), (33,), (1000,), (1024,)])
check(got == [1, 2, 32, 32])
### END HIDDEN TESTS
'''

HIDDEN_MARKERS = ("7919", "104729", "BEGIN HIDDEN", "run_hidden_tests", "check(", "grid * 3")

NJIT_LOOP = '''import numba


@numba.njit
def _spin(n):
    i = 0
    while i >= 0:
        i = (i + n) % 1000
    return i


def scaled(a, k):
    _spin(1)  # never returns, and cannot be interrupted: compiled code ignores Ctrl-C
    return np.asarray(a, dtype=np.float32) * k
'''

KERNEL_LOOP = '''from gpucourse.measure import runtime

cuda = runtime.cuda


@cuda.jit
def _spin_kernel(out):
    while True:
        pass


def scaled(a, k):
    _spin_kernel[1, 1](np.zeros(1))
    return np.asarray(a, dtype=np.float32) * k
'''

READS_SECRETS = '''import os
import signal
from pathlib import Path

import gpucourse

repo = Path(gpucourse.__file__).resolve().parent.parent
stolen = {}
for path in [repo / "solutions" / "lab01_warps" / "lab01_warps.py", Path("../../../gradebook.db"),
             Path("../../../solutions/lab00_hostile/lab00_hostile.py"),
             Path("../../../solutions/lab00_hostile/lab00_hostile.ipynb"),
             Path("../../../submitted/solution/lab00_hostile/lab00_hostile.ipynb"),
             Path("../../../nbgrader_config.py")]:
    try:
        stolen[path.name] = path.read_bytes()
        print("READ", path.name)
    except OSError as exc:
        print("DENIED", path.name, type(exc).__name__)
try:
    os.listdir("../../..")
    print("READ course folder")
except OSError as exc:
    print("DENIED course folder", type(exc).__name__)
try:
    os.kill(os.getppid(), signal.SIGTERM)
    print("KILLED the grader")
except OSError as exc:
    print("DENIED kill", type(exc).__name__)


def add_one(x):
    return x + 1 if stolen else x  # full marks only with stolen answers
'''

LEAKY = '''def add_one(x):
    print("add_one was called with", x)
    if x != 1:
        raise ValueError(f"unexpected input {x}")
    return 2
'''


# Tampering the scan does not recognise: each would make the visible `np.allclose` check pass a wrong
# `scaled`; the snapshot is put back before every graded cell (and again in its hidden block), so the
# visible check fails the wrong answer with its own message.
UNSEEN_TAMPERING = {
    "alias": "m = np\nm.allclose = lambda *args, **kwargs: True\n",
    "vars": "import operator\n\noperator.setitem(vars(np), 'allclose', lambda *args, **kwargs: True)\n",
    "list": "fns = [np]\nfns[0].allclose = lambda *args, **kwargs: True\n",
    "default": "def _patch(m=np):\n    m.allclose = lambda *args, **kwargs: True\n\n\n_patch()\n",
    "starred": "setattr(*[np, 'allclose', lambda *args, **kwargs: True])\n",
}
WRONG_SCALED = "\n\ndef scaled(a, k):\n    return np.ones(np.shape(a), dtype=np.float32)\n"

# Wrong answers that pass every visible test and fail every hidden one, behind the review's patch of the
# course (issue 32, labtools.COURSE_PATCH): once as the tamper scan sees it (`sys.modules`), once unseen
# (`getattr(sys, "modules")`). The patch also replaced the way into the hidden tests, which then returned
# its stand-in: a cell's displayed value, which nbgrader took as full credit despite the scan's verdict.
VISIBLY_RIGHT = {
    "ex1_solution": "def add_one(x):\n    return 2\n",
    "ex2_solution": "def scaled(a, k):\n    return np.full(np.shape(a), 2.0, dtype=np.float32)\n",
    "ex3_solution": "def warps(threads):\n    return threads // 32\n",
}
PATCHES = {"patched_course": COURSE_PATCH,
           "patched_course_seen": COURSE_PATCH.replace('getattr(sys, "modules")', "sys.modules")}
# A learner's function that displays a value as a cell's result before the test fails (nbgrader reads a
# cell's displayed value as its partial credit).
PRINTS_A_SCORE = "def add_one(x):\n    import sys\n\n    sys.displayhook(2.0)\n    return x\n"


# Answers that reach for the expected values or the comparison (issue 46), and forbidden calls that a
# spelling check cannot see. Names that would be tampering when spelled in one cell are built in another
# (the scan reads a cell at a time): the run-time mechanisms must stop them on their own.
NAMES_CELL = 'NAMES = ["f_" + "locals", "f_" + "back"]\n'
FRAME_WALK = """import traceback


def add_one(x):
    for frame, _ in traceback.walk_stack(None):  # up every frame: the comparing test's, in the old design
        scope = getattr(frame, NAMES[0])
        if "expected" in scope and x in scope["expected"]:
            return scope["expected"][x]
    return x
"""
LAZY_ANSWER = """
class Lazy:
    def __init__(self, x):
        self.x = x

    def __eq__(self, other):  # runs inside the comparison, where the expected value is
        return True


def add_one(x):
    return Lazy(x)
"""
INT_SUBCLASS = """
class Int(int):
    pass


def add_one(x):
    return Int(x + 1)  # the right value, but not plain data: its class could decide the comparison
"""
ARRAY_SUBCLASS = """
class Array(np.ndarray):
    pass


def scaled(a, k):
    return (np.asarray(a, dtype=np.float32) * np.float32(k)).view(Array)
"""
FORBIDDEN_DEFAULT = """from fractions import Fraction
import math


def warps(threads, exact=Fraction):  # a default: not among the function's names
    return math.ceil(exact(threads, 32))
"""
FORBIDDEN_CLOSURE = """import math


def _make():
    from fractions import Fraction as exact

    def warps(threads):
        return math.ceil(exact(threads, 32))

    return warps


warps = _make()
"""
FORBIDDEN_BY_NAME = """import fractions as _maths
import math


def warps(threads):
    return math.ceil(getattr(_maths, "Frac" + "tion")(threads, 32))  # a name built at run time
"""
CONSTRUCTED_GETATTR = """import sys


def add_one(x):
    frame = getattr(sys, "_get" + "frame")(1)
    return getattr(frame, "f_" + "locals").get("want", x + 1)
"""


def _course(tmp: Path) -> Path:
    root = tmp / "course"
    folder = root / "solutions" / LAB
    folder.mkdir(parents=True)
    shutil.copy(Path(__file__).resolve().parent.parent / "nbgrader_config.py", root)
    with open(root / "nbgrader_config.py", "a") as config:  # short limits: every normal cell takes ms
        config.write("\nc.Execute.timeout = 6\n")
    (folder / f"{LAB}.py").write_text(SOURCE)
    nbformat.write(to_notebook(folder / f"{LAB}.py"), folder / f"{LAB}.ipynb")
    cwd = os.getcwd()
    try:  # in-process: saves starting nbgrader once more
        os.chdir(root)
        done = nbgrader_api(root).generate_assignment(LAB, force=True)
    finally:
        os.chdir(cwd)
    assert done["success"], done
    return root


def _cells(nb, replacements: dict) -> nbformat.NotebookNode:
    nb = nbformat.reads(nbformat.writes(nb), as_version=4)
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in replacements:
            change = replacements[grade_id]
            if callable(change):
                change(cell)
            else:
                cell.source = change
    return nb


def _prepend(text: str):
    def change(cell):
        cell.source = text + "\n\n" + cell.source
    return change


def _delete(nb, *grade_ids) -> nbformat.NotebookNode:
    nb = nbformat.reads(nbformat.writes(nb), as_version=4)
    nb.cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") not in grade_ids]
    return nb


def _set(**changes):
    def change(cell):
        cell.metadata["nbgrader"].update({k: v for k, v in changes.items() if k != "tags"})
        if "tags" in changes:
            cell.metadata["tags"] = changes["tags"]
    return change


def _submissions(root: Path) -> dict:
    solution = to_notebook(root / "solutions" / LAB / f"{LAB}.py")
    untouched = nbformat.read(root / "labs" / LAB / f"{LAB}.ipynb", as_version=4)
    return {
        "solution": solution,
        "untouched": untouched,
        **with_ipython_hooks(_cells(untouched, VISIBLY_RIGHT)),
        "python_loop": _cells(solution, {"ex3_solution": "def warps(threads):\n    while True:\n        pass\n"}),
        "njit_loop": _cells(solution, {"ex2_solution": NJIT_LOOP}),
        "kernel_loop": _cells(solution, {"ex2_solution": KERNEL_LOOP}),
        "exits": _cells(solution, {"ex1_solution": "import os\n\nos._exit(3)\n"}),
        "segfault": _cells(solution, {"ex2_solution": "import faulthandler\n\nfaulthandler._sigsegv()\n"}),
        "deleted_tests": _delete(_cells(solution, {"ex3_solution": "def warps(threads):\n    return threads // 32\n"}),
                                 "ex1_test", "ex3_test"),
        "deleted_locked": _delete(solution, "setup", "ex1_test", "ex2_test", "ex3_hint", "ex3_test"),
        **{name: _cells(solution, {**VISIBLY_RIGHT, "ex1_solution": patch + "\n\n" + VISIBLY_RIGHT["ex1_solution"]})
           for name, patch in PATCHES.items()},
        "prints_a_score": _cells(solution, {"ex1_solution": PRINTS_A_SCORE}),
        "edited_tests": _cells(solution, {
            "ex3_solution": "def warps(threads):\n    return threads // 32\n",
            "ex3_test": "pass  # nothing to see here",
            "ex2_test": _set(points=100),
            "ex1_solution": "def add_one(x):\n    return x\n",
            "ex1_test": _set(tags=["skip-execution"]),
        }),
        "redefined_check": _cells(solution, {"ex1_solution": (
            "def check(*args, **kwargs):\n    pass\n\n\ndef add_one(x):\n    return 2\n")}),
        "patched_grader": _cells(solution, {"ex1_solution": (
            "import gpucourse.tooling.grading\n\ngpucourse.grading.check = lambda *args, **kwargs: None\n\n\n"
            "def add_one(x):\n    return x + 1\n")}),
        "patched_numpy": _cells(solution, {"ex2_solution": (
            "np.allclose = lambda *args, **kwargs: True\n\n\ndef scaled(a, k):\n"
            "    return np.ones(np.shape(a), dtype=np.float32)\n")}),
        **{f"unseen_{name}": _cells(solution, {"ex2_solution": code + WRONG_SCALED})
           for name, code in UNSEEN_TAMPERING.items()},
        "big_output": _cells(solution, {"ex1_solution": (
            "for i in range(25_000):\n    print('line', i, 'x' * 70)\n\n\ndef add_one(x):\n    return x + 1\n")}),
        "reads_secrets": _cells(solution, {"ex1_solution": READS_SECRETS}),
        "wrong_shape": _cells(solution, {"ex2_solution": (
            "def scaled(a, k):\n    return (np.asarray(a, dtype=np.float32) * k).ravel()\n")}),
        "wrong_dtype": _cells(solution, {"ex2_solution": "def scaled(a, k):\n    return np.asarray(a) * k\n"}),
        "leaky": _cells(solution, {"ex1_solution": LEAKY}),
        "frame_walk": _cells(solution, {"ex1_solution": FRAME_WALK, "ex2_solution": _prepend(NAMES_CELL)}),
        "lazy_answer": _cells(solution, {"ex1_solution": LAZY_ANSWER}),
        "int_subclass": _cells(solution, {"ex1_solution": INT_SUBCLASS}),
        "array_subclass": _cells(solution, {"ex2_solution": ARRAY_SUBCLASS}),
        "forbidden_default": _cells(solution, {"ex3_solution": FORBIDDEN_DEFAULT}),
        "forbidden_closure": _cells(solution, {"ex3_solution": FORBIDDEN_CLOSURE}),
        "forbidden_by_name": _cells(solution, {"ex3_solution": FORBIDDEN_BY_NAME}),
        "constructed_getattr": _cells(solution, {"ex1_solution": CONSTRUCTED_GETATTR}),
    }


EXPECTED = {  # ex1, ex2, ex3 (2 points each)
    "solution": (2, 2, 2),
    "untouched": (0, 0, 0),
    "python_loop": (2, 2, 0),  # interrupted at the time limit, the rest is graded
    "njit_loop": (2, 0, 0),  # cannot be interrupted: killed, the rest is not run
    "kernel_loop": (2, 0, 2) if not runtime.is_gpu() else (2, 0, 0),  # simulator threads can be interrupted
    "exits": (0, 0, 0),
    "segfault": (2, 0, 0),
    "deleted_tests": (2, 2, 0),  # the deleted tests are put back and graded
    "deleted_locked": (2, 2, 2),  # every locked cell put back (the imports too), in its place
    "patched_course": (0, 0, 0),  # the grader's run-time check sees the patch: every graded cell scores 0
    "patched_course_seen": (0, 0, 0),  # the scan sees it: 0, whatever the cells displayed
    "prints_a_score": (0, 2, 2),  # a displayed value is not a score
    "edited_tests": (0, 2, 0),  # edits undone, points restored, skip tag dropped
    "redefined_check": (0, 2, 2),  # hidden tests use the grader's own check
    "patched_grader": (0, 0, 0),  # tampering: every graded cell scores 0
    "patched_numpy": (0, 0, 0),
    # wrong answers that pass the visible tests, behind an IPython hook that would skip the test cells'
    # asserts and hidden-test calls (labtools.IPYTHON_HOOKS): put back before each graded cell
    **dict.fromkeys(("hooks_ast", "hooks_input", "hooks_events"), (0, 0, 0)),
    **{f"unseen_{name}": (2, 0, 2) for name in UNSEEN_TAMPERING},  # the wrong scaled fails its hidden test
    "big_output": (2, 2, 2),
    "reads_secrets": (0, 2, 2),  # nothing could be read, so the cheat fails
    "wrong_shape": (2, 0, 2),
    "wrong_dtype": (2, 0, 2),
    "leaky": (0, 2, 2),
    # issue 46: the answer key out of reach, answers frozen to plain data, forbidden calls on a tripwire
    "frame_walk": (0, 2, 2),  # the learner's function runs on its own thread: no test frame above it
    "lazy_answer": (0, 0, 0),  # refused before any comparison; its __eq__ also fails every hidden block
    "int_subclass": (0, 2, 2),
    "array_subclass": (2, 0, 2),
    "forbidden_default": (2, 2, 0),  # Fraction reached through a default, a closure: the tripwire sees it
    "forbidden_closure": (2, 2, 0),
    "forbidden_by_name": (2, 2, 0),
    "constructed_getattr": (0, 0, 0),  # a frame internal by a name the scan folds: tampering
    "broken_json": (0, 0, 0),
    "misnamed": (0, 0, 0),
}


def _feedback_text(root: Path, student: str) -> str:
    import html

    page = (root / "feedback" / student / LAB / f"{LAB}.html").read_text()
    page = re.sub(r"<style.*?</style>|<script.*?</script>", "", page, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def _outputs(root: Path, student: str, grade_id: str) -> str:
    """Everything a cell of the autograded notebook printed or displayed (not its source)."""
    import json

    nb = nbformat.read(root / "autograded" / student / LAB / f"{LAB}.ipynb", as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    return json.dumps(cell.outputs)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = _course(tmp_path_factory.mktemp("hostile"))
    for student, nb in _submissions(root).items():
        folder = root / "submitted" / student / LAB
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / f"{LAB}.ipynb")
    broken = root / "submitted" / "broken_json" / LAB
    broken.mkdir(parents=True)
    (broken / f"{LAB}.ipynb").write_text('{"cells": [ this is not a notebook')
    misnamed = root / "submitted" / "misnamed" / LAB
    misnamed.mkdir(parents=True)
    shutil.copy(root / "submitted" / "solution" / LAB / f"{LAB}.ipynb", misnamed / "Untitled.ipynb")
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        grade_rc = grade_all(root, jobs=2, quiet=True)
        feedback_rc = feedback_all(root)
    return root, grade_rc, feedback_rc, out.getvalue()


def test_every_case_gets_its_exact_score_and_the_batch_carries_on(graded):
    root, grade_rc, feedback_rc, printed = graded
    assert grade_rc == 0 and feedback_rc == 0, printed
    cells: dict[str, dict[str, float]] = {}
    for row in read_scores(root):
        assert row["score"] is not None, row  # a cell nbgrader never scored is not a zero
        cells.setdefault(row["student"], {})[row["cell"]] = row["score"]
        assert row["max_score"] == 2, row  # points edited to 100 were restored
    # Every submission, unreadable ones included, has a gradebook row for each graded cell: a 0 below
    # was graded (or given by the grader for a notebook it could not read), never a missing row.
    assert {s: sorted(c) for s, c in cells.items()} == {s: ["ex1_test", "ex2_test", "ex3_test"] for s in EXPECTED}
    got = {s: tuple(cells[s][f"ex{i}_test"] for i in (1, 2, 3)) for s in EXPECTED}
    assert got == {s: tuple(float(p) for p in e) for s, e in EXPECTED.items()}, printed
    import csv

    with open(root / "grades.csv") as handle:
        rows = {r["student"]: r for r in csv.DictReader(handle)}
    assert set(rows) == set(EXPECTED)
    assert float(rows["solution"]["score"]) == 6 and float(rows["solution"]["max_score"]) == 6
    assert "not a readable notebook" in rows["broken_json"]["note"]
    assert "no lab00_hostile.ipynb" in rows["misnamed"]["note"]
    assert (root / "grades_by_cell.csv").read_text().count("\n") >= 3 * 17
    assert f"lab00_hostile: {len(EXPECTED)} graded" in printed
    for student in ("hooks_ast", "hooks_input", "hooks_events"):  # put back before each graded cell, so the
        text = _feedback_text(root, student)  # check after the cell finds nothing put back again
        assert "HooksRestored" in text and "GraderIntegrity" not in text, student


def test_time_limits_end_with_a_readable_note(graded):
    root = graded[0]
    assert "was stopped" in _feedback_text(root, "python_loop")
    njit = _feedback_text(root, "njit_loop")
    assert "did not stop when interrupted" in njit and "NotRun" in njit


def test_a_kernel_that_kills_its_process_scores_0_with_a_note(graded):
    root = graded[0]
    for student in ("exits", "segfault"):
        text = _feedback_text(root, student)
        assert "KernelDied" in text and "segmentation fault" in text, student


def test_locked_cells_are_enforced(graded):
    root = graded[0]
    for student in ("deleted_tests", "edited_tests", "deleted_locked"):
        nb = nbformat.read(root / "autograded" / student / LAB / f"{LAB}.ipynb", as_version=4)
        sources = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in nb.cells}
        assert "add_one(1) == 2" in sources["ex1_test"] and "warps(32) == 1" in sources["ex3_test"]

    def order(path):
        nb = nbformat.read(path, as_version=4)
        return [c.metadata["nbgrader"]["grade_id"] for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id")]

    restored = root / "autograded" / "deleted_locked" / LAB / f"{LAB}.ipynb"
    assert order(restored) == order(root / "labs" / LAB / f"{LAB}.ipynb")  # each put back in its place
    import csv

    with open(root / "grades.csv") as handle:
        notes = {r["student"]: r["note"] for r in csv.DictReader(handle)}
    assert "ex1_test, ex3_test were missing" in notes["deleted_tests"] and "put them back" in notes["deleted_tests"]


def test_tampering_scores_0_and_a_redefined_check_is_only_noted(graded):
    root = graded[0]
    assert "GraderIntegrity" in _feedback_text(root, "patched_grader")
    assert "np.allclose" in _feedback_text(root, "patched_numpy")
    text = _feedback_text(root, "redefined_check")
    assert "defines `check`" in text.replace("\\", "") and "GraderIntegrity" not in text
    assert "kernel header failed" not in (root / "grades.csv").read_text()  # every kernel had its snapshot
    for name in PATCHES:  # seen by the scan or at run time, a patch of the course is tampering
        assert "GraderIntegrity" in _feedback_text(root, name), name
    for name in UNSEEN_TAMPERING:  # the snapshot is put back before every graded cell (hooks.before_test_cell):
        text = _feedback_text(root, f"unseen_{name}")  # the visible check sees the real np.allclose too
        assert "every element of scaled(ones, 2) should be 2" in text and "GraderIntegrity" not in text, name


def test_megabytes_of_output_are_cut(graded):
    root = graded[0]
    size_bytes = (root / "autograded" / "big_output" / LAB / f"{LAB}.ipynb").stat().st_size
    assert size_bytes < 400_000
    assert "characters of output were dropped" in _feedback_text(root, "big_output")


@pytest.mark.skipif(not landlock_abi(), reason="this kernel has no Landlock, so the grading kernel is not "
                                                "sandboxed (grading still works; it says so)")
def test_a_submission_cannot_read_solutions_gradebook_or_other_submissions(graded):
    root = graded[0]
    output = _outputs(root, "reads_secrets", "ex1_solution")
    assert "READ" not in output and "KILLED" not in output, output
    for name in ("lab01_warps.py", "gradebook.db", "lab00_hostile.py", "lab00_hostile.ipynb", "nbgrader_config.py",
                 "course folder", "kill"):
        assert f"DENIED {name}" in output, (name, output)
    assert "int(np.prod(shape))" not in _feedback_text(root, "reads_secrets")  # a line of lab 01's solution


def test_refused_answers_and_tripped_wires_say_why(graded):
    root = graded[0]
    assert "is an object of a class of your own" in _feedback_text(root, "lazy_answer")
    assert "is an object of a subclass of int" in _feedback_text(root, "int_subclass")
    assert "is an object of a class of your own" in _feedback_text(root, "array_subclass")
    for student in ("forbidden_default", "forbidden_closure", "forbidden_by_name"):
        text = _feedback_text(root, student)
        assert "forbids: fractions:Fraction: exact fractions do the rounding for you" in text, student
    assert "reaches `_getframe` through `getattr()`" in _feedback_text(root, "constructed_getattr")


def test_wrong_dtype_or_shape_fails_with_the_visible_message(graded):
    root = graded[0]
    assert "scaled must keep the shape of a" in _feedback_text(root, "wrong_shape")
    assert "scaled must return float32" in _feedback_text(root, "wrong_dtype")


def test_feedback_never_reveals_hidden_tests(graded):
    root = graded[0]
    for student in EXPECTED:
        if student in ("broken_json", "misnamed"):
            text = (root / "feedback" / student / LAB / f"{LAB}.html").read_text()
            assert "0 points" in text and "not graded" in text
            continue
        text = _feedback_text(root, student)
        for marker in HIDDEN_MARKERS:
            assert marker not in text, (student, marker)
    # an exception on the grader's inputs is named by its builtin type only, never with its message
    assert "your function raised ValueError on the grader's inputs" in _feedback_text(root, "leaky")
    assert GENERIC_FAILURE in _feedback_text(root, "deleted_tests")  # threads // 32: a plain wrong answer
    # the learner's prints during hidden tests were muted, not just hidden from feedback
    assert "7919" not in _outputs(root, "leaky", "ex1_test")
