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
# # Lab 02 · Make the warps agree
#
# *About 50 minutes. Goes with lesson 02 "Warp divergence".*
#
# A warp pays for every path any of its lanes takes. In this lab you first count that cost, then
# restructure two divergent kernels so that every warp takes one path: once by **remapping
# threads to work** (which thread handles which element), once by **partitioning the data**.
#
# How to work: fill in every cell that says `YOUR CODE HERE` (delete the `raise
# NotImplementedError()` line). Don't edit the test cells: they are locked and are graded
# again, with more hidden cases, after you submit. Run each test cell after your answer; a
# cell that runs without error has passed its visible checks. In JupyterLab,
# **Kernel → Restart Kernel and Run All Cells** before you submit, then use **Validate**.
#
# Your kernels are graded by the **microscope**: it runs one launch in Numba's CUDA simulator and
# counts, for every line each warp executes, which of its 32 lanes were active. A kernel passes
# when its answer is right, its SIMT efficiency (active lanes ÷ 32, over all executed lines) is at
# least 0.9, and it issues clearly fewer warp instructions than the divergent original — so
# computing both paths in every lane and keeping one does not count as agreeing.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import numpy as np

from gpucourse.measure import runtime
from gpucourse.tooling.grading import check
from gpucourse.microscope import trace

cuda = runtime.cuda
STEPS = 8  # multiply-adds on each path


def path_a(v):
    """NumPy reference of path A (float32)."""
    for _ in range(STEPS):
        v = v * np.float32(0.5) + np.float32(1.0)
    return v


def path_b(v):
    """NumPy reference of path B (float32)."""
    for _ in range(STEPS):
        v = v * np.float32(0.25) - np.float32(1.0)
    return v


def show(kernel, griddim, blockdim, *args, warp=0):
    """Trace one launch with the microscope: print its SIMT efficiency, draw one warp's lanes."""
    report = trace(kernel, griddim, blockdim, *args)
    print(f"{report.kernel_name}: SIMT efficiency {report.simt_efficiency():.0%}, "
          f"up to {report.paths()} path(s) per warp, {int(report.branches().issues.sum())} warp instructions")
    return report.picture_lanes(warp=warp)


runtime.banner()

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 1 · What does a warp pay? (2 points)
#
# Write `warp_cost(takes_a, cost_a, cost_b)`. `takes_a` is a boolean array with one entry per
# thread (its length is a multiple of 32; thread `i` is in warp `i // 32`): `True` where the thread
# takes path A, `False` where it takes path B. Path A costs `cost_a` issue slots, path B `cost_b`.
# Return the total issue slots of all warps: each warp pays `cost_a` if **any** of its lanes takes
# A, plus `cost_b` if any takes B.
#
# Reference: one warp with lanes 0–15 on A and 16–31 on B, `cost_a = cost_b = 10` → 20; the same
# warp with every lane on A → 10.

# %% nbgrader={"grade": false, "grade_id": "ex1_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
def warp_cost(takes_a, cost_a, cost_b):
    ### BEGIN SOLUTION
    per_warp = np.asarray(takes_a, dtype=bool).reshape(-1, 32)
    any_a = per_warp.any(axis=1)
    any_b = (~per_warp).any(axis=1)
    return int(cost_a * any_a.sum() + cost_b * any_b.sum())
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex1_test", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Check that warp_cost charges each warp every path any of its lanes takes."""
half = np.arange(32) < 16
assert warp_cost(half, 10, 10) == 20, "a warp split 16/16 pays both paths"
assert warp_cost(np.ones(32, bool), 10, 10) == 10, "a warp that agrees pays one path"
assert warp_cost(np.concatenate([half, np.zeros(32, bool)]), 10, 3) == 10 + 3 + 3
### BEGIN HIDDEN TESTS
FORBIDDEN = {"gpucourse.lessons.divergence.model:warp_costs": "it is lesson 02's answer to this exercise: count "
                                                              "each warp's paths yourself",
             "gpucourse.lessons.divergence.model:warp_table": "it counts each warp's paths for you"}
lanes_28 = np.arange(32) < 28
one_lane = np.zeros(64, bool)
one_lane[[3, 40]] = True
cases = [(lanes_28, 7, 7), (lanes_28, 7, 0), (np.tile(np.arange(32) % 2 == 0, 4), 5, 2),
         (np.repeat([True, False, True, False], 32), 5, 2), (np.zeros(96, bool), 9, 4), (one_lane, 100, 1)]
got = call_each(warp_cost, [(lanes.copy(), a, b) for lanes, a, b in cases])  # frozen, on the learner's thread
for answer, expected in zip(got, [14, 7, 4 * 7, 5 + 2 + 5 + 2, 12, 2 * 101], strict=True):
    check(answer == expected)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 2 · Remap threads to work (4 points)
#
# `parity_divergent` below sends even elements down path A and odd elements down path B. Every
# warp holds 16 of each, so every warp pays both paths and half its lanes are always masked.
#
# Write the kernel `parity_agree(x, out)`: the same answer (`out[i] = path_a(x[i])` for even `i`,
# `path_b(x[i])` for odd `i`), but with **threads remapped to elements** so that each warp takes
# one path: thread `t` of the first half (`t < n // 2`) handles the even element `2 * t`, thread
# `t` of the second half (`n // 2 <= t < n`) handles the odd element `2 * (t - n // 2) + 1`
# (`n = x.size`, a multiple of 64). The launch has whole blocks, so there may be more threads than
# elements (192 elements in 2 blocks of 128): threads with `t >= n` must do nothing. Keep the
# bounds check.

# %% nbgrader={"grade": false, "grade_id": "ex2_given", "locked": true, "schema_version": 3, "solution": false, "task": false}
@cuda.jit
def parity_divergent(x, out):
    i = cuda.grid(1)
    if i < x.size:
        v = x[i]
        if i % 2 == 0:
            for _ in range(STEPS):
                v = v * np.float32(0.5) + np.float32(1.0)  # path A
        else:
            for _ in range(STEPS):
                v = v * np.float32(0.25) - np.float32(1.0)  # path B
        out[i] = v


def reference_parity(x):
    out = np.empty_like(x)
    out[0::2], out[1::2] = path_a(x[0::2]), path_b(x[1::2])
    return out


x_demo = np.linspace(-1, 1, 256, dtype=np.float32)
show(parity_divergent, 2, 128, x_demo, np.empty_like(x_demo))

# %% nbgrader={"grade": false, "grade_id": "ex2_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
@cuda.jit
def parity_agree(x, out):
    ### BEGIN SOLUTION
    t = cuda.grid(1)
    half = x.size // 2
    if t < x.size:
        if t < half:
            i = 2 * t
            v = x[i]
            for _ in range(STEPS):
                v = v * np.float32(0.5) + np.float32(1.0)
        else:
            i = 2 * (t - half) + 1
            v = x[i]
            for _ in range(STEPS):
                v = v * np.float32(0.25) - np.float32(1.0)
        out[i] = v
    ### END SOLUTION


# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_show", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Your kernel under the microscope (warp 0; try `warp=3`):

# %% nbgrader={"grade": false, "grade_id": "ex2_picture", "locked": true, "schema_version": 3, "solution": false, "task": false}
show(parity_agree, 2, 128, x_demo, np.empty_like(x_demo))

# %% nbgrader={"grade": true, "grade_id": "ex2_test", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
"""Check that parity_agree gives the same answer as parity_divergent and that its warps agree."""


def traced(kernel, x, block=64):
    out = np.full_like(x, np.nan)  # poisoned: an element nobody writes stays NaN
    report = trace(kernel, -(-len(x) // block), block, x, out)  # whole blocks: maybe more threads than n
    return out, report


def warp_instructions(report):
    return int(report.branches().issues.sum())


x = np.random.default_rng(2).random(128, dtype=np.float32)
out, report = traced(parity_agree, x)
assert np.allclose(out, reference_parity(x)), "parity_agree gives a different answer from parity_divergent"
efficiency = report.simt_efficiency()
assert efficiency >= 0.9, f"SIMT efficiency {efficiency:.2f}: warps still disagree"
x = np.random.default_rng(4).random(192, dtype=np.float32)
try:  # 2 blocks of 128 threads for 192 elements: the last 64 threads must do nothing
    out, report = traced(parity_agree, x, block=128)
except IndexError as err:
    raise AssertionError(f"a thread beyond the last element touched an array: {err}") from None
assert np.allclose(out, reference_parity(x)), "parity_agree gives a different answer with 192 elements"
### BEGIN HIDDEN TESTS
for n, block in [(256, 64), (512, 128), (192, 32), (320, 256), (448, 256)]:
    x = np.random.default_rng(n).random(n, dtype=np.float32)
    out = np.full_like(x, np.nan)  # the grader's own: read after the kernel ran on the grader's thread
    report = observe(parity_agree, -(-n // block), block, x.copy(), out)
    divergent = observe(parity_divergent, -(-n // block), block, x.copy(), np.full_like(x, np.nan))
    check(np.allclose(out, reference_parity(x)))
    check(report.simt_efficiency() >= 0.9)
    check(warp_instructions(report) < 0.8 * warp_instructions(divergent))
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 3 · Partition the data (4 points)
#
# Now the path depends on the **data**: `kind[i]` is 1 for elements that need path A and 0 for
# path B, in no particular order (like the non-zeros of sparse data). `by_kind` below diverges in
# almost every warp. No index arithmetic can fix that; rearranging the work can.
#
# 1. Write `partition(kind)`: return an `int64` array `order`, a permutation of `0 … n-1` that
#    lists every element with `kind == 1` first, then every element with `kind == 0` (NumPy, on the
#    host: `np.argsort` with `kind="stable"` or `np.flatnonzero` are useful).
# 2. Write the kernel `by_kind_sorted(order, kind, x, out)`: thread `t` handles element
#    `i = order[t]` — the path `kind[i]` asks for — and writes `out[i]`, so the answer is the same
#    as `by_kind`'s, element by element.
#
# Only the warp at the boundary between the two groups can still disagree. (With few warps that
# one mixed warp weighs a lot: the graded launches have 8 or 16 warps.)

# %% nbgrader={"grade": false, "grade_id": "ex3_given", "locked": true, "schema_version": 3, "solution": false, "task": false}
@cuda.jit
def by_kind(kind, x, out):
    i = cuda.grid(1)
    if i < x.size:
        v = x[i]
        if kind[i] == 1:
            for _ in range(STEPS):
                v = v * np.float32(0.5) + np.float32(1.0)  # path A
        else:
            for _ in range(STEPS):
                v = v * np.float32(0.25) - np.float32(1.0)  # path B
        out[i] = v


def reference_by_kind(kind, x):
    return np.where(kind == 1, path_a(x), path_b(x)).astype(np.float32)


kind_demo = (np.random.default_rng(0).random(256) < 0.4).astype(np.uint8)
show(by_kind, 2, 128, kind_demo, x_demo, np.empty_like(x_demo))

# %% nbgrader={"grade": false, "grade_id": "ex3_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
def partition(kind):
    ### BEGIN SOLUTION
    return np.argsort(1 - np.asarray(kind, dtype=np.int64), kind="stable").astype(np.int64)
    ### END SOLUTION


@cuda.jit
def by_kind_sorted(order, kind, x, out):
    ### BEGIN SOLUTION
    t = cuda.grid(1)
    if t < order.size:
        i = order[t]
        v = x[i]
        if kind[i] == 1:
            for _ in range(STEPS):
                v = v * np.float32(0.5) + np.float32(1.0)
        else:
            for _ in range(STEPS):
                v = v * np.float32(0.25) - np.float32(1.0)
        out[i] = v
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "ex3_picture", "locked": true, "schema_version": 3, "solution": false, "task": false}
show(by_kind_sorted, 2, 128, partition(kind_demo), kind_demo, x_demo, np.empty_like(x_demo))

# %% nbgrader={"grade": true, "grade_id": "ex3_test", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
"""Check that partition + by_kind_sorted give by_kind's answer with warps that agree."""


def traced_by_kind(kind, x, block=64):
    order = np.asarray(partition(kind))
    out = np.full_like(x, np.nan)  # poisoned: an element nobody writes stays NaN
    report = trace(by_kind_sorted, len(x) // block, block, order, kind, x, out)
    return order, out, report


kind = (np.arange(256) % 3 == 0).astype(np.uint8)
x = np.random.default_rng(3).random(256, dtype=np.float32)
order, out, report = traced_by_kind(kind, x)
assert sorted(order.tolist()) == list(range(256)), "partition must return every index exactly once"
assert np.allclose(out, reference_by_kind(kind, x)), "by_kind_sorted gives a different answer from by_kind"
efficiency = report.simt_efficiency()
assert efficiency >= 0.9, f"SIMT efficiency {efficiency:.2f}: warps still disagree"
### BEGIN HIDDEN TESTS
FORBIDDEN = {"gpucourse.lessons.divergence.model:sorted_order": "it is lesson 02's partition: write your own"}
for seed, n, share in [(11, 512, 0.3), (12, 512, 0.05), (13, 256, 0.7)]:
    rng = np.random.default_rng(seed)
    kind = (rng.random(n) < share).astype(np.uint8)
    x = rng.random(n, dtype=np.float32)
    order = np.asarray(call(partition, kind.copy()))  # frozen to plain data on the learner's thread
    check(sorted(order.tolist()) == list(range(n)))
    out = np.full_like(x, np.nan)
    report = observe(by_kind_sorted, n // 64, 64, order.copy(), kind.copy(), x.copy(), out)
    divergent = observe(by_kind, n // 64, 64, kind.copy(), x.copy(), np.empty_like(x))
    check(np.allclose(out, reference_by_kind(kind, x)))
    check(report.simt_efficiency() >= 0.9)
    check(int(report.branches().issues.sum()) < 0.8 * int(divergent.branches().issues.sum()))
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "outro", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Think about it (not graded)
#
# `partition` runs on the host here. On a GPU the sort or the compaction is a kernel of its own
# (`cupy.argsort`, `cupy.flatnonzero`) and costs time before the branchy kernel starts. Lesson 02's
# last chart measures when that pays: for which cost of path A, and which share of elements on
# it, would you sort first? What if path B cost nothing at all — could you launch fewer threads?
