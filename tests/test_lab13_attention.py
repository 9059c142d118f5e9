"""Lab 13 through real nbgrader: the solution scores full marks, the untouched lab 0, and known-wrong answers
(an online step that forgets the rescale, takes the block's maximum, turns a masked row into nan; a tile step
that forgets to rescale acc, keeps acc divided by l, drops the 1/√d; byte counts that forget the softmax's
round trip, the logsumexp, FlashAttention's re-reads of K and V, or the whole tiles a causal program loads)
lose exactly their exercise's points. Hostile answers score 0 on the exercise they attack: the course's tile
step called through a name built at run time or an alias, the course's byte count handed in as the answer
(directly, inside ``functools.partial``, through a default argument), visible answers by heart, and arrays
that decide their own comparisons."""

import re

import numpy as np
import pytest
from labtools import (
    grade_lab,
    release_notebook,
    solution_notebook,
    with_cells,
    with_course_patched,
    with_ipython_hooks,
)

from gpucourse.lessons.attention import model
from gpucourse.tooling.build import ROOT
from gpucourse.tooling.grading import guard_hidden_tests

LAB = "lab13_attention"

# --- exercise 1: one online-softmax step -------------------------------------------------------------------
NO_RESCALE = """
def online_softmax_step(m, l, s_block):
    m_new = np.maximum(m, s_block.max(axis=1))
    shift = np.where(np.isneginf(m_new), 0.0, m_new)
    return m_new, l + np.exp(s_block - shift[:, None]).sum(axis=1)  # the old terms keep the old maximum
"""
BLOCK_MAX_ONLY = """
def online_softmax_step(m, l, s_block):
    m_new = s_block.max(axis=1)  # this block's maximum, not the running one
    shift = np.where(np.isneginf(m_new), 0.0, m_new)
    return m_new, np.exp(m - shift) * l + np.exp(s_block - shift[:, None]).sum(axis=1)
"""
NAN_ON_MASKED = """
def online_softmax_step(m, l, s_block):
    m_new = np.maximum(m, s_block.max(axis=1))
    return m_new, np.exp(m - m_new) * l + np.exp(s_block - m_new[:, None]).sum(axis=1)  # −∞ − (−∞) = nan
"""
# the course's tile step, reached through a module attribute whose name is built at run time
DELEGATES_STEP = """
import gpucourse.lessons.attention.online as _lesson


def online_softmax_step(m, l, s_block):
    step = getattr(_lesson, "tile_" + "step")
    new_m, new_l, _ = step(m, l, np.zeros((len(m), 1)), s_block, np.zeros((s_block.shape[1], 1)))
    return new_m, new_l
"""

# --- exercise 2: one FlashAttention tile step --------------------------------------------------------------
TILE_STEP = """
def flash_tile_step(m, l, acc, q_tile, k_tile, v_tile):
    s = q_tile @ k_tile.T {scale}
    m_new = np.maximum(m, s.max(axis=1))
    shift = np.where(np.isneginf(m_new), 0.0, m_new)
    alpha = np.exp(m - shift)
    p = np.exp(s - shift[:, None])
    l_new = alpha * l + p.sum(axis=1)
    return m_new, l_new, {acc}
"""
RIGHT_TILE = {"scale": "/ np.sqrt(q_tile.shape[1])", "acc": "alpha[:, None] * acc + p @ v_tile"}


def tile_variant(**changes) -> str:
    return TILE_STEP.format(**dict(RIGHT_TILE, **changes))


ACC_NOT_RESCALED = tile_variant(acc="acc + p @ v_tile")
NORMALISED_ACC = tile_variant(acc="(alpha[:, None] * acc + p @ v_tile) / l_new[:, None]")
NO_SCALE = tile_variant(scale="")
USES_COURSE_STEP = """
from gpucourse.lessons.attention import online as _o

_reference = _o.tile_step  # an alias taken before the grader arms anything


def flash_tile_step(m, l, acc, q_tile, k_tile, v_tile):
    return _reference(m, l, acc, q_tile @ k_tile.T / np.sqrt(q_tile.shape[1]), v_tile)
"""
# results that decide their own comparisons (an ndarray subclass whose == is always true)
LYING_ARRAYS = tile_variant(acc="Agree(alpha[:, None] * acc + p @ v_tile)") + """

class Agree(np.ndarray):
    def __new__(cls, values):
        return np.asarray(values).view(cls)

    def __eq__(self, other):
        return np.ones(np.shape(self), bool)
"""

# --- exercises 3 and 4: the bytes ---------------------------------------------------------------------------
NO_SOFTMAX_ROUND_TRIP = """
def naive_hbm_bytes(n, d, dtype_bytes):
    return (4 * n * d + 2 * n * n) * dtype_bytes  # S written and P read: the softmax's read and write forgotten
"""
NAIVE_BY_HEART = """
def naive_hbm_bytes(n, d, dtype_bytes):
    return {(4096, 64, 2): 136_314_880, (4, 2, 1): 96}.get((n, d, dtype_bytes), 0)
"""
# the course's count inside functools.partial: handed to the grader, it would run with no learner frame
NAIVE_PARTIAL = """
import functools

from gpucourse.lessons.attention import model as _m

naive_hbm_bytes = functools.partial(getattr(_m, "naive_" + "bytes"))
"""
FLASH = """
def flash_hbm_bytes(n, d, br, bc, dtype_bytes, causal=False):
    programs = -(-n // br)
    kv_rows = 0
    for i in range(programs):
        last_row = min((i + 1) * br, n) - 1
        kv_rows += {causal_rows} if causal else {rows}
    return (2 * n * d + 2 * kv_rows * d) * dtype_bytes {lse}
"""
RIGHT_FLASH = {"causal_rows": "min(n, (last_row // bc + 1) * bc)", "rows": "n", "lse": "+ 4 * n"}


def flash_variant(**changes) -> str:
    return FLASH.format(**dict(RIGHT_FLASH, **changes))


# a causal program loads whole K/V tiles: counting only the columns it keeps passes the visible cases (square
# tiles) and fails the hidden ones where bc > br
CAUSAL_COLUMNS_ONLY = flash_variant(causal_rows="last_row + 1")
NO_LSE = flash_variant(lse="")
KV_ONCE = flash_variant(rows="n // programs")  # K and V read once in all (the L2 catches every re-read)
FLASH_HANDED_IN = """
from gpucourse.lessons.attention import model as _m

flash_hbm_bytes = _m.flash_bytes
"""
FLASH_BY_DEFAULT = """
import gpucourse.lessons.attention.model as _lesson


def flash_hbm_bytes(n, d, br, bc, dtype_bytes, causal=False, m=_lesson):
    rows = getattr(m, "kv_rows" + "_read")(n, br, bc, causal)
    return (2 * n * d + 2 * rows * d) * dtype_bytes + 4 * n
"""


def _cell(grade_id: str) -> str:
    return next(c.source for c in solution_notebook(LAB).cells
                if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def _passes(answer_cell: str, source: str, test_cell: str, hidden: bool = True) -> bool:
    """Whether ``source`` in place of ``answer_cell`` passes ``test_cell`` (visible part, and the hidden one
    as the grader rewrites it), run without nbgrader or a kernel."""
    namespace: dict = {}
    exec(_cell("setup"), namespace)
    exec(source, namespace)
    test = _cell(test_cell)
    try:
        with np.errstate(all="ignore"):  # a wrong answer's nan and overflow are what the checks catch
            exec(guard_hidden_tests(test) if hidden else test.split("### BEGIN HIDDEN TESTS")[0], namespace)
    except (AssertionError, Exception):  # noqa: B014  (a failed assert, or a hidden block's failure)
        return False
    return True


@pytest.mark.parametrize("answer_cell, test_cell, wrong", [
    ("ex1_solution", "ex1_test", NO_RESCALE), ("ex1_solution", "ex1_test", BLOCK_MAX_ONLY),
    ("ex1_solution", "ex1_test", NAN_ON_MASKED), ("ex2_solution", "ex2_test", ACC_NOT_RESCALED),
    ("ex2_solution", "ex2_test", NORMALISED_ACC), ("ex2_solution", "ex2_test", NO_SCALE),
    ("ex3_solution", "ex3_test", NO_SOFTMAX_ROUND_TRIP), ("ex4_solution", "ex4_test", NO_LSE),
    ("ex4_solution", "ex4_test", KV_ONCE),
])
def test_known_wrong_answers_fail_their_visible_checks(answer_cell, test_cell, wrong):
    assert _passes(answer_cell, _cell(answer_cell), test_cell)  # the solution passes visible and hidden checks
    assert not _passes(answer_cell, wrong, test_cell, hidden=False)


@pytest.mark.parametrize("answer_cell, test_cell, wrong", [
    ("ex4_solution", "ex4_test", CAUSAL_COLUMNS_ONLY), ("ex3_solution", "ex3_test", NAIVE_BY_HEART)])
def test_answers_that_pass_the_visible_checks_fail_the_hidden_ones(answer_cell, test_cell, wrong):
    assert _passes(answer_cell, wrong, test_cell, hidden=False)
    assert not _passes(answer_cell, wrong, test_cell)


def test_the_templates_are_right_and_the_prose_figures_are_the_models():
    assert _passes("ex2_solution", tile_variant(), "ex2_test") and _passes("ex4_solution", flash_variant(), "ex4_test")
    text = "\n".join(c.source for c in solution_notebook(LAB).cells if c.cell_type == "markdown")
    for figure in (model.naive_bytes(4096, 64, 2), model.flash_bytes(4096, 64, 64, 64, 2),
                   model.flash_bytes(4096, 64, 64, 64, 2, causal=True)):
        assert f"{figure:,}" in text, figure
    # "about half of naive attention's" at 64 × 64 tiles, d = 64: the quadratic terms' ratio 2·br/d
    assert "about half of" in text and model.quadratic_coefficient_ratio(64, 64) == 2
    assert abs(model.naive_bytes(4096, 64, 2) / model.flash_bytes(4096, 64, 64, 64, 2) - 2) < 0.01
    assert "2·br/d times smaller" in text and model.quadratic_coefficient_ratio(64, 128) == 4  # the table's tiles
    assert re.search(r"128 × 64 tiles", text)


@pytest.mark.slow
def test_lab13_round_trip(tmp_path):
    solution = solution_notebook(LAB)
    release = release_notebook(LAB)  # labs/ is committed, held to solutions/ by tests/test_build.py
    assert not any("BEGIN SOLUTION" in c.source or "HIDDEN" in c.source for c in release.cells)
    scores = grade_lab(LAB, {
        "solution": solution,
        "untouched": release,
        **with_ipython_hooks(release),
        "patched_course": with_course_patched(with_cells(solution, {"ex3_solution": NO_SOFTMAX_ROUND_TRIP})),
        # no answer cell reads another's names: mistakes in different exercises share a notebook
        "no_rescale+no_round_trip": with_cells(solution, {"ex1_solution": NO_RESCALE,
                                                          "ex3_solution": NO_SOFTMAX_ROUND_TRIP}),
        "nan_on_masked+acc_not_rescaled+causal_columns": with_cells(solution, {
            "ex1_solution": NAN_ON_MASKED, "ex2_solution": ACC_NOT_RESCALED, "ex4_solution": CAUSAL_COLUMNS_ONLY}),
        "block_max+normalised_acc+no_lse": with_cells(solution, {
            "ex1_solution": BLOCK_MAX_ONLY, "ex2_solution": NORMALISED_ACC, "ex4_solution": NO_LSE}),
        "no_scale+kv_once+by_heart": with_cells(solution, {"ex2_solution": NO_SCALE, "ex4_solution": KV_ONCE,
                                                           "ex3_solution": NAIVE_BY_HEART}),
        # the course's own answers, each reached another way: every one would score full marks if let through
        "course_answers": with_cells(solution, {"ex1_solution": DELEGATES_STEP, "ex2_solution": USES_COURSE_STEP,
                                                "ex3_solution": NAIVE_PARTIAL, "ex4_solution": FLASH_HANDED_IN}),
        "flash_by_default": with_cells(solution, {"ex4_solution": FLASH_BY_DEFAULT}),
        "lying_arrays": with_cells(solution, {"ex2_solution": LYING_ARRAYS}),
    }, tmp_path / "grade")
    full = scores["solution"].max_score
    assert full == 10
    assert scores["solution"].total == full, scores["solution"].cells
    assert scores["untouched"].total == 0 and set(scores["untouched"].cells.values()) == {0}
    right = scores["solution"].cells

    def with_zeros(*cells: str) -> dict:
        return {**right, **dict.fromkeys(cells, 0)}

    expected = {
        "no_rescale+no_round_trip": ("ex1_test", "ex3_test"),
        "nan_on_masked+acc_not_rescaled+causal_columns": ("ex1_test", "ex2_test", "ex4_test"),
        "block_max+normalised_acc+no_lse": ("ex1_test", "ex2_test", "ex4_test"),
        "no_scale+kv_once+by_heart": ("ex2_test", "ex3_test", "ex4_test"),
        # the tripwire (a name built at run time, an alias taken before arming, a default argument) and
        # tripwire.handed_in (the function itself, or inside functools.partial)
        "course_answers": ("ex1_test", "ex2_test", "ex3_test", "ex4_test"),
        "flash_by_default": ("ex4_test",),
        # a class of the notebook that decides its own comparisons fails every hidden block after it
        "lying_arrays": ("ex2_test", "ex3_test", "ex4_test"),
    }
    for student, zeros in expected.items():
        assert scores[student].cells == with_zeros(*zeros), (student, scores[student].cells)


def test_the_instructor_notes_figures_are_the_models():
    notes = (ROOT / "instructor" / "lab13_attention.md").read_text()
    for figure in (model.naive_bytes(4096, 64, 2), model.flash_bytes(4096, 64, 64, 64, 2),
                   model.flash_bytes(4096, 64, 64, 64, 2, causal=True)):
        assert f"{figure:,}" in notes, figure
    assert "10 points" in notes and "45 minutes" in notes
    points = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"] for c in solution_notebook(LAB).cells
              if c.metadata.get("nbgrader", {}).get("grade")}
    assert sum(points.values()) == 10
    for exercise, value in points.items():  # the answers table: "| N `name(…)` | points |"
        assert re.search(rf"^\| {exercise[2]} `[^`]+` \| {value} \|", notes, re.M), exercise
    assert abs(model.naive_bytes(4096, 64, 2) / model.flash_bytes(4096, 64, 128, 64, 2) - 4) < 0.1  # "a quarter"
