"""Lab 06 through real nbgrader: the solution scores full marks, the untouched lab 0, and known-wrong
versions (a racy +=, a missing syncthreads, global atomics only, counts instead of weights, missing
fences, a flag raised with a plain store, an uncapped wait, a wrong answer) lose exactly the points
of the part they get wrong."""

import pytest
from lab06_kernels import handoff
from labtools import (
    errors,
    grade_lab,
    release_notebook,
    solution_notebook,
    with_cells,
    with_course_patched,
    with_ipython_hooks,
)

LAB = "lab06_races"

pytestmark = pytest.mark.slow

RACY = '''
@cuda.jit
def histogram_atomic(values, counts):
    start, stride, nbins = cuda.grid(1), cuda.gridsize(1), counts.size
    for i in range(start, values.size, stride):
        b = min(int(values[i] * nbins), nbins - 1)
        counts[b] += 1
'''


def weighted(first_sync: bool = True, second_sync: bool = True, add: str = "weights[i]") -> str:
    return f'''
@cuda.jit
def histogram_weighted(values, weights, sums):
    local = cuda.shared.array(MAX_BINS, np.int32)
    t, nbins = cuda.threadIdx.x, sums.size
    for b in range(t, nbins, cuda.blockDim.x):
        local[b] = 0
    {"cuda.syncthreads()" if first_sync else "pass"}
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, values.size, stride):
        b = min(int(values[i] * nbins), nbins - 1)
        cuda.atomic.add(local, b, {add})
    {"cuda.syncthreads()" if second_sync else "pass"}
    for b in range(t, nbins, cuda.blockDim.x):
        cuda.atomic.add(sums, b, local[b])
'''


GLOBAL_ATOMICS_ONLY = '''
@cuda.jit
def histogram_weighted(values, weights, sums):
    start, stride, nbins = cuda.grid(1), cuda.gridsize(1), sums.size
    for i in range(start, values.size, stride):
        b = min(int(values[i] * nbins), nbins - 1)
        cuda.atomic.add(sums, b, weights[i])
'''

# The lesson's privatised histogram copied as it is: it counts values and ignores their weights.
LESSON_COPY = weighted(add="1")


WRONG_ANSWER = ('weak_outcome_allowed = {"sb_fence_one_side": True, "sb_block_fences": True, '
                '"mp_strong_flag_producer_fence": False, "corr_atomics": False}')


# Issue 46: the lesson's own kernel handed in under the learner's name (an alias: launched by the grader's
# harness, it runs with no learner frame on the stack, so only tripwire.handed_in sees it; it scored 3 of 3),
# and the litmus answers as a dict subclass whose lookups say the right thing while it holds wrong values.
LESSON_ALIAS = "from gpucourse.lessons.races.kernels import histogram_atomic  # the lesson's, as mine\n"
LYING_ANSWERS = '''
class Answers(dict):
    def __getitem__(self, key):
        return {"sb_fence_one_side": True, "sb_block_fences": True, "mp_strong_flag_producer_fence": True,
                "corr_atomics": False}[key]


weak_outcome_allowed = Answers(sb_fence_one_side=True, sb_block_fences=True, mp_strong_flag_producer_fence=False,
                               corr_atomics=True)
'''


def test_lab06_round_trip(tmp_path):
    solution = solution_notebook(LAB)
    scores = grade_lab(LAB, {
        "solution": solution,
        "untouched": release_notebook(LAB),
        **with_ipython_hooks(release_notebook(LAB)),  # no answers, behind IPython hooks (labtools.IPYTHON_HOOKS): 0
        # racy +=, no barrier before the merge, no fences at all, a wrong answer: every part wrong
        "all_wrong": with_cells(solution, {"ex1_solution": RACY, "ex2_solution": weighted(second_sync=False),
                                           "ex3_solution": handoff(False, False), "ex4_solution": WRONG_ANSWER}),
        # no barrier after zeroing the shared bins; a fence on the producer's side only
        "half_fixed": with_cells(solution, {"ex2_solution": weighted(first_sync=False),
                                            "ex3_solution": handoff(True, False)}),
        # correct counts but no privatisation; both fences but a wait with no cap
        # ... and the lesson's kernel as exercise 1's answer (issue 46): three exercises, none reads another's
        "no_shared_no_cap+lesson_alias": with_cells(solution, {"ex1_solution": LESSON_ALIAS,
                                                               "ex2_solution": GLOBAL_ATOMICS_ONLY,
                                                               "ex3_solution": handoff(True, True, capped=False)}),
        # the lesson's kernel copied (counts, not weights); fences on both sides but a plain flag store,
        # which the weak model (stronger than PTX) would let through
        # ... and exercise 4's answers in a dict subclass that lies (issue 46)
        "lesson_copy_weak_flag+lying_answers": with_cells(solution, {
            "ex2_solution": LESSON_COPY, "ex3_solution": handoff(True, True, atomic_flag=False),
            "ex4_solution": LYING_ANSWERS}),
        # known-wrong answers behind a patch of the course's checks (labtools.COURSE_PATCH): 0
        "patched_course": with_course_patched(with_cells(solution, {
            "ex2_solution": weighted(first_sync=False), "ex3_solution": handoff(True, False)})),
    }, tmp_path)
    full = scores["solution"].max_score
    assert full == 13
    assert scores["solution"].total == full, scores["solution"].cells
    assert scores["untouched"].cells == {"ex1_test": 0, "ex2_test": 0, "ex3_test": 0, "ex4_test": 0}
    assert scores["all_wrong"].total == 0, scores["all_wrong"].cells
    assert scores["half_fixed"].cells == {"ex1_test": 3, "ex2_test": 0, "ex3_test": 0, "ex4_test": 2}
    assert scores["no_shared_no_cap+lesson_alias"].cells == {"ex1_test": 0, "ex2_test": 0, "ex3_test": 0, "ex4_test": 2}
    assert any("handed in what this exercise forbids" in e and "histogram_atomic" in e
               for e in errors(scores["no_shared_no_cap+lesson_alias"].notebook))
    assert scores["lesson_copy_weak_flag+lying_answers"].cells == {"ex1_test": 3, "ex2_test": 0, "ex3_test": 0,
                                                                   "ex4_test": 0}
    assert any("subclass of dict" in e for e in errors(scores["lesson_copy_weak_flag+lying_answers"].notebook))
