"""Labs 04, 04a, 08 and 11 ask for a goal and the evidence to reach, not a recipe to type.

Issue 41 part 3 (review, "labs mostly test careful transcription"): each exercise's text states the
goal and what the checks must show; the recipe's steps moved into a hints cell that the released lab
shows collapsed (JupyterLab's cell metadata ``"jupyter": {"source_hidden": true}``, carried from the
jupytext source through nbgrader's generate into labs/). Each check also runs on a planted bad lab.
"""

import copy
import re

import nbformat
import pytest

from gpucourse.tooling.build import ROOT

# Phrases of the old step-by-step recipes: never in an exercise's visible text, always in its hints.
RECIPES = {
    "lab04_shared_memory": ["at each step every thread copies", "stores 0 in the tile",
                            "each thread handles rows", "`cuda.syncthreads()`", "Element (kk, col) of B"],
    "lab04a_reductions": ["for s = 16, 8, 4, 2, 1", "`cuda.syncwarp()`", "m = 16, 8, 4, 2, 1",
                          "for d = 1, 2, 4, 8, 16", "Lane 31 of each warp", "Exclusive = inclusive"],
    "lab08_feeding": ["`aten::_local_scalar_dense`: Python asked", "`torch.nn.functional.gelu`", "approximate",
                      "torch.randn(steps, BATCH, FEATURES)", ".pin_memory()", "torch.autocast("],
    # lab 09's index formulas are given nowhere any more, hints included (issue 46: a diagnosis, not a
    # transcription; tests/test_lab09_collectives.py checks they are absent): no recipe phrase to look for
    "lab09_collectives": [],
    "lab13_attention": ["`np.exp(m - m_new)`", "`alpha[:, None] * acc`", "4·n² elements in all",
                        "(r // bc + 1)·bc rows"],
    "lab11_root_causes": ["`b * TALLY_BLOCK + t`", "`torch.clamp(norm / max_norm, min=1.0)`", "`torch._foreach_mul_`",
                          "a tuple of four `float32` indexed by `k`"],
}
# Words that announce the goal and the evidence in every exercise's text.
EVIDENCE = ("**Goal.**", "**Evidence to reach**")


def released(lab: str) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / "labs" / lab / f"{lab}.ipynb", as_version=4)


def grade_id(cell) -> str:
    return cell.metadata.get("nbgrader", {}).get("grade_id", "")


def problems(nb: nbformat.NotebookNode, recipes: list[str]) -> list[str]:
    found = []
    cells = nb.cells
    hints = [c for c in cells if grade_id(c).endswith("_hints")]
    specs = [c for c in cells if re.fullmatch(r"ex\d+_spec", grade_id(c))]
    if not hints:
        found.append("no hints cell")
    for cell in hints:
        if cell.cell_type != "markdown" or cell.metadata.get("jupyter", {}).get("source_hidden") is not True:
            found.append(f"{grade_id(cell)} is not a collapsed markdown cell")
    for index, cell in enumerate(cells):
        if grade_id(cell).endswith("_hints") and not (index and "collapsed cell below" in cells[index - 1].source):
            found.append(f"{grade_id(cell)}: the cell above does not say that hints are collapsed below it")
    visible = " ".join(" ".join(c.source.split()) for c in cells if c.cell_type == "markdown" and c not in hints)
    hidden = " ".join(" ".join(c.source.split()) for c in hints)
    for phrase in recipes:
        if phrase in visible:
            found.append(f"the recipe's {phrase!r} is in the visible text")
        if phrase not in hidden:
            found.append(f"the recipe's {phrase!r} is not in the hints")
    for cell in specs:
        if re.search(r"^\d+\. ", cell.source, re.M):
            found.append(f"{grade_id(cell)} has a numbered list of steps")
        if "Exercise 1 · Which line" not in cell.source and not all(word in cell.source for word in EVIDENCE):
            found.append(f"{grade_id(cell)} does not state its goal and the evidence to reach")
    return found


@pytest.mark.parametrize("lab", sorted(RECIPES))
def test_released_lab_states_goals_and_collapses_its_hints(lab):
    assert problems(released(lab), RECIPES[lab]) == []


@pytest.mark.parametrize("lab", sorted(RECIPES))
def test_the_jupytext_source_carries_the_hint_metadata(lab):
    text = (ROOT / "solutions" / lab / f"{lab}.py").read_text()
    assert "cell_metadata_filter: jupyter,nbgrader,-all" in text  # else jupytext drops "jupyter" on the way
    assert re.search(r'^# %% \[markdown\] jupyter=\{"source_hidden": true\} nbgrader=', text, re.M)


def _planted(lab, change):
    nb = copy.deepcopy(released(lab))
    change(nb)
    return problems(nb, RECIPES[lab])


def _cell(nb, gid):
    return next(c for c in nb.cells if grade_id(c) == gid)


@pytest.mark.parametrize("lab, change, expected", [
    ("lab04_shared_memory", lambda nb: _cell(nb, "ex2_hints").metadata.pop("jupyter"), "ex2_hints is not a collapsed"),
    ("lab04a_reductions", lambda nb: setattr(_cell(nb, "ex1_spec"), "source",
                                             _cell(nb, "ex1_spec").source + "\n\n1. for s = 16, 8, 4, 2, 1 add"),
     "'for s = 16, 8, 4, 2, 1' is in the visible text"),
    ("lab04a_reductions", lambda nb: setattr(_cell(nb, "ex3_spec"), "source",
                                             _cell(nb, "ex3_spec").source + "\n\n1. **Warp scan.**"),
     "ex3_spec has a numbered list"),
    ("lab08_feeding", lambda nb: nb.cells.remove(_cell(nb, "ex3_hints")), "'.pin_memory()' is not in the hints"),
    ("lab08_feeding", lambda nb: setattr(_cell(nb, "ex2_spec"), "source",
                                         _cell(nb, "ex2_spec").source.replace("**Goal.**", "Write")),
     "ex2_spec does not state its goal"),
    ("lab04_shared_memory", lambda nb: setattr(_cell(nb, "ex3_spec"), "source",
                                               _cell(nb, "ex3_spec").source.replace("collapsed cell below", "cell")),
     "ex3_hints: the cell above does not say"),
])
def test_a_planted_recipe_or_open_hint_is_found(lab, change, expected):
    found = _planted(lab, change)
    assert any(expected in p for p in found), found
