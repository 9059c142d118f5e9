"""Lab 04 through real nbgrader: the solution scores full marks, the untouched lab 0, and known-wrong
versions (a missing barrier, a missing zero fill, no tiling at all, an unpadded tile, lesson 04's
A·B kernel copied for this lab's A·Bᵀ, the square traffic formula) lose the points of the part they
get wrong — a kernel without a barrier must fail even when its result looks right."""

import pytest
from labtools import (
    SILENCE_THE_GRADER,
    cell_output,
    grade_lab,
    release_notebook,
    solution_notebook,
    with_cells,
    with_course_patched,
    with_ipython_hooks,
)

LAB = "lab04_shared_memory"

pytestmark = pytest.mark.slow

LAUNCH = '''

def launch_tiled_matmul_bt(a, bt):
    m, n = a.shape[0], bt.shape[0]
    c = np.zeros((m, n), dtype=np.float32)
    grid = ((n + TILE - 1) // TILE, (m + TILE - 1) // TILE)
    tiled_matmul_bt[grid, (TILE, TILE)](a, bt, c)
    return c
'''


def tiled(*, barrier_after_load=True, barrier_after_compute=True, zero_fill=True, transposed=True) -> str:
    """The solution's kernel with one defect switched on (transposed=False: lesson 04's A·B kernel)."""
    n, load_b = ("bt.shape[0]", "bt[col, k0 + ty]") if transposed else ("bt.shape[1]", "bt[k0 + ty, col]")
    fill_a = "\n        else:\n            a_tile[ty, tx] = 0.0" if zero_fill else ""
    fill_b = "\n        else:\n            b_tile[ty, tx] = 0.0" if zero_fill else ""
    sync_load = "\n        cuda.syncthreads()" if barrier_after_load else ""
    sync_compute = "\n        cuda.syncthreads()" if barrier_after_compute else ""
    return f'''@cuda.jit
def tiled_matmul_bt(a, bt, c):
    a_tile = cuda.shared.array((TILE, TILE), float32)
    b_tile = cuda.shared.array((TILE, TILE), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    row = cuda.blockIdx.y * TILE + ty
    col = cuda.blockIdx.x * TILE + tx
    m = a.shape[0]
    depth = a.shape[1]
    n = {n}
    acc = float32(0.0)
    for k0 in range(0, depth, TILE):
        if row < m and k0 + tx < depth:
            a_tile[ty, tx] = a[row, k0 + tx]{fill_a}
        if k0 + ty < depth and col < n:
            b_tile[ty, tx] = {load_b}{fill_b}{sync_load}
        for kk in range(TILE):
            acc += a_tile[ty, kk] * b_tile[kk, tx]{sync_compute}
    if row < m and col < n:
        c[row, col] = acc
''' + LAUNCH


NAIVE = '''@cuda.jit
def tiled_matmul_bt(a, bt, c):
    col, row = cuda.grid(2)
    if row < c.shape[0] and col < c.shape[1]:
        acc = float32(0.0)
        for k in range(a.shape[1]):
            acc += a[row, k] * bt[col, k]
        c[row, col] = acc
''' + LAUNCH

UNPADDED = '''@cuda.jit
def transpose_tiled(src, dst):
    tile = cuda.shared.array((TILE_T, TILE_T), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    x = cuda.blockIdx.x * TILE_T + tx
    y = cuda.blockIdx.y * TILE_T + ty
    for j in range(0, TILE_T, ROWS):
        if y + j < src.shape[0] and x < src.shape[1]:
            tile[ty + j, tx] = src[y + j, x]
    cuda.syncthreads()
    x = cuda.blockIdx.y * TILE_T + tx
    y = cuda.blockIdx.x * TILE_T + ty
    for j in range(0, TILE_T, ROWS):
        if y + j < dst.shape[0] and x < dst.shape[1]:
            dst[y + j, x] = tile[tx, ty + j]
'''

COMPULSORY_ONLY = '''
def tiled_traffic_bytes(m, k, n, tile):
    return 4 * (m * k + n * k + m * n)
'''

# Lesson 04's square formula, 4 · (2n³/T + n²), with n taken as m: right only when m = k = n.
SQUARE_FORMULA = '''
def tiled_traffic_bytes(m, k, n, tile):
    return 4 * (2 * m * m * (m // tile) + m * m)
'''


# Issue 46. The lesson's traffic count through a default argument, and the lesson's matmul in a closure: the
# tripwire (0, and why) ...
TRAFFIC_BY_DEFAULT = '''
from gpucourse.lessons.tiling import model


def tiled_traffic_bytes(m, k, n, tile, _count=model.matmul_traffic_bytes, _rung=model.rung("tiled", 8)):
    return _count(model.rung("tiled", tile), m, n, k)
'''

MATMUL_IN_A_CLOSURE = '''

def _with_the_lesson():
    from gpucourse.lessons.tiling import experiments

    def launch(a, bt):
        return np.asarray(experiments.matmul(a, np.ascontiguousarray(bt.T), kind="tiled", tile=TILE))

    return launch


launch_tiled_matmul_bt = _with_the_lesson()
'''

# ... a number of a class of its own (refused) ...
BYTES_SUBCLASS = '''
class _Bytes(int):
    pass


def tiled_traffic_bytes(m, k, n, tile):
    return _Bytes(4 * (m * k * (n // tile) + n * k * (m // tile) + m * n))
'''

# ... and the tiled kernel that skips the tiles where only the hidden barrier check goes (k = 12) and
# silences that check (labtools): on main, where the hidden block traced it, it earned the 2 points.
TILED_BUT_SILENCES = SILENCE_THE_GRADER + "\n\n" + tiled().replace('''    acc = float32(0.0)
    for k0 in range(0, depth, TILE):''', '''    acc = float32(0.0)
    if depth == 12:
        if tx == 0 and ty == 0 and cuda.blockIdx.x == 0 and cuda.blockIdx.y == 0:
            _silence()
        if row < m and col < n:
            for k in range(depth):
                acc += a[row, k] * bt[col, k]
            c[row, col] = acc
        return
    for k0 in range(0, depth, TILE):''')


def test_lab04_round_trip(tmp_path):
    solution = solution_notebook(LAB)
    scores = grade_lab(LAB, {
        "solution": solution,
        "untouched": release_notebook(LAB),
        **with_ipython_hooks(release_notebook(LAB)),  # no answers, behind IPython hooks (labtools.IPYTHON_HOOKS): 0
        # three independent defects in one notebook: each costs its own cell(s)
        "no_load_barrier": with_cells(solution, {"ex2_solution": tiled(barrier_after_load=False),
                                                 "ex3_solution": UNPADDED, "ex1_solution": COMPULSORY_ONLY}),
        "no_compute_barrier": with_cells(solution, {"ex2_solution": tiled(barrier_after_compute=False)}),
        "no_zero_fill": with_cells(solution, {"ex2_solution": tiled(zero_fill=False), "ex1_solution": BYTES_SUBCLASS}),
        "naive": with_cells(solution, {"ex2_solution": NAIVE}),
        # issue 46: the lesson's answers through a default and a closure; a kernel that silences the grader
        "hostile": with_cells(solution, {"ex1_solution": TRAFFIC_BY_DEFAULT,
                                         "ex2_solution": TILED_BUT_SILENCES + MATMUL_IN_A_CLOSURE}),
        "lesson_copy": with_cells(solution, {"ex2_solution": tiled(transposed=False),
                                             "ex1_solution": SQUARE_FORMULA}),
        # known-wrong answers behind a patch of the course's checks (labtools.COURSE_PATCH): 0
        "patched_course": with_course_patched(with_cells(solution, {"ex2_solution": NAIVE})),
    }, tmp_path)
    full = scores["solution"].max_score
    assert full == 10
    assert scores["solution"].total == full, scores["solution"].cells
    assert scores["untouched"].cells == {"ex1_test": 0, "ex2_test": 0, "ex2_barriers": 0, "ex3_test": 0}
    # A missing barrier fails the race check, whatever the result happens to be.
    assert scores["no_load_barrier"].cells == {"ex1_test": 0, "ex2_test": 0, "ex2_barriers": 0, "ex3_test": 0}
    assert scores["no_compute_barrier"].cells["ex2_barriers"] == 0, scores["no_compute_barrier"].cells
    assert scores["no_compute_barrier"].cells["ex1_test"] == 2 and scores["no_compute_barrier"].cells["ex3_test"] == 2
    # the lesson's traffic count and matmul, reached through a default and a closure, trip the wires; the
    # kernel that silenced the hidden barrier check on main (2 points there) is judged on what it did
    assert scores["hostile"].cells == {"ex1_test": 0, "ex2_test": 0, "ex2_barriers": 0, "ex3_test": 2}
    assert "forbids: gpucourse.lessons.tiling.model:matmul_traffic_bytes" in cell_output(scores["hostile"], "ex1_test")
    assert "forbids: gpucourse.lessons.tiling.experiments:matmul" in cell_output(scores["hostile"], "ex2_test")
    assert scores["no_zero_fill"].cells["ex1_test"] == 0  # a number of a class of its own
    assert "an object of a subclass of int" in cell_output(scores["no_zero_fill"], "ex1_test")
    # Edges of a non-multiple N left holding stale values: wrong results, found by the hidden sizes.
    assert scores["no_zero_fill"].cells["ex2_test"] == 0, scores["no_zero_fill"].cells
    assert scores["no_zero_fill"].total <= full - 6
    # Right answers without shared memory are not a tiled matmul: the byte count and banks say so.
    assert scores["naive"].cells == {"ex1_test": 2, "ex2_test": 4, "ex2_barriers": 0, "ex3_test": 2}
    # Lesson 04's kernel, renamed, multiplies by bt instead of btᵀ; the square formula miscounts.
    assert scores["lesson_copy"].cells == {"ex1_test": 0, "ex2_test": 0, "ex2_barriers": 0, "ex3_test": 2}
