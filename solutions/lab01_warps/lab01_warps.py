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
# # Lab 01 · Indices, bounds and warps
#
# *About 30 minutes. Goes with lesson 01 "Warps and SIMT".*
#
# How to work: fill in every cell that says `YOUR CODE HERE` (delete the `raise
# NotImplementedError()` line). Don't edit the test cells: they are locked and are graded
# again, with more hidden cases, after you submit. Run each test cell after your answer; a
# cell that runs without error has passed its visible checks. In JupyterLab,
# **Kernel → Restart Kernel and Run All Cells** before you submit, then use **Validate**.
#
# Without a GPU the kernels run in Numba's CUDA simulator: results are exact, timings are not
# measured here.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import numpy as np

from gpucourse import microscope
from gpucourse.measure import runtime
from gpucourse.tooling.grading import check
from gpucourse.lessons.warps import coverage_figure

cuda = runtime.cuda
runtime.banner()

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 1 · Warps per block (2 points)
#
# Write `warps_per_block(block_shape)`: `block_shape` is an int or a tuple `(x,)`, `(x, y)` or
# `(x, y, z)`; return how many warps the block occupies. Remember that a partial warp still
# occupies a whole warp. Reference: a block of 48 threads → 2 warps.

# %% nbgrader={"grade": false, "grade_id": "ex1_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
def warps_per_block(block_shape):
    ### BEGIN SOLUTION
    shape = (block_shape,) if isinstance(block_shape, int) else tuple(block_shape)
    threads = int(np.prod(shape))
    return (threads + 31) // 32
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex1_test", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Check that warps_per_block counts whole warps for 1-, 2- and 3-D blocks."""
assert warps_per_block(32) == 1, "32 threads are exactly one warp"
assert warps_per_block(48) == 2, "48 threads need two warps (the second is half empty)"
assert warps_per_block((16, 16)) == 8, "a 16×16 block is 256 threads"
### BEGIN HIDDEN TESTS
FORBIDDEN = {"gpucourse.lessons.warps.model:warps_per_block": "the lesson's warps_per_block is the count this "
             "exercise asks you to write"}
cases = [(1, 1), (33, 2), ((12, 8), 3), ((10, 10), 4), ((8, 8, 4), 8), ((1024,), 32), ((7, 3, 2), 2)]
got = call_each(warps_per_block, [(shape,) for shape, _ in cases])  # frozen: no code of the notebook runs below
for answer, (_, expected) in zip(got, cases, strict=True):
    check(answer == expected)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 2 · Blocks per grid (2 points)
#
# Write `blocks_per_grid(n_elements, threads_per_block)`: the smallest number of blocks whose
# threads cover `n_elements` (one thread per element). Reference: 1000 elements with 256
# threads per block → 4 blocks (1024 threads, 24 of which must do nothing).

# %% nbgrader={"grade": false, "grade_id": "ex2_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
def blocks_per_grid(n_elements, threads_per_block):
    ### BEGIN SOLUTION
    return (n_elements + threads_per_block - 1) // threads_per_block
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex2_test", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Check that blocks_per_grid rounds up, never down."""
assert blocks_per_grid(1000, 256) == 4
assert blocks_per_grid(1024, 256) == 4, "an exact multiple needs no extra block"
### BEGIN HIDDEN TESTS
FORBIDDEN = {"gpucourse.lessons.first_kernels.model:blocks_for": "lesson 00's blocks_for is the count this exercise "
             "asks you to write",
             "gpucourse.lessons.divergence.model:blocks_for": "lesson 02's blocks_for is the count this exercise "
             "asks you to write"}
cases = [(1, 128, 1), (1025, 256, 5), (10**6, 1024, 977), (31, 32, 1), (65, 32, 3)]
got = call_each(blocks_per_grid, [(n, t) for n, t, _ in cases])
for answer, (_, _, expected) in zip(got, cases, strict=True):
    check(answer == expected)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 3 · A 2-D kernel with a bounds check (4 points)
#
# Write the kernel `add_2d(a, b, out)` so that each thread computes one element
# `out[row, col] = a[row, col] + b[row, col]` (NumPy reference: `out = a + b`), where
# `col` is the thread's global x index and `row` its global y index (`cuda.grid(2)` gives
# `(x, y)`). Then write `launch_add_2d(a, b, block=(16, 16))`, which allocates `out`, launches
# enough blocks in x and y to cover every element, and returns `out`.
#
# The array is rarely a multiple of the block: the picture shows the threads that land
# outside a 37 × 45 array. They must skip the work. A GPU does not stop a thread that writes past
# the end of an array (it overwrites whatever lies there), so the tests run your kernel through the
# course's microscope, which checks every access of every thread, with or without a GPU.

# %% nbgrader={"grade": false, "grade_id": "ex3_picture", "locked": true, "schema_version": 3, "solution": false, "task": false}
coverage_figure(37, 45, 16, 16)

# %% nbgrader={"grade": false, "grade_id": "ex3_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
@cuda.jit
def add_2d(a, b, out):
    ### BEGIN SOLUTION
    col, row = cuda.grid(2)
    if row < out.shape[0] and col < out.shape[1]:
        out[row, col] = a[row, col] + b[row, col]
    ### END SOLUTION


def launch_add_2d(a, b, block=(16, 16)):
    ### BEGIN SOLUTION
    out = np.zeros_like(a)
    rows, cols = a.shape
    grid = (blocks_per_grid(cols, block[0]), blocks_per_grid(rows, block[1]))
    add_2d[grid, block](a, b, out)
    return out
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex3_test", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
"""Check that add_2d covers every element of a non-multiple shape and writes nothing outside."""
rng = np.random.default_rng(1)
a = rng.random((37, 45), dtype=np.float32)
b = rng.random((37, 45), dtype=np.float32)
out = launch_add_2d(a, b)
assert out.shape == a.shape, "launch_add_2d must return an array shaped like a"
np.testing.assert_allclose(out, a + b, err_msg="some elements are wrong or were never written")
traced = np.zeros_like(a)
try:  # the same launch, every access of every thread checked (3 × 3 blocks of 16 × 16 threads)
    microscope.trace(add_2d, (3, 3), (16, 16), a, b, traced)
except IndexError as err:
    raise AssertionError(f"a thread outside the array touched it: {err}") from None
np.testing.assert_allclose(traced, a + b, err_msg="add_2d computes something else than a + b")
### BEGIN HIDDEN TESTS
rng = np.random.default_rng(101)  # the grader's own inputs (the visible part's generator is the notebook's)
for shape, block in [((1, 1), (16, 16)), ((33, 17), (8, 8)), ((20, 70), (32, 4))]:
    a = rng.random(shape, dtype=np.float32)
    b = rng.random(shape, dtype=np.float32)
    got = call(launch_add_2d, a.copy(), b.copy(), block)  # on the learner's own thread, frozen to a plain array
    check(type(got) is np.ndarray and got.shape == a.shape and np.allclose(got, a + b))
    grid = (-(-shape[1] // block[0]) + 1, -(-shape[0] // block[1]) + 1)  # one block more each way
    traced = np.zeros_like(a)
    trace_launch(add_2d, grid, block, a.copy(), b.copy(), traced)  # a thread outside the arrays: refused
    check(np.allclose(traced, a + b))
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex4_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 4 · Which warp, which lane? (2 points)
#
# Write `warp_and_lane(tx, ty, block_x)`: for the thread `(threadIdx.x, threadIdx.y) = (tx, ty)`
# of a 2-D block that is `block_x` threads wide, return the pair `(warp, lane)`.
# Reference: in a 12-wide block, thread (4, 2) is linear thread 28: warp 0, lane 28.

# %% nbgrader={"grade": false, "grade_id": "ex4_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
def warp_and_lane(tx, ty, block_x):
    ### BEGIN SOLUTION
    linear = tx + ty * block_x
    return linear // 32, linear % 32
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex4_test", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Check that warp_and_lane numbers threads x-fastest."""
assert tuple(warp_and_lane(4, 2, 12)) == (0, 28)
assert tuple(warp_and_lane(0, 0, 32)) == (0, 0)
### BEGIN HIDDEN TESTS
cases = [(8, 2, 12, (1, 0)), (31, 0, 32, (0, 31)), (0, 1, 32, (1, 0)), (5, 7, 10, (2, 11))]
got = call_each(warp_and_lane, [case[:3] for case in cases])
for answer, case in zip(got, cases, strict=True):
    check(type(answer) in (tuple, list) and tuple(answer) == case[3])
### END HIDDEN TESTS
