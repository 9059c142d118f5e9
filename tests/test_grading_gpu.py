"""GPU-only hostile submissions of lab 01, through `make grade` (the sandboxed kernel on a real GPU):
an illegal memory access and a kernel that never returns. Run with `pytest -m gpu` on a GPU."""

from __future__ import annotations

import contextlib
import io
import os
import shutil

import pytest

# a validation host (gpu-report on an HPC node) has no Jupyter stack: these tests skip there, saying so
nbformat = pytest.importorskip("nbformat", reason="grading needs the Jupyter stack (nbformat, jupytext, nbgrader)")
pytest.importorskip("jupytext", reason="grading needs the Jupyter stack (nbformat, jupytext, nbgrader)")
pytest.importorskip("nbgrader", reason="grading needs the Jupyter stack (nbformat, jupytext, nbgrader)")

from gpucourse.tooling.build import ROOT, to_notebook  # noqa: E402
from gpucourse.tooling.grading import grade_all, nbgrader_api, read_scores  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.slow, pytest.mark.xdist_group("hostile")]

LAB = "lab01_warps"

ILLEGAL_ADDRESS = '''
@cuda.jit
def add_2d(a, b, out):
    col, row = cuda.grid(2)
    out[row + 1_000_000_000, col] = a[row, col] + b[row, col]  # far outside the array: an illegal address


def launch_add_2d(a, b, block=(16, 16)):
    out = np.zeros_like(a)
    rows, cols = a.shape
    grid = (blocks_per_grid(cols, block[0]), blocks_per_grid(rows, block[1]))
    add_2d[grid, block](a, b, out)
    return out
'''

NEVER_RETURNS = '''
@cuda.jit
def add_2d(a, b, out):
    i = 0
    while i >= 0:  # a store in the loop, so that the compiler cannot drop it
        i = (i + 1) % 1000
        out[0, 0] = i


def launch_add_2d(a, b, block=(16, 16)):
    out = np.zeros_like(a)
    add_2d[(1, 1), (1, 1)](a, b, out)
    return out  # copying `out` back waits for the kernel, inside the driver: Ctrl-C cannot stop it
'''


def _with(nb, grade_id: str, source: str):
    nb = nbformat.reads(nbformat.writes(nb), as_version=4)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id:
            cell.source = source
    return nb


def test_gpu_faults_are_graded_and_the_batch_carries_on(tmp_path):
    root = tmp_path / "course"
    (root / "solutions").mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", root)
    with open(root / "nbgrader_config.py", "a") as config:
        config.write("\nc.Execute.timeout = 40\nc.GuardedExecute.interrupt_grace = 5\n")
    shutil.copytree(ROOT / "solutions" / LAB, root / "solutions" / LAB, ignore=shutil.ignore_patterns("*.ipynb"))
    solution = to_notebook(ROOT / "solutions" / LAB / f"{LAB}.py")
    nbformat.write(solution, root / "solutions" / LAB / f"{LAB}.ipynb")
    cwd = os.getcwd()
    try:
        os.chdir(root)
        assert nbgrader_api(root).generate_assignment(LAB, force=True)["success"]
    finally:
        os.chdir(cwd)
    submissions = {"solution": solution, "illegal_address": _with(solution, "ex3_solution", ILLEGAL_ADDRESS),
                   "never_returns": _with(solution, "ex3_solution", NEVER_RETURNS)}
    for student, nb in submissions.items():
        (root / "submitted" / student / LAB).mkdir(parents=True)
        nbformat.write(nb, root / "submitted" / student / LAB / f"{LAB}.ipynb")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert grade_all(root, jobs=2, gpu=True) == 0, printed.getvalue()
    cells: dict[str, dict[str, float]] = {}
    for row in read_scores(root):
        cells.setdefault(row["student"], {})[row["cell"]] = row["score"] or 0.0
    assert sum(cells["solution"].values()) == 10, printed.getvalue()
    # the fault fails exercise 3; exercise 4 is plain Python and still passes
    assert cells["illegal_address"] == {"ex1_test": 2, "ex2_test": 2, "ex3_test": 0, "ex4_test": 2}
    # the kernel cannot be interrupted: killed, and the cells after it are not run
    assert cells["never_returns"] == {"ex1_test": 2, "ex2_test": 2, "ex3_test": 0, "ex4_test": 0}
    assert "did not stop when interrupted" in printed.getvalue()
