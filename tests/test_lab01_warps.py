"""Lab 01 through real nbgrader: the solution scores full marks, the untouched lab 0,
known-wrong versions lose exactly the points of the part they get wrong. A missing bounds check
loses its points however the plain launch behaves (in the simulator it raises; on a GPU it writes
past the array unnoticed, which `PADDED_NO_BOUNDS_CHECK` reproduces here): the microscope sees it."""

import pytest
from labtools import (
    errors,
    grade_lab,
    release_notebook,
    solution_notebook,
    with_cells,
    with_course_patched,
    with_ipython_hooks,
)

LAB = "lab01_warps"

pytestmark = pytest.mark.slow

NO_BOUNDS_CHECK = '''
@cuda.jit
def add_2d(a, b, out):
    col, row = cuda.grid(2)
    out[row, col] = a[row, col] + b[row, col]


def launch_add_2d(a, b, block=(16, 16)):
    out = np.zeros_like(a)
    rows, cols = a.shape
    grid = (blocks_per_grid(cols, block[0]), blocks_per_grid(rows, block[1]))
    add_2d[grid, block](a, b, out)
    return out
'''

# Checks rows but not columns: threads right of the array read and write past each row.
ROWS_ONLY_CHECK = '''
@cuda.jit
def add_2d(a, b, out):
    col, row = cuda.grid(2)
    if row < out.shape[0]:
        out[row, col] = a[row, col] + b[row, col]


def launch_add_2d(a, b, block=(16, 16)):
    out = np.zeros_like(a)
    rows, cols = a.shape
    grid = (blocks_per_grid(cols, block[0]), blocks_per_grid(rows, block[1]))
    add_2d[grid, block](a, b, out)
    return out
'''

# No bounds check, hidden by padding every array to whole blocks: the plain launch never leaves its
# arrays (as an out-of-bounds write on a GPU goes unnoticed) and returns the right numbers.
PADDED_NO_BOUNDS_CHECK = '''
@cuda.jit
def add_2d(a, b, out):
    col, row = cuda.grid(2)
    out[row, col] = a[row, col] + b[row, col]


def launch_add_2d(a, b, block=(16, 16)):
    rows, cols = a.shape
    grid = (blocks_per_grid(cols, block[0]), blocks_per_grid(rows, block[1]))
    shape = (grid[1] * block[1], grid[0] * block[0])
    a_pad, b_pad, out = np.zeros(shape, a.dtype), np.zeros(shape, a.dtype), np.zeros(shape, a.dtype)
    a_pad[:rows, :cols], b_pad[:rows, :cols] = a, b
    add_2d[grid, block](a_pad, b_pad, out)
    return out[:rows, :cols]
'''

FLOOR_DIVISION = '''
def blocks_per_grid(n_elements, threads_per_block):
    return n_elements // threads_per_block
'''

ROWS_AND_COLS_SWAPPED = '''
def warp_and_lane(tx, ty, block_x):
    linear = ty + tx * block_x
    return linear // 32, linear % 32
'''

# Issue 46, one submission, one attack per exercise (each scores 0 on the exercise it attacks; exercise 2 right):
# exercise 1 reaches the lesson's warps_per_block through a default argument (FORBIDDEN, the tripwire records
# the call however it is reached); exercise 3's launcher zeroes the caller's arrays and its kernel adds
# nothing (a + b computed after the call is 0 too: it scored 4 of 4 when the hidden block handed over its own
# arrays); exercise 4 walks up the frames, through a name built in another cell, for the test's cases (the
# learner's function runs on a thread of its own: no frame of the test is there).
ISSUE46_ATTACKS = {
# ex1: the lesson's warps_per_block through a default argument (FORBIDDEN)
"ex1_solution": '''
from gpucourse.lessons.warps import model as _lesson


def warps_per_block(block_shape, _count=_lesson.warps_per_block):
    shape = (block_shape,) if isinstance(block_shape, int) else tuple(block_shape)
    return _count(int(np.prod(shape)))
''',
# ex2 right; the names of exercise 4's frame walk, built in another cell than the one that uses them (the
# scan refuses frame internals spelled out: that is the run-time defence's case)
"ex2_solution": '''
FRAME, GLOBALS, BACK = "_get" + "frame", "f_" + "globals", "f_" + "back"


def blocks_per_grid(n_elements, threads_per_block):
    return (n_elements + threads_per_block - 1) // threads_per_block
''',
# ex3: a kernel that adds nothing; the launcher zeroes the caller's arrays, so that a + b computed after it is 0
"ex3_solution": '''
@cuda.jit
def add_2d(a, b, out):
    col, row = cuda.grid(2)


def launch_add_2d(a, b, block=(16, 16)):
    a[...] = 0
    b[...] = 0
    return np.zeros_like(a)
''',
# ex4: walks up the frames for the test's cases and answers from them (the visible references by heart)
"ex4_solution": '''
import sys


def warp_and_lane(tx, ty, block_x):
    frame = getattr(sys, FRAME)(1)
    while frame is not None:
        cases = getattr(frame, GLOBALS).get("cases")
        for case in cases if isinstance(cases, list) else ():
            if len(case) == 4 and tuple(case[:3]) == (tx, ty, block_x):
                return case[3]
        frame = getattr(frame, BACK)
    return {(4, 2, 12): (0, 28), (0, 0, 32): (0, 0)}.get((tx, ty, block_x), (0, 0))
''',
}


def test_lab01_round_trip(tmp_path):
    solution = solution_notebook(LAB)
    scores = grade_lab(LAB, {
        "solution": solution,
        "untouched": release_notebook(LAB),
        **with_ipython_hooks(release_notebook(LAB)),  # no answers, behind IPython hooks (labtools.IPYTHON_HOOKS): 0
        "no_bounds_check": with_cells(solution, {"ex3_solution": NO_BOUNDS_CHECK}),
        # ex4_test reads only warp_and_lane: its mistake rides with one of exercise 3's (one kernel fewer)
        "rows_only_check+swapped_axes": with_cells(solution, {"ex3_solution": ROWS_ONLY_CHECK,
                                                              "ex4_solution": ROWS_AND_COLS_SWAPPED}),
        "padded_no_bounds_check": with_cells(solution, {"ex3_solution": PADDED_NO_BOUNDS_CHECK}),
        "floor_division": with_cells(solution, {"ex2_solution": FLOOR_DIVISION}),
        # known-wrong answers behind a patch of the course's checks (labtools.COURSE_PATCH): 0
        "patched_course": with_course_patched(with_cells(solution, {"ex2_solution": FLOOR_DIVISION})),
        "issue46_attacks": with_cells(solution, ISSUE46_ATTACKS),
    }, tmp_path)
    full = scores["solution"].max_score
    assert full == 10
    assert scores["solution"].total == full
    assert scores["untouched"].cells == {"ex1_test": 0, "ex2_test": 0, "ex3_test": 0, "ex4_test": 0}
    for wrong in ("no_bounds_check", "padded_no_bounds_check"):
        assert scores[wrong].cells == {"ex1_test": 2, "ex2_test": 2, "ex3_test": 0, "ex4_test": 2}, wrong
    assert scores["rows_only_check+swapped_axes"].cells == {"ex1_test": 2, "ex2_test": 2, "ex3_test": 0, "ex4_test": 0}
    # floor division breaks blocks_per_grid and, through it, the kernel launch that relies on it
    assert scores["floor_division"].cells["ex2_test"] == 0
    assert scores["floor_division"].total < full
    assert scores["issue46_attacks"].cells == {"ex1_test": 0, "ex2_test": 2, "ex3_test": 0, "ex4_test": 0}
    assert any("forbids" in e and "warps_per_block" in e for e in errors(scores["issue46_attacks"].notebook))
