"""Lab 00a through real nbgrader: the solution scores full marks, the untouched lab 0, and known-wrong
versions lose the points of what they get wrong — a missing guard, an input read twice, a forgotten
blockIdx, rows and columns swapped, a window sum without shared memory (right result, wasted reads), a
missing syncthreads, a dot product made of atomics. One of them also deletes every locked test cell (the
grader puts them back and grades them); others patch the course's checks and earn 0 (issue 32)."""

import pytest
from labtools import (
    COURSE_PATCH,
    SILENCE_THE_GRADER,
    grade_lab,
    release_notebook,
    solution_notebook,
    with_cells,
    with_course_patched,
    with_ipython_hooks,
    without_graded_cells,
)

LAB = "lab00a_first_kernels"

pytestmark = pytest.mark.slow

NO_GUARD = '''@cuda.jit
def guarded_add_ten(a, out):
    i = cuda.threadIdx.x
    out[i] = a[i] + 10
'''

READS_TWICE = '''@cuda.jit
def zip_add(a, b, out):
    i = cuda.threadIdx.x
    out[i] = a[i] + b[i]
    out[i] = a[i] + b[i]
'''

NO_BLOCK_INDEX = '''@cuda.jit
def blocks_add_ten(a, out):
    i = cuda.threadIdx.x
    if i < a.size:
        out[i] = a[i] + 10
'''

ROWS_AND_COLUMNS_SWAPPED = '''@cuda.jit
def map_2d_add_ten(a, out):
    row, col = cuda.grid(2)
    if row < a.shape[0] and col < a.shape[1]:
        out[row, col] = a[row, col] + 10


def launch_2d(a, kernel=None):
    out = poisoned(*a.shape)
    rows, cols = a.shape
    (kernel or map_2d_add_ten)[((cols + 7) // 8, (rows + 7) // 8), (8, 8)](a, out)
    return out
'''

WINDOW_FROM_GLOBAL = '''@cuda.jit
def window_sum(a, out):
    i = cuda.threadIdx.x
    if i < a.size:
        total = a[i]
        if i >= 1:
            total += a[i - 1]
        if i >= 2:
            total += a[i - 2]
        out[i] = total
'''

WINDOW_WITHOUT_BARRIER = '''@cuda.jit
def window_sum(a, out):
    shared = cuda.shared.array(32, float32)
    i = cuda.threadIdx.x
    if i < a.size:
        shared[i] = a[i]
    if i < a.size:
        total = shared[i]
        if i >= 1:
            total += shared[i - 1]
        if i >= 2:
            total += shared[i - 2]
        out[i] = total
'''

DOT_WITH_ATOMICS = '''@cuda.jit
def dot(a, b, out):
    i = cuda.threadIdx.x
    if i == 0:
        out[0] = 0
    cuda.syncthreads()
    if i < a.size:
        cuda.atomic.add(out, 0, a[i] * b[i])
'''

# A wrong kernel behind redefined lab helpers: zeros as test data make `out = 10` look right, and a
# `counts` that answers what the test expects hides that `a` is never read. Tampering: 0 in every cell.
HELPERS_REDEFINED = """@cuda.jit
def map_add_ten(a, out):
    i = cuda.threadIdx.x
    out[i] = 10


def floats(*shape, seed=0):
    return np.zeros(shape, dtype=np.float32)


def counts(report):
    return {("a", "load"): 1, ("out", "store"): 1}
"""


# Issue 46: kernels that walk up to the hidden block and make its check pass anything (labtools), each
# right only at the sizes the visible cells use. On main (hidden blocks launched and traced them where the
# block runs) both earned their result point; run by the grader on its own thread they find nothing.
MAP_THAT_SILENCES = SILENCE_THE_GRADER + '''

@cuda.jit
def map_add_ten(a, out):
    i = cuda.threadIdx.x
    if i == 0:
        _silence()
    v = a[i]
    out[i] = v + 10 if a.size in (8, 16) else v + 1
'''

BLOCKS_THAT_SILENCE = '''
@cuda.jit
def blocks_add_ten(a, out):
    i = cuda.grid(1)
    if i == 0:
        _silence()
    if i < a.size:
        v = a[i]
        out[i] = v + 10 if a.size == 20 else v + 1
'''


def test_lab00a_round_trip(tmp_path):
    solution = solution_notebook(LAB)
    wrong = with_cells(solution, {"ex6_solution": ROWS_AND_COLUMNS_SWAPPED, "ex7_solution": WINDOW_FROM_GLOBAL})
    scores = grade_lab(LAB, {
        "solution": solution,
        "untouched": release_notebook(LAB),
        **with_ipython_hooks(release_notebook(LAB)),  # no answers, behind IPython hooks (labtools.IPYTHON_HOOKS): 0
        # independent defects in one notebook: each costs its own puzzle's cells only; its test cells are
        # deleted (the cell before each is a locked `show` cell) and must be put back and graded
        "sloppy": without_graded_cells(with_cells(solution, {
            "ex2_solution": READS_TWICE, "ex3_solution": NO_GUARD, "ex5_solution": NO_BLOCK_INDEX,
            "ex7_solution": WINDOW_WITHOUT_BARRIER, "ex8_solution": DOT_WITH_ATOMICS})),
        # the swapped rows and columns, the window from global memory, and two kernels that silence the grader
        "swapped": with_cells(wrong, {"ex1_solution": MAP_THAT_SILENCES, "ex5_solution": BLOCKS_THAT_SILENCE}),
        # the review's hostile shape: wrong answers and the course's checks replaced (issue 32: it earned
        # 1 of 16, ex6_test); once unseen by the tamper scan (getattr), once as the scan sees it
        "patched_course": with_course_patched(wrong),
        "patched_course_seen": with_course_patched(wrong, COURSE_PATCH.replace('getattr(sys, "modules")',
                                                                                 "sys.modules")),
        "helpers_redefined": with_cells(solution, {"ex1_solution": HELPERS_REDEFINED}),
    }, tmp_path)
    full = scores["solution"].max_score
    assert full == 16
    assert scores["solution"].total == full, scores["solution"].cells
    assert scores["untouched"].total == 0, scores["untouched"].cells
    sloppy = scores["sloppy"].cells
    # Reading an input twice gives the right answer and loses only the efficiency point.
    assert sloppy["ex2_test"] == 1 and sloppy["ex2_counts"] == 0, sloppy
    # Without the guard, the threads past the end run off the arrays: both points lost.
    assert sloppy["ex3_test"] == 0 and sloppy["ex3_counts"] == 0, sloppy
    # Forgetting blockIdx: every block writes the first 8 elements; the result is wrong.
    assert sloppy["ex5_test"] == 0 and sloppy["ex5_counts"] == 0, sloppy
    # Atomics on out: right answer, but out is updated 32 times instead of written once.
    assert sloppy["ex8_test"] == 1 and sloppy["ex8_counts"] == 0, sloppy
    # Without the barrier the microscope's random interleaving finds the race: the efficiency point is lost.
    assert sloppy["ex7_counts"] == 0, sloppy
    assert {k: v for k, v in sloppy.items() if k[:3] in ("ex1", "ex4", "ex6")} == dict.fromkeys(
        ["ex1_test", "ex1_counts", "ex4_test", "ex4_counts", "ex6_test", "ex6_counts"], 1)
    swapped = scores["swapped"].cells
    assert swapped["ex6_test"] == 0, swapped  # (row, col) = cuda.grid(2) is the wrong way round
    assert swapped["ex7_test"] == 1 and swapped["ex7_counts"] == 0, swapped  # three global reads per thread
    # the kernels that silence the grader lose their result points (reads and writes are honest: counts kept)
    assert swapped["ex1_test"] == 0 and swapped["ex5_test"] == 0, swapped
    assert swapped["ex1_counts"] == 1 and swapped["ex5_counts"] == 1, swapped
    assert scores["swapped"].total == full - 5, swapped
    assert scores["patched_course_seen"].total == 0, scores["patched_course_seen"].cells
    # redefining the lab's own helpers (floats, counts) is tampering: nothing is earned
    assert scores["helpers_redefined"].total == 0, scores["helpers_redefined"].cells
