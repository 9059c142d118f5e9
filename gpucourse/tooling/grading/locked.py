"""Locked cells a submission deleted, put back: ``RestoreLockedCells`` (a sanitize step, before nbgrader's
OverwriteCells), so that a deleted test is graded as the lab wrote it.

nbgrader's own ``OverwriteCells.add_missing_cells`` puts back only graded cells, after the graded or answer
cell that comes before them, and fails the whole submission (a KeyError, "GRADER FAILURE" for the batch)
when that cell is anything else, such as the locked ``show`` cells of labs 00a and 04a. This one puts
back every locked cell (tests, the setup, the lab's own helpers), each after the cell that comes before it
in the lab, and says which in the grade report. Imported only by the grader (it needs nbgrader).
"""

from __future__ import annotations

from nbgrader.preprocessors import NbGraderPreprocessor

from gpucourse.tooling.grading.notes import NOTE_KEY


def put_back_locked_cells(nb, source_cells, points: dict[str, float]) -> list[str]:
    """Insert into ``nb`` every locked cell of ``source_cells`` that it lacks; returns their ids.

    ``source_cells``: the lab's cells in its order, as ``(grade_id, cell_type, locked, source, checksum)``
    (nbgrader's gradebook keeps them in the order the lab was generated in, which nbgrader's own restoring
    relies on too); ``points``: grade id → points of the graded ones. A missing cell goes right
    after the cell that comes before it in the lab (the submission's own copy of it, wherever the learner
    moved it), or first when no cell before it is left."""
    from nbformat.v4 import new_code_cell, new_markdown_cell

    present = {}
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id:
            present.setdefault(grade_id, cell)
    restored, after = [], None
    for grade_id, cell_type, locked, source, checksum in source_cells:
        if grade_id in present:
            after = present[grade_id]
            continue
        if not locked:
            continue  # an answer the learner deleted: there is nothing to put back
        meta = {"grade": grade_id in points, "grade_id": grade_id, "locked": True, "schema_version": 3,
                "solution": False, "task": False, "checksum": checksum}
        if grade_id in points:
            meta["points"] = points[grade_id]
        cell = new_code_cell(source) if cell_type == "code" else new_markdown_cell(source)
        cell.metadata = {"deletable": False, "editable": False, "nbgrader": meta}
        index = 0 if after is None else next(i for i, c in enumerate(nb.cells) if c is after) + 1
        nb.cells.insert(index, cell)
        after = cell
        restored.append(grade_id)
    return restored


class RestoreLockedCells(NbGraderPreprocessor):
    """Sanitize step, before OverwriteCells: the lab's locked cells that the submission deleted are put back
    from the gradebook (``put_back_locked_cells``); ``GuardSubmission`` notes which."""

    def preprocess(self, nb, resources):
        from nbgrader.api import Gradebook

        info = resources["nbgrader"]
        with Gradebook(info["db_url"]) as gradebook:
            source = gradebook.find_notebook(info["notebook"], info["assignment"])
            cells = [(c.name, c.cell_type, c.locked, c.source, c.checksum) for c in source.source_cells]
            points = {c.name: c.max_score for c in source.grade_cells}
        restored = put_back_locked_cells(nb, cells, points)
        if restored:
            resources.setdefault(NOTE_KEY, {})["restored"] = restored
        return nb, resources
