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
# # 00 · Start here: measuring GPU code
#
# **In 20 minutes you will time a GPU kernel correctly, and know the two numbers every
# later chart is compared with: this device's copy bandwidth and matmul rate.**
#
# *Teaching 15 min · exercises 5 min · prerequisites: Python and NumPy; no CUDA needed.*
#
# ## Objectives
# By the end you can:
# 1. name the levels of the execution hierarchy (grid, block, warp, thread) and of the memory
#    hierarchy (registers, shared memory/L1, L2, HBM);
# 2. explain why timing a kernel launch with a wall clock and no synchronisation is wrong,
#    and say what the course's harness does instead;
# 3. read a roofline: which ceiling limits a kernel of a given arithmetic intensity;
# 4. read any chart in the course: where its numbers came from (its caption).
#
# This course runs with or without an NVIDIA GPU. The box below says which mode you are in.

# %%
from gpucourse.measure import runtime

runtime.banner()

# %% [markdown]
# ## The execution hierarchy
#
# A kernel launch creates a **grid** of **blocks**; every block runs on one **SM**
# (streaming multiprocessor), and the SM cuts each block into **warps** of 32 threads that
# execute one instruction at a time for all 32 **lanes**. An H100 SXM5 has 132 SMs and the H100
# PCIe 114 (NVIDIA's Hopper whitepaper, "NVIDIA H100 Tensor Core GPU Architecture"); on a GPU the
# banner above shows the count the device reports (`runtime.device().sm_count`).
#
# <details><summary>Description of the picture</summary>
#
# A 3 × 3 grid of blocks; one block expanded into four warps of 32 threads; one warp expanded into
# lanes 0–31; blocks flow to an SM with four warp schedulers, registers and shared memory.
#
# </details>

# %%
from gpucourse.viz import diagrams

diagrams.execution_hierarchy()

# %% [markdown]
# ## The memory hierarchy
#
# Data lives at four levels. Each step outwards is larger, shared by more threads, and
# slower. Most of this course is about keeping data in the inner levels or, when it must
# come from HBM, fetching it in the shape the hardware likes.
#
# <details><summary>Description of the picture</summary>
#
# Nested boxes from registers (private to a thread) through shared memory/L1 (a 256 KB store per SM,
# of which up to 228 KB can be shared memory) and L2 (whole GPU: 50 MB on an H100 SXM5 by the Hopper
# whitepaper, or the size this GPU reports) to HBM (80–141 GB, 3.35–4.8 TB/s by the datasheet).
#
# </details>

# %%
diagrams.memory_hierarchy()

# %% [markdown]
# ## Launches are asynchronous
#
# `kernel[grid, block](...)` *queues* the kernel and returns immediately; the GPU runs it
# later. A wall clock around the launch line measures the queueing, not the kernel. This is
# how "my kernel takes 2 µs" and reports of speed-ups of tens of thousands of times are born.
#
# ### Predict
# A kernel runs for about 11 ms (this lesson's spin kernel on an H200, the course's recording
# `measuring.async_pitfall`). What does a wall clock around the launch line alone report?
# And with `cuda.synchronize()` after the launch?

# %%
prediction_launch_only_ms = ...  # your guess, in ms

# %% [markdown]
# The chart times the same work two or three ways. On a GPU it is measured now; without one it is
# the recording from a real GPU, or — when none exists yet — the same trap shown with a CPU
# thread standing in for the GPU, labelled as such.
#
# <details><summary>Description of the picture</summary>
#
# A bar chart with a logarithmic time axis in milliseconds, one labelled bar per way of timing the
# same work. The bar for the wall clock around the launch line alone is a small fraction of the bar
# for the wall clock that also waits for the work to finish (and, on a GPU, of the bar for the CUDA
# events); each bar is labelled with its time.
#
# </details>

# %%
from gpucourse.lessons import measuring
from gpucourse.viz import predictions

predictions.mark(measuring.async_pitfall_figure(), prediction_launch_only_ms, unit="ms")  # your guess on the chart

# %% [markdown]
# ## How the course measures: one harness
#
# Every timing in the course comes from `gpucourse.measure.harness.measure`:
# 1. it runs the kernel once untimed and **checks the result** (a fast wrong kernel is never timed);
# 2. warms up for ~25 ms of GPU time;
# 3. times with **CUDA events** on the GPU's stream (kernels under ~1 ms are timed as a batch of
#    up to 256 launches between one pair of events, reported per launch, and the result says so);
# 4. states whether the L2 cache was **cold** (flushed) or **warm**;
# 5. takes at least 10 samples and 0.5 s of GPU time (or 300 samples, whichever comes first; a
#    chart that a control redraws takes 30 ms) and reports the **median, IQR, minimum** and the
#    number of samples;
# 6. turns bytes and FLOPs *that we counted* into GB/s and TFLOP/s, and compares them with
#    the device's **measured** ceiling and its datasheet;
# 7. records **provenance**: device, driver, CUDA and library versions, date, command.
#
# In simulator mode it measures nothing and says so: a simulator's wall time is not GPU
# performance.

# %%
from gpucourse.measure.harness import measure

if runtime.is_gpu():
    xp = runtime.xp
    a = xp.random.random(1 << 24, dtype=xp.float32)  # 64 MiB of fresh random input
    b = xp.full_like(a, xp.nan)  # poisoned: an element the copy misses shows up as NaN

    def copy():
        b[...] = a

    result = measure(copy, check=lambda: bool((b == a).all()), bytes_moved=2 * a.nbytes, label="64 MiB copy")
else:
    result = measure(lambda: None, label="64 MiB copy")  # simulator mode: measures nothing, says so
print(result.summary())

# %% [markdown]
# ## The two ceilings: bandwidth and compute
#
# A kernel that does *I* FLOPs per byte it moves can run no faster than
# `min(peak FLOP/s, I × bandwidth)`: the **roofline**. Below the ridge point a kernel is
# memory-bound; above it, compute-bound. On a GPU the chart draws this device's *measured*
# ceilings (a large device-to-device copy; a large library matmul) beside the datasheet's.
# Measured ceilings are lower than the datasheet: published STREAM-style results put a copy at
# roughly 80–90 % of it (Azure's benchmarking guide: 4.01 TB/s, 83.5 %, on an H200); the chart
# shows this device's own figure. Without a GPU, the bf16 chart draws a roof built from published
# H200 figures instead: gpu-benches' best streaming bandwidth and the ML Engineering book's maximum
# achievable bf16 matmul (the caption names both; not your GPU). The tensor-core roof is bf16 from
# Ampere (cc 8.0) on; a Turing GPU such as a T4 (cc 7.5) has fp16 tensor cores but no bf16 ones (a
# bf16 matmul runs on its CUDA cores), so there the chart draws fp16. On a GPU only the precision
# you pick is measured (each ceiling once per machine, then cached).
#
# ### Predict
# A vector add `c = a + b` in fp32 does 1 FLOP per 12 bytes. Which ceiling limits it?

# %%
prediction_vector_add_limited_by = "..."  # "bandwidth" or "compute"

# %%
import ipywidgets as w

from gpucourse.viz.widgets import LiveChart

choices, why = measuring.roof_precisions()  # this GPU's tensor-core format first: bf16, or fp16 before cc 8.0
print(f"tensor-core roof: {choices[0]} ({why})")
roofline = LiveChart({"precision": w.Dropdown(options=choices, value=choices[0], description="matmul")},
                     compute=measuring.roofline_figure)
roofline

# %%
predictions.read_back(prediction_vector_add_limited_by, stands_in=roofline,
                      model="bandwidth: at 1 FLOP per 12 bytes it sits far left of the ridge point")

# %% [markdown]
# ## Reading the course's charts
#
# Every chart's caption says where its numbers came from:
# * **Measured now on …** — this session, on this GPU, by the harness;
# * **Recorded on a real GPU: … (date, file)** — from `data/reference/`, with its provenance file;
# * **Counted by the microscope** — exact counts of what the hardware would do (sectors,
#   lanes, bank conflicts), not a timing;
# * **Model** — what a hardware rule predicts; drawn dashed beside the data;
# * **No data** — nothing to show, said plainly: nothing is ever invented.
#
# Every chart has a *Show data table* button under it with the same numbers as text.
#
# ## From the field
# One of the course's sources (the "book of root causes") describes a Megatron-LM training run
# that sat idle 15 % of the time because its data loader synchronised with the GPU on every
# micro-batch; moving to asynchronous prefetching removed the gaps. The same source lists the
# usual hidden synchronisations: `.item()`, `.cpu()` or `print(tensor)` inside the training loop.
# Each one makes the CPU wait for the GPU to drain before it can queue the next launch. In a
# profiler's timeline (Nsight Systems, or `torch.profiler`) they show up as gaps between kernels
# and as `cudaDeviceSynchronize` / `cudaStreamSynchronize` calls in the CUDA API row.
#
# ## Key points
# * A launch returns before the kernel finishes: time with events (or synchronise), never
#   the launch alone.
# * One harness: check first, warm up, events, ≥ 10 samples, median and spread, provenance.
# * Compare with the *measured* ceiling of this device, and the datasheet beside it.
#
# **Next:** lesson 00a, your first kernels (skip it if you already write CUDA kernels), then lesson
# 01, warps and SIMT. There is no lab for this lesson; lab 00a follows lesson 00a.
