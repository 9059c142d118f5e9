"""The grader's notes in a notebook: what a cell or the whole submission is told, kept in metadata the
learner cannot supply (``GuardSubmission`` forgets any), shown by feedback and summed up in grades.csv.
Helpers shared by the preprocessors, the batch and the report."""

from __future__ import annotations

import re

NOTE_KEY = "gpucourse"  # cell.metadata[NOTE_KEY]["notes"], nb.metadata[NOTE_KEY]["summary"], ...


def note_output(ename: str, evalue: str):
    from nbformat.notebooknode import NotebookNode

    return NotebookNode(output_type="error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


def add_note(cell, ename: str, evalue: str, *, as_error: bool = True) -> None:
    """A note from the grader on a cell: recorded in trusted metadata (feedback shows it) and, for
    an error, as an error output (nbgrader scores a graded cell with an error output 0)."""
    cell.metadata.setdefault(NOTE_KEY, {}).setdefault("notes", []).append(f"{ename}: {evalue}")
    if as_error and cell.cell_type == "code":
        cell.outputs.append(note_output(ename, evalue))


def is_grade(cell) -> bool:
    return bool(cell.metadata.get("nbgrader", {}).get("grade")) and cell.cell_type == "code"


def is_locked(cell) -> bool:
    return bool(cell.metadata.get("nbgrader", {}).get("locked"))


def unique(items):
    seen, out = set(), []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


def md_escape(text: str) -> str:
    return re.sub(r"([\\`*_<>\[\]#|])", r"\\\1", text)
