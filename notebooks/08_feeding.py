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
# # 08 · Feeding the GPU
#
# **A fast kernel is not a fast program. In this lesson you will draw, on a timeline, what keeps a
# GPU waiting — copies, launches, hidden synchronisations, memory round trips between small
# kernels — and predict what pinned memory, streams, CUDA graphs and fusion each buy.**
#
# *51 minutes of core — objectives and wrap-up 5, the picture 4, §1 copies 8, §2 streams 12, §4 hidden
# synchronisations 9, §5 fusion and for-each 13 — and 16 optional minutes — §3 launches and CUDA
# graphs 7, §6 the L2 9 — then the capstone lab 08 "Why is my training step slow?" (50 min; it needs the core only) ·
# prerequisites: lessons 00 (events, asynchronous launches) and 03 (bytes and bandwidth); lesson 07
# for the lab's bf16 step.* The optional sections say so in their titles: skip them in a slot of
# about 50 minutes, or leave them as reading.
#
# ## Objectives
# By the end you can:
# 1. predict the effective bandwidth of a host→device copy from its size, and say why pinned
#    memory beats pageable memory for large copies;
# 2. draw the timeline of copy → kernel → copy in chunks on two streams and say what overlaps;
# 3. *(optional §3)* say when a chain of kernels is launch-bound, and what replaying it as a CUDA
#    graph saves;
# 4. name the hidden synchronisations (`.item()`, `.cpu()`, `.tolist()`, `print(tensor)`, an `if` on
#    a device value, a copy to the device without `non_blocking=True`), find them in a profile, and
#    show on the timeline what each costs;
# 5. count the bytes an unfused elementwise chain moves against the fused kernel, and use Amdahl's
#    law to judge a claimed speed-up; tell such a chain from a step that is launch-bound because it
#    runs one small operator per tensor (the fix: a for-each operator);
# 6. *(optional §6)* predict where a kernel's bandwidth drops as its working set outgrows the L2.
#
# Without a GPU every chart below is either counted (bytes, launches), the course's recording from
# a real GPU, or a **model** you can drive — and says which. A simulator's time is never shown.

# %%
from gpucourse.measure import runtime

runtime.banner()

# %% [markdown]
# ## The picture: three engines and a host (4 min)
#
# A GPU program is a conversation between the **host** (your Python process, which issues work)
# and the device's engines: the **copy engines** move bytes over PCIe or NVLink-C2C (data-centre
# GPUs have at least one per direction: CUDA reports them as `asyncEngineCount`, and 2 or more lets
# a host→device and a device→host copy run at the same time), and the **SMs** run kernels. Each engine works through its
# queue on its own; a **stream** is an ordered queue, and work on different streams may overlap.
# The host never waits — unless something makes it.
#
# The lesson's model draws exactly this: one row per engine, one bar per operation. Its rules
# (`feeding.model`): the host pays a *launch cost* for every kernel or asynchronous copy; an
# operation starts when it is issued, its stream's previous operation has finished and its engine
# is free; a copy from **pageable** memory keeps the host waiting until it has finished; a
# synchronisation makes the host wait for everything issued so far.
#
# <details><summary>Description of the picture</summary>
#
# A timeline with four rows — host, copy engine H2D, SMs, copy engine D2H —
# and time in microseconds along the x axis. For four chunks on two streams, the host row shows
# short launch bars; the H2D row four copy bars back to back; the SMs row four kernel bars, each
# starting when its chunk has arrived; the D2H row four copy bars, each after its kernel. Copies of
# one chunk run while the SMs compute another. The title gives the total time and the share of it
# the SMs sat idle.
#
# </details>

# %%
from gpucourse.lessons import feeding

feeding.model_timeline_figure("4 chunks on 2 streams (pinned)")

# %% [markdown]
# The model's defaults, and where each comes from — none is a measurement of your machine:

# %%
import pandas as pd

pd.DataFrame([{"parameter": name, "default": getattr(feeding.DEFAULTS, name), "where it comes from": text}
              for name, text in feeding.PARAM_SOURCES.items()])

# %% [markdown]
# ## 1 · Host ↔ device copies: pinned and pageable (8 min)
#
# A copy costs a fixed latency plus bytes ÷ bandwidth, so small copies are latency-bound: a 4 KiB
# copy moves its bytes in a fraction of a microsecond and pays microseconds of setup. Two latencies
# are easy to mix up: the model's 10 µs is the device side of one copy (DMA setup, an assumption),
# while a small copy issued from Python and waited for, as the chart below times it, costs far
# more: about 70 µs for 4 KiB on the H200's recording (`feeding.copy`), Python, the driver and the
# synchronisation included. Host memory
# allocated by NumPy is **pageable**: the operating system may move it, so the driver first copies
# it into a pinned staging buffer and only then lets the copy engine read it (CUDA Runtime API,
# "API synchronization behavior"; NVIDIA's blog "How to Optimize Data Transfers in CUDA C/C++").
# **Pinned** (page-locked) memory — `cuda.pinned_array`, `torch.Tensor.pin_memory()`,
# `DataLoader(pin_memory=True)` — is read by the copy engine directly, and only pinned copies can be
# asynchronous and overlap with kernels (Programming Guide, "Overlap of Data Transfer and Kernel
# Execution").
#
# ### Predict
# At the model's defaults (latency 10 µs, pinned 25 GB/s), what effective bandwidth does a 64 KiB
# copy reach? A 64 MiB copy? (1 GB/s moves 1,000 bytes per µs.)

# %%
prediction_64kib_gbps = ...  # a number
prediction_64mib_gbps = ...

# %%
{size: round(feeding.copy_gbps(size, feeding.DEFAULTS.pinned_gbps, feeding.DEFAULTS.copy_latency_us), 2)
 for size in (64 * 2**10, 64 * 2**20)}

# %% [markdown]
# On a GPU the chart is measured now by the course's harness (result checked, events, median of
# ≥ 10 samples); without one it is the recording, or the model with its parameters in the caption.
#
# <details><summary>Description of the picture</summary>
#
# A log–log chart of effective GB/s against bytes per copy, from 4 KiB to
# 256 MiB, one line for pageable and one for pinned host memory. Both rise with size and flatten;
# the pinned line flattens higher.
#
# </details>

# %%
feeding.copy_figure()

# %%
from gpucourse.viz import predictions

predictions.read_back(
    {"64 KiB": prediction_64kib_gbps, "64 MiB": prediction_64mib_gbps},
    {f"{size >> 10} KiB" if size < 2**20 else f"{size >> 20} MiB":
     round(feeding.copy_gbps(size, feeding.DEFAULTS.pinned_gbps, feeding.DEFAULTS.copy_latency_us), 2)
     for size in (64 * 2**10, 64 * 2**20)}, unit="GB/s", stands_in="the chart above (the recording, or the model)")

# %% [markdown]
# ## 2 · Streams: overlapping copies with compute (12 min)
#
# On one stream, copy-in, kernel and copy-out run one after the other. Cut the data into chunks
# and give them to two streams, and chunk 1's copy can run while chunk 0 computes: the copy
# engines and the SMs work at the same time. It only works from pinned memory: a pageable copy
# keeps the host waiting, so nothing after it is even issued.
#
# ### Predict
# 8 MiB in, a 200 µs kernel, 8 MiB out. How much shorter is "4 chunks on 2 streams (pinned)" than
# "one stream, no chunks" at the defaults? And with pageable memory?

# %%
prediction_overlap_saving_us = ...

# %% [markdown]
# The explorer is the model: pick a scenario and move the knobs (launch cost, pinned bandwidth,
# kernel time, data size). The title gives the total and the SMs' idle share.
#
# <details><summary>Description of the picture</summary>
#
# The same four-row timeline as above, redrawn for the chosen scenario and
# parameters; the legend distinguishes host launches, host work, host waiting, copies and kernels
# by colour and by fill pattern.
#
# </details>

# %%
feeding.timeline_explorer()

# %% [markdown]
# On a GPU the same experiment runs for real (4 chunks of 16 MiB on two streams, pinned memory),
# with a pair of CUDA events around every operation. An event records when **its stream** reached
# it, so a bar is a *stream interval*: it includes the time an operation waited in its stream for a
# busy engine. Two copy bars that overlap on different streams may have run one after the other on
# one copy engine. The rows are therefore streams, not engines; what each engine did when is what a
# profiler's activity records (torch.profiler, Nsight Systems). Without a GPU it shows the
# recording, or says there is none.
#
# <details><summary>Description of the picture</summary>
#
# A timeline drawn from CUDA events with one row per stream; each bar is the interval between the
# two events around a copy in, a kernel or a copy out of one chunk; or, without a GPU or a
# recording, an empty chart that says so.
#
# </details>

# %%
feeding.measured_overlap_figure(streams=2)

# %%
makespan_us = {scenario: feeding.summary(feeding.timeline(feeding.scenario_ops(scenario)))["makespan_us"]
               for scenario in feeding.SCENARIOS[:3]}
one_stream = makespan_us[feeding.SCENARIOS[0]]
predictions.read_back(
    prediction_overlap_saving_us,
    f"pinned: {one_stream - makespan_us[feeding.SCENARIOS[1]]:.0f} µs shorter; pageable: "
    f"{makespan_us[feeding.SCENARIOS[2]] - one_stream:.0f} µs *longer* (the host waits on every copy)",
    unit="µs", stands_in="the timelines above (the recording, or the model)")

# %% [markdown]
# ## 3 · Launch overhead and CUDA graphs (optional, 7 min)
#
# Each launch costs the host time, and how much depends on what launches it. On an H100 host (the
# course's probe, `data/reference/nvidia-h100-80gb-hbm3/first-contact/probe.jsonl`, step
# `launch_costs`) a torch `add_` cost 6.2 µs and a CuPy add 7.1 µs, but a Numba launch 16.6 µs for
# an empty kernel and 78.8 µs with three CuPy arrays as arguments (Numba converts each argument on
# every call). Source 002's "a few microseconds of CPU + driver overhead" holds for torch and CuPy,
# not for Numba's 17–79 µs; the model's 5 µs is a torch-like launch. When a kernel runs for less than that,
# the SMs finish before the next launch arrives: the chain is **launch-bound** and the SMs idle
# between kernels. A **CUDA graph** records the chain once and replays it with one launch
# (`torch.cuda.CUDAGraph`, `cupy.cuda.Graph`); the kernels then follow each other on the device.
#
# ### Predict
# 16 kernels of 2 µs each, launch cost 5 µs: µs per kernel launched one by one? Replayed as one
# graph (1 µs between kernels)?

# %%
prediction_eager_us_per_kernel = ...
prediction_graph_us_per_kernel = ...

# %%
{way: round(feeding.model.per_kernel_us(16, 2.0, graph), 2) for way, graph in (("eager", False), ("graph", True))}

# %% [markdown]
# <details><summary>Description of the picture</summary>
#
# µs per kernel against the number of kernels in the chain (log axis), one
# line for eager launches and one for a CUDA graph replay. The eager line stays near the launch
# cost; the graph line falls as the one launch is shared by more kernels.
#
# </details>

# %%
feeding.launch_figure()

# %%
predictions.read_back(
    {"eager": prediction_eager_us_per_kernel, "graph": prediction_graph_us_per_kernel},
    {way: round(feeding.model.per_kernel_us(16, 2.0, graph), 2) for way, graph in (("eager", False), ("graph", True))},
    unit="µs", stands_in="the chart above (the recording, or the model)")

# %% [markdown]
# ## 4 · Hidden synchronisations (9 min)
#
# Some innocent-looking lines make the host wait for the GPU to drain: `loss.item()`,
# `float(loss)`, `if loss < best:` (Python needs a bool now), `print(tensor)` (it must read the
# values to print them), `tensor.tolist()`, `tensor.cpu()` — and a copy **to** the device without
# `non_blocking=True`: `batch.to("cuda")` or `batch.cuda()` from host memory is a
# `cudaMemcpyAsync` followed by a `cudaStreamSynchronize` (PyTorch's `copy_kernel_cuda` calls
# `memcpy_and_sync`), so the host waits until everything queued before it and the copy are done.
# (`tensor.numpy()` is not on the list: on a CUDA tensor it raises a `TypeError` and asks you to call
# `.cpu()` first — the sync is in that call.) While the host waits, nothing new is queued, and after
# it the SMs wait for the host's next launches.
#
# How a profile shows them: each line that turns a tensor into a Python value (`.item()`,
# `float`, `bool`, `print`) runs the operator `aten::_local_scalar_dense`, which the profiler counts
# even on the CPU. `.tolist()` and `.cpu()` do not: on a GPU they are a device-to-host
# `aten::_to_copy`, and the runtime row shows `cudaMemcpyAsync` + `cudaStreamSynchronize`; on the
# CPU nothing in their profile marks them as waits. So the course also counts the lines themselves: `feeding.spy()`
# wraps these calls and counts each one your code makes (without a GPU it counts what would wait on
# one). Each line below runs once here:

# %%
feeding.hidden_sync_table()

# %% [markdown]
# One `print(loss)` counts several `_local_scalar_dense`: to choose a format, PyTorch's printer
# checks which values are finite and reads the smallest and largest magnitudes, and each value it
# reads is one read — on a GPU, one wait each.
#
# Source 004 (the "book of root causes") advises replacing `print(loss.item())` by `print(loss)`,
# "prints without sync". The count above says otherwise: printing a tensor reads its value, and on
# a GPU that is a synchronisation and a copy like any other. Treat the advice as folklore; the fix
# is to keep the loss on the device and read it every N steps, and to copy batches from pinned
# memory with `non_blocking=True`.
#
# ### Predict
# In the explorer above, switch between "training loop with .item() each step" and "training loop,
# no sync in the loop" (picking one sets data MiB to the scenario's 0.25 MiB batch). Which engine's
# idle time grows, and why does the host's own work (the hatched bars) stop overlapping with the
# kernels?

# %%
prediction_what_the_sync_costs = "..."

# %% [markdown]
# <details><summary>Description of the picture</summary>
#
# Two bars, ms per step with and without a `.item()` every step: measured on a
# GPU, recorded, or from the model's training-loop scenario, as the caption says.
#
# </details>

# %%
feeding.sync_figure()

# %%
idle = {scenario: feeding.summary(feeding.timeline(feeding.scenario_ops(scenario)))["sm_idle_fraction"]
        for scenario in feeding.SCENARIOS[3:5]}
predictions.read_back(
    prediction_what_the_sync_costs,
    f"the SMs' idle share grows from {idle[feeding.SCENARIOS[4]]:.0%} to {idle[feeding.SCENARIOS[3]]:.0%}: after "
    "each .item() the host waits until the GPU drains, so its own work runs while the SMs have nothing queued",
    stands_in="the bars above (the recording, or the model)")

# %% [markdown]
# ## 5 · Fusion: bytes, not FLOPs (13 min)
#
# The chain `y = (max(2x + bias, 0))² + 1`, written as five tensor operations, launches five
# kernels; each reads its input from memory and writes its output back. One fused kernel reads `x`
# and `bias` once and writes `y` once; the intermediate `t` stays in a register:

# %%
import inspect

print(inspect.getsource(feeding.kernels.fused_chain))

# %% [markdown]
# ### Predict
# For n float32 elements, how many bytes does the unfused chain move, and how many the fused
# kernel? (The first operation reads x and writes t; the second reads t and bias and writes t …)

# %%
prediction_unfused_bytes_per_element = ...
prediction_fused_bytes_per_element = ...

# %% [markdown]
# Both versions run here (in the simulator without a GPU) and are checked against NumPy; the bytes
# are counted, not timed:

# %%
feeding.chain_check(n=1024)

# %%
predictions.read_back(
    {"unfused": prediction_unfused_bytes_per_element, "fused": prediction_fused_bytes_per_element},
    {"unfused": feeding.chain_bytes(1), "fused": feeding.chain_bytes(1, fused=True)}, unit="bytes",
    counted="the table above counts the same bytes for the code that ran (exact, in both modes)")

# %% [markdown]
# A memory-bound chain runs at the memory's bandwidth whichever way it is written, so its time
# follows its bytes: fusion should win by about the byte ratio, 44 ÷ 12 ≈ 3.7×, at sizes where the
# launches do not dominate. On a GPU the chart is measured now; without one the times are the
# course's own recording (a quick one, on an NVIDIA H200; the caption names the contract and the
# date; not your GPU), or, where none exists, the bandwidth model at a published streaming rate; the
# bytes are exact either way. The H200 recording won by more than the byte ratio, about 4.4× at
# n = 16 M: the fused kernel also streamed faster (about 3,300 against 2,700 GB/s), which a model
# of bytes alone does not see.
#
# <details><summary>Description of the picture</summary>
#
# Two panels for the unfused and the fused chain at n = 16 M: on the left MB moved (counted), on the
# right time in ms (measured, recorded, or the model); the fused bar is about 3.7× lower on the left
# and, in the H200 recording, about 4.4× lower on the right.
#
# </details>

# %%
feeding.fusion_figure(n=1 << 24)

# %% [markdown]
# `torch.compile` fuses such chains automatically (TorchInductor generates one Triton kernel for a
# pointwise chain); it needs a working compiler toolchain, so the lesson does not depend on it.
#
# ### The other shape: one small operator per tensor
# A weight decay or an optimizer that loops `for p in params: p.mul_(0.99)` is not a chain: each
# tensor gets *one* operator, and nothing flows from one to the next. In a profile the same operator
# appears once per tensor, and its count grows with the number of tensors; each kernel is tiny, so
# the GPU waits for launches (a few µs each, §3): the step is **launch-bound**. Fusing a chain does not
# help; PyTorch's *for-each* operators do: `torch._foreach_mul_(params, 0.99)` takes the whole list
# and launches a few multi-tensor kernels (the optimizers' `foreach=True`). So: different operators
# in a row over one tensor → fuse them (fewer bytes); the same operator over many tensors → one
# for-each call or a CUDA graph (fewer launches).
#
# ### From the field: the "40 % utilisation mystery"
# Source 001 tells of a transformer training loop stuck at 40 % GPU utilisation for two weeks; the
# cause was a sequence of individually memory-bound operations, each a round trip to HBM. Fusing
# them raised utilisation to 72 % and throughput **1.8×**. ("GPU utilisation" here is what
# `nvidia-smi` reports: the share of time at least one kernel was running — not how busy the SMs
# were while it ran; a single tiny kernel at a time can show 100 %.) These numbers are the source's claims,
# not measurements of ours. What we can check is whether they are plausible: if fusing shrinks a
# chain's bytes r-fold, and that chain was a share f of the step, the step speeds up at most
# 1 / ((1 − f) + f / r) (Amdahl's law). For our chain (r ≈ 3.7), 1.8× needs the chain to have been
# about 61 % of the step — plausible for a step of elementwise operations around a few matmuls, and
# impossible if it was a third.
#
# <details><summary>Description of the picture</summary>
#
# A curve of the step's speed-up against the share of the step spent in the
# chain, from 1× at 0 % to 3.7× at 100 %, a faint horizontal line at source 001's 1.8×, and an
# arrow where the two meet, near 61 %.
#
# </details>

# %%
feeding.fusion_claim_figure()

# %% [markdown]
# How a profiler shows it: many short kernels back to back, each with a low compute throughput and
# a high memory throughput (Nsight Compute's "Memory Throughput" near the top, "Compute (SM)" near
# the bottom), and gaps between them when the launches cannot keep up.
#
# ## 6 · The L2: when the working set fits (optional, 9 min)
#
# Between the SMs and HBM sits the **L2** (50 MB on an H100, by NVIDIA's Hopper whitepaper; the
# banner's device reports its own size). A kernel that sweeps a working set again and again gets it
# from the L2 while it fits, at a higher rate than HBM, and at HBM's rate once the set is many times
# the L2. In between, the model lets the L2 serve the share L2 ÷ working set. The H200's recording
# (`feeding.l2`) keeps *more* than that at twice the L2: 7,472 GB/s, nearly its 7,724 GB/s at the
# L2's size, where the model expects about 4,300; at four times the L2 it falls to 3,279 GB/s, near
# HBM's 3,056 and below the model. Why the L2 holds a working set of twice its size is not measured
# here: a hypothesis is that its replacement is not a strict LRU and that writes allocate whole
# sectors without reading them, so each pass finds more still resident. The table after the chart
# sets the data beside the model. This is also why the course's harness states the cache: a "warm"
# small benchmark measures the L2, not the memory, and a working set up to twice the L2 is labelled
# "partly L2-resident".
#
# ### Predict
# A copy over a working set of a quarter of the L2, then of four times the L2: which is faster, and
# by roughly what factor on your device?

# %%
prediction_l2_factor = ...

# %% [markdown]
# <details><summary>Description of the picture</summary>
#
# Effective GB/s of a warm copy against its working set in MiB (log axis), with
# a dashed vertical line at the L2's size: a high plateau left of it and a lower one, HBM's, right
# of it. With a measurement or a recording, a dotted line is the model at the data's own two
# plateaus.
#
# </details>

# %%
feeding.l2_figure()

# %% [markdown]
# The data beside the model (the measurement on a GPU, else the newest recording; above 1 in the
# last column, the GPU kept more in its L2 than the model):

# %%
l2_table = feeding.l2_model_table()
l2_table

# %%
quarter, four = (l2_table.iloc[(l2_table["working set / L2"] - x).abs().argmin()] for x in (0.25, 4.0))
predictions.read_back(
    prediction_l2_factor, f"{quarter['model GB/s'] / four['model GB/s']:.1f}× (the model, anchored at the data's "
    "own plateaus)", unit="×",
    counted=f"the table's data (measured now on a GPU, else the newest recording) says "
            f"{quarter['GB/s'] / four['GB/s']:.1f}×")

# %% [markdown]
# ## Explain
#
# * **Pinned memory.** Only page-locked host memory can be read by the copy engine directly; a copy
#   from pageable memory is staged by the driver through a pinned buffer and returns to the host
#   only once its last piece is staged (CUDA Runtime API, "API synchronization behavior"; the model
#   simplifies this to "when the copy is done"). Large copies reach the link's bandwidth (PCIe 4.0
#   ×16: 31.5 GB/s per direction by the specification; PCIe 5.0 twice that); small ones never do.
# * **Streams.** Operations on one stream run in order; on different streams they may overlap if
#   different engines are free (Programming Guide, "Asynchronous Concurrent Execution").
# * **Graphs.** A graph replays a fixed sequence with one launch (Programming Guide, "CUDA Graphs");
#   its shapes and pointers are frozen, so the inputs are copied into static buffers.
# * **Syncs.** A value Python needs *now* forces the host to wait, and so does a copy to the device
#   without `non_blocking=True` (PyTorch synchronises the stream after it); keep metrics on the
#   device, and copy from pinned memory with `non_blocking=True`.
# * **Fusion.** A memory-bound operation costs its bytes; fusing removes the intermediate round
#   trips and the launches.
# * **The L2.** Repeated access to a set smaller than the L2 is served from the L2.
#
# ## Key points
# * Put every program on a timeline: host, copy engines, SMs. Idle SMs mean the feeder is slow —
#   copies, launches or the host — not the kernel.
# * Pinned memory and streams overlap copies with compute; CUDA graphs and fusion remove launches;
#   fusion also removes bytes.
# * `.item()`, `.tolist()`, `.cpu()`, `print(tensor)`, `if tensor:` and a blocking `.to("cuda")` are
#   synchronisations — find them in the profiler (`aten::_local_scalar_dense`, device-to-host
#   `_to_copy`, `cudaStreamSynchronize`), and keep them out of the loop.
# * After the capstone: [lab 11 "Root causes"](../labs/lab11_root_causes/lab11_root_causes.ipynb) — six unknown slow kernels and steps; name each cause, show its metric, fix it.
#
# **Next:** the capstone lab 08 "Why is my training step slow?": profile a training loop with three
# planted causes, find the line behind each count, fix them, and on a GPU measure what each fix —
# and bf16 and a multiple-of-8 width, which are not causes at its size — buys.
