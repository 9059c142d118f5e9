# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: jupyter,nbgrader,-all
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (gpucourse)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false, "task": false}
# # Lab 08 · Capstone: why is my training step slow?
#
# *About 50 minutes. Goes with lesson 08 "Feeding the GPU"; uses lesson 07's bf16.*
#
# Below is a small PyTorch training loop whose step is slower than it needs to be, for reasons
# lesson 08 ("Feeding the GPU") teaches. Nobody tells you which: you will **profile** it with
# `torch.profiler`, find **which line** causes each count that should not be there, and **fix** the
# loop until its profile shows none of them.
#
# Two more changes from the course's "book of root causes" — bf16 matmuls under autocast and a
# width that is a multiple of 8 — are **not causes of this slow step**: one step multiplies 64×256 by 256×1020, so little
# time goes to matmuls; the step is bound by launches and the host. They pay once matmuls dominate
# (large batches and widths: NVIDIA's *Deep Learning Performance Guide*, "Matrix Multiplication
# Background"). You make them too, and the last cell, on a GPU, measures what each fix buys here,
# one at a time; expect bf16 and the width to buy little or nothing (autocast adds cast kernels).
#
# You are graded on what the profile shows after your fix — host syncs per step, operators, host
# work in the loop, dtypes and shapes — never on wall time, so the lab grades the same on a
# laptop's CPU as on a GPU.
#
# How to work: fill in every cell that says `YOUR CODE HERE` (delete the `raise
# NotImplementedError()` line). Don't edit the test cells: they are locked and are graded
# again, with more hidden cases, after you submit. In JupyterLab, **Kernel → Restart Kernel and
# Run All Cells** before you submit, then use **Validate**.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import inspect
from collections import Counter
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from gpucourse.lessons import feeding
from gpucourse.measure import runtime
from gpucourse.tooling.grading import check

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
BATCH, FEATURES, OUTPUTS = 64, 256, 16
TEACHER = torch.linspace(-1, 1, FEATURES * OUTPUTS).reshape(FEATURES, OUTPUTS).sin() / FEATURES**0.5  # to learn


class SlowMLP(nn.Module):
    def __init__(self, hidden=1020, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.fc1 = nn.Linear(FEATURES, hidden)
        self.fc2 = nn.Linear(hidden, OUTPUTS)

    def act(self, h):
        # GELU in its tanh form, written out by hand
        return 0.5 * h * (1.0 + torch.tanh(0.7978845608 * (h + 0.044715 * h * h * h)))

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def host_batch(step):
    """One batch, made on the host: random inputs, normalised, and the teacher's targets."""
    g = torch.Generator().manual_seed(step)
    x = torch.randn(BATCH, FEATURES, generator=g)
    x = (x - x.mean(dim=0)) / x.std(dim=0)
    return x.to(DEVICE), (x @ TEACHER).to(DEVICE)


def slow_train(model, steps):
    model.to(DEVICE)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    losses = []
    for step in range(steps):
        x, y = host_batch(step)
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())  # log every step
    return losses


def per_step_counts(train, make_model):
    """Operators (and the ``host sync: …`` calls of feeding.spy) per training step: profile 2 steps
    and 4 steps, and halve the difference (this removes what runs once per call, such as creating
    the optimizer)."""
    two = feeding.profile_counts(train, make_model(), 2)
    four = feeding.profile_counts(train, make_model(), 4)
    return Counter({name: (four[name] - two[name]) / 2 for name in four if four[name] != two[name]})


def matmuls(train, make_model):
    """Shapes and dtypes of the model's matrix multiplies (forward and backward: those with the hidden
    width in a shape) in one call of ``train`` for one step, as the profiler saw them."""
    model = make_model()
    hidden = model.fc1.out_features
    found = feeding.matmul_shapes_and_dtypes(feeding.profile_ops(train, model, 1))
    return [m for m in found if any(hidden in shape for shape in m["shapes"])]


def numbered_source(*fns):
    """The source of each function, its lines numbered, as you read it to answer exercise 1."""
    for fn in fns:
        print("\n".join(f"{i:3}  {line}" for i, line in enumerate(inspect.getsource(fn).splitlines(), 1)), "\n")


def elementwise_ops(fn, *args):
    """How many elementwise operators (feeding.ELEMENTWISE_OPS: aten::mul, aten::add, aten::tanh …)
    one call of ``fn`` runs."""
    counts = feeding.profile_counts(fn, *args)
    return sum(counts[name] for name in feeding.ELEMENTWISE_OPS)


runtime.banner()


# %% [markdown] nbgrader={"grade": false, "grade_id": "profile_intro", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Step 1 · Profile the slow loop
#
# `torch.profiler` records every operator the step runs (`aten::...`), with the shapes and dtypes
# of its inputs. The table below lists the operators that run **per step** (so what runs once per
# call is gone), most frequent first. On a GPU it also records the kernels and the runtime's calls
# (`cudaStreamSynchronize` is the host waiting); on the CPU it records the same operators. The
# course's spy (`feeding.spy`) adds `host sync: …` rows: the lines of *your* code that make the host
# wait on a GPU, counted on the CPU too.
#
# Read it as lesson 08 taught: which rows mean the host waits for the GPU, which mean work that
# belongs outside the loop, which mean many tiny kernels where one would do — and which lines of the
# code cause them?
#
# *Hints: in the collapsed cell below (click its ⋯ to open it). Try without them first.*

# %% [markdown] jupyter={"source_hidden": true} nbgrader={"grade": false, "grade_id": "profile_hints", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Hints: what the rows mean**
#
# * `aten::_local_scalar_dense`: Python asked for a number (`.item()`, `float(t)`, `print(t)`,
#   `if t:`) — on a GPU, the host waits for every queued kernel, then copies the value back;
# * `host sync: …`: `.tolist()` and `.cpu()` (no `_local_scalar_dense`: on a GPU they are a
#   device-to-host `aten::_to_copy`), `torch.cuda.synchronize()`, and every copy to the device
#   **without `non_blocking=True`** — PyTorch then copies and waits for the stream
#   (`cudaMemcpyAsync` + `cudaStreamSynchronize`); on the CPU such a copy is a no-op, but the line
#   is the same;
# * `aten::randn`, `aten::std` …: work that makes the data, inside the loop;
# * long runs of `aten::mul`, `aten::add`, `aten::tanh`: one tiny kernel each, every intermediate
#   written to memory and read back;
# * the matmuls' dtypes (`float` is fp32) and shapes.

# %% nbgrader={"grade": false, "grade_id": "profile", "locked": true, "schema_version": 3, "solution": false, "task": false}
slow_counts = per_step_counts(slow_train, SlowMLP)
print("operators per step of slow_train:")
for name, count in slow_counts.most_common():
    print(f"  {count:5.1f}  {name}")
print("\nmatmuls of one step:")
for m in matmuls(slow_train, SlowMLP):
    print(f"  {m['op']:12} shapes {m['shapes']}  dtypes {m['dtypes']}")
print("\nelementwise operators in one call of the activation:", elementwise_ops(SlowMLP().act, torch.randn(4, 8)))
print("\nthe code that ran:\n")
numbered_source(host_batch, slow_train)

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 1 · Which line causes each count? (5 points)
#
# Read the profile and the numbered code above, and write a dictionary `findings` with these five
# keys. A line is given as its text (copy it; spaces around it and a trailing `# comment` do not
# matter):
#
# * `"local_scalar_dense_line"`: the line whose call shows up as `aten::_local_scalar_dense`;
# * `"randn_line"`: the line that makes `aten::randn` run once per step;
# * `"blocking_copy_line"`: the line behind the `host sync: copy … without non_blocking=True`
#   count — on a GPU, each copy on it waits for the stream before the host goes on;
# * `"host_syncs_per_step"`: on a GPU, how many times per step the host of `slow_train` waits for
#   the GPU (each blocking copy and each value read counts once);
# * `"activation_ops"`: how many elementwise operators one call of `SlowMLP.act` runs.

# %% nbgrader={"grade": false, "grade_id": "ex1_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
findings = {
    "local_scalar_dense_line": "losses.append(loss.item())",
    "randn_line": "x = torch.randn(BATCH, FEATURES, generator=g)",
    "blocking_copy_line": "return x.to(DEVICE), (x @ TEACHER).to(DEVICE)",
    "host_syncs_per_step": slow_counts["aten::_local_scalar_dense"] + slow_counts[feeding.BLOCKING_COPY],
    "activation_ops": elementwise_ops(SlowMLP().act, torch.randn(4, 8)),
}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ex1_test", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
"""Check that each line is a line of the code that ran and causes its count, and that the numbers
are what the profile of slow_train shows."""
assert set(findings) == {"local_scalar_dense_line", "randn_line", "blocking_copy_line", "host_syncs_per_step",
                         "activation_ops"}
code = feeding.code_lines(host_batch, slow_train)
for key in ("local_scalar_dense_line", "randn_line", "blocking_copy_line"):
    assert feeding.code_line(findings[key]) in code, f"{key}: not a line of host_batch or slow_train"
assert findings["host_syncs_per_step"] != slow_counts["aten::_local_scalar_dense"], (
    "aten::_local_scalar_dense is not the only way the host waits: what does a copy without non_blocking do?")
### BEGIN HIDDEN TESTS
answer = freeze(findings, "findings")  # plain data: no code of the notebook runs in the comparisons below
check(type(answer) is dict)
check(feeding.code_line(answer.get("local_scalar_dense_line", "")) == "losses.append(loss.item())")
check(feeding.code_line(answer.get("randn_line", "")) == "x = torch.randn(BATCH, FEATURES, generator=g)")
check(feeding.code_line(answer.get("blocking_copy_line", "")) == "return x.to(DEVICE), (x @ TEACHER).to(DEVICE)")
check(answer.get("host_syncs_per_step") == 3)
check(answer.get("activation_ops") == 9)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 2 · One operator for the activation, and a shape for the tensor cores (3 points)
#
# **Goal.** `gelu_fused(h)`: the **same function** as `SlowMLP.act` in **one** operator. Then
# `FastMLP`: `SlowMLP` with `gelu_fused` as its activation and a hidden width that is a multiple of
# 8 — the nearest one at or above the old width, so the model does not shrink.
#
# **Evidence to reach** (the test cell):
#
# * `torch.allclose(gelu_fused(h), SlowMLP().act(h), atol=1e-5)` for h from −6 to 6;
# * `elementwise_ops(gelu_fused, h) == 1`: the profiler sees one operator where it saw nine;
# * every dimension of every matmul in a step of `FastMLP` a multiple of 8.
#
# The width is a habit for large matmuls (tensor cores work on tiles whose sides are multiples of
# 8 for 16-bit inputs), not a cure for this step: the last cell measures whether it buys anything
# here. A different function (ReLU, or another form of the same curve) is not a fix: the model would
# learn something else. (On a GPU `torch.compile` would fuse the hand-written chain for you; the lab
# does not depend on a compiler.)
#
# *Hints: in the collapsed cell below (click its ⋯ to open it). Try without them first.*

# %% [markdown] jupyter={"source_hidden": true} nbgrader={"grade": false, "grade_id": "ex2_hints", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Hints for exercise 2**
#
# * Read `SlowMLP.act` in the setup cell: which activation is that formula? (GELU, in its tanh form.)
# * PyTorch has it built in as one operator: `torch.nn.functional.gelu` (imported here as `F`); read
#   its `approximate` argument.

# %% nbgrader={"grade": false, "grade_id": "ex2_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
def gelu_fused(h):
    ### BEGIN SOLUTION
    return F.gelu(h, approximate="tanh")
    ### END SOLUTION


class FastMLP(SlowMLP):
    ### BEGIN SOLUTION
    def __init__(self, hidden=1024, seed=0):
        super().__init__(hidden, seed)

    def act(self, h):
        return gelu_fused(h)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex2_test", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
"""Check that gelu_fused is SlowMLP's activation in one operator, and that FastMLP's matmuls have
dimensions that are multiples of 8."""
h = torch.linspace(-6, 6, 1001)
assert torch.allclose(gelu_fused(h), SlowMLP().act(h), atol=1e-5), "not the same function as SlowMLP.act"
assert elementwise_ops(gelu_fused, h) == 1, f"not one operator: {dict(feeding.profile_counts(gelu_fused, h))}"
shapes = [s for m in matmuls(slow_train, FastMLP) for s in m["shapes"]]
assert shapes and all(d % 8 == 0 for s in shapes for d in s), f"a dimension is not a multiple of 8: {shapes}"
### BEGIN HIDDEN TESTS
h = torch.randn(7, 33) * 3
got = call(gelu_fused, h.clone())  # on the learner's own thread, frozen to a plain tensor
expected = 0.5 * h * (1.0 + torch.tanh(0.7978845608 * (h + 0.044715 * h * h * h)))  # the grader's own formula
check(type(got) is torch.Tensor and got.shape == h.shape and torch.allclose(got, expected, atol=1e-5))
check(call(elementwise_ops, gelu_fused, h.clone()) == 1)
shapes = call(matmuls, slow_train, FastMLP)  # FastMLP built and profiled on the learner's thread: plain rows
check(bool(shapes) and all(d % 8 == 0 for m in shapes for s in m["shapes"] for d in s)
      and all(any(1024 in s for s in m["shapes"]) for m in shapes))  # the hidden width is 1024


class OneOperatorWidth1024(SlowMLP):  # the grader's model of the fix: its operators per step are the target
    def __init__(self):
        super().__init__(1024)

    def act(self, h):
        return F.gelu(h, approximate="tanh")


counts = call(per_step_counts, slow_train, FastMLP)
target = per_step_counts(slow_train, OneOperatorWidth1024)
check(all(counts.get(name, 0) == target[name] for name in feeding.ELEMENTWISE_OPS))
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 3 · A loop that keeps the GPU fed (4 points)
#
# **Goal.** `fast_train(model, steps, bf16=True)`: the same training as `slow_train` (SGD, learning
# rate 0.5, mean squared error against `x @ TEACHER`, `model.to(DEVICE)` first), returning all
# `steps` losses as **one tensor**, with a loop that keeps a GPU fed: the host never waits for the
# GPU inside it, no data is made inside it, and with `bf16=True` the matmuls read bf16 while the
# weights (the "master" copy the optimizer updates) stay fp32; `bf16=False` runs the same loop in
# fp32, so that the last cell can measure bf16 on its own.
#
# **Evidence to reach** (what the profile of your loop shows, per step; the test cell checks it for
# `FastMLP` and `SlowMLP`, with `bf16=True` and `bf16=False`):
#
# * `feeding.host_syncs(per_step_counts(fast_train, FastMLP))` is empty: no `_local_scalar_dense`
#   and no `host sync: …` row;
# * `aten::randn`, `aten::normal_` and `aten::std` 0 times per step;
# * the matmuls' first two inputs `c10::BFloat16` with `bf16=True`, `float` with `bf16=False`;
# * every parameter still `torch.float32` after training, and the losses of 30 steps finite and falling
#   to under half.
#
# *Hints: in the collapsed cell below (click its ⋯ to open it). Try without them first.*

# %% [markdown] jupyter={"source_hidden": true} nbgrader={"grade": false, "grade_id": "ex3_hints", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Hints for exercise 3**
#
# * Keep each step's loss on the device (write it into a tensor made before the loop): no `.item()`,
#   `float()`, `print()`, `if`, `.tolist()`, `.cpu()` or `torch.cuda.synchronize()` inside the loop,
#   and no copy to the device without `non_blocking=True`.
# * Make every batch before the loop, in one go (`torch.randn(steps, BATCH, FEATURES)`, normalised as
#   `host_batch` does, over the batch dimension). Either make them on `DEVICE` (`device=DEVICE`) and only
#   index them in the loop, or — as lesson 08 teaches for data that comes from the host — keep them on
#   the host in **pinned** memory (`.pin_memory()`, only when `DEVICE == "cuda"`: without a GPU there is
#   nothing to pin for) and copy each batch in the loop with `.to(DEVICE, non_blocking=True)`.
# * Run the forward pass and the loss under `torch.autocast(device_type=..., dtype=torch.bfloat16)`;
#   its `enabled` argument switches it off for `bf16=False`. Do not convert the model.

# %% nbgrader={"grade": false, "grade_id": "ex3_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
def fast_train(model, steps, bf16=True):
    ### BEGIN SOLUTION
    model.to(DEVICE)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    xs = torch.randn(steps, BATCH, FEATURES)  # every batch, made once, on the host
    xs = (xs - xs.mean(dim=1, keepdim=True)) / xs.std(dim=1, keepdim=True)
    ys = xs @ TEACHER
    if DEVICE == "cuda":  # page-locked: the copies below can run without the host waiting
        xs, ys = xs.pin_memory(), ys.pin_memory()
    losses = torch.empty(steps, device=DEVICE)
    for step in range(steps):
        x, y = xs[step].to(DEVICE, non_blocking=True), ys[step].to(DEVICE, non_blocking=True)
        with torch.autocast(device_type=torch.device(DEVICE).type, dtype=torch.bfloat16, enabled=bf16):
            loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses[step] = loss.detach()
    return losses
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex3_test", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
"""Check that the host never waits inside fast_train's loop and makes no data there, that its
matmuls read bf16 (fp32 with bf16=False), that the weights stay fp32, and that it still learns."""
fast_counts = per_step_counts(fast_train, FastMLP)
waits = feeding.host_syncs(fast_counts)
assert not waits, f"the host waits for the GPU inside the loop (per step): {waits}"
assert fast_counts["aten::randn"] == 0 and fast_counts["aten::std"] == 0, "data is still made inside the loop"
step_matmuls = matmuls(fast_train, FastMLP)
assert step_matmuls and all(d == "c10::BFloat16" for m in step_matmuls for d in m["dtypes"][:2]), step_matmuls
model = FastMLP()
losses = fast_train(model, 30)
assert torch.is_tensor(losses) and losses.shape == (30,), "return one tensor of `steps` losses"
assert all(p.dtype == torch.float32 for p in model.parameters()), "the weights must stay fp32 (autocast, not .to())"
assert bool(torch.isfinite(losses).all()) and float(losses[-5:].mean()) < 0.5 * float(losses[:5].mean()), (
    "the loss does not fall: is this still the same training?")
### BEGIN HIDDEN TESTS
# every profile runs the learner's loop on its own thread and comes back as plain counts and rows
check(not feeding.host_syncs(call(per_step_counts, fast_train, SlowMLP)))
check(not feeding.host_syncs(call(per_step_counts, partial(fast_train, bf16=False), FastMLP)))
counts = call(per_step_counts, fast_train, FastMLP)
check(counts.get("aten::normal_", 0) == 0 and counts.get("aten::randn", 0) == 0)
check(sum(counts.get(name, 0) for name in ("aten::tanh", "aten::pow")) == 0)
check(all(m["dtypes"][:2] == ["c10::BFloat16", "c10::BFloat16"] for m in call(matmuls, fast_train, SlowMLP)))
check(all(d == "float" for m in call(matmuls, partial(fast_train, bf16=False), FastMLP) for d in m["dtypes"][:2]))
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "speed_intro", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## With a GPU: what each fix buys
#
# On a GPU this cell times 50 steps of five loops with CUDA events (after a warm-up), each row
# adding **one** fix to the row above: the one-operator GELU, the width 1024, your loop without
# syncs and with batches prepared ahead (in fp32), then bf16. `speed_up_over_row_above` is what that
# one fix bought, measured on your GPU in this order (a fix can buy more or less in another order).
# Without a GPU it says so and measures nothing — a CPU's time would say nothing about a GPU.

# %% nbgrader={"grade": false, "grade_id": "speed", "locked": true, "schema_version": 3, "solution": false, "task": false}
class OneOperatorGeluMLP(SlowMLP):
    def act(self, h):
        return gelu_fused(h)


timed = feeding.time_per_step_ms({
    "slow_train, as given": lambda: slow_train(SlowMLP(), 50),
    "+ one-operator GELU (width 1020)": lambda: slow_train(OneOperatorGeluMLP(), 50),
    "+ width 1024 (FastMLP)": lambda: slow_train(FastMLP(), 50),
    "+ no wait, batches ahead (fast_train, fp32)": lambda: fast_train(FastMLP(), 50, bf16=False),
    "+ bf16 autocast (fast_train)": lambda: fast_train(FastMLP(), 50),
}, steps=50)
if timed is None:
    print("No GPU here: nothing is timed, fix by fix or at all (the lab grades the profile, not the time).")
else:
    print(timed.attrs["source"] + "; each row adds one fix to the row above\n")
    print(timed.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
