"""Lab 08 (the capstone) through real nbgrader: the solution scores full marks, the untouched lab 0,
and known-wrong fixes lose the points of the part they get wrong: a different activation (ReLU, the
erf GELU), the hand-written chain kept, the width left at 1020, a loss read inside the loop by
`print(loss)` (source 004's advice) or `float(loss)`, the batch still made on the host per step,
the whole model cast to bf16, no autocast, and findings that do not match the profile. Graded on the
profile, so the same on a CPU and on a GPU; each wrong student carries two wrong parts (one per
exercise) to keep the round trip short."""

import nbformat
import pytest
from labtools import course_copy, grade_lab, solution_notebook, with_cells, with_course_patched

LAB = "lab08_feeding"

pytestmark = pytest.mark.slow

FINDINGS_NO_SYNC = '''
findings = {"syncs_per_step": 0, "randn_per_step": slow_counts["aten::randn"], "activation_ops": 9,
            "matmul_dtype": "float", "odd_dimension": 1020}
'''


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
    cast = "model.to(torch.bfloat16)\n    xs, ys = xs.bfloat16(), ys.bfloat16()" if pure_bf16 else "pass"
    data = "x, y = host_batch(step)" if host_data else "x, y = xs[step], ys[step]"
    context = "torch.autocast(device_type=torch.device(DEVICE).type, dtype=torch.bfloat16)" if autocast else (
        "torch.enable_grad()")
    forward = f"with {context}:\n            loss = F.mse_loss(model(x), y)"
    return f'''
def fast_train(model, steps):
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


PRINT_LOSS = _ex3("print(loss)")  # source 004: "prints without sync" — the profile says otherwise
FLOAT_LOSS = _ex3("last = float(loss)")
HOST_DATA = _ex3("pass", host_data=True)
PURE_BF16 = _ex3("pass", pure_bf16=True)
NO_AUTOCAST = _ex3("pass", autocast=False)


def test_lab08_round_trip(tmp_path):
    released = course_copy(tmp_path / "release", LAB) / "labs" / LAB / f"{LAB}.ipynb"
    untouched = nbformat.read(released, as_version=4)
    assert "BEGIN SOLUTION" not in released.read_text() and "BEGIN HIDDEN" not in released.read_text()
    solution = solution_notebook(LAB)
    scores = grade_lab(LAB, {
        "solution": solution,
        "untouched": untouched,
        "relu_print": with_cells(solution, {"ex2_solution": RELU, "ex3_solution": PRINT_LOSS}),
        "erf_float": with_cells(solution, {"ex2_solution": ERF_GELU, "ex3_solution": FLOAT_LOSS}),
        "unfused_hostdata": with_cells(solution, {"ex2_solution": HAND_WRITTEN, "ex3_solution": HOST_DATA}),
        "width_purebf16": with_cells(solution, {"ex2_solution": WIDTH_1020, "ex3_solution": PURE_BF16}),
        "findings_fp32": with_cells(solution, {"ex1_solution": FINDINGS_NO_SYNC, "ex3_solution": NO_AUTOCAST}),
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
