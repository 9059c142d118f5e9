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
# # 09 · Collectives
#
# **Training on many GPUs is a conversation: all-reduce, reduce-scatter, all-gather. In this lesson you
# will count, byte by byte, what each rank sends in a ring, a tree and through a root, predict the time
# with the α-β model, run real collectives between processes on your own computer, and read an
# 8-GPU nccl-tests curve like an engineer.**
#
# *41 minutes — objectives and wrap-up 5, §1 collectives by hand 13, §2 the cost model and busbw 11,
# §3 real collectives on your computer 10, §4 reading published curves 2 — then lab 09 (35 min) ·
# prerequisites: lesson 00 (bandwidth, latency, medians); no GPU needed.*
#
# ## Objectives
# By the end you can:
# 1. say what all-reduce, reduce-scatter, all-gather, broadcast, reduce and all-to-all leave on each rank,
#    and that an all-reduce is a reduce-scatter followed by an all-gather;
# 2. count the bytes each rank sends and the steps it takes in a ring, a tree, recursive halving/doubling
#    and a root ("naive"): ring all-reduce 2(p−1)/p·S per rank in 2(p−1) steps;
# 3. predict a collective's time with the α-β-γ model, and find the size below which latency rules: n* = α·β
#    for one message, p·α·β for a ring all-reduce;
# 4. turn a measured time into nccl-tests' algbw and busbw, and say why an NVLS all-reduce reports a busbw
#    above NVLink's 450 GB/s;
# 5. fit α and β to timings between two processes on your computer.
#
# Every chart says where its numbers come from: **counted** by the collective microscope (exact), the
# **model** (with its parameters' sources), **published** by others (Azure, nccl-tests threads), or
# **measured now** between processes on this computer's CPU. The course has **no NCCL recordings of its
# own yet**: that needs a node with ≥ 2 GPUs (§4 gives the command).

# %%
from gpucourse.measure import runtime

runtime.banner()

# %% [markdown]
# ## 1 · Collectives by hand: the microscope (13 min)
#
# `p` ranks each hold a buffer of `S` bytes. **All-reduce** leaves every rank with the sum of all buffers.
# **Reduce-scatter** leaves rank r with the sum of chunk r only (S/p bytes); **all-gather** is the
# opposite: rank r starts with chunk r and ends with all of them. **Broadcast** copies rank 0's buffer
# everywhere, **reduce** sums onto rank 0, **all-to-all** sends block j of every rank to rank j
# (NCCL user guide, "Collective Operations").
#
# The **ring**: each rank talks only to its right neighbour. In a reduce-scatter, at each of p − 1 steps
# every rank sends one chunk (S/p bytes) and adds the chunk it receives into its own copy; after p − 1 steps
# rank r holds the full sum of one chunk. An all-gather then passes the finished chunks round the ring.
# The microscope executes this on simulated ranks and records every message.
#
# <details><summary>Description of the picture</summary>
#
# A grid with one row per rank (4 rows) and one column per chunk (4 columns). Each cell shows how many
# ranks' data that chunk holds on that rank: 1 everywhere before the first step. A slider moves through the
# steps; at each one, dotted arrows join the sender and receiver of every message, in the column of the
# chunk that moves. After 3 steps each rank holds one chunk with all 4 contributions (the diagonal shifts);
# after 6 steps every cell holds 4.
#
# </details>

# %%
from gpucourse.lessons import collectives

collectives.ring_steps_figure("all_reduce", "ring", 4)

# %% [markdown]
# ### Predict
# On 8 ranks with S = 1 MiB, how many bytes does **each rank** send in a ring all-reduce? And in the naive
# version where everyone sends to rank 0, which adds and sends the result back — how many does rank 0 send?

# %%
prediction_ring_bytes_per_rank = ...  # a number
prediction_naive_root_bytes = ...

# %%
ring = collectives.run("all_reduce", "ring", 8, 1 << 20)
naive = collectives.run("all_reduce", "naive", 8, 1 << 20)
{"ring: bytes each rank sends": sorted(set(ring.bytes_sent.tolist())),
 "naive: rank 0 sends": int(naive.bytes_sent[0]), "ring steps": ring.steps, "naive steps": naive.steps,
 "values equal NumPy's": ring.correct and naive.correct}

# %%
from gpucourse.viz import predictions

predictions.read_back(
    {"ring, each rank": prediction_ring_bytes_per_rank, "naive, rank 0": prediction_naive_root_bytes},
    {"ring, each rank": f"2(p−1)/p·S = {2 * 7 / 8 * (1 << 20):,.0f}", "naive, rank 0": f"(p−1)·S = {7 << 20:,}"},
    unit="bytes", counted=f"the microscope counted {int(ring.bytes_sent.max()):,} bytes from each ring rank and "
                          f"{int(naive.bytes_sent[0]):,} from the root (exact, in both modes)")

# %% [markdown]
# The ring sends 2(p − 1)/p · S per rank — 1.75 MiB on these 8 ranks, and never more than 2·S however many
# ranks there are: the sum is spread over every link — while the root sends (p − 1) · S through its one link. That is why NCCL uses rings and trees, never a root
# ("a flat ring (high latency, best bandwidth) and a tree (low latency, ok bandwidth)", sjeaugey,
# NVIDIA/nccl#471). Explore: pick the collective, the algorithm, the ranks and the size. Recursive
# halving/doubling needs a power-of-two rank count; a tree here is the textbook binomial tree, not
# pipelined (NCCL's double binary tree pipelines chunks and sends about 2·S per rank, NVIDIA/nccl#457).
#
# <details><summary>Description of the picture</summary>
#
# Grouped bars, one group per rank: bytes sent, bytes reduced and peak buffer bytes, as the microscope
# counted them. The title gives the model's time, the number of steps and the busbw. For a ring all bars are
# equal; for naive, rank 0's bar towers over the others.
#
# </details>

# %%
collectives.explorer_widget()

# %% [markdown]
# ## 2 · The α-β-γ model and the busbw identity (11 min)
#
# One message of n bytes costs **T(n) = α + n/β**: a latency α, then the bytes at bandwidth β. Below
# **n* = α·β** the latency dominates; above it, the bandwidth. A collective is a sequence of steps, each a
# message per rank, so the ring all-reduce costs **2(p−1)·α + 2(p−1)/p · S/β** (+ (p−1)/p · S · γ to add
# the chunks up). The tree pays only 2⌈log₂p⌉·α of latency but, unpipelined, 2⌈log₂p⌉·S/β of bandwidth:
# trees win small messages, rings large ones. Each link level has its own α and β (model parameters with
# their sources; no row is a measurement of the course's):

# %%
import pandas as pd

pd.DataFrame([{"link": k, "α (µs)": v.alpha_s * 1e6, "β (GB/s)": v.bandwidth_bytes_per_s / 1e9,
               "n* = αβ (bytes)": collectives.crossover_bytes(v), "where the numbers come from": v.source}
              for k, v in collectives.LINKS.items()])

# %% [markdown]
# ### Predict
# For 8 ranks on NVLink 4 (α = 2 µs, β = 450 GB/s, the table's `nvlink4` row), at what size S does the ring
# all-reduce stop being mostly latency? (Hint: set 2(p−1)·α equal to 2(p−1)/p · S/β.)

# %%
prediction_crossover_bytes = ...

# %% [markdown]
# <details><summary>Description of the picture</summary>
#
# A log-log chart of modelled time (µs) against size (bytes) for all-reduce on 8 ranks: one line per
# algorithm (ring, tree, naive, recursive). At small sizes the lines are flat at their latency floors,
# tree and recursive lowest; at large sizes they rise with slope 1, the ring and recursive lowest, the
# naive root highest. Two vertical lines mark where latency and bandwidth weigh the same: a dashed one at the
# tree's knee α·β (each of its steps carries the whole S) and a dotted one, eight times further right, at the
# ring's knee p·α·β (its steps carry S/p). Your prediction, once written, is a third vertical line.
#
# </details>

# %%
crossover_chart = collectives.time_vs_size_figure("all_reduce", 8, "nvlink4")
predictions.mark(crossover_chart, prediction_crossover_bytes, vertical=True, unit="B")

# %%
nvlink4 = collectives.LINKS["nvlink4"]
predictions.read_back(prediction_crossover_bytes,
                      f"p·α·β = {collectives.knee_bytes('all_reduce', 'ring', 8, nvlink4):,.0f} (the dotted line; "
                      f"a single message's n* = α·β is {collectives.crossover_bytes(nvlink4):,.0f})", unit="bytes",
                      counted="the course has no NCCL recording to measure it against yet (§4)")

# %% [markdown]
# **algbw and busbw** (nccl-tests `doc/PERFORMANCE.md`). nccl-tests reports `algbw = S / t` and
# `busbw = algbw × factor`: 2(p−1)/p for all-reduce, (p−1)/p for reduce-scatter, all-gather and all-to-all,
# 1 for broadcast and reduce. The factor is exactly the ring's bytes per rank over S, so for a ring at large
# sizes **busbw = β**: "The bus bandwidth should reflect the speed of the hardware bottleneck". Check it on
# the model:

# %%
S, p, link = 1 << 33, 8, collectives.LINKS["nvlink4"]
t = collectives.collective_time_s("all_reduce", "ring", S, p, link)
{"time (ms)": t * 1e3, "algbw (GB/s)": collectives.algbw_bytes_per_s(S, t) / 1e9,
 "busbw (GB/s)": collectives.busbw_bytes_per_s("all_reduce", S, p, t) / 1e9}

# %% [markdown]
# **Why NVLS reports busbw above 450 GB/s.** With NVSwitches NCCL can reduce *inside the switch* (NVLink
# SHARP, NVLS): each GPU sends its data once and receives the result once, (p+1)/p · S each way — about S —
# instead of 2(p−1)/p · S. NVLS works within one **NVLink domain**: the 8 GPUs of an HGX H100/H200 node
# ("NVLink is only supported within a single node", NVIDIA/nccl#1031, 2023), or the 72 of a GB200 NVL72 joined
# by NVLink Switches ("The full features of NVLink will be available to all GPUs in such a system, including
# NVLink SHARP", NVIDIA/nccl#1286). Across domains NCCL combines it with a tree over the network (NVLSTree,
# NVIDIA/nccl#1244) or with IB SHARP (NVIDIA/nccl#1365). nccl-tests still
# multiplies by 2(p−1)/p, so busbw exceeds the wire: 8×H100 reach ≈ 480 GB/s (algbw ≈ 275 GB/s) with NVLS
# against ≈ 370 GB/s without (sjeaugey, NVIDIA/nccl-tests#212; a user's on/off run, NVIDIA/nccl#2140). In the
# NCCL staff's words:

# %%
for quote in collectives.NVLS_QUOTES:
    print(quote)

# %% [markdown]
# ## 3 · Real collectives on your computer (10 min)
#
# `torch.distributed` with the **gloo** backend runs the same collectives between CPU processes. The course
# starts them as separate processes (`collectives.distworker`, an importable module) with
# `MASTER_ADDR=127.0.0.1`, a free port and, on Windows, `USE_LIBUV=0`; after a time limit it stops every rank
# and says so in one line (a rank waiting for a message that never comes waits forever: "Failure to do so
# will result in other ranks waiting indefinitely", NCCL's Operations page). Here is the ring all-reduce
# over `isend`/`recv` it runs — the microscope's ring, on real processes:

# %%
import inspect

print(inspect.getsource(collectives.distworker.ring_all_reduce))

# %% [markdown]
# Checked against `dist.all_reduce` on 3 processes (1001 floats: chunks of unequal size). To try your own,
# write a file that defines `ring_all_reduce(tensor, dist)` and pass `ring_file="my_ring.py"`.

# %%
collectives.gloo_check(3, [4096, 4 * 1001])

# %% [markdown]
# ### Predict
# Your computer's loopback: what α (µs) and β (GB/s) do you expect between two processes? The lesson's
# `loopback` link (derived from one learner's anecdotal gloo table) says about 140 µs and 2.6 GB/s.

# %%
prediction_alpha_us = ...
prediction_beta_gbps = ...

# %% [markdown]
# One message between two processes at five sizes (1 KiB to 32 MiB), half the fastest of ten round trips
# each, taken in rounds over all sizes (a busy laptop pauses a process now and then: the fastest is the link,
# and a busy spell slows every size alike), and α, β fitted by least squares on the *relative* error
# (`model.fit_alpha_beta`: an absolute fit would let the 32 MiB point's noise set α):
#
# <details><summary>Description of the picture</summary>
#
# A log-log chart of time (µs) against message size (bytes): measured points from this computer and the
# fitted line α + n/β through them; flat at small sizes (the latency α), rising with slope 1 at large
# sizes (the bandwidth β). The caption gives the fitted α and β.
#
# </details>

# %%
pingpong, fitted = collectives.gloo_pingpong()
collectives.pingpong_figure(pingpong, fitted)

# %%
loopback = collectives.LINKS["loopback"]
predictions.read_back(
    {"α (µs)": prediction_alpha_us, "β (GB/s)": prediction_beta_gbps},
    {"α (µs)": round(loopback.alpha_s * 1e6), "β (GB/s)": loopback.bandwidth_bytes_per_s / 1e9},
    counted="no fit this time: the times did not grow with size" if fitted is None else
    f"measured now on this computer (gloo, CPU): α = {fitted.alpha_s * 1e6:.0f} µs, "
    f"β = {fitted.bandwidth_bytes_per_s / 1e9:.2f} GB/s")

# %% [markdown]
# **What gloo does differently.** Gloo's reduce-scatter is an all-reduce followed by a slice: "This is still
# 2x communication than a real reduce-scatter" (pytorch/pytorch#118911). Timing it would show no (p−1)/p
# saving, so the course does not time it: the microscope counts what a real one sends. Your timings are CPU
# memory and loopback numbers (the collectives share your cores with everything else), not a GPU's: use them
# for α and β of *this* computer, never as NVLink.

# %%
{op: int(collectives.run(op, "ring", 4, 1 << 20).bytes_sent.max()) for op in ("reduce_scatter", "all_reduce")}

# %% [markdown]
# ## 4 · Reading a published 8-GPU curve (2 min)
#
# Azure published nccl-tests all-reduce sweeps on 8×H100 and 8×H200 (NVLS, in-place, NCCL 2.18.5 and 2.20.5).
# The model's ring on NVLink at the ≈ 370 GB/s that rings reach ("protocol overhead (~20%)", sjeaugey,
# NVIDIA/nccl-tests#212) is drawn beside them. Half of the peak needs ≈ 16–33 MB; "256M is too small to reach
# peak bandwidth" (nccl-tests#212).
#
# <details><summary>Description of the picture</summary>
#
# busbw (GB/s) against size (bytes, log axis) for all-reduce on 8 GPUs. Two series of published points
# (Azure H100 and H200) rise from near 0 at 1 KB to about 480 GB/s at 8 GB, above the dashed 450 GB/s NVLink
# line rate. The model's ring line rises later and levels at 370 GB/s (the faint dotted line); the model's
# tree levels lower.
#
# </details>

# %%
collectives.busbw_figure(8)

# %% [markdown]
# **The course's own recordings: none yet.** An instructor with a node of ≥ 2 GPUs records the sweep, with
# its provenance (torch, NCCL, GPUs, date, command), as nccl-tests-like JSON:
#
# ```
# python -m gpucourse.lessons.collectives.distworker record --backend nccl --ranks 8 --out collectives.json
# ```
#
# ## From the field
# * A "Python ring all-reduce from scratch" lost to NCCL "by 7x on large messages and 34x on small messages"
#   on 16 H100 over InfiniBand (jingchaozhang.github.io, 2026): the α term of Python-level steps, and NCCL's
#   in-kernel pipelining.
# * "1x 4GB reduction is much faster than 1000x 4MB reduction" (stas00/ml-engineering, network benchmarks):
#   1000 × α. Lesson 10 turns this into bucket sizes for data-parallel training.
# * Two nodes compared with a larger cluster mislead unless `NCCL_ALGO=RING` is set: tree can reach "~2x the
#   network speed" on two nodes (NVIDIA/nccl#946).
#
# ## Key points
# * A ring sends 2(p−1)/p · S per rank for an all-reduce, in 2(p−1) steps; a root sends (p−1)·S; a tree
#   pays ⌈log₂p⌉ steps of latency. All-reduce = reduce-scatter + all-gather.
# * T = steps·α + bytes/β (+ reduced bytes·γ); below n* = αβ latency rules a message, below p·αβ a ring
#   all-reduce (each of its 2(p−1) steps carries only S/p).
# * busbw = algbw × 2(p−1)/p converts a time into "link speed" for a ring; with NVLS it is not wire bandwidth.
#
# **Lab 09** (`labs/lab09_collectives/`): implement the ring reduce-scatter and all-gather on the
# microscope — graded on values *and* exact bytes and steps — and predict times from the model.
