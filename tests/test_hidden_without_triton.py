"""A hidden test that needs Triton, graded where Triton is missing (macOS, Windows): the learner's feedback says
the grader cannot check the cell, not "re-read the specification"; with Triton, the same error from the learner's
own code is a plain failure."""

import pytest

from gpucourse.measure import tritonmode
from gpucourse.tooling.grading import hidden

NEEDS_TRITON = "from gpucourse.measure.tritonmode import triton_or_raise\ntriton_or_raise()\ncheck(True)"
RAISES = "from gpucourse.measure.tritonmode import TritonMissing\nraise TritonMissing('mine')"


def _verdict(code: str) -> tuple[str, str]:
    try:
        hidden.run_hidden_tests(code, {"__name__": "__main__"})
    except hidden.HiddenTestFailed as failed:
        return type(failed).__name__, str(failed)
    return "passed", ""


def test_without_triton_the_grader_says_it_cannot_check(monkeypatch):
    monkeypatch.setattr(hidden, "triton_available", lambda: False)
    monkeypatch.setattr(tritonmode, "triton_or_raise", lambda: (_ for _ in ()).throw(
        tritonmode.TritonMissing(tritonmode.TRITON_MISSING)))
    assert _verdict(NEEDS_TRITON) == (hidden.REFUSED, hidden.CANNOT_CHECK)
    assert "Triton is not installed" in hidden.CANNOT_CHECK


@pytest.mark.skipif(not tritonmode.triton_available(), reason=tritonmode.TRITON_MISSING)
def test_with_triton_a_triton_missing_error_is_a_plain_failure():
    assert _verdict(NEEDS_TRITON) == ("passed", "")
    assert _verdict(RAISES) == ("HiddenTestFailed", hidden.GENERIC_FAILURE)
