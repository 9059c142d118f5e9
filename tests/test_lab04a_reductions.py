"""Lab 04a through real nbgrader: the solution scores full marks, the untouched lab 0, and known-wrong
versions lose the points of the part they get wrong: a warp step through shared memory without
``syncwarp``, a block sum without its ``syncthreads``, a shared-memory tree instead of shuffles (right
answers, idle lanes), a scan with an off-by-one and a scan without its barrier. One of them also deletes
every locked test cell (the grader puts them back and grades them); one patches the course and earns 0."""

import pytest
from labtools import (
    grade_lab,
    release_notebook,
    solution_notebook,
    with_cells,
    with_course_patched,
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


def block_sum(*, barrier=True) -> str:
    sync = "\n    cuda.syncthreads()" if barrier else ""
    return f'''@cuda.jit
def block_sum(x, out):
    warp_sums = cuda.shared.array(WARPS, float32)
    tid = cuda.threadIdx.x
    lane = tid % WARP
    warp = tid // WARP
    i = cuda.blockIdx.x * 2 * BLOCK + tid
    v = float32(0.0)
    if i < x.size:
        v = x[i]
    if i + BLOCK < x.size:
        v += x[i + BLOCK]
    offset = WARP // 2
    while offset > 0:
        v += cuda.shfl_down_sync(FULL_MASK, v, offset)
        offset //= 2
    if lane == 0:
        warp_sums[warp] = v{sync}
    if warp == 0:
        v = float32(0.0)
        if lane < WARPS:
            v = warp_sums[lane]
        offset = WARP // 2
        while offset > 0:
            v += cuda.shfl_down_sync(FULL_MASK, v, offset)
            offset //= 2
        if lane == 0:
            out[cuda.blockIdx.x] = v
'''


# Lesson 04a's sequential tree with the first add during load: right sums, no shuffles; its later
# steps run with idle lanes.
SHARED_TREE = '''@cuda.jit
def block_sum(x, out):
    sdata = cuda.shared.array(BLOCK, float32)
    tid = cuda.threadIdx.x
    i = cuda.blockIdx.x * 2 * BLOCK + tid
    v = float32(0.0)
    if i < x.size:
        v = x[i]
    if i + BLOCK < x.size:
        v += x[i + BLOCK]
    sdata[tid] = v
    cuda.syncthreads()
    s = BLOCK // 2
    while s > 0:
        if tid < s:
            sdata[tid] += sdata[tid + s]
        cuda.syncthreads()
        s //= 2
    if tid == 0:
        out[cuda.blockIdx.x] = sdata[0]
'''


def scan(*, shift=True, barrier=True) -> str:
    sync = "\n        cuda.syncthreads()" if barrier else ""
    load = "if tid > 0 and i - 1 < x.size:\n        v = x[i - 1]" if shift else "if i < x.size:\n        v = x[i]"
    return f'''@cuda.jit
def block_scan(x, out):
    buf = cuda.shared.array((2, BLOCK), float32)
    tid = cuda.threadIdx.x
    i = cuda.blockIdx.x * BLOCK + tid
    v = float32(0.0)
    {load}
    buf[0, tid] = v
    cuda.syncthreads()
    src = 0
    offset = 1
    while offset < BLOCK:
        if tid >= offset:
            buf[1 - src, tid] = buf[src, tid] + buf[src, tid - offset]
        else:
            buf[1 - src, tid] = buf[src, tid]{sync}
        src = 1 - src
        offset *= 2
    if i < x.size:
        out[i] = buf[src, tid]
'''


def test_lab04a_round_trip(tmp_path):
    solution = solution_notebook(LAB)
    scores = grade_lab(LAB, {
        "solution": solution,
        "untouched": release_notebook(LAB),
        # three independent defects in one notebook: each costs its own cells
        "missing_barriers": with_cells(solution, {"ex1_solution": NO_SYNCWARP,
                                                  "ex2_solution": block_sum(barrier=False),
                                                  "ex3_solution": scan(shift=False)}),
        # its test cells deleted too (a locked cell precedes each): they are put back and graded
        "tree_and_racy_scan": without_graded_cells(with_cells(solution, {"ex2_solution": SHARED_TREE,
                                                                         "ex3_solution": scan(barrier=False)})),
        # known-wrong answers behind a patch of the course's checks (labtools.COURSE_PATCH): 0
        "patched_course": with_course_patched(with_cells(solution, {
            "ex2_solution": SHARED_TREE, "ex3_solution": scan(barrier=False)})),
    }, tmp_path)
    full = scores["solution"].max_score
    assert full == 10
    assert scores["solution"].total == full, scores["solution"].cells
    assert scores["untouched"].cells == {"ex1_test": 0, "ex2_test": 0, "ex2_microscope": 0, "ex3_test": 0,
                                         "ex3_barriers": 0}
    missing = scores["missing_barriers"].cells
    # No syncwarp: the lanes of one warp race on buf, whatever the sums come out as.
    assert missing["ex1_test"] == 0, missing
    # No syncthreads between the warps' sums and warp 0's read: a race the microscope reports.
    assert missing["ex2_microscope"] == 0, missing
    # The lesson's inclusive scan copied unshifted: every element is off by one (its own value added).
    assert missing["ex3_test"] == 0 and missing["ex3_barriers"] == 0, missing
    tree = scores["tree_and_racy_scan"].cells
    # Right sums through a shared-memory tree: full marks for the result, none for the warp-level part.
    assert tree["ex1_test"] == 2 and tree["ex2_test"] == 2 and tree["ex2_microscope"] == 0, tree
    # A scan without its barrier races, even where the sequential launch happens to give the right answer.
    assert tree["ex3_barriers"] == 0, tree
