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
# # 01 · Warps and SIMT
#
# **In 15 minutes you will predict how many warps any block shape makes, and why a block of
# 33 threads costs what a block of 64 does.**
#
# *Teaching 10 min · exercises 5 min · prerequisites: lesson 00; lesson 00a if you have never written a kernel.*
#
# ## Objectives
# By the end you can:
# 1. compute the warp and lane of any thread in a 1-, 2- or 3-D block;
# 2. predict the number of warps a block occupies (⌈threads / 32⌉);
# 3. explain from the lane map why the x-dimension of a block should be a multiple of 32;
# 4. predict the shape of the "time vs threads per block" curve of a compute-bound kernel.

# %%
from gpucourse.measure import runtime

runtime.banner()

# %% [markdown]
# ## Threads are issued 32 at a time
#
# You write a kernel for *one* thread. The hardware never runs one thread: an SM's scheduler
# picks a **warp** — 32 threads with consecutive numbers — and issues one instruction for all
# 32 **lanes** at once (Single Instruction, Multiple Threads). The threads of a block are
# numbered x-fastest: `linear = x + y·Bx + z·Bx·By`; warp `linear // 32` holds lanes
# `linear % 32`. Nothing else decides it: not your data, not your `if`s.
#
# ### Predict
# A block is 12 × 8 threads. **Before you look at the picture below:** which threads share
# warp 1? Does warp 1 hold whole rows of the block? Write your answer down.

# %%
prediction_warp_1 = "..."  # your prediction, in words

# %% [markdown]
# Now check: the picture is that 12 × 8 block. Each cell is a thread, labelled `warp:lane`.
#
# <details><summary>Description of the picture</summary>
#
# A grid of 12 columns (threadIdx.x 0–11) by 8 rows (threadIdx.y 0–7), each cell labelled warp:lane
# and coloured by its warp. Warp 0 fills rows 0 and 1 and the first 8 cells of row 2; warp 1 the
# last 4 cells of row 2, rows 3 and 4 and the first 4 cells of row 5; warp 2 the rest of row 5 and
# rows 6 and 7. No warp holds only whole rows.
#
# </details>

# %%
from gpucourse.lessons import warps

warps.lane_map_figure(block_x=12, block_y=8)

# %%
from gpucourse.viz import predictions

warp_1 = warps.model.lane_map((12, 8)).query("warp == 1").groupby("ty").tx.agg(["min", "max"])
predictions.read_back(
    prediction_warp_1,
    "threads " + ", ".join(f"x {row['min']}–{row['max']} of row {ty}" for ty, row in warp_1.iterrows())
    + (": not whole rows only" if (warp_1["max"] - warp_1["min"] < 12 - 1).any() else ": whole rows"),
    counted="the picture above is that rule, drawn for every thread (exact, in both modes)")

# %% [markdown]
# Now try block shapes. Watch what happens when `x` is not a multiple of 32 (say 12, or 48):
# one warp spans parts of several rows (up to four when x = 12), so with 2-D data it reads
# several separate rows of memory.

# %%
import ipywidgets as w

from gpucourse.viz.widgets import LiveChart

LiveChart(
    {
        "block_x": w.IntSlider(value=12, min=1, max=64, description="block x"),
        "block_y": w.IntSlider(value=8, min=1, max=16, description="block y"),
    },
    compute=warps.lane_map_figure,
    description="Block shape → lane map (each cell is one thread, labelled warp:lane).",
)

# %% [markdown]
# ## What a partial warp costs
#
# A block of 33 threads is two warps: the second has one busy lane and 31 idle ones, but it
# is still issued, scheduled and counted as a whole warp. For a compute-bound kernel the
# cost unit is the **warp**, so time should climb in steps at 32, 64, 96…
#
# ### Predict
# A compute-bound kernel runs 16 blocks per SM. Sketch time against threads per block from
# 1 to 128. Where are the steps? Is 31 threads cheaper than 32?

# %%
prediction_time_33_vs_64 = "..."  # e.g. "33 threads cost about the same as 64"

# %% [markdown]
# The chart measures exactly that on a GPU (each point by the course's harness: events,
# warm-up, median of ≥ 10 samples). Without a GPU it shows the recording made on a real GPU,
# or says that none exists yet; the dashed staircase is the model `⌈threads/32⌉`.

# %%
staircase = LiveChart(
    {"max_threads": w.IntSlider(value=128, min=32, max=128, step=32, description="up to")},
    compute=warps.staircase_figure,
)
staircase

# %%
predictions.read_back(
    prediction_time_33_vs_64, stands_in=staircase,
    model=f"33 threads are {warps.warps_per_block(33)} warps, the issue slots of 64 threads "
          f"({warps.warps_per_block(64)} warps): the same time; 31 threads cost what 32 do")

# %% [markdown]
# ## Explain
#
# * The CUDA C++ Programming Guide (§ "SIMT Architecture"): a multiprocessor creates, manages,
#   schedules and executes threads in groups of 32 called warps; a block is partitioned into
#   warps the same way every time, by consecutive thread index.
# * So a block's cost is counted in warps. 33 threads = 2 warps = the issue slots of 64
#   threads; the 31 idle lanes of the second warp do nothing useful.
# * The Best Practices Guide advises block sizes that are multiples of 32 for exactly this
#   reason (and 128–256 as a starting point; lesson 05 says why).
#
# ## A common case from the field
# A stencil is ported with its natural tile of 10 × 10 threads. Every block is 100 threads
# = 4 warps, the last with 4 busy lanes: 28 of 128 lane slots (22 %) are idle before any memory
# effect. If the kernel is limited by instruction issue, reshaping the tile to 32 × 4 (with a
# bounds check at the edges) recovers those slots; if it is memory-bound — most stencils are —
# the 32-wide rows help more because they coalesce (lesson 03). Nsight Compute shows the idle
# lanes as *Avg. Active Threads Per Warp* below 32, even in code without branches.
#
# ## Key points
# * A warp is 32 threads with consecutive linear index; x varies fastest.
# * A block occupies ⌈threads / 32⌉ warps; a partial warp costs a whole one.
# * Make the block's x-dimension a multiple of 32 and its size a multiple of 32.
#
# **Next:** [lab 01](../labs/lab01_warps/lab01_warps.ipynb) — global indices, bounds checks
# and warp arithmetic; then lesson 02, where lanes of one warp disagree.
