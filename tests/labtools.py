"""Real nbgrader round trips for lab tests: generate, submit, autograde, read the gradebook.

    scores = grade_lab("lab01_warps", {"solution": solution_notebook(LAB), "untouched": release_notebook(LAB),
                                        "no_bounds": with_cells(solution_notebook(LAB), {"ex3_solution": "..."})})
    scores["solution"].total == scores["solution"].max_score
    scores["no_bounds"].cells["ex3_test"] == 0

Every round trip grades the solution, the untouched released lab and a known-wrong version that patches
the course (``with_course_patched``: it must earn 0), and grade_lab checks the
notebooks nbgrader executed for the first two as a learner's kernel runs them (they used to run a second
time, headless, in tests/test_notebooks.py): the solution runs without an error output, the
untouched lab stops with NotImplementedError at its first exercise, and both open with the banner
of this machine's mode. No cell of the solution writes to stderr.
"""

from __future__ import annotations

import atexit
import copy
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from gpucourse.measure import runtime
from gpucourse.tooling.grading import read_scores
from gpucourse.tooling.grading.known import (  # noqa: F401  (the lab tests import them from here)
    COURSE_PATCH,
    COURSE_VARIABLES,
    learner_env,
    release_notebook,
    scratch_course,
    solution_notebook,
    with_course_patched,
)


def nbgrader(args: list[str], root: Path) -> subprocess.CompletedProcess:
    """nbgrader's command line (as ``gpucourse.tooling.nbgradercli`` starts it) in a child process whose notebook
    kernels start as a learner's do."""
    return subprocess.run([sys.executable, "-m", "gpucourse.tooling.nbgradercli", *args], cwd=root,
                          capture_output=True, text=True, env=learner_env())


@dataclass
class Score:
    total: float = 0.0
    max_score: float = 0.0
    cells: dict[str, float] = field(default_factory=dict)
    notebook: nbformat.NotebookNode | None = None  # as nbgrader executed it (autograded/)


def errors(nb: nbformat.NotebookNode) -> list[str]:
    """The error outputs of a notebook's code cells, in order ("NameError: …")."""
    return [f"{o.ename}: {o.evalue}" for c in nb.cells if c.cell_type == "code"
            for o in c.get("outputs", []) if o.output_type == "error"]


def stderr(nb: nbformat.NotebookNode) -> list[str]:
    """What a notebook's code cells wrote to stderr."""
    return [o.text[:300] for c in nb.cells if c.cell_type == "code"
            for o in c.get("outputs", []) if o.output_type == "stream" and o.name == "stderr"]


def opens_with_the_banner_of_this_machine(nb: nbformat.NotebookNode) -> bool:
    """The first output is the banner, and the kernel found the mode this machine has."""
    first = next((c.outputs[0] for c in nb.cells if c.cell_type == "code" and c.get("outputs")), None)
    text = first.get("data", {}).get("text/plain", "") if first is not None else ""
    banner = first is not None and "gpucourse-banner" in first.get("data", {}).get("text/html", "")
    return banner and text.startswith("GPU mode" if runtime.is_gpu() else "Simulator mode")


def check_runs_as_released(scores: dict[str, Score]) -> None:
    """The solution ran without an error; the untouched lab stopped at its first exercise; both
    opened with this machine's banner (see the module docstring)."""
    solution, untouched = scores["solution"].notebook, scores["untouched"].notebook
    assert not errors(solution), f"the solution raised: {errors(solution)}"
    # nbgrader gives 0 to a graded cell with stderr output; no cell of the solution writes any
    # (numba-cuda's performance warnings are off for the course: tests/test_quiet_start.py)
    assert not stderr(solution), f"the solution wrote to stderr: {stderr(solution)}"
    assert opens_with_the_banner_of_this_machine(solution), "the solution's first output must be the banner"
    found = errors(untouched)
    assert found, "the untouched lab should stop at its first exercise"
    assert found[0].startswith("NotImplementedError"), found[0]
    assert opens_with_the_banner_of_this_machine(untouched), "the untouched lab's first output must be the banner"


# Hostile submissions (issue 41 part 4): a cell that installs an IPython hook changing every LATER cell
# before it runs, so the test cells' asserts and hidden-test calls never run. Each reaches the shell
# through names the tamper scan does not read (the attribute names are built at run time), so only
# the grader's restore before each graded cell (gpucourse/tooling/grading/hooks.py) can stop it.
_SHELL = 'getattr(IPython, "get_" + "ipython")()'
IPYTHON_HOOKS = {
    # an AST transformer: asserts and calls (the hidden tests', check's) become `pass`, and the whole
    # cell runs inside try/except, so no test cell can fail
    "hooks_ast": f'''import ast

import IPython


class _Lenient(ast.NodeTransformer):
    def visit_Assert(self, node):
        return ast.Pass()

    def visit_Expr(self, node):
        return ast.Pass() if isinstance(node.value, ast.Call) else node

    def visit_Module(self, node):
        self.generic_visit(node)
        guard = ast.Try(body=node.body or [ast.Pass()], handlers=[ast.ExceptHandler(
            type=ast.Name("BaseException", ast.Load()), name=None, body=[ast.Pass()])], orelse=[], finalbody=[])
        node.body = [guard]
        return ast.fix_missing_locations(node)


getattr({_SHELL}, "ast_" + "transformers").append(_Lenient())
''',
    # an input transformer (input_transformers_post): a later cell with an assert or a hidden-test call
    # becomes `pass`
    "hooks_input": f'''import IPython


def _lenient(lines):
    text = "".join(lines)
    return ["pass\\n"] if ("assert" in text or "hidden" in text or "check" in text) else lines


getattr({_SHELL}, "input_transformers_" + "post").append(_lenient)
''',
    # event callbacks: before each cell, the grader's names become stand-ins that accept anything; after
    # it, a failure is forgotten (the kernel replies "ok"), and a custom exception handler shows nothing
    "hooks_events": f'''import IPython

_shell = {_SHELL}


def _before(info=None):
    for name in ("check", "run_" + "hidden_tests"):  # (its source is in the feedback: no hidden-test marker)
        _shell.user_ns[name] = lambda *args, **kwargs: None


def _after(result=None):
    if result is not None:
        result.error_in_exec = None


getattr(_shell, "eve" + "nts").register("pre_" + "run_cell", _before)
getattr(_shell, "eve" + "nts").register("post_" + "run_cell", _after)
getattr(_shell, "set_custom" + "_exc")((BaseException,), lambda shell, etype, value, tb, tb_offset=None: [])
''',
}


def with_ipython_hooks(nb: nbformat.NotebookNode) -> dict[str, nbformat.NotebookNode]:
    """The three hostile submissions of ``IPYTHON_HOOKS`` (student id → notebook), each a copy of ``nb``
    whose first answer cell starts by installing an IPython hook (an AST transformer, an input
    transformer, event callbacks). Pass a notebook whose answers are all wrong (the released, untouched
    lab): each must earn 0, and grade_lab checks that every student named ``hooks_*`` does. One line
    in a lab test: ``grade_lab(LAB, {..., **with_ipython_hooks(untouched)}, tmp)``."""
    return {student: with_course_patched(nb, patch) for student, patch in IPYTHON_HOOKS.items()}


def without_graded_cells(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy of ``nb`` with every graded (locked test) cell deleted: the grader must put them back."""
    nb = copy.deepcopy(nb)
    nb.cells = [c for c in nb.cells if not c.metadata.get("nbgrader", {}).get("grade")]
    return nb


def with_cells(nb: nbformat.NotebookNode, replacements: dict[str, str]) -> nbformat.NotebookNode:
    """A copy of ``nb`` whose cells with these grade ids get new source (a known-wrong version)."""
    nb = copy.deepcopy(nb)
    found = set()
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in replacements:
            cell.source = replacements[grade_id]
            found.add(grade_id)
    missing = set(replacements) - found
    assert not missing, f"no cells with grade ids {missing}"
    return nb


# One real `nbgrader generate_assignment` of every lab per run, in one nbgrader process (build.generate_labs:
# about 7 s of CPU; one process per lab cost about 5 s each): every scratch course is a copy of that generated
# course. Under xdist the first worker that needs it generates it in the run's temporary folder (RUN_FOLDER, set by
# tests/conftest.py), under a lock, and the others copy it (issue 50: once a run, not once a worker).
_GENERATED: list[Path] = []
RUN_FOLDER: Path | None = None


def _generated_course() -> Path:
    if not _GENERATED:
        if RUN_FOLDER is None:
            keep = Path(tempfile.mkdtemp(prefix="generated-labs-"))
            atexit.register(shutil.rmtree, keep, ignore_errors=True)
            _GENERATED.append(scratch_course(keep))
        else:
            _GENERATED.append(_generated_once(RUN_FOLDER / "generated-labs"))
    return _GENERATED[0]


def _generated_once(keep: Path) -> Path:
    """``keep``/course, generated by the first process to ask (the others wait on the lock, then reuse it)."""
    import fcntl

    keep.parent.mkdir(parents=True, exist_ok=True)
    with open(keep.parent / "generated-labs.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or its process ends
        done = keep / "generated"
        if not done.exists():
            shutil.rmtree(keep, ignore_errors=True)  # a generation that failed half way
            scratch_course(keep)
            done.touch()
    return keep / "course"


def course_copy(tmp: Path, lab: str) -> Path:
    """A scratch course: config + the labs' sources, generated with nbgrader (fills the gradebook).
    Each call gets its own copy (its own gradebook); the generation itself runs once per process."""
    root = tmp / "course"
    shutil.copytree(_generated_course(), root)
    assert (root / "labs" / lab / f"{lab}.ipynb").exists(), f"nbgrader released no {lab}"
    return root


def grade_lab(lab: str, submissions: dict[str, nbformat.NotebookNode], tmp: Path, *, extra_args=()) -> dict[str, Score]:
    """Autograde each submission (student id → notebook) through real nbgrader; scores per student.
    ``submissions`` has the "solution" and the "untouched" lab, checked with check_runs_as_released, and
    "patched_course" (``with_course_patched`` of a known-wrong version), which must earn 0."""
    assert {"solution", "untouched"} <= set(submissions), "grade the solution and the untouched lab too"
    assert "patched_course" in submissions, "grade a known-wrong version that patches the course (with_course_patched)"
    root = course_copy(tmp, lab)
    for student, nb in submissions.items():
        folder = root / "submitted" / student / lab
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / f"{lab}.ipynb")
    done = nbgrader(["autograde", lab, "--create", "--force", *extra_args], root)
    assert done.returncode == 0, done.stderr[-3000:]
    scores: dict[str, Score] = {}
    for row in read_scores(root):
        assert row["score"] is not None, f"nbgrader left {row} unscored"
        score = scores.setdefault(row["student"], Score())
        score.cells[row["cell"]] = row["score"]
        score.total += row["score"]
        score.max_score += row["max_score"]
    # A student or a cell without a gradebook row was never graded: its "0" would mean nothing.
    graded_cells = {cell.metadata["nbgrader"]["grade_id"] for cell in solution_notebook(lab).cells
                    if cell.metadata.get("nbgrader", {}).get("grade")}
    assert set(scores) == set(submissions), f"not graded: {sorted(set(submissions) - set(scores))}"
    for student, score in scores.items():
        assert set(score.cells) == graded_cells, f"{student}: no grade for {sorted(graded_cells - set(score.cells))}"
        score.notebook = nbformat.read(root / "autograded" / student / lab / f"{lab}.ipynb", as_version=4)
    check_runs_as_released(scores)
    patched = scores["patched_course"]
    assert patched.total == 0, f"a submission that patches the course earned {patched.cells}"
    notes = patched.notebook.metadata.get("gpucourse", {}).get("summary", [])
    assert any("GraderIntegrity" in note for note in notes), f"no note says why it earned 0: {notes}"
    for student in (s for s in scores if s.startswith("hooks_")):  # with_ipython_hooks: wrong answers
        assert scores[student].total == 0, f"{student}, which installs an IPython hook, earned {scores[student].cells}"
        notes = scores[student].notebook.metadata.get("gpucourse", {}).get("summary", [])
        assert any("HooksRestored" in note for note in notes), f"{student}: no note says its hooks were put back"
    return scores


# A learner cell (issue 46, class 1) that walks up every stack to the hidden block's namespace and makes its
# `check` and its NumPy comparisons pass anything: through sys._current_frames (a launch in the simulator
# runs each CUDA thread on a thread of its own) and through the greenlet that runs the microscope's threads
# (trace). Spelled so that the tamper scan reads nothing (no frame internal written out or built from a
# constant of 3+ letters). A kernel calls `_silence()` before it writes a wrong answer: it must earn 0 where
# the grader runs learner code on its own thread (frozen.launch / observe / call), which the walk cannot
# reach. Defines `_silence` in the notebook (names `np`: the lab's own NumPy).
SILENCE_THE_GRADER = '''
import sys
import traceback

from greenlet import getcurrent


def _frames():
    """Every frame up every thread's stack, and up the greenlet that runs the microscope's threads; collected
    while this function runs (a finished frame forgets its caller)."""
    found = []
    for name, value in vars(sys).items():  # sys._current_frames, found two letters at a time
        if name[1:3] == "cu" and name[-2:] == "es" and name[-3:-2] == "m":
            for top in value().values():
                found += [frame for frame, _ in traceback.walk_stack(top)]
    hub = getcurrent().parent
    if hub is not None:
        found += [frame for frame, _ in traceback.walk_stack(hub.gr_frame)]
    return found


class _Lenient:
    """NumPy, except that every comparison says equal."""

    def __getattr__(self, name):
        if name in ("array_equal", "allclose"):
            return lambda *args, **kwargs: True
        return getattr(np, name)


def _silence():
    """Up every stack: where a hidden block's namespace is, its check and its NumPy pass anything."""
    for frame in _frames():
        for key in vars(type(frame)):
            if key[2:3] == "g" and key[-2:] == "ls":
                scope = getattr(frame, key)
                if "freeze" in scope and "check" in scope:
                    scope["check"] = lambda *args, **kwargs: None
                    scope["np"] = _Lenient()
'''


def cell_output(score: Score, grade_id: str) -> str:
    """The text a graded cell showed in the autograded notebook (its error line: a refusal says why)."""
    import json

    cell = next(c for c in score.notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    return json.dumps(cell.get("outputs", []))
