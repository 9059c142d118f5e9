"""``make grade`` and ``make feedback``: every submission in submitted/ graded (or given its feedback) by
the workers (``workers.py``), in parallel; what cannot be read scores 0 with a note; the report written
(``report.py``)."""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

from gpucourse.tooling.grading.report import (
    NOTE_FIELDS,
    notebook_notes,
    print_summary,
    read_scores,
    write_csv,
    write_note_feedback,
)
from gpucourse.tooling.grading.workers import WorkerPool
from gpucourse.tooling.sandbox import ROOT, sandbox_status

SUBMITTED = "submitted"


def _lab_names(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "solutions").glob("lab*") if (p / f"{p.name}.py").exists())


def submitted_labs(root: Path = ROOT) -> dict[str, list[str]]:
    """lab → students with a submission of it in submitted/<student>/<lab>/."""
    found: dict[str, list[str]] = {}
    for lab in _lab_names(root):
        students = sorted(p.parent.name for p in (root / SUBMITTED).glob(f"*/{lab}") if p.is_dir())
        if students:
            found[lab] = students
    return found


def _ensure_assignments(root: Path, labs: list[str]) -> list[str]:
    """Labs missing from the gradebook are generated (as `make labs` does). Returns problems."""
    from nbgrader.api import Gradebook, MissingEntry

    missing = []
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        for lab in labs:
            try:
                gb.find_assignment(lab)
            except MissingEntry:
                missing.append(lab)
    problems = []
    if missing:
        from gpucourse.tooling import build
    for lab in missing:
        print(f"{lab} is not in the gradebook yet: generating it from solutions/ …", flush=True)
        build.write_notebook(root / "solutions" / lab / f"{lab}.py")
        done = build.nbgrader(["generate_assignment", lab, "--force", "--log-level=WARN"], root)
        if done.returncode != 0:
            problems.append(f"{lab}: nbgrader generate_assignment failed:\n{done.stderr[-2000:]}")
    return problems


def unreadable_reason(root: Path, lab: str, student: str) -> str | None:
    """Why a submission cannot be graded at all (not a notebook, wrong name), or None."""
    import nbformat

    folder = root / SUBMITTED / student / lab
    path = folder / f"{lab}.ipynb"
    if not path.is_file():
        others = sorted(p.name for p in folder.glob("*.ipynb"))
        found = f" (found: {', '.join(others)})" if others else ""
        return f"no {lab}.ipynb in the submission{found}"
    try:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
    except Exception as exc:  # JSON errors, schema errors, binary junk
        return f"{lab}.ipynb is not a readable notebook ({type(exc).__name__})"
    return None


def _record_zero(root: Path, lab: str, student: str) -> None:
    """Gradebook entries with score 0 for a submission nbgrader cannot read (as for a missing one)."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        gb.update_or_create_student(student)
        submission = gb.update_or_create_submission(lab, student)
        for notebook in submission.notebooks:
            for grade in notebook.grades:
                grade.auto_score = 0
                grade.needs_manual_grade = False
        gb.db.commit()
    shutil.rmtree(root / "autograded" / student / lab, ignore_errors=True)


def course_root() -> Path:
    """The course being graded: the current folder when it has an nbgrader_config.py (an instructor's
    clone on a hub), else this repository."""
    here = Path.cwd()
    return here if (here / "nbgrader_config.py").exists() else ROOT


def grade_all(root: Path | None = None, jobs: int | None = None, *, quiet: bool = False) -> int:
    """Autograde everything in submitted/, write grades.csv and grades_by_cell.csv, print a summary.

    Students are graded in parallel (``jobs`` worker processes, default: the number of CPUs). A
    submission that hangs, crashes its kernel, tampers or cannot be read scores what it earns (often
    0) with a note. Returns 1 only when the grader itself failed (and says for whom), else 0.
    """
    root = Path(root or course_root()).resolve()
    started = time.monotonic()
    labs = submitted_labs(root)
    if not labs:
        print(f"nothing to grade: put submissions in {SUBMITTED}/<student>/<lab>/<lab>.ipynb")
        return 0
    count = sum(len(students) for students in labs.values())
    pool = WorkerPool(root, min(jobs or os.cpu_count() or 1, count))  # they import nbgrader while we prepare
    failures = _ensure_assignments(root, list(labs))
    notes: dict[tuple[str, str], list[str]] = {}
    tasks = []
    for lab, students in labs.items():
        for student in students:
            reason = unreadable_reason(root, lab, student)
            if reason:
                _record_zero(root, lab, student)
                notes[(student, lab)] = [f"not graded: {reason}; it scores 0"]
            else:
                tasks.append((lab, student))
    total = len(tasks) + len(notes)
    print(f"grading {total} submission(s) of {len(labs)} lab(s) with {pool.jobs} worker(s); "
          f"sandbox: {sandbox_status()}", flush=True)
    results = pool.run([("autograde", lab, student) for lab, student in tasks], quiet=quiet)
    for (_, lab, student), result in results.items():
        if not result.get("success"):
            failures.append(f"{lab}/{student}: the grader failed: {result.get('error', '?').strip()[-1500:]}")
        else:
            notes.setdefault((student, lab), []).extend(notebook_notes(root, lab, student))
    rows = [r for r in read_scores(root) if r["student"] in labs.get(r["lab"], ())]
    write_csv(root / "grades_by_cell.csv", rows, ["student", "lab", "cell", "score", "max_score"])
    totals: dict[tuple[str, str], list[float]] = {}
    for row in rows:
        total_row = totals.setdefault((row["student"], row["lab"]), [0.0, 0.0])
        total_row[0] += row["score"] or 0.0
        total_row[1] += row["max_score"] or 0.0
    summary = [{"student": s, "lab": lab, "score": sc, "max_score": mx,
                "note": " | ".join(notes.get((s, lab), []))} for (s, lab), (sc, mx) in sorted(totals.items())]
    write_csv(root / "grades.csv", summary, NOTE_FIELDS)
    print_summary(summary, labs, verbose=len(summary) <= 40)
    print(f"wrote {root / 'grades.csv'} and {root / 'grades_by_cell.csv'} "
          f"in {time.monotonic() - started:.0f} s")
    for failure in failures:
        print(f"GRADER FAILURE: {failure}", file=sys.stderr)
    return 1 if failures else 0


def feedback_all(root: Path | None = None, jobs: int | None = None, *, quiet: bool = True) -> int:
    """Feedback for every graded submission (and a short note for those that could not be graded).
    Returns 1 only when the grader itself failed."""
    root = Path(root or course_root()).resolve()
    labs = submitted_labs(root)
    tasks, count = [], 0
    for lab, students in labs.items():
        for student in students:
            if (root / "autograded" / student / lab / f"{lab}.ipynb").exists():
                tasks.append(("feedback", lab, student))
            else:
                reason = unreadable_reason(root, lab, student) or "it could not be graded"
                write_note_feedback(root / "feedback" / student / lab / f"{lab}.html", lab, reason)
                count += 1
    if not labs:
        print("no feedback to write: nothing in submitted/ (run `make grade` after collecting)")
        return 0
    jobs = min(jobs or os.cpu_count() or 1, max(1, len(tasks)))
    results = WorkerPool(root, jobs, "feedback").run(tasks, quiet=quiet) if tasks else {}
    failed = [task for task, result in results.items() if not result.get("success")]
    for _, lab, student in failed:
        print(f"GRADER FAILURE: feedback for {lab}/{student}: {results[('feedback', lab, student)].get('error')}",
              file=sys.stderr)
    print(f"feedback for {count + len(results) - len(failed)} submission(s) written to {root / 'feedback'}")
    return 1 if failed else 0
