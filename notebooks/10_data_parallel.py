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
# # 10 · Data-parallel training: overlap and sharding
#
# **Every GPU computes gradients on its own share of the batch; then they must agree. In this lesson you will
# build PyTorch's DistributedDataParallel from scratch on two real processes, predict from a timeline how
# much of its communication hides behind backward and which bucket size is best, and count what ZeRO and FSDP
# save in memory and pay in traffic.**
#
# *45 minutes — objectives 3, the picture 2, §1 DDP from scratch 10, §2 overlap and buckets 14, §3 sharding
# 13, §4 on real GPUs 2, key points 1 — then lab 10 "Buckets that overlap" (70 min) · prerequisites:
# lesson 09 (collectives and their α-β cost), lesson 08 (streams and timelines).*
#
# ## Objectives
# By the end you can:
# 1. say how many all-reduce calls, and how many bytes, each way of averaging gradients makes, and show that
#    the result equals one process on the whole batch;
# 2. draw a data-parallel step's timeline — backward in reverse, a bucket's all-reduce when its last gradient
#    exists — and read the exposed communication off it;
# 3. predict why both tiny buckets and one huge bucket are slow, from α, β and when gradients become ready,
#    and read the step-time curve against the bucket size (on the lesson's 64-rank ring: steps down, a floor,
#    a climb);
# 4. compute the memory per rank and the traffic per step of DDP, ZeRO-1/2 and FSDP (2Ψ against 3Ψ).
#
# Nothing here needs a GPU. The processes are real (torch.distributed with the gloo backend on this CPU) and
# what they **count** is exact; their *times* are CPU and loopback times and are never shown as a GPU's.
# Every timeline is the lesson's **model**, and says so.

# %%
from gpucourse.measure import runtime

runtime.banner()

# %% [markdown]
# ## The picture: two streams of one data-parallel step (2 min)
#
# One row is the GPU's compute: forward through the layers, then backward in **reverse** — the last layer's
# gradients exist first. The other row is the communication stream: each **bucket** of gradients is
# all-reduced (summed over the ranks, then divided) as soon as its last gradient exists, while backward goes
# on with earlier layers. Only what runs after backward has finished — the *exposed* communication — makes
# the step longer.
#
# <details><summary>Description of the picture</summary>
#
# A Gantt chart with time in milliseconds along the x axis and two rows. The compute row has short green
# forward bars, then longer blue hatched backward bars. The communication row has orange crossed all-reduce
# bars, one per bucket, starting during backward and queueing behind each other; the row runs on well after
# backward has ended, for about a quarter of the step. The title gives the step time, the number of
# collectives and the exposed communication.
#
# </details>

# %%
from gpucourse.lessons import dataparallel

dataparallel.ddp_figure()

# %% [markdown]
# ## 1 · DDP from scratch, on two processes (10 min)
#
# The lesson's small model has four linear layers: eight parameter tensors (a weight and a bias each). Each
# rank runs forward and backward on its 8 rows of a 16-row batch; averaging the gradients over the two ranks
# gives exactly the gradients of one process on all 16 rows (the loss is a mean). Four ways to average
# (`dataparallel.kernels`, shown below):
#
# 1. **per parameter**, after backward: one `all_reduce` per tensor;
# 2. **flat**: copy all gradients into one buffer, one `all_reduce`;
# 3. **overlap**: a hook on each parameter (`register_post_accumulate_grad_hook`) starts an *asynchronous*
#    all-reduce the moment backward has produced that gradient;
# 4. **buckets**: the hooks fill buckets in reverse parameter order and launch a bucket when it is full —
#    PyTorch's rule, with a small first bucket so that communication starts early (1 MiB in PyTorch,
#    `dist._DEFAULT_FIRST_BUCKET_BYTES`, but only while `bucket_cap_mb` is left unset: set it, even to 25, and
#    the first bucket is as large as the others, pytorch/pytorch#121640; here 1 KiB for a 43 KB model, and a
#    24 KiB cap). That is DDP's rule from the second step on: its first step runs with **one** bucket, then it
#    rebuilds the buckets in the order backward produced the gradients (`_ddp_init_helper`: "we only disable
#    bucketing for the first iteration").
#
# ### Predict
# For each of the four, how many all-reduce calls does a rank make per step? How many bytes do they carry
# in all (the model has 10,952 float32 parameters)?

# %%
prediction_calls = {"per_parameter": ..., "flat": ..., "overlap": ..., "bucketed": ...}

# %% [markdown]
# The next cell starts two processes (gloo, on this machine, at most two minutes), runs every variant in
# both, and compares each rank's gradients with one process on the whole batch. The table is rank 0's.

# %%
ranks_result = dataparallel.run_ranks()
dataparallel.counts_table(ranks_result)

# %%
from gpucourse.viz import predictions

small_sizes = [t.numel() * t.element_size() for t in dataparallel.small_model().parameters()]
counted_calls = dataparallel.counts_table(ranks_result).set_index("variant")["collective calls"]
predictions.read_back(
    prediction_calls,
    {"per_parameter": len(small_sizes), "flat": 1, "overlap": len(small_sizes),
     "bucketed": len(dataparallel.assign_buckets(small_sizes, 24 << 10, 1 << 10))},
    counted="the two processes counted " + ", ".join(f"{v}: {counted_calls[v]}" for v in prediction_calls)
            + f" calls, each variant {sum(small_sizes):,} bytes in all (exact, in both modes)")

# %%
dataparallel.bucket_table(ranks_result)

# %% [markdown]
# Every variant moves the same 43,808 bytes of gradients; what changes is the **number of calls** and **when
# they start**. Per parameter and overlap make 8 calls, flat makes 1, the buckets 3 — the first bucket holds
# only the last layer (2,080 bytes), so its all-reduce starts while backward is still in the third layer.
# The hooks fired in reverse parameter order: that is why DDP's buckets are filled from the end. On gloo these
# are CPU threads over loopback: the count is exact, a stopwatch here would time this CPU, not a GPU's link.
#
# ## 2 · Overlap and bucket size: the timeline (14 min)
#
# The lesson's model of a bigger step: a 24-block GPT-style transformer (1.3 B parameters, bf16 gradients:
# 2.7 GB), 2,048 tokens per rank, 64 ranks in one NVLink 4 domain (lesson 09's α-β model: α, β and their
# sources are in `collectives.LINKS`; NVLink Switch systems join that many GPUs). The model reduces over one
# **flat ring** of all 64 ranks — a modelling choice, not what NCCL would pick there (NVLS or a tree, lesson
# 09): a flat ring pays 2(p−1) = 126 α-terms per call, so here α weighs heavily. Compute = the layer's FLOPs
# ÷ (the H200's bf16 datasheet TFLOP/s × 0.5, an assumed efficiency). PyTorch's DDP would see 290 parameter
# tensors; the timeline keeps each weight with its bias, 146 gradient groups (a bucket boundary moves by at
# most a bias):

# %%
transformer = dataparallel.transformer_layers(24, 2048, 2048)
as_torch = list(dataparallel.kernels.transformer_module(24, 2048).parameters())
{"gradient groups in the timeline": len(transformer), "parameter tensors in PyTorch": len(as_torch),
 "parameters (both)": f"{sum(t.params for t in transformer):,} = {sum(t.numel() for t in as_torch):,}",
 "bf16 gradients (GB)": round(2 * sum(t.params for t in transformer) / 1e9, 2)}
#
# ### Predict
# (a) With **one** bucket of everything, how much of the all-reduce is exposed? (b) With one bucket **per
# tensor** (about a hundred all-reduces), what does each call pay that one big call pays once? (c) Sketch the step time
# against the bucket size, from 1 KiB to 4 GiB.

# %%
prediction_one_bucket_exposed_share = ...  # 0 … 1
prediction_curve_shape = "..."  # e.g. "falls then flat", "U", "rises"

# %% [markdown]
# <details><summary>Description of the picture</summary>
#
# The same Gantt chart as the first picture, for `bucket_cap_mb=4096` (one bucket: a cap you set makes the first
# bucket that large too): the whole backward runs first, then one long all-reduce bar on the communication row
# starts only after it; the title reports all of it exposed.
#
# </details>

# %%
dataparallel.ddp_figure(cap_mib=4096)

# %%
one_bucket = dataparallel.summary(dataparallel.ddp_step(4096))
predictions.read_back(prediction_one_bucket_exposed_share,
                      f"{one_bucket['exposed_fraction']:.2f} ({one_bucket['exposed_comm_s'] * 1e3:.1f} ms of "
                      f"{one_bucket['comm_s'] * 1e3:.1f} ms); (b) each call pays the ring's 2(p−1)α = "
                      f"{dataparallel.collective_cost('all_reduce', 'nvlink4', 64)(1) * 1e6:.0f} µs of α-terms",
                      counted="the timeline is the lesson's model: no measurement of a 64-GPU step exists here")

# %% [markdown]
# Now move the bucket size. Try also PCIe (8 GPUs without NVLink), InfiniBand (across nodes), 64 ranks, and
# fewer tokens per rank (less compute to hide behind).
#
# <details><summary>Description of the picture</summary>
#
# Sliders for the bucket size, tokens per rank and ranks, and a link dropdown, above the Gantt chart of one
# step for the chosen values; its title gives the step time, the number of collectives and the exposed
# communication.
#
# </details>

# %%
dataparallel.bucket_explorer()

# %% [markdown]
# <details><summary>Description of the picture</summary>
#
# A chart with the bucket cap in MiB on a log x axis and time in ms on the y axis: a solid line for the step
# time, a dashed line for the exposed communication and a dotted grey line for compute alone. The step-time
# line is not a smooth U but a staircase: flat and highest from the smallest caps to 8 MiB, one step lower and
# flat again from 11 to 32 MiB, then a cliff down to a floor just above compute from about 45 MiB, which rises
# slowly and then steeply at the largest caps, where all communication is exposed. A dotted vertical line
# marks PyTorch's default 25 MiB and a black diamond its step with the cap left unset: on the second plateau,
# nearly as slow as one bucket.
#
# </details>

# %%
dataparallel.bucket_curve_figure()

# %% [markdown]
# The same sweep as a table: each run of caps that gives the same number of calls, its step and exposed time,
# and what those calls pay in α-terms alone.

# %%
plateaus = dataparallel.bucket_plateaus()
plateaus

# %% [markdown]
# %%
predictions.read_back(prediction_curve_shape,
                      "steps down, then a floor, then a climb: on this 64-rank flat ring the step falls in plateaus "
                      f"({plateaus['step (ms)'].iloc[0]:g} → {plateaus['step (ms)'].iloc[1]:g} → "
                      f"{plateaus['step (ms)'].iloc[2]:g} ms) and climbs back to "
                      f"{plateaus['step (ms)'].iloc[-2]:g} ms with one bucket",
                      counted="the curve is the lesson's model: no measurement of a 64-GPU step exists here")

# %% [markdown]
# **Explain.** A collective costs α-terms plus bytes ÷ β (lesson 09): a ring all-reduce on p ranks pays
# 2(p−1)α whatever its size — 126 α on 64 ranks. Up to 8 MiB (the smallest matrix, the attention's output
# projection, in bf16) every matrix is its own bucket — a bucket never splits a tensor — and only the small
# norms share, so the curve is flat there: about a hundred calls, each paying its α-terms, and together they
# outlast backward. The curve moves only where the number of calls changes — when a cap first holds two
# tensors of a kind — so it falls in **plateaus**, each lower by about the α-terms of the calls it saves (the
# table's last column), and then drops off a **cliff** to its floor once the cap holds the large MLP matrices
# in pairs. PyTorch's 25 MiB default sits on the second plateau, nearly as slow as one bucket: on this model
# that is an artefact of the flat 64-rank ring's α, not of the default (with 8 ranks the curve is flat to
# about 200 MiB: try it). One huge bucket pays α once, but it cannot start until the *first* layer's gradient
# exists — the end of backward — so nothing overlaps (a cap you set makes the first bucket that large too; only
# with the cap left unset does PyTorch's 1 MiB first bucket start early). The floor lies between: buckets
# large enough that α is small against n/β (n ≫ α·β, lesson 09's crossover), small enough that the last one,
# which is always exposed, is short. Where the floor lies depends on the link, the ranks and the compute (try
# 8 ranks, or 512 tokens) — which is why `bucket_cap_mb` is an argument, and why its default of 25 MiB is
# argued over (pytorch/pytorch#118421). The evidence from real links: "1x 4GB reduction is much faster than
# 1000x 4MB reduction" (stas00/ml-engineering, network benchmarks).
#
# ## 3 · Sharding: ZeRO and FSDP (13 min)
#
# DDP keeps a full copy of everything on every rank. Training with Adam in mixed precision keeps, per
# parameter, 2 bytes of bf16 weights, 2 of gradients and 12 of optimizer state (fp32 master weights, momentum,
# variance: the ZeRO paper's accounting; the paper says fp16, and bf16 takes the same bytes). ZeRO-1 shards the optimizer state over the ranks, ZeRO-2 the
# gradients too (reduce-scatter instead of all-reduce: each rank keeps the average of its shard), ZeRO-3 /
# FSDP the parameters too (all-gather a layer's parameters just before it runs, free them after).
#
# ### Predict
# A 7 B-parameter model on 8 ranks: how many GB per rank do parameters + gradients + optimizer state take
# with DDP? With FSDP? Does DDP fit an 80 GB GPU?

# %%
prediction_ddp_gb, prediction_fsdp_gb = ..., ...

# %% [markdown]
# <details><summary>Description of the picture</summary>
#
# Stacked bars of GiB per rank for four stages — DDP, ZeRO-1, ZeRO-2, ZeRO-3/FSDP — each bar split into
# parameters, gradients and optimizer state. DDP's bar is the tallest, about 104 GiB, mostly optimizer
# state; each stage shrinks one more part by 8; FSDP's bar is about 13 GiB.
#
# </details>

# %%
dataparallel.memory_figure()

# %%
ddp_gb, fsdp_gb = (sum(dataparallel.memory_per_rank(7_000_000_000, 8, stage).values()) / 1e9
                   for stage in (dataparallel.STAGES[0], dataparallel.STAGES[-1]))
predictions.read_back({"DDP": prediction_ddp_gb, "FSDP": prediction_fsdp_gb},
                      {"DDP": round(ddp_gb, 1), "FSDP": round(fsdp_gb, 1)}, unit="GB",
                      counted=f"counted, not measured: DDP needs {ddp_gb:.0f} GB per rank before any activation, so "
                              f"it {'does not fit' if ddp_gb > 80 else 'fits'} an 80 GB GPU")

# %% [markdown]
# Memory is not free of charge: the traffic per step, per rank (Ψ = the gradients' bytes; ring collectives,
# nccl-tests' bus factors: all-reduce 2(p−1)/p, reduce-scatter and all-gather (p−1)/p each):

# %%
dataparallel.traffic_table()

# %% [markdown]
# ZeRO-1 and ZeRO-2 cost what DDP costs: an all-reduce *is* a reduce-scatter followed by an all-gather, and
# ZeRO only moves the optimizer step between the two. FSDP adds one all-gather (the parameters are gathered
# again for backward, having been freed after forward): 3Ψ against 2Ψ, 1.5× the traffic for ~p× less memory.
#
# The two processes above ran a ZeRO step and a toy FSDP step (rows `zero` and `fsdp` of the table): their
# parameters after one SGD step equal one process's, with 2 and 3 collectives. Gloo has no real
# reduce-scatter — `reduce_scatter` here all-reduces and keeps one chunk (pytorch/pytorch#118911), so timing
# it would show no saving: the byte count is the lesson, not the stopwatch.
#
# FSDP's all-gathers can hide too: **prefetch** issues the next unit's all-gather while this one computes
# (the model wraps one unit per transformer block, as FSDP is usually applied; one communication stream).
#
# ### Predict
# Before you move the slider: with prefetch 0, how many times per step does compute wait for an all-gather?

# %%
prediction_fsdp_waits_prefetch_0 = ...
#
# <details><summary>Description of the picture</summary>
#
# A prefetch slider (0 to 4) and a tokens-per-rank slider above a Gantt chart of one FSDP step: the
# communication row has an all-gather before each layer's forward and backward and a reduce-scatter after
# each backward; with prefetch 0 the compute row has gaps before every layer, with prefetch 1 or more
# the gaps close. The title gives the step time and how long compute waited.
#
# </details>

# %%
dataparallel.fsdp_explorer()

# %%
fsdp_waits = dataparallel.fsdp_waits(prefetch=0)
predictions.read_back(prediction_fsdp_waits_prefetch_0,
                      f"{fsdp_waits} (every unit, in forward and in backward, waits for its own all-gather; "
                      f"with prefetch 1: {dataparallel.fsdp_waits(prefetch=1)})",
                      counted="the timeline is the lesson's model: no FSDP step is measured here")

# %% [markdown]
# ## 4 · On real GPUs (2 min)
#
# *One GPU* (GPU only): `dataparallel.stream_overlap()` runs a real backward with each gradient copied to
# pinned host memory — a stand-in for a link — after backward or from a hook on a second CUDA stream, and
# measures both with events; `dataparallel.predicted_overlap()` is the model's prediction for the same setup.
# Without a GPU the next cell says so in one line. *Several GPUs* (an instructor's node, NCCL, one GPU per
# rank): `python tools/ddp_ranks.py --backend nccl --world 8 --time-steps 20` runs the same variants and
# checks on NCCL.

# %%
from IPython.display import display

if runtime.is_gpu():
    display(dataparallel.stream_overlap())
    print("the model's prediction:", dataparallel.predicted_overlap())
else:
    print(dataparallel.ONE_GPU)

# %% [markdown]
# ## Key points
# * Data parallelism averages gradients with an all-reduce; done right it equals one process on the whole
#   batch, exactly — check that first, as the lesson did.
# * Overlap comes from launching each bucket's all-reduce from a hook during backward, in reverse parameter
#   order; only what is left after backward is exposed.
# * Bucket size is a trade: tiny buckets pay α per call, one bucket overlaps nothing; the best lies between
#   and moves with the link, the ranks and the compute.
# * ZeRO/FSDP trade memory for traffic: DDP and ZeRO-1/2 move 2Ψ per step, FSDP 3Ψ; memory per rank falls
#   by up to p.
#
# **Next:** [lab 10 "Buckets that overlap"](../labs/lab10_data_parallel/lab10_data_parallel.ipynb): assign
# parameters to buckets, compute the timeline's exposed communication, and write the bucket hook that makes
# two gloo processes agree with one.
