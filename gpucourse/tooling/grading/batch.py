"""``make grade`` and ``make feedback``: every submission in submitted/ graded (or given its feedback) by
the workers (``workers.py``), in parallel; what cannot be read scores 0 with a note; the report written
(``report.py``)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

from gpucourse.measure import gpuinfo
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

# Grading on the GPU (``--gpu``): every worker's kernel opens a CUDA context (0.3-1 GB each, more with torch), so
# the workers are capped: at most GPU_JOBS_MAX, at most one per GPU_MEMORY_PER_JOB_BYTES of free memory, and one
# when the GPU admits one context at a time (EXCLUSIVE_PROCESS, common on HPC nodes) (gpu-mode review, G9).
GPU_JOBS_MAX = 4
GPU_MEMORY_PER_JOB_BYTES = 2**30
ONE_CONTEXT_MODES = ("exclusive process", "exclusive thread", "prohibited")
# What a grading kernel says when it could not create its CUDA context (squashed: upper case, letters and digits
# only): the GPU was busy (another context in an exclusive mode) or had no memory left for one. That is the
# grader's doing, not the learner's: the submission is graded again, alone.
CONTEXT_ERROR_MARKERS = ("DEVICESUNAVAILABLE", "BUSYORUNAVAILABLE", "CTXCREATE", "PRIMARYCTXRETAIN")


def grading_environment(gpu: bool) -> dict[str, str]:
    """What the grading workers (and so their kernels: ``sandbox.kernel_environment`` passes ``GPUCOURSE_*`` on) get
    on top of this environment. Labs grade on the microscope and grade no timing, so kernels run in simulator mode
    unless ``gpu``: on a GPU an out-of-bounds read can pass by chance and a fault zeroes every later GPU cell,
    while the simulator fails the same bug every time (gpu-mode review, G8)."""
    return {} if gpu else {"GPUCOURSE_MODE": "sim"}


def grading_jobs(requested: int | None, count: int, gpu: bool, *, compute_mode=gpuinfo.compute_mode,
                 free_bytes=gpuinfo.free_memory_bytes) -> tuple[int, str]:
    """(workers, why they were capped or ""): ``requested`` or one per CPU, never more than ``count`` submissions;
    on the GPU capped by its compute mode and free memory as NVML reports them (no CUDA context here)."""
    jobs = max(1, min(requested or os.cpu_count() or 1, count))
    if not gpu:
        return jobs, ""
    mode = compute_mode()
    if mode in ONE_CONTEXT_MODES:
        cap, why = 1, f"the GPU's compute mode is {mode}: one CUDA context at a time"
    else:
        free = free_bytes()
        by_memory = GPU_JOBS_MAX if free is None else max(1, int(free // GPU_MEMORY_PER_JOB_BYTES))
        cap = min(GPU_JOBS_MAX, by_memory)
        why = (f"grading on the GPU: at most {GPU_JOBS_MAX} workers"
               + ("" if free is None else f", one per GiB of free GPU memory ({free / 2**30:.1f} GiB free)"))
    return (cap, why) if jobs > cap else (jobs, "")


def context_error(root: Path, lab: str, student: str) -> str | None:
    """The graded notebook's first output saying that its kernel could not create a CUDA context, or None."""
    path = Path(root) / "autograded" / student / lab / f"{lab}.ipynb"
    try:
        cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
    except (OSError, ValueError):
        return None
    for cell in cells:
        for output in cell.get("outputs", []) if isinstance(cell, dict) else []:
            parts = [output.get("ename", ""), output.get("evalue", ""), *output.get("traceback", []),
                     output.get("text", "") if isinstance(output.get("text"), str) else "".join(output.get("text", []))]
            text = " ".join(str(part) for part in parts)
            squashed = "".join(c for c in text.upper() if c.isalnum())
            if any(marker in squashed for marker in CONTEXT_ERROR_MARKERS):
                line = f"{output.get('ename', '')}: {output.get('evalue', '')}".strip(": ") or text.strip()
                return " ".join(line.split())[:200]
    return None


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


def grade_all(root: Path | None = None, jobs: int | None = None, *, quiet: bool = False, gpu: bool = False) -> int:
    """Autograde everything in submitted/, write grades.csv and grades_by_cell.csv, print a summary.

    Students are graded in parallel (``jobs`` worker processes, default: the number of CPUs). A
    submission that hangs, crashes its kernel, tampers or cannot be read scores what it earns (often
    0) with a note. Returns 1 only when the grader itself failed (and says for whom), else 0.
    Kernels run in simulator mode unless ``gpu`` (``grading_environment``); on the GPU the workers are
    capped (``grading_jobs``) and a submission whose kernel could not create a CUDA context is graded
    again alone, a grader failure if it still cannot.
    """
    root = Path(root or course_root()).resolve()
    started = time.monotonic()
    labs = submitted_labs(root)
    if not labs:
        print(f"nothing to grade: put submissions in {SUBMITTED}/<student>/<lab>/<lab>.ipynb")
        return 0
    count = sum(len(students) for students in labs.values())
    jobs, capped = grading_jobs(jobs, count, gpu)
    env = grading_environment(gpu)
    pool = WorkerPool(root, jobs, env=env)  # they import nbgrader while we prepare
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
    where = "on the GPU" if gpu else "in simulator mode (--gpu grades on the GPU)"
    print(f"grading {total} submission(s) of {len(labs)} lab(s) with {pool.jobs} worker(s) {where}"
          f"{f' ({capped})' if capped else ''}; sandbox: {sandbox_status()}", flush=True)
    results = pool.run([("autograde", lab, student) for lab, student in tasks], quiet=quiet)
    if gpu:
        failures += _regrade_context_errors(root, results, env, quiet)
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


def _regrade_context_errors(root: Path, results: dict, env: dict, quiet: bool) -> list[str]:
    """Grade again, one at a time, each submission whose kernel could not create a CUDA context (``results``
    updated); the grader failures of those that still cannot."""
    again = [task for task, result in results.items() if result.get("success") and context_error(root, *task[1:])]
    if not again:
        return []
    print(f"grading {len(again)} submission(s) again, alone: their kernel could not create a CUDA context "
          "(the GPU was busy or full)", flush=True)
    results.update(WorkerPool(root, 1, env=env).run(again, quiet=quiet))
    failures = []
    for task in again:
        why = context_error(root, *task[1:]) if results[task].get("success") else None
        if why:
            failures.append(f"{task[1]}/{task[2]}: the grading kernel could not create a CUDA context, even alone "
                            f"({why}); its score is not the learner's")
    return failures


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
