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
# # 04a · Reductions, scans and warp primitives
#
# **Sum a million numbers the way a GPU wants it: you will count, for five versions of the same tree
# reduction, how many warp line issues and idle lanes each one costs and why, replace the last
# steps with warp shuffles, make a branch warp-uniform with a vote, and weigh the two classic block
# scans by work against steps.**
#
# *40 minutes of core (teaching 35 · predictions and explorers 5) — the tree ladder 22, warp
# shuffles and atomics 3, many elements per thread 5, the library ceiling 5, objectives and wrap-up 5 — and 20 optional minutes
# in two sections, marked in their headings: ballot and any 12, block scans 8. Then lab 04a (75 min:
# a butterfly all-reduce with `shfl_xor_sync` and a warp-shuffle block scan) · prerequisites: lessons 01–04 (warps and
# active lanes, divergence, sectors, shared memory, barriers and banks).*

# %%
from gpucourse.measure import runtime

runtime.banner()

# %% [markdown]
# ## Objectives
# By the end of this lesson you can:
# 1. count the warp issues and idle lanes of a shared-memory tree reduction for interleaved and
#    sequential addressing (47 against 12 for a 256-thread block), and say which version has bank
#    conflicts;
# 2. write a warp sum with `shfl_down_sync` and say why it needs no barrier and no shared memory;
# 3. *(optional section)* use `ballot_sync`/`any_sync` to turn 32 per-lane decisions into one
#    warp-uniform branch and one atomic, and read in the SASS that the compiler already does the
#    atomic half for a same-address add;
# 4. *(optional section)* count the adds and steps of the Hillis–Steele and Blelloch scans and say when
#    each wins;
# 5. say why the last rung — few blocks, many elements per thread, four partial sums — keeps four
#    loads in flight per thread where the tree rungs keep one or two, and read a library's sum
#    (`cupy.sum`, `torch.sum`, CuPy's `ReductionKernel`) as the ceiling of your own kernels, measured
#    in the same run.

# %% [markdown]
# ## A tree in shared memory
#
# A block of B threads loads B numbers into shared memory and adds them in log₂B steps: at each
# step half of the remaining values are added into the other half, with a `syncthreads` between
# steps. Every version below does the same B − 1 adds; they differ in **which threads** do them,
# and therefore in how many warps must issue each step and how the warps hit the banks.
#
# <details><summary>Description of the picture</summary>
#
# Two trees over 16 shared-memory slots, one row per step (4 steps). Left,
# interleaved addressing: at step 1 slots 0, 2, 4, … receive their right neighbour, at step 2 slots
# 0, 4, 8, 12, and so on; the grey bands behind each row show that every one of the four 4-lane
# "warps" has an adder in the first two steps. Right, sequential addressing: at step 1 slots 0–7
# receive slots 8–15, then 0–3 receive 4–7, and so on; the adders are packed into the first warps,
# so 2, 1, 1, 1 warps issue the steps. Each arrow goes from the slot read to the slot written.
#
# </details>

# %%
from gpucourse.lessons import reductions

reductions.tree_picture(block=16, warp_lanes=4)

# %% [markdown]
# The first version, exactly as the course runs it (the block size is a compile-time constant, so a
# small factory builds the kernel for each block size). Thread `tid` adds when `tid % (2*s) == 0`:

# %%
import inspect

from gpucourse.lessons.reductions import kernels

print(inspect.getsource(kernels.interleaved_kernel))

# %% [markdown]
# The sequential version changes two lines: the stride starts at B/2 and shrinks, and the first `s`
# threads add (`if tid < s: sdata[tid] += sdata[tid + s]`). Between them sits Harris's second
# version, **strided index**: it keeps the interleaved pairs but lets the first threads do the work
# (`index = 2 * s * tid`), so a warp's lanes touch words 0, 2s, 4s, … Read it before you predict:

# %%
print(inspect.getsource(kernels.strided_index_kernel))

# %% [markdown]
# ### Predict
# For one block of 256 threads (8 warps): how many **warp issues** does the add line cost in the
# interleaved kernel, and in the sequential one? (A warp issues the add at a step if at least one
# of its lanes adds.) And what is the worst **bank conflict** of the strided-index kernel?

# %%
prediction_interleaved_add_issues = ...  # per block of 256
prediction_sequential_add_issues = ...
prediction_strided_index_max_ways = ...

# %% [markdown]
# The microscope runs each version on 1,000 numbers (a ragged size: the last block is partly
# empty, its missing elements load as 0) and counts, per version: the warp issues of the add and
# the lanes that ride along idle, the worst bank conflict, the 32-byte sectors its loads fetch,
# the barriers each warp crosses, and the **warp line issues** of the whole kernel: every executed
# source line of every warp, counted once per warp that runs it. A line is not a machine instruction
# (Nsight Compute's *Instructions Executed* counts SASS, several per line), so compare the rungs with
# each other, not with a profiler. These are counts, exact in both modes, not timings.

# %%
counts = reductions.counts_table(n=1000, block=256)
counts[["variant", "blocks", "loads per thread (most)", "warp line issues", "add issues",
        "active lanes per add issue", "idle lanes in adds", "max bank ways", "load sectors", "barriers per warp",
        "atomics", "launches to finish", "correct"]]

# %% [markdown]
# <details><summary>Description of the picture</summary>
#
# Three bar charts side by side, one bar per version (interleaved, strided index,
# sequential, first add, warp shuffle, atomic, grid stride). Left: lanes in the add's warp issues, stacked as
# active and idle — interleaved has a tall idle part, the shuffle versions none. Middle: the worst
# bank-conflict ways — 8 for strided index, 1 for every other version. Right: warp line issues of
# the whole first pass, highest for strided index and lowest for the grid-stride version, then the two
# shuffle versions.
#
# </details>

# %%
reductions.counts_figure(n=1000, block=256)

# %%
from gpucourse.lessons.reductions import model
from gpucourse.viz import predictions

per_block = counts.set_index("variant")
predictions.read_back(
    {"interleaved": prediction_interleaved_add_issues, "sequential": prediction_sequential_add_issues,
     "strided-index ways": prediction_strided_index_max_ways},
    {"interleaved": model.add_warp_issues(256, "interleaved"), "sequential": model.add_warp_issues(256, "sequential"),
     "strided-index ways": model.strided_index_max_ways(256)},
    counted="the microscope counted " + ", ".join(
        f"{v}: {per_block.loc[v, 'add issues'] // per_block.loc[v, 'blocks']} add issues a block"
        for v in ("interleaved", "sequential")) + f", {per_block.loc['strided index', 'max bank ways']}-way at worst")

# %% [markdown]
# The strided-index rung in Nsight Compute's words: shared-memory wavefronts per instruction is the
# average bank-conflict degree, and the microscope's count sits beside what Nsight Compute measured
# for the same kernel on the course's recordings (256 blocks there, 2 here: counts per warp;
# recorded on that GPU, not on this machine).

# %%
from gpucourse.measure import ncu

ncu.beside_recorded(reductions.trace_reduction("strided index", n=512)[0].profile(), "reduce_strided_index B=256",
                    rows="shared")

# %% [markdown]
# ### What happened
# * **Interleaved** (47 add issues per block of 256, 4 blocks here: 188). For s = 1 … 16 every warp
#   holds at least one adder, so all 8 warps issue the add while most of their lanes sit idle
#   (16, 8, 4, 2, 1 active lanes of 32): the same divergence as lesson 02, inside a loop. The `%`
#   is also an integer division, which costs many instructions on a GPU.
# * **Strided index** packs the adders into the first warps (12 add issues, like sequential) but its
#   lanes read words 0, 2s, 4s, …: at 256 threads up to **8 lanes share a bank** (lesson 04 part B).
# * **Sequential** addressing: adders packed *and* consecutive words: 12 add issues, no conflict.
# * **First add during load**: each thread adds two elements as it loads them, so half as many
#   blocks run the same tree: every count per element halves.
# * The model behind these numbers (warps with an adder at each step, `gpucourse.lessons.reductions.model`)
#   for every block size; the dashed lines are the idle lanes.
#
# <details><summary>Description of the picture</summary>
#
# Two line charts on log–log axes against the block size (32 to 1,024 threads).
# Left: warp issues of the tree's add per block, interleaved far above sequential (47 against 12 at
# 256), with their idle lanes as dashed lines (interleaved's grow with the block, sequential's stay
# at 129). Right: adds per block of a serial scan, Hillis–Steele and Blelloch (Blelloch about twice
# the serial scan, Hillis–Steele growing faster), and the steps of the two tree scans, dotted.
#
# </details>

# %%
reductions.model_figure()

# %% [markdown]
# <details><summary>Description of the picture</summary>
#
# A bar chart for the chosen version: for each step of the tree (first pass,
# all blocks), the lanes of the add's warp issues, stacked as active (solid) and idle (hatched).
# The title gives the add issues, the worst bank conflict and whether the sum was right.
#
# </details>
#
# Explore: pick a version, a ragged n and a block size; the microscope re-runs that kernel and
# draws its add, step by step. Look for the step where the interleaved kernel stops paying for
# idle lanes, and try block 32 (a single warp: what is left to gain?).

# %%
reductions.reduction_explorer()

# %% [markdown]
# ## The last 32: warp shuffles
#
# Once 32 values are left, one warp holds them all, and the lanes of a warp can read each other's
# **registers** directly: `cuda.shfl_down_sync(mask, v, offset)` returns the `v` of lane
# `lane + offset` (its own `v` beyond lane 31). Five shuffles (offsets 16, 8, 4, 2, 1) leave the
# warp's sum in lane 0, with no shared memory and **no barrier**: the shuffle itself exchanges the
# values of the lanes named in `mask`, all 32 here, which must all reach it. The `warp shuffle`
# version sums every warp this way, lets lane 0 of each warp write one value to shared memory, and
# after one `syncthreads` warp 0 shuffles the warps' sums:

# %%
print(inspect.getsource(kernels.warp_shuffle_kernel))

# %% [markdown]
# In the table above: 90 shuffle issues for 2 blocks, all 32 lanes busy in every one, one barrier
# per warp instead of nine, and the fewest warp line issues of the tree rungs. (A warp sum written with
# shared memory instead would need `syncwarp()` between its steps since Volta: the lanes of a warp
# are no longer guaranteed to run in lockstep — lab 04a makes a missing one fail.)
#
# ## The last step across blocks: atomics
#
# Each block ends with one partial sum. Either a **second launch** reduces the partial sums (the
# ladder does this until one value is left: "launches to finish" above), or thread 0 of every
# block adds its sum into the result with `cuda.atomic.add(out, 0, v)`: one launch in all. The
# atomics of different blocks land in an unknown order, so the float32 result can differ in its last
# bits from run to run; for sums that must be bit-reproducible, keep the second pass.
#
# ## Many elements per thread: the last rung
#
# Every rung so far launches one block per 256–512 elements: 131,072 blocks for 2²⁶ numbers, each
# thread loading one or two of them and then waiting through the tree. On the course's H200
# recording (`data/reference/nvidia-h200/quick/reductions.sum.csv`, 2²⁴ float32) those rungs ran at
# 498 (interleaved) to 1,728 GB/s (warp shuffle): **12–40 % of the 4,271 GB/s copy ceiling**, 3.5×
# from the first rung to the best. Harris's kernel 7 lets each thread walk the array with a
# **grid-sized stride** into one running sum before the tree; a second launch sums the blocks'
# results. The course's last rung keeps his grid stride and adds three changes of its own: exactly the
# blocks the GPU holds at once (132 × 8 blocks of 256 on an H200), **four independent partial sums**
# per thread, and one atomic per block instead of the second launch. Its block sum is the
# warp-shuffle rung's:

# %%
print(inspect.getsource(kernels.grid_stride_kernel))

# %% [markdown]
# Why it wins is **Little's law**: the bandwidth a GPU reaches is the bytes it has in flight divided
# by the memory's latency. A thread's four loads in the loop do not wait for each other (nothing uses
# them before all four are issued), so each thread keeps 16 bytes on their way; with every resident thread doing that, an H200 has 4.3 MB in flight, more than its
# bandwidth × latency needs (3.5 MB) at its 4,271 GB/s copy ceiling and the 823 ns below: a margin of
# only 1.2×; a loaded latency above about 1.2 µs would drop the rung below 85 % of that rate. The tree rungs
# keep one or two loads in flight per thread, and only for a moment: a block loads once, then spends
# the rest of its life in barriers and shuffles with nothing
# in flight, and the SM must retire it and start the next (**block turnover**). The latency is lessons
# 03 and 05's: 823 ns on an H200, lesson 03's one-element copy's reads in flight ÷ its *read* rate, so
# a one-load rung's bound is that copy's read rate. The table is the model's bound per rung, for the
# recorded GPU; lesson 05 measures the same law on a copy.

# %%
reductions.in_flight_model()

# %% [markdown]
# Under the microscope the last rung is one block here (1,000 numbers, 256 threads): each thread loads
# 3 or 4 elements ("loads per thread" in the table above), one atomic for the block ("atomics"), and the sum is right
# for a size that is not a multiple of the grid. On a GPU the same kernel takes 248 elements per thread at
# 2²⁶, and the chart below measures what that buys. The H200 recording predates this rung: without a
# GPU the chart draws only its bound, labelled *model, no recording*.
#
# ## One decision per warp: ballot and any *(optional, 12 min)*
#
# Counting the elements above a threshold, the obvious kernel lets every passing lane do its own
# `atomic.add(count, 0, 1)`: up to 32 atomics per warp **in the source**, all on one address, inside
# a divergent branch. A **vote** gathers the warp's 32 predicates into one 32-bit mask:
# `ballot_sync(mask, p)`; lane 0 adds its popcount, one atomic per warp. `any_sync` makes the branch
# **warp-uniform**: a warp whose lanes have nothing to count skips the whole block as one, so no warp
# diverges on it.

# %%
print(inspect.getsource(kernels.count_above_per_lane))
print(inspect.getsource(kernels.count_above_ballot))

# %% [markdown]
# ### Predict
# 512 random numbers in [0, 1), threshold 0.9: about how many atomic updates does each **source**
# ask for (count the lanes that run the atomic)? And on a GPU, how many atomic instructions reach
# the L2 for the per-lane kernel?

# %%
prediction_atomics_per_lane = ...
prediction_atomics_ballot = ...
prediction_atomics_per_lane_on_a_gpu = ...

# %%
atomics = reductions.ballot_counts(n=512, threshold=0.9).set_index("version")
atomics

# %% [markdown]
# The microscope counts what the **source** asks for: about 10 % of 512 lanes pass, so about 50
# lane updates on one word in the per-lane kernel, against one per warp that has a passing lane (at
# most 16) with the ballot. The count is the same.
#
# That is not what a GPU runs. The compiler sees a same-address add and aggregates it itself. Below,
# this machine compiles the kernels with numba-cuda to PTX and, where the CUDA wheels' `ptxas` and a
# `cuobjdump` are installed, assembles them for sm_90 (Hopper) and counts the SASS instructions that
# matter (in the code, not executions); no GPU is needed. Two more kernels show where the compiler
# stops: `compact_above_per_lane` (each lane needs the slot `atomic.add` returns) and
# `histogram_per_lane` (each lane adds to its own bin).

# %%
from gpucourse.lessons.reductions import compiled

print(inspect.getsource(kernels.compact_above_per_lane))
print(inspect.getsource(kernels.histogram_per_lane))
as_compiled = compiled.atomics_as_compiled()
print(as_compiled.attrs["source"])
for name, lines in as_compiled.attrs["sass"].items():
    print(f"{name}: " + " | ".join(lines))
as_compiled

# %%
predictions.read_back(
    {"per lane": prediction_atomics_per_lane, "ballot": prediction_atomics_ballot,
     "per lane on a GPU": prediction_atomics_per_lane_on_a_gpu},
    {"per lane": f"about {512 * (1 - 0.9):.0f} (10 % of 512)", "ballot": f"at most {512 // 32} (one a warp)",
     "per lane on a GPU": "as many as the ballot: ptxas aggregates a same-address add (the SASS above)"},
    counted=f"the microscope counted {atomics.loc['per lane', 'atomic lanes']} and "
            f"{atomics.loc['ballot', 'atomic lanes']} atomic lanes, exactly, in both modes")

# %% [markdown]
# Read the per-lane kernel's SASS: `VOTEU.ANY` (which lanes are here), `UFLO` (the lowest of them
# leads), `POPC` (how many), then one `@P0 REDG` issued by the leader alone with that count. That is
# the ballot kernel, written by `ptxas`: one atomic per warp. (Without the tools, the table shows only
# the PTX, one `atom.global.add` in each kernel, which says nothing about lanes.) Nsight Compute agrees
# on the course's recordings: with half of the lanes passing, both kernels executed 8 global atomic
# instructions per block of 256 threads, one per warp (2,048 for 256 blocks), on an H100 and an H200.
# The microscope's 16 lane updates per warp have no ncu counter:

# %%
import numpy as np

from gpucourse.microscope import trace

half = (np.arange(512) % 4).astype(np.float32)  # the recording's input: values 0–3, threshold 1.5
ncu.beside_recorded(trace(kernels.count_above_per_lane, 2, 256, half, np.float32(1.5), np.zeros(1, np.int32)).profile(),
                    "count_above_per_lane", rows=["smsp__sass_inst_executed_op_global_atom.sum + "
                                                  "smsp__sass_inst_executed_op_global_red.sum",
                                                  "(no ncu counter) global atomic updates by lanes"])

# %% [markdown]
# So why write the vote yourself?
# * **Warp-uniform control flow.** `any_sync`/`all_sync` let a whole warp take or skip a block of
#   work as one; the compiler does not turn a data-dependent `if` into that.
# * **Different addresses.** The histogram's SASS has no vote: one `REDG` whose lanes each update
#   their own bin, up to 32 updates for the L2. Group equal bins with `match_any_sync`, or privatise
#   the histogram in shared memory (lesson 06).
# * **A guarantee.** Aggregation is an optimisation the compiler makes "in many cases" (NVIDIA, *CUDA
#   Pro Tip: Optimized Filtering with Warp-Aggregated Atomics*, 2017), not a language rule; a ballot
#   says it in the source, where the microscope and a reader can see it. Even the compaction above,
#   where every lane needs its own slot, was aggregated by this `ptxas`: a vote, one `ATOMG`, then a
#   `SHFL` broadcasts the base and a `POPC` of the lower lanes gives each lane its offset — the
#   ballot-and-popcount pattern you would write by hand.
#
# ## Block scans: work against steps *(optional, 8 min)*
#
# A **prefix sum** (scan) writes, for every position, the sum of everything up to it. Two classic
# block scans:
# * **Hillis–Steele**: at offset d = 1, 2, 4, … every thread adds the value d places back (double
#   buffered): log₂B steps, but B·log₂B − (B − 1) adds — more **work** than a serial scan's B − 1.
# * **Blelloch**: an up-sweep builds a tree of partial sums, a down-sweep pushes the prefixes back
#   down: 2(B − 1) adds, **work-efficient**, but 2·log₂B steps.
#
# ### Predict
# For one block of 64: how many adds does each scan do, and how many barriers does each warp cross?

# %%
prediction_hillis_steele_adds = ...
prediction_blelloch_adds = ...

# %% [markdown]
# <details><summary>Description of the picture</summary>
#
# Two bar charts. Left: adds per block of 64, counted by the microscope — 321 for
# Hillis–Steele and 126 for Blelloch — each with the model's value as a black tick at the same
# height. Right: barriers each warp crosses — 7 for Hillis–Steele, 13 for Blelloch.
#
# </details>

# %%
reductions.scan_figure(block=64)

# %%
scans = reductions.scan_counts(block=64).set_index("scan")
scans

# %%
predictions.read_back(
    {"Hillis-Steele": prediction_hillis_steele_adds, "Blelloch": prediction_blelloch_adds},
    {"Hillis-Steele": model.hillis_steele_adds(64), "Blelloch": model.blelloch_adds(64)},
    counted="the microscope counted " + ", ".join(
        f"{scan}: {scans.loc[scan, 'adds per block (counted)']:.0f}" for scan in ("Hillis-Steele", "Blelloch")))

# %% [markdown]
# Hillis–Steele does 2.5× the adds in about half the steps. It wins when there are about as many
# threads as values: each thread's extra adds then cost nothing (the thread would idle otherwise), and
# the number of steps — the latency — decides, as in a warp scan (32 values, 32 lanes, 5 shuffles).
# Blelloch wins when the values far outnumber the threads, so the total work decides. The microscope
# also finds a bank conflict in Blelloch's up-sweep: 2-way at B = 64, and it grows with the block
# (4-way at 128, 8-way at 256: its strides keep doubling, like the strided-index reduction's); GPU
# Gems 3, ch. 39, pads the array by one word every 32 to remove it.
#
# ## The ceiling: the libraries
#
# Reductions are a solved problem in libraries: CUB (behind `cupy.sum`), `torch.sum`, and CuPy's
# `ReductionKernel`, where you write only the map and combine expressions and CuPy generates the
# kernel, with launch parameters from a fixed heuristic (it does not autotune; autotuning in CuPy is
# opt-in, through `cupyx.optimizing`):

# %%
print(kernels.REDUCTION_KERNEL_SOURCE)

# %% [markdown]
# On a GPU, the chart below times every version of the ladder and the three library sums **in the
# same run** on 2²⁶ float32 numbers (results checked against a float64 sum first, then events,
# warm-up, median of ≥ 10 samples); the best library is the ceiling line. 2²⁶ float32 is 256 MiB,
# four times an H200's 60 MiB L2: at 2²⁴ (64 MiB, about one L2) launches and tails show, and even
# `cupy.sum` read only 3,230 GB/s there against 4,116 at 2²⁶ on the course's H200 recordings. Where
# torch is not installed, `torch.sum` is skipped and the caption says so. Without a GPU the chart shows
# a recording made on a real GPU if one exists (its caption names its size), and otherwise the
# microscope's warp line issues per element, saying so (source lines, not a speed ranking): CuPy and
# torch do not run their GPU sums here.
#
# <details><summary>Description of the picture</summary>
#
# With a GPU or a recording, a bar chart of bandwidth in GB/s per version and
# per library, with a dashed line at the best library. Without either, a bar chart of warp line
# issues per element for each version, titled "No GPU here".
#
# </details>

# %%
reductions.ladder_figure()

# %% [markdown]
# Bad input is refused before anything launches:

# %%
import numpy as np

from gpucourse.errors import InvalidConfig

for bad in (lambda: reductions.reduce_sum(np.ones((4, 4), dtype=np.float32)),
            lambda: reductions.reduce_sum(np.ones(8, dtype=np.float32), block=100),
            lambda: reductions.block_scan(np.ones(8, dtype=np.float32), "Kogge-Stone")):
    try:
        bad()
    except InvalidConfig as error:
        print("refused:", error)

# %% [markdown]
# ## Explain
#
# * **The ladder** follows Mark Harris, *Optimizing Parallel Reduction in CUDA* (NVIDIA, 2007):
#   interleaved addressing with divergent branching, then strided index (bank conflicts), then
#   sequential addressing, then the first add during load, then unrolling the last warp, and his
#   kernel 7, many elements per thread (grid stride, one running sum, a second launch; the four partial
#   sums, the resident grid and the atomic of the course's last rung are its own). On the G80 of 2007 each step was worth 1.4–2.3×. On an H200
#   the gaps are as large: the course's recording (`data/reference/nvidia-h200/quick/reductions.sum.csv`,
#   2²⁴ float32) steps by 1.07–1.69× from rung to rung, 3.5× from the first to the warp-shuffle rung,
#   and every tree rung sits at 12–40 % of the copy ceiling — none is limited by DRAM bandwidth; at
#   2²⁶ the best tree rung read 2,088 GB/s against `cupy.sum`'s 4,116, half of it
#   (`data/reference/nvidia-h200/expectations.json`). They are limited by what they keep in flight;
#   the grid-stride rung is the course's prediction that fixes it (≥ 0.85 of `cupy.sum`, asserted by
#   `tests/test_gpu_reductions.py` on the next GPU run, not yet recorded).
# * **Shuffles and votes.** CUDA C++ Programming Guide, § "Warp Shuffle Functions" and § "Warp Vote
#   Functions": `__shfl_down_sync`, `__ballot_sync`, `__any_sync` exchange or combine a value among
#   the lanes named in the mask, which must all execute the same intrinsic; since Volta (cc 7.0) the
#   lanes of a warp are scheduled independently, which is why the `_sync` variants with a mask
#   replaced the old ones, and why a warp-level step that goes through shared memory needs
#   `__syncwarp()`.
# * **Atomics.** `atomicAdd` on global memory is performed at the L2; many updates of one address are
#   serialised there, which is why one update per warp or per block beats one per lane. For a
#   same-address add the compiler already issues one per warp (the SASS above; NVIDIA's *CUDA Pro Tip:
#   Optimized Filtering with Warp-Aggregated Atomics*, 2017); lanes with different addresses it cannot
#   merge.
# * **Scans.** Hillis and Steele, *Data parallel algorithms* (CACM, 1986); Blelloch, *Prefix sums and
#   their applications* (1990); Harris, Sengupta and Owens, *Parallel Prefix Sum (Scan) with CUDA*,
#   GPU Gems 3, ch. 39 (2007), which also gives the bank-conflict padding.
#
# ### From the field
# One of the course's source texts gives the warp-shuffle sum and a cooperative-groups block sum
# ending in `atomicAdd` — the `atomic` rung above — and says the shuffle is "faster than a
# shared-memory reduction and simpler to write". Simpler, yes, and faster on the H200 recording
# (1,728 against 1,378 GB/s for the first add through shared memory), but both one-block-per-512
# rungs stay under half of the ceiling: the shuffle saves instructions, not bytes in flight. The
# ladder chart measures it beside the libraries instead of asserting it. How a profiler shows it: Nsight Compute's
# *Warp State Statistics* count stalls at barriers (`stall_barrier`), its *Source* page shows
# each line's executed instructions and the average threads executed per instruction (the idle
# lanes above),
# and *Memory Workload Analysis* the shared-memory bank conflicts.

# %% [markdown]
# ## Key points
# * A tree reduction does B − 1 adds whatever its indexing; sequential addressing keeps the adders
#   packed in few warps and the words in distinct banks (12 warp issues against 47 per 256 threads).
# * Inside a warp, shuffles replace shared memory and barriers; votes (`ballot_sync`, `any_sync`)
#   turn 32 decisions into one warp-uniform branch and one atomic. The compiler already aggregates a
#   same-address atomic add (read the SASS); the microscope counts the source's atomics.
# * Scans trade work for steps: Hillis–Steele B·log₂B adds in log₂B steps, Blelloch 2(B − 1) adds in
#   2·log₂B steps; and the library's sum, measured in the same run, is the ceiling to compare with.
# * The tree rungs reach 12–40 % of an H200's ceiling: one or two loads in flight per thread and a
#   block's life spent in barriers. Few blocks, many elements per thread and independent partial sums
#   keep the memory busy (Little's law, lesson 05).
#
# **Next:** [lab 04a](../labs/lab04a_reductions/lab04a_reductions.ipynb) — a warp sum through shared
# memory, a butterfly all-reduce with `shfl_xor_sync` and a warp-shuffle block scan, graded on ragged
# sizes and by the microscope; then lesson 05, occupancy.
