"""Lab 05 through real nbgrader: the solution scores full marks, the untouched lab 0, and
known-wrong calculators (no register rounding, no 1 KB reservation, a whole-SM register count,
ties not named) lose the points of the part they get wrong, and so do exercises 3 and 4 answered
by the course's own calculator (directly or through a helper function)."""

import random

import nbformat
import pytest
from labtools import (
    course_copy,
    grade_lab,
    release_notebook,
    solution_notebook,
    with_cells,
    with_course_patched,
    with_ipython_hooks,
)

from gpucourse.lessons.occupancy.calculator import occupancy
from gpucourse.tooling.build import ROOT

LAB = "lab05_occupancy"

CORRECT = '''
def occupancy_by_hand(threads_per_block, registers_per_thread, shared_bytes_per_block, cc):
    arch = ARCH[tuple(cc)]
    warps_per_block = -(-threads_per_block // WARP_SIZE)
    per_warp = {per_warp}
    warps_by_registers = {warps_by_registers}
    per_block = {per_block}
    limits = {{
        "registers": warps_by_registers // warps_per_block,
        "shared memory": arch["shared_per_sm"] // per_block if per_block else None,
        "warps": arch["max_warps"] // warps_per_block,
        "blocks": arch["max_blocks"],
    }}
    blocks = min(v for v in limits.values() if v is not None)
    warps = blocks * warps_per_block
    named = {{name for name, v in limits.items() if v == blocks}}
    return {{"blocks": blocks, "warps": warps, "occupancy_pct": 100.0 * warps / arch["max_warps"],
            "limiters": {limiters}}}
'''
RIGHT = {
    "per_warp": '-(-registers_per_thread * WARP_SIZE // REGISTER_UNIT) * REGISTER_UNIT',
    "warps_by_registers": '(REGISTERS_PER_SM // SUB_PARTITIONS) // per_warp * SUB_PARTITIONS',
    "per_block": '-(-(shared_bytes_per_block + arch["reserved"]) // arch["granularity"])'
    ' * arch["granularity"]',
    "limiters": "named",
}


def variant(**changes) -> str:
    return CORRECT.format(**dict(RIGHT, **changes))


NO_REGISTER_ROUNDING = variant(per_warp="registers_per_thread * WARP_SIZE")
NO_RESERVATION = variant(per_block='-(-shared_bytes_per_block // arch["granularity"]) * arch["granularity"]')
WHOLE_SM_REGISTERS = variant(warps_by_registers="REGISTERS_PER_SM // per_warp")
FIRST_LIMITER_ONLY = variant(limiters="{sorted(named)[0]}")

# Exercise 5 (Little's law): known-wrong answers
NO_BANDWIDTH_CAP = """
def copy_speed_ratio(bandwidth_gbps, latency_ns, sm_count, warps_low, warps_high, loads_per_warp):
    return warps_low / warps_high  # "speed is proportional to warps", whatever the ILP
"""
LOADS_ONLY = """
def copy_speed_ratio(bandwidth_gbps, latency_ns, sm_count, warps_low, warps_high, loads_per_warp):
    needed = bandwidth_gbps / sm_count * latency_ns
    low, high = (min(1.0, w * loads_per_warp * 128 / needed) for w in (warps_low, warps_high))
    return low / high  # counts the loads' bytes only, not the stores behind them
"""
TIE_NOT_NAMED = '''
answers = {
    "A": {"blocks": 6, "occupancy_pct": 100.0, "limiters": {"registers"}},
    "B": {"blocks": 6, "occupancy_pct": 28.125, "limiters": {"registers"}},
    "C": {"blocks": 4, "occupancy_pct": 100.0, "limiters": {"registers", "shared memory", "warps"}},
}
'''
CALLS_THE_CALCULATOR = '''
from gpucourse.lessons.occupancy.calculator import occupancy as _occ

def occupancy_by_hand(threads_per_block, registers_per_thread, shared_bytes_per_block, cc):
    r = _occ(threads_per_block, registers_per_thread, shared_bytes_per_block, cc)
    return {"blocks": r.active_blocks, "warps": r.active_warps, "occupancy_pct": r.occupancy_pct,
            "limiters": set(r.limiters)}
'''

# Exercises 3 and 4 delegated to gpucourse.lessons.occupancy.calculator: the right numbers, not the learner's work.
DELEGATES_BEST_BLOCK_SIZE = '''
from gpucourse.lessons.occupancy.calculator import best_block_size as _best


def best_block_size(registers_per_thread, shared_bytes_per_block, cc):
    return _best(registers_per_thread, shared_bytes_per_block, cc)
'''

DELEGATES_THROUGH_A_HELPER = '''
def register_budget(threads_per_block, target_pct, cc):
    return _budget(threads_per_block, target_pct, cc)


def _budget(threads, pct, cc):
    import gpucourse.lessons.occupancy.calculator

    return gpucourse.lessons.occupancy.calculator.register_budget(threads, pct / 100, 0, cc)
'''


def _release(tmp_path) -> nbformat.NotebookNode:
    """The student version: labs/ if it was generated, else a fresh nbgrader generation."""
    committed = ROOT / "labs" / LAB / f"{LAB}.ipynb"
    if committed.exists():
        return release_notebook(LAB)
    root = course_copy(tmp_path / "generate", LAB)
    return nbformat.read(root / "labs" / LAB / f"{LAB}.ipynb", as_version=4)


def _lab_function(source: str):
    """occupancy_by_hand from ``source``, run with the lab's setup cell (no nbgrader, no kernel)."""
    setup = next(c.source for c in solution_notebook(LAB).cells if c.metadata.get("nbgrader", {}).get(
        "grade_id") == "setup")
    namespace: dict = {}
    exec(setup, namespace)
    exec(source, namespace)
    return namespace["occupancy_by_hand"]


def _disagreements(fn, n: int = 400) -> int:
    rng = random.Random(3)
    wrong = 0
    for _ in range(n):
        args = (rng.randint(1, 1024), rng.randint(1, 255), rng.choice([0, rng.randint(0, 48 * 1024)]),
                rng.choice([(7, 0), (7, 5), (8, 0), (8, 6), (8, 9), (9, 0)]))
        want, got = occupancy(*args), fn(*args)
        wrong += (got["blocks"], got["warps"], set(got["limiters"])) != (
            want.active_blocks, want.active_warps, set(want.limiters))
    return wrong


def test_the_solution_and_the_wrong_variants_without_nbgrader():
    assert _disagreements(_lab_function(variant())) == 0  # the template itself is right
    solution_source = next(c.source for c in solution_notebook(LAB).cells if c.metadata.get(
        "nbgrader", {}).get("grade_id") == "ex2_solution")
    assert _disagreements(_lab_function(solution_source)) == 0
    for wrong in (NO_REGISTER_ROUNDING, NO_RESERVATION, WHOLE_SM_REGISTERS, FIRST_LIMITER_ONLY):
        assert _disagreements(_lab_function(wrong)) > 0


def _cell(grade_id: str) -> str:
    return next(c.source for c in solution_notebook(LAB).cells
                if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def test_exercise_5_solution_passes_its_checks_and_the_wrong_answers_fail():
    """Little's law (exercise 5) without nbgrader: the solution passes visible and hidden checks; the two
    known-wrong answers fail the visible ones."""
    for source, ok in ((_cell("ex5_solution"), True), (NO_BANDWIDTH_CAP, False), (LOADS_ONLY, False)):
        namespace: dict = {}
        exec(_cell("setup").replace("display(runtime.banner())", "pass"), namespace)
        exec(source, namespace)
        if ok:
            exec(_cell("ex5_test"), namespace)
            assert abs(namespace["copy_speed_ratio"](4271, 876, 132, 16, 64, 4) - 0.578) < 2e-3
        else:
            with pytest.raises(AssertionError):
                exec(_cell("ex5_test"), namespace)


@pytest.mark.slow
def test_lab05_round_trip(tmp_path):
    solution = solution_notebook(LAB)
    release = _release(tmp_path)
    assert not any("BEGIN SOLUTION" in c.source or "HIDDEN" in c.source for c in release.cells)
    scores = grade_lab(LAB, {
        "solution": solution,
        "untouched": release,
        **with_ipython_hooks(release),  # no answers, behind IPython hooks (labtools.IPYTHON_HOOKS): 0
        "no_register_rounding": with_cells(solution, {"ex2_solution": NO_REGISTER_ROUNDING}),
        "no_reservation": with_cells(solution, {"ex2_solution": NO_RESERVATION}),
        # exercise 1 is a table of answers no later cell reads: its mistake rides with one of exercise 2's
        "first_limiter_only+tie_not_named": with_cells(solution, {"ex2_solution": FIRST_LIMITER_ONLY,
                                                                  "ex1_solution": TIE_NOT_NAMED}),
        "calls_the_calculator": with_cells(solution, {"ex2_solution": CALLS_THE_CALCULATOR}),
        "delegates": with_cells(solution, {"ex3_solution": DELEGATES_BEST_BLOCK_SIZE,
                                           "ex4_solution": DELEGATES_THROUGH_A_HELPER}),
        # known-wrong answers behind a patch of the course's checks (labtools.COURSE_PATCH): 0
        "patched_course": with_course_patched(with_cells(solution, {"ex2_solution": NO_RESERVATION})),
        "no_bandwidth_cap": with_cells(solution, {"ex5_solution": NO_BANDWIDTH_CAP}),
        "loads_only": with_cells(solution, {"ex5_solution": LOADS_ONLY}),
    }, tmp_path / "grade")
    full = scores["solution"].max_score
    assert full == 14
    assert scores["solution"].total == full, scores["solution"].cells
    assert scores["untouched"].total == 0 and set(scores["untouched"].cells.values()) == {0}
    # Forgetting the rounding to 256 registers per warp fails NVIDIA's own example (visible test).
    assert scores["no_register_rounding"].cells["ex2_test_blocks"] == 0
    assert scores["no_register_rounding"].total < full
    # Ignoring the 1 KB per-block reservation passes the visible cc 7.0 examples, fails the hidden ones.
    assert scores["no_reservation"].cells["ex2_test_blocks"] == 0
    assert scores["no_reservation"].total < full
    # Naming one limiter where there is a tie loses exactly the limiter point.
    assert scores["first_limiter_only+tie_not_named"].cells == {**scores["solution"].cells, "ex1_test": 0,
                                                                "ex2_test_limiters": 0}
    assert scores["calls_the_calculator"].cells["ex2_test_blocks"] == 0
    assert scores["delegates"].cells == {**scores["solution"].cells, "ex3_test": 0, "ex4_test": 0}
    # Little's law without the bandwidth cap, or counting only the loads' bytes (not the stores behind them),
    # fails the visible ILP-4 reference (0.25 and 0.29 for 0.578): each loses exactly exercise 5's points.
    for wrong in ("no_bandwidth_cap", "loads_only"):
        assert scores[wrong].cells == {**scores["solution"].cells, "ex5_test": 0}, (wrong, scores[wrong].cells)
