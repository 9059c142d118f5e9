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


def test_the_generated_course_is_made_once_a_run_whoever_asks_at_the_same_time(tmp_path, monkeypatch):
    """xdist's workers share the run's folder: the first to ask generates the course under the lock, the others
    wait and reuse it; a generation that failed half way is made again."""
    import threading
    import time

    import labtools

    made = []

    def fake_scratch_course(keep):
        made.append(keep)
        time.sleep(0.2)  # the others arrive while it is being made
        (keep / "course").mkdir(parents=True)
        return keep / "course"

    monkeypatch.setattr(labtools, "scratch_course", fake_scratch_course)
    (tmp_path / "generated-labs" / "course").mkdir(parents=True)  # what a failed generation left: no marker
    got = []
    threads = [threading.Thread(target=lambda: got.append(labtools._generated_once(tmp_path / "generated-labs")))
               for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert made == [tmp_path / "generated-labs"] and got == [tmp_path / "generated-labs" / "course"] * 3
