"""gpu-report's grading step (issue 39 part 3, issue 48) on one small lab, on the CPU: the solution graded through
the course's batch with its seconds (the known-wrong submissions are the CPU suite's, not the GPU run's); a
submission that does not score what it should (planted: the solution under a student whose expected score is 0)
fails the step."""

from __future__ import annotations

import json

import pytest

from gpucourse.tooling import gpureport
from gpucourse.tooling.grading import known

pytestmark = pytest.mark.slow
LAB = "lab01_warps"


def test_the_grading_step_grades_the_known_submissions_and_fails_a_wrong_score(tmp_path, monkeypatch):
    real = known.known_submissions

    def with_a_planted_wrong_expectation(lab, root):
        found = real(lab, root)
        return {**found, "planted_expects_0": found["solution"]}

    monkeypatch.setattr(known, "known_submissions", with_a_planted_wrong_expectation)
    monkeypatch.setattr(gpureport, "GRADED", (*gpureport.GRADED, "planted_expects_0"))
    step = gpureport.Step(f"grade {LAB}", 100.0)
    gpureport._run_step(step, tmp_path, tmp_path, "c", False, False, 900.0, {}, gpureport.TierRun(), {}, None)
    rows = {r["student"]: r for r in json.loads((tmp_path / "grading.json").read_text())}
    assert set(rows) == {"solution", "planted_expects_0"}, rows  # the untouched lab and the patched course: not here
    solution = rows["solution"]
    assert solution["max_score"] and solution["score"] == solution["max_score"] and solution["as_expected"]
    assert all(r["seconds"] and r["seconds"] > 0 for r in rows.values()), rows
    assert not rows["planted_expects_0"]["as_expected"]
    assert step.status == "failed" and "planted_expects_0" in step.detail and "NOT AS EXPECTED" in step.detail
    assert "| lab01_warps | solution |" in (tmp_path / "grading.md").read_text()
