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
# # Lab 03 · Coalescing: count sectors, fix layouts
#
# *About 45 minutes. Goes with lesson 03 "Memory coalescing".*
#
# How to work: fill in every cell that says `YOUR CODE HERE` (delete the `raise
# NotImplementedError()` line). Don't edit the test cells: they are locked and are graded
# again, with more hidden cases, after you submit. Run each test cell after your answer; a
# cell that runs without error has passed its visible checks. In JupyterLab,
# **Kernel → Restart Kernel and Run All Cells** before you submit, then use **Validate**.
#
# **A correct answer is not enough here.** Exercises 2 and 3 are graded twice: once for the
# result, and once for how your kernel touches memory. The grader runs your kernel under the
# microscope and checks that every warp request fetches the ideal number of 32-byte sectors
# (4 for 32 `float32` lanes). A kernel that gives the right numbers with scattered accesses
# loses the second part.
#
# Without a GPU the kernels run in Numba's CUDA simulator: results and sector counts are exact,
# timings are not measured here.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import numpy as np

from gpucourse.measure import runtime
from gpucourse.lessons.coalescing import drift_aos, drift_reference, make_particles, strided_copy, warp_figure
from gpucourse.tooling.grading import check
from gpucourse.microscope import trace
from gpucourse.microscope import profile

cuda = runtime.cuda
runtime.banner()

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 1 · Count the sectors (2 points)
#
# Write `count_sectors(byte_addresses)`: the byte addresses that the 32 lanes of one warp read
# (each the first byte of a 4-byte `float32`, measured from a 256-byte-aligned allocation).
# Return how many distinct 32-byte sectors the request touches. Sector `k` holds bytes
# `32·k … 32·k + 31`. Several lanes may read the same address.
#
# Reference: 32 neighbouring floats from byte 0 (`0, 4, 8, …, 124`) → 4 sectors. The picture
# shows a stride-2 request (lanes on top, fetched sectors below).

# %% nbgrader={"grade": false, "grade_id": "ex1_picture", "locked": true, "schema_version": 3, "solution": false, "task": false}
warp_figure(stride=2, offset=0, dtype="float32")

# %% nbgrader={"grade": false, "grade_id": "ex1_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
def count_sectors(byte_addresses):
    ### BEGIN SOLUTION
    return len({int(address) // 32 for address in byte_addresses})
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex1_test", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Check that count_sectors counts distinct 32-byte sectors."""
assert count_sectors(range(0, 128, 4)) == 4, "32 neighbouring floats from byte 0 fill 4 sectors"
assert count_sectors(range(0, 256, 8)) == 8, "stride 2: the request spans 256 bytes"
### BEGIN HIDDEN TESTS
FORBIDDEN = {"gpucourse.microscope.analysis:sectors": "it is the microscope's own sector count: count them yourself"}
cases = [
    (range(4, 132, 4), 5),  # misaligned by one float
    (range(0, 1024, 32), 32),  # stride 8: one sector per lane
    (range(0, 4096, 128), 32),  # stride 32
    ([100] * 32, 1),  # every lane reads the same float
    (list(range(124, -4, -4)), 4),  # lanes in reverse order
    (np.arange(32) * 12, 12),  # stride 3
    (np.arange(32) * 4 + 256, 4),  # aligned, further on
]
got = call_each(count_sectors, [(addresses,) for addresses, _ in cases])  # frozen, on the learner's thread
for answer, (_, expected) in zip(got, cases, strict=True):
    check(answer == expected)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 2 · From an array of structs to a struct of arrays (5 points)
#
# A simulation stores each particle as a struct of 8 `float32` fields, side by side
# (`particles` has shape `(n, 8)`; field `k` of particle `i` is `particles[i, k]`, in the order
# `x y z vx vy vz mass charge`). One step of the update moves each particle by its velocity:
# `x += vx·dt`, `y += vy·dt`, `z += vz·dt`. This is the given kernel:
#
# ```python
# @cuda.jit
# def drift_aos(p, dt):
#     i = cuda.grid(1)
#     if i < p.shape[0]:
#         p[i, 0] += p[i, 3] * dt
#         p[i, 1] += p[i, 4] * dt
#         p[i, 2] += p[i, 5] * dt
# ```
#
# The microscope shows what each of its accesses costs:

# %% nbgrader={"grade": false, "grade_id": "ex2_aos", "locked": true, "schema_version": 3, "solution": false, "task": false}
aos_report = trace(drift_aos, 2, 64, make_particles(128), 0.01)
aos_report.memory()[["line", "source", "op", "array", "requests", "sectors_per_request", "efficiency"]]

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_task", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Your task: store the particles as a **struct of arrays**, one row per field.
#
# 1. `to_soa(particles)` returns a `float32` array `soa` of shape `(8, n)` with
#    `soa[k, i] == particles[i, k]`: row `k` holds field `k` of every particle, and those `n`
#    floats must be **neighbours in memory**. Don't modify `particles`.
# 2. The kernel `drift_soa(soa, dt)` does the same update as `drift_aos` on that layout, one
#    thread per particle (1-D grid, bounds check). The tests launch it as
#    `drift_soa[blocks, 64](soa, dt)`.
#
# Points: 3 for the right positions, 2 for **4 sectors per request on every access**. Careful:
# an array can have the right shape and the wrong layout in memory.

# %% nbgrader={"grade": false, "grade_id": "ex2_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
def to_soa(particles):
    ### BEGIN SOLUTION
    return np.ascontiguousarray(particles.T)
    ### END SOLUTION


@cuda.jit
def drift_soa(soa, dt):
    ### BEGIN SOLUTION
    i = cuda.grid(1)
    if i < soa.shape[1]:
        soa[0, i] += soa[3, i] * dt
        soa[1, i] += soa[4, i] * dt
        soa[2, i] += soa[5, i] * dt
    ### END SOLUTION


# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_show_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Look at your kernel under the microscope (run this after your answer; it is not graded):

# %% nbgrader={"grade": false, "grade_id": "ex2_show", "locked": true, "schema_version": 3, "solution": false, "task": false}
soa_report = trace(drift_soa, 2, 64, to_soa(make_particles(128)), 0.01)
print(soa_report)
soa_report.memory()[["line", "source", "op", "array", "requests", "sectors_per_request", "efficiency"]]

# %% nbgrader={"grade": true, "grade_id": "ex2_result", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
"""Check that to_soa puts field k of every particle in row k and drift_soa moves every particle by v·dt."""
particles = make_particles(100, seed=3)
expected = drift_reference(particles, 0.01)
soa = to_soa(particles)
assert soa.shape == (8, 100) and soa.dtype == np.float32, "to_soa must return a float32 array of shape (8, n)"
np.testing.assert_array_equal(soa[4], particles[:, 4], err_msg="row 4 must hold field 4 (vy) of every particle")
drift_soa[2, 64](soa, 0.01)
np.testing.assert_allclose(soa[0:3].T, expected, rtol=1e-5, atol=1e-6,
                           err_msg="positions after one step are wrong")
### BEGIN HIDDEN TESTS
FORBIDDEN = {"gpucourse.lessons.coalescing.model:drift_reference": "it is the answer the grader compares with",
             "gpucourse.lessons.coalescing.model:to_soa": "it is lesson 03's own change of layout: write yours"}
for n, seed in [(1, 4), (64, 5), (257, 6)]:
    particles = make_particles(n, seed=seed)
    before = particles.copy()
    expected = drift_reference(particles, 0.02)
    handed = particles.copy()
    soa = call(to_soa, handed)  # on the learner's thread, frozen to a plain array (the grader's own)
    check(np.array_equal(handed, before))  # to_soa leaves its input alone
    check(soa.shape == (8, n) and np.array_equal(soa[3:], before[:, 3:].T))
    launch(drift_soa, (n + 63) // 64, 64, soa, 0.02)
    check(np.allclose(soa[0:3].T, expected, rtol=1e-5, atol=1e-6))
    check(np.array_equal(soa[3:], before[:, 3:].T))
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "ex2_coalesced", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Check that every access of drift_soa is coalesced: 4 sectors per warp request (ideal for float32)."""
particles = make_particles(128, seed=7)
expected = drift_reference(particles, 0.01)
soa = to_soa(particles)
report = trace(drift_soa, 2, 64, soa, 0.01)
table = report.memory()
assert table.sectors_per_request.max() <= 4, (
    "some warp requests of drift_soa fetch more than 4 sectors: are the n floats of each row of soa "
    "really neighbours in memory? (a transpose changes the shape, not where the bytes are)")
### BEGIN HIDDEN TESTS
# the learner's own layout was traced above (`table`: bound after the kernel ran); the values and the
# requests are judged again on the grader's inputs, traced on the learner's thread
check((table.sectors_per_request == 4).all())
particles = make_particles(128, seed=8)
expected = drift_reference(particles, 0.01)
soa = call(to_soa, particles.copy())
report = observe(drift_soa, 2, 64, soa, 0.01)
check(np.allclose(soa[0:3].T, expected, rtol=1e-5, atol=1e-6))
check(report.requests().query("op == 'load'").shape[0] >= 6 * 4)  # 6 loads × 4 warps
check(report.requests().query("op == 'store'").shape[0] >= 3 * 4)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 3 · Fix a column-wise traversal (5 points)
#
# Each row of a `float32` matrix `a` (shape `(rows, cols)`, C order: a row is contiguous) is
# scaled by its weight: `out[r, c] = a[r, c] * w[r]` (NumPy: `out = a * w[:, None]`). This
# kernel is correct, but its warps walk **down columns**: `cuda.grid(2)` gives `(x, y)`, and
# `x` picks the row, so the 32 lanes of a warp read elements a whole row apart.
#
# ```python
# @cuda.jit
# def scale_rows_slow(a, w, out):
#     row, col = cuda.grid(2)          # x → row: neighbouring lanes are a row apart
#     if row < a.shape[0] and col < a.shape[1]:
#         out[row, col] = a[row, col] * w[row]
#
# def launch_config_slow(shape, block=(32, 8)):
#     rows, cols = shape
#     return ((rows + block[0] - 1) // block[0], (cols + block[1] - 1) // block[1]), block
# ```
#
# Write `scale_rows(a, w, out)` (same result, one thread per element, keep the parameter names)
# so that neighbouring lanes of a warp touch neighbouring elements, and
# `launch_config(shape, block=(32, 8))`, which returns `(grid, block)` covering every element for
# your kernel. The tests launch `scale_rows[grid, block](a, w, out)` with your configuration.
#
# Points: 3 for the right result, 2 for **4 sectors per request** on `a` and `out` (reading
# `w[row]` may cost less: lanes that read the same weight share one sector).

# %% nbgrader={"grade": false, "grade_id": "ex3_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
@cuda.jit
def scale_rows(a, w, out):
    ### BEGIN SOLUTION
    col, row = cuda.grid(2)
    if row < a.shape[0] and col < a.shape[1]:
        out[row, col] = a[row, col] * w[row]
    ### END SOLUTION


def launch_config(shape, block=(32, 8)):
    ### BEGIN SOLUTION
    rows, cols = shape
    return ((cols + block[0] - 1) // block[0], (rows + block[1] - 1) // block[1]), block
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "ex3_launch", "locked": true, "schema_version": 3, "solution": false, "task": false}
def launch_scale_rows(a, w):
    """Run your kernel with your launch configuration; returns out."""
    out = np.full_like(a, np.nan)
    grid, block = launch_config(a.shape)
    scale_rows[grid, block](a, w, out)
    return out


# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_show_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Your kernel under the microscope (not graded): the table lists each access, and the picture
# shows warp 0's request on `a`.

# %% nbgrader={"grade": false, "grade_id": "ex3_show", "locked": true, "schema_version": 3, "solution": false, "task": false}
a_demo = np.arange(32 * 64, dtype=np.float32).reshape(32, 64)
w_demo = np.linspace(1, 2, 32, dtype=np.float32)
out_demo = np.zeros_like(a_demo)
scale_report = trace(scale_rows, *launch_config(a_demo.shape), a_demo, w_demo, out_demo)
display(scale_report.memory()[["line", "source", "op", "array", "requests", "sectors_per_request"]])
scale_report.picture_sectors(array="a", warp=0)

# %% nbgrader={"grade": true, "grade_id": "ex3_result", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
"""Check that scale_rows with launch_config scales every row of a non-square matrix."""
rng = np.random.default_rng(1)
a = rng.random((37, 45), dtype=np.float32)
w = rng.random(37, dtype=np.float32)
np.testing.assert_allclose(launch_scale_rows(a, w), a * w[:, None], rtol=1e-6,
                           err_msg="some elements are wrong or were never written")
### BEGIN HIDDEN TESTS
for shape in [(1, 1), (20, 9), (9, 70), (33, 17)]:
    a = rng.random(shape, dtype=np.float32)
    w = rng.random(shape[0], dtype=np.float32)
    got = call(launch_scale_rows, a.copy(), w.copy())
    check(lambda got=got, a=a, w=w: np.allclose(got, a * w[:, None], rtol=1e-6))
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "ex3_coalesced", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Check that scale_rows reads a and writes out with 4 sectors per warp request (ideal for float32)."""
rng = np.random.default_rng(2)
a = rng.random((32, 64), dtype=np.float32)
w = rng.random(32, dtype=np.float32)
out = np.full_like(a, np.nan)
report = trace(scale_rows, *launch_config(a.shape), a, w, out)
assert report.sectors_per_request(array="a") <= 4, (
    "warp requests on `a` fetch more than 4 sectors: do neighbouring lanes (threadIdx.x) read neighbouring "
    "elements of a row?")
### BEGIN HIDDEN TESTS
# on the grader's own inputs (the kernel above could write a and w), traced on the learner's thread
a = np.random.default_rng(12).random((32, 64), dtype=np.float32)
w = np.random.default_rng(13).random(32, dtype=np.float32)
out = np.full_like(a, np.nan)
grid, block = call(launch_config, a.shape)
report = observe(scale_rows, grid, block, a.copy(), w.copy(), out)
check(np.allclose(out, a * w[:, None], rtol=1e-6))
check(report.sectors_per_request(array="a") == 4)
check(report.sectors_per_request(array="out") == 4)
check((report.memory().sectors_per_request <= 4).all())
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex4_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 4 · Predict, then read a profiler's metric (3 points)
#
# On a GPU, Nsight Compute (`ncu`) reports what this lab counts under its own names: a warp's global
# load is a *request* (`l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum`), and the 32-byte pieces it
# fetched are *sectors* (`l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum`). The microscope's
# `profile(kernel, grid, block, *args)` reports a simulated launch under the same names, and
# `p.value(name)` reads one of them.
#
# **Predict first.** Lesson 03's `strided_copy` copies `float32` element `i · stride + offset` for
# thread `i`. With **stride 4** and offset 0, how many sectors does one warp's load request fetch?
# Write your number below before you run the next cell.

# %% nbgrader={"grade": false, "grade_id": "ex4_predict", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
predicted_sectors_per_request = 16
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ex4_prediction", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""Check that the prediction is a number of sectors per request for the stride-4 float32 copy."""
assert isinstance(predicted_sectors_per_request, (int, float)) and 1 <= predicted_sectors_per_request <= 32, (
    "predict a number of sectors between 1 and 32")
### BEGIN HIDDEN TESTS
check(freeze(predicted_sectors_per_request, "predicted_sectors_per_request") == 16)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex4_show_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Now the report of that launch (2 blocks of 64 threads), the global-memory rows under ncu's names:

# %% nbgrader={"grade": false, "grade_id": "ex4_show", "locked": true, "schema_version": 3, "solution": false, "task": false}
stride4 = profile(strided_copy, 2, 64, np.arange(512, dtype=np.float32), np.zeros(512, dtype=np.float32), 128, 4, 0)
stride4.table("global")[["metric", "label", "microscope", "unit"]]

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex4_read_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Write `load_sectors_per_request(p)`: for any profile `p`, the sectors per request of its **global
# loads** (not its stores), read from `p` by ncu's metric names. This is the number to look for when
# you profile your own kernel with `ncu --metrics l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,...`.

# %% nbgrader={"grade": false, "grade_id": "ex4_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
def load_sectors_per_request(p):
    ### BEGIN SOLUTION
    return (p.value("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum")
            / p.value("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"))
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex4_read", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Check that load_sectors_per_request reads global-load sectors per request from a profile."""
stride1 = profile(strided_copy, 2, 64, np.arange(128, dtype=np.float32), np.zeros(128, dtype=np.float32), 128, 1, 0)
assert load_sectors_per_request(stride1) == 4, "a stride-1 float32 copy loads 4 sectors per request"
### BEGIN HIDDEN TESTS
def _copy_profile(stride, offset):
    span = 128 * stride + offset
    return profile(strided_copy, 2, 64, np.arange(span, dtype=np.float32), np.zeros(span, dtype=np.float32),
                   128, stride, offset)


@cuda.jit
def _gather(src, dst, stride):  # strided loads, coalesced stores
    i = cuda.grid(1)
    if i < dst.shape[0]:
        dst[i] = src[i * stride]


gathered = profile(_gather, 2, 64, np.arange(128 * 8, dtype=np.float32), np.zeros(128, dtype=np.float32), 8)
# the grader's profiles (plain data: a profile's report keeps no kernel), read by the learner on its thread
profiles = [_copy_profile(4, 0), _copy_profile(1, 1), _copy_profile(32, 0), gathered]
got = call_each(load_sectors_per_request, [(p,) for p in profiles])
for answer, expected in zip(got, [16, 5, 32, 32], strict=True):
    check(answer == expected)
### END HIDDEN TESTS
