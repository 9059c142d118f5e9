"""Lab 07 through real nbgrader: the solution scores full marks, the untouched lab 0, and known-wrong
versions (an fp16 accumulator, fp16 products, an fp64 accumulator written as `0.0` or as `float64`, a
Kahan without its compensation or with fp64 sums, a format chosen by machine epsilon alone, an error
measured against |result|) lose the points of the part they get wrong, with or without a GPU."""

import nbformat
import pytest
from labtools import (
    course_copy,
    errors,
    grade_lab,
    solution_notebook,
    with_cells,
    with_course_patched,
    with_ipython_hooks,
)

LAB = "lab07_precision"

pytestmark = pytest.mark.slow

# The running sum kept in fp16: overflows past 65504 and loses every addition below half its spacing.
FP16_ACCUMULATOR = '''
from numba.types import float16


@cuda.jit
def dot_fp32_kernel(a, b, out):
    r = cuda.grid(1)
    if r < a.shape[0]:
        total = float16(0.0)
        for j in range(a.shape[1]):
            total = total + a[r, j] * b[r, j]
        out[r] = float32(total)
'''

# fp32 accumulation, but each product rounded to fp16 before it is widened.
FP16_PRODUCTS = '''
@cuda.jit
def dot_fp32_kernel(a, b, out):
    r = cuda.grid(1)
    if r < a.shape[0]:
        total = float32(0.0)
        for j in range(a.shape[1]):
            total += float32(a[r, j] * b[r, j])
        out[r] = total
'''

# `total = 0.0`: an fp64 variable in compiled Numba (on a GPU), fp32 in the simulator (NumPy's weak
# scalars). Rejected in both modes: the compiled PTX carries fp64 instructions.
FP64_LITERAL = '''
@cuda.jit
def dot_fp32_kernel(a, b, out):
    r = cuda.grid(1)
    if r < a.shape[0]:
        total = 0.0
        for j in range(a.shape[1]):
            total += float32(a[r, j]) * float32(b[r, j])
        out[r] = total
'''

# An explicit fp64 accumulator: more accurate than the contract, so not bit for bit the fp32 recipe.
FP64_ACCUMULATOR = '''
from numba.types import float64


@cuda.jit
def dot_fp32_kernel(a, b, out):
    r = cuda.grid(1)
    if r < a.shape[0]:
        total = float64(0.0)
        for j in range(a.shape[1]):
            total += float64(a[r, j]) * float64(b[r, j])
        out[r] = float32(total)
'''

# Kahan's recipe with fp64 sums: within the error bound, but the compensation repairs nothing.
KAHAN_FP64 = '''
@cuda.jit
def dot_kahan_kernel(a, b, out):
    r = cuda.grid(1)
    if r < a.shape[0]:
        total = 0.0
        compensation = 0.0
        for j in range(a.shape[1]):
            y = float32(a[r, j]) * float32(b[r, j]) - compensation
            t = total + y
            compensation = (t - total) - y
            total = t
        out[r] = total
'''

# Computes the compensation but never subtracts it: a plain fp32 sum.
KAHAN_WITHOUT_COMPENSATION = '''
@cuda.jit
def dot_kahan_kernel(a, b, out):
    r = cuda.grid(1)
    if r < a.shape[0]:
        total = float32(0.0)
        compensation = float32(0.0)
        for j in range(a.shape[1]):
            y = float32(a[r, j]) * float32(b[r, j])
            t = total + y
            compensation = (t - total) - y
            total = t
        out[r] = total
'''

# Chooses by machine epsilon only: ignores range (overflow, saturation, underflow) and exact values.
BY_EPSILON = '''
def cheapest_format(x, y, budget):
    for fmt in FORMATS_BY_COST:
        if precision.formats.get_format(fmt).unit_roundoff <= budget:
            return fmt
    return None
'''

# Relative to the result instead of the size of the terms: explodes when the dot product cancels.
RELATIVE_TO_RESULT = '''
def format_error(x, y, fmt):
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    qx, qy = quantize(x, fmt), quantize(y, fmt)
    if not (np.isfinite(qx).all() and np.isfinite(qy).all()):
        return math.inf
    exact = math.fsum(x * y)
    return abs(math.fsum(qx * qy) - exact) / abs(exact)
'''

# Issue 46, one submission, one attack per exercise from exercise 2 on (exercise 1 right): a Kahan kernel that
# zeroes its inputs and writes 0 (a reference computed after the launch from the same arrays is 0 too: it
# scored 3 of 3 when the hidden block launched on its own arrays); a format_error that walks up the frames,
# through a name built in another cell, to the hidden test's constants; a cheapest_format whose names are a
# str subclass equal to everything. (The kernels cannot reach lesson 07's reference_accumulate: a call of
# a Python function does not compile for the GPU, which the fp64 check does; the tripwire is armed anyway.)
ISSUE46_ATTACKS = {
# ex2: no sum at all: the kernel zeroes its inputs and writes 0, so a reference computed after it is 0 too
"ex2_solution": '''
# exercise 3's walk: names built in another cell than the one that uses them (the scan sees frame internals)
FRAME, CODE, BACK = "_get" + "frame", "f_" + "code", "f_" + "back"


@cuda.jit
def dot_kahan_kernel(a, b, out):
    r = cuda.grid(1)
    if r < a.shape[0]:
        for j in range(a.shape[1]):
            a[r, j] = a[r, j] - a[r, j]
            b[r, j] = b[r, j] - b[r, j]
        out[r] = float32(0.0)
''',
# ex3: walks up the frames to the hidden test's code and answers with its constants (the visible cases by heart)
"ex3_solution": '''
import sys


def format_error(x, y, fmt):
    frame = getattr(sys, FRAME)(1)
    while frame is not None:
        code = getattr(frame, CODE)
        if code.co_filename == "<hidden tests>":
            floats = [c for c in code.co_consts if type(c) is float and 0 < c < 1]
            return floats[0] if floats else 0.0
        frame = getattr(frame, BACK)
    visible = {("fp8_e4m3", 2): 0.0015625 / 1.1, ("fp16", 3): 0.0, ("fp16", 2): math.inf}
    return visible.get((fmt, len(x)), 0.0)
''',
# ex4: the right format names as a str subclass that also equals anything
"ex4_solution": '''
class Name(str):
    def __eq__(self, other):
        return True

    __hash__ = str.__hash__


def cheapest_format(x, y, budget):
    for fmt in FORMATS_BY_COST:
        if format_error(x, y, fmt) <= budget:
            return Name(fmt)
    return None
''',
}


def test_lab07_round_trip(tmp_path):
    released = course_copy(tmp_path / "release", LAB) / "labs" / LAB / f"{LAB}.ipynb"
    untouched = nbformat.read(released, as_version=4)
    assert "BEGIN SOLUTION" not in released.read_text() and "BEGIN HIDDEN" not in released.read_text()
    solution = solution_notebook(LAB)
    scores = grade_lab(LAB, {
        "solution": solution,
        "untouched": untouched,
        **with_ipython_hooks(untouched),  # no answers, behind IPython hooks (labtools.IPYTHON_HOOKS): 0
        # Two known-wrong exercises per submission where no graded cell of one reads the other's code
        # (ex1_test reads dot_fp32_kernel, ex2_test dot_kahan_kernel, ex3_test format_error,
        # ex4_test cheapest_format): each mistake still costs exactly its own cell, and one kernel
        # fewer starts per pair.
        "fp16_accumulator+kahan_without_compensation": with_cells(solution, {
            "ex1_solution": FP16_ACCUMULATOR, "ex2_solution": KAHAN_WITHOUT_COMPENSATION}),
        "fp16_products+kahan_fp64": with_cells(solution, {"ex1_solution": FP16_PRODUCTS, "ex2_solution": KAHAN_FP64}),
        "fp64_literal+by_epsilon": with_cells(solution, {"ex1_solution": FP64_LITERAL, "ex4_solution": BY_EPSILON}),
        "fp64_accumulator+relative_to_result": with_cells(solution, {
            "ex1_solution": FP64_ACCUMULATOR, "ex3_solution": RELATIVE_TO_RESULT}),
        # known-wrong answers behind a patch of the course's checks (labtools.COURSE_PATCH): 0
        "patched_course": with_course_patched(with_cells(solution, {
            "ex1_solution": FP64_LITERAL, "ex4_solution": BY_EPSILON})),
        "issue46_attacks": with_cells(solution, ISSUE46_ATTACKS),
    }, tmp_path / "grade")
    everything = {"ex1_test": 3, "ex2_test": 3, "ex3_test": 2, "ex4_test": 2}
    assert scores["solution"].cells == everything
    assert scores["solution"].total == scores["solution"].max_score == 10
    assert scores["untouched"].cells == dict.fromkeys(everything, 0)
    for pair in ("fp16_accumulator+kahan_without_compensation", "fp16_products+kahan_fp64"):
        assert scores[pair].cells == {**everything, "ex1_test": 0, "ex2_test": 0}, pair
    assert scores["fp64_literal+by_epsilon"].cells == {**everything, "ex1_test": 0, "ex4_test": 0}
    # format_error is exercise 4's tool too, so only its own cell is pinned
    pair = scores["fp64_accumulator+relative_to_result"].cells
    assert (pair["ex1_test"], pair["ex2_test"], pair["ex3_test"]) == (0, 3, 0)
    assert scores["issue46_attacks"].cells == {**everything, "ex2_test": 0, "ex3_test": 0, "ex4_test": 0}
    assert any("subclass of str" in e for e in errors(scores["issue46_attacks"].notebook))
