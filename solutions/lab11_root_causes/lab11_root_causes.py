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
# # Lab 11 · Root causes: why is this one slow?
#
# *About 90 minutes. Goes after lesson 08 "Feeding the GPU"; uses lessons 02, 03, 04, 05 and 08.*
#
# Six pieces of code, each slow for **one** reason the course has taught. Nobody tells you which.
# For each one you **profile** it, **name** the cause in the course's fixed vocabulary, give the
# **evidence** (the metric that shows that cause and its value, read from *your* profile output),
# and **fix** it.
#
# How you are graded (never on wall time, so the lab grades the same without a GPU):
#
# * **the name** (exercise 1): one word of the vocabulary per mystery; naming several at once earns 0;
# * **the evidence** (exercise 2): a metric that shows the cause you named, with the value the grader
#   recomputes from the mystery's own profile (a made-up or mistyped value earns 0);
# * **the fixes** (exercises 3 and 4): the microscope's counts, the profiler's counts and the output of
#   *your* fixed version, on the same inputs — the output must not change. **A fix earns its points only
#   with the evidence for that mystery right**: a fix you cannot justify with a measurement is a guess.
#
# How to work: fill in every cell that says `YOUR CODE HERE` (delete the `raise
# NotImplementedError()` line). Don't edit the test cells: they are locked and are graded
# again, with more hidden cases, after you submit. In JupyterLab, **Kernel → Restart Kernel and
# Run All Cells** before you submit, then use **Validate**.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import inspect

import numpy as np
import torch
from IPython.display import display

from gpucourse.measure import runtime  # first: it decides GPU or simulator before numba is imported
from gpucourse.tooling.grading import check
from gpucourse.lessons import feeding, rootcauses
from gpucourse.lessons.occupancy import calculator  # noqa: F401  (lesson 05's occupancy calculator, for your checks)
from gpucourse.microscope import profile
from numba import cuda, float32, int32  # noqa: F401  (your fixed kernels use them)

BINS, TALLY_BLOCK, ROW = rootcauses.kernels.BINS, rootcauses.kernels.TALLY_BLOCK, rootcauses.kernels.ROW


def run_fixed(kernel, name):
    """Run ``kernel`` on mystery ``name``'s inputs under the microscope: (its profile, its output)."""
    _, grid, block, args = rootcauses.launch(name)
    return profile(kernel, grid, block, *args), args[0]


def mystery_output(name):
    """The mystery kernel's own output on its inputs (what a fix must still give)."""
    kernel, grid, block, args = rootcauses.launch(name)
    profile(kernel, grid, block, *args)
    return args[0]


runtime.banner()

# %% [markdown] nbgrader={"grade": false, "grade_id": "vocabulary", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## The vocabulary, and the metrics that show each cause
#
# The next cell prints the eight words you may use and, for each, the metrics that show it: ncu's names
# (the microscope reports a traced launch under them: lessons 02, 03, 04, 05) and the profiler's rows
# (lesson 08). Only six causes are in this lab; two words are decoys.

# %% nbgrader={"grade": false, "grade_id": "show_vocabulary", "locked": true, "schema_version": 3, "solution": false, "task": false}
for cause in rootcauses.CAUSES:
    print(f"{cause}:")
    for metric in rootcauses.CAUSE_METRICS[cause]:
        print(f"    {metric}")

# %% [markdown] nbgrader={"grade": false, "grade_id": "mysteries", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## The six mysteries
#
# Four kernels (`brighten`, `tally`, `price_orders`, `flip_blocks`) and two pieces of a training loop
# (`clipped_step`, `decay_all`). Read them: the code is the code that runs. Each kernel takes its output
# first; `rootcauses.launch(name)` gives `(kernel, grid, block, args)` with fresh inputs, the same every
# call, and `rootcauses.step_inputs(name)` the arguments of a step.

# %% nbgrader={"grade": false, "grade_id": "show_mysteries", "locked": true, "schema_version": 3, "solution": false, "task": false}
print(inspect.getsource(rootcauses.kernels))

# %% [markdown] nbgrader={"grade": false, "grade_id": "how_to_profile", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## How to look
#
# A kernel: `profile(kernel, grid, block, *args)` traces one launch in the simulator and reports it in
# Nsight Compute's metric names (`p.value(name)`, `p.table()`, `p.lines()` per source line). Its occupancy
# rows use the occupancy calculator (`calculator.occupancy(threads, registers, shared_bytes)`, lesson 05).
# A step: `feeding.profile_counts(step, *rootcauses.step_inputs(name))` counts torch's operators in one
# call, with the host-sync spy's `host sync: …` rows (lesson 08). Here is the first kernel's profile; run
# the others yourself in the cell below it.

# %% nbgrader={"grade": false, "grade_id": "first_profile", "locked": true, "schema_version": 3, "solution": false, "task": false}
kernel, grid, block, args = rootcauses.launch("brighten")
brighten_profile = profile(kernel, grid, block, *args)
display(brighten_profile)

# %% nbgrader={"grade": false, "grade_id": "scratch", "locked": false, "schema_version": 3, "solution": true, "task": false}
# Your profiles (not graded): kernel, grid, block, args = rootcauses.launch("tally"); profile(kernel, grid, block, *args) …
### BEGIN SOLUTION
profiles = {}
for name in rootcauses.KERNEL_MYSTERIES:
    kernel, grid, block, args = rootcauses.launch(name)
    profiles[name] = profile(kernel, grid, block, *args)
counts = {name: rootcauses.step_counts(getattr(rootcauses.kernels, name), name) for name in rootcauses.STEP_MYSTERIES}
for name, p in profiles.items():
    print(name, p.table()[["metric", "microscope"]].to_string(index=False), sep="\n")
for name, c in counts.items():
    print(name, c.most_common(8), feeding.host_syncs(c))
### END SOLUTION

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 1 · Name each cause (6 points)
#
# **Goal.** `causes`: a dictionary from each mystery's name (`rootcauses.MYSTERIES`) to **one** word of
# `rootcauses.CAUSES`: the reason that mystery is slow.
#
# **Evidence to reach**: your profiles above. One mystery, one cause: a list, or a string with several
# words, earns 0 — naming everything is not a diagnosis.
#
# *Hints: in the collapsed cell below. Try without them first.*

# %% [markdown] jupyter={"source_hidden": true} nbgrader={"grade": false, "grade_id": "ex1_hints", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Hints for exercise 1**
#
# * Compare each kernel's numbers with what a healthy kernel shows: 4 sectors per request for 32 lanes
#   reading consecutive 4-byte words; 1 wavefront per shared instruction; 32 threads per instruction;
#   occupancy near 100 %.
# * An index computed from `i` with `%` and `//` can walk memory in a different order than `i` does.
# * For the steps: which rows would make a GPU's host wait, and which operator runs once per tensor?

# %% nbgrader={"grade": false, "grade_id": "ex1_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
causes = {"brighten": "uncoalesced", "tally": "bank_conflicts", "price_orders": "divergence",
          "flip_blocks": "low_occupancy", "clipped_step": "host_sync", "decay_all": "launch_bound"}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ex1_test", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
"""Check that each mystery has one cause from the vocabulary, and that it is the right one."""
assert set(causes) == set(rootcauses.MYSTERIES), f"name a cause for each of {rootcauses.MYSTERIES}"
for name, cause in causes.items():
    assert isinstance(cause, str) and cause in rootcauses.CAUSES, (
        f"{name}: one word of rootcauses.CAUSES, not {cause!r}")
### BEGIN HIDDEN TESTS
check(causes == {"brighten": "uncoalesced", "tally": "bank_conflicts", "price_orders": "divergence",
                 "flip_blocks": "low_occupancy", "clipped_step": "host_sync", "decay_all": "launch_bound"})
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 2 · The evidence (6 points)
#
# **Goal.** `evidence`: a dictionary from each mystery's name to a pair `(metric, value)`: the name of a metric (or
# profiler row) that shows the cause you named, exactly as your profile output prints it, and its value
# there. Read it from your own output (`p.value(metric)`, or the count in `feeding.profile_counts`);
# the grader profiles the mystery again and compares.
#
# **Evidence to reach**: the metric shows the cause you named (the vocabulary's table above), and its value
# is what the mystery's profile shows. A metric that does not show this cause (the
# thread count, say) earns 0, even with its right value.

# %% nbgrader={"grade": false, "grade_id": "ex2_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
_metrics = {
    "brighten": "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio",
    "tally": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "price_orders": "smsp__thread_inst_executed_per_inst_executed.ratio",
    "flip_blocks": "sm__maximum_warps_per_active_cycle_pct",
}
evidence = {name: (metric, profiles[name].value(metric)) for name, metric in _metrics.items()}
evidence["clipped_step"] = ("aten::_local_scalar_dense", counts["clipped_step"]["aten::_local_scalar_dense"])
evidence["decay_all"] = ("aten::mul_", counts["decay_all"]["aten::mul_"])
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ex2_test", "locked": true, "points": 6, "schema_version": 3, "solution": false, "task": false}
"""Check that each piece of evidence is a metric the mystery's profile shows, with the value it shows,
and that the metric is one that shows the mystery's cause."""
assert set(evidence) == set(rootcauses.MYSTERIES), f"give evidence for each of {rootcauses.MYSTERIES}"
for name, pair in evidence.items():
    assert isinstance(pair, tuple) and len(pair) == 2, f"{name}: a pair (metric, value), not {pair!r}"
    assert rootcauses.evidence_matches(name, *pair), f"{name}: {pair[0]!r} is not {pair[1]!r} in its profile"
### BEGIN HIDDEN TESTS
TRUE_CAUSES = {"brighten": "uncoalesced", "tally": "bank_conflicts", "price_orders": "divergence",
               "flip_blocks": "low_occupancy", "clipped_step": "host_sync", "decay_all": "launch_bound"}
check(all(rootcauses.shows(TRUE_CAUSES[name], evidence[name][0]) for name in rootcauses.MYSTERIES))
check(all(rootcauses.evidence_matches(name, *evidence[name]) for name in rootcauses.MYSTERIES))
check(evidence["decay_all"][1] >= 8)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 3 · Fix the four kernels (4 points)
#
# **Goal.** `fixed_kernels`: a dictionary from each kernel mystery's name to your fixed kernel (a
# `@cuda.jit` function with the **same arguments**), which gives the **same output** on the same inputs.
# (On a GPU, numba-cuda needs a shared array's size as a constant: a number or a module-level name, not
# an expression such as `A * B` inside the kernel; the simulator accepts either.)
#
# **Evidence to reach** (`run_fixed(kernel, name)` runs yours on the mystery's inputs):
#
# * `brighten`: 4 sectors per request for its loads and stores;
# * `tally`: no bank conflicts on its shared loads or stores;
# * `price_orders`: no divergent branch, 32 threads per instruction;
# * `flip_blocks`: `sm__maximum_warps_per_active_cycle_pct` 100.
#
# The points need exercise 2's evidence for all four kernels right.
#
# *Hints: in the collapsed cell below. Try without them first.*

# %% [markdown] jupyter={"source_hidden": true} nbgrader={"grade": false, "grade_id": "ex3_hints", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Hints for exercise 3**
#
# * `brighten` is elementwise: the order in which threads take pixels does not change the result.
# * `tally`: which bank does `table[t * ROW + b]` fall in for lanes t = 0…31? Lay the table out so that
#   consecutive lanes hold consecutive words (`b * TALLY_BLOCK + t`).
# * `price_orders`: every kind multiplies `qty * price` by a factor: look the factor up instead of
#   branching (a tuple of four `float32` indexed by `k`).
# * `flip_blocks`: how many floats does one block use?

# %% nbgrader={"grade": false, "grade_id": "ex3_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
@cuda.jit
def brighten_fixed(out, img, height, width):
    i = cuda.grid(1)
    if i < height * width:
        out[i] = min(img[i] * 1.5 + 0.1, 1.0)


FIXED_TABLE_WORDS = BINS * TALLY_BLOCK  # a shared array's size must be a constant on a GPU


@cuda.jit
def tally_fixed(out, classes, per_thread):
    table = cuda.shared.array(FIXED_TABLE_WORDS, int32)  # bin-major: lane t's words are consecutive
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    n_threads = cuda.gridDim.x * cuda.blockDim.x
    for b in range(BINS):
        table[b * TALLY_BLOCK + t] = 0
    for k in range(per_thread):
        c = classes[k * n_threads + i]
        table[c * TALLY_BLOCK + t] += 1
    for b in range(BINS):
        out[b * n_threads + i] = table[b * TALLY_BLOCK + t]


FACTORS = (float32(1.0), float32(0.9), float32(1.2), float32(-1.0))


@cuda.jit
def price_orders_fixed(out, qty, price, kind):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = qty[i] * price[i] * FACTORS[kind[i]]


@cuda.jit
def flip_blocks_fixed(out, a):
    stage = cuda.shared.array(128, float32)  # the block's 128 floats, 512 bytes
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    stage[t] = a[i]
    cuda.syncthreads()
    out[i] = stage[cuda.blockDim.x - 1 - t]


fixed_kernels = {"brighten": brighten_fixed, "tally": tally_fixed, "price_orders": price_orders_fixed,
                 "flip_blocks": flip_blocks_fixed}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ex3_test", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
"""Check that each fixed kernel gives the mystery's output and that its profile no longer shows the
cause; the points need exercise 2's evidence for the four kernels right."""
assert set(fixed_kernels) == set(rootcauses.KERNEL_MYSTERIES), f"fix each of {rootcauses.KERNEL_MYSTERIES}"
fixed_profiles = {}
for name, kernel in fixed_kernels.items():
    fixed_profiles[name], output = run_fixed(kernel, name)
    assert np.allclose(output, mystery_output(name), rtol=1e-6, atol=1e-6), f"{name}: the output changed"
p = fixed_profiles["brighten"]
assert p.value("l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio") == 4, "brighten: loads"
assert p.value("l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_st.ratio") == 4, "brighten: stores"
p = fixed_profiles["tally"]
assert p.value("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum") == 0, "tally: conflicts on loads"
assert p.value("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum") == 0, "tally: conflicts on stores"
p = fixed_profiles["price_orders"]
assert p.value("smsp__sass_branch_targets_threads_divergent.sum") == 0, "price_orders: still divergent"
assert p.value("smsp__thread_inst_executed_per_inst_executed.ratio") == 32, "price_orders: idle lanes"
assert fixed_profiles["flip_blocks"].value("sm__maximum_warps_per_active_cycle_pct") == 100, "flip_blocks"
for name in rootcauses.KERNEL_MYSTERIES:
    assert name in evidence and rootcauses.evidence_matches(name, *evidence[name]), (
        f"{name}: a fix without its evidence (exercise 2) earns nothing")
### BEGIN HIDDEN TESTS
TRUE_CAUSES = {"brighten": "uncoalesced", "tally": "bank_conflicts", "price_orders": "divergence",
               "flip_blocks": "low_occupancy"}
check(all(rootcauses.shows(TRUE_CAUSES[n], evidence[n][0]) and rootcauses.evidence_matches(n, *evidence[n])
          for n in TRUE_CAUSES))
check(all(np.array_equal(run_fixed(fixed_kernels[n], n)[1], mystery_output(n)) for n in ("brighten", "tally", "flip_blocks")))
check(np.allclose(run_fixed(fixed_kernels["price_orders"], "price_orders")[1], mystery_output("price_orders"), rtol=1e-6))
check(run_fixed(fixed_kernels["tally"], "tally")[0].value(
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum / smsp__sass_inst_executed_op_shared_ld.sum") == 1)
check(run_fixed(fixed_kernels["flip_blocks"], "flip_blocks")[0].value("launch__shared_mem_per_block_static") <= 1024)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex4_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 4 · Fix the two steps (2 points)
#
# **Goal.** `clipped_step_fixed(model, opt, x, y, max_norm=1.0)`: the same step — the same loss, the same
# weights after it — in which the host never waits for the GPU; `decay_all_fixed(params, rate)`: the
# same weights after it, in at most 2 operators per call, however many tensors.
#
# **Evidence to reach**: `feeding.host_syncs(rootcauses.step_counts(clipped_step_fixed, "clipped_step"))`
# empty; `rootcauses.top_level_ops(decay_all_fixed, *rootcauses.step_inputs("decay_all"))`, the operators
# one call asks for itself (what a GPU would launch), at most 2 in all. The points need exercise 2's evidence for both right.
#
# *Hints: in the collapsed cell below. Try without them first.*

# %% [markdown] jupyter={"source_hidden": true} nbgrader={"grade": false, "grade_id": "ex4_hints", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Hints for exercise 4**
#
# * `if norm > max_norm:` asks Python for a bool of a tensor: on a GPU the host waits. A factor
#   `torch.clamp(max_norm / norm, max=1.0)` is 1 where nothing is clipped, and multiplies on the device.
# * PyTorch has "for each" operators that take a list of tensors: `torch._foreach_mul_` (on a GPU, a few
#   multi-tensor kernels; on a CPU it loops underneath, which is why the count is of top-level operators).

# %% nbgrader={"grade": false, "grade_id": "ex4_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
def clipped_step_fixed(model, opt, x, y, max_norm=1.0):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    norm = torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters()))
    scale = torch.clamp(max_norm / norm, max=1.0)  # stays on the device: no host wait
    for p in model.parameters():
        p.grad.mul_(scale)
    opt.step()
    return loss.detach()


def decay_all_fixed(params, rate):
    torch._foreach_mul_(params, 1.0 - rate)
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ex4_test", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Check that the fixed step does not wait and trains the same, and that the fixed decay runs at most 2
operators and decays the same; the points need exercise 2's evidence for both steps right."""
waits = feeding.host_syncs(rootcauses.step_counts(clipped_step_fixed, "clipped_step"))
assert not waits, f"the host still waits: {waits}"
model, opt, x, y = rootcauses.step_inputs("clipped_step")
ref_model, ref_opt, _, _ = rootcauses.step_inputs("clipped_step")
assert torch.allclose(clipped_step_fixed(model, opt, x, y), rootcauses.kernels.clipped_step(ref_model, ref_opt, x, y))
assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(model.parameters(), ref_model.parameters())), (
    "clipped_step_fixed: the weights after the step changed")
decay_ops = sum(rootcauses.top_level_ops(decay_all_fixed, *rootcauses.step_inputs("decay_all")).values())
assert decay_ops <= 2, f"decay_all_fixed runs {decay_ops} operators per call"
params, rate = rootcauses.step_inputs("decay_all")
ref, _ = rootcauses.step_inputs("decay_all")
decay_all_fixed(params, rate)
rootcauses.kernels.decay_all(ref, rate)
assert all(torch.equal(a, b) for a, b in zip(params, ref)), "decay_all_fixed: the weights changed"
for name in rootcauses.STEP_MYSTERIES:
    assert name in evidence and rootcauses.evidence_matches(name, *evidence[name]), (
        f"{name}: a fix without its evidence (exercise 2) earns nothing")
### BEGIN HIDDEN TESTS
check(rootcauses.shows("host_sync", evidence["clipped_step"][0]))
check(rootcauses.shows("launch_bound", evidence["decay_all"][0]))
check(all(rootcauses.evidence_matches(n, *evidence[n]) for n in rootcauses.STEP_MYSTERIES))
model, opt, x, y = rootcauses.step_inputs("clipped_step")
ref_model, ref_opt, _, _ = rootcauses.step_inputs("clipped_step")
for _ in range(3):
    clipped_step_fixed(model, opt, x, y, max_norm=0.5)
    rootcauses.kernels.clipped_step(ref_model, ref_opt, x, y, max_norm=0.5)
check(all(torch.allclose(a, b, atol=1e-5) for a, b in zip(model.parameters(), ref_model.parameters())))
many = [torch.ones(3) for _ in range(40)]
check(sum(rootcauses.top_level_ops(decay_all_fixed, many, 0.5).values()) <= 2 and all(float(t[0]) == 0.5 for t in many))
### END HIDDEN TESTS
