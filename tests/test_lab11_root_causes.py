"""Lab 11 (root causes) through real nbgrader: the solution scores full marks, the untouched lab 0, and each
hostile submission scores 0 on exactly the points it attacks (issue 46; review learner-walk-2 W21).

One point per mystery for its diagnosis (exercise 1: the word *and* a metric of the mystery's profile that
shows it, with its value), one per mystery for its fix (exercises 2 and 3, which need that diagnosis):

* naming without evidence — every word at once, a guessed list (``unfused_chain`` everywhere, ``decay_all``
  included, with evidence that shows it for the profiler's rows), made-up values, a metric of another
  cause, the tempting decoy (``tally``'s occupancy below 100 %, true value and all), a ``str`` subclass
  equal to everything: the mystery's diagnosis and its fix;
* replayed outputs: kernels that write the mystery's output on the lab's inputs (and pass every visible
  check) fail on the inputs of other sizes the grader draws (``rootcauses.launch(name, seed)``);
* a host read hidden where the spy does not look (``np.from_dlpack`` of the norm: no wrapped method, no
  ``_local_scalar_dense``): caught by running the step on the meta device, where any read fails;
* operator counts changed by an annotation (the loop inside ``torch.profiler.record_function``), or work
  moved out of torch's operators (NumPy views of the tensors): ``decay_all``'s fix;
* a fix that changes the result; a step that still waits; the course patched; IPython hooks.

Graded on the microscope's counts, the profiler's counts and outputs, never on time: the same on a CPU.
The fast tests below hold each mechanism on its own (tools/mutate.py's lab11-* rules run them)."""

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
MYSTERIES = ("brighten", "tally", "price_orders", "flip_blocks", "clipped_step", "decay_all")
KERNELS = MYSTERIES[:4]

RIGHT = {"brighten": "uncoalesced", "tally": "bank_conflicts", "price_orders": "divergence",
         "flip_blocks": "low_occupancy", "clipped_step": "host_sync", "decay_all": "launch_bound"}
ALL_WORDS = " ".join(["uncoalesced", "bank_conflicts", "divergence", "low_occupancy", "host_sync",
                      "launch_bound", "unfused_chain", "no_tensor_cores"])
EVERYTHING = {**{f"ex1_test_{m}": 1 for m in MYSTERIES}, **{f"ex2_test_{m}": 1 for m in KERNELS},
              "ex3_test_clipped_step": 1, "ex3_test_decay_all": 1}
NOTHING = dict.fromkeys(EVERYTHING, 0)


def _lost(*mysteries_or_cells: str) -> dict:
    """Full marks except these cells, or every cell of these mysteries (its diagnosis and its fix)."""
    lost = set()
    for item in mysteries_or_cells:
        lost |= {cell for cell in EVERYTHING if cell == item or cell.endswith(f"_test_{item}")}
    return {cell: 0 if cell in lost else points for cell, points in EVERYTHING.items()}


def _fix_cell(cell: str, old: str, new: str) -> str:
    source = next(c.source for c in solution_notebook(LAB).cells
                  if c.metadata.get("nbgrader", {}).get("grade_id") == cell)
    assert old in source, old
    return source.replace(old, new)


def _cell(cell: str) -> str:
    """The solution's source of one cell."""
    return next(c.source for c in solution_notebook(LAB).cells
                if c.metadata.get("nbgrader", {}).get("grade_id") == cell)


def _causes(causes) -> str:
    """The solution's exercise 1 cell with another ``causes``."""
    old = ('causes = {"brighten": "uncoalesced", "tally": "bank_conflicts", "price_orders": "divergence",\n'
           '          "flip_blocks": "low_occupancy", "clipped_step": "host_sync", "decay_all": "launch_bound"}')
    return _fix_cell("ex1_solution", old, f"causes = {causes!r}")


def _with_evidence(extra: str, causes=RIGHT) -> str:
    """Exercise 1 with these causes and, after the solution's evidence, ``extra`` lines."""
    return _causes(causes) + "\n" + extra + "\n"


EVERY_CAUSE_STRING = _causes(dict.fromkeys(RIGHT, ALL_WORDS))
# a guess: unfused_chain everywhere (decay_all's evidence, aten::mul_ 24, does show it), the whole list for brighten
GUESSED = _causes({**dict.fromkeys(RIGHT, "unfused_chain"), "brighten": ALL_WORDS.split()})
MADE_UP = _with_evidence("evidence = {name: (metric, value * 2 + 1) for name, (metric, value) in evidence.items()}")
DECOY_AND_NO_EVIDENCE = _with_evidence(
    'evidence["tally"] = ("sm__maximum_warps_per_active_cycle_pct",\n'
    '                     profiles["tally"].value("sm__maximum_warps_per_active_cycle_pct"))\n'
    'evidence["brighten"] = ("launch__thread_count", profiles["brighten"].value("launch__thread_count"))',
    {**RIGHT, "tally": "low_occupancy"})
LAZY_WORD = _with_evidence('''
class _EqualToEverything(str):
    def __eq__(self, other):
        return True

    __hash__ = str.__hash__


causes["price_orders"] = _EqualToEverything("divergence")''')

# Kernels that replay the mystery's output on the lab's inputs: every visible check passes (coalesced,
# no shared memory, no branch), the outputs are right there, and wrong on any other inputs.
REPLAYED = '''
_R = {name: mystery_output(name).copy() for name in rootcauses.KERNEL_MYSTERIES}
R_B, R_T, R_P, R_F = _R["brighten"], _R["tally"], _R["price_orders"], _R["flip_blocks"]


@cuda.jit
def brighten_replay(out, img, height, width):
    i = cuda.grid(1)
    if i < height * width:
        out[i] = R_B[i % R_B.size] + img[i] * 0.0


@cuda.jit
def tally_replay(out, classes, per_thread):
    i = cuda.grid(1)
    n_threads = cuda.gridDim.x * cuda.blockDim.x
    for b in range(BINS):
        out[b * n_threads + i] = R_T[(b * n_threads + i) % R_T.size]


@cuda.jit
def price_orders_replay(out, qty, price, kind):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = R_P[i % R_P.size]


@cuda.jit
def flip_blocks_replay(out, a):
    i = cuda.grid(1)
    out[i] = R_F[i % R_F.size]


fixed_kernels = {"brighten": brighten_replay, "tally": tally_replay, "price_orders": price_orders_replay,
                 "flip_blocks": flip_blocks_replay}
'''

# The norm read on the host through DLPack (no method the spy wraps, no _local_scalar_dense: the visible
# check sees no wait); the decay loop hidden from a parent-based count by a profiler annotation.
HIDDEN_READ_AND_ANNOTATION = '''
def clipped_step_fixed(model, opt, x, y, max_norm=1.0):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    norm = torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters()))
    divisor = max(1.0, float(np.from_dlpack(norm.detach())) / max_norm)
    for p in model.parameters():
        p.grad.div_(divisor)
    opt.step()
    return loss.detach()


def decay_all_fixed(params, rate):
    with torch.profiler.record_function("decay_all"):
        for p in params:
            p.mul_(1.0 - rate)
'''

# Still waits (float(norm) on the host), and decays through NumPy views: no operator of torch's at all.
WAITS_AND_NUMPY = '''
def clipped_step_fixed(model, opt, x, y, max_norm=1.0):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    norm = torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters()))
    divisor = max(1.0, float(norm) / max_norm)
    for p in model.parameters():
        p.grad.div_(divisor)
    opt.step()
    return loss.detach()


def decay_all_fixed(params, rate):
    for p in params:
        view = p.numpy()
        view *= np.float32(1.0 - rate)
'''

# Issue 46: fixed_kernels as a dict whose lookup walks up the frames (through a name built in exercise 1's
# cell) to the seed the grader drew, and hands back a kernel that replays the mystery's output for that seed
# — it scored brighten's fix when the hidden block read fixed_kernels["brighten"] on its own thread; read on
# the learner's thread (trace_launch key=), no seed is there. And the mystery itself handed in as
# clipped_step's fix (FORBIDDEN; the visible check already sees it wait).
SEED_READER = """

import sys

R_BRIGHTEN = mystery_output("brighten").copy()


@cuda.jit
def brighten_replay(out, img, height, width):
    i = cuda.grid(1)
    if i < height * width:
        out[i] = R_BRIGHTEN[i] + img[i] * 0.0


class SeedReader(dict):
    def __getitem__(self, name):
        global R_BRIGHTEN
        if name != "brighten":
            return dict.__getitem__(self, name)
        frame, seed = getattr(sys, FRAME)(1), rootcauses.SEED
        while frame is not None and seed == rootcauses.SEED:
            for scope in (getattr(frame, LOCALS), getattr(frame, GLOBALS)):
                for key in ("seed", "_seed"):
                    if type(scope.get(key)) is int:
                        seed = scope[key]
            frame = getattr(frame, BACK)
        R_BRIGHTEN = mystery_output("brighten", seed).copy()
        return brighten_replay


fixed_kernels = SeedReader(fixed_kernels)
"""
FRAME_NAME = ('# for exercise 2: names built in another cell than the one that uses them\n'
              'FRAME, LOCALS, GLOBALS, BACK = "_get" + "frame", "f_" + "locals", "f_" + "globals", "f_" + "back"')
MYSTERY_AS_FIX = "\n\nclipped_step_fixed = rootcauses.kernels.clipped_step  # the mystery, handed in\n"


@pytest.mark.slow
def test_lab11_round_trip(tmp_path):
    released = course_copy(tmp_path / "release", LAB) / "labs" / LAB / f"{LAB}.ipynb"
    untouched = nbformat.read(released, as_version=4)
    assert "BEGIN SOLUTION" not in released.read_text() and "BEGIN HIDDEN" not in released.read_text()
    assert "uncoalesced\", \"tally\"" not in released.read_text()  # the answers are not in the released lab
    solution = solution_notebook(LAB)
    changes_result = {
        "ex2_solution": _fix_cell("ex2_solution", "float32(-1.0))", "float32(1.0))"),
        "ex3_solution": _fix_cell("ex3_solution", "1.0 - rate)", "1.0 - 2 * rate)"),
    }
    scores = grade_lab(LAB, {
        "solution": solution,
        "untouched": untouched,
        "every_cause_string": with_cells(solution, {"ex1_solution": EVERY_CAUSE_STRING}),
        "guessed": with_cells(solution, {"ex1_solution": GUESSED}),
        "made_up_values": with_cells(solution, {"ex1_solution": MADE_UP}),
        # the decoy and no evidence (tally, brighten) ride with a fix that changes price_orders' and decay_all's
        # results: no graded cell of one reads what the other changed
        "decoy_and_no_evidence+changes_result": with_cells(solution, {"ex1_solution": DECOY_AND_NO_EVIDENCE,
                                                                      **changes_result}),
        "lazy_word": with_cells(solution, {"ex1_solution": LAZY_WORD}),
        "replayed_kernels+hidden_read_and_annotation": with_cells(solution, {
            "ex2_solution": REPLAYED, "ex3_solution": HIDDEN_READ_AND_ANNOTATION}),
        "wrong_cause_waits_numpy": with_cells(solution, {
            "ex1_solution": _causes({**RIGHT, "brighten": "bank_conflicts"}), "ex3_solution": WAITS_AND_NUMPY}),
        "seed_reader+mystery_as_fix": with_cells(solution, {
            "ex1_solution": _with_evidence(FRAME_NAME), "ex2_solution": _cell("ex2_solution") + SEED_READER,
            "ex3_solution": _cell("ex3_solution") + MYSTERY_AS_FIX}),
        # a wrong cause that passes the visible checks, behind a patch of the course's checks: 0 (GraderIntegrity)
        "patched_course": with_course_patched(with_cells(solution, {
            "ex1_solution": _causes({**RIGHT, "brighten": "bank_conflicts"})})),
        **with_ipython_hooks(untouched),  # no answers, behind IPython hooks (labtools.IPYTHON_HOOKS): 0
    }, tmp_path / "grade")
    assert scores["solution"].cells == EVERYTHING
    assert scores["solution"].total == scores["solution"].max_score == 12
    assert scores["untouched"].cells == NOTHING
    for student in ("every_cause_string", "guessed", "made_up_values"):
        assert scores[student].cells == NOTHING, student
    assert scores["decoy_and_no_evidence+changes_result"].cells == _lost("tally", "brighten", "ex2_test_price_orders",
                                                                         "ex3_test_decay_all")
    assert scores["lazy_word"].cells == NOTHING  # a class deciding its own == fails every hidden block (hidden.py)
    assert scores["replayed_kernels+hidden_read_and_annotation"].cells == _lost(
        *(f"ex2_test_{m}" for m in KERNELS), "ex3_test_clipped_step", "ex3_test_decay_all")
    assert scores["wrong_cause_waits_numpy"].cells == _lost("brighten", "ex3_test_clipped_step", "ex3_test_decay_all")
    assert any("the host still waits" in e for e in errors(scores["wrong_cause_waits_numpy"].notebook))
    assert any("is not 2" in e or "in its profile" in e for e in errors(scores["made_up_values"].notebook))
    assert scores["seed_reader+mystery_as_fix"].cells == _lost("ex2_test_brighten", "ex3_test_clipped_step")


# ---- the mechanisms, one by one (fast: no nbgrader) ----

def _replay_of(name: str):
    """A kernel that writes the mystery's output on the lab's inputs, whatever its own inputs."""
    from numba import cuda

    from gpucourse.lessons import rootcauses

    replay = rootcauses.mystery_output(name).copy()
    inputs = ", ".join(f"unused{k}" for k in range(len(rootcauses.launch(name)[3]) - 1))
    namespace = {"cuda": cuda, "replay": replay}
    exec(f"""
def kernel(out, {inputs}):
    stride = cuda.gridDim.x * cuda.blockDim.x
    for j in range(cuda.grid(1), out.size, stride):
        out[j] = replay[j % replay.size]
""", namespace)  # noqa: S102  (the mystery's own arguments, which the replay ignores)
    return cuda.jit(namespace["kernel"])


@pytest.mark.parametrize("name", KERNELS)
def test_a_replayed_output_passes_on_the_lab_s_inputs_and_fails_on_fresh_ones(name):
    import numpy as np

    from gpucourse.lessons import rootcauses

    lab_args, fresh_args = rootcauses.launch(name)[3], rootcauses.launch(name, 4611)[3]
    assert lab_args[0].size != fresh_args[0].size  # other sizes, not only other values
    replay = _replay_of(name)
    assert np.array_equal(rootcauses.run_kernel(replay, name)[1], rootcauses.mystery_output(name))
    assert not np.array_equal(rootcauses.run_kernel(replay, name, 4611)[1], rootcauses.mystery_output(name, 4611))
    # the mystery itself is the same kernel on every seed
    kernel = rootcauses.launch(name, 4611)[0]
    assert np.array_equal(rootcauses.run_kernel(kernel, name, 4611)[1], rootcauses.mystery_output(name, 4611))


def test_a_fresh_seed_is_never_the_lab_s_and_draws_other_steps():
    from gpucourse.lessons import rootcauses

    seeds = {rootcauses.fresh_seed() for _ in range(20)}
    assert rootcauses.SEED not in seeds and len(seeds) > 1
    assert len(rootcauses.step_inputs("decay_all", 4611)[0]) != len(rootcauses.step_inputs("decay_all")[0])
    lab_model, fresh_model = (rootcauses.step_inputs("clipped_step", seed)[0] for seed in (rootcauses.SEED, 4611))
    assert lab_model.fc1.weight.shape != fresh_model.fc1.weight.shape


def _step_reading(read: str):
    """clipped_step's fix, with the divisor computed through ``read`` (a host read of ``norm``)."""
    import numpy as np  # noqa: F401  (the reads use it)
    import torch

    namespace = {"np": np, "torch": torch}
    exec(f"""
def step(model, opt, x, y, max_norm=1.0):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    norm = torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters()))
    divisor = {read}
    for p in model.parameters():
        p.grad.div_(divisor)
    opt.step()
    return loss.detach()
""", namespace)  # noqa: S102
    return namespace["step"]


HOST_READS = {
    "item": "max(1.0, norm.item() / max_norm)",
    "float": "max(1.0, float(norm) / max_norm)",
    "max on a tensor": "max(1.0, norm / max_norm)",
    "tolist": "max(1.0, norm.tolist() / max_norm)",
    "cpu": "torch.clamp(norm.cpu() / max_norm, min=1.0)",
    "numpy": "max(1.0, float(norm.detach().numpy()) / max_norm)",
    "dlpack (no method the spy wraps)": "max(1.0, float(np.from_dlpack(norm.detach())) / max_norm)",
    "storage bytes": "max(1.0, float(np.frombuffer(bytes(norm.detach().untyped_storage()), np.float32)[0]) / max_norm)",
    "print": "(print(norm), torch.clamp(norm / max_norm, min=1.0))[1]",
    "inside a library": "(torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9, error_if_nonfinite=True), "
                        "torch.clamp(norm / max_norm, min=1.0))[1]",
}


@pytest.mark.parametrize("spelling", sorted(HOST_READS))
def test_a_host_read_fails_on_the_meta_device_however_it_is_spelled(spelling, capsys):
    from gpucourse.lessons import rootcauses

    step = _step_reading(HOST_READS[spelling])
    assert rootcauses.host_read_error(step, *rootcauses.step_inputs("clipped_step")) is not None, spelling


def test_the_meta_run_passes_a_step_that_reads_nothing_and_fails_the_mystery():
    from gpucourse.lessons import rootcauses

    fixed = _step_reading("torch.clamp(norm / max_norm, min=1.0)")
    assert rootcauses.host_read_error(fixed, *rootcauses.step_inputs("clipped_step")) is None
    mystery = rootcauses.host_read_error(rootcauses.kernels.clipped_step, *rootcauses.step_inputs("clipped_step"))
    assert "meta" in mystery
    assert rootcauses.host_read_error(rootcauses.kernels.decay_all, *rootcauses.step_inputs("decay_all")) is None

    def through_numpy(params, rate):
        for p in params:
            p.numpy()[...] *= 1.0 - rate

    assert rootcauses.host_read_error(through_numpy, *rootcauses.step_inputs("decay_all")) is not None
    params, _ = rootcauses.step_inputs("decay_all")
    before = params[0].clone()
    rootcauses.host_read_error(rootcauses.kernels.decay_all, params, 0.5)
    assert params[0].equal(before)  # the meta run works on copies: the caller's tensors are untouched


def test_operator_counts_do_not_change_under_annotations():
    import torch

    from gpucourse.lessons import rootcauses

    def annotated_loop(params, rate):
        with torch.profiler.record_function("decay_all"):
            for p in params:
                with torch.profiler.record_function("one tensor"):
                    p.mul_(1.0 - rate)

    def annotated_foreach(params, rate):
        with torch.profiler.record_function("decay_all"):
            torch._foreach_mul_(params, 1.0 - rate)

    params = rootcauses.step_inputs("decay_all")
    assert rootcauses.top_level_ops(annotated_loop, *params) == {"aten::mul_": 24}
    assert rootcauses.top_level_ops(rootcauses.kernels.decay_all, *params) == {"aten::mul_": 24}
    assert rootcauses.top_level_ops(annotated_foreach, *params) == {"aten::_foreach_mul_": 1}


@pytest.mark.parametrize("seed", [11, 4611, 99])
def test_decay_all_s_evidence_is_one_operator_per_tensor_not_a_chain(seed):
    """What tells launch_bound from unfused_chain (rootcauses.CAUSE_SIGNS): one operator, once per tensor,
    its count following the list's length; no second elementwise operator over the same tensor."""
    from gpucourse.lessons import rootcauses

    params, rate = rootcauses.step_inputs("decay_all", seed)
    assert rootcauses.top_level_ops(rootcauses.kernels.decay_all, params, rate) == {"aten::mul_": len(params)}
    assert "one small operator runs once per tensor" in rootcauses.CAUSE_SIGNS["launch_bound"]
    assert "several different elementwise operators" in rootcauses.CAUSE_SIGNS["unfused_chain"]


def test_answers_are_compared_only_as_plain_data():
    import numpy as np

    from gpucourse.lessons import rootcauses

    class EqualToEverything(str):
        def __eq__(self, other):
            return True

        __hash__ = str.__hash__

    assert rootcauses.plain_word("divergence") == "divergence"
    assert rootcauses.plain_word(EqualToEverything("x")) is None and rootcauses.plain_word(["divergence"]) is None
    assert rootcauses.plain_pair(("aten::mul_", 24)) == ("aten::mul_", 24.0)
    assert rootcauses.plain_pair(("m", np.float64(2.5))) == ("m", 2.5)
    for bad in (["aten::mul_", 24], ("aten::mul_", "24"), (EqualToEverything("m"), 1), ("m", np.array([1.0])),
                ("m", True), ("m", 1, 2)):
        assert rootcauses.plain_pair(bad) is None, bad


def test_the_mysteries_and_the_lab_s_visible_text_name_no_cause_and_no_fix():
    """W21: the docstrings named the causes ("padded to a full row of banks", "room for any block", "walked
    pixels column by column") and the hints the fixes; the fixes now sit behind a second fold."""
    import inspect
    import re

    from gpucourse.lessons import rootcauses
    from gpucourse.tooling.build import ROOT

    source = inspect.getsource(rootcauses.kernels).lower()
    for word in ("coalesc", "bank", "diverg", "occupan", "host", "launch", "fus", "chain", "padded", "room for",
                 "column", "foreach"):
        assert word not in source, word
    lab = nbformat.read(ROOT / "labs" / LAB / f"{LAB}.ipynb", as_version=4)
    gid = [c.metadata.get("nbgrader", {}).get("grade_id", "") for c in lab.cells]
    visible = " ".join(c.source for c, g in zip(lab.cells, gid)
                       if c.cell_type == "markdown" and not g.endswith("hints"))
    first_fold = " ".join(c.source for c, g in zip(lab.cells, gid) if re.fullmatch(r"ex\d_hints", g))
    second_fold = " ".join(c.source for c, g in zip(lab.cells, gid) if g.endswith("_fix_hints"))
    for fix in ("b * TALLY_BLOCK + t", "torch.clamp(norm / max_norm, min=1.0)", "_foreach_mul_", "indexed by `k`"):
        assert fix not in visible and fix not in first_fold and fix in second_fold, fix
    for cause in rootcauses.CAUSES:
        assert cause not in first_fold, cause
    assert [g for g in gid if g.startswith("ex1_test_")] == [f"ex1_test_{m}" for m in MYSTERIES]
    points = {g: c.metadata["nbgrader"].get("points") for c, g in zip(lab.cells, gid)
              if c.metadata.get("nbgrader", {}).get("grade")}
    assert points == EVERYTHING
