"""Lab 04a through real nbgrader: the solution scores full marks, the untouched lab 0, and known-wrong
versions lose the points of the part they get wrong: a warp step through shared memory without
``syncwarp``, a block scan without its ``syncthreads``, the lesson's printed kernels copied (0 on
exercises 2 and 3), and shared memory instead of shuffles (right answers, no warp-level points). One of
them also deletes every locked test cell (the grader puts them back and grades them); one patches the
course and earns 0."""

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
    without_graded_cells,
)

LAB = "lab04a_reductions"

pytestmark = pytest.mark.slow

NO_SYNCWARP = '''@cuda.jit
def warp_sum_shared(x, out):
    buf = cuda.shared.array(WARP, float32)
    lane = cuda.threadIdx.x
    i = cuda.blockIdx.x * 2 * WARP + lane
    v = float32(0.0)
    if i < x.size:
        v = x[i]
    if i + WARP < x.size:
        v += x[i + WARP]
    buf[lane] = v
    s = WARP // 2
    while s > 0:
        if lane < s:
            buf[lane] += buf[lane + s]
        s //= 2
    if lane == 0:
        out[cuda.blockIdx.x] = buf[0]
'''


# Lesson 04a's warp sum (shfl_down_sync) adapted minimally: only lane 0 ends with the whole sum.
COPIED_SHARE = """@cuda.jit
def warp_share(x, out):
    i = cuda.grid(1)
    v = float32(0.0)
    if i < x.size:
        v = x[i]
    total = v
    offset = 16
    while offset > 0:  # the lesson's loop
        total += cuda.shfl_down_sync(FULL_MASK, total, offset)
        offset //= 2
    if i < x.size:
        out[i] = v / total
"""

# Right shares through shared memory and a barrier: no butterfly.
SHARED_SHARE = """@cuda.jit
def warp_share(x, out):
    buf = cuda.shared.array(BLOCK, float32)
    tid = cuda.threadIdx.x
    i = cuda.grid(1)
    v = float32(0.0)
    if i < x.size:
        v = x[i]
    buf[tid] = v
    cuda.syncthreads()
    base = tid - tid % WARP
    total = float32(0.0)
    for k in range(WARP):
        total += buf[base + k]
    if i < x.size:
        out[i] = v / total
"""

# Lesson 04a's hillis_steele_kernel with B = BLOCK: an inclusive scan through shared memory.
COPIED_SCAN = """@cuda.jit
def block_scan(x, out):
    buf = cuda.shared.array((2, BLOCK), float32)
    tid = cuda.threadIdx.x
    i = cuda.blockIdx.x * BLOCK + tid
    buf[0, tid] = x[i] if i < x.size else float32(0.0)
    cuda.syncthreads()
    src = 0
    offset = 1
    while offset < BLOCK:
        if tid >= offset:
            buf[1 - src, tid] = buf[src, tid] + buf[src, tid - offset]
        else:
            buf[1 - src, tid] = buf[src, tid]
        cuda.syncthreads()
        src = 1 - src
        offset *= 2
    if i < x.size:
        out[i] = buf[src, tid]
"""

# The same, shifted by one element: the right exclusive scan, but 8 barriers and no warp shuffle.
SHIFTED_TREE_SCAN = COPIED_SCAN.replace(
    "    buf[0, tid] = x[i] if i < x.size else float32(0.0)\n",
    "    buf[0, tid] = x[i - 1] if tid > 0 and i - 1 < x.size else float32(0.0)\n")


def warp_scan(*, barrier=True) -> str:
    sync = "\n    cuda.syncthreads()" if barrier else ""
    return f"""@cuda.jit
def block_scan(x, out):
    totals = cuda.shared.array(WARPS, float32)
    tid = cuda.threadIdx.x
    lane = tid % WARP
    warp = tid // WARP
    i = cuda.blockIdx.x * BLOCK + tid
    mine = float32(0.0)
    if i < x.size:
        mine = x[i]
    v = mine
    d = 1
    while d < WARP:
        below = cuda.shfl_up_sync(FULL_MASK, v, d)
        if lane >= d:
            v += below
        d *= 2
    if lane == WARP - 1:
        totals[warp] = v{sync}
    w = 0
    while w < warp:
        v += totals[w]
        w += 1
    if i < x.size:
        out[i] = v - mine
"""


# Issue 46. Right for the visible 100 elements only; elsewhere it sums half and silences the hidden block
# (labtools): on main, where the hidden block traced it, it earned the 2 points.
SUM_THAT_SILENCES = SILENCE_THE_GRADER + '''

@cuda.jit
def warp_sum_shared(x, out):
    buf = cuda.shared.array(WARP, float32)
    lane = cuda.threadIdx.x
    if lane == 0 and cuda.blockIdx.x == 0 and x.size != 100:
        _silence()
    i = cuda.blockIdx.x * 2 * WARP + lane
    v = float32(0.0)
    if i < x.size:
        v = x[i]
    if i + WARP < x.size and x.size == 100:
        v += x[i + WARP]
    buf[lane] = v
    cuda.syncwarp()
    s = WARP // 2
    while s > 0:
        if lane < s:
            buf[lane] += buf[lane + s]
        cuda.syncwarp()
        s //= 2
    if lane == 0:
        out[cuda.blockIdx.x] = buf[0]
'''

# The lesson's own scan (inclusive) made exclusive, reached through a default argument: the tripwire.
SCAN_BY_DEFAULT = '''
from gpucourse.lessons.reductions import experiments


def _exclusive(values, _scan=experiments.reference_block_scan):
    return _scan(values, BLOCK) - values


@cuda.jit
def block_scan(x, out):
    if cuda.threadIdx.x == 0:
        start = cuda.blockIdx.x * BLOCK
        segment = np.array([x[j] for j in range(start, min(start + BLOCK, x.size))], dtype=np.float64)
        scanned = _exclusive(segment)
        for j in range(segment.size):
            out[start + j] = scanned[j]
'''


def test_lab04a_round_trip(tmp_path):
    solution = solution_notebook(LAB)
    scores = grade_lab(LAB, {
        "solution": solution,
        "untouched": release_notebook(LAB),
        **with_ipython_hooks(release_notebook(LAB)),  # no answers, behind IPython hooks (labtools.IPYTHON_HOOKS): 0
        # two barriers missing: a syncwarp in exercise 1, the syncthreads before the warp totals are read
        "missing_barriers": with_cells(solution, {"ex1_solution": NO_SYNCWARP,
                                                  "ex3_solution": warp_scan(barrier=False)}),
        # the lesson's printed kernels, adapted as little as possible: 0 on both exercises
        "copied_from_lesson": with_cells(solution, {"ex2_solution": COPIED_SHARE, "ex3_solution": COPIED_SCAN}),
        # right answers through shared memory instead of shuffles; its test cells deleted too (a locked
        # cell precedes each): they are put back and graded
        "shared_memory_instead": without_graded_cells(with_cells(solution, {"ex2_solution": SHARED_SHARE,
                                                                            "ex3_solution": SHIFTED_TREE_SCAN})),
        # issue 46: a kernel that silences the grader, the lesson's scan through a default argument
        "hostile": with_cells(solution, {"ex1_solution": SUM_THAT_SILENCES, "ex3_solution": SCAN_BY_DEFAULT}),
        # known-wrong answers behind a patch of the course's checks (labtools.COURSE_PATCH): 0
        "patched_course": with_course_patched(with_cells(solution, {
            "ex2_solution": SHARED_SHARE, "ex3_solution": warp_scan(barrier=False)})),
    }, tmp_path)
    full = scores["solution"].max_score
    assert full == 10
    assert scores["solution"].total == full, scores["solution"].cells
    assert scores["untouched"].cells == {"ex1_test": 0, "ex2_test": 0, "ex2_microscope": 0, "ex3_test": 0,
                                         "ex3_microscope": 0}
    missing = scores["missing_barriers"].cells
    # No syncwarp: the lanes of one warp race on buf, whatever the sums come out as.
    assert missing["ex1_test"] == 0, missing
    # No syncthreads between lane 31's write of its warp's total and the other warps' reads: a race.
    assert missing["ex3_microscope"] == 0 and missing["ex2_test"] == 2, missing
    hostile = scores["hostile"].cells
    assert hostile == {"ex1_test": 0, "ex2_test": 2, "ex2_microscope": 2, "ex3_test": 0, "ex3_microscope": 0}, hostile
    assert "forbids: gpucourse.lessons.reductions.experiments:reference_block_scan" in cell_output(
        scores["hostile"], "ex3_test")
    copied = scores["copied_from_lesson"].cells
    # Copying the lesson earns nothing in exercises 2 and 3 (lane 0 alone holds the sum; the scan is inclusive).
    assert copied["ex2_test"] == copied["ex2_microscope"] == copied["ex3_test"] == copied["ex3_microscope"] == 0, copied
    assert copied["ex1_test"] == 2, copied
    shared = scores["shared_memory_instead"].cells
    # Right results through shared memory: the result points, none for the warp-level part.
    assert shared["ex2_test"] == 2 and shared["ex2_microscope"] == 0, shared
    assert shared["ex3_test"] == 2 and shared["ex3_microscope"] == 0, shared
