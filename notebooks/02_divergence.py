# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (gpucourse)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 02 · Warp divergence
#
# **In 45 minutes you will predict what a data-dependent `if` costs a warp, check from the
# compiler's output that the branch is really there, and decide when sorting the data first pays.**
#
# *Teaching 35 min · exercises 10 min · prerequisites: lesson 01 (warps and lanes).*
#
# ## Objectives
# By the end you can:
# 1. predict the time of a branchy kernel from how many paths each warp takes (the warp pays for
#    every path any of its lanes takes) and compute its SIMT efficiency;
# 2. read a kernel's PTX and say whether an `if` became a real branch (`@%p bra`) or a select
#    (`selp`) that cannot diverge;
# 3. explain why the model charges 2× for the same fraction of "odd" elements when they are
#    interleaved and almost nothing when they are clustered in whole warps;
# 4. test the folklore ("`if (threadIdx.x < 16)` halves throughput", "28 of 32 lanes still costs
#    2×") against the model, the microscope and a GPU measurement;
# 5. judge when partitioning or sorting the data so that warps agree is worth its own cost.

# %%
from gpucourse.measure import runtime

runtime.banner()

# %% [markdown]
# ## One warp, two paths
#
# A warp issues one instruction at a time for all its 32 lanes (lesson 01). When the lanes
# disagree at an `if`, the warp cannot issue both sides at once: it issues **path A** for the
# lanes that took it while the others sit **masked**, then **path B** for the rest. Every path
# that *any* lane of the warp takes costs the whole warp its full length.
#
# The picture: two warps, half of each warp's lanes on path A (blue), half on path B (orange),
# each path 4 instructions long. Each row is a lane, each column one issue slot.
#
# <details><summary>Description of the picture</summary>
#
# A grid with one row per lane of warps w0 and w1 (64 rows, a black line between the warps) and one
# column per issue slot (time runs to the right). In each warp every other lane is on path A: in the
# first four slots those lanes are blue and the rest grey (masked), in the next four slots the other
# lanes are orange (path B) and the first ones grey. The title gives the issue slots per warp and
# the share of lanes busy; the legend uses a square for path A, a diamond for path B and a circle
# for a masked lane.
#
# </details>

# %%
from gpucourse.lessons import divergence

divergence.prefetch_ptx()  # compiles two kernels to PTX in the background, for section 2
divergence.warp_timeline_figure(fraction=0.5, placement="interleaved", body_a=4, body_b=4)

# %% [markdown]
# The same number of A elements, but placed so that whole warps agree: every warp issues one
# path, no lane waits, and the work takes half the issue slots.
#
# <details><summary>Description of the picture</summary>
#
# The same grid of 64 lanes by issue slots, now with warp w0 entirely orange (path B) and warp w1
# entirely blue (path A) for four slots each, with no grey masked cells; the title gives the issue
# slots per warp and the share of lanes busy.
#
# </details>

# %%
divergence.warp_timeline_figure(fraction=0.5, placement="clustered", body_a=4, body_b=4)

# %% [markdown]
# Four ways to place a fraction *f* of lanes on path A run through this lesson:
#
# | placement | which lanes take A |
# |---|---|
# | interleaved | the same share of lanes in **every** warp, spread across it |
# | clustered | whole warps on A, spread through the array |
# | sorted | every A element first, then every B: at most one warp is mixed |
# | random | each element by chance — what unsorted sparse data looks like |
#
# Move the slider: at which fractions does interleaving cost both paths? What about random?

# %%
divergence.timeline_chart()

# %% [markdown]
# ## First: is the branch really there?
#
# Many demonstrations of divergence time a kernel like this one and find *no* gap:
#
# ```python
# if flags[i]:
#     v = v * 0.5
# else:
#     v = v + 1.0
# ```
#
# ### Predict
# Half the lanes of every warp take each side. Will this kernel run 2× slower than with
# every lane on one side? Write your answer before running the next cells.

# %%
prediction_trivial_branch = "..."  # e.g. "2× slower" or "no difference", and why

# %% [markdown]
# The compiler decides. For a short `if`, it usually computes both sides in every lane and
# keeps one with a select (`selp`) or with predicated instructions: no jump, so nothing to
# diverge. For long bodies (loops, many instructions) it keeps a real branch, and then the warp
# must run both paths. The only way to know is to look at what it generated: the **PTX**.
#
# The lesson's kernel has two bodies of real work, loops of multiply-adds whose lengths are
# run-time arguments, so the compiler can neither drop nor merge them:

# %%
print(divergence.kernel_source(divergence.two_paths))

# %% [markdown]
# Below, both kernels are compiled to PTX for an H100/H200 (compute capability 9.0). No GPU is
# needed for this: without one, the compile runs in a separate Python process that uses
# numba-cuda's real compiler. The helper follows the loaded flag (`ld.global.u8`) to the
# comparison that turns it into a predicate (`setp … %p`) and then to what uses that predicate.
# A `@%p bra` means a real branch; a `selp` means no branch.

# %%
divergence.show_ptx("two_paths")

# %%
divergence.show_ptx("predicated")

# %%
divergence.ptx_evidence()

# %% [markdown]
# The other conditional branches in `two_paths` belong to the bounds check (`if i < out.size`)
# and to the two loops (their entry tests and back-edges; the compiler unrolled each loop four
# times). The trivial kernel keeps only the bounds check.
#
# PTX is not yet machine code: `ptxas` may still turn a *short* PTX branch into predicated
# instructions, but not a loop. On a GPU, `cuobjdump -sass` or Nsight Compute's source view shows
# the final instructions.
#
# **Check your own kernel** the same way:
# `result = divergence.ptx_of(my_kernel, "void(uint8[::1], float32[::1])")`, then
# `divergence.PtxView(result)` — with `load="ld.global.f32"` when the condition reads a float32
# array instead of a uint8 flag. The kernel may use only `cuda`, `np` and `math` (it is
# compiled on its own), and when the compiler cannot run here the result says why instead of
# failing.
#
# What does timing the trivial kernel show? On a GPU the chart measures it; without one it shows
# a recording if there is one, and otherwise only what the PTX predicts.
#
# <details><summary>Description of the picture</summary>
#
# A line chart of time (relative to every lane on path A) against the fraction of lanes on path A. A
# dotted flat line at 1× is what the PTX predicts (no branch, no gap); on a GPU, or from a
# recording, one line each for interleaved and clustered lanes lie on or near it. Without either,
# the chart says "No GPU timing to show" and only the dotted line is drawn.
#
# </details>

# %%
divergence.predicated_figure()

# %%
from gpucourse.viz import predictions

predictions.read_back(prediction_trivial_branch, stands_in="the PTX above (a select, no branch)",
                      model="no difference: the short `if` compiled to a select (`selp`), so no lane waits")

# %% [markdown]
# ## The experiment: time vs the fraction of lanes on path A
#
# ### Predict
# Both paths do the same work (128 multiply-adds). Write down the time, relative to every lane
# on path A, for:
# 1. half the lanes on A, **interleaved** in every warp;
# 2. half the lanes on A, **clustered** in whole warps;
# 3. one lane in 32 on A, interleaved, when path B is **cheap** (1/16 of A).

# %%
prediction_interleaved_half = ...  # ×
prediction_clustered_half = ...  # ×
prediction_one_lane_cheap_b = ...  # ×

# %% [markdown]
# The chart below draws one curve per placement. Dotted lines are the model — a warp pays for
# every path any of its lanes takes — computed for each placement's actual lane pattern. On a
# GPU, solid lines are measured now (the course's harness: result checked first, warm-up,
# events, median of the samples; quick samples, shorter than the course's 0.5 s standard).
# Without a GPU they are the recording made on a real GPU, if there is one; the caption always
# says which. Change the body cost: with short bodies the loads and the store, which every warp
# pays once, dilute the gap.

# %%
fraction = divergence.fraction_chart()
predictions.mark_chart(fraction, prediction_interleaved_half, x=0.5, label="interleaved, half")
predictions.mark_chart(fraction, prediction_clustered_half, x=0.5, label="clustered, half")

# %%
def model_time(placement, fraction_on_a, path_b):  # the model's relative time for 128-FMA bodies
    flags = divergence.lane_flags(divergence.MODEL_THREADS, fraction_on_a, placement)
    return round(divergence.model_relative_time(flags, 128, divergence.path_b_body(128, path_b)), 2)


predictions.read_back(
    {"interleaved, half": prediction_interleaved_half, "clustered, half": prediction_clustered_half,
     "1/32 on A, cheap B": prediction_one_lane_cheap_b},
    {"interleaved, half": model_time("interleaved", 0.5, "same"),
     "clustered, half": model_time("clustered", 0.5, "same"),
     "1/32 on A, cheap B": model_time("interleaved", 1 / 32, "cheap")},
    unit="×", stands_in=fraction)

# %% [markdown]
# ## The microscope: count the lanes
#
# Timing needs a GPU; counting does not. The microscope runs one small launch of `two_paths`
# (256 threads) in the simulator and records, for every line each warp executes, which lanes
# were active. **SIMT efficiency** = active lanes ÷ 32, averaged over the issues of the two loop
# bodies. Its counts are exact in both modes.
#
# ### Predict
# At fraction 0.5, what SIMT efficiency do *interleaved*, *sorted* and *random* give? And at
# 1/32 with path B set to *none*?

# %%
prediction_simt_efficiency = {"interleaved": ..., "sorted": ..., "random": ...}

# %%
divergence.simt_chart()

# %%
predictions.read_back(
    prediction_simt_efficiency,
    {p: round(divergence.model_simt_efficiency(divergence.lane_flags(256, 0.5, p), 128, 128), 2)
     for p in ("interleaved", "sorted", "random")},
    counted="the microscope counts the same lanes exactly on the chart above (in both modes, not a timing)")

# %% [markdown]
# One warp under the microscope: each row is a line it executed, in order; squares are active
# lanes, crosses masked ones. Try *interleaved* and *clustered*, and another warp.

# %%
divergence.lanes_chart()

# %% [markdown]
# A profiler names the same things *threads per executed instruction* (32 when no warp splits) and
# *divergent branches*. Here is the interleaved half-and-half launch (16 FMAs per path) under those
# names, beside what Nsight Compute measured for the same kernel on the course's recordings (recorded
# on that GPU, not on this machine). ncu counts SASS instructions where the microscope counts source
# lines, so these two rows agree in pattern (below 32, one divergent branch per warp), not in total.

# %%
from gpucourse.measure import ncu

ncu.beside_recorded(divergence.trace_two_paths(0.5, "interleaved", body_a=16, body_b=16).profile(),
                    "two_paths alternating lanes", rows="control")

# %% [markdown]
# ## The folklore, tested
#
# Two claims from the course's source texts:
# *"That `if (threadIdx.x < 16)` branch you wrote? In warp execution, you just cut your throughput
# in half"*, and divergence *"where 28 of 32 threads take one path and 4 take another … costs you
# exactly 2x throughput on the branchy code section"*.
# The table puts each next to the model, the microscope's exact count on that very lane pattern,
# and the GPU's ratio: on a GPU measured now (the fraction chart's own points), else the course's
# recording where one exists (the measured sweep spreads the lanes instead of taking lanes 0–15;
# the model and the microscope give the same answer for any 16 lanes).

# %%
divergence.claims(body_a=128)

# %% [markdown]
# Read it carefully:
#
# * `threadIdx.x < 16` with an `else` of equal work: the model says 2× the time — throughput
#   halves. With **no** `else`, the model says the time is what it would be with all 32 lanes on
#   path A: the warp is no slower, but half its lanes idle, so *useful* throughput halves. Both
#   readings can be true; they answer different questions.
# * "28 of 32 costs 2×" is right only when both paths cost the same. The split does not matter
#   (28/4 costs what 16/16 does), the lengths do: if the 4 lanes' path is cheap, the warp pays
#   little more than path A alone.
# * And it is 2× **of the branchy section**: the model counts only the two bodies. A kernel that
#   also loads, stores and computes outside the branch pays less than 2× in total; the measured
#   curves for short bodies (16 FMAs) show by how much.
#
# The GPU-tier tests (`pytest -m gpu`) check the model's two sharpest predictions on a real GPU
# in one run: two equally costly paths interleaved at 0.5 take at least 1.7× as long as the same
# work clustered per warp, and one lane in 32 on A with a cheap B costs at least 0.8× of every
# lane on A.
#
# ## Explain
#
# * **CUDA C++ Programming Guide, "SIMT Architecture"**: a warp executes one common instruction
#   at a time, so it runs at full efficiency only when its 32 threads agree on their path; when
#   they diverge at a data-dependent branch, the warp executes each path taken, disabling the
#   threads not on it. Divergence happens only *within* a warp: different warps run independently,
#   which is why clustering costs nothing.
# * Since Volta (compute capability 7.0), **independent thread scheduling** gives each thread its
#   own program counter, so the scheduler may interleave the two paths instead of running one to
#   the end first. It still issues one instruction per cycle for the lanes on one path: the total
#   issue count — and so the cost model above — does not change.
# * **CUDA C Best Practices Guide, "Branching and Divergence"**: avoid different execution paths
#   within a warp; a condition that depends on `threadIdx.x / warpSize` does not diverge, because
#   every warp is on one side. Its "Branch Predication" note is the trap above: for short bodies
#   the compiler may predicate instead of branching, and the threads whose predicate is false
#   simply do not write results — nothing serialises, but both sides are executed by everyone.
#
# ## A story from the field: sparse data
#
# One of the course's sources describes the classic case: a kernel walks a sparse array and
# skips the zeros: `if x[i] != 0: expensive(x[i])`. The zeros fall anywhere, so almost every
# warp holds a few non-zeros, and almost every warp pays the full
# `expensive` path while most of its lanes wait — for the whole run. Better branching does not
# help: the fix is the **data layout**. Partition or sort so that the non-zeros sit together
# (or launch threads only over a compacted list of them); then warps agree and the zeros' warps
# finish at once. But the sort or the compaction is a kernel too, with its own memory traffic.
# Whether it pays depends on how expensive the skipped path is, so the answer comes from a
# measurement, not from the model.
#
# ### Predict
# One element in 32 is non-zero, at random. How many warps of 32 contain at least one? By how
# much could sorting speed up the kernel *if sorting were free*? And for which cost of
# `expensive` do you expect the sort to pay for itself?

# %%
prediction_warps_with_a_nonzero = ...  # fraction of warps
prediction_break_even_cost = ...  # FMAs on path A

# %% [markdown]
# The microscope on 1,024 sparse elements (32 non-zeros at random places), as written and after
# `sorted_order` puts the non-zeros first (the kernel `two_paths_remapped` makes thread *t* work
# on element `order[t]`, so the answer lands in the same place):

# %%
divergence.sparse_table(n_threads=1024, density=1 / 32, body=8)

# %%
predictions.read_back(prediction_warps_with_a_nonzero, round(1 - (31 / 32) ** 32, 2),
                      counted="the microscope's 'warps that issue path A' in the table above are exact")

# %% [markdown]
# And the question that needs a GPU: the speed-up once the sort's own time is included. The
# dotted line is the model's upper bound with a free sort: it counts only the branch bodies
# (warps paying path A before ÷ after), while the loads and stores are paid by every warp, so it
# is approached only when path A dominates. The measured curves include `argsort` (or
# `flatnonzero`), and fall below 1× where the fix costs more than it saves.
#
# <details><summary>Description of the picture</summary>
#
# A log–log chart of the speed-up from sorting first (unsorted time ÷ time with the fix) against the
# cost of path A in FMA iterations. Two flat lines: the dotted model upper bound (branch bodies
# only) high up, and the dashed break-even line at 1×. On a GPU, or from a recording, two more lines
# show sorting first and compacting first; without either, the chart says "No GPU timing to show"
# and only the two flat lines are drawn.
#
# </details>

# %%
predictions.mark(divergence.sort_pays_figure(density=1 / 32), prediction_break_even_cost, vertical=True,
                 label="break-even", unit="FMAs")

# %% [markdown]
# **How a profiler shows it.** In Nsight Compute, the *Warp State Statistics* section reports
# *Avg. Active Threads Per Warp* (32 means no divergence; it falls towards 16 when interleaved
# bodies dominate) and
# *Avg. Not Predicated Off Threads Per Warp*, which drops instead when the compiler predicated
# the branch; the *Source Counters* section gives the branch efficiency
# (`smsp__sass_average_branch_targets_threads_uniform.pct`) and points at the divergent
# branches line by line — the GPU's version of what the microscope counted above.
#
# ## Key points
# * A warp pays for every path any of its lanes takes; masked lanes wait. Equal paths interleaved
#   in every warp cost 2× the branchy section; the same work in agreeing warps costs nothing extra.
# * Check the PTX before you trust a divergence benchmark: a short `if` often compiles to a select
#   (`selp`) and cannot diverge; real work keeps a branch (`@%p bra`).
# * Fix divergence in the data layout — partition, sort or remap threads to work so that warps
#   agree — and measure whether the preprocessing pays for itself.
#
# **Next:** [lab 02](../labs/lab02_divergence/lab02_divergence.ipynb) — restructure a divergent
# kernel so that its warps agree, and let the microscope grade it.
