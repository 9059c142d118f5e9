"""Grading helpers: checks for labs' hidden tests, and `make grade` / `make feedback`.

Hidden tests must not leak through feedback: a failing ``check`` raises ``HiddenTestFailed``,
whose IPython rendering is one generic line (no traceback, so no hidden source line).
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from gpucourse.build import ROOT, lab_names
from gpucourse.build import nbgrader as _run_nbgrader


class HiddenTestFailed(AssertionError):
    """A hidden test failed; the message is generic by design."""

    def _render_traceback_(self) -> list[str]:
        return [f"HiddenTestFailed: {self}"]


def check(condition, message: str = "a hidden test failed: re-read the specification") -> None:
    """Fail a hidden test with a generic message (``condition`` may be a bool or a callable)."""
    try:
        ok = condition() if callable(condition) else condition
    except Exception:
        ok = False
    if not ok:
        raise HiddenTestFailed(message) from None


def submitted_labs(root: Path = ROOT) -> dict[str, list[str]]:
    """lab → students with a submission of it in submitted/<student>/<lab>/."""
    found: dict[str, list[str]] = {}
    for lab in lab_names(root):
        students = sorted(p.parent.name for p in (root / "submitted").glob(f"*/{lab}") if p.is_dir())
        if students:
            found[lab] = students
    return found


def read_scores(root: Path = ROOT) -> list[dict]:
    """Per student, lab and graded cell: score and max score, from the gradebook."""
    from nbgrader.api import Gradebook

    rows = []
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        for assignment in gb.assignments:
            for submission in assignment.submissions:
                for notebook in submission.notebooks:
                    for grade in notebook.grades:
                        rows.append({
                            "student": submission.student_id, "lab": assignment.name, "cell": grade.name,
                            "score": grade.score, "max_score": grade.max_score,
                        })
    return rows


def grade_all(root: Path = ROOT, jobs: int | None = None) -> int:
    """Autograde everything in submitted/, write grades.csv and grades_by_cell.csv, print a summary."""
    labs = submitted_labs(root)
    if not labs:
        print("nothing to grade: put submissions in submitted/<student>/<lab>/<lab>.ipynb")
        return 0
    for lab, students in labs.items():
        print(f"grading {lab}: {len(students)} submission(s) …", flush=True)
        done = _run_nbgrader(["autograde", lab, "--create", "--force"], root)
        if done.returncode != 0:
            print(done.stdout[-2000:], done.stderr[-4000:], file=sys.stderr)
            print(f"warning: nbgrader reported a problem while grading {lab} (see above)", file=sys.stderr)
    rows = read_scores(root)
    _write_csv(root / "grades_by_cell.csv", rows, ["student", "lab", "cell", "score", "max_score"])
    totals: dict[tuple[str, str], list[float]] = {}
    for row in rows:
        total = totals.setdefault((row["student"], row["lab"]), [0.0, 0.0])
        total[0] += row["score"] or 0.0
        total[1] += row["max_score"] or 0.0
    summary = [{"student": s, "lab": lab, "score": sc, "max_score": mx} for (s, lab), (sc, mx) in sorted(totals.items())]
    _write_csv(root / "grades.csv", summary, ["student", "lab", "score", "max_score"])
    for row in summary:
        print(f"  {row['lab']:20s} {row['student']:20s} {row['score']:6.1f} / {row['max_score']:.1f}")
    print(f"wrote {root / 'grades.csv'} and {root / 'grades_by_cell.csv'}")
    return 0


def feedback_all(root: Path = ROOT) -> int:
    labs = submitted_labs(root)
    for lab in labs:
        done = _run_nbgrader(["generate_feedback", lab, "--force"], root)
        if done.returncode != 0:
            print(done.stderr[-4000:], file=sys.stderr)
            return 1
    print(f"feedback written to {root / 'feedback'}")
    return 0


def _write_csv(path: Path, rows: list[dict], fields: list[str]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
