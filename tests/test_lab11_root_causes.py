"""Lab 11 (root causes) through real nbgrader: the solution scores full marks, the untouched lab 0, and the
known-wrong submissions lose exactly the points of what they get wrong:

* naming every cause at once (a string of all the vocabulary's words, or a list): exercise 1's 6 points;
* a wrong cause (brighten called bank conflicts): exercise 1;
* a fix without evidence (brighten's evidence the thread count, a metric that does not show its cause, with
  its true value): exercise 2 and — the lab's rule, said in its intro and each fix's spec — exercise 3 too
  (a kernel fix earns its points only with the evidence for the four kernels right); exercise 4 is kept;
* evidence with a made-up value (tally's conflicts rounded to 1000): exercise 2 and 3;
* a fix that changes the result (refunds no longer negative; a decay by the wrong rate): exercises 3 and 4;
* a step still waiting on the host (`float(norm)` in the loop instead of `if norm > …`): exercise 4;
* the course patched (labtools.COURSE_PATCH): 0.

Graded on the microscope's counts, the profiler's counts and outputs, never on time: the same on a CPU."""

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

LAB = "lab11_root_causes"

pytestmark = pytest.mark.slow

RIGHT = {"brighten": "uncoalesced", "tally": "bank_conflicts", "price_orders": "divergence",
         "flip_blocks": "low_occupancy", "clipped_step": "host_sync", "decay_all": "launch_bound"}
ALL_WORDS = " ".join(["uncoalesced", "bank_conflicts", "divergence", "low_occupancy", "host_sync",
                      "launch_bound", "unfused_chain", "no_tensor_cores"])

EVERY_CAUSE_STRING = f"causes = {dict.fromkeys(RIGHT, ALL_WORDS)!r}\n"
EVERY_CAUSE_LIST = f"causes = {dict.fromkeys(RIGHT, ALL_WORDS.split())!r}\n"
WRONG_CAUSE = f"causes = {({**RIGHT, 'brighten': 'bank_conflicts'})!r}\n"


def _evidence(**override: str) -> str:
    """The solution's evidence cell, one pair replaced by a line of code."""
    lines = "\n".join(f"evidence[{name!r}] = {pair}" for name, pair in override.items())
    return f'''
_metrics = {{
    "brighten": "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio",
    "tally": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "price_orders": "smsp__thread_inst_executed_per_inst_executed.ratio",
    "flip_blocks": "sm__maximum_warps_per_active_cycle_pct",
}}
evidence = {{name: (metric, profiles[name].value(metric)) for name, metric in _metrics.items()}}
evidence["clipped_step"] = ("aten::_local_scalar_dense", counts["clipped_step"]["aten::_local_scalar_dense"])
evidence["decay_all"] = ("aten::mul_", counts["decay_all"]["aten::mul_"])
{lines}
'''


NO_EVIDENCE = _evidence(brighten='("launch__thread_count", profiles["brighten"].value("launch__thread_count"))')
MADE_UP = _evidence(tally='("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", 1000)')


def _fix_cell(cell: str, old: str, new: str) -> str:
    source = next(c.source for c in solution_notebook(LAB).cells
                  if c.metadata.get("nbgrader", {}).get("grade_id") == cell)
    assert old in source, old
    return source.replace(old, new)


def test_lab11_round_trip(tmp_path):
    released = course_copy(tmp_path / "release", LAB) / "labs" / LAB / f"{LAB}.ipynb"
    untouched = nbformat.read(released, as_version=4)
    assert "BEGIN SOLUTION" not in released.read_text() and "BEGIN HIDDEN" not in released.read_text()
    assert "uncoalesced\", \"tally\"" not in released.read_text()  # the answers are not in the released lab
    solution = solution_notebook(LAB)
    changes_result = {
        "ex3_solution": _fix_cell("ex3_solution", "float32(-1.0))", "float32(1.0))"),
        "ex4_solution": _fix_cell("ex4_solution", "1.0 - rate)", "1.0 - 2 * rate)"),
    }
    still_waits = _fix_cell("ex4_solution", "scale = torch.clamp(max_norm / norm, max=1.0)",
                            "scale = torch.clamp(max_norm / norm, max=1.0) if float(norm) > 0 else 1.0")
    scores = grade_lab(LAB, {
        "solution": solution,
        "untouched": untouched,
        "every_cause_string": with_cells(solution, {"ex1_solution": EVERY_CAUSE_STRING}),
        "every_cause_list": with_cells(solution, {"ex1_solution": EVERY_CAUSE_LIST}),
        "wrong_cause_still_waits": with_cells(solution, {"ex1_solution": WRONG_CAUSE, "ex4_solution": still_waits}),
        "fix_without_evidence": with_cells(solution, {"ex2_solution": NO_EVIDENCE}),
        "made_up_value": with_cells(solution, {"ex2_solution": MADE_UP}),
        "changes_result": with_cells(solution, changes_result),
        # a wrong cause that passes the visible checks, behind a patch of the course's checks: 0 (GraderIntegrity)
        "patched_course": with_course_patched(with_cells(solution, {"ex1_solution": WRONG_CAUSE})),
        **with_ipython_hooks(untouched),  # no answers, behind IPython hooks (labtools.IPYTHON_HOOKS): 0
    }, tmp_path / "grade")
    everything = {"ex1_test": 6, "ex2_test": 6, "ex3_test": 4, "ex4_test": 2}
    assert scores["solution"].cells == everything
    assert scores["solution"].total == scores["solution"].max_score == 18
    assert scores["untouched"].cells == dict.fromkeys(everything, 0)
    for student in ("every_cause_string", "every_cause_list"):
        assert scores[student].cells == {**everything, "ex1_test": 0}, student
    assert scores["wrong_cause_still_waits"].cells == {**everything, "ex1_test": 0, "ex4_test": 0}
    assert any("the host still waits" in e for e in errors(scores["wrong_cause_still_waits"].notebook))
    for student in ("fix_without_evidence", "made_up_value"):
        assert scores[student].cells == {**everything, "ex2_test": 0, "ex3_test": 0}, student
    # the made-up value fails the visible checks; the wrong metric (with its true value) only the hidden ones
    assert any("a fix without its evidence" in e for e in errors(scores["made_up_value"].notebook))
    assert scores["changes_result"].cells == {**everything, "ex3_test": 0, "ex4_test": 0}
