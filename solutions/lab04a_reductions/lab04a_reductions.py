# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: jupyter,nbgrader,-all
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (gpucourse)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false, "task": false}
# # Lab 04a · Warp sums, a butterfly all-reduce and a warp-shuffle block scan
#
# *About 75 minutes. Goes with lesson 04a "Reductions, scans and warp primitives".*
#
# How to work: fill in every cell that says `YOUR CODE HERE` (delete the `raise
# NotImplementedError()` line). Don't edit the test cells: they are locked and are graded
# again, with more hidden cases, after you submit. Run each test cell after your answer; a
# cell that runs without error has passed its visible checks. In JupyterLab,
# **Kernel → Restart Kernel and Run All Cells** before you submit, then use **Validate**.
#
# Without a GPU the kernels run under the **microscope** (`gpucourse.microscope.trace`), which
# gives the simulator warps: shuffles and votes behave as on the hardware, it counts what your
# *source* does (lines each warp runs, lanes active in each, shared-memory banks, barriers; the
# compiler may still merge or reorder machine instructions, as lesson 04a shows for atomics), and
# its random schedule interleaves the threads to find races. Results are correct to float32 rounding
# (a sum's value depends on the order of its additions, so the checks allow a relative 1e-5); timings
# are not measured here. Every size in this lab is small, and every size is *ragged*:
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
    """The specification of exercise 1: the sum, in float64."""
    return float(np.sum(x, dtype=np.float64))


def positive_values(n, seed):
    """n float32 values in [0.5, 1.5): every warp's sum is well away from 0."""
    return (random_values(n, seed) + np.float32(0.5)).astype(np.float32)


def reference_warp_share(x):
    """The specification of exercise 2: each element divided by the sum of its warp's 32 elements
    (elements 32·w … 32·w + 31 that exist), in float64."""
    x = np.asarray(x, dtype=np.float64)
    return np.concatenate([x[s:s + WARP] / x[s:s + WARP].sum() for s in range(0, x.size, WARP)])


def reference_block_scan(x, block=BLOCK):
    """The specification of exercise 3: the exclusive prefix sum of each block-sized segment."""
    x = np.asarray(x, dtype=np.float64)
    return np.concatenate([np.cumsum(x[s:s + block]) - x[s:s + block] for s in range(0, x.size, block)])


runtime.banner()

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 1 · The last warp, through shared memory (2 points)
#
# Before shuffles, the last 32 values of a tree reduction were summed by one warp in shared memory
# without any barrier, trusting that its lanes ran in lockstep. Since Volta they may not.
#
# **Goal.** `warp_sum_shared(x, out)`, launched with blocks of **one warp** (32 threads): block b sums
# the 64 elements `x[64·b]` … `x[64·b + 63]` (those that exist) and writes the sum to `out[b]`,
# through a tree in a 32-word `cuda.shared.array(WARP, float32)` — the last warp of the lesson's tree
# reduction, written so that it stays right however the warp's lanes are scheduled.
#
# **Evidence to reach** (the test cell; the microscope's random schedule interleaves the lanes):
#
# * the right sums for ragged sizes (1, 33, 64, 100 and 129 elements);
# * `report.race_count()` 0 under the random schedule: no lane reads a word that another lane may
#   still be writing;
# * `report.max_bank_ways()` 1.
#
# *Hints: in the collapsed cell below (click its ⋯ to open it). Try without them first.*

# %% [markdown] jupyter={"source_hidden": true} nbgrader={"grade": false, "grade_id": "ex1_hints", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Hints for exercise 1**
#
# * Lane `l` first adds its block's two elements `x[64·b + l]` and `x[64·b + l + 32]` (0 for an
#   element past the end of `x`) and puts the sum in `buf[l]`.
# * Then sequential addressing, as in lesson 04a's ladder: for s = 16, 8, 4, 2, 1 the lanes `l < s`
#   do `buf[l] += buf[l + s]`; lane 0 writes `buf[0]` to `out[b]`.
# * A warp that exchanges values through shared memory must call `cuda.syncwarp()` between a write
#   and the reads of other lanes. Every lane must call it: keep it outside the `if`.

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
    out = np.full(blocks, np.nan, dtype=np.float32)  # the grader's own, read after the kernel ran on its thread
    report = observe(warp_sum_shared, blocks, WARP, x.copy(), out, schedule="random", seed=seed)
    check(np.allclose(out, [reference_sum(x[64 * b:64 * b + 64]) for b in range(blocks)], rtol=1e-5))
    check(report.race_count() == 0)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 2 · Every lane needs the sum: a butterfly all-reduce (4 points)
#
# The lesson's warp sum leaves the total in lane 0 only (`shfl_down_sync`: lane l reads lane
# l + offset, and the upper lanes keep their own values). Normalising needs it in **every** lane.
#
# **Goal.** `warp_share(x, out)`, launched with blocks of `BLOCK` = 128 threads: thread `i`
# (`cuda.grid(1)`) writes `out[i] = x[i] / s`, where `s` is the sum of the 32 elements of its warp,
# `x[32·w]` … `x[32·w + 31]` (an element past the end of `x` counts as 0, and a thread past the end
# writes nothing; see `reference_warp_share`). Every lane gets `s` from the warp's registers with
# `cuda.shfl_xor_sync(FULL_MASK, v, m)`.
#
# **Evidence to reach** (`show_share()` below, then the two test cells):
#
# * the right shares for ragged sizes;
# * the lines that call `shfl_xor_sync` run with all 32 lanes active in every issue, at least five
#   issues per warp;
# * no shared-memory access at all.
#
# *Hints: in the collapsed cell below (click its ⋯ to open it). Try without them first.*

# %% [markdown] jupyter={"source_hidden": true} nbgrader={"grade": false, "grade_id": "ex2_hints", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Hints for exercise 2**
#
# * With `cuda.shfl_xor_sync(FULL_MASK, v, m)` lane l receives the `v` of lane l XOR m. For
#   m = 16, 8, 4, 2, 1, add what you receive to what you hold: after five steps **every** lane holds
#   the whole sum (a *butterfly*).
# * Every lane calls every shuffle (no `if` around it, no early `return`): all 32 are in the mask.
# * No shared memory and no barrier: the warp's registers are enough.

# %% nbgrader={"grade": false, "grade_id": "ex2_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
@cuda.jit
def warp_share(x, out):
    ### BEGIN SOLUTION
    i = cuda.grid(1)
    v = float32(0.0)
    if i < x.size:
        v = x[i]
    total = v
    m = WARP // 2
    while m > 0:
        total += cuda.shfl_xor_sync(FULL_MASK, total, m)
        m //= 2
    if i < x.size:
        out[i] = v / total
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "ex2_given", "locked": true, "schema_version": 3, "solution": false, "task": false}
def launch_share(x):
    """warp_share over x (NaN where nothing was written)."""
    out = np.full(x.size, np.nan, dtype=np.float32)
    launch(warp_share, (x.size + BLOCK - 1) // BLOCK, BLOCK, x, out)
    return out


def trace_share(x, seed=0):
    """(out, the microscope's report) of warp_share over x, threads interleaved at random."""
    out = np.full(x.size, np.nan, dtype=np.float32)
    return out, trace(warp_share, (x.size + BLOCK - 1) // BLOCK, BLOCK, x, out, schedule="random", seed=seed)


def shuffle_lines(report, name):
    """The microscope's rows for the executed lines that call ``cuda.<name>``."""
    lines = report.branches()
    return lines[lines.source.str.contains(name, regex=False)]


# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_show_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Look at it under the microscope.** `show_share()` runs your kernel on 80 elements (two full
# warps and a ragged one) and shows the lines that shuffle, with their active lanes (32 is what you
# want), and any shared-memory access (none is what you want).

# %% nbgrader={"grade": false, "grade_id": "ex2_show", "locked": true, "schema_version": 3, "solution": false, "task": false}
from IPython.display import display


def show_share(n=80, seed=0):
    x = positive_values(n, 7)
    out, report = trace_share(x, seed)
    display(report.branches()[["line", "source", "issues", "active_lanes_mean"]])
    print(f"shared-memory requests: {len(report.requests('shared'))}; right shares: "
          f"{np.allclose(out, reference_warp_share(x), rtol=1e-5)}")
    return report


report = show_share()

# %% nbgrader={"grade": true, "grade_id": "ex2_test", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Check that warp_share writes every element's share of its warp's sum, for ragged sizes."""
for n, seed in [(64, 1), (100, 2)]:
    x = positive_values(n, seed)
    np.testing.assert_allclose(launch_share(x), reference_warp_share(x), rtol=1e-5,
                               err_msg=f"n = {n}: does every lane hold its warp's whole sum?")
### BEGIN HIDDEN TESTS
for n, seed in [(1, 3), (31, 4), (33, 5), (129, 6), (300, 7)]:
    x = positive_values(n, seed)
    got = call(launch_share, x.copy())  # on the learner's own thread, frozen to a plain array
    check(lambda: np.allclose(got, reference_warp_share(x), rtol=1e-5))
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "ex2_microscope", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Check with the microscope: shfl_xor_sync does the sum, all 32 lanes in every shuffle, no shared memory."""
x = positive_values(96, 8)
out, report = trace_share(x, seed=1)
assert np.allclose(out, reference_warp_share(x), rtol=1e-5), "wrong shares: run the test cell above first"
xor = shuffle_lines(report, "shfl_xor_sync")
assert len(xor), "the warp should sum with cuda.shfl_xor_sync (a butterfly: every lane ends with the sum)"
assert xor.active_lanes_mean.min() == WARP, "every lane must call every shuffle: keep it outside any if"
assert len(report.requests("shared")) == 0, "no shared memory is needed: the shuffles exchange registers"
### BEGIN HIDDEN TESTS
x = positive_values(257, 9)
out = np.full(x.size, np.nan, dtype=np.float32)
report = observe(warp_share, (x.size + BLOCK - 1) // BLOCK, BLOCK, x.copy(), out, schedule="random", seed=5)
check(np.allclose(out, reference_warp_share(x), rtol=1e-5))
check(lambda: shuffle_lines(report, "shfl_xor_sync").issues.sum() >= 5 * 9)  # five per warp, 9 warps
check(lambda: shuffle_lines(report, "shfl_xor_sync").active_lanes_mean.min() == WARP)
check(lambda: len(report.requests("shared")) == 0)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 3 · A block scan from warp scans (4 points)
#
# **Goal.** `block_scan(x, out)`, launched with blocks of `BLOCK` = 128 threads: thread t of block b
# writes to `out[128·b + t]` the **exclusive** prefix sum of its block's segment,
# `x[128·b] + … + x[128·b + t − 1]`, and 0 for t = 0 (segments are independent; see
# `reference_block_scan`). The lesson's block scans go through shared memory at every step; this one
# scans each warp in registers with `cuda.shfl_up_sync` and uses shared memory only to combine the
# four warps.
#
# **Evidence to reach** (`show_scan()` below, then the two test cells):
#
# * the right scan for ragged sizes (1, 31, 127, 129, 200 and 300 elements), also when the threads
#   interleave at random;
# * lines that call `shfl_up_sync`, with all 32 lanes active;
# * at most **two** barriers per warp (`barriers per warp` in `show_scan()`; a shared-memory tree
#   needs one per step: 8 for 128 threads);
# * no race and no bank conflict.
#
# *Hints: in the collapsed cell below (click its ⋯ to open it). Try without them first.*

# %% [markdown] jupyter={"source_hidden": true} nbgrader={"grade": false, "grade_id": "ex3_hints", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Hints for exercise 3**
#
# * **Warp scan.** Each thread loads its element (0 past the end). With
#   `cuda.shfl_up_sync(FULL_MASK, v, d)` for d = 1, 2, 4, 8, 16, lane l adds the value d lanes below it
#   *if* `l >= d` (every lane calls the shuffle; only the add is conditional): an inclusive scan of the
#   warp's 32 values in 5 steps (Hillis–Steele, in registers).
# * **Block pass over the warp totals.** Lane 31 of each warp writes its warp's total to `totals[w]` of
#   a `cuda.shared.array(WARPS, float32)`; one barrier; then each thread adds the totals of the warps
#   before its own.
# * Exclusive = inclusive − the thread's own element. Threads past the end take part but write nothing.

# %% nbgrader={"grade": false, "grade_id": "ex3_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
@cuda.jit
def block_scan(x, out):
    ### BEGIN SOLUTION
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
        totals[warp] = v
    cuda.syncthreads()
    w = 0
    while w < warp:
        v += totals[w]
        w += 1
    if i < x.size:
        out[i] = v - mine
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "ex3_given", "locked": true, "schema_version": 3, "solution": false, "task": false}
def launch_scan(x):
    out = np.full(x.size, np.nan, dtype=np.float32)
    launch(block_scan, (x.size + BLOCK - 1) // BLOCK, BLOCK, x, out)
    return out


def barriers_per_warp(report):
    lines = report.branches()
    return float(lines[lines.source.str.contains("syncthreads", regex=False)].issues.sum()) / len(report.warps())


# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_show_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Look at it under the microscope.** `show_scan()` runs your kernel on one block with the random
# interleaving of threads and shows its lines (look for the shuffles and the barriers), the
# shared-memory bank ways and the races it saw.

# %% nbgrader={"grade": false, "grade_id": "ex3_show", "locked": true, "schema_version": 3, "solution": false, "task": false}
def show_scan(n=100, seed=0):
    x = random_values(n, 3)
    out = np.full(n, np.nan, dtype=np.float32)
    report = trace(block_scan, 1, BLOCK, x, out, schedule="random", seed=seed)
    display(report.branches()[["line", "source", "issues", "active_lanes_mean"]])
    print(f"barriers per warp: {barriers_per_warp(report):.0f}; max bank ways: {report.max_bank_ways()}; "
          f"racing access pairs: {report.race_count()}; right scan: "
          f"{np.allclose(out, reference_block_scan(x), rtol=1e-5, atol=1e-5)}")
    return report


report = show_scan()

# %% nbgrader={"grade": true, "grade_id": "ex3_test", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Check that block_scan writes the exclusive scan of every segment, for ragged sizes."""
x = random_values(200, 1)
np.testing.assert_allclose(launch_scan(x), reference_block_scan(x), rtol=1e-5, atol=1e-5,
                           err_msg="wrong scan for n = 200 (one full block and a partial one)")
### BEGIN HIDDEN TESTS
FORBIDDEN = {"gpucourse.lessons.reductions.experiments:reference_block_scan": "it is lesson 04a's scan, which "
                                                                              "the grader's own follows",
             "gpucourse.lessons.reductions.experiments:block_scan": "it runs lesson 04a's own scan kernels"}
for n, seed in [(1, 2), (31, 8), (127, 3), (129, 4), (300, 5)]:
    x = random_values(n, seed)
    got = call(launch_scan, x.copy())
    check(lambda: np.allclose(got, reference_block_scan(x), rtol=1e-5, atol=1e-5))
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "ex3_microscope", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Check with the microscope: no race, warp scans with shfl_up_sync, at most two barriers per warp, no bank conflict."""
x = random_values(128, 6)
out = np.zeros(128, dtype=np.float32)
report = trace(block_scan, 1, BLOCK, x, out, schedule="random", seed=0)
assert report.race_count() == 0, "the microscope found racing accesses: look at report.races() for the lines"
assert np.allclose(out, reference_block_scan(x), rtol=1e-5, atol=1e-5), "wrong scan when threads interleave at random"
assert len(shuffle_lines(report, "shfl_up_sync")), "each warp should scan its values with cuda.shfl_up_sync"
assert barriers_per_warp(report) <= 2, f"{barriers_per_warp(report):.0f} barriers per warp: a shared-memory tree?"
assert report.max_bank_ways() <= 1, f"a {report.max_bank_ways()}-way bank conflict: see report.banks()"
### BEGIN HIDDEN TESTS
x = random_values(300, 7)
out = np.zeros(300, dtype=np.float32)
report = observe(block_scan, 3, BLOCK, x.copy(), out, schedule="random", seed=4)
check(report.race_count() == 0)
check(np.allclose(out, reference_block_scan(x), rtol=1e-5, atol=1e-5))
check(lambda: shuffle_lines(report, "shfl_up_sync").active_lanes_mean.min() == WARP)
check(lambda: barriers_per_warp(report) <= 2)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "outro", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Done
#
# Restart and run all, then **Validate** and submit. The lesson's `warp_shuffle_kernel` ends its
# second stage with the sum in lane 0 only; with your butterfly every lane of warp 0 would hold it.
