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
# *About 100 minutes. Goes after lesson 08 "Feeding the GPU"; uses lessons 02, 03, 04, 05 and 08.*
#
# Six pieces of code, each slow for **one** reason the course has taught. Nobody tells you which, and
# reading the code is not enough: some of them look like one cause and show another. For each one you
# **profile** it, **name** the cause in the course's fixed vocabulary with the **evidence** (the metric
# that shows that cause and its value, read from *your* profile output), and **fix** it.
#
# How you are graded (never on wall time, so the lab grades the same without a GPU):
#
# * **the diagnosis** (exercise 1, one point per mystery): one word of the vocabulary and a metric of the
#   mystery's profile that shows it, with the value the grader recomputes. A right word with no evidence
#   for it, or with evidence of another cause, earns 0: a name you cannot back with a measurement is a guess;
# * **the fixes** (exercises 2 and 3, one point per mystery): the microscope's counts, the profiler's counts
#   and the output of *your* fixed version, on the lab's inputs **and on other inputs of other sizes the
#   grader draws** (`rootcauses.launch(name, seed=…)`): the output must not change, so a fix must compute,
#   not replay. **A fix earns its point only with that mystery's diagnosis right.**
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
run_fixed = rootcauses.run_kernel  # run_fixed(kernel, name, seed=…): (its profile, its output) on name's inputs
mystery_output = rootcauses.mystery_output  # mystery_output(name, seed=…): what a fix must still give there

runtime.banner()

# %% [markdown] nbgrader={"grade": false, "grade_id": "vocabulary", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## The vocabulary, and the metrics that show each cause
#
# The next cell prints the eight words you may use, what each cause looks like in a profile, and the
# metrics that show it: ncu's names (the microscope reports a traced launch under them: lessons 02, 03,
# 04, 05) and the profiler's rows (lesson 08). Only six causes are in this lab; two words are decoys.

# %% nbgrader={"grade": false, "grade_id": "show_vocabulary", "locked": true, "schema_version": 3, "solution": false, "task": false}
for cause in rootcauses.CAUSES:
    print(f"{cause}: {rootcauses.CAUSE_SIGNS[cause]}")
    for metric in rootcauses.CAUSE_METRICS[cause]:
        print(f"    {metric}")

# %% [markdown] nbgrader={"grade": false, "grade_id": "mysteries", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## The six mysteries
#
# Four kernels (`brighten`, `tally`, `price_orders`, `flip_blocks`) and two pieces of a training loop
# (`clipped_step`, `decay_all`). Read them: the code is the code that runs. Each kernel takes its output
# first; `rootcauses.launch(name)` gives `(kernel, grid, block, args)` with fresh inputs, the same every
# call, and `rootcauses.step_inputs(name)` the arguments of a step. Give either a `seed=` to draw other
# inputs of other sizes: a count that grows with the size of the inputs tells you something.

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
# ## Exercise 1 · Diagnose each mystery (6 points, one per mystery)
#
# **Goal.** Two dictionaries over the six mysteries (`rootcauses.MYSTERIES`): `causes`, from each mystery's
# name to **one** word of `rootcauses.CAUSES` (the reason it is slow), and `evidence`, from each mystery's
# name to a pair `(metric, value)`: a metric (or profiler row) that shows the cause you named, exactly as
# your profile output prints it, and its value there (`p.value(metric)`, or the count in
# `feeding.profile_counts`).
#
# **Evidence to reach**: for each mystery, the metric is one that shows the cause you named (the vocabulary
# above) *and shows it present* in this mystery's profile, with the value the grader recomputes from the
# mystery's own profile. One point per mystery, for the word and its evidence together: a list, or a
# string with several words, earns 0; a right word with a made-up value, or with a metric of another
# cause (the thread count, say), earns 0.
#
# *Hints: in the collapsed cell below. Try without them first.*

# %% [markdown] jupyter={"source_hidden": true} nbgrader={"grade": false, "grade_id": "ex1_hints", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Hints for exercise 1**
#
# * Compare each kernel's numbers with what a healthy kernel shows: 4 sectors per request for 32 lanes
#   reading consecutive 4-byte words; 1 wavefront per shared instruction; 32 threads per instruction;
#   occupancy near 100 %. A kernel can show two unhealthy numbers: which one is its cause? Fix one in
#   your head and ask which would still be slow.
# * For the steps: which rows would make a GPU's host wait? Which counts change when you give
#   `rootcauses.step_inputs(name, seed=…)` more tensors, and which operators are they?

# %% nbgrader={"grade": false, "grade_id": "ex1_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
causes = {"brighten": "uncoalesced", "tally": "bank_conflicts", "price_orders": "divergence",
          "flip_blocks": "low_occupancy", "clipped_step": "host_sync", "decay_all": "launch_bound"}
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

# %% nbgrader={"grade": true, "grade_id": "ex1_test_brighten", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""brighten: one word of the vocabulary, and a metric of its profile that shows that cause, with its value."""
cause, pair = causes.get("brighten"), evidence.get("brighten")
assert isinstance(cause, str) and cause in rootcauses.CAUSES, f"brighten: one word of rootcauses.CAUSES, not {cause!r}"
assert isinstance(pair, tuple) and len(pair) == 2, f"brighten: a pair (metric, value), not {pair!r}"
assert rootcauses.shows(cause, pair[0]), f"brighten: {pair[0]!r} is not a metric that shows {cause}"
assert rootcauses.evidence_matches("brighten", *pair), f"brighten: {pair[0]!r} is not {pair[1]!r} in its profile"
### BEGIN HIDDEN TESTS
_causes, _evidence = freeze(causes, "causes"), freeze(evidence, "evidence")  # plain data from here on
_word = _causes.get("brighten") if type(_causes) is dict else None
_pair = rootcauses.plain_pair(_evidence.get("brighten")) if type(_evidence) is dict else None  # (str, number) or None
check(_word == "uncoalesced")
check(_pair is not None and _pair[0] in (
         "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio",
         "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_st.ratio",)
      and rootcauses.evidence_matches("brighten", *_pair))
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "ex1_test_tally", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""tally: one word of the vocabulary, and a metric of its profile that shows that cause, with its value."""
cause, pair = causes.get("tally"), evidence.get("tally")
assert isinstance(cause, str) and cause in rootcauses.CAUSES, f"tally: one word of rootcauses.CAUSES, not {cause!r}"
assert isinstance(pair, tuple) and len(pair) == 2, f"tally: a pair (metric, value), not {pair!r}"
assert rootcauses.shows(cause, pair[0]), f"tally: {pair[0]!r} is not a metric that shows {cause}"
assert rootcauses.evidence_matches("tally", *pair), f"tally: {pair[0]!r} is not {pair[1]!r} in its profile"
### BEGIN HIDDEN TESTS
_causes, _evidence = freeze(causes, "causes"), freeze(evidence, "evidence")  # plain data from here on
_word = _causes.get("tally") if type(_causes) is dict else None
_pair = rootcauses.plain_pair(_evidence.get("tally")) if type(_evidence) is dict else None  # (str, number) or None
check(_word == "bank_conflicts")
check(_pair is not None and _pair[0] in (
         "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
         "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
         "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum / smsp__sass_inst_executed_op_shared_ld.sum",
         "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum / smsp__sass_inst_executed_op_shared_st.sum",)
      and rootcauses.evidence_matches("tally", *_pair))
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "ex1_test_price_orders", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""price_orders: one word of the vocabulary, and a metric of its profile that shows that cause, with its value."""
cause, pair = causes.get("price_orders"), evidence.get("price_orders")
assert isinstance(cause, str) and cause in rootcauses.CAUSES, f"price_orders: one word of rootcauses.CAUSES, not {cause!r}"
assert isinstance(pair, tuple) and len(pair) == 2, f"price_orders: a pair (metric, value), not {pair!r}"
assert rootcauses.shows(cause, pair[0]), f"price_orders: {pair[0]!r} is not a metric that shows {cause}"
assert rootcauses.evidence_matches("price_orders", *pair), f"price_orders: {pair[0]!r} is not {pair[1]!r} in its profile"
### BEGIN HIDDEN TESTS
_causes, _evidence = freeze(causes, "causes"), freeze(evidence, "evidence")  # plain data from here on
_word = _causes.get("price_orders") if type(_causes) is dict else None
_pair = rootcauses.plain_pair(_evidence.get("price_orders")) if type(_evidence) is dict else None  # (str, number) or None
check(_word == "divergence")
check(_pair is not None and _pair[0] in (
         "smsp__thread_inst_executed_per_inst_executed.ratio",
         "smsp__sass_branch_targets_threads_divergent.sum",
         "smsp__sass_average_branch_targets_threads_uniform.pct",)
      and rootcauses.evidence_matches("price_orders", *_pair))
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "ex1_test_flip_blocks", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""flip_blocks: one word of the vocabulary, and a metric of its profile that shows that cause, with its value."""
cause, pair = causes.get("flip_blocks"), evidence.get("flip_blocks")
assert isinstance(cause, str) and cause in rootcauses.CAUSES, f"flip_blocks: one word of rootcauses.CAUSES, not {cause!r}"
assert isinstance(pair, tuple) and len(pair) == 2, f"flip_blocks: a pair (metric, value), not {pair!r}"
assert rootcauses.shows(cause, pair[0]), f"flip_blocks: {pair[0]!r} is not a metric that shows {cause}"
assert rootcauses.evidence_matches("flip_blocks", *pair), f"flip_blocks: {pair[0]!r} is not {pair[1]!r} in its profile"
### BEGIN HIDDEN TESTS
_causes, _evidence = freeze(causes, "causes"), freeze(evidence, "evidence")  # plain data from here on
_word = _causes.get("flip_blocks") if type(_causes) is dict else None
_pair = rootcauses.plain_pair(_evidence.get("flip_blocks")) if type(_evidence) is dict else None  # (str, number) or None
check(_word == "low_occupancy")
check(_pair is not None and _pair[0] in (
         "sm__maximum_warps_per_active_cycle_pct",
         "launch__occupancy_limit_shared_mem",)
      and rootcauses.evidence_matches("flip_blocks", *_pair))
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "ex1_test_clipped_step", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""clipped_step: one word of the vocabulary, and a metric of its profile that shows that cause, with its value."""
cause, pair = causes.get("clipped_step"), evidence.get("clipped_step")
assert isinstance(cause, str) and cause in rootcauses.CAUSES, f"clipped_step: one word of rootcauses.CAUSES, not {cause!r}"
assert isinstance(pair, tuple) and len(pair) == 2, f"clipped_step: a pair (metric, value), not {pair!r}"
assert rootcauses.shows(cause, pair[0]), f"clipped_step: {pair[0]!r} is not a metric that shows {cause}"
assert rootcauses.evidence_matches("clipped_step", *pair), f"clipped_step: {pair[0]!r} is not {pair[1]!r} in its profile"
### BEGIN HIDDEN TESTS
_causes, _evidence = freeze(causes, "causes"), freeze(evidence, "evidence")  # plain data from here on
_word = _causes.get("clipped_step") if type(_causes) is dict else None
_pair = rootcauses.plain_pair(_evidence.get("clipped_step")) if type(_evidence) is dict else None  # (str, number) or None
check(_word == "host_sync")
check(_pair is not None and _pair[0] in (
         "aten::_local_scalar_dense",
         "host sync: bool(tensor) or an if",)
      and rootcauses.evidence_matches("clipped_step", *_pair))
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "ex1_test_decay_all", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""decay_all: one word of the vocabulary, and a metric of its profile that shows that cause, with its value."""
cause, pair = causes.get("decay_all"), evidence.get("decay_all")
assert isinstance(cause, str) and cause in rootcauses.CAUSES, f"decay_all: one word of rootcauses.CAUSES, not {cause!r}"
assert isinstance(pair, tuple) and len(pair) == 2, f"decay_all: a pair (metric, value), not {pair!r}"
assert rootcauses.shows(cause, pair[0]), f"decay_all: {pair[0]!r} is not a metric that shows {cause}"
assert rootcauses.evidence_matches("decay_all", *pair), f"decay_all: {pair[0]!r} is not {pair[1]!r} in its profile"
### BEGIN HIDDEN TESTS
_causes, _evidence = freeze(causes, "causes"), freeze(evidence, "evidence")  # plain data from here on
_word = _causes.get("decay_all") if type(_causes) is dict else None
_pair = rootcauses.plain_pair(_evidence.get("decay_all")) if type(_evidence) is dict else None  # (str, number) or None
check(_word == "launch_bound")
check(_pair is not None and _pair[0] in (
         "aten::mul_",)
      and rootcauses.evidence_matches("decay_all", *_pair))
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 2 · Fix the four kernels (4 points, one per kernel)
#
# **Goal.** `fixed_kernels`: a dictionary from each kernel mystery's name to your fixed kernel (a
# `@cuda.jit` function with the **same arguments**), which gives the **same output** as the mystery on the
# same inputs — the lab's, and others of other sizes (`seed=`). (On a GPU, numba-cuda needs a shared array's
# size as a constant: a number or a module-level name, not an expression such as `A * B` inside the
# kernel; the simulator accepts either.)
#
# **Evidence to reach** (`run_fixed(kernel, name, seed=…)` runs yours on the mystery's inputs): the metric
# that showed the mystery's cause is now healthy, and nothing else got worse — on any seed. Each kernel's
# point needs its diagnosis (exercise 1) right.
#
# *Hints: in the collapsed cell below. Try without them first.*

# %% [markdown] jupyter={"source_hidden": true} nbgrader={"grade": false, "grade_id": "ex2_hints", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Hints for exercise 2: questions**
#
# * `brighten`: does the order in which threads take pixels change the result?
# * `tally`: for lanes t = 0…31 of one instruction, which bank does each lane's word fall in? Which layout
#   of the same table puts consecutive lanes in consecutive words?
# * `price_orders`: what do the branches have in common, and what differs between them? Could the
#   difference be data instead of code?
# * `flip_blocks`: how much shared memory does one block use, and how much does it need?
#
# Still stuck? The fixes, nearly spelled out, are in the collapsed cell below.

# %% [markdown] jupyter={"source_hidden": true} nbgrader={"grade": false, "grade_id": "ex2_fix_hints", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Hints for exercise 2: the fixes**
#
# * `brighten` is elementwise: thread i can take pixel i.
# * `tally`: lay the table out bin-major, so that consecutive lanes hold consecutive words
#   (`b * TALLY_BLOCK + t`).
# * `price_orders`: every kind multiplies `qty * price` by a factor: look the factor up instead of
#   branching (a tuple of four `float32` indexed by `k`).
# * `flip_blocks`: stage only the block's own floats (`cuda.blockDim.x` of them; the lab launches 128).

# %% nbgrader={"grade": false, "grade_id": "ex2_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
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

# %% nbgrader={"grade": true, "grade_id": "ex2_test_brighten", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""brighten: the fixed kernel gives the mystery's output, and its profile no longer shows the cause; the
point needs its diagnosis (exercise 1) right."""
assert "brighten" in fixed_kernels, "fixed_kernels has no brighten"
p, output = run_fixed(fixed_kernels["brighten"], "brighten")
assert np.array_equal(output, mystery_output("brighten")), "brighten: the output changed"
assert p.value("l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio") == 4, "brighten: loads"
assert p.value("l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_st.ratio") == 4, "brighten: stores"
assert rootcauses.evidence_matches("brighten", *evidence["brighten"]), "brighten: a fix without its evidence (exercise 1) earns nothing"
### BEGIN HIDDEN TESTS
_causes, _evidence = freeze(causes, "causes"), freeze(evidence, "evidence")  # plain data from here on
_word = _causes.get("brighten") if type(_causes) is dict else None
_pair = rootcauses.plain_pair(_evidence.get("brighten")) if type(_evidence) is dict else None  # (str, number) or None
check(_word == "uncoalesced" and _pair is not None and rootcauses.shows("uncoalesced", _pair[0])
      and rootcauses.evidence_matches("brighten", *_pair), "brighten: a fix without its diagnosis (exercise 1) earns nothing")
for _seed in (rootcauses.SEED, 4611, rootcauses.fresh_seed()):  # other inputs, other sizes: a replayed output fails
    _, _grid, _block, _args = rootcauses.launch("brighten", _seed)
    # fixed_kernels["brighten"] read and run under the microscope on the learner's own thread; its output lands in
    # the grader's _args[0], its profile comes back as plain numbers
    _got = trace_launch(fixed_kernels, _grid, _block, *_args, key="brighten", metrics=["l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio", "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_st.ratio"])
    check(np.array_equal(_args[0], rootcauses.mystery_output("brighten", _seed)),
          f"brighten: not the mystery's output on other inputs (seed={_seed})")
    check(_got["l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio"] <= 4
          and _got["l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_st.ratio"] <= 4,  # a last warp in part: fewer
          f"brighten: its profile on other inputs (seed={_seed}) still shows the cause")
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "ex2_test_tally", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""tally: the fixed kernel gives the mystery's output, and its profile no longer shows the cause; the
point needs its diagnosis (exercise 1) right."""
assert "tally" in fixed_kernels, "fixed_kernels has no tally"
p, output = run_fixed(fixed_kernels["tally"], "tally")
assert np.array_equal(output, mystery_output("tally")), "tally: the output changed"
assert p.value("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum") == 0, "tally: conflicts on loads"
assert p.value("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum") == 0, "tally: conflicts on stores"
assert rootcauses.evidence_matches("tally", *evidence["tally"]), "tally: a fix without its evidence (exercise 1) earns nothing"
### BEGIN HIDDEN TESTS
_causes, _evidence = freeze(causes, "causes"), freeze(evidence, "evidence")  # plain data from here on
_word = _causes.get("tally") if type(_causes) is dict else None
_pair = rootcauses.plain_pair(_evidence.get("tally")) if type(_evidence) is dict else None  # (str, number) or None
check(_word == "bank_conflicts" and _pair is not None and rootcauses.shows("bank_conflicts", _pair[0])
      and rootcauses.evidence_matches("tally", *_pair), "tally: a fix without its diagnosis (exercise 1) earns nothing")
for _seed in (rootcauses.SEED, 4611, rootcauses.fresh_seed()):  # other inputs, other sizes: a replayed output fails
    _, _grid, _block, _args = rootcauses.launch("tally", _seed)
    # fixed_kernels["tally"] read and run under the microscope on the learner's own thread; its output lands in
    # the grader's _args[0], its profile comes back as plain numbers
    _got = trace_launch(fixed_kernels, _grid, _block, *_args, key="tally", metrics=["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum / smsp__sass_inst_executed_op_shared_ld.sum"])
    check(np.array_equal(_args[0], rootcauses.mystery_output("tally", _seed)),
          f"tally: not the mystery's output on other inputs (seed={_seed})")
    check(_got["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"] == 0
          and _got["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"] == 0,
          f"tally: its profile on other inputs (seed={_seed}) still shows the cause")
    if _seed in (rootcauses.SEED, 4611):
        check(_got["l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum / smsp__sass_inst_executed_op_shared_ld.sum"] == 1,
              "tally: more than one wavefront per shared load")
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "ex2_test_price_orders", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""price_orders: the fixed kernel gives the mystery's output, and its profile no longer shows the cause; the
point needs its diagnosis (exercise 1) right."""
assert "price_orders" in fixed_kernels, "fixed_kernels has no price_orders"
p, output = run_fixed(fixed_kernels["price_orders"], "price_orders")
assert np.allclose(output, mystery_output("price_orders"), rtol=1e-6, atol=1e-6), "price_orders: the output changed"
assert p.value("smsp__sass_branch_targets_threads_divergent.sum") == 0, "price_orders: still divergent"
assert p.value("smsp__thread_inst_executed_per_inst_executed.ratio") == 32, "price_orders: idle lanes"
assert rootcauses.evidence_matches("price_orders", *evidence["price_orders"]), "price_orders: a fix without its evidence (exercise 1) earns nothing"
### BEGIN HIDDEN TESTS
_causes, _evidence = freeze(causes, "causes"), freeze(evidence, "evidence")  # plain data from here on
_word = _causes.get("price_orders") if type(_causes) is dict else None
_pair = rootcauses.plain_pair(_evidence.get("price_orders")) if type(_evidence) is dict else None  # (str, number) or None
check(_word == "divergence" and _pair is not None and rootcauses.shows("divergence", _pair[0])
      and rootcauses.evidence_matches("price_orders", *_pair), "price_orders: a fix without its diagnosis (exercise 1) earns nothing")
for _seed in (rootcauses.SEED, 4611, rootcauses.fresh_seed()):  # other inputs, other sizes: a replayed output fails
    _, _grid, _block, _args = rootcauses.launch("price_orders", _seed)
    # fixed_kernels["price_orders"] read and run under the microscope on the learner's own thread; its output lands in
    # the grader's _args[0], its profile comes back as plain numbers
    _got = trace_launch(fixed_kernels, _grid, _block, *_args, key="price_orders", metrics=["smsp__sass_branch_targets_threads_divergent.sum", "smsp__thread_inst_executed_per_inst_executed.ratio"])
    check(np.allclose(_args[0], rootcauses.mystery_output("price_orders", _seed), rtol=1e-6, atol=1e-6),
          f"price_orders: not the mystery's output on other inputs (seed={_seed})")
    check(_got["smsp__sass_branch_targets_threads_divergent.sum"] == 0
          and _got["smsp__thread_inst_executed_per_inst_executed.ratio"] == 32,
          f"price_orders: its profile on other inputs (seed={_seed}) still shows the cause")
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "ex2_test_flip_blocks", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""flip_blocks: the fixed kernel gives the mystery's output, and its profile no longer shows the cause; the
point needs its diagnosis (exercise 1) right."""
assert "flip_blocks" in fixed_kernels, "fixed_kernels has no flip_blocks"
p, output = run_fixed(fixed_kernels["flip_blocks"], "flip_blocks")
assert np.array_equal(output, mystery_output("flip_blocks")), "flip_blocks: the output changed"
assert p.value("sm__maximum_warps_per_active_cycle_pct") == 100, "flip_blocks: occupancy"
assert rootcauses.evidence_matches("flip_blocks", *evidence["flip_blocks"]), "flip_blocks: a fix without its evidence (exercise 1) earns nothing"
### BEGIN HIDDEN TESTS
_causes, _evidence = freeze(causes, "causes"), freeze(evidence, "evidence")  # plain data from here on
_word = _causes.get("flip_blocks") if type(_causes) is dict else None
_pair = rootcauses.plain_pair(_evidence.get("flip_blocks")) if type(_evidence) is dict else None  # (str, number) or None
check(_word == "low_occupancy" and _pair is not None and rootcauses.shows("low_occupancy", _pair[0])
      and rootcauses.evidence_matches("flip_blocks", *_pair), "flip_blocks: a fix without its diagnosis (exercise 1) earns nothing")
for _seed in (rootcauses.SEED, 4611, rootcauses.fresh_seed()):  # other inputs, other sizes: a replayed output fails
    _, _grid, _block, _args = rootcauses.launch("flip_blocks", _seed)
    # fixed_kernels["flip_blocks"] read and run under the microscope on the learner's own thread; its output lands in
    # the grader's _args[0], its profile comes back as plain numbers
    _got = trace_launch(fixed_kernels, _grid, _block, *_args, key="flip_blocks", metrics=["sm__maximum_warps_per_active_cycle_pct", "launch__shared_mem_per_block_static"])
    check(np.array_equal(_args[0], rootcauses.mystery_output("flip_blocks", _seed)),
          f"flip_blocks: not the mystery's output on other inputs (seed={_seed})")
    check(_got["sm__maximum_warps_per_active_cycle_pct"] == 100,
          f"flip_blocks: its profile on other inputs (seed={_seed}) still shows the cause")
    if _seed == rootcauses.SEED:
        check(_got["launch__shared_mem_per_block_static"] <= 1024,
              "flip_blocks: still more shared memory per block than the block needs")
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 3 · Fix the two steps (2 points, one per step)
#
# **Goal.** `clipped_step_fixed(model, opt, x, y, max_norm=1.0)`: the same step — the same loss, the same
# weights after it, on any inputs — in which the host never reads a tensor's value; `decay_all_fixed(params,
# rate)`: the same weights after it, in at most 2 operators per call, however many tensors.
#
# **Evidence to reach**: `feeding.host_syncs(rootcauses.step_counts(clipped_step_fixed, "clipped_step"))`
# empty, and `rootcauses.host_read_error(clipped_step_fixed, *rootcauses.step_inputs("clipped_step"))` None
# (it runs the step where no tensor holds a value: any read fails, however it is spelled);
# `rootcauses.top_level_ops(decay_all_fixed, *rootcauses.step_inputs("decay_all"))`, the operators one call
# asks for itself (what a GPU would launch), at most 2 in all. Each step's point needs its diagnosis
# (exercise 1) right.
#
# *Hints: in the collapsed cell below. Try without them first.*

# %% [markdown] jupyter={"source_hidden": true} nbgrader={"grade": false, "grade_id": "ex3_hints", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Hints for exercise 3: questions**
#
# * `clipped_step`: which line needs a Python value of a tensor? Can the same arithmetic stay a tensor
#   operation, with no choice made on the host?
# * `decay_all`: the same operator with the same factor on every tensor of a list: does PyTorch have an
#   operator that takes the whole list? (Lesson 08, §3.)
#
# Still stuck? The fixes, nearly spelled out, are in the collapsed cell below.

# %% [markdown] jupyter={"source_hidden": true} nbgrader={"grade": false, "grade_id": "ex3_fix_hints", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Hints for exercise 3: the fixes**
#
# * `max(1.0, norm / max_norm)` compares a tensor with a float: Python needs a bool, so on a GPU the host
#   waits, once per parameter. `torch.clamp(norm / max_norm, min=1.0)` is the same divisor, computed on
#   the device.
# * PyTorch's "for each" operators take a list of tensors: `torch._foreach_mul_` (on a GPU, a few
#   multi-tensor kernels; on a CPU it loops underneath, which is why the count is of top-level operators).

# %% nbgrader={"grade": false, "grade_id": "ex3_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
def clipped_step_fixed(model, opt, x, y, max_norm=1.0):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    norm = torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters()))
    divisor = torch.clamp(norm / max_norm, min=1.0)  # stays on the device: no host wait
    for p in model.parameters():
        p.grad.div_(divisor)
    opt.step()
    return loss.detach()


def decay_all_fixed(params, rate):
    torch._foreach_mul_(params, 1.0 - rate)
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ex3_test_clipped_step", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""clipped_step: the fixed step reads no tensor's value on the host and trains the same; the point needs
its diagnosis (exercise 1) right."""
waits = feeding.host_syncs(rootcauses.step_counts(clipped_step_fixed, "clipped_step"))
assert not waits, f"the host still waits: {waits}"
read = rootcauses.host_read_error(clipped_step_fixed, *rootcauses.step_inputs("clipped_step"))
assert read is None, f"the step reads a tensor's value on the host: {read}"
model, opt, x, y = rootcauses.step_inputs("clipped_step")
ref_model, ref_opt, _, _ = rootcauses.step_inputs("clipped_step")
assert torch.allclose(clipped_step_fixed(model, opt, x, y), rootcauses.kernels.clipped_step(ref_model, ref_opt, x, y))
assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(model.parameters(), ref_model.parameters())), (
    "clipped_step_fixed: the weights after the step changed")
assert rootcauses.evidence_matches("clipped_step", *evidence["clipped_step"]), (
    "clipped_step: a fix without its evidence (exercise 1) earns nothing")
### BEGIN HIDDEN TESTS
FORBIDDEN = {"gpucourse.lessons.rootcauses.kernels:clipped_step": "the mystery is the code you are asked to fix, not to call"}
_causes, _evidence = freeze(causes, "causes"), freeze(evidence, "evidence")  # plain data from here on
_word = _causes.get("clipped_step") if type(_causes) is dict else None
_pair = rootcauses.plain_pair(_evidence.get("clipped_step")) if type(_evidence) is dict else None  # (str, number) or None
check(_word == "host_sync" and _pair is not None and rootcauses.shows("host_sync", _pair[0])
      and rootcauses.evidence_matches("clipped_step", *_pair), "clipped_step: a fix without its diagnosis (exercise 1) earns nothing")
for _seed in (4611, rootcauses.fresh_seed()):
    # the learner's step on the meta device, where any read of a value on the host fails: on its own thread
    check(call(rootcauses.host_read_error, clipped_step_fixed, *rootcauses.step_inputs("clipped_step", _seed)) is None,
          f"clipped_step: the step reads a tensor's value on the host (seed={_seed})")
    for _max_norm in (0.5, 1e6):  # clipped, and not clipped
        # three steps on the seed's inputs, on the learner's own thread: (the losses, the weights after), frozen
        _losses, _weights = call(rootcauses.run_step, clipped_step_fixed, "clipped_step", _seed, 3, max_norm=_max_norm)
        _ref_model, _ref_opt, _x, _y = rootcauses.step_inputs("clipped_step", _seed)
        _ref_losses = [rootcauses.kernels.clipped_step(_ref_model, _ref_opt, _x, _y, max_norm=_max_norm) for _ in range(3)]
        check(len(_losses) == 3 and all(type(_l) is torch.Tensor and _l.shape == _r.shape and torch.allclose(_l, _r, atol=1e-5)
                                        for _l, _r in zip(_losses, _ref_losses)),
              f"clipped_step: not the mystery's loss on other inputs (seed={_seed})")
        _ref_weights = list(_ref_model.parameters())
        check(len(_weights) == len(_ref_weights) and all(
            _a.shape == _b.shape and torch.allclose(_a, _b, atol=1e-5) for _a, _b in zip(_weights, _ref_weights)),
              f"clipped_step: not the mystery's weights on other inputs (seed={_seed}, max_norm={_max_norm})")
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "ex3_test_decay_all", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""decay_all: the fixed decay runs at most 2 operators and decays the same; the point needs its diagnosis
(exercise 1) right."""
decay_ops = sum(rootcauses.top_level_ops(decay_all_fixed, *rootcauses.step_inputs("decay_all")).values())
assert decay_ops <= 2, f"decay_all_fixed runs {decay_ops} operators per call"
params, rate = rootcauses.step_inputs("decay_all")
ref, _ = rootcauses.step_inputs("decay_all")
decay_all_fixed(params, rate)
rootcauses.kernels.decay_all(ref, rate)
assert all(torch.equal(a, b) for a, b in zip(params, ref)), "decay_all_fixed: the weights changed"
assert rootcauses.evidence_matches("decay_all", *evidence["decay_all"]), (
    "decay_all: a fix without its evidence (exercise 1) earns nothing")
### BEGIN HIDDEN TESTS
FORBIDDEN = {"gpucourse.lessons.rootcauses.kernels:decay_all": "the mystery is the code you are asked to fix, not to call"}
_causes, _evidence = freeze(causes, "causes"), freeze(evidence, "evidence")  # plain data from here on
_word = _causes.get("decay_all") if type(_causes) is dict else None
_pair = rootcauses.plain_pair(_evidence.get("decay_all")) if type(_evidence) is dict else None  # (str, number) or None
check(_word == "launch_bound" and _pair is not None and rootcauses.shows("launch_bound", _pair[0])
      and rootcauses.evidence_matches("decay_all", *_pair), "decay_all: a fix without its diagnosis (exercise 1) earns nothing")
for _seed in (4611, rootcauses.fresh_seed()):
    check(call(rootcauses.host_read_error, decay_all_fixed, *rootcauses.step_inputs("decay_all", _seed)) is None,
          f"decay_all: the decay reads or writes tensors' values outside torch's operators (seed={_seed})")
    _ops = call(rootcauses.top_level_ops, decay_all_fixed, *rootcauses.step_inputs("decay_all", _seed))  # a plain dict
    check(sum(_ops.values()) <= 2, f"decay_all: more than 2 operators per call on another list of tensors (seed={_seed})")
    _, _after = call(rootcauses.run_step, decay_all_fixed, "decay_all", _seed)
    _ref, _rate = rootcauses.step_inputs("decay_all", _seed)
    rootcauses.kernels.decay_all(_ref, _rate)
    check(len(_after) == len(_ref) and all(_a.shape == _b.shape and torch.equal(_a, _b) for _a, _b in zip(_after, _ref)),
          f"decay_all: not the mystery's weights (seed={_seed})")
### END HIDDEN TESTS
