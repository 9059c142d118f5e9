"""Lab 01 through real nbgrader: the solution scores full marks, the untouched lab 0,
known-wrong versions lose exactly the points of the part they get wrong."""

import pytest
from labtools import grade_lab, release_notebook, solution_notebook, with_cells

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

FLOOR_DIVISION = '''
def blocks_per_grid(n_elements, threads_per_block):
    return n_elements // threads_per_block
'''

ROWS_AND_COLS_SWAPPED = '''
def warp_and_lane(tx, ty, block_x):
    linear = ty + tx * block_x
    return linear // 32, linear % 32
'''


def test_lab01_round_trip(tmp_path):
    solution = solution_notebook(LAB)
    scores = grade_lab(LAB, {
        "solution": solution,
        "untouched": release_notebook(LAB),
        "no_bounds_check": with_cells(solution, {"ex3_solution": NO_BOUNDS_CHECK}),
        "floor_division": with_cells(solution, {"ex2_solution": FLOOR_DIVISION}),
        "swapped_axes": with_cells(solution, {"ex4_solution": ROWS_AND_COLS_SWAPPED}),
    }, tmp_path)
    full = scores["solution"].max_score
    assert full == 10
    assert scores["solution"].total == full
    assert scores["untouched"].total == 0
    assert scores["no_bounds_check"].cells == {"ex1_test": 2, "ex2_test": 2, "ex3_test": 0, "ex4_test": 2}
    # floor division breaks blocks_per_grid and, through it, the kernel launch that relies on it
    assert scores["floor_division"].cells["ex2_test"] == 0
    assert scores["floor_division"].total < full
    assert scores["swapped_axes"].cells["ex4_test"] == 0
    assert scores["swapped_axes"].total == full - 2
