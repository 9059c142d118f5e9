"""Lab 09 (rings on the microscope) through real nbgrader: the solution scores full marks, the untouched lab 0,
and the known-wrong submissions lose exactly the points of what they get wrong:

* the whole buffer every step (right values, p× the bytes): exercise 1;
* the same, with the world's counters overwritten to the right numbers afterwards (hostile): exercise 1
  (the hidden tests count deliveries apart from the counters the world shows);
* the library's ring in rank order, ignoring ``order`` (right values and bytes, wrong links): exercises 1 and 2;
* an all-gather off by one chunk (wrong values): exercise 2;
* a prediction that forgets the all-reduce's second half: exercise 3;
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
HALF_ALL_REDUCE = '''predicted_us = {"a": 7 * (2e-6 + 2**28 / 8 / 450e9) * 1e6,
                "b": 15 * (2e-6 + 2**16 / 16 / 50e9) * 1e6, "c": 2 * 7 * (5e-6 + 2**20 / 63e9) * 1e6}
crossover_bytes = 100e3
'''


def test_lab09_round_trip(tmp_path):
    released = course_copy(tmp_path / "release", LAB) / "labs" / LAB / f"{LAB}.ipynb"
    untouched = nbformat.read(released, as_version=4)
    text = released.read_text()
    assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN" not in text and "order[(i - s - 1) % p]), reduce" not in text
    solution = solution_notebook(LAB)
    scores = grade_lab(LAB, {
        "solution": solution,
        "untouched": untouched,
        "whole_buffer": with_cells(solution, {"ex1_solution": WHOLE_BUFFER}),
        "faked_counts": with_cells(solution, {"ex1_solution": FAKED_COUNTS}),
        "rank_order": with_cells(solution, {"ex1_solution": RANK_ORDER_RS, "ex2_solution": RANK_ORDER_AG}),
        "off_by_one": with_cells(solution, {"ex2_solution": OFF_BY_ONE_AG}),
        "half_all_reduce": with_cells(solution, {"ex3_solution": HALF_ALL_REDUCE}),
        # a wrong ring that passes nothing, behind a patch of the course's checks: 0 (GraderIntegrity)
        "patched_course": with_course_patched(with_cells(solution, {"ex1_solution": WHOLE_BUFFER})),
        **with_ipython_hooks(untouched),
    }, tmp_path / "grade")
    everything = {"ex1_test": 4, "ex2_test": 4, "ex3_test": 2}
    assert scores["solution"].cells == everything
    assert scores["solution"].total == scores["solution"].max_score == 10
    assert scores["untouched"].cells == dict.fromkeys(everything, 0)
    assert scores["whole_buffer"].cells == {**everything, "ex1_test": 0}
    assert scores["faked_counts"].cells == {**everything, "ex1_test": 0}
    assert scores["rank_order"].cells == {**everything, "ex1_test": 0, "ex2_test": 0}
    assert scores["off_by_one"].cells == {**everything, "ex2_test": 0}
    assert scores["half_all_reduce"].cells == {**everything, "ex3_test": 0}
    assert scores["patched_course"].total == 0
