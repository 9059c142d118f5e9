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
# *About 60 minutes. Goes with lesson 06 "Races and the memory consistency model".*
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

from gpucourse.measure import runtime
from gpucourse.lessons.races import weakmemory
from gpucourse.tooling.grading import check
from gpucourse.lessons.races import check_histogram, histogram_values, run_handoff, show_handoff, show_histogram

cuda = runtime.cuda
MAX_BINS = 256  # the largest histogram these kernels must handle


def weighted_reference(values, weights, bins):
    """NumPy's weighted histogram, with the kernels' binning rule."""
    index = np.minimum((values * np.float32(bins)).astype(np.int64), bins - 1)
    return np.bincount(index, weights=weights, minlength=bins).astype(np.int64)


def check_weighted(kernel, bins=16, items=512, schedule="random", seed=0):
    """kernel(values, weights, sums) under the race scheduler on 4 blocks × 64 threads:
    (its sums, NumPy's sums, the report)."""
    values = histogram_values(items, seed)
    weights = np.random.default_rng(seed + 1000).integers(1, 10, items).astype(np.int32)
    sums = np.zeros(bins, np.int32)
    report = weakmemory.run_kernel(kernel, 4, 64, values, weights, sums, schedule=schedule, seed=seed, max_steps=200_000)
    return sums, weighted_reference(values, weights, bins), report


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
FORBIDDEN = {"gpucourse.lessons.races.kernels:histogram_atomic.py_func": "the lesson's histogram_atomic is the kernel "
             "this exercise asks you to write"}
from gpucourse.lessons.races.model import LAB_BLOCKS, LAB_THREADS, histogram_reference, race_event_counts
for bins, items, schedule, seed in [(1, 300, "random", 1), (7, 513, "random", 2), (256, 700, "round-robin", 0),
                                    (5, 0, "random", 3)]:
    values, counts = histogram_values(items, seed), np.zeros(bins, np.int32)
    # the race scheduler runs the kernel on the learner's own thread; the counts land in the grader's array
    call(race_event_counts, histogram_atomic, LAB_BLOCKS, LAB_THREADS, values.copy(), counts, schedule=schedule,
         seed=seed, max_steps=100_000)
    check(np.array_equal(counts, histogram_reference(values, bins)))
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 2 · Privatisation, weighted (4 points)
#
# Global atomics are correct but slow when many threads hit few bins: they all queue at the same
# L2 addresses. This time every value carries a weight (an `int32`), and bin `b` must hold the
# **sum of the weights** of its values (NumPy reference: `weighted_reference(values, weights,
# nbins)`). Write `histogram_weighted(values, weights, sums)`:
#
# 1. each block keeps its own partial sums in shared memory,
#    `local = cuda.shared.array(MAX_BINS, np.int32)` (use the first `sums.size` entries);
# 2. the block's threads zero it (shared memory starts with garbage), then add each value's weight
#    into it with an atomic on the shared array;
# 3. when the whole block has finished, its threads add `local` into `sums` with **one global
#    atomic per bin** (split the bins among the block's threads).
#
# Think about where the block must wait for all its threads. The tests check the sums under
# adversarial schedules, and that the kernel really adds in shared memory (one global atomic per
# bin per block at most).

# %% nbgrader={"grade": false, "grade_id": "ex2_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
@cuda.jit
def histogram_weighted(values, weights, sums):
    ### BEGIN SOLUTION
    local = cuda.shared.array(MAX_BINS, np.int32)
    t, nbins = cuda.threadIdx.x, sums.size
    for b in range(t, nbins, cuda.blockDim.x):
        local[b] = 0
    cuda.syncthreads()
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, values.size, stride):
        b = min(int(values[i] * nbins), nbins - 1)
        cuda.atomic.add(local, b, weights[i])
    cuda.syncthreads()
    for b in range(t, nbins, cuda.blockDim.x):
        cuda.atomic.add(sums, b, local[b])
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "ex2_picture", "locked": true, "schema_version": 3, "solution": false, "task": false}
sums, expected, _ = check_weighted(histogram_weighted, bins=8, items=256, seed=0)
print("your sums (random interleaving):", sums.tolist())
print("NumPy's sums:                   ", expected.tolist())

# %% nbgrader={"grade": true, "grade_id": "ex2_test", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
"""Check that histogram_weighted is exact under adversarial schedules and adds in shared memory."""
sums, expected, report = check_weighted(histogram_weighted, bins=16, items=512, schedule="random", seed=0)
assert np.array_equal(sums, expected), f"your sums total {sums.sum()}, NumPy's {expected.sum()} (random schedule)"
ev = report.events
shared_atomics = int(((ev.space == "shared") & (ev.op == "atomic")).sum())
global_atomics = int(((ev.space == "global") & (ev.op == "atomic")).sum())
assert shared_atomics == 512, f"add every weight with an atomic on the shared array ({shared_atomics} of 512 did)"
assert global_atomics <= 4 * 16, f"merge with at most one global atomic per bin per block ({global_atomics} used)"
### BEGIN HIDDEN TESTS
FORBIDDEN = {"gpucourse.lessons.races.kernels:histogram_privatised.py_func": "the lesson's histogram_privatised is "
             "the pattern this exercise asks you to write"}
from gpucourse.lessons.races.model import race_event_counts
for bins, items, schedule, seed in [(1, 300, "round-robin", 0), (7, 513, "random", 1), (256, 700, "random", 2),
                                    (200, 64, "random", 5), (16, 700, "random", 7), (3, 0, "random", 8)]:
    values = histogram_values(items, seed)
    weights = np.random.default_rng(seed + 1000).integers(1, 10, items).astype(np.int32)
    sums = np.zeros(bins, np.int32)
    events = call(race_event_counts, histogram_weighted, 4, 64, values.copy(), weights.copy(), sums,
                  schedule=schedule, seed=seed, max_steps=200_000)  # plain counts of the accesses
    index = np.minimum((values * np.float32(bins)).astype(np.int64), bins - 1)  # the grader's own reference
    check(np.array_equal(sums, np.bincount(index, weights=weights, minlength=bins).astype(np.int64)))
    check(events["space"].get("shared atomic", 0) == items)
    check(events["space"].get("global atomic", 0) <= 4 * bins)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 3 · A hand-off between blocks (4 points)
#
# Two blocks of 8 threads. Block `producer` (0 or 1) produces: its thread `t` writes
# `data[t] = t + 1`, and then the block raises the flag to 1. The other block consumes: its thread 0
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
# Write `handoff(data, flag, out, producer, spin_cap)`: keep the capped wait, and add what the
# message needs on **both** sides. In the PTX memory model a fence makes a release (or acquire)
# pattern only together with a **strong** access to the flag: raise it with an atomic,
# `cuda.atomic.exch(flag, 0, 1)`, as the consumer already reads it with one. (`flag[0] = 1` is a
# weak store; it only seems to work because `threadfence` happens to be the strongest fence.)
#
# The tests run your kernel under the lesson's weak-memory model and check that the flag is
# written with an atomic. That model is *stronger* than PTX (it forbids some outcomes PTX allows),
# so passing it is necessary, not sufficient: the PTX rules above are what make the kernel right.

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
            cuda.atomic.exch(flag, 0, 1)  # a strong write of the flag
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
"""Check that handoff delivers all 8 values under the weak-memory model, raises the flag with an atomic
and never waits forever."""


def flag_plain_stores(report):
    """How many plain (weak) stores wrote the flag."""
    ev = report.events
    return int(((ev.array == "flag") & (ev.op == "store")).sum())


out, report = run_handoff(handoff, producer=0, schedule="round-robin", memory="weak")
assert out[1] == 1, "the consumer never saw the flag"
assert out[0] == 36, f"the consumer saw the flag but summed {out[0]} instead of 36: it read stale data"
assert flag_plain_stores(report) == 0, "the flag is written with a plain (weak) store: use cuda.atomic.exch"
### BEGIN HIDDEN TESTS
FORBIDDEN = {"gpucourse.lessons.races.kernels:handoff_kernel.py_func": "the lesson's handoff_kernel is the hand-off "
             "this exercise asks you to write"}
from gpucourse.lessons.races.model import race_event_counts
for producer, schedule, seed in [(1, "round-robin", 0), (0, "random", 1), (1, "random", 2), (0, "random", 3),
                                 (1, "random", 4), (0, "random", 5)]:
    data, flag, out = np.zeros(8, np.int32), np.zeros(1, np.int32), np.full(2, -1, np.int32)
    events = call(race_event_counts, handoff, 2, 8, data, flag, out, producer, 10_000, schedule=schedule, seed=seed,
                  memory="weak", max_steps=50_000)
    check(out[1] == 1 and out[0] == 36)
    check(events["array"].get("flag store", 0) == 0)
    check(events["array"].get("flag atomic", 0) >= 2)
# blocks one after another, consumer first: the producer never runs while the consumer waits
data, flag, out = np.zeros(8, np.int32), np.zeros(1, np.int32), np.full(2, -1, np.int32)
call(race_event_counts, handoff, 2, 8, data, flag, out, 1, 30, schedule="sequential", memory="sc", max_steps=20_000)
check(out[1] == 0)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex4_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 4 · What does PTX allow? (2 points)
#
# Four litmus tests that are not in the lesson's table; in each, the two programs run in thread 0
# of two *different blocks*, and every location starts at 0. `exch(f, 1)` is `cuda.atomic.exch`
# and `add(f, 0)` is `cuda.atomic.add` used as a read: both are strong (atomic) accesses. Is the
# outcome allowed by the **PTX memory model**? Answer `True` (allowed) or `False` (forbidden).
#
# * `"sb_fence_one_side"`: `x = 1; threadfence(); r0 = y` ‖ `y = 1; r1 = x` — outcome
#   `r0 == 0 and r1 == 0`;
# * `"sb_block_fences"`: `x = 1; threadfence_block(); r0 = y` ‖ `y = 1; threadfence_block(); r1 = x`
#   — outcome `r0 == 0 and r1 == 0`;
# * `"mp_strong_flag_producer_fence"`: `data = 1; threadfence(); exch(flag, 1)` ‖
#   `r0 = add(flag, 0); r1 = data` — outcome `r0 == 1 and r1 == 0`;
# * `"corr_atomics"`: `exch(x, 1)` ‖ `r0 = add(x, 0); r1 = add(x, 0)` — outcome
#   `r0 == 1 and r1 == 0`.

# %% nbgrader={"grade": false, "grade_id": "ex4_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
# SB with one fence: block 1 may still read x before its own write of y is visible → allowed.
# Block-scope fences order nothing for another block → allowed.
# Release without acquire: block 1's read of data is not ordered after its read of the flag → allowed.
# Strong accesses to one location are per-location sequentially consistent (coherence) → forbidden.
weak_outcome_allowed = {"sb_fence_one_side": True, "sb_block_fences": True,
                        "mp_strong_flag_producer_fence": True, "corr_atomics": False}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ex4_test", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Check the four answers against the PTX memory model."""
LITMUS_NAMES = {"sb_fence_one_side", "sb_block_fences", "mp_strong_flag_producer_fence", "corr_atomics"}
assert set(weak_outcome_allowed) == LITMUS_NAMES, "answer all four tests"
assert all(isinstance(v, bool) for v in weak_outcome_allowed.values()), "answer True or False"
### BEGIN HIDDEN TESTS
check(freeze(weak_outcome_allowed, "weak_outcome_allowed") == {"sb_fence_one_side": True, "sb_block_fences": True,
                               "mp_strong_flag_producer_fence": True, "corr_atomics": False})
### END HIDDEN TESTS
