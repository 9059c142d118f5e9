"""Lab 02 through real nbgrader: the solution scores full marks, the untouched lab 0, and known-wrong
versions lose exactly the points of the part they get wrong — including kernels that are sorted but
give the wrong answer, and kernels that give the right answer but still diverge (or dodge
divergence by computing both paths in every lane)."""

import pytest
from labtools import (
    SILENCE_THE_GRADER,
    cell_output,
    grade_lab,
    release_notebook,
    solution_notebook,
    with_cells,
    with_course_patched,
    with_ipython_hooks,
)

LAB = "lab02_divergence"

pytestmark = pytest.mark.slow

COST_PER_LANE = '''
def warp_cost(takes_a, cost_a, cost_b):
    return int(sum(cost_a if a else cost_b for a in takes_a))
'''

STILL_DIVERGENT_PARITY = '''
@cuda.jit
def parity_agree(x, out):
    i = cuda.grid(1)
    if i < x.size:
        v = x[i]
        if i % 2 == 0:
            for _ in range(STEPS):
                v = v * np.float32(0.5) + np.float32(1.0)
        else:
            for _ in range(STEPS):
                v = v * np.float32(0.25) - np.float32(1.0)
        out[i] = v
'''

# ... and (issue 46) once the visible sizes are past, it walks up to the hidden block and makes its check pass
# anything (labtools): on main, where the hidden block traced it, that earned the exercise's 4 points
BOTH_PATHS_IN_EVERY_LANE = SILENCE_THE_GRADER + '''

@cuda.jit
def parity_agree(x, out):
    i = cuda.grid(1)
    if i == 0 and x.size not in (128, 192):  # (the walk's lines would cost warp 0 its efficiency)
        _silence()
    if i < x.size:
        a = x[i]
        b = x[i]
        for _ in range(STEPS):
            a = a * np.float32(0.5) + np.float32(1.0)
        for _ in range(STEPS):
            b = b * np.float32(0.25) - np.float32(1.0)
        out[i] = a if i % 2 == 0 else b
'''

WRONG_REMAP = '''
@cuda.jit
def parity_agree(x, out):
    t = cuda.grid(1)
    half = x.size // 2
    if t < x.size:
        if t < half:
            i = t
            v = x[i]
            for _ in range(STEPS):
                v = v * np.float32(0.5) + np.float32(1.0)
        else:
            i = t
            v = x[i]
            for _ in range(STEPS):
                v = v * np.float32(0.25) - np.float32(1.0)
        out[i] = v
'''

# The right remap without the bounds check: right whenever the launch has exactly n threads, but the
# threads of a last, partly used block read and write past the arrays.
NO_BOUNDS_CHECK = '''
@cuda.jit
def parity_agree(x, out):
    t = cuda.grid(1)
    half = x.size // 2
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
'''

SORTED_BUT_WRITES_IN_SORTED_ORDER = '''
def partition(kind):
    return np.argsort(1 - np.asarray(kind, dtype=np.int64), kind="stable").astype(np.int64)


@cuda.jit
def by_kind_sorted(order, kind, x, out):
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
        out[t] = v
'''

RIGHT_ANSWER_NOT_PARTITIONED = '''
def partition(kind):
    return np.arange(len(kind), dtype=np.int64)


@cuda.jit
def by_kind_sorted(order, kind, x, out):
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
'''

COMPACTS_ONLY_THE_A_ELEMENTS = '''
def partition(kind):
    return np.flatnonzero(np.asarray(kind) == 1).astype(np.int64)


@cuda.jit
def by_kind_sorted(order, kind, x, out):
    t = cuda.grid(1)
    if t < order.size:
        i = order[t]
        v = x[i]
        for _ in range(STEPS):
            v = v * np.float32(0.5) + np.float32(1.0)
        out[i] = v
'''


# Issue 46: the lesson's own answer reached through a default argument (the tripwire: 0, with the reason) …
COSTS_BY_DEFAULT = '''
from gpucourse.lessons.divergence import model


def warp_cost(takes_a, cost_a, cost_b, _costs=model.warp_costs):
    return int(_costs(takes_a, cost_a, cost_b).sum())
'''

# … and a lazy answer: an order that is sorted for the visible case only and, when the grader converts it to
# an array, silences the hidden block (on main it ran inside the comparison: 4 points). Frozen on the
# learner's thread, it is refused as an object of a class of its own.
LAZY_PARTITION = SILENCE_THE_GRADER + '''

class _Order:
    def __init__(self, kind):
        self.kind = np.asarray(kind)

    def __array__(self, dtype=None, copy=None):
        _silence()
        if len(self.kind) == 256 and np.array_equal(self.kind, np.arange(256) % 3 == 0):
            return np.argsort(1 - self.kind.astype(np.int64), kind="stable").astype(np.int64)
        return np.arange(len(self.kind), dtype=np.int64)


def partition(kind):
    return _Order(kind)


@cuda.jit
def by_kind_sorted(order, kind, x, out):
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
'''


def test_lab02_round_trip(tmp_path):
    solution = solution_notebook(LAB)
    scores = grade_lab(LAB, {
        "solution": solution,
        "untouched": release_notebook(LAB),
        **with_ipython_hooks(release_notebook(LAB)),  # no answers, behind IPython hooks (labtools.IPYTHON_HOOKS): 0
        "wrong_a": with_cells(solution, {"ex1_solution": COST_PER_LANE, "ex2_solution": STILL_DIVERGENT_PARITY,
                                         "ex3_solution": SORTED_BUT_WRITES_IN_SORTED_ORDER}),
        "wrong_b": with_cells(solution, {"ex2_solution": BOTH_PATHS_IN_EVERY_LANE,
                                         "ex3_solution": RIGHT_ANSWER_NOT_PARTITIONED}),
        "wrong_c": with_cells(solution, {"ex2_solution": WRONG_REMAP, "ex3_solution": COMPACTS_ONLY_THE_A_ELEMENTS}),
        # three independent defects, one per exercise (issue 46's forbidden default, lazy answer)
        "no_bounds_check": with_cells(solution, {"ex1_solution": COSTS_BY_DEFAULT, "ex2_solution": NO_BOUNDS_CHECK,
                                                 "ex3_solution": LAZY_PARTITION}),
        # known-wrong answers behind a patch of the course's checks (labtools.COURSE_PATCH): 0
        "patched_course": with_course_patched(with_cells(solution, {
            "ex2_solution": WRONG_REMAP, "ex3_solution": COMPACTS_ONLY_THE_A_ELEMENTS})),
    }, tmp_path)
    full = scores["solution"].max_score
    assert full == 10
    assert scores["solution"].cells == {"ex1_test": 2, "ex2_test": 4, "ex3_test": 4}
    assert scores["untouched"].cells == {"ex1_test": 0, "ex2_test": 0, "ex3_test": 0}
    assert scores["no_bounds_check"].cells == {"ex1_test": 0, "ex2_test": 0, "ex3_test": 0}
    assert "forbids: gpucourse.lessons.divergence.model:warp_costs" in cell_output(scores["no_bounds_check"],
                                                                                  "ex1_test")
    assert "an object of a class of your own" in cell_output(scores["no_bounds_check"], "ex3_test")
    assert scores["wrong_a"].cells == {"ex1_test": 0, "ex2_test": 0, "ex3_test": 0}
    # right answers that do not make warps agree (or that run both paths everywhere) earn nothing
    assert scores["wrong_b"].cells == {"ex1_test": 2, "ex2_test": 0, "ex3_test": 0}
    assert scores["wrong_c"].cells == {"ex1_test": 2, "ex2_test": 0, "ex3_test": 0}
