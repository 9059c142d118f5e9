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
# # Lab 06 · Fix the races
#
# *About 45 minutes. Goes with lesson 06 "Races and the memory consistency model".*
#
# How to work: fill in every cell that says `YOUR CODE HERE` (delete the `raise
# NotImplementedError()` line). Don't edit the test cells: they are locked and are graded
# again, with more hidden cases, after you submit. Run each test cell after your answer; a
# cell that runs without error has passed its visible checks. In JupyterLab,
# **Kernel → Restart Kernel and Run All Cells** before you submit, then use **Validate**.
#
# **How your kernels are tested.** The plain simulator runs one thread at a time, so a racy
# kernel looks correct there. The tests run your kernels under the course's **race scheduler**
# instead: one memory operation at a time, interleaved `round-robin` (every thread loads before
# any stores) or at `random` (seeded). The hand-off exercise also runs under the **weak-memory
# model** from the lesson, where a block may read stale values until a fence says otherwise. A
# kernel passes when it is right under every schedule tried, not just one.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import numpy as np

from gpucourse import runtime
from gpucourse.grading import check
from gpucourse.races import check_histogram, run_handoff, show_handoff, show_histogram

cuda = runtime.cuda
MAX_BINS = 256  # the largest histogram these kernels must handle
runtime.banner()

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 1 · Atomics (3 points)
#
# This histogram kernel counts values in [0, 1) into `counts.size` equal bins, with a grid-stride
# loop. It is correct in the plain simulator and wrong on a GPU:
#
# ```python
# @cuda.jit
# def histogram_racy(values, counts):
#     start, stride, nbins = cuda.grid(1), cuda.gridsize(1), counts.size
#     for i in range(start, values.size, stride):
#         b = min(int(values[i] * nbins), nbins - 1)
#         counts[b] += 1
# ```
#
# Write `histogram_atomic(values, counts)`: the same kernel, made correct with an atomic. Same
# binning rule (NumPy reference: `np.bincount(np.minimum((values * nbins).astype(int), nbins - 1))`).

# %% nbgrader={"grade": false, "grade_id": "ex1_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
@cuda.jit
def histogram_atomic(values, counts):
    ### BEGIN SOLUTION
    start, stride, nbins = cuda.grid(1), cuda.gridsize(1), counts.size
    for i in range(start, values.size, stride):
        b = min(int(values[i] * nbins), nbins - 1)
        cuda.atomic.add(counts, b, 1)
    ### END SOLUTION


# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1_show", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Your kernel under a random interleaving, beside NumPy's counts (a racy kernel loses most of them):

# %% nbgrader={"grade": false, "grade_id": "ex1_picture", "locked": true, "schema_version": 3, "solution": false, "task": false}
show_histogram(histogram_atomic, bins=16, items=256, seed=0)

# %% nbgrader={"grade": true, "grade_id": "ex1_test", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
"""Check that histogram_atomic counts every value under adversarial interleavings."""
counts, expected, _ = check_histogram(histogram_atomic, bins=16, items=512, schedule="round-robin")
assert np.array_equal(counts, expected), f"under round-robin your kernel counted {counts.sum()} of {expected.sum()}"
### BEGIN HIDDEN TESTS
for bins, items, schedule, seed in [(1, 300, "random", 1), (7, 513, "random", 2), (256, 700, "round-robin", 0),
                                    (5, 0, "random", 3)]:
    counts, expected, _ = check_histogram(histogram_atomic, bins, items, schedule, seed)
    check(np.array_equal(counts, expected))
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 2 · Privatisation (4 points)
#
# Global atomics are correct but slow when many threads hit few bins: they all queue at the same
# L2 addresses. Write `histogram_privatised(values, counts)`:
#
# 1. each block keeps its own histogram in shared memory,
#    `local = cuda.shared.array(MAX_BINS, np.int32)` (use the first `counts.size` entries);
# 2. the block's threads zero it (shared memory starts with garbage), then count into it with
#    `cuda.atomic.add(local, b, 1)`;
# 3. when the whole block has finished counting, its threads add `local` into `counts` with
#    **one global atomic per bin** (split the bins among the block's threads).
#
# Think about where the block must wait for all its threads. The tests check the counts under
# adversarial schedules, and that the kernel really counts in shared memory (one global atomic per
# bin per block at most).

# %% nbgrader={"grade": false, "grade_id": "ex2_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
@cuda.jit
def histogram_privatised(values, counts):
    ### BEGIN SOLUTION
    local = cuda.shared.array(MAX_BINS, np.int32)
    t, nbins = cuda.threadIdx.x, counts.size
    for b in range(t, nbins, cuda.blockDim.x):
        local[b] = 0
    cuda.syncthreads()
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, values.size, stride):
        b = min(int(values[i] * nbins), nbins - 1)
        cuda.atomic.add(local, b, 1)
    cuda.syncthreads()
    for b in range(t, nbins, cuda.blockDim.x):
        cuda.atomic.add(counts, b, local[b])
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "ex2_picture", "locked": true, "schema_version": 3, "solution": false, "task": false}
show_histogram(histogram_privatised, bins=16, items=256, seed=0)

# %% nbgrader={"grade": true, "grade_id": "ex2_test", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
"""Check that histogram_privatised is exact under adversarial schedules and counts in shared memory."""
counts, expected, report = check_histogram(histogram_privatised, bins=16, items=512, schedule="random", seed=0)
assert np.array_equal(counts, expected), f"your kernel counted {counts.sum()} of {expected.sum()} (random schedule)"
ev = report.events
shared_atomics = int(((ev.space == "shared") & (ev.op == "atomic")).sum())
global_atomics = int(((ev.space == "global") & (ev.op == "atomic")).sum())
assert shared_atomics == 512, f"count every value with an atomic on the shared histogram ({shared_atomics} of 512 did)"
assert global_atomics <= 4 * 16, f"merge with at most one global atomic per bin per block ({global_atomics} used)"
### BEGIN HIDDEN TESTS
for bins, items, schedule, seed in [(1, 300, "round-robin", 0), (7, 513, "random", 1), (256, 700, "random", 2),
                                    (200, 64, "random", 5), (16, 700, "random", 7)]:
    counts, expected, report = check_histogram(histogram_privatised, bins, items, schedule, seed)
    ev = report.events
    check(np.array_equal(counts, expected))
    check(int(((ev.space == "global") & (ev.op == "atomic")).sum()) <= 4 * bins)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 3 · A hand-off between blocks (4 points)
#
# Two blocks of 8 threads. Block `producer` (0 or 1) produces: its thread `t` writes
# `data[t] = t + 1`, and then the block raises `flag[0] = 1`. The other block consumes: its thread 0
# waits until it sees the flag — polling **at most `spin_cap` times**, because nothing guarantees
# the producer block is running — then writes `out[0] = data[0] + … + data[7]` and `out[1] = 1` if it
# saw the flag, `0` if it gave up. This version is right on a sequentially consistent machine and
# wrong on a GPU:
#
# ```python
# @cuda.jit
# def handoff_broken(data, flag, out, producer, spin_cap):
#     t = cuda.threadIdx.x
#     if cuda.blockIdx.x == producer:
#         data[t] = t + 1
#         cuda.syncthreads()          # all 8 values are written before thread 0 goes on
#         if t == 0:
#             flag[0] = 1
#     elif t == 0:
#         seen = cuda.atomic.add(flag, 0, 0)   # an atomic read of the flag
#         polls = 0
#         while seen == 0 and polls < spin_cap:
#             seen = cuda.atomic.add(flag, 0, 0)
#             polls += 1
#         total = 0
#         for i in range(data.size):
#             total += data[i]
#         out[0] = total
#         out[1] = seen
# ```
#
# Write `handoff(data, flag, out, producer, spin_cap)`, correct under the weak-memory model (and
# so under the PTX model): keep the capped wait, and add what the message needs on **both** sides.

# %% nbgrader={"grade": false, "grade_id": "ex3_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
@cuda.jit
def handoff(data, flag, out, producer, spin_cap):
    ### BEGIN SOLUTION
    t = cuda.threadIdx.x
    if cuda.blockIdx.x == producer:
        data[t] = t + 1
        cuda.syncthreads()
        if t == 0:
            cuda.threadfence()  # release: the data is published before the flag
            flag[0] = 1
    elif t == 0:
        seen = cuda.atomic.add(flag, 0, 0)
        polls = 0
        while seen == 0 and polls < spin_cap:
            seen = cuda.atomic.add(flag, 0, 0)
            polls += 1
        cuda.threadfence()  # acquire: after seeing the flag, see what was published with it
        total = 0
        for i in range(data.size):
            total += data[i]
        out[0] = total
        out[1] = seen
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "ex3_picture", "locked": true, "schema_version": 3, "solution": false, "task": false}
show_handoff(handoff, schedule="round-robin")

# %% nbgrader={"grade": true, "grade_id": "ex3_test", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
"""Check that handoff delivers all 8 values under the weak-memory model and never waits forever."""
out, _ = run_handoff(handoff, producer=0, schedule="round-robin", memory="weak")
assert out[1] == 1, "the consumer never saw the flag"
assert out[0] == 36, f"the consumer saw the flag but summed {out[0]} instead of 36: it read stale data"
### BEGIN HIDDEN TESTS
for producer, schedule, seed in [(1, "round-robin", 0), (0, "random", 1), (1, "random", 2), (0, "random", 3),
                                 (1, "random", 4), (0, "random", 5)]:
    out, _ = run_handoff(handoff, producer=producer, spin_cap=10_000, schedule=schedule, seed=seed, memory="weak")
    check(out[1] == 1 and out[0] == 36)
# blocks one after another, consumer first: the producer never runs while the consumer waits
check(lambda: run_handoff(handoff, producer=1, spin_cap=30, schedule="sequential", memory="sc",
                          max_steps=20_000)[0][1] == 0)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex4_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 4 · What does the model allow? (2 points)
#
# Message passing between two *different blocks*: block 0 runs `data = 1; flag = 1`, block 1 runs
# `r0 = flag; r1 = data` (all start at 0). For each variant, is the outcome `r0 == 1 and r1 == 0`
# allowed by the PTX memory model? Answer `True` (allowed) or `False` (forbidden).
#
# * `"none"`: no fences;
# * `"producer"`: `threadfence()` between the two writes only;
# * `"consumer"`: `threadfence()` between the two reads only;
# * `"both"`: `threadfence()` on both sides;
# * `"block"`: `threadfence_block()` on both sides.

# %% nbgrader={"grade": false, "grade_id": "ex4_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
weak_outcome_allowed = {"none": True, "producer": True, "consumer": True, "both": False, "block": True}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ex4_test", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Check the five answers against the PTX memory model."""
assert set(weak_outcome_allowed) == {"none", "producer", "consumer", "both", "block"}, "answer all five variants"
assert all(isinstance(v, bool) for v in weak_outcome_allowed.values()), "answer True or False"
### BEGIN HIDDEN TESTS
check(weak_outcome_allowed == {"none": True, "producer": True, "consumer": True, "both": False, "block": True})
### END HIDDEN TESTS
