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
# # 06 · Races and the memory consistency model
#
# **Two different races break GPU programs, and this lesson takes them one at a time: in part A,
# updates that get lost (two threads' read-modify-writes overlap); in part B, writes that another
# block sees late or out of order (visibility and ordering, the memory model).**
#
# *55 minutes in two halves — part A 25 min (teaching 16 · exercises 9), part B 30 min (teaching
# 27 · exercises 3); a break between them, or a day, works well · prerequisites: lesson 01
# (warps), lesson 04 (shared memory and `syncthreads`).*

# %%
from gpucourse.measure import runtime

runtime.banner()

# %% [markdown]
# ## Part A · Lost updates (25 min)
#
# ### Objectives of part A
# By the end of part A you can:
# 1. predict how many counts a histogram built with a plain `+=` loses, and how the number of
#    bins changes it; fix it with atomics and with per-block (privatised) shared-memory atomics;
# 2. read a lost update off an interleaving timeline of two threads;
# 3. tell a lost update by its symptom: counts or sums come out *too small*, and nothing crashes.
#
# ## 1 · Lost updates
#
# `counts[b] += 1` looks like one step. A GPU runs it as three: **load** `counts[b]` into a
# register, **add** 1, **store** it back. If another thread stores to `counts[b]` between your load
# and your store, your store erases its update. Thousands of threads hitting a few bins make that
# a certainty, not a corner case.
#
# Here is the kernel. A histogram of values in [0, 1), one bin per 1/`bins`, with a grid-stride
# loop (each thread takes every `gridsize`-th value):

# %%
import inspect

from gpucourse.lessons import races

print(inspect.getsource(races.histogram_racy.py_func))

# %% [markdown]
# ### Predict
# 2048 threads each run `counter[0] += 1` on one counter. What does a **GPU** print? What does
# Numba's **simulator** print (it runs one simulated thread at a time)? Write both numbers down.

# %%
prediction_gpu_counter = ...  # your guess for a GPU
prediction_simulator_counter = ...  # your guess for the simulator

# %% [markdown]
# The table runs it. Without a GPU the first row is the plain simulator, and it is *right*: it
# runs one thread to its end before the next, so no two `+=` ever overlap. That is exactly why the
# course has a **race scheduler**: it runs the same kernel one memory operation at a time, in an
# order you choose — `round-robin` (every thread loads before any stores: the worst case) or
# `random` with a seed — so the races a GPU has are visible and reproducible here.

# %%
races.counter_demo(threads=2048, blocks=8, seed=0)

# %%
from gpucourse.viz import predictions

predictions.read_back({"GPU": prediction_gpu_counter, "simulator": prediction_simulator_counter},
                      {"GPU": "at most 64 (each warp adds at most 1), often fewer", "simulator": 2048},
                      stands_in="the race scheduler's rows in the table above")

# %% [markdown]
# ### Predict
# The histogram has 1,024 values. With **16 bins**, how many counts do you expect the racy kernel to
# lose under a random interleaving — none, a few, most? With **1 bin**? With **1,024 bins**? And the
# two fixes: `cuda.atomic.add(counts, b, 1)` on global memory, and a *privatised* version where each
# block counts into its own shared-memory histogram with shared atomics and merges it at the end
# (one global atomic per bin per block)?

# %%
prediction_lost_16_bins = ...  # e.g. "about half"

# %% [markdown]
# Move the sliders. Fewer bins means more threads fighting over each counter. On a GPU the left
# panel is measured there (and the race scheduler's count sits beside it); the right panel is the
# time per launch, measured by the course's harness. Without a GPU the right panel shows the
# recording made on a real GPU — or says plainly that none exists yet.

# %%
histogram = races.histogram_widget()
histogram

# %%
predictions.read_back(prediction_lost_16_bins, stands_in=histogram,
                      model="most of them (the race scheduler loses 807 of 1,024 with seed 0); atomics lose none")

# %% [markdown]
# ### The interleaving that lost an update
# The race scheduler logs every memory operation in the order it ran them. Here are two threads of
# the racy histogram (4 bins, 256 values, random schedule): each loaded the same count, each added
# one, and the later store erased the earlier one. The red arrow goes from the write that is gone
# to the store that buried it.
#
# <details><summary>Description of the picture</summary>
#
# A timeline with one row per thread (two threads from different blocks) and the steps of the
# interleaving running left to right. Each step is a marker labelled with the operation and its
# value: both threads load their input value, then both load the same bin's count and get the same
# number, then each stores that number plus one. A red arrow points from the first store to the
# later one that overwrote it; the title names the threads and the values.
#
# </details>

# %%
races.lost_update_timeline(bins=4, items=256, seed=0)

# %% [markdown]
# The microscope's race detector (it runs this race scheduler) also reports *which lines* race, and
# between whom — here one line with itself, across blocks, across warps of one block, and inside a
# warp: nothing orders two threads' `+=` on the same bin.

# %%
_, report = races.race_histogram("racy", bins=4, items=256, seed=0)
report.microscope.races()[["line_a", "source_a", "kind", "scope", "count"]]

# %% [markdown]
# ## Explain
#
# * **Atomics.** `cuda.atomic.add` is one indivisible read-modify-write (CUDA C++ Programming Guide,
#   "Atomic Functions"): nothing can come between its load and its store. On global memory it is
#   performed in the L2 cache, so every thread hitting one bin queues at one L2 slice — the fewer
#   the bins, the longer the queue.
# * **Privatisation.** Each block keeps its own histogram in shared memory. Its atomics only contend
#   with the block's own threads and are served by the SM; the merge costs one global atomic per
#   bin per block instead of one per value. NVIDIA's developer-blog post "GPU Pro Tip: Fast Histograms
#   Using Shared Atomics on Maxwell" describes the same idea (there a second kernel merges the per-block
#   histograms) and reports large speed-ups on that generation; rather than repeating its numbers, the
#   course's GPU-tier test checks the claim on the machine at hand: at least 3× over global atomics at
#   16 bins and 10^7 values.
# * The two `syncthreads` in the privatised kernel matter: the first makes every bin zero before any
#   thread counts (shared memory starts with garbage), the second makes every count land before
#   any thread merges. Drop one and the race scheduler shows you the wrong counts.

# %%
print(inspect.getsource(races.histogram_privatised.py_func))

# %% [markdown]
# ### A lost update in a training loop
# A small least-squares model trained by gradient descent. Each block sums its examples' gradients
# in shared memory (atomics, correct), then merges them into the global gradient: once with
# `cuda.atomic.add`, once with a plain `+=`. Nothing crashes. The racy loss curve simply drifts
# from the correct one, because some blocks' contributions vanish in some steps: **lost updates**,
# the race of this part. (Part B's story has the same symptom — a loss that is slightly wrong —
# from a different race: there no update is lost, a reader sees writes late or out of order.)
#
# <details><summary>Description of the picture</summary>
#
# A line chart of the loss (log axis) against the training step for three runs: the NumPy reference,
# blocks merging with cuda.atomic.add, and blocks merging with a plain +=. The first two lie on top
# of each other; the racy line falls more slowly and stays above them. The title gives how far off
# the racy run ends.
#
# </details>

# %%
races.training_figure(steps=25, seed=0)

# %% [markdown]
# ### How a profiler shows it
# * A lost update is silent: no tool flags a wrong count on global memory at run time. Check results
#   against a reference (the harness does, before it times anything), and test under adversarial
#   schedules, as this lesson does.
# * `compute-sanitizer --tool racecheck` finds hazards on **shared** memory (for example a missing
#   `syncthreads` in the privatised histogram); it does not check global memory across blocks.
# * Nsight Compute's memory workload analysis shows atomic traffic at the L2: global atomics on a few
#   bins show up as many atomic requests on few addresses, and privatisation moves them to shared
#   memory.
#
# ### Key points of part A
# * `+=` on shared data is load, add, store: concurrent ones lose updates. Use atomics, and
#   privatise to shared memory when many threads hit few addresses.
# * The simulator runs one thread at a time and hides races; the race scheduler shows them.
# * A lost update is silent: results come out slightly too small. Check against a reference.

# %% [markdown]
# ## Part B · Visibility and ordering: the memory model (30 min)
#
# ### Objectives of part B
# By the end of part B you can:
# 1. say what `syncthreads`, `threadfence_block`, `threadfence` and atomics order, and for whom
#    (their *scope*), and tell a *strong* access (an atomic) from a *weak* one (a plain load or
#    store);
# 2. predict which outcomes of the message-passing litmus test the PTX memory model allows with
#    no fence, a fence on one side, and fences on both sides;
# 3. write a hand-off between blocks (data, a fence, then an atomic flag; an atomic read of the
#    flag, a fence, then the data) with a capped wait, and explain why the wait needs a cap;
# 4. explain why the last-block reduction (an atomic ticket and `threadfence`) is correct.
#
# ## 2 · The bug that shouldn't exist
#
# A team's training loop produced loss curves that were *slightly* wrong — reproducibly, but only
# on the GPU. The CPU reference was right, the maths was right, and it took three weeks to find:
# one thread block wrote gradient updates to global memory, another block read them, and nothing
# made the writes visible to the reader in order. Sometimes the reader got fresh gradients,
# sometimes stale ones, and the model learnt from the mixture. Nobody on the team had assumed
# anything exotic; they had assumed a GPU's memory behaves like a CPU's. (Retold from one of the
# course's source articles.)
#
# This is **not** a lost update: every write landed. It is a **visibility and ordering** bug: the
# reader saw the writes late, or in a different order from the one they were made in. Part A's
# training loop lost updates; this part rebuilds the story's race at its smallest — message passing
# and the hand-off below — and shows the stale read in the race scheduler's timeline (section 3).
#
# The pattern underneath is *message passing*: **block 0 writes data, then sets a flag; block 1
# waits for the flag, then reads the data.** On a sequentially consistent machine, seeing the flag
# implies seeing the data. A GPU does not promise that.
#
# ### Scopes, fences, acquire and release
# The PTX memory model (PTX ISA, "Memory Consistency Model") is what CUDA C++ and Numba compile to.
# Its rules, in the words this course uses:
#
# * **Scope** — every synchronising operation names *who* it orders memory for: a block (CTA), a
#   cluster, the GPU, or the whole system. `syncthreads()` and `threadfence_block()` have **block
#   scope**: they order memory among the block's own threads and promise nothing to any other block.
# * **Strong and weak accesses.** A plain load or store (`flag[0] = 1`, PTX `ld`/`st`) is *weak*.
#   Atomics (`cuda.atomic.*`, PTX `atom`) are *strong* — "morally strong" in the PTX ISA's words
#   (section "Morally strong operations") — as are `volatile` accesses and PTX's `ld.relaxed`,
#   `ld.acquire`, `st.relaxed` and `st.release`. Only strong accesses
#   can carry a message from one thread to another; on weak ones PTX promises almost nothing, not
#   even that two reads of one location come back in order.
# * **Fences.** PTX has a light fence, `fence.acq_rel`, and a heavy one, `fence.sc`.
#   A fence followed by a strong write of the flag is a **release**: anyone who sees the flag sees
#   what came before the fence. A strong read of the flag followed by a fence is an **acquire**:
#   what comes after it sees everything that was released. The message needs both halves.
# * **`cuda.threadfence()`** compiles to `membar.gl`, which the PTX ISA defines as `fence.sc.gpu`:
#   the heavy, sequentially consistent kind. All `fence.sc` are ordered with one another, and that
#   alone makes a hand-off work even with a *weak* (plain) flag between two of them. Do not lean on
#   it: write the flag with an atomic (`cuda.atomic.exch`) and read it with one
#   (`cuda.atomic.add(flag, 0, 0)`), and the hand-off is correct under the light fences too.
# * **Atomics are not fences.** Numba's `cuda.atomic.add` compiles to a relaxed `atom.global.add`:
#   indivisible and strong, but it orders no *other* access (Programming Guide, "Atomic Functions").
# * A kernel boundary orders everything: the next kernel sees all of the previous one's writes.
#
# <details><summary>Description of the picture</summary>
#
# Nested boxes, from the outside in: system (threadfence_system), GPU (threadfence, atomics),
# cluster, block (syncthreads, threadfence_block, shared memory) and a warp (syncwarp) holding four
# threads. Beside the warp, inside the GPU box but outside the block box, a separate box for another
# block notes that syncthreads and threadfence_block do not reach it.
#
# </details>

# %%
races.scopes_picture()

# %% [markdown]
# Where can the message break? The writer's two stores may reach memory in either order (they go
# to different addresses, maybe different L2 slices, and the compiler may reorder them too), and
# the reader's loads may be served from its own SM's cache or issued early. The picture shows what
# the rules allow without fences, and what the two fences fix.
#
# <details><summary>Description of the picture</summary>
#
# Two boxes at the top, SM 0 with the producer block (writes data[0] = 1, then flag[0] = 1) and SM 1
# with the consumer block (reads flag[0], then data[0]), above a box for L2 / global memory holding
# data[0] and flag[0]. Numbered red arrows: ① the flag reaches memory first, ② the consumer sees the
# new flag while its data is still old, ③ the data arrives late. The consumer's read of data[0] is
# marked 0 (stale!).
#
# </details>

# %%
races.memory_model_picture(fenced=False)

# %% [markdown]
# <details><summary>Description of the picture</summary>
#
# The same two SMs above L2 / global memory, now with threadfence() between the producer's two
# writes (publish) and between the consumer's two reads (catch up). Numbered green arrows: ① the
# data is published, ② then the flag, ③ seeing the flag brings the data, and the consumer reads
# data[0] as 1.
#
# </details>

# %%
races.memory_model_picture(fenced=True)

# %% [markdown]
# ### Predict
# For each variant of message passing — no fence; a fence in the writer only; a fence in the
# reader only; fences on both sides — is the outcome *"flag = 1 but data = 0"* **allowed** by the
# model? Then: how often do you expect a modern GPU to show it in a million tries?

# %%
prediction_mp_allowed = {"no fence": ..., "producer only": ..., "consumer only": ..., "both": ...}
prediction_gpu_weak_per_million = ...

# %% [markdown]
# ### Litmus tests: what each memory allows
# A *litmus test* is a tiny program with a question: can this outcome happen? The table answers
# each one three ways, by **exhaustive search** over every interleaving: the plain simulator
# (sequentially consistent), **the course's weak-memory model** (section 3), and what the PTX model
# says (PTX ISA, "Memory Consistency Model"). The rows with `fence_acq_rel()` use the light fence:
# with a plain flag it no longer carries the data, and it does not forbid store buffering (SB) —
# that is what the heavier `fence.sc` buys. The model is deliberately a little *stronger* than PTX
# in three places — inside one block, load buffering (LB) and two plain reads of one location
# (CoRR) — so code that passes under it is not yet proven correct: it still needs the fences and
# strong accesses the PTX model asks for.

# %%
from gpucourse.lessons.races import weakmemory

weakmemory.litmus_table()[["test", "programs", "weak outcome", "plain simulator (SC)", "this model",
                           "PTX memory model"]]

# %%
predictions.read_back(prediction_mp_allowed,
                      {"no fence": "allowed", "producer only": "allowed", "consumer only": "allowed",
                       "both": "forbidden"},
                      counted="the course's weak-memory model agrees with the PTX memory model in the table above")

# %% [markdown]
# ### The litmus test on real hardware
# On a GPU, `run_litmus` launches `mp_harness`: one producer/consumer pair per SM, every other
# thread hammering memory (stress makes weak behaviour more likely), 10,000 launches per variant,
# and counts every outcome. Published runs on older NVIDIA GPUs saw the weak outcome thousands of
# times per 100,000 runs (Alglave et al., ASPLOS 2015, on Fermi and Kepler; 3 on Maxwell) and tuned
# stress provoked it widely (Sorensen & Donaldson, PLDI 2016). On recent GPUs it is rare, and
# **zero is a legitimate result**: it means this chip, this compiler and this stress did not show it
# in this many tries — not that the program is correct. The model *allows* it, so a future chip,
# compiler or workload may show it.
#
# The chart puts the model's counts (random schedules of `mp_kernel` under the race scheduler and
# the weak-memory model) beside the GPU's. Without a GPU, the GPU side is the course's own recording
# of `races.litmus_mp`: a quick one, on an NVIDIA H200 (the caption names the contract and the date;
# not your GPU). It saw the weak outcome **zero** times in every placement, fenced or not (the table
# under the chart gives the runs): the legitimate zero described above, not a proof. Where no
# recording exists the GPU side stays empty — nothing is estimated — and the table says so.
#
# <details><summary>Description of the picture</summary>
#
# A bar chart of the percentage of runs with the weak outcome (flag seen, data old) for four
# placements of threadfence: no fence, producer only, consumer only, both sides. Each bar of the
# weak-memory model is labelled with its count out of the runs; the bar for both sides is zero and
# labelled forbidden. Without a GPU or a recording there are no GPU bars, and a note on the chart
# says so.
#
# </details>

# %%
races.litmus_figure(runs=50, seed=0)

# %%
races.litmus_recording_table()

# %%
predictions.read_back(prediction_gpu_weak_per_million, "nothing: a model says what is allowed, not how often",
                      measured=races.litmus_weak_per_million,  # no fence, on this GPU (a GPU only)
                      stands_in="the course's H200 recording in the table above (a quick one; not your GPU)",
                      unit="per million")

# %% [markdown]
# ### Waiting for another block: the producer must be running
# The reader *waits* for the flag. That spin only ends if the writer's block runs at the same time
# — and CUDA makes no promise about which blocks are resident together or in what order they
# start (only a cooperative launch guarantees co-residency). If the waiting blocks fill the GPU
# first, the writer never gets an SM and the kernel hangs forever.
#
# So **every cross-block wait gets an iteration cap**, and the code handles "gave up". The kernel
# below writes the flag with an atomic exchange and polls it with an atomic read (strong accesses;
# Numba has no volatile load, and a plain load in a loop may be hoisted out of it by the compiler),
# at most `spin_cap` times. (The litmus kernels above keep a plain flag on purpose: that is the
# pattern their question is about.)

# %%
print(inspect.getsource(races.handoff_kernel.py_func))

# %% [markdown]
# Five situations, run by the race scheduler. Row 1 runs blocks one after another, as the plain
# simulator does: the producer is block 1, block 0 waits first, and only the cap lets it finish.
# Rows 3–5 use the weak-memory model with `round-robin`, where every load reads the stalest
# value the model allows (values arrive late, but they arrive). Row 5 weakens every `threadfence`
# to the light `fence.acq_rel` (memory `"weak-acqrel"`): the atomic flag still carries the data.

# %%
races.handoff_table(seed=0).drop(columns=["memory", "producer block"])

# %% [markdown]
# ## 3 · A weak-memory model for the simulator
#
# The simulator cannot show what a GPU's memory system does, so the course uses an **operational
# model** (it is a model, not NVIDIA's hardware): each block — one SM — sees global memory through
# its own view.
#
# 1. A store is placed in its location's order at once, but *other* blocks may keep reading older
#    values of that location: writes reach other blocks late, and in any order.
# 2. Reads never go back in time, and a block always sees its own writes.
# 3. A fence *publishes* everything the block has written or seen. A strong (atomic) write after a
#    fence carries what was published; a block that reads it with a strong access and then fences
#    *catches up* with all of it. A plain (weak) flag carries nothing.
# 4. `threadfence()` is `fence.sc`: besides that, it catches up with everything *any* earlier
#    `threadfence` published (all `fence.sc` are ordered). That is why even a plain flag works
#    between two of them — and why the model has a variant, `"weak-acqrel"`, where it does not.
# 5. Atomics act on the newest value; they are not fences, but a chain of atomics passes on what
#    each writer published (so the ticket in section 4 works).
# 6. `syncthreads` and `threadfence_block` change nothing for other blocks.
#
# It is stronger than PTX where the litmus table says so (inside a block, LB, CoRR). It plugs into
# the microscope's memory hook, so you can run **your own kernel** against it:
# `microscope.trace(kernel, grid, block, *args, schedule="random", seed=1,
# memory=weakmemory.WeakMemoryHook("weak", seed=1))`. Here is the hand-off without fences, and the
# stale read the model produced:
#
# <details><summary>Description of the picture</summary>
#
# A timeline with one row for the producer thread and one for the consumer thread, steps running
# left to right, each a marker labelled with its operation and value. The producer stores data[0]
# and then raises flag[0] with an atomic; the consumer polls the flag with atomics until it reads 1,
# then loads data[0] and gets the old value 0. A red arrow links the producer's store of data[0]
# with that stale load; the title says which block read which value.
#
# </details>

# %%
run = races.handoff(producer_block=1, spin_cap=200, fence=False, schedule="round-robin", memory="weak")
weakmemory.timeline_figure(run["report"], "stale")

# %% [markdown]
# ## 4 · Correct patterns
#
# ### The last-block reduction
# NVIDIA's `threadFenceReduction` sample sums an array in one kernel: every block sums its share
# and writes it to `partial[block]`, then takes a **ticket** with an atomic; the block that draws
# the last ticket knows all others have finished and adds the partial sums. The `threadfence`
# before the ticket is the release: without it, the ticket can be visible before the partial sum.
# The course's version also fences in the last block after it learns it is last (the acquire the
# PTX model asks for; NVIDIA's sample reads the partial sums through `volatile` instead).

# %%
print(inspect.getsource(races.reduce_last_block.py_func))

# %% [markdown]
# Under the weak-memory model, with and without the fences (`round-robin` = stalest reads; then
# twenty random schedules):

# %%
races.fence_reduction_table(runs=20, seed=0)

# %% [markdown]
# ### How a tool shows it
# * Nothing flags a missing fence at run time: a stale read looks like a correct one. Reason with
#   litmus tests, test under adversarial schedules of a weak model (as this lesson does), and
#   compare results against a reference.
# * `compute-sanitizer --tool racecheck` checks **shared** memory only; it does not see two blocks
#   racing on global memory.
#
# ### Key points of part B
# * `syncthreads` and `threadfence_block` order nothing across blocks. Handing data to another block
#   needs a fence on **both** sides (release before the flag, acquire after it), a flag written and
#   read with atomics (strong accesses), and an iteration cap on any wait for another block.
# * Plain loads and stores are *weak*: only strong accesses (atomics) carry a release to an acquire.
#   A plain flag between two `threadfence` calls works only because `threadfence` is the
#   sequentially consistent `fence.sc`.
# * A weak outcome that a chip never showed is still allowed by the model: zero observations is a
#   measurement, not a proof.
#
# **Next:** [lab 06](../labs/lab06_races/lab06_races.ipynb) — fix a racy histogram (atomics, then
# privatisation; part A) and a flag/data hand-off (fences; part B), graded under adversarial
# schedules of the race scheduler and the weak-memory model.
