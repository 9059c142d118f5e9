"""tests/labtools.check_runs_as_released fails on what the headless lab runs used to catch."""

import nbformat
import pytest
from labtools import Score, check_runs_as_released

from gpucourse.measure import runtime

MODE = "GPU mode" if runtime.is_gpu() else "Simulator mode"


def notebook(*outputs_per_cell) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    for outputs in outputs_per_cell:
        cell = nbformat.v4.new_code_cell("pass")
        cell.outputs = list(outputs)
        nb.cells.append(cell)
    return nb


def banner(text: str = MODE):
    return nbformat.v4.new_output("display_data", data={"text/plain": text,
                                                        "text/html": '<div class="gpucourse-banner">…</div>'})


def error(name: str):
    return nbformat.v4.new_output("error", ename=name, evalue="…", traceback=[])


def scores(solution, untouched) -> dict[str, Score]:
    return {"solution": Score(notebook=solution), "untouched": Score(notebook=untouched)}


GOOD_SOLUTION = notebook([banner()], [])
GOOD_UNTOUCHED = notebook([banner()], [error("NotImplementedError")], [error("NameError")])


def test_a_lab_that_runs_as_released_passes():
    check_runs_as_released(scores(GOOD_SOLUTION, GOOD_UNTOUCHED))


@pytest.mark.parametrize(("solution", "untouched", "words"), [
    (notebook([banner()], [error("ValueError")]), GOOD_UNTOUCHED, "the solution raised"),
    (notebook([banner()], [nbformat.v4.new_output("stream", name="stderr", text="NumbaPerformanceWarning")]),
     GOOD_UNTOUCHED, "wrote to stderr"),
    (notebook([nbformat.v4.new_output("stream", name="stdout", text="hi")], [banner()]), GOOD_UNTOUCHED, "banner"),
    (notebook([banner("Some other mode")]), GOOD_UNTOUCHED, "banner"),
    (GOOD_SOLUTION, notebook([banner()], []), "should stop at its first exercise"),
    (GOOD_SOLUTION, notebook([banner()], [error("NameError")]), "NameError"),
    (GOOD_SOLUTION, notebook([error("NotImplementedError")]), "banner"),
])
def test_what_is_not_as_released_fails(solution, untouched, words):
    with pytest.raises(AssertionError, match=words):
        check_runs_as_released(scores(solution, untouched))
