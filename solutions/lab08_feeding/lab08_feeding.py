# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: nbgrader,-all
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
# *About 40 minutes. Goes with lesson 08 "Feeding the GPU"; uses lesson 07's bf16.*
#
# Below is a small PyTorch training loop with five planted causes of a slow step, all from the
# course's "book of root causes": a host synchronisation every step, a batch prepared on the host
# inside the loop, a chain of tiny unfused operations, fp32 where bf16 would do, and a matrix
# dimension that is not a multiple of 8. You will **profile** it with `torch.profiler`, **name**
# each cause with the number the profile shows, and **fix** it.
#
# You are graded on what the profile shows after your fix — synchronisations per step, operators,
# host work in the loop, dtypes and shapes — never on wall time, so the lab grades the same on a
# laptop's CPU as on a GPU. With a GPU the last cell measures the speed-up.
#
# How to work: fill in every cell that says `YOUR CODE HERE` (delete the `raise
# NotImplementedError()` line). Don't edit the test cells: they are locked and are graded
# again, with more hidden cases, after you submit. In JupyterLab, **Kernel → Restart Kernel and
# Run All Cells** before you submit, then use **Validate**.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
from collections import Counter

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
    """Operators per training step: profile 2 steps and 4 steps, and halve the difference (this
    removes what runs once per call, such as creating the optimizer)."""
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
# call is gone), most frequent first. On a GPU it also records the kernels and the
# synchronisations; on the CPU it records the same operators. What to look for:
#
# * `aten::_local_scalar_dense`: Python asked for a number (`.item()`, `float(t)`, `print(t)`,
#   `if t:`) — on a GPU, the host waits for every queued kernel, then copies the value back;
# * `aten::randn`, `aten::std` …: work that makes the data, inside the loop;
# * long runs of `aten::mul`, `aten::add`, `aten::tanh`: one tiny kernel each, every intermediate
#   written to memory and read back;
# * the matmuls' dtypes (`float` is fp32) and shapes (tensor cores want multiples of 8).

# %% nbgrader={"grade": false, "grade_id": "profile", "locked": true, "schema_version": 3, "solution": false, "task": false}
slow_counts = per_step_counts(slow_train, SlowMLP)
print("operators per step of slow_train:")
for name, count in slow_counts.most_common():
    print(f"  {count:5.1f}  {name}")
print("\nmatmuls of one step:")
for m in matmuls(slow_train, SlowMLP):
    print(f"  {m['op']:12} shapes {m['shapes']}  dtypes {m['dtypes']}")
print("\nelementwise operators in one call of the activation:", elementwise_ops(SlowMLP().act, torch.randn(4, 8)))

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 1 · Name each cause with its evidence (5 points)
#
# Write a dictionary `findings` with these five keys and what the profile above shows for
# `slow_train` (numbers, not guesses; the test recomputes them):
#
# * `"syncs_per_step"`: how many `aten::_local_scalar_dense` per step;
# * `"randn_per_step"`: how many `aten::randn` per step (a batch made inside the loop);
# * `"activation_ops"`: how many elementwise operators one call of `SlowMLP.act` runs (the last
#   line printed above);
# * `"matmul_dtype"`: the dtype the profiler shows for the matmuls' inputs (as it prints it);
# * `"odd_dimension"`: the matrix dimension of the model that is not a multiple of 8.

# %% nbgrader={"grade": false, "grade_id": "ex1_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
findings = {
    "syncs_per_step": slow_counts["aten::_local_scalar_dense"],
    "randn_per_step": slow_counts["aten::randn"],
    "activation_ops": elementwise_ops(SlowMLP().act, torch.randn(4, 8)),
    "matmul_dtype": "float",
    "odd_dimension": 1020,
}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ex1_test", "locked": true, "points": 5, "schema_version": 3, "solution": false, "task": false}
"""Check that each finding is the number the profile of slow_train shows."""
assert set(findings) == {"syncs_per_step", "randn_per_step", "activation_ops", "matmul_dtype", "odd_dimension"}
assert findings["syncs_per_step"] == slow_counts["aten::_local_scalar_dense"], "count aten::_local_scalar_dense"
assert findings["randn_per_step"] == slow_counts["aten::randn"], "count aten::randn per step"
### BEGIN HIDDEN TESTS
check(findings["activation_ops"] == elementwise_ops(SlowMLP().act, torch.randn(3, 5)) == 9)
check(str(findings["matmul_dtype"]).replace("torch.", "") in ("float", "float32"))
check(findings["odd_dimension"] == 1020)
check(findings["syncs_per_step"] >= 1 and findings["randn_per_step"] >= 1)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 2 · One operator for the activation, and a shape for the tensor cores (3 points)
#
# Write `gelu_fused(h)`: the **same function** as `SlowMLP.act` (GELU in its tanh form) in **one**
# operator — PyTorch has it built in (`torch.nn.functional.gelu`; read its `approximate`
# argument). Then `FastMLP`: `SlowMLP` with `gelu_fused` as its activation and a hidden width that
# is a multiple of 8 — the nearest one at or above the old width, so the model does not shrink.
#
# A different function (ReLU, or the erf form of GELU) is not a fix: the model would learn
# something else. (On a GPU `torch.compile` would fuse the hand-written chain for you; the lab does
# not depend on a compiler.)

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
check(FastMLP().fc1.out_features == 1024)
h = torch.randn(7, 33) * 3
check(torch.allclose(gelu_fused(h), SlowMLP().act(h), atol=1e-5))
check(elementwise_ops(FastMLP().act, h) == 1)
check(all(d % 8 == 0 for m in matmuls(slow_train, FastMLP) for s in m["shapes"] for d in s))
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 3 · A loop that keeps the GPU fed (4 points)
#
# Write `fast_train(model, steps)`, the same training as `slow_train` (SGD, learning rate 0.5,
# mean squared error against `x @ TEACHER`), but:
#
# 1. **no synchronisation inside the loop**: keep each step's loss on the device (a tensor) and
#    return all of them as one tensor of `steps` losses; no `.item()`, `float()`, `print()` or `if`
#    on a loss inside the loop;
# 2. **no data made inside the loop**: make every batch before the loop, in one go, on `DEVICE`
#    (`torch.randn(steps, BATCH, FEATURES, device=DEVICE)`, normalised as `host_batch` does, over
#    the batch dimension), and only index them in the loop;
# 3. **bf16 where it is safe**: run the forward pass and the loss under
#    `torch.autocast(device_type=..., dtype=torch.bfloat16)` so that the matmuls read bf16; the
#    weights (the "master" copy the optimizer updates) stay fp32 — do not convert the model.
#
# Call `model.to(DEVICE)` first, like `slow_train`.

# %% nbgrader={"grade": false, "grade_id": "ex3_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
def fast_train(model, steps):
    ### BEGIN SOLUTION
    model.to(DEVICE)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    xs = torch.randn(steps, BATCH, FEATURES, device=DEVICE)
    xs = (xs - xs.mean(dim=1, keepdim=True)) / xs.std(dim=1, keepdim=True)
    ys = xs @ TEACHER.to(DEVICE)
    losses = torch.empty(steps, device=DEVICE)
    for step in range(steps):
        with torch.autocast(device_type=torch.device(DEVICE).type, dtype=torch.bfloat16):
            loss = F.mse_loss(model(xs[step]), ys[step])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses[step] = loss.detach()
    return losses
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex3_test", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
"""Check that fast_train has no synchronisation and no data-making per step, reads bf16 in its
matmuls, keeps fp32 weights, and still learns."""
fast_counts = per_step_counts(fast_train, FastMLP)
assert fast_counts["aten::_local_scalar_dense"] == 0, "a synchronisation per step: is a loss read inside the loop?"
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
check(per_step_counts(fast_train, SlowMLP)["aten::_local_scalar_dense"] == 0)
check(per_step_counts(fast_train, FastMLP)["aten::normal_"] == 0)
check(all(m["dtypes"][:2] == ["c10::BFloat16", "c10::BFloat16"] for m in matmuls(fast_train, SlowMLP)))
check(sum(per_step_counts(fast_train, FastMLP)[n] for n in ("aten::tanh", "aten::pow")) == 0)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "speed_intro", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## With a GPU: the speed-up
#
# On a GPU this cell times 50 steps of each loop with CUDA events (after a warm-up) and prints the
# speed-up; without one it says so and measures nothing — a CPU's time would say nothing about a
# GPU. Which fix bought the most? Try undoing them one at a time.

# %% nbgrader={"grade": false, "grade_id": "speed", "locked": true, "schema_version": 3, "solution": false, "task": false}
timed = feeding.time_per_step_ms({"slow_train": lambda: slow_train(SlowMLP(), 50),
                                  "fast_train": lambda: fast_train(FastMLP(), 50)}, steps=50)
print(timed if timed is not None else "No GPU here: the speed-up is not measured (the lab grades the profile).")
