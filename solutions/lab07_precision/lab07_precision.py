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
# # Lab 07 · Precision budgets
#
# *About 45 minutes. Goes with lesson 07 "Mixed precision and tensor cores".*
#
# Tensor cores read fp16 (or bf16, fp8) inputs and usually **accumulate at about fp32 width** (fp16
# and fp8 inputs may also be given an fp16 accumulator, and the hardware's fp32-wide sum is not a
# sequence of IEEE fp32 additions: lesson 07's Explain). You will write the fp32-accumulation
# contract yourself as a Numba kernel, then make the accumulation exact enough for an adversarial
# input with Kahan's compensated summation, and finally choose the cheapest number format that
# meets an error budget.
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
import math
import re

import numpy as np

from gpucourse.lessons import precision
from gpucourse.measure import ptxinfo, runtime
from gpucourse.lessons.precision.formats import quantize
from gpucourse.tooling.grading import check
from numba.types import float32  # after gpucourse, which chooses GPU or simulator before numba loads

cuda = runtime.cuda


def batched_dot(kernel, a, b):
    """Launch ``kernel`` with one thread per row: out[r] = a[r] · b[r]; returns float64 results."""
    out = np.full(a.shape[0], np.nan, dtype=np.float32)  # poisoned: a row never written stays NaN
    kernel[(a.shape[0] + 31) // 32, 32](a, b, out)
    return out.astype(np.float64)


def dot_error(out, a, b):
    """Per row: |computed − exact| / Σ|a_i·b_i| (the normwise error of a dot product)."""
    return precision.dot_errors(out, a, b)


def fp32_reference(a, b, *, kahan=False):
    """The recipe of exercise 1 (or, with kahan=True, of exercise 2) in NumPy: each row's sum
    sequential in fp32, all rows at once. Every step is one IEEE fp32 rounding, as on a GPU."""
    total = np.zeros(a.shape[0], dtype=np.float32)
    compensation = np.zeros(a.shape[0], dtype=np.float32)
    for j in range(a.shape[1]):
        product = a[:, j].astype(np.float32) * b[:, j].astype(np.float32)  # exact: 11 × 11 bits
        if kahan:
            y = product - compensation
            t = total + y
            compensation = (t - total) - y
            total = t
        else:
            total = total + product
    return total.astype(np.float64)


KERNEL_SIGNATURE = "void(float16[:, :], float16[:, :], float32[:])"


def float64_instructions(kernel):
    """The fp64 instructions in the kernel's compiled PTX: the same with or without a GPU. (In the
    simulator `total = 0.0` adds in fp32 like NumPy; compiled for a GPU it is an fp64 variable.)"""
    [compiled] = ptxinfo.compile_ptx([(kernel, KERNEL_SIGNATURE)])
    if "ptx" not in compiled:
        raise RuntimeError(f"could not compile the kernel: {compiled.get('error')}")
    return sorted(set(re.findall(r"\b[a-z]+(?:\.[a-z0-9]+)*\.f64\b", compiled["ptx"])))


U32 = 2.0**-24  # fp32's unit roundoff: the largest relative error of one rounding
runtime.banner()

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 1 · fp16 inputs, fp32 accumulation (3 points)
#
# Write the kernel `dot_fp32_kernel(a, b, out)`. `a` and `b` are float16 arrays of shape
# `(rows, n)`; thread `r` (its global index, `cuda.grid(1)`) computes the dot product of row `r`
# and stores it in `out[r]` (float32). Rows beyond `a.shape[0]` must do nothing.
#
# The rule is the tensor-core contract: widen each input to fp32 **before** multiplying
# (`float32(a[r, j])`; the product of two fp16 values is then exact in fp32), and keep the running
# sum in an fp32 variable that starts as `float32(0.0)`. NumPy reference for one row:
#
# ```python
# total = np.float32(0)
# for j in range(n):
#     total = total + np.float32(a[r, j]) * np.float32(b[r, j])
# ```
#
# An fp16 running sum would overflow beyond 65504 and stop growing once its spacing exceeds the
# terms (lesson 07); an fp64 one is more accurate but is not the contract. Each step of the
# recipe is one IEEE fp32 rounding, so the tests require your results **bit for bit** equal to
# `fp32_reference(a, b)` (the setup cell), and no fp64 instruction in your compiled kernel: in
# compiled Numba `total = 0.0` is an fp64 variable (the simulator would add it in fp32), so write
# `float32(0.0)`.

# %% nbgrader={"grade": false, "grade_id": "ex1_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
@cuda.jit
def dot_fp32_kernel(a, b, out):
    ### BEGIN SOLUTION
    r = cuda.grid(1)
    if r < a.shape[0]:
        total = float32(0.0)
        for j in range(a.shape[1]):
            total += float32(a[r, j]) * float32(b[r, j])
        out[r] = total
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex1_test", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
"""Check that dot_fp32_kernel writes every row and accumulates in fp32."""
a, b = precision.dot_inputs("normal", rows=4, n=2048, seed=0)
out = batched_dot(dot_fp32_kernel, a, b)
assert not np.isnan(out).any(), "some rows were never written"
assert (dot_error(out, a, b) <= 2048 * U32).all(), "the error is larger than fp32 accumulation allows"
big = np.full((2, 8), 255.0, dtype=np.float16)  # each product 65025: the sum passes fp16's 65504
assert np.allclose(batched_dot(dot_fp32_kernel, big, big), 8 * 65025.0), "the sum of 8 × 65025 overflowed"
assert (out == fp32_reference(a, b)).all(), "not bit for bit the fp32 recipe: widen, multiply, add in fp32"
assert not float64_instructions(dot_fp32_kernel), "fp64 in the compiled kernel: is `total` a float32?"
### BEGIN HIDDEN TESTS
FORBIDDEN = {"gpucourse.lessons.precision.model:reference_accumulate": "the lesson's reference_accumulate is the "
             "running sum this exercise asks you to write",
             "gpucourse.lessons.precision.model:accumulate": "the lesson's accumulate runs its own summing kernels"}
check(call(float64_instructions, dot_fp32_kernel) == [])  # compiled on the learner's own thread
cases = [precision.dot_inputs("normal", rows=rows, n=n, seed=seed) for rows, n, seed in [(37, 300, 11), (1, 1, 12),
                                                                                         (3, 4096, 13)]]
rng = np.random.default_rng(14)
cases.append(((rng.random((5, 512)) * 0.01).astype(np.float16), (rng.random((5, 512)) * 0.01).astype(np.float16)))
big = np.full((1, 40), 250.0, dtype=np.float16)
cases.append((big, -big))  # -40 × 62500, past fp16's range
cases.append(precision.dot_inputs("adversarial", rows=3, n=1000))  # fp32 loses the small products: so must you
for a, b in cases:
    out = np.full(a.shape[0], np.nan, dtype=np.float32)  # poisoned: a row never written stays NaN
    launch(dot_fp32_kernel, (a.shape[0] + 31) // 32, 32, a.copy(), b.copy(), out)
    check(not np.isnan(out).any() and (out.astype(np.float64) == fp32_reference(a, b)).all())
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 2 · Kahan's compensated sum (3 points)
#
# fp32 accumulation is not always enough. Take one product of 1 followed by many products of
# 2^-24: each small term is exactly half of fp32's spacing just above 1, so `1 + 2^-24` is a tie
# and rounds to even — back to 1. A plain fp32 sum of 4096 such terms never leaves 1.
#
# Write `dot_kahan_kernel(a, b, out)`, the same dot product with **Kahan's compensation**: keep a
# second fp32 variable `compensation` (start at 0) holding what the last addition lost, and for
# each product `p`:
#
# ```
# y = p - compensation
# t = total + y
# compensation = (t - total) - y   # algebraically 0; in fp32, minus the part of y that t lost
# total = t
# ```
#
# Kahan's bound is about 2u of Σ|a·b|, independent of n. The recipe is sequential and every step
# one fp32 rounding, so the tests require your results bit for bit equal to
# `fp32_reference(a, b, kahan=True)`, and no fp64 instruction in the compiled kernel (an fp64
# total would hide the very loss the compensation repairs). The picture after the cell compares
# your two kernels on that input.

# %% nbgrader={"grade": false, "grade_id": "ex2_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
@cuda.jit
def dot_kahan_kernel(a, b, out):
    ### BEGIN SOLUTION
    r = cuda.grid(1)
    if r < a.shape[0]:
        total = float32(0.0)
        compensation = float32(0.0)
        for j in range(a.shape[1]):
            y = float32(a[r, j]) * float32(b[r, j]) - compensation
            t = total + y
            compensation = (t - total) - y
            total = t
        out[r] = total
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "ex2_show", "locked": true, "schema_version": 3, "solution": false, "task": false}
precision.dot_errors_figure({
    "fp32 accumulation (exercise 1)": lambda a, b: batched_dot(dot_fp32_kernel, a, b),
    "Kahan (exercise 2)": lambda a, b: batched_dot(dot_kahan_kernel, a, b),
}, kind="adversarial", ns=(64, 512, 4096), rows=2)

# %% nbgrader={"grade": true, "grade_id": "ex2_test", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
"""Check that dot_kahan_kernel keeps its error near fp32's unit roundoff, whatever n is."""
a, b = precision.dot_inputs("adversarial", rows=3, n=2048)
out = batched_dot(dot_kahan_kernel, a, b)
assert not np.isnan(out).any(), "some rows were never written"
assert (dot_error(out, a, b) <= 4 * U32).all(), "the small products were lost: is the compensation applied?"
assert (out == fp32_reference(a, b, kahan=True)).all(), "not bit for bit the fp32 Kahan recipe"
a, b = precision.dot_inputs("normal", rows=3, n=2048, seed=1)
assert (batched_dot(dot_kahan_kernel, a, b) == fp32_reference(a, b, kahan=True)).all()
assert not float64_instructions(dot_kahan_kernel), "fp64 in the compiled kernel: are both sums float32?"
### BEGIN HIDDEN TESTS
FORBIDDEN = {"gpucourse.lessons.precision.model:reference_accumulate": "the lesson's reference_accumulate is the "
             "running sum this exercise asks you to write",
             "gpucourse.lessons.precision.model:accumulate": "the lesson's accumulate runs its own summing kernels"}
check(call(float64_instructions, dot_kahan_kernel) == [])
a, b = precision.dot_inputs("adversarial", rows=37, n=4096)
a[:, [0, 2000]] = a[:, [2000, 0]]  # the large product in the middle of the row
b[:, [0, 2000]] = b[:, [2000, 0]]
cases = [(a, b)]
small = np.full((2, 3000), 2.0**-5, dtype=np.float16)  # products 2^-10 after one of 40000
small[:, 0] = 200.0
neg = small.copy()
neg[:, 1:] *= -1
cases += [(small, small), (small, neg)]
cases += [precision.dot_inputs("normal", rows=rows, n=n, seed=seed) for rows, n, seed in [(1, 1, 5), (37, 300, 6)]]
for a, b in cases:
    out = np.full(a.shape[0], np.nan, dtype=np.float32)
    launch(dot_kahan_kernel, (a.shape[0] + 31) // 32, 32, a.copy(), b.copy(), out)
    check(not np.isnan(out).any() and (out.astype(np.float64) == fp32_reference(a, b, kahan=True)).all())
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 3 · The error of a format (2 points)
#
# On tensor cores the inputs of a dot product are **stored** in a low-precision format and the
# products are usually accumulated at about fp32 width (not always: lesson 07's Explain). Here we
# treat that accumulation as exact, so the only error is the rounding of the inputs. Write `format_error(x, y, fmt)` for float64 vectors `x`, `y`:
#
# 1. store both in `fmt` with `quantize(x, fmt)` (from `gpucourse.lessons.precision.formats`: the exact value
#    each format keeps, including overflow to `inf` and fp8 E4M3's saturation at ±448);
# 2. if any stored value is not finite, return `math.inf`;
# 3. otherwise return `|Σ qx·qy − Σ x·y| / Σ|x·y|`, each sum computed exactly with `math.fsum`.
#
# The denominator is the size of the terms, not of the result: a dot product that cancels to
# nearly 0 would otherwise have an enormous "relative" error however good its inputs were.
# Reference: `format_error([1.0, 0.1], [1.0, 1.0], "fp8_e4m3")` — 0.1 is stored as 0.1015625, so
# the error is 0.0015625 / 1.1 ≈ 0.00142.

# %% nbgrader={"grade": false, "grade_id": "ex3_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
def format_error(x, y, fmt):
    ### BEGIN SOLUTION
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    qx, qy = quantize(x, fmt), quantize(y, fmt)
    if not (np.isfinite(qx).all() and np.isfinite(qy).all()):
        return math.inf
    return abs(math.fsum(qx * qy) - math.fsum(x * y)) / math.fsum(np.abs(x * y))
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex3_test", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Check that format_error measures input rounding against the size of the terms."""
assert math.isclose(format_error([1.0, 0.1], [1.0, 1.0], "fp8_e4m3"), 0.0015625 / 1.1, rel_tol=1e-12)
assert format_error([3.0, -2.0, 0.5], [1.0, 4.0, 2.0], "fp16") == 0.0, "small integers and halves are exact"
assert format_error([1e5, 1.0], [1.0, 1.0], "fp16") == math.inf, "1e5 overflows fp16"
### BEGIN HIDDEN TESTS
got = call_each(format_error, [([1.0, 1.001], [1.0, -1.0], "bf16"), ([1e5, 1.0], [1.0, 1.0], "fp8_e5m2"),
                               ([1e5], [1.0], "fp8_e4m3"), ([1e-9, 1e-9], [1.0, 1.0], "fp16"),
                               (np.arange(1.0, 9.0), np.ones(8), "fp8_e5m2")])  # frozen: plain numbers
check(math.isclose(got[0], 0.001 / 2.001, rel_tol=1e-9))
check(got[1] == math.inf)
check(math.isclose(got[2], (1e5 - 448) / 1e5, rel_tol=1e-12))
check(math.isclose(got[3], 1.0))  # both underflow to 0
check(got[4] == 0.0)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex4_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 4 · The cheapest format that meets a budget (2 points)
#
# The formats, cheapest first (fewest bytes moved, then the highest tensor-core rate on an
# H100/H200: FP8 1978.9, BF16/FP16 989.4, TF32 494.7, FP32 67 dense TFLOP/s). Where two
# formats cost the same, the list fixes the order:

# %% nbgrader={"grade": false, "grade_id": "ex4_formats", "locked": true, "schema_version": 3, "solution": false, "task": false}
FORMATS_BY_COST = ["fp8_e4m3", "fp8_e5m2", "bf16", "fp16", "tf32", "fp32"]

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex4_spec2", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Write `cheapest_format(x, y, budget)`: the first format of `FORMATS_BY_COST` whose
# `format_error(x, y, fmt)` is at most `budget`, or `None` if none is. Watch out: a format with
# a small machine epsilon can still fail (its range may not hold the values), and a format with a
# large epsilon can pass (the values may be exactly representable).

# %% nbgrader={"grade": false, "grade_id": "ex4_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
def cheapest_format(x, y, budget):
    ### BEGIN SOLUTION
    for fmt in FORMATS_BY_COST:
        if format_error(x, y, fmt) <= budget:
            return fmt
    return None
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex4_test", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Check that cheapest_format picks the first affordable format that meets the budget."""
rng = np.random.default_rng(0)
x, y = rng.standard_normal(1000), rng.standard_normal(1000)
assert cheapest_format(x, y, 1e-2) == "fp8_e4m3"
assert cheapest_format(x, y, 1e-3) == "bf16"
assert cheapest_format(x, y, 1e-5) == "fp16"
rng = np.random.default_rng(7)
big = 1e5 * rng.standard_normal(500), rng.standard_normal(500)
assert cheapest_format(*big, 1e-3) == "bf16"
assert cheapest_format(*big, 1e-6) == "tf32", "fp16 has the precision but not the range"
### BEGIN HIDDEN TESTS
rng = np.random.default_rng(7)
rng.standard_normal(1000)  # skip the draws of the visible "big" case
tiny = 1e-6 * rng.standard_normal(500), rng.standard_normal(500)
ints = rng.integers(-8, 9, 300).astype(float), rng.integers(-8, 9, 300).astype(float)
powers = 2.0 ** np.arange(16) * np.where(np.arange(16) % 3, 1, -1), np.where(np.arange(16) % 2, 1.0, -1.0)
rng = np.random.default_rng(1)
x, y = rng.standard_normal(1000), rng.standard_normal(1000)
cases = [(*tiny, 1e-4), (*tiny, 1e-5), (*ints, 0.0), (*powers, 0.0), (x, y, 1e-8), (x, y, 0.0),
         ([1.0, 0.1, 1 / 3, -0.7], [1.0, 1.0, 3.0, 2.0], 5e-4)]
got = call_each(cheapest_format, [(np.array(x), np.array(y), budget) for x, y, budget in cases])  # copies each
# E5M2 is exact on the powers of two; E4M3 saturates above 448
check(got == ["bf16", "tf32", "fp8_e4m3", "fp8_e5m2", "fp32", None, "fp16"])
### END HIDDEN TESTS
