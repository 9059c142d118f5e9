"""Lab 12 through real nbgrader: the solution scores full marks, the untouched lab 0, and known-wrong answers lose
the points of the part they get wrong: a stage without its dtype, an A100 choice that spills or is not pipelined,
an H100 choice that starves the SMs (also when the notebook shrinks its own JOBS), evidence that is not what the
compiler says, B's slots swapped, the course's fragment table, and evidence that decides its own comparisons.
Exercise 2's grader compiles in a fresh process (``tensorcores.fresh``): planted paths reach nothing there.
The fast tests run the hidden blocks without nbgrader; the compiling ones need Triton (Linux)."""

from __future__ import annotations

import sys

import pytest
from labtools import (
    grade_lab,
    release_notebook,
    solution_notebook,
    with_cells,
    with_course_patched,
    with_ipython_hooks,
)

from gpucourse.hardware import COMPUTE_CAPABILITIES
from gpucourse.measure.tritonmode import TRITON_MISSING, triton_available
from gpucourse.microscope.fragments import mma_shape
from gpucourse.tooling.grading import HiddenTestFailed, guard_hidden_tests

LAB = "lab12_tensor_cores"
needs_triton = pytest.mark.skipif(not triton_available(), reason=TRITON_MISSING)


def _cell(grade_id: str) -> str:
    return next(c.source for c in solution_notebook(LAB).cells
                if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def _namespace(*answers: str) -> dict:
    """The setup cell (banner aside) and these answer sources, run without a kernel."""
    namespace: dict = {}
    exec(_cell("setup").replace("display(runtime.banner())", "pass"), namespace)
    for source in answers:
        exec(source, namespace)
    return namespace


def _passes(test_cell: str, namespace: dict) -> bool:
    """Whether a test cell (visible part and hidden block, as the grader runs it) passes."""
    try:
        exec(guard_hidden_tests(_cell(test_cell)), namespace)
    except (AssertionError, HiddenTestFailed):
        return False
    return True


NO_DTYPE = """
def stage_bytes(block_m, block_n, block_k, dtype):
    return (block_m * block_k + block_k * block_n) * 2


def pipeline_bytes(block_m, block_n, block_k, dtype, stages):
    return stages * stage_bytes(block_m, block_n, block_k, dtype)


def fits(block_m, block_n, block_k, dtype, stages, cc):
    return pipeline_bytes(block_m, block_n, block_k, dtype, stages) <= SHARED_LIMIT_BYTES[cc]
"""
# the SM's carve-out (228 KB on cc 9.0) for what one block may have (227 KB): right on the visible cases
SM_NOT_BLOCK = _cell("ex1_solution").split("def fits")[0] + """def fits(block_m, block_n, block_k, dtype, stages, cc):
    return pipeline_bytes(block_m, block_n, block_k, dtype, stages) <= SHARED_LIMIT_BYTES[cc] + 1024
"""
C_TILE_TOO = _cell("ex1_solution").replace("(block_m * block_k + block_k * block_n) * ELEMENT_BYTES[dtype]",
                                            "(block_m * block_k + block_k * block_n) * ELEMENT_BYTES[dtype] + "
                                            "block_m * block_n * 4")
B_SLOTS_SWAPPED = """
def owner(operand, row, col):
    if operand == "a":
        return (row % 8) * 4 + (col % 8) // 2, (col % 8) % 2 + 2 * (row >= 8) + 4 * (col >= 8)
    if operand == "b":
        return col * 4 + (row % 8) // 2, 2 * ((row % 8) % 2) + (row >= 8)  # slots 1 and 2 swapped
    return (row % 8) * 4 + col // 2, col % 2 + 2 * (row >= 8)
"""
FRAGMENT_TABLE = """
from gpucourse.microscope import fragments as _fragments


def owner(operand, row, col):
    lane, slot = _fragments.mma_shape("m16n8k16", "f16").owners(operand)[row, col]
    return int(lane), int(slot)
"""
_SOLUTION_EX2 = _cell("ex2_solution")
_STARVED = ('"H100": {"block": (64, 64, 64)', '"H100": {"block": (128, 128, 64)')  # 64 tiles for 132 SMs
STARVED_AND_SPILLING = _SOLUTION_EX2.replace('"A100": {"block": (128, 128, 32), "num_warps": 4, "num_stages": 4}',
                                             '"A100": {"block": (256, 256, 64), "num_warps": 4, "num_stages": 3}'
                                             ).replace(*_STARVED)
UNPIPELINED_AND_LYING = _SOLUTION_EX2.replace('"num_warps": 4, "num_stages": 4}', '"num_warps": 4, "num_stages": 1}'
                                              ) + '\nif TRITON:\n    evidence["H100"]["registers"] = 128\n'
SHRUNK_JOBS = 'JOBS["H100"]["sms"] = 1  # the visible check reads the notebook\'s JOBS\n' + _SOLUTION_EX2.replace(
    *_STARVED)
LYING_EQ = _SOLUTION_EX2 + '''

class _Agreeable(dict):
    def __eq__(self, other):
        return True

    __hash__ = None


if TRITON:
    evidence = {job: _Agreeable(registers=1, shared_bytes=1, stack_bytes=0, mma="HMMA") for job in evidence}
'''


def test_exercise_1_solution_and_wrong_answers_without_nbgrader():
    assert _passes("ex1_test", _namespace(_cell("ex1_solution")))
    assert _passes("ex1_test_fits", _namespace(_cell("ex1_solution")))
    assert not _passes("ex1_test", _namespace(NO_DTYPE)) and not _passes("ex1_test_fits", _namespace(NO_DTYPE))
    assert not _passes("ex1_test", _namespace(C_TILE_TOO))
    sm_not_block = _namespace(SM_NOT_BLOCK)
    exec(_cell("ex1_test_fits").split("### BEGIN HIDDEN TESTS")[0], sm_not_block)  # passes what a learner sees
    assert not _passes("ex1_test_fits", sm_not_block)  # and fails the grader's cases


def test_the_reference_figures_in_exercise_1_are_the_solution_s():
    spec, ns = _cell("ex1_spec"), _namespace(_cell("ex1_solution"))
    one, three, four = (ns["pipeline_bytes"](128, 128, 64, "float16", s) for s in (1, 3, 4))
    assert f"{one:,} bytes a stage" in spec and f"three stages, {three:,} bytes, fit on every GPU" in spec
    assert all(ns["fits"](128, 128, 64, "float16", 3, cc) for cc in ns["SHARED_LIMIT_BYTES"])
    assert f"four stages, {four:,} bytes, fit on cc 8.0, 9.0 and 10.0 but not on cc 8.6, 8.9 and 12.0" in spec
    assert [cc for cc in ns["SHARED_LIMIT_BYTES"] if ns["fits"](128, 128, 64, "float16", 4, cc)] == [80, 90, 100]
    assert ns["SHARED_LIMIT_BYTES"][86] == COMPUTE_CAPABILITIES[(8, 6)].shared_per_block_optin_bytes == 99 * 1024


def test_exercise_3_solution_is_the_isa_table_and_wrong_answers_fail():
    ns = _namespace(_cell("ex3_solution"))
    shape = mma_shape("m16n8k16", "f16")
    for operand in "abc":
        owners = shape.owners(operand)
        rows, cols = shape.operand_shape(operand)
        assert all(tuple(ns["owner"](operand, r, c)) == tuple(owners[r, c]) for r in range(rows) for c in range(cols))
    assert _passes("ex3_test", ns)
    assert not _passes("ex3_test", _namespace(B_SLOTS_SWAPPED))
    assert not _passes("ex3_test", _namespace(FRAGMENT_TABLE))  # the course's table: refused


def test_without_triton_the_lab_says_so_in_one_line_and_exercise_2_does_not_crash(monkeypatch, capsys):
    import gpucourse.measure.tritonmode as tritonmode

    monkeypatch.setattr(tritonmode, "triton_available", lambda: False)
    ns = _namespace()
    assert capsys.readouterr().out.strip() == f"Exercise 2 cannot run here: {TRITON_MISSING}"
    exec(_cell("ex1_solution"), ns)
    exec(_SOLUTION_EX2, ns)
    assert ns["evidence"] == {} and set(ns["choices"]) == set(ns["JOBS"])
    for test in ("ex2_test_a100", "ex2_test_h100", "ex2_test_buffers"):
        exec(_cell(test).split("### BEGIN HIDDEN TESTS")[0], ns)
    assert capsys.readouterr().out.count("Not checked here") == 2


@needs_triton
def test_exercise_2_graded_by_the_grader_s_own_compile_without_nbgrader():
    ex2 = ("ex2_test_a100", "ex2_test_h100", "ex2_test_buffers")
    solution = _namespace(_cell("ex1_solution"), _SOLUTION_EX2)
    assert [_passes(test, solution) for test in ex2] == [True, True, True]
    starved = _namespace(_cell("ex1_solution"), STARVED_AND_SPILLING)
    assert [_passes(test, starved) for test in ex2] == [False, False, True]
    lying = _namespace(_cell("ex1_solution"), UNPIPELINED_AND_LYING)  # one stage on A100, made-up H100 registers
    assert [_passes(test, lying) for test in ex2] == [False, False, True]
    shrunk = _namespace(_cell("ex1_solution"), SHRUNK_JOBS)
    exec(_cell("ex2_test_h100").split("### BEGIN HIDDEN TESTS")[0], shrunk)  # the notebook's own JOBS: passes
    assert not _passes("ex2_test_h100", shrunk)  # the grader's: 64 tiles for 132 SMs


@needs_triton
def test_the_fresh_process_compiles_what_compile_for_does_and_ignores_planted_paths(tmp_path, monkeypatch):
    import dataclasses
    import json

    from gpucourse.lessons.tensorcores import compile_for, fresh

    request = (90, "float16", (64, 64, 32), 4, 2)
    want = json.loads(json.dumps(dataclasses.asdict(compile_for(*request))))  # before anything is planted
    fake = tmp_path / "gpucourse"  # a package that would answer for the course on PYTHONPATH or in the folder
    fake.mkdir()
    (fake / "__init__.py").write_text("raise SystemExit('the planted package ran')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "planted-cache"))
    monkeypatch.chdir(tmp_path)
    fresh._facts.cache_clear()
    (got,) = fresh.facts_in_fresh_process([request])
    assert {k: v for k, v in got.items() if k != "seconds"} == {k: v for k, v in want.items() if k != "seconds"}
    assert not (tmp_path / "planted-cache").exists()


def test_the_fresh_process_refuses_without_triton_and_says_when_the_child_fails(monkeypatch):
    from gpucourse.lessons.tensorcores import fresh, kernels

    monkeypatch.setattr(kernels, "tl", None)
    with pytest.raises(ImportError, match="Triton is not installed"):
        fresh.facts_in_fresh_process([(90, "float16", (64, 64, 64), 4, 3)])
    monkeypatch.undo()
    if triton_available():
        monkeypatch.setattr(sys, "executable", "/bin/sleep")  # sleep -I -c … fails fast: a clear RuntimeError
        fresh._facts.cache_clear()
        with pytest.raises(RuntimeError, match="fresh process failed"):
            fresh.facts_in_fresh_process([(90, "float16", (64, 64, 64), 4, 3)])
        fresh._facts.cache_clear()


@needs_triton
@pytest.mark.slow
def test_lab12_round_trip(tmp_path):
    solution = solution_notebook(LAB)
    release = release_notebook(LAB)
    assert not any("BEGIN SOLUTION" in c.source or "HIDDEN" in c.source for c in release.cells)
    scores = grade_lab(LAB, {
        "solution": solution,
        "untouched": release,
        **with_ipython_hooks(release),
        "patched_course": with_course_patched(with_cells(solution, {"ex3_solution": B_SLOTS_SWAPPED})),
        # exercise 1's mistakes and exercise 3's share a notebook: no cell of one reads the other's names
        "no_dtype+b_slots_swapped": with_cells(solution, {"ex1_solution": NO_DTYPE, "ex3_solution": B_SLOTS_SWAPPED}),
        "sm_not_block+fragment_table": with_cells(solution, {"ex1_solution": SM_NOT_BLOCK,
                                                             "ex3_solution": FRAGMENT_TABLE}),
        "starved_and_spilling": with_cells(solution, {"ex2_solution": STARVED_AND_SPILLING}),
        "unpipelined_and_lying": with_cells(solution, {"ex2_solution": UNPIPELINED_AND_LYING}),
        "shrunk_jobs": with_cells(solution, {"ex2_solution": SHRUNK_JOBS}),
        "lying_eq": with_cells(solution, {"ex2_solution": LYING_EQ}),
    }, tmp_path / "grade")
    right = scores["solution"].cells
    assert scores["solution"].max_score == 11
    assert scores["solution"].total == 11, right
    assert scores["untouched"].total == 0

    def with_zeros(*cells: str) -> dict:
        return {**right, **dict.fromkeys(cells, 0)}

    assert scores["no_dtype+b_slots_swapped"].cells == with_zeros("ex1_test", "ex1_test_fits", "ex3_test")
    assert scores["sm_not_block+fragment_table"].cells == with_zeros("ex1_test_fits", "ex3_test")
    # the buffers of a bad choice are still read right: only the choices' points go
    assert scores["starved_and_spilling"].cells == with_zeros("ex2_test_a100", "ex2_test_h100")
    assert scores["unpipelined_and_lying"].cells == with_zeros("ex2_test_a100", "ex2_test_h100")
    assert scores["shrunk_jobs"].cells == with_zeros("ex2_test_h100")
    lying = scores["lying_eq"].cells
    assert lying["ex2_test_a100"] == lying["ex2_test_h100"] == 0 and lying["ex1_test"] == 2, lying
