"""Lab 08 (the capstone) through real nbgrader: the solution (batches prepared ahead in pinned host
memory, copied with non_blocking=True) and the other fix lesson 08 allows (batches made on the
device) score full marks, the untouched lab 0, and known-wrong fixes lose the points of the part they
get wrong: a different activation (ReLU, the erf GELU), the hand-written chain kept, the width left
at 1020, a loss read inside the loop by `print(loss)` (source 004's advice) or `float(loss)`, the
loopholes a count of `aten::_local_scalar_dense` alone misses (`.cpu()`, `.tolist()`,
`torch.cuda.synchronize()`, a prefetch copied without non_blocking), the batch still made on the
host per step, the whole model cast to bf16, no autocast, and findings that name the wrong line or
count only `_local_scalar_dense` as the host's waits. Graded on the profile, so the same on a CPU
and on a GPU; each wrong student carries two wrong parts (one per exercise) to keep the round trip
short."""

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

LAB = "lab08_feeding"

pytestmark = pytest.mark.slow

def _findings(**wrong) -> str:
    right = {"local_scalar_dense_line": "losses.append(loss.item())  # log every step",
             "randn_line": "    x = torch.randn(BATCH, FEATURES, generator=g)",
             "blocking_copy_line": "return x.to(DEVICE), (x @ TEACHER).to(DEVICE)",
             "host_syncs_per_step": 3, "activation_ops": 9}
    return f"findings = {({**right, **wrong})!r}\n"


FINDINGS_ONLY_ITEM = _findings(host_syncs_per_step=1)  # what aten::_local_scalar_dense alone shows
FINDINGS_WRONG_LINE = _findings(blocking_copy_line="x, y = host_batch(step)")  # the call, not the copy
FINDINGS_RANDN_NORMALISED = _findings(randn_line="x = (x - x.mean(dim=0)) / x.std(dim=0)")


def _ex2(activation: str, hidden: int = 1024) -> str:
    return f'''
def gelu_fused(h):
    return {activation}


class FastMLP(SlowMLP):
    def __init__(self, hidden={hidden}, seed=0):
        super().__init__(hidden, seed)

    def act(self, h):
        return gelu_fused(h)
'''


RELU = _ex2("torch.relu(h)")
ERF_GELU = _ex2("F.gelu(h)")
HAND_WRITTEN = _ex2("0.5 * h * (1.0 + torch.tanh(0.7978845608 * (h + 0.044715 * h * h * h)))")
WIDTH_1020 = _ex2('F.gelu(h, approximate="tanh")', hidden=1020)


def _ex3(loop_body_end: str, *, autocast: bool = True, pure_bf16: bool = False, host_data: bool = False) -> str:
    """Batches made on the device before the loop (the other fix the lab accepts), and one wrong part."""
    cast = "model.to(torch.bfloat16)\n    xs, ys = xs.bfloat16(), ys.bfloat16()" if pure_bf16 else "pass"
    data = "x, y = host_batch(step)" if host_data else "x, y = xs[step], ys[step]"
    context = ("torch.autocast(device_type=torch.device(DEVICE).type, dtype=torch.bfloat16, enabled=bf16)"
               if autocast else "torch.enable_grad()")
    forward = f"with {context}:\n            loss = F.mse_loss(model(x), y)"
    return f'''
def fast_train(model, steps, bf16=True):
    model.to(DEVICE)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    xs = torch.randn(steps, BATCH, FEATURES, device=DEVICE)
    xs = (xs - xs.mean(dim=1, keepdim=True)) / xs.std(dim=1, keepdim=True)
    ys = xs @ TEACHER.to(DEVICE)
    {cast}
    losses = torch.empty(steps, device=DEVICE)
    for step in range(steps):
        {data}
        {forward}
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses[step] = loss.detach()
        {loop_body_end}
    return losses
'''


def _prefetch(copy: str) -> str:
    """Batches prepared ahead on the host (pinned on a GPU), each copied in the loop by ``copy``."""
    return f'''
def fast_train(model, steps, bf16=True):
    model.to(DEVICE)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    xs = torch.randn(steps, BATCH, FEATURES)
    xs = (xs - xs.mean(dim=1, keepdim=True)) / xs.std(dim=1, keepdim=True)
    ys = xs @ TEACHER
    if DEVICE == "cuda":
        xs, ys = xs.pin_memory(), ys.pin_memory()
    losses = torch.empty(steps, device=DEVICE)
    for step in range(steps):
        x, y = {copy}
        with torch.autocast(device_type=torch.device(DEVICE).type, dtype=torch.bfloat16, enabled=bf16):
            loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses[step] = loss.detach()
    return losses
'''


PRINT_LOSS = _ex3("print(loss)")  # source 004: "prints without sync" — the profile says otherwise
FLOAT_LOSS = _ex3("last = float(loss)")
# loopholes of a test that counted aten::_local_scalar_dense only (review C3): each makes the host wait on a GPU
CPU_LOSS = _ex3("last = loss.cpu()")
TOLIST_LOSS = _ex3("last = loss.tolist()")
SYNCHRONIZE = _ex3("torch.cuda.synchronize()")
BLOCKING_PREFETCH = _prefetch("xs[step].to(DEVICE), ys[step].to(DEVICE)")  # pinned, but the copy waits
ON_DEVICE = _ex3("pass")  # batches made on the device: a fix the lab accepts
HOST_DATA = _ex3("pass", host_data=True)
PURE_BF16 = _ex3("pass", pure_bf16=True)
NO_AUTOCAST = _ex3("pass", autocast=False)

# Issue 46 (both ride with ON_DEVICE, the accepted variant of exercise 3): exercise 1's findings in a dict
# subclass whose lookups give the right lines while it holds wrong ones (refused: not plain data), and a
# gelu_fused of the wrong function in a tensor subclass that agrees with every torch.allclose — one operator,
# so it passed every check and scored 3 of 3 while the hidden block called it on its own thread and compared
# what came back (no comparison dunder of snapshot.custom_comparisons' list: __torch_function__); frozen, an
# exact torch.Tensor only, it is refused.
LYING_FINDINGS = '''
class Findings(dict):
    def __getitem__(self, key):
        return {"local_scalar_dense_line": "losses.append(loss.item())",
                "randn_line": "x = torch.randn(BATCH, FEATURES, generator=g)",
                "blocking_copy_line": "return x.to(DEVICE), (x @ TEACHER).to(DEVICE)",
                "host_syncs_per_step": 3, "activation_ops": 9}[key]

    def get(self, key, default=None):
        return self[key]


findings = Findings(local_scalar_dense_line="?", randn_line="?", blocking_copy_line="?", host_syncs_per_step=0,
                    activation_ops=0)
'''
AGREEABLE_TENSOR = '''
class Agreeable(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.allclose:
            return True
        return super().__torch_function__(func, types, args, kwargs or {})


def gelu_fused(h):
    return torch.tanh(h).as_subclass(Agreeable)


class FastMLP(SlowMLP):
    def __init__(self, hidden=1024, seed=0):
        super().__init__(hidden, seed)

    def act(self, h):
        return F.gelu(h, approximate="tanh")
'''


def test_lab08_round_trip(tmp_path):
    released = course_copy(tmp_path / "release", LAB) / "labs" / LAB / f"{LAB}.ipynb"
    untouched = nbformat.read(released, as_version=4)
    assert "BEGIN SOLUTION" not in released.read_text() and "BEGIN HIDDEN" not in released.read_text()
    solution = solution_notebook(LAB)
    scores = grade_lab(LAB, {
        "solution": solution,
        "untouched": untouched,
        **with_ipython_hooks(untouched),  # no answers, behind IPython hooks (labtools.IPYTHON_HOOKS): 0
        "relu_print": with_cells(solution, {"ex2_solution": RELU, "ex3_solution": PRINT_LOSS}),
        "erf_float": with_cells(solution, {"ex2_solution": ERF_GELU, "ex3_solution": FLOAT_LOSS}),
        "unfused_hostdata": with_cells(solution, {"ex2_solution": HAND_WRITTEN, "ex3_solution": HOST_DATA}),
        "width_purebf16": with_cells(solution, {"ex2_solution": WIDTH_1020, "ex3_solution": PURE_BF16}),
        "findings_fp32": with_cells(solution, {"ex1_solution": FINDINGS_ONLY_ITEM, "ex3_solution": NO_AUTOCAST}),
        "on_device+lying_findings+agreeable_tensor": with_cells(solution, {
            "ex1_solution": LYING_FINDINGS, "ex2_solution": AGREEABLE_TENSOR, "ex3_solution": ON_DEVICE}),
        "line_cpu": with_cells(solution, {"ex1_solution": FINDINGS_WRONG_LINE, "ex3_solution": CPU_LOSS}),
        "randn_tolist": with_cells(solution, {"ex1_solution": FINDINGS_RANDN_NORMALISED, "ex3_solution": TOLIST_LOSS}),
        "width_synchronize": with_cells(solution, {"ex2_solution": WIDTH_1020, "ex3_solution": SYNCHRONIZE}),
        "unfused_blocking": with_cells(solution, {"ex2_solution": HAND_WRITTEN, "ex3_solution": BLOCKING_PREFETCH}),
        # known-wrong answers behind a patch of the course's checks (labtools.COURSE_PATCH): 0
        "patched_course": with_course_patched(with_cells(solution, {"ex2_solution": RELU, "ex3_solution": PRINT_LOSS})),
    }, tmp_path / "grade")
    everything = {"ex1_test": 5, "ex2_test": 3, "ex3_test": 4}
    assert scores["solution"].cells == everything
    assert scores["solution"].total == scores["solution"].max_score == 12
    assert scores["untouched"].cells == dict.fromkeys(everything, 0)
    for student in ("relu_print", "erf_float", "unfused_hostdata", "width_purebf16"):
        assert scores[student].cells == {**everything, "ex2_test": 0, "ex3_test": 0}, student
    assert scores["findings_fp32"].cells == {**everything, "ex1_test": 0, "ex3_test": 0}
    assert scores["on_device+lying_findings+agreeable_tensor"].cells == {**everything, "ex1_test": 0, "ex2_test": 0}
    refusals = errors(scores["on_device+lying_findings+agreeable_tensor"].notebook)
    assert sum("HiddenTestRefused" in e for e in refusals) == 2, refusals
    for student in ("line_cpu", "randn_tolist"):
        assert scores[student].cells == {**everything, "ex1_test": 0, "ex3_test": 0}, student
    for student in ("width_synchronize", "unfused_blocking"):
        assert scores[student].cells == {**everything, "ex2_test": 0, "ex3_test": 0}, student
    for student in ("line_cpu", "randn_tolist", "width_synchronize", "unfused_blocking"):  # failed for the wait
        assert any("the host waits for the GPU inside the loop" in e for e in errors(scores[student].notebook)), (
            student, errors(scores[student].notebook))
