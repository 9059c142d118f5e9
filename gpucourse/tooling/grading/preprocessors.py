"""The nbgrader preprocessors around execution (named in ``nbgrader_config.py``; imported only by the
grader: they need nbgrader):

* ``GuardSubmission`` (sanitize step, after OverwriteCells): scan the learner's code for tampering
  (``scan.py``), rewrite hidden tests (``rewrite.py``), drop execution-skipping tags;
* ``FinalizeGrades`` (after execution: ``execute.py``): cells that never ran or a tampered notebook score 0
  with a note, and a graded cell scores all its points or none (never nbgrader's partial credit);
* ``SanitizeFeedback``: feedback shows code, scores and one-line verdicts, never hidden tests, their
  tracebacks or output.
"""

from __future__ import annotations

import re

from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Integer

from gpucourse.tooling.grading.hidden import GENERIC_FAILURE, INTEGRITY, REFUSED
from gpucourse.tooling.grading.notes import NOTE_KEY, add_note, is_grade, is_locked, md_escape, note_output, unique
from gpucourse.tooling.grading.rewrite import BEGIN_HIDDEN, guard_hidden_tests, strip_hidden_tests
from gpucourse.tooling.grading.scan import imported_names, lab_helpers, scan_learner_code


class GuardSubmission(NbGraderPreprocessor):
    """Sanitize step (after OverwriteCells): scan the learner's code, rewrite hidden tests,
    drop tags that would skip a cell, forget any grader metadata the learner supplied."""

    def preprocess(self, nb, resources):
        nb.metadata.pop(NOTE_KEY, None)
        nb.metadata.pop("widgets", None)
        tampering, notes = [], set()
        imported = imported_names(c.source for c in nb.cells if c.cell_type == "code")
        trusted = [c for c in nb.cells if c.cell_type == "code" and is_locked(c)
                   and c.metadata.get("nbgrader", {}).get("grade_id")]
        locked = imported_names(c.source for c in trusted)
        helpers = lab_helpers((c.source for c in trusted), (c.source for c in trusted if is_grade(c)))
        for index, cell in enumerate(nb.cells):
            cell.metadata.pop(NOTE_KEY, None)
            tags = cell.metadata.get("tags")
            if tags:
                cell.metadata["tags"] = [t for t in tags if t not in ("skip-execution", "raises-exception")]
            if cell.cell_type != "code":
                continue
            # trusted: locked cells that OverwriteCells matched with the gradebook (it drops
            # unknown grade ids and restores the source of known locked cells)
            if is_locked(cell) and cell.metadata.get("nbgrader", {}).get("grade_id"):
                if is_grade(cell):
                    cell.source = guard_hidden_tests(cell.source)
                continue
            name = cell.metadata.get("nbgrader", {}).get("grade_id") or f"cell {index + 1}"
            found, cell_notes = scan_learner_code(cell.source, imported, locked, helpers)
            tampering += [f"{name}, {item}" for item in found]
            notes.update(cell_notes)
        restored = resources.get(NOTE_KEY, {}).get("restored", [])  # by RestoreLockedCells
        if restored:
            notes.add(f"the locked cells {', '.join(restored)} were missing from the submission: the grader "
                      "put them back and graded them")
        # what the kernel header imports and snapshots before any learner code runs
        nb.metadata[NOTE_KEY] = {"tampering": tampering, "notes": sorted(notes),
                                 "trusted_imports": [[name, what] for name, what in locked.items()]}
        return nb, resources


class FinalizeGrades(NbGraderPreprocessor):
    """After execution: graded cells that did not run, or of a tampered notebook, score 0; a graded cell
    scores all its points or none.

    Tampering is what the scan found (``GuardSubmission``) or what the hidden tests found at run time (a
    graded cell that raised ``GraderIntegrity``: ``hidden.py``). nbgrader reads a graded cell's displayed
    value (an ``execute_result`` before any error) as its partial credit, and a value that is no number as
    full credit, whatever follows; the learner's code can display one (``sys.displayhook``, a stand-in
    returned where a test returns nothing). So here it becomes a plain display: a graded cell scores its
    points exactly when it ran without an error."""

    def preprocess(self, nb, resources):
        from nbformat.v4 import new_output

        meta = nb.metadata.get(NOTE_KEY, {})
        tampering = list(meta.get("tampering", []))
        for cell in nb.cells:
            if is_grade(cell):
                found = [o.get("evalue", "") for o in cell.outputs
                         if o.output_type == "error" and o.get("ename") == INTEGRITY]
                if found:  # (nbgrader's Execute records the kernel's error even where it was kept from showing)
                    grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "a cell")
                    tampering.append(f"{grade_id}, at run time: {found[0][:200]}")
        for cell in nb.cells:
            if not is_grade(cell):
                continue
            cell.outputs = [new_output("display_data", data=o.get("data", {}), metadata=o.get("metadata", {}))
                            if o.output_type == "execute_result" else o for o in cell.outputs]
            if cell.execution_count is None and not any(o.output_type == "error" for o in cell.outputs):
                add_note(cell, "NotRun", "this test cell did not run; it scores 0")
            if tampering:
                add_note(cell, "GraderIntegrity", "this notebook modifies the grading machinery ("
                          + "; ".join(tampering[:3]) + "), so every graded cell scores 0; "
                          "ask your instructor if this is a mistake")
        summary = list(meta.get("notes", []))
        for cell in nb.cells:
            for note in cell.metadata.get(NOTE_KEY, {}).get("notes", []):
                grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "a cell")
                summary.append(f"{grade_id} — {note}")
        nb.metadata[NOTE_KEY] = {**meta, "summary": unique(summary)}
        return nb, resources


class SanitizeFeedback(NbGraderPreprocessor):
    """Feedback shows the learner's code, scores and one-line verdicts. It never shows hidden
    tests (source, tracebacks, output), nor output of other cells (which could carry data the
    learner's code captured while hidden tests ran)."""

    max_verdict_chars = Integer(600).tag(config=True)

    def preprocess(self, nb, resources):
        from nbformat.v4 import new_markdown_cell

        nb.metadata.pop("widgets", None)
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            original = cell.source
            cell.source = strip_hidden_tests(cell.source)
            notes = cell.metadata.get(NOTE_KEY, {}).get("notes", [])
            verdicts = [note_output(*n.split(": ", 1)) for n in notes if ": " in n]
            if is_grade(cell) and not verdicts:
                for output in cell.outputs:
                    if output.output_type == "error":
                        verdicts.append(self._verdict(output, original))
                        break
            cell.outputs = verdicts
            cell.execution_count = None
            cell.metadata.pop(NOTE_KEY, None)
        summary = nb.metadata.get(NOTE_KEY, {}).get("summary", [])
        text = ("**How to read this feedback.** It shows your code, your score for each test cell and "
                "why a test cell failed. Hidden tests are not shown: a failed hidden test says only "
                "*a hidden test failed*. Outputs of your own cells are not repeated here.")
        if summary:
            text += "\n\n**Notes from the grader:**\n\n"
            text += "\n".join(f"* {md_escape(item)}" for item in summary)
        nb.cells.insert(0, new_markdown_cell(text))
        nb.metadata.pop(NOTE_KEY, None)
        return nb, resources

    def _verdict(self, output, source):
        if output.ename == REFUSED:  # why an answer was refused or a call forbidden: no hidden data in it
            return note_output(REFUSED, str(output.evalue).splitlines()[0][: self.max_verdict_chars])
        if output.ename == "HiddenTestFailed" or _from_hidden_tests(output, source):
            return note_output("HiddenTestFailed", GENERIC_FAILURE)
        if output.ename == "NotImplementedError" and not str(output.evalue).strip():
            return note_output("NotImplementedError", "this exercise is not answered yet")
        evalue = "\n".join(line for line in str(output.evalue).splitlines() if line.strip())
        if len(evalue) > self.max_verdict_chars:
            evalue = evalue[: self.max_verdict_chars] + " …"
        return note_output(str(output.ename)[:80], evalue)


def _from_hidden_tests(output, source: str) -> bool:
    """Whether an error (not already generic) may come from a hidden block: its traceback points at
    a line of the block, or its message contains a word or number that only the block contains."""
    if BEGIN_HIDDEN not in source:
        return False
    lines = source.split("\n")
    begin = next(i for i, line in enumerate(lines, 1) if BEGIN_HIDDEN in line)
    for line in output.get("traceback", []):
        match = re.search(r"Cell In\[\d+\], line (\d+)", re.sub(r"\x1b\[[0-9;]*m", "", line))
        if match:
            if int(match.group(1)) >= begin:
                return True
            break
    words = re.compile(r"\d{2,}|[A-Za-z_]\w{3,}")
    hidden_only = set(words.findall(source)) - set(words.findall(strip_hidden_tests(source)))
    message = f"{output.get('ename', '')} {output.get('evalue', '')}"
    return any(word in hidden_only for word in words.findall(message))
