"""Lab 09 (rings on the microscope) through real nbgrader: the solution scores full marks, the untouched lab 0,
and the known-wrong submissions lose exactly the points of what they get wrong:

* the whole buffer every step (right values, p× the bytes): exercise 1;
* the same, with the world's counters overwritten to the right numbers afterwards (hostile): exercise 1
  (only the replay of the delivered messages on the grader's own world counts);
* hostile, evidence not tied to the work: the sums computed aside and written into the world, behind decoy
  messages of the right size on the right links (each rank's own chunk every step): exercises 1 and 2
  (each message must carry a chunk the receiver needs);
* hostile, the course's ring in rank order on a relabelled world (right messages, right values): through a
  default argument (exercise 1) and through getattr with a constructed name (exercise 2): 0, by the
  tripwire (gpucourse.tooling.grading.tripwire, collectives.RING_FORBIDDEN);
* the library's ring in rank order, ignoring ``order`` (right values and bytes, wrong links): exercises 1 and 2;
* an all-gather off by one chunk (wrong values): exercise 2;
* predictions that transcribe the lesson's one-ring formula for two rings, or take NVLS's busbw for β:
  exercise 3;
* the course patched (labtools.COURSE_PATCH) and IPython hooks (labtools.IPYTHON_HOOKS): 0.

Graded on values, the microscope's exact bytes and steps, and the model: never on time."""

import nbformat
import pytest
from labtools import course_copy, grade_lab, solution_notebook, with_cells, with_course_patched, with_ipython_hooks

LAB = "lab09_collectives"

pytestmark = pytest.mark.slow

WHOLE_BUFFER = '''def ring_reduce_scatter(world, order):
    p = world.ranks
    for s in range(p - 1):
        before = [d.copy() for d in world.data]
        for i in range(p):
            world.send(order[i], order[(i + 1) % p], world.whole())
        world.step()
        for i in range(p):
            r, c = order[i], world.chunk(order[(i - s - 2) % p])
            received = world.data[r].copy()
            world.data[r][:] = before[r]
            world.data[r][c] += received[c]
'''
FAKED_COUNTS = WHOLE_BUFFER + '''    world.bytes_sent[:] = (p - 1) * (world.elements * 4) // p
    world.history[:] = world.history[:p - 1]
'''
RANK_ORDER_RS = '''def ring_reduce_scatter(world, order):
    collectives.kernels.ring_reduce_scatter(world)
'''
RANK_ORDER_AG = '''def ring_all_gather(world, order):
    collectives.kernels.ring_all_gather(world)
'''
OFF_BY_ONE_AG = '''def ring_all_gather(world, order):
    p = world.ranks
    for s in range(p - 1):
        for i in range(p):
            world.send(order[i], order[(i + 1) % p], world.chunk(order[(i - s - 1) % p]))
        world.step()
'''
ASIDE_OWN_CHUNK = '''def ring_reduce_scatter(world, order):
    p = world.ranks
    total = np.sum(world.inputs, axis=0)
    for s in range(p - 1):
        for i in range(p):
            world.send(order[i], order[(i + 1) % p], world.chunk(order[i]), reduce=True)
        world.step()
    for r in range(p):
        world.data[r][:] = total
'''
ASIDE_COPIED = '''def ring_all_gather(world, order):
    p = world.ranks
    gathered = np.concatenate([world.data[r][world.chunk(r)] for r in range(p)])
    for s in range(p - 1):
        for i in range(p):
            world.send(order[i], order[(i + 1) % p], world.chunk(order[i]))
        world.step()
    for r in range(p):
        world.data[r][:] = gathered
'''
RELABELLED = '''class _Relabel:
    """The world seen in positions: the course's rank-order ring on it is a ring in ``order``."""

    def __init__(self, world, order):
        self.w, self.o, self.ranks = world, order, world.ranks

    def chunk(self, c):
        return self.w.chunk(self.o[c])

    def send(self, src, dst, part, reduce=False):
        self.w.send(self.o[src], self.o[dst], part, reduce=reduce)

    def step(self):
        self.w.step()


def ring_reduce_scatter(world, order, _ring=collectives.kernels.ring_reduce_scatter):
    _ring(_Relabel(world, order))
'''
RELABELLED_AG = '''def ring_all_gather(world, order):
    getattr(collectives.kernels, "ring_all_" + "gather")(_Relabel(world, order))
'''
ONE_RING_FORMULA = '''predicted = {"two_rings_us": 7 * (2e-6 + 2**28 / 8 / 450e9) * 1e6,
             "two_rings_bytes": 2e-6 * 450e9,
             "nvls_busbw_gbps": 2**30 / (2e-6 + 2**30 / 450e9) * 2 * 7 / 8 / 1e9}
'''
BUSBW_IS_BETA = '''predicted = {"two_rings_us": 7 * (2e-6 + 2**28 / 16 / 450e9) * 1e6,
             "two_rings_bytes": 2 * 2e-6 * 8 * 450e9,
             "nvls_busbw_gbps": 450.0}
'''


def test_lab09_round_trip(tmp_path):
    released = course_copy(tmp_path / "release", LAB) / "labs" / LAB / f"{LAB}.ipynb"
    untouched = nbformat.read(released, as_version=4)
    text = released.read_text()
    assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN" not in text and "order[(i - s - 1) % p]), reduce" not in text
    assert "order[(i - s" not in text, "the hints no longer give the index formula"
    solution = solution_notebook(LAB)
    scores = grade_lab(LAB, {
        "solution": solution,
        "untouched": untouched,
        # Mistakes in different exercises share a notebook (each notebook is a full nbgrader run, issue 50):
        # each exercise's test judges only its own function (ex1 and ex2 each on fresh worlds, ex3 the
        # predictions), so each mistake's points are its own. Each keeps one exercise right: a notebook
        # that scored 0 for another reason would not pass as its mistakes.
        "whole_buffer+one_ring_formula": with_cells(solution, {"ex1_solution": WHOLE_BUFFER,
                                                               "ex3_solution": ONE_RING_FORMULA}),
        "off_by_one": with_cells(solution, {"ex2_solution": OFF_BY_ONE_AG}),
        "faked_counts+busbw_is_beta": with_cells(solution, {"ex1_solution": FAKED_COUNTS,
                                                            "ex3_solution": BUSBW_IS_BETA}),
        "rank_order": with_cells(solution, {"ex1_solution": RANK_ORDER_RS, "ex2_solution": RANK_ORDER_AG}),
        "aside": with_cells(solution, {"ex1_solution": ASIDE_OWN_CHUNK, "ex2_solution": ASIDE_COPIED}),
        "relabelled": with_cells(solution, {"ex1_solution": RELABELLED, "ex2_solution": RELABELLED_AG}),
        # a wrong ring that passes nothing, behind a patch of the course's checks: 0 (GraderIntegrity)
        "patched_course": with_course_patched(with_cells(solution, {"ex1_solution": WHOLE_BUFFER})),
        **with_ipython_hooks(untouched),
    }, tmp_path / "grade")
    everything = {"ex1_test": 4, "ex2_test": 4, "ex3_test": 2}
    assert scores["solution"].cells == everything
    assert scores["solution"].total == scores["solution"].max_score == 10
    assert scores["untouched"].cells == dict.fromkeys(everything, 0)
    assert scores["whole_buffer+one_ring_formula"].cells == {**everything, "ex1_test": 0, "ex3_test": 0}
    assert scores["off_by_one"].cells == {**everything, "ex2_test": 0}
    assert scores["faked_counts+busbw_is_beta"].cells == {**everything, "ex1_test": 0, "ex3_test": 0}
    assert scores["rank_order"].cells == {**everything, "ex1_test": 0, "ex2_test": 0}
    assert scores["aside"].cells == {**everything, "ex1_test": 0, "ex2_test": 0}
    assert scores["relabelled"].cells == {**everything, "ex1_test": 0, "ex2_test": 0}
    assert scores["patched_course"].total == 0
