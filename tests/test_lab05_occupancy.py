"""Lab 05 through real nbgrader: the solution scores full marks, the untouched lab 0, and
known-wrong calculators (no register rounding, no 1 KB reservation, a whole-SM register count,
ties not named) lose the points of the part they get wrong, and so do exercises 3 and 4 answered
by the course's own calculator (directly or through a helper function). Exercise 5's steps are each
observable (the cap after the loads), and the attacks of issue 46 (a frame walk, a float that decides
its comparisons, the model through a default, a lazy mapping) score 0 on the exercise they attack."""

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

# Exercise 5 (Little's law): known-wrong answers. RIGHT_STEPS are the two right steps, so that a wrong
# ratio loses exactly exercise 5's ratio points.
RIGHT_STEPS = """
def warp_copies_needed(bandwidth_gbps, latency_ns, sm_count):
    return bandwidth_gbps / sm_count * latency_ns / 256


def copy_speed_share(warps, loads_per_warp, copies_needed):
    return min(1.0, warps * loads_per_warp / copies_needed)
"""
NO_BANDWIDTH_CAP = RIGHT_STEPS + """

def copy_speed_ratio(bandwidth_gbps, latency_ns, sm_count, warps_low, warps_high, loads_per_warp):
    return warps_low / warps_high  # "speed is proportional to warps", whatever the ILP
"""
LOADS_ONLY = RIGHT_STEPS + """

def copy_speed_ratio(bandwidth_gbps, latency_ns, sm_count, warps_low, warps_high, loads_per_warp):
    needed = bandwidth_gbps / sm_count * latency_ns
    low, high = (min(1.0, w * loads_per_warp * 128 / needed) for w in (warps_low, warps_high))
    return low / high  # counts the loads' bytes only, not the stores behind them
"""
# Issue 46: the cap applied to the warps before the loads are counted (every step observable: 0 for both)
CAP_BEFORE_LOADS = """
def warp_copies_needed(bandwidth_gbps, latency_ns, sm_count):
    return bandwidth_gbps / sm_count * latency_ns / 256


def copy_speed_share(warps, loads_per_warp, copies_needed):
    return min(1.0, warps / copies_needed) * loads_per_warp


def copy_speed_ratio(bandwidth_gbps, latency_ns, sm_count, warps_low, warps_high, loads_per_warp):
    needed = warp_copies_needed(bandwidth_gbps, latency_ns, sm_count)
    return copy_speed_share(warps_low, loads_per_warp, needed) / copy_speed_share(warps_high, loads_per_warp, needed)
"""
# past four times the warps needed, "more warps thrash": a lower occupancy is faster there. It passes every
# visible reference (none is that far past the knee); each step's hidden sweep fails it.
LOWER_IS_FASTER = """
def warp_copies_needed(bandwidth_gbps, latency_ns, sm_count):
    return bandwidth_gbps / sm_count * latency_ns / 256


def copy_speed_share(warps, loads_per_warp, copies_needed):
    in_flight = warps * loads_per_warp
    return min(1.0, in_flight / copies_needed) if in_flight < 4 * copies_needed else copies_needed / in_flight


def copy_speed_ratio(bandwidth_gbps, latency_ns, sm_count, warps_low, warps_high, loads_per_warp):
    needed = warp_copies_needed(bandwidth_gbps, latency_ns, sm_count)
    return copy_speed_share(warps_low, loads_per_warp, needed) / copy_speed_share(warps_high, loads_per_warp, needed)
"""
VISIBLE_ONLY = RIGHT_STEPS + """

def copy_speed_ratio(bandwidth_gbps, latency_ns, sm_count, warps_low, warps_high, loads_per_warp):
    return {1: 0.25, 4: 0.578}.get(loads_per_warp, warps_low / warps_high)  # the references, by heart
"""
# the answer key out of reach (issue 46): the ratio walks up the frames for the test's expected value …
FRAME_WALK = RIGHT_STEPS + """
import traceback


def copy_speed_ratio(bandwidth_gbps, latency_ns, sm_count, warps_low, warps_high, loads_per_warp):
    for frame, _ in traceback.walk_stack(None):
        scope = getattr(frame, LOCALS)
        for name in ("w", "_want", "want"):
            if isinstance(scope.get(name), float):
                return scope[name]
    return {1: 0.25, 4: 0.578}.get(loads_per_warp, warps_low / warps_high)  # the visible references
"""
LOCALS_NAME = 'LOCALS = "f_" + "locals"  # built in another cell than the one that reads it\n'
# … or hands in a float that decides its own comparisons …
FLOAT_SUBCLASS = RIGHT_STEPS + """

class Close(float):
    def __sub__(self, other):
        return 0.0


def copy_speed_ratio(bandwidth_gbps, latency_ns, sm_count, warps_low, warps_high, loads_per_warp):
    return Close(warps_low / warps_high)
"""
# … or calls the course's model through a default argument and a name built at run time
MODEL_BY_DEFAULT = RIGHT_STEPS + """
import gpucourse.lessons.occupancy.model as _lesson


def copy_speed_ratio(bandwidth_gbps, latency_ns, sm_count, warps_low, warps_high, loads_per_warp, m=_lesson):
    model = getattr(m, "Speed" + "Model")("memory", "x", bandwidth_gbps / sm_count * latency_ns / 256, warps_high, "")
    return float(model.relative_speed(warps_low, loads_per_warp) / model.relative_speed(warps_high, loads_per_warp))
"""
# exercise 1's answers as a lazy mapping (Mapping.__eq__ and __getitem__ would run inside the comparison)
LAZY_ANSWERS = """
import collections.abc


class Answers(collections.abc.Mapping):
    def __getitem__(self, key):
        return {"blocks": 6, "occupancy_pct": 100.0, "limiters": {"registers"}}

    def __iter__(self):
        return iter("ABC")

    def __len__(self):
        return 3


answers = Answers()
"""
# exercise 6: the right numbers and the wrong assumption
WRONG_DIAGNOSIS = """
def warps_in_flight(gbps, latency_ns, sm_count, loads_per_warp):
    return gbps / sm_count * latency_ns / (256 * loads_per_warp)


_ilp1 = first_recording.data[first_recording.data.kernel == "copy"].set_index("occupancy_pct")
first_attempt = {
    "warps_at_25": warps_in_flight(float(_ilp1.gbps[25.0]), FIRST_LATENCY_NS, FIRST_SM_COUNT, 1),
    "warps_at_100": warps_in_flight(float(_ilp1.gbps[100.0]), FIRST_LATENCY_NS, FIRST_SM_COUNT, 1),
    "failed": "latency",
}
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
    from gpucourse.tooling.grading import guard_hidden_tests

    for source, ok in ((_cell("ex5_solution"), True), (NO_BANDWIDTH_CAP, False), (LOADS_ONLY, False),
                       (CAP_BEFORE_LOADS, False), (LOWER_IS_FASTER, False)):
        namespace: dict = {}
        exec(_cell("setup").replace("display(runtime.banner())", "pass"), namespace)
        exec(source, namespace)
        test = guard_hidden_tests(_cell("ex5_test"))  # the hidden part as the grader runs it
        if ok:
            exec(guard_hidden_tests(_cell("ex5_test_steps")), namespace)
            exec(test, namespace)
            assert abs(namespace["copy_speed_ratio"](4271, 876, 132, 16, 64, 4) - 0.578) < 2e-3
        else:
            with pytest.raises(AssertionError):
                exec(test, namespace)
    # the steps on their own: a lower occupancy faster past the knee passes the visible checks, not the hidden
    namespace = {}
    exec(_cell("setup").replace("display(runtime.banner())", "pass"), namespace)
    exec(LOWER_IS_FASTER, namespace)
    steps = _cell("ex5_test_steps")
    exec(steps.split("### BEGIN HIDDEN TESTS")[0], namespace)
    with pytest.raises(AssertionError):
        exec(guard_hidden_tests(steps), namespace)


FROM_EX5 = ("ex5_test_steps", "ex5_test", "ex6_test")  # the cells that no answer of exercises 1 to 4 reaches


@pytest.mark.slow
def test_lab05_round_trip(tmp_path):
    solution = solution_notebook(LAB)
    release = _release(tmp_path)
    assert not any("BEGIN SOLUTION" in c.source or "HIDDEN" in c.source for c in release.cells)
    scores = grade_lab(LAB, {
        "solution": solution,
        "untouched": release,
        **with_ipython_hooks(release),  # no answers, behind IPython hooks (labtools.IPYTHON_HOOKS): 0
        # known-wrong answers behind a patch of the course's checks (labtools.COURSE_PATCH): 0
        "patched_course": with_course_patched(with_cells(solution, {"ex2_solution": NO_RESERVATION})),
        # Mistakes in exercises no later cell reads share a notebook (each notebook is a full nbgrader run,
        # issue 50): exercises 1 to 4 run before exercise 5's answer is defined and no cell of 5 or 6 reads
        # them, and exercise 6 reads none of 5's names, so each mistake's points are its own.
        "no_register_rounding+no_bandwidth_cap": with_cells(solution, {"ex2_solution": NO_REGISTER_ROUNDING,
                                                                       "ex5_solution": NO_BANDWIDTH_CAP}),
        "no_reservation+loads_only": with_cells(solution, {"ex2_solution": NO_RESERVATION,
                                                           "ex5_solution": LOADS_ONLY}),
        "first_limiter_only+cap_before_loads": with_cells(solution, {"ex2_solution": FIRST_LIMITER_ONLY,
                                                                     "ex5_solution": CAP_BEFORE_LOADS}),
        "calls_the_calculator+lower_is_faster": with_cells(solution, {"ex2_solution": CALLS_THE_CALCULATOR,
                                                                      "ex5_solution": LOWER_IS_FASTER}),
        # exercises 3 and 4 delegated, and a float that decides its comparisons from exercise 5 on
        "delegates+float_subclass": with_cells(solution, {"ex3_solution": DELEGATES_BEST_BLOCK_SIZE,
                                                          "ex4_solution": DELEGATES_THROUGH_A_HELPER,
                                                          "ex5_solution": FLOAT_SUBCLASS}),
        "tie_not_named+visible_only+wrong_diagnosis": with_cells(solution, {
            "ex1_solution": TIE_NOT_NAMED, "ex5_solution": VISIBLE_ONLY, "ex6_solution": WRONG_DIAGNOSIS}),
        # the hostile answers to exercise 5 each in a notebook of its own: nothing else may change their score
        "frame_walk": with_cells(solution, {"ex5_solution": FRAME_WALK, "ex4_solution": LOCALS_NAME + "\n\n"
                                            + _cell("ex4_solution")}),
        "model_by_default": with_cells(solution, {"ex5_solution": MODEL_BY_DEFAULT}),
        "lazy_answers": with_cells(solution, {"ex1_solution": LAZY_ANSWERS}),
    }, tmp_path / "grade")
    full = scores["solution"].max_score
    assert full == 17
    assert scores["solution"].total == full, scores["solution"].cells
    assert scores["untouched"].total == 0 and set(scores["untouched"].cells.values()) == {0}
    right = scores["solution"].cells

    def with_zeros(*cells: str) -> dict:
        return {**right, **dict.fromkeys(cells, 0)}

    def from_ex5(student: str) -> dict:
        return {cell: scores[student].cells[cell] for cell in FROM_EX5}

    # Forgetting the rounding to 256 registers per warp fails NVIDIA's own example (visible test).
    assert scores["no_register_rounding+no_bandwidth_cap"].cells["ex2_test_blocks"] == 0
    # Ignoring the 1 KB per-block reservation passes the visible cc 7.0 examples, fails the hidden ones.
    assert scores["no_reservation+loads_only"].cells["ex2_test_blocks"] == 0
    assert scores["calls_the_calculator+lower_is_faster"].cells["ex2_test_blocks"] == 0
    # Naming one limiter where there is a tie loses exactly the limiter point (exercise 2), and so does a
    # tie not named in exercise 1's table.
    assert scores["first_limiter_only+cap_before_loads"].cells == with_zeros(
        "ex2_test_limiters", "ex5_test", "ex5_test_steps")
    assert scores["delegates+float_subclass"].cells == with_zeros(
        "ex3_test", "ex4_test", "ex5_test_steps", "ex5_test", "ex6_test")
    # Little's law without the bandwidth cap, or counting only the loads' bytes (not the stores behind them),
    # fails the visible ILP-4 reference (0.25 and 0.29 for 0.578): each loses exactly the ratio's points;
    # so do the references learned by heart, a walk up the frames for the expected value (the learner's
    # function runs on a thread of its own), a float that decides its own comparisons (refused) and the
    # course's model reached through a default argument and a name built at run time (the tripwire).
    for wrong in ("no_register_rounding+no_bandwidth_cap", "no_reservation+loads_only"):
        assert from_ex5(wrong) == {cell: right[cell] for cell in FROM_EX5} | {"ex5_test": 0}, (
            wrong, scores[wrong].cells)
    for wrong in ("frame_walk", "model_by_default"):
        assert scores[wrong].cells == with_zeros("ex5_test"), (wrong, scores[wrong].cells)
    assert scores["tie_not_named+visible_only+wrong_diagnosis"].cells == with_zeros("ex1_test", "ex5_test",
                                                                                     "ex6_test")
    # a class of the notebook that decides its own comparisons also fails every hidden block after it
    # (snapshot.custom_comparisons): the float subclass from exercise 5 on (above), the lazy mapping from
    # exercise 1
    assert scores["lazy_answers"].cells["ex1_test"] == 0 and scores["lazy_answers"].total == 0
    # The cap applied before the loads are counted, or a lower occupancy faster past the knee: every step
    # is observable, so both the steps and the ratio score 0 (the cap's notebook: above).
    assert from_ex5("calls_the_calculator+lower_is_faster") == {cell: right[cell] for cell in FROM_EX5} | {
        "ex5_test": 0, "ex5_test_steps": 0}, scores["calls_the_calculator+lower_is_faster"].cells
