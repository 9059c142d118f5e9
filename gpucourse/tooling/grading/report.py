"""The report of a batch: scores read back from the gradebook, grades.csv and grades_by_cell.csv, the
summary printed at the end, each submission's notes, and the feedback page of one that was not graded."""

from __future__ import annotations

import csv
from pathlib import Path

from gpucourse.tooling.grading.notes import NOTE_KEY
from gpucourse.tooling.sandbox import ROOT

NOTE_FIELDS = ["student", "lab", "score", "max_score", "note"]


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


def notebook_notes(root: Path, lab: str, student: str) -> list[str]:
    import nbformat

    path = root / "autograded" / student / lab / f"{lab}.ipynb"
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception:
        return []
    return list(nb.metadata.get(NOTE_KEY, {}).get("summary", []))


def print_summary(summary: list[dict], labs: dict, verbose: bool) -> None:
    for lab in labs:
        rows = [r for r in summary if r["lab"] == lab]
        if not rows:
            continue
        scores = [r["score"] for r in rows]
        full = sum(1 for r in rows if r["max_score"] and r["score"] == r["max_score"])
        zero = sum(1 for r in rows if r["score"] == 0)
        print(f"{lab}: {len(rows)} graded, mean {sum(scores) / len(rows):.1f} / {rows[0]['max_score']:.0f}, "
              f"{full} full marks, {zero} zero, {sum(1 for r in rows if r['note'])} with notes")
    for row in summary:
        if verbose or row["note"]:
            note = f"  [{row['note'][:150]}]" if row["note"] else ""
            print(f"  {row['lab']:20s} {row['student']:20s} {row['score']:6.1f} / {row['max_score']:.1f}"
                  f"{note}")


def write_note_feedback(path: Path, lab: str, reason: str) -> None:
    import html

    path.parent.mkdir(parents=True, exist_ok=True)
    lab = html.escape(lab)
    path.write_text(f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{lab}</title></head><body>"
                    f"<h1>{lab}: 0 points</h1><p>Your submission was not graded: {html.escape(reason)}.</p>"
                    f"<p>Download the lab again, work in the notebook called <code>{lab}.ipynb</code>, save "
                    "it and submit it again.</p></body></html>\n")


def write_csv(path: Path, rows: list[dict], fields: list[str]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
