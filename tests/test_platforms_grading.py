"""make test-platforms' labs (tests/platforms.py ``grade_every_lab``, issue 50): every lab's solution, untouched lab
and course-patching version graded once through ``python -m gpucourse grade`` on two workers, in place of every
lab's test file. A score not as expected, or a solution that did not run as released, fails the lane."""

import nbformat
import platforms
import pytest

from gpucourse.measure import runtime
from gpucourse.tooling.grading import known

LAB = "lab01_warps"


def _notebook(*outputs):
    banner = nbformat.v4.new_output("display_data", data={
        "text/plain": "GPU mode" if runtime.is_gpu() else "Simulator mode",
        "text/html": "<div class='gpucourse-banner'>mode</div>"})
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("banner()", outputs=[banner]),
                                           nbformat.v4.new_code_cell("answer()", outputs=list(outputs))])


def _stand_in(scores, solution_outputs=(), lab=LAB, graded_cell=None):
    """A grade_known that writes nbgrader's executed notebooks and returns ``scores`` (student -> score of 10);
    ``graded_cell``: a graded code cell added to the solution."""
    stopped = nbformat.v4.new_output("error", ename="NotImplementedError", evalue="exercise 1", traceback=[])

    def grade_known(labs, folder, *, timeout_s, jobs):
        assert jobs == 2 and labs == [lab]
        solution = _notebook(*solution_outputs)
        if graded_cell is not None:
            solution.cells.append(graded_cell)
        for student, nb in {"solution": solution, "untouched": _notebook(stopped)}.items():
            target = folder / "course" / "autograded" / student / lab
            target.mkdir(parents=True)
            nbformat.write(nb, target / f"{lab}.ipynb")
        return [{"lab": lab, "student": s, "score": v, "max_score": 10.0, "expected": known.EXPECTED[s],
                 "seconds": 1.0, "note": "", "as_expected": v == (10.0 if s == "solution" else 0.0)}
                for s, v in scores.items()]
    return grade_known


GOOD = {"solution": 10.0, "untouched": 0.0, "patched_course": 0.0}


def test_every_lab_is_graded_and_must_score_as_expected(monkeypatch):
    monkeypatch.setattr(known, "grade_known", _stand_in(GOOD))
    assert platforms.grade_every_lab(labs=[LAB]) == "1 labs, 3 submissions graded as expected"
    monkeypatch.setattr(known, "grade_known", _stand_in({**GOOD, "patched_course": 10.0}))
    with pytest.raises(AssertionError, match="patched_course 10.0/10.0 .expected 0: NOT AS EXPECTED"):
        platforms.grade_every_lab(labs=[LAB])


def test_a_solution_that_does_not_run_as_released_fails_the_lane(monkeypatch):
    wrote = nbformat.v4.new_output("stream", name="stderr", text="a warning")
    monkeypatch.setattr(known, "grade_known", _stand_in(GOOD, [wrote]))
    with pytest.raises(AssertionError, match="stderr"):
        platforms.grade_every_lab(labs=[LAB])


def _refused(ename, evalue, points=4):
    error = nbformat.v4.new_output("error", ename=ename, evalue=evalue, traceback=[])
    return nbformat.v4.new_code_cell("check(compiled())", outputs=[error],
                                     metadata={"nbgrader": {"grade": True, "points": points, "grade_id": "ex2"}})


def test_without_triton_a_triton_lab_loses_only_its_triton_cells_each_refused_in_one_line(monkeypatch):
    from gpucourse.measure import tritonmode
    from gpucourse.tooling.grading import hidden

    lab = platforms.NEEDS_TRITON[0]
    monkeypatch.setattr(tritonmode, "triton_available", lambda: False)
    lost = {**GOOD, "solution": 6.0}
    monkeypatch.setattr(known, "grade_known", _stand_in(lost, lab=lab, graded_cell=_refused(
        hidden.REFUSED, hidden.CANNOT_CHECK)))
    assert platforms.grade_every_lab(labs=[lab]).startswith("1 labs, 3 submissions graded as expected; without Triton")
    # a point lost for another reason, an error other than the one-line refusal, or nothing refused: the lane fails
    monkeypatch.setattr(known, "grade_known", _stand_in({**GOOD, "solution": 5.0}, lab=lab, graded_cell=_refused(
        hidden.REFUSED, hidden.CANNOT_CHECK)))
    with pytest.raises(AssertionError, match="NOT AS EXPECTED"):
        platforms.grade_every_lab(labs=[lab])
    monkeypatch.setattr(known, "grade_known", _stand_in(lost, lab=lab, graded_cell=_refused(
        "HiddenTestFailed", hidden.GENERIC_FAILURE)))
    with pytest.raises(AssertionError, match=r"^\('HiddenTestFailed', 'a hidden test failed"):
        platforms.grade_every_lab(labs=[lab])
    monkeypatch.setattr(known, "grade_known", _stand_in(lost, lab=lab))
    with pytest.raises(AssertionError, match="should be refused"):
        platforms.grade_every_lab(labs=[lab])
    # with Triton, the same lab must score full marks
    monkeypatch.setattr(tritonmode, "triton_available", lambda: True)
    monkeypatch.setattr(known, "grade_known", _stand_in(lost, lab=lab, graded_cell=_refused(
        hidden.REFUSED, hidden.CANNOT_CHECK)))
    with pytest.raises(AssertionError, match="NOT AS EXPECTED"):
        platforms.grade_every_lab(labs=[lab])


@pytest.mark.extra
def test_one_lab_graded_for_real_on_two_workers():
    assert platforms.grade_every_lab(labs=[LAB]) == "1 labs, 3 submissions graded as expected"
