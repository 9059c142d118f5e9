# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: nbgrader,-all
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (gpucourse)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false, "task": false}
# # Lab 04a · A warp-shuffle reduction and a block scan
#
# *About 30 minutes. Goes with lesson 04a "Reductions, scans and warp primitives".*
#
# How to work: fill in every cell that says `YOUR CODE HERE` (delete the `raise
# NotImplementedError()` line). Don't edit the test cells: they are locked and are graded
# again, with more hidden cases, after you submit. Run each test cell after your answer; a
# cell that runs without error has passed its visible checks. In JupyterLab,
# **Kernel → Restart Kernel and Run All Cells** before you submit, then use **Validate**.
#
# Without a GPU the kernels run under the **microscope** (`gpucourse.microscope.trace`), which
# gives the simulator warps: shuffles and votes behave as on the hardware, it counts what a GPU
# would do, and its random schedule interleaves the threads to find races. Results are exact;
# timings are not measured here. Every size in this lab is small, and every size is *ragged*:
# your kernels must work for any number of elements.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import numpy as np

from gpucourse.measure import runtime  # first: it decides GPU or simulator before numba is imported
from gpucourse.tooling.grading import check
from gpucourse.microscope import trace
from numba import float32

cuda = runtime.cuda
WARP = 32
FULL_MASK = 0xFFFFFFFF
BLOCK = 128  # threads per block in exercises 2 and 3: four warps
WARPS = BLOCK // WARP


def launch(kernel, blocks, threads, *args):
    """kernel[blocks, threads](*args) on a GPU; in simulator mode under the microscope (it has warps)."""
    if runtime.is_gpu():
        kernel[blocks, threads](*args)
    else:
        trace(kernel, blocks, threads, *args)


def random_values(n, seed):
    return np.random.default_rng(seed).random(n, dtype=np.float32)


def reference_sum(x):
    """The specification of exercises 1 and 2: the sum, in float64."""
    return float(np.sum(x, dtype=np.float64))


def reference_block_scan(x, block=BLOCK):
    """The specification of exercise 3: the exclusive prefix sum of each block-sized segment."""
    x = np.asarray(x, dtype=np.float64)
    return np.concatenate([np.cumsum(x[s:s + block]) - x[s:s + block] for s in range(0, x.size, block)])


runtime.banner()

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 1 · The last warp, through shared memory (2 points)
#
# Before shuffles, the last 32 values of a tree reduction were summed by one warp in shared memory
# without any barrier, trusting that its lanes ran in lockstep. Since Volta they may not: a warp
# that exchanges values through shared memory must call `cuda.syncwarp()` between a write and the
# reads of other lanes.
#
# Write `warp_sum_shared(x, out)`, launched with blocks of **one warp** (32 threads): block b sums
# the 64 elements `x[64·b]` … `x[64·b + 63]` (those that exist) and writes the sum to `out[b]`.
#
# * lane `l` loads `x[64·b + l] + x[64·b + l + 32]` (0 for an element past the end of `x`) into
#   `buf[l]` of a `cuda.shared.array(WARP, float32)`;
# * then sequential addressing: for s = 16, 8, 4, 2, 1 the lanes `l < s` do `buf[l] += buf[l + s]`;
# * lane 0 writes `buf[0]` to `out[b]`;
# * put `cuda.syncwarp()` wherever a lane reads what another lane wrote (every lane must call it:
#   keep it outside the `if`).

# %% nbgrader={"grade": false, "grade_id": "ex1_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
@cuda.jit
def warp_sum_shared(x, out):
    ### BEGIN SOLUTION
    buf = cuda.shared.array(WARP, float32)
    lane = cuda.threadIdx.x
    i = cuda.blockIdx.x * 2 * WARP + lane
    v = float32(0.0)
    if i < x.size:
        v = x[i]
    if i + WARP < x.size:
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
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex1_test", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Check that warp_sum_shared sums 64 elements per warp for ragged sizes, with no race among its lanes."""
x = random_values(100, 1)
out = np.full(2, np.nan, dtype=np.float32)
report = trace(warp_sum_shared, 2, WARP, x, out, schedule="random", seed=0)
assert np.allclose(out, [reference_sum(x[:64]), reference_sum(x[64:])], rtol=1e-5), f"got {out}"
assert report.race_count() == 0, "lanes race on buf: look at report.races() for the lines (a missing syncwarp?)"
assert report.max_bank_ways() == 1, f"a {report.max_bank_ways()}-way bank conflict: see report.banks()"
### BEGIN HIDDEN TESTS
for n, seed in [(1, 2), (33, 3), (64, 4), (129, 5)]:
    x = random_values(n, seed)
    blocks = (n + 63) // 64
    out = np.full(blocks, np.nan, dtype=np.float32)
    report = trace(warp_sum_shared, blocks, WARP, x, out, schedule="random", seed=seed)
    check(np.allclose(out, [reference_sum(x[64 * b:64 * b + 64]) for b in range(blocks)], rtol=1e-5))
    check(report.race_count() == 0)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 2 · A block sum with warp shuffles (4 points)
#
# Write `block_sum(x, out)`, launched with blocks of `BLOCK` = 128 threads (4 warps): block b sums
# the 256 elements from `x[256·b]` (those that exist) and writes the sum to `out[b]`.
#
# * thread `t` adds **two** elements while loading: `x[256·b + t] + x[256·b + t + 128]` (0 past the
#   end);
# * each warp sums its 32 values with `cuda.shfl_down_sync(FULL_MASK, v, offset)` for offsets 16,
#   8, 4, 2, 1 (every lane calls every shuffle: no `if` around it);
# * lane 0 of each warp writes its warp's sum to `warp_sums[w]` of a
#   `cuda.shared.array(WARPS, float32)`; after a barrier, warp 0 loads `warp_sums[lane]` (0 for
#   lanes ≥ WARPS), shuffles again, and its lane 0 writes `out[b]`.
#
# The microscope then checks: no race (with its random schedule), no bank conflict, and that **no
# add runs with idle lanes**: every warp issue of a line with an add has all 32 lanes active on
# a full-size input — a shared-memory tree, whose first step already leaves half-warps idle, does
# not pass. `launch_sum` (given) launches pass after pass until one value is left.

# %% nbgrader={"grade": false, "grade_id": "ex2_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
@cuda.jit
def block_sum(x, out):
    ### BEGIN SOLUTION
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
        warp_sums[warp] = v
    cuda.syncthreads()
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
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "ex2_given", "locked": true, "schema_version": 3, "solution": false, "task": false}
def launch_sum(x):
    """The sum of x: block_sum pass after pass until one value is left."""
    current = x
    while True:
        blocks = (current.size + 2 * BLOCK - 1) // (2 * BLOCK)
        out = np.zeros(blocks, dtype=np.float32)
        launch(block_sum, blocks, BLOCK, current, out)
        if blocks == 1:
            return float(out[0])
        current = out


def add_lines(report):
    """The microscope's rows for the kernel's executed lines that add (their source has a '+')."""
    lines = report.branches()
    return lines[lines.source.str.contains("+", regex=False) & ~lines.source.str.contains("blockIdx")]


# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_show_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Look at it under the microscope.** `show_sum()` runs your kernel on 512 elements with the
# random interleaving of threads and shows the active lanes of every line that adds (32 is what
# you want), the shared-memory bank ways and the races it saw.

# %% nbgrader={"grade": false, "grade_id": "ex2_show", "locked": true, "schema_version": 3, "solution": false, "task": false}
from IPython.display import display


def show_sum(n=512, seed=0):
    x = random_values(n, 7)
    blocks = (n + 2 * BLOCK - 1) // (2 * BLOCK)
    out = np.zeros(blocks, dtype=np.float32)
    report = trace(block_sum, blocks, BLOCK, x, out, schedule="random", seed=seed)
    display(add_lines(report)[["line", "source", "issues", "active_lanes_mean"]])
    display(report.banks()[["line", "source", "op", "requests", "max_ways"]])
    display(report.races()[["line_a", "source_a", "line_b", "source_b", "array", "kind", "count"]])
    print(f"correct: {np.isclose(out.sum(dtype=np.float64), reference_sum(x), rtol=1e-5)}; "
          f"racing access pairs: {report.race_count()}")
    return report


report = show_sum()

# %% nbgrader={"grade": true, "grade_id": "ex2_test", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Check that block_sum (through launch_sum) sums ragged sizes."""
for n, seed in [(300, 1), (1000, 2)]:
    x = random_values(n, seed)
    total = launch_sum(x)
    assert np.isclose(total, reference_sum(x), rtol=1e-5), f"n = {n}: got {total}, expected {reference_sum(x)}"
### BEGIN HIDDEN TESTS
for n, seed in [(1, 3), (255, 4), (257, 5), (513, 6), (2049, 7)]:
    x = random_values(n, seed)
    check(lambda: np.isclose(launch_sum(x), reference_sum(x), rtol=1e-5))
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "ex2_microscope", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Check with the microscope: no race, no bank conflict, shuffles used, and no add with idle lanes."""
x = random_values(512, 8)
out = np.zeros(2, dtype=np.float32)
report = trace(block_sum, 2, BLOCK, x, out, schedule="random", seed=1)
assert report.race_count() == 0, "the microscope found racing accesses: look at report.races() (a missing barrier?)"
assert np.allclose(out, [reference_sum(x[:256]), reference_sum(x[256:])], rtol=1e-5), "wrong partial sums"
assert report.max_bank_ways() <= 1, f"a {report.max_bank_ways()}-way bank conflict: see report.banks()"
lines = report.branches()
assert lines.source.str.contains("shfl_down_sync").any(), "the warps should sum with cuda.shfl_down_sync"
adds = add_lines(report)
idle = adds[adds.active_lanes_mean < WARP]
assert idle.empty, f"adds with idle lanes: {idle[['line', 'source', 'active_lanes_mean']].to_dict('records')}"
### BEGIN HIDDEN TESTS
x = random_values(1024, 9)
out = np.zeros(4, dtype=np.float32)
report = trace(block_sum, 4, BLOCK, x, out, schedule="random", seed=5)
check(report.race_count() == 0)
check(np.allclose(out, [reference_sum(x[256 * b:256 * b + 256]) for b in range(4)], rtol=1e-5))
check(lambda: add_lines(report).active_lanes_mean.min() == WARP)
check(lambda: len(report.banks()) > 0 and report.max_bank_ways() == 1)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 3 · A block scan (4 points)
#
# Write `block_scan(x, out)`, launched with blocks of `BLOCK` threads: thread t of block b writes
# to `out[128·b + t]` the **exclusive** prefix sum of its block's segment,
# `x[128·b] + … + x[128·b + t − 1]`, and 0 for t = 0 (segments are independent; see
# `reference_block_scan`). The lesson's scan is inclusive: shift by one element.
#
# Use Hillis–Steele with a double buffer `buf = cuda.shared.array((2, BLOCK), float32)`: thread t
# loads the element before its own (0 for t = 0 and past the end) into `buf[0, t]`; then for offset d = 1, 2, 4, …, 64 every
# thread writes into the other buffer its own value plus, if it has one, the value d places
# back; threads past the end of `x` take part but write nothing to `out`. Barriers: wherever a
# thread reads what another wrote.

# %% nbgrader={"grade": false, "grade_id": "ex3_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
@cuda.jit
def block_scan(x, out):
    ### BEGIN SOLUTION
    buf = cuda.shared.array((2, BLOCK), float32)
    tid = cuda.threadIdx.x
    i = cuda.blockIdx.x * BLOCK + tid
    v = float32(0.0)
    if tid > 0 and i - 1 < x.size:
        v = x[i - 1]
    buf[0, tid] = v
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
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "ex3_given", "locked": true, "schema_version": 3, "solution": false, "task": false}
def launch_scan(x):
    out = np.full(x.size, np.nan, dtype=np.float32)
    launch(block_scan, (x.size + BLOCK - 1) // BLOCK, BLOCK, x, out)
    return out


# %% nbgrader={"grade": true, "grade_id": "ex3_test", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Check that block_scan writes the exclusive scan of every segment, for ragged sizes."""
x = random_values(200, 1)
np.testing.assert_allclose(launch_scan(x), reference_block_scan(x), rtol=1e-5, atol=1e-5,
                           err_msg="wrong scan for n = 200 (one full block and a partial one)")
### BEGIN HIDDEN TESTS
for n, seed in [(1, 2), (127, 3), (129, 4), (300, 5)]:
    x = random_values(n, seed)
    check(lambda: np.allclose(launch_scan(x), reference_block_scan(x), rtol=1e-5, atol=1e-5))
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "ex3_barriers", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Check, with the microscope's random schedule, that no thread reads a value before it is written."""
x = random_values(128, 6)
out = np.zeros(128, dtype=np.float32)
report = trace(block_scan, 1, BLOCK, x, out, schedule="random", seed=0)
assert report.race_count() == 0, "the microscope found racing accesses: look at report.races() for the lines"
assert np.allclose(out, reference_block_scan(x), rtol=1e-5, atol=1e-5), "wrong scan when threads interleave at random"
assert report.max_bank_ways() <= 1, f"a {report.max_bank_ways()}-way bank conflict: see report.banks()"
### BEGIN HIDDEN TESTS
x = random_values(256, 7)
out = np.zeros(256, dtype=np.float32)
report = trace(block_scan, 2, BLOCK, x, out, schedule="random", seed=4)
check(report.race_count() == 0)
check(np.allclose(out, reference_block_scan(x), rtol=1e-5, atol=1e-5))
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "outro", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Done
#
# Restart and run all, then **Validate** and submit. On a GPU, compare your `launch_sum` with
# `cupy.sum` on 2²⁴ elements (lesson 04a's ladder chart does it for the course's versions).
