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
# # Lab 00a · First kernels: eight puzzles
#
# *About 90 minutes. Goes with lesson 00a "Your first kernels".*
#
# How to work: fill in every cell that says `YOUR CODE HERE` (delete the `raise
# NotImplementedError()` line). Each puzzle gives you the launch; you write the kernel's body. Don't
# edit the test cells: they are locked and are graded again, with more hidden cases, after you
# submit. In JupyterLab, **Kernel → Restart Kernel and Run All Cells** before you submit, then use
# **Validate**.
#
# Every puzzle earns two points: one for the **result** (checked on several sizes, against NumPy), and
# one for **efficiency**: the microscope (`gpucourse.microscope.trace`) counts, for every thread, how
# many elements it read from and wrote to global memory. A thread should read each input it needs
# once and write its output once — a kernel that reads more than it needs gives the right answer and
# still loses its efficiency point. `show(...)` draws what your kernel did: a table of per-thread
# counts and the picture of which thread touched which element.
#
# Without a GPU the kernels run in Numba's CUDA simulator: nothing is timed. Results are correct to
# rounding (a GPU fuses `a*x + y` into one FMA, the simulator rounds twice), and the test data here are
# small integers, exact in float32, so every check compares exactly.
#
# *Credit:* these puzzles follow **Sasha Rush's GPU Puzzles** (<https://github.com/srush/GPU-Puzzles>,
# MIT licence): the names (Map, Zip, Guard, Broadcast, Blocks, Shared, Dot), "add 10", the window sum
# (its "Pooling") and the idea of grading a kernel by counting each thread's reads. The wording, tests
# and microscope checks are this course's.


# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import numpy as np
from IPython.display import display

from gpucourse.measure import runtime  # first: it decides GPU or simulator before numba is imported
from gpucourse.tooling.grading import check
from gpucourse.microscope import trace
from numba import float32

cuda = runtime.cuda


def floats(*shape, seed=0):
    """Small random float32 test data."""
    return np.random.default_rng(seed).integers(-9, 10, size=shape).astype(np.float32)


def poisoned(*shape):
    """An output array full of NaN: an element your kernel does not write stays NaN."""
    return np.full(shape, np.nan, dtype=np.float32)


def counts(report):
    """The microscope's per-thread counts: {(array, op): the most elements one thread accessed}."""
    table = report.thread_accesses()
    per_thread = table.groupby(["array", "op", "thread"])["count"].sum()
    return {key: int(value) for key, value in per_thread.groupby(level=[0, 1]).max().items()}


def show(kernel, griddim, blockdim, *args, schedule=None):
    """Trace one launch under the microscope: per-thread counts, and which thread touched which element."""
    report = trace(kernel, griddim, blockdim, *args, schedule=schedule)
    print(report)
    print("most accesses by one thread, per (array, op):", counts(report))
    table = report.thread_accesses()
    display(table.pivot_table(index="thread", columns=["array", "op"], values="count", fill_value=0).head(8))
    loaded = table[table.op == "load"].array
    display(report.picture_threads(array=loaded.iloc[0] if len(loaded) else None))
    return report


runtime.banner()


# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Puzzle 1 · Map (2 points)
#
# Write `map_add_ten(a, out)`: `out[i] = a[i] + 10`. The launch is one block with exactly one thread
# per element (`map_add_ten[1, n](a, out)`), so thread `i` is `cuda.threadIdx.x` and no bounds check is
# needed. Efficiency: each thread reads one element of `a` and writes one of `out`.


# %% nbgrader={"grade": false, "grade_id": "ex1_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
@cuda.jit
def map_add_ten(a, out):
    ### BEGIN SOLUTION
    i = cuda.threadIdx.x
    out[i] = a[i] + 10
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "ex1_show", "locked": true, "schema_version": 3, "solution": false, "task": false}
report = show(map_add_ten, 1, 8, floats(8), poisoned(8))


# %% nbgrader={"grade": true, "grade_id": "ex1_test", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""Check that map_add_ten adds 10 to every element (one block, one thread per element)."""
a = floats(16, seed=1)
out = poisoned(16)
map_add_ten[1, 16](a, out)
np.testing.assert_array_equal(out, a + 10)
### BEGIN HIDDEN TESTS
for n, seed in [(1, 2), (5, 3), (32, 4)]:
    a, out = floats(n, seed=seed), poisoned(n)
    launch(map_add_ten, 1, n, a.copy(), out)  # a copy: the kernel cannot change what it is compared with
    check(np.array_equal(out, a + 10))
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "ex1_counts", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""Check with the microscope that each thread reads one element of a and writes one of out."""
report = trace(map_add_ten, 1, 16, floats(16), poisoned(16))
assert counts(report) == {("a", "load"): 1, ("out", "store"): 1}, counts(report)
### BEGIN HIDDEN TESTS
report = observe(map_add_ten, 1, 24, floats(24), poisoned(24))
check(counts(report) == {("a", "load"): 1, ("out", "store"): 1})
check(report.thread_accesses().thread.nunique() == 24)
### END HIDDEN TESTS


# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Puzzle 2 · Zip (2 points)
#
# Write `zip_add(a, b, out)`: `out[i] = a[i] + b[i]`, launched as `zip_add[1, n](a, b, out)`.
# Efficiency: one read of `a`, one of `b`, one write of `out` per thread.


# %% nbgrader={"grade": false, "grade_id": "ex2_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
@cuda.jit
def zip_add(a, b, out):
    ### BEGIN SOLUTION
    i = cuda.threadIdx.x
    out[i] = a[i] + b[i]
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "ex2_show", "locked": true, "schema_version": 3, "solution": false, "task": false}
report = show(zip_add, 1, 8, floats(8), floats(8, seed=1), poisoned(8))


# %% nbgrader={"grade": true, "grade_id": "ex2_test", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""Check that zip_add adds two arrays element by element."""
a, b, out = floats(16, seed=1), floats(16, seed=2), poisoned(16)
zip_add[1, 16](a, b, out)
np.testing.assert_array_equal(out, a + b)
### BEGIN HIDDEN TESTS
for n, seed in [(1, 3), (7, 4), (32, 5)]:
    a, b, out = floats(n, seed=seed), floats(n, seed=seed + 10), poisoned(n)
    launch(zip_add, 1, n, a.copy(), b.copy(), out)
    check(np.array_equal(out, a + b))
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "ex2_counts", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""Check with the microscope that each thread reads a and b once and writes out once."""
report = trace(zip_add, 1, 16, floats(16), floats(16, seed=1), poisoned(16))
assert counts(report) == {("a", "load"): 1, ("b", "load"): 1, ("out", "store"): 1}, counts(report)
### BEGIN HIDDEN TESTS
report = observe(zip_add, 1, 9, floats(9), floats(9, seed=1), poisoned(9))
check(counts(report) == {("a", "load"): 1, ("b", "load"): 1, ("out", "store"): 1})
### END HIDDEN TESTS


# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Puzzle 3 · Guard (2 points)
#
# Write `guarded_add_ten(a, out)`: `out[i] = a[i] + 10`, but now the launch has **more threads than
# elements**: always one block of 32 threads (`guarded_add_ten[1, 32](a, out)`), for any n from 1 to 32.
# Threads past the end must not touch memory (the microscope reports an access out of bounds as an
# error).


# %% nbgrader={"grade": false, "grade_id": "ex3_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
@cuda.jit
def guarded_add_ten(a, out):
    ### BEGIN SOLUTION
    i = cuda.threadIdx.x
    if i < a.size:
        out[i] = a[i] + 10
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "ex3_show", "locked": true, "schema_version": 3, "solution": false, "task": false}
report = show(guarded_add_ten, 1, 32, floats(20), poisoned(20))


# %% nbgrader={"grade": true, "grade_id": "ex3_test", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""Check that guarded_add_ten is right when the block has more threads than elements."""
a, out = floats(20, seed=1), poisoned(20)
guarded_add_ten[1, 32](a, out)
np.testing.assert_array_equal(out, a + 10)
### BEGIN HIDDEN TESTS
for n, seed in [(1, 2), (31, 3), (32, 4)]:
    a, out = floats(n, seed=seed), poisoned(n)
    observe(guarded_add_ten, 1, 32, a.copy(), out)
    check(np.array_equal(out, a + 10))
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "ex3_counts", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""Check with the microscope that only the n threads inside the array touch memory, once each."""
report = trace(guarded_add_ten, 1, 32, floats(20), poisoned(20))
assert counts(report) == {("a", "load"): 1, ("out", "store"): 1}, counts(report)
assert sorted(report.thread_accesses().thread.unique()) == list(range(20)), "only threads 0..19 should touch memory"
### BEGIN HIDDEN TESTS
report = observe(guarded_add_ten, 1, 32, floats(3), poisoned(3))
check(counts(report) == {("a", "load"): 1, ("out", "store"): 1})
check(sorted(report.thread_accesses().thread.unique()) == [0, 1, 2])
### END HIDDEN TESTS


# %% [markdown] nbgrader={"grade": false, "grade_id": "ex4_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Puzzle 4 · Broadcast (2 points)
#
# Write `broadcast_add(a, b, out)`: `a` is a column (shape `(rows, 1)`), `b` a row (shape `(1, cols)`)
# and `out[row, col] = a[row, 0] + b[0, col]` (NumPy's broadcasting, `a + b`). The launch is one 2-D
# block of 16 × 16 threads (`broadcast_add[1, (16, 16)](a, b, out)`); rows and cols are at most 16.
# Use x for the column and y for the row, and guard both. Efficiency: each thread reads one element of
# `a`, one of `b`, and writes one of `out`.


# %% nbgrader={"grade": false, "grade_id": "ex4_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
@cuda.jit
def broadcast_add(a, b, out):
    ### BEGIN SOLUTION
    col = cuda.threadIdx.x
    row = cuda.threadIdx.y
    if row < out.shape[0] and col < out.shape[1]:
        out[row, col] = a[row, 0] + b[0, col]
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "ex4_show", "locked": true, "schema_version": 3, "solution": false, "task": false}
report = show(broadcast_add, 1, (16, 16), floats(3, 1), floats(1, 5, seed=1), poisoned(3, 5))


# %% nbgrader={"grade": true, "grade_id": "ex4_test", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""Check that broadcast_add computes a + b for a column a and a row b."""
a, b, out = floats(5, 1, seed=1), floats(1, 7, seed=2), poisoned(5, 7)
broadcast_add[1, (16, 16)](a, b, out)
np.testing.assert_array_equal(out, a + b)
### BEGIN HIDDEN TESTS
for rows, cols, seed in [(1, 1, 3), (16, 3, 4), (2, 16, 5), (16, 16, 6)]:
    a, b, out = floats(rows, 1, seed=seed), floats(1, cols, seed=seed + 10), poisoned(rows, cols)
    observe(broadcast_add, 1, (16, 16), a.copy(), b.copy(), out)
    check(np.array_equal(out, a + b))
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "ex4_counts", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""Check with the microscope that each thread reads a and b once and writes out once."""
report = trace(broadcast_add, 1, (16, 16), floats(5, 1), floats(1, 7, seed=1), poisoned(5, 7))
assert counts(report) == {("a", "load"): 1, ("b", "load"): 1, ("out", "store"): 1}, counts(report)
### BEGIN HIDDEN TESTS
report = observe(broadcast_add, 1, (16, 16), floats(16, 1), floats(1, 2, seed=1), poisoned(16, 2))
check(counts(report) == {("a", "load"): 1, ("b", "load"): 1, ("out", "store"): 1})
check(report.thread_accesses().thread.nunique() == 32)
### END HIDDEN TESTS


# %% [markdown] nbgrader={"grade": false, "grade_id": "ex5_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Puzzle 5 · Blocks (2 points)
#
# Write `blocks_add_ten(a, out)`: `out[i] = a[i] + 10` with **several blocks** of 8 threads:
# `blocks_add_ten[(n + 7) // 8, 8](a, out)`. Each thread's element comes from its block and its place
# in the block (`cuda.blockIdx.x`, `cuda.blockDim.x`, `cuda.threadIdx.x`, or `cuda.grid(1)`).


# %% nbgrader={"grade": false, "grade_id": "ex5_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
@cuda.jit
def blocks_add_ten(a, out):
    ### BEGIN SOLUTION
    i = cuda.grid(1)
    if i < a.size:
        out[i] = a[i] + 10
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "ex5_show", "locked": true, "schema_version": 3, "solution": false, "task": false}
report = show(blocks_add_ten, 3, 8, floats(20), poisoned(20))


# %% nbgrader={"grade": true, "grade_id": "ex5_test", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""Check that blocks_add_ten covers every element with blocks of 8 threads."""
a, out = floats(20, seed=1), poisoned(20)
blocks_add_ten[3, 8](a, out)
np.testing.assert_array_equal(out, a + 10)
### BEGIN HIDDEN TESTS
for n, seed in [(1, 2), (8, 3), (9, 4), (61, 5)]:
    a, out = floats(n, seed=seed), poisoned(n)
    observe(blocks_add_ten, (n + 7) // 8, 8, a.copy(), out)
    check(np.array_equal(out, a + 10))
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "ex5_counts", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""Check with the microscope that each of the n first threads reads once and writes once, and no other does."""
report = trace(blocks_add_ten, 3, 8, floats(20), poisoned(20))
assert counts(report) == {("a", "load"): 1, ("out", "store"): 1}, counts(report)
assert report.thread_accesses().thread.nunique() == 20
### BEGIN HIDDEN TESTS
report = observe(blocks_add_ten, 5, 8, floats(33), poisoned(33))
check(counts(report) == {("a", "load"): 1, ("out", "store"): 1})
check(sorted(report.thread_accesses().thread.unique()) == list(range(33)))
### END HIDDEN TESTS


# %% [markdown] nbgrader={"grade": false, "grade_id": "ex6_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Puzzle 6 · Blocks in 2-D (2 points)
#
# Write `map_2d_add_ten(a, out)`: `out[row, col] = a[row, col] + 10` for a 2-D array of any shape, with
# blocks of 8 × 8 threads and a grid of `((cols + 7) // 8, (rows + 7) // 8)` blocks — x along the
# columns. `launch_2d` (given) launches it.


# %% nbgrader={"grade": false, "grade_id": "ex6_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
@cuda.jit
def map_2d_add_ten(a, out):
    ### BEGIN SOLUTION
    col, row = cuda.grid(2)
    if row < a.shape[0] and col < a.shape[1]:
        out[row, col] = a[row, col] + 10
    ### END SOLUTION


def launch_2d(a, kernel=None):
    out = poisoned(*a.shape)
    rows, cols = a.shape
    (kernel or map_2d_add_ten)[((cols + 7) // 8, (rows + 7) // 8), (8, 8)](a, out)
    return out


# %% nbgrader={"grade": false, "grade_id": "ex6_show", "locked": true, "schema_version": 3, "solution": false, "task": false}
report = show(map_2d_add_ten, (2, 2), (8, 8), floats(10, 13), poisoned(10, 13))


# %% nbgrader={"grade": true, "grade_id": "ex6_test", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""Check that map_2d_add_ten covers a 2-D array of any shape (rows and columns the right way round)."""
a = floats(10, 13, seed=1)
np.testing.assert_array_equal(launch_2d(a), a + 10)
### BEGIN HIDDEN TESTS
for shape, seed in [((1, 1), 2), ((3, 17), 3), ((17, 3), 4), ((16, 16), 5)]:
    a = floats(*shape, seed=seed)
    out = poisoned(*shape)
    grid = ((shape[1] + 7) // 8, (shape[0] + 7) // 8)
    observe(map_2d_add_ten, grid, (8, 8), a.copy(), out)
    check(np.array_equal(out, a + 10))
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "ex6_counts", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""Check with the microscope that each thread inside the array reads once and writes once."""
report = trace(map_2d_add_ten, (2, 2), (8, 8), floats(10, 13), poisoned(10, 13))
assert counts(report) == {("a", "load"): 1, ("out", "store"): 1}, counts(report)
assert report.thread_accesses().thread.nunique() == 130
### BEGIN HIDDEN TESTS
report = observe(map_2d_add_ten, (1, 3), (8, 8), floats(20, 5), poisoned(20, 5))
check(counts(report) == {("a", "load"): 1, ("out", "store"): 1})
check(report.thread_accesses().thread.nunique() == 100)
### END HIDDEN TESTS


# %% [markdown] nbgrader={"grade": false, "grade_id": "ex7_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Puzzle 7 · Shared memory (2 points)
#
# *Puzzles 7 and 8 are a preview of lesson 04 (shared memory) and lesson 06 (races): do them now with
# this primer, or come back after lesson 04.* **Primer:** `cuda.shared.array(32, float32)`, written inside
# a kernel, is one array per **block**, in fast on-chip memory that every thread of the block can read
# and write (global arrays like `a` are seen by all blocks). A thread that reads a slot another thread
# writes must wait until it is written: `cuda.syncthreads()` is a **barrier** — no thread of the block
# goes past it until every thread of the block has reached it. Without it, a thread can read a slot
# before its neighbour has filled it: a **race**, which the microscope reports.
#
# Write `window_sum(a, out)`: `out[i] = a[i - 2] + a[i - 1] + a[i]`, where a neighbour before the start
# counts as 0 (`out[0] = a[0]`, `out[1] = a[0] + a[1]`). The launch is one block of 32 threads
# (`window_sum[1, 32](a, out)`), n from 1 to 32. Reading three elements of `a` per thread from global
# memory gives the right answer but reads every element three times: instead, each thread copies
# **one** element into a `cuda.shared.array(32, float32)`, the block waits (`cuda.syncthreads()`), and
# then each thread adds its window from shared memory. The efficiency check runs your kernel with the
# microscope's random interleaving of threads and also fails on a race (a missing barrier).


# %% nbgrader={"grade": false, "grade_id": "ex7_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
@cuda.jit
def window_sum(a, out):
    ### BEGIN SOLUTION
    shared = cuda.shared.array(32, float32)
    i = cuda.threadIdx.x
    if i < a.size:
        shared[i] = a[i]
    cuda.syncthreads()
    if i < a.size:
        total = shared[i]
        if i >= 1:
            total += shared[i - 1]
        if i >= 2:
            total += shared[i - 2]
        out[i] = total
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "ex7_show", "locked": true, "schema_version": 3, "solution": false, "task": false}
report = show(window_sum, 1, 32, floats(20), poisoned(20))


# %% nbgrader={"grade": true, "grade_id": "ex7_test", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""Check that window_sum adds each element and the two before it (missing neighbours count as 0)."""


def reference_window(a):
    padded = np.concatenate([np.zeros(2, np.float32), a])
    return padded[2:] + padded[1:-1] + padded[:-2]


a, out = floats(20, seed=1), poisoned(20)
window_sum[1, 32](a, out)
np.testing.assert_array_equal(out, reference_window(a))
### BEGIN HIDDEN TESTS
for n, seed in [(1, 2), (2, 3), (3, 4), (32, 5)]:
    a, out = floats(n, seed=seed), poisoned(n)
    observe(window_sum, 1, 32, a.copy(), out)
    check(np.array_equal(out, reference_window(a)))
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "ex7_counts", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""Check with the microscope that each thread reads one element of a from global memory, writes one of
out, and that no thread reads shared memory before it is written (random interleaving, race report)."""
a, out = floats(32, seed=1), poisoned(32)
report = trace(window_sum, 1, 32, a, out, schedule="random", seed=0)
assert counts(report) == {("a", "load"): 1, ("out", "store"): 1}, counts(report)
assert report.race_count() == 0, "the microscope found racing accesses: see report.races()"
### BEGIN HIDDEN TESTS
a, out = floats(32, seed=7), poisoned(32)
report = observe(window_sum, 1, 32, a.copy(), out, schedule="random", seed=3)
check(report.race_count() == 0)
check(counts(report) == {("a", "load"): 1, ("out", "store"): 1})
check(np.array_equal(out, reference_window(a)))
### END HIDDEN TESTS


# %% [markdown] nbgrader={"grade": false, "grade_id": "ex8_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Puzzle 8 · Dot product (2 points)
#
# Write `dot(a, b, out)`: `out[0] = a[0]·b[0] + a[1]·b[1] + …`, with one block of 32 threads
# (`dot[1, 32](a, b, out)`), n from 1 to 32. Each thread multiplies its pair into a
# `cuda.shared.array(32, float32)` (0 past the end), the block waits, and **one** thread adds the 32
# products and writes `out[0]`. Efficiency: each thread reads one element of `a` and one of `b`, and
# the output is written once in all (no atomics, no thread writing it again and again).


# %% nbgrader={"grade": false, "grade_id": "ex8_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
@cuda.jit
def dot(a, b, out):
    ### BEGIN SOLUTION
    products = cuda.shared.array(32, float32)
    i = cuda.threadIdx.x
    if i < a.size:
        products[i] = a[i] * b[i]
    else:
        products[i] = 0
    cuda.syncthreads()
    if i == 0:
        total = float32(0)
        for k in range(32):
            total += products[k]
        out[0] = total
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "ex8_show", "locked": true, "schema_version": 3, "solution": false, "task": false}
report = show(dot, 1, 32, floats(20), floats(20, seed=1), poisoned(1))


# %% nbgrader={"grade": true, "grade_id": "ex8_test", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""Check that dot computes the dot product of two vectors of up to 32 elements."""
a, b, out = floats(20, seed=1), floats(20, seed=2), poisoned(1)
dot[1, 32](a, b, out)
assert out[0] == float(np.dot(a.astype(np.float64), b.astype(np.float64))), out[0]
### BEGIN HIDDEN TESTS
for n, seed in [(1, 3), (31, 4), (32, 5)]:
    a, b, out = floats(n, seed=seed), floats(n, seed=seed + 10), poisoned(1)
    observe(dot, 1, 32, a.copy(), b.copy(), out)
    check(out[0] == float(np.dot(a.astype(np.float64), b.astype(np.float64))))
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "ex8_counts", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""Check with the microscope that each thread reads a and b once, out is written once in all, and
no thread reads the products before they are all written."""
a, b, out = floats(32, seed=1), floats(32, seed=2), poisoned(1)
report = trace(dot, 1, 32, a, b, out, schedule="random", seed=0)
assert counts(report) == {("a", "load"): 1, ("b", "load"): 1, ("out", "store"): 1}, counts(report)
table = report.thread_accesses()
assert int(table[table.array == "out"]["count"].sum()) == 1, "out[0] should be written once, by one thread"
assert report.race_count() == 0, "the microscope found racing accesses: see report.races()"
### BEGIN HIDDEN TESTS
a, b, out = floats(17, seed=3), floats(17, seed=4), poisoned(1)
report = observe(dot, 1, 32, a.copy(), b.copy(), out, schedule="random", seed=5)
check(report.race_count() == 0)
check(counts(report) == {("a", "load"): 1, ("b", "load"): 1, ("out", "store"): 1})
check(out[0] == float(np.dot(a.astype(np.float64), b.astype(np.float64))))
### END HIDDEN TESTS


# %% [markdown] nbgrader={"grade": false, "grade_id": "outro", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Done
#
# Eight kernels, each checked twice: by its result and by what every thread did. Next: lesson 01, where
# the threads you launched here turn out to run 32 at a time.
