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
# # 03 · Memory coalescing
#
# **In 55 minutes you will predict the bandwidth of a strided or misaligned copy from one number
# (sectors per warp request) and check it with the microscope.**
#
# *Teaching 27 min · exercises 28 min · and 15 optional minutes (the section "Within reach of the
# ceiling", marked in its heading: skip it in a 55-minute slot, or leave it as reading) ·
# prerequisites: lessons 00 (measuring) and 01 (warps).*
#
# ## Objectives
# By the end you can:
# 1. list the 32-byte sectors one warp request touches, for any stride, offset and element size;
# 2. predict a strided copy's effective bandwidth: useful bytes ÷ fetched bytes × the copy ceiling;
# 3. explain why the sector model charges a float32 stride at most 8×, not the "32×" that older
#    texts quote — and why that is the model's figure, not a bound on the hardware;
# 4. spot an array-of-structs layout and a column-wise traversal, and fix each one;
# 5. read sectors per request from the microscope, and find the same number in a profiler;
# 6. *(optional section)* say from Little's law why a copy with one 4-byte load per thread stops near
#    60 % of an H200's ceiling, and give each thread more independent and wider loads.

# %%
from gpucourse.measure import runtime

runtime.banner()

# %% [markdown]
# ## One warp, one request, a handful of sectors
#
# When a warp executes a load, its 32 lanes each give an address. The memory system does not
# fetch single bytes: since compute capability 6.0 global memory is served in **32-byte
# sectors** (a 128-byte cache line holds 4 of them). The warp's load becomes one **request**, and
# that request costs every sector that holds at least one byte a lane asked for.
#
# 32 neighbouring `float32` values are 128 bytes, so the best case is **4 sectors**, and every
# fetched byte is used. Here is the kernel this lesson times; lane `l` of a warp copies element
# `(warp_start + l) · stride + offset`:

# %%
from gpucourse.lessons import coalescing

print(coalescing.kernel_source(coalescing.strided_copy))

# %% [markdown]
# The picture shows one warp: the 32 lanes on top, joined to the element each one copies. The
# blue bars below are the sectors the request fetches; the dark stripes inside them are the
# bytes the lanes actually asked for.
#
# <details><summary>Description of the picture</summary>
#
# Lanes 0–31 as numbered triangles in a row at the top, each joined by a line to the 4 bytes it
# copies on a byte-address axis from 0 to 128 below. The bytes asked for fill four adjacent 32-byte
# sectors completely; the title says 4 sectors, 128 bytes fetched for 128 useful (100 %).
#
# </details>

# %%
coalescing.warp_figure(stride=1, offset=0, dtype="float32")

# %% [markdown]
# ### Predict
# Before you move the sliders, write down how many sectors one warp request touches for a
# `float32` copy with **stride 2**, **stride 8** and **stride 32**. What share of the fetched
# bytes is useful each time?

# %%
prediction_sectors = {"stride 2": "...", "stride 8": "...", "stride 32": "..."}  # your numbers

# %% [markdown]
# Now check your answers. Try an offset too, and switch to `float16` and `float64`.

# %%
coalescing.picture_widget(stride=2)

# %%
from gpucourse.viz import predictions

predictions.read_back(
    prediction_sectors,
    {f"stride {s}": f"{coalescing.sectors_per_request(s)} sectors, {coalescing.useful_fraction(s):.3g} useful"
     for s in (2, 8, 32)},
    counted="the microscope counts the same sectors in the picture above (exact in both modes)")

# %% [markdown]
# ## The experiment: bandwidth vs stride
#
# If the bytes a kernel moves are limited by the memory system, a request that fetches 8 sectors
# to use 4 should take about twice as long. So the **sector model** predicts
#
# > effective bandwidth ≈ (useful bytes ÷ fetched bytes) × the device's measured copy ceiling,
#
# where *effective* counts only useful bytes: elements copied × element size × 2 (read + write).
#
# ### Predict
# The sector model says stride 2 halves the effective bandwidth. Older texts say that a strided
# access "can run at 1/32 of the bandwidth". For `float32`, what fraction of the copy ceiling
# do you expect at **stride 32**? And at stride 64?

# %%
prediction_stride_32_fraction = "..."  # e.g. "1/32" or "1/8" or something else

# %% [markdown]
# The chart shows the effective bandwidth of the strided copy for each stride. On a GPU, each
# point is measured now by the course's harness (result checked first, warm-up, median of at
# least 10 samples); without one, it shows a recording made on a real GPU, or says that none
# exists yet. The dashed line is the sector model; the black dashed line is the measured copy
# ceiling, the grey dotted ones the datasheet figure and the folklore's 1/32. The star marks
# your stride.
#
# Every point copies the same useful bytes (256 MiB each way); the line under each tick says how
# far the arrays reach (stride × that).
#
# Without a GPU you see the course's own recording: a quick one, on an NVIDIA H200 (the caption
# names the contract and the date; it is not your GPU). Even stride 1 sits at **0.61** of the
# ceiling: not coalescing, but too little in flight (optional section "Within reach of the
# ceiling"). And stride 32 ran at **1/15** of stride 1 (1/25 of the ceiling), where the model says
# 1/8: "Why about 8× and not 32×" below says what the model leaves out.

# %%
coalescing.stride_widget(stride=32)

# %%
predictions.read_back(
    prediction_stride_32_fraction,
    stands_in="the course's H200 recording (in the chart above): 1/15 of stride 1 at stride 32, 1/25 of the "
              "ceiling — more than the model's 8×, less than the folklore's 32×",
    measured=lambda: coalescing.measured_stride_text("float32", 32),
    model=f"1/{coalescing.slowdown(32):.0f} of the copy ceiling at stride 32 and at 64 "
          f"({coalescing.sectors_per_request(32)} sectors per request, one per lane): not 1/32")

# %% [markdown]
# ### What the microscope counts
#
# Timings need a GPU; counting sectors does not. The microscope runs the same kernel in the
# simulator and records every warp request's addresses. Its counts are exact in both modes,
# and they must equal the model's: a test checks that they do, for every element size, stride
# and several offsets.

# %%
coalescing.sectors_widget()

# %%
coalescing.counted_sectors_table("float32")

# %% [markdown]
# ## Misalignment: the same warp, shifted
#
# ### Predict
# A `float32` copy starts **one element** late (offset 1). How many sectors does each request
# touch now? What fraction of the aligned bandwidth do you expect? Is there any offset between
# 1 and 32 where the cost goes back to 4 sectors?

# %%
prediction_offset_1 = "..."  # sectors per request, and the fraction of the aligned bandwidth

# %%
coalescing.offset_widget(offset=1)

# %%
predictions.read_back(
    prediction_offset_1, stands_in="the sector model and the microscope's counts",
    measured=lambda: coalescing.measured_offset_text("float32", 1),
    model=f"{coalescing.sectors_per_request(1, offset=1)} sectors per request, "
          f"{coalescing.useful_fraction(1, offset=1) / coalescing.useful_fraction(1):.0%} of the aligned bandwidth; "
          f"back to 4 only at offsets that are multiples of 8 (32 bytes)")

# %% [markdown]
# ## Element size
#
# Use the `dtype` menus above. A warp of `float16` lanes needs only 2 sectors at best, `float64`
# needs 8. But the worst case is the same for all three, one sector per lane (32), so the
# *ratio* differs: the model's worst slowdown is 16× for `float16`, 8× for `float32` and 4× for
# `float64`. The table lists the model for each stride (slowdown = fetched ÷ useful bytes):

# %%
import pandas as pd

pd.concat([coalescing.model_table(d) for d in coalescing.DTYPES]).pivot(
    index="stride", columns="dtype", values="slowdown")

# %% [markdown]
# ## Layouts: array of structs, struct of arrays, rows and columns
#
# Strides rarely come from a `stride` argument. They come from **layouts**:
#
# * an *array of structs*: a particle is 8 floats side by side (`x y z vx vy vz mass charge`,
#   32 bytes), so `p[i, 0]` for 32 neighbouring particles is a stride-8 access;
# * a *struct of arrays*: one array per field, so `x[i]` is stride 1;
# * a matrix traversed by **columns**: if `threadIdx.x` picks the row, neighbouring lanes read
#   elements a whole row apart.

# %%
print(coalescing.kernel_source(coalescing.drift_aos))
print(coalescing.kernel_source(coalescing.drift_soa))

# %% [markdown]
# ### Predict
# How many sectors per request does `p[i, 0]` cost in the array-of-structs update? And the
# column-wise matrix copy? The two kernels read every field or every element eventually: does
# that mean nothing is wasted?

# %%
prediction_layouts = {"array of structs": "...", "column traversal": "..."}

# %%
coalescing.layout_widget()

# %%
predictions.read_back(
    prediction_layouts, stands_in="the sector model and the microscope's counts",
    model={"array of structs": f"stride 8: {coalescing.useful_fraction(8):.3g} of the ceiling",
           "column traversal": f"one sector per lane: {coalescing.useful_fraction(32):.3g} of the ceiling"})

# %% [markdown]
# ### The same count in a profiler's words
# Nsight Compute calls a warp's load a *request* and counts its *sectors*. Here is the microscope's
# count of the column-wise copy under those names, beside what Nsight Compute measured for the same
# kernel on the course's own recordings (a bigger launch, so counts are per warp). Those columns
# were recorded on that GPU on that date, not on this machine.

# %%
from gpucourse.measure import ncu

ncu.beside_recorded(coalescing.trace_layout("column traversal").profile(), "copy_columns", rows="global")

# %% [markdown]
# Each access of the array-of-structs kernel costs 32 sectors, where 4 would do. Whether the
# *time* grows 8× depends on the caches: the six loads touch the same 32 sectors (each particle
# is one sector), so if those sectors stay in L1 or L2 between the loads, DRAM serves each
# particle once. The chart below brackets the measurement by two models: no reuse at all, and
# perfect reuse. Only a GPU can tell where the truth lies. The bounds count sectors only: on the
# H200 even the coalesced row traversal (another kernel than the strided copy, also one 4-byte load
# per thread) stopped at 0.56 of the ceiling: see "Within reach of the ceiling".
#
# <details><summary>Description of the picture</summary>
#
# Effective bandwidth (a fraction of the copy ceiling, or GB/s on a GPU) for four kernels: array of
# structs, struct of arrays, row traversal, column traversal. Two markers per kernel are the sector
# model's bounds, a downward triangle for no cache reuse and an upward one for perfect reuse: struct
# of arrays and row traversal are at the ceiling in both; the array of structs lies between 1/8 and
# 9/16 of it, the column traversal between 1/8 and the ceiling. A dashed line marks the copy
# ceiling; with a GPU or a recording, bars show the measured bandwidth.
#
# </details>

# %%
coalescing.layout_bandwidth_figure()

# %% [markdown]
# ## Explain
#
# * **Sectors, not transactions.** The CUDA C++ Best Practices Guide ("Coalesced Access to
#   Global Memory") says that on compute capability 6.0 and later a warp's accesses coalesce
#   into as many 32-byte transactions as it takes to cover the addresses of its lanes. The same
#   section works through the same two cases as this lesson: a misaligned copy and a strided
#   copy.
# * **Why about 8× and not 32×.** The "32×" figure comes from GPUs that moved whole 128-byte
#   transactions: one 4-byte element per 128 bytes is 1/32. With 32-byte sectors a lane that
#   is alone in its sector wastes at most 28 of 32 bytes: 1/8 for `float32`. Past stride 8 the
#   count stays at 32 sectors per request (one per lane), so the model's curve goes flat at 1/8
#   of the ceiling. That 8× is the **sector model's** figure, not a hardware bound. The sector
#   is what the L1 asks the L2 for; the L2 may fetch more than that one sector from DRAM per miss,
#   and DRAM page and TLB misses add cost at large strides, so a GPU can lose more than 8×.
#   The H200 recording does: stride 32 ran at **1/15.4 of stride 1**. Nsight Compute counted the
#   *same* L1 sectors at strides 8 and 32 (`data/reference/nvidia-h200/ncu/`), yet stride 32 took
#   2.2× as long: the difference lies below the L1. A 64-byte DRAM fetch per miss would give
#   4/64 = 1/16 — **a hypothesis**; a DRAM counter (`dram__sectors_read.sum`) would tell.
#   The model also charges random addresses the same as a large stride (32 sectors per
#   request); a GPU may do worse there too.
# * **Caches soften the loss.** The model treats each warp alone. At offset 1 the fifth sector
#   a warp fetches is also the first sector of the next warp's request, and it is often still in
#   the L2; the Best Practices Guide reports that its misaligned copy on a V100 kept about 9/10
#   of the aligned bandwidth, better than the model's 4/5. At large strides there is nothing to
#   share: every sector belongs to a single lane.
# * **What the GPU tier checks.** We cannot time a GPU in simulator mode, so this lesson does
#   not give you a number for this machine. The GPU-tier tests measure the course's claims in one
#   run on a real GPU: the course's best copy (`best_copy`, below) reaches at least 90 % of the
#   copy ceiling on Hopper and 85 % elsewhere — a *prediction* from Little's law until a GPU run
#   confirms it; the one-element copy's gain from more work per thread matches what Little's law
#   predicts for that GPU (the course's H200 recording: the one-element copy at 2,626 of 4,271 GB/s,
#   0.61, `data/reference/nvidia-h200/quick/coalescing.stride.csv`); stride 8 gets at most 0.35× the bandwidth of stride 1 (the
#   model says 1/8); stride 32 lies between 1/32 and 0.16 of stride 1; and the copy misaligned
#   by one element keeps at least 0.8× (the model's lower bound).
#
# ## Within reach of the ceiling: work per thread *(optional, 15 min)*
#
# The stride-1 copy fetches only bytes it uses, yet the H200 ran it at 0.61 of its copy ceiling.
# Coalescing is not the problem: the copy does not ask for enough at once.
#
# **Little's law.** A memory system that delivers bandwidth *B* with a round trip of latency *L*
# has *B × L* bytes on their way at every moment. Turned around: a kernel that keeps *F* bytes in
# flight gets at most *F ÷ L*. `strided_copy` gives each thread one 4-byte load, and an SM holds at
# most 2,048 threads: **8 KiB per SM** in flight. Here is the arithmetic on the recorded numbers (a
# model: the one latency it needs is calibrated on the H200's one-element copy, so that point is its
# input; what it says of more or wider loads per thread, here and in lessons 04a and 05, is predicted):

# %%
calibration = coalescing.inflight.h200_calibration()
print(coalescing.inflight.derivation(calibration) if calibration else "no H200 recording here: nothing to calibrate on")

# %% [markdown]
# ### Predict
# Four loads per thread keep 32 KiB per SM in flight; four 8-byte loads keep 64 KiB. What
# fraction of the copy ceiling do you expect for **four 8-byte loads per thread** on the H200?

# %%
prediction_best_copy_fraction = "..."  # e.g. "0.6", "0.9", "1.0"

# %% [markdown]
# **Four loads per thread, written before the stores.** `copy_ilp4` walks the array with a
# grid-stride loop: thread `i` copies elements `i`, `i + G`, `i + 2G` and `i + 3G` (`G` = threads in
# the grid), then moves on by `4G`. Each of the four loads is one warp request with the same
# lane-to-element mapping as `strided_copy`'s, so the sectors per request you counted above do not
# change. The loads are written first, by hand: numba-cuda passes arrays without `noalias` (C's
# `__restrict__`), so the compiler must assume a store to `dst` may change `src` and will not move a
# later load above an earlier store.

# %%
print(coalescing.kernel_source(coalescing.copy_ilp4))

# %% [markdown]
# **Wider loads.** A `float32` array viewed as `float64` (`a.view(np.float64)`, no copy) gives each
# lane 8 bytes: one 64-bit load instead of two 32-bit ones. `best_copy` is `copy_ilp4` at stride 1
# on such lanes: 4 × 8 B = 32 bytes per thread in flight. CUDA C goes one step further with
# `float4` (one 128-bit load, `LDG.E.128`). numba-cuda's array *indexing* never emits one (a
# `complex128` view compiles to two 64-bit loads); a ten-line `numba.cuda.extending.intrinsic` that
# loads four floats as one 16-byte-aligned vector does (the table's last row, `coalescing/wide.py`),
# at the price of LLVM IR in the kernel and no bounds check. Four 8-byte loads per thread already hold more than the ceiling needs, so the course
# stops there and 16-byte loads appear in the model only. The
# table is what the compiler made of each rung, on this machine, without a GPU: numba-cuda's PTX,
# then `ptxas` for sm_90 and `cuobjdump` (`LDG.E` is a 32-bit global load, `LDG.E.64` a 64-bit
# one; "loads in a row" is the longest run of loads with no store between them).

# %%
from gpucourse.lessons.coalescing import compiled

loads = compiled.loads_as_compiled()
print(loads.attrs["source"])
loads

# %% [markdown]
# The microscope counts each rung's loads: sectors per request (8 for 8-byte lanes: 256 bytes per
# warp, all used), bytes per thread, and how many requests the same bytes take. The chart puts
# each rung on the model's curve: bytes in flight per SM across, effective bandwidth up. Without a
# GPU it shows the model, the H200's recorded point and the four rungs as recorded on a GPU (sweep
# `coalescing.work`; the caption names the GPU and date, or says there is no recording yet); on a
# GPU it measures the four rungs (1 GiB each way; a short contract while you move the menus).
# 16 bytes per load is the model only.

# %%
coalescing.counts_table()

# %%
coalescing.work_widget(elements_per_thread=4, bytes_per_load=8)

# %%
predictions.read_back(
    prediction_best_copy_fraction,
    stands_in="the model calibrated on the H200 recording (the GPU tier checks ≥ 0.90 on an H100 or H200)",
    measured=lambda: coalescing.measured_rung_text(*coalescing.BEST_RUNG),
    model=coalescing.inflight.prediction_text(calibration, *coalescing.BEST_RUNG))

# %% [markdown]
# **Grids in waves, and the tail.** `strided_copy` launches one block per 256 elements: 1,048,576
# blocks for 1 GiB, run as rounds ("waves") of 132 SMs × 8 resident blocks. A block that finishes
# hands its SM to the next one, and that turnover is part of what the model's 823 ns stands for (the
# latency lessons 04a and 05 use too, from `gpucourse.measure.calibration`). A
# grid-stride kernel launches exactly one wave (SMs × the blocks that fit on one, which the driver's
# occupancy calculator reports for the compiled kernel) and lets each thread loop, so no block waits
# for a slot. A grid of 1.25 waves would leave three quarters of the
# SMs idle in its second round: `inflight.tail_efficiency` says 1.25 ÷ 2 = 0.63 of the slots busy.
#
# **What this model leaves out.** One latency for every load, whatever the load; no limit from
# registers (four 8-byte loads need 8 registers a thread, far below any cap here); and a hard corner
# where the real curve bends: measured points near the knee fall below it. Lesson 05 measures the
# same law with occupancy instead of loads per thread. `best_copy` is the course's best Numba copy:
# the transposes of lesson 04 compare their bandwidth with it.
#
# ## A story from the field
# An engineer who worked on distributed training infrastructure writes about model-parallel
# schemes that were elegant as algorithms but coalesced terribly at the boundary between
# communication and computation. The fix was not in the math: the implementation had to be
# redesigned around the memory access pattern. That is this lesson in one line: two kernels
# with the same arithmetic can fetch very different numbers of sectors, and the sectors decide
# the time of a memory-bound kernel.
#
# A profiler shows this directly. In Nsight Compute, the memory workload analysis reports
# sectors and requests for global loads (`l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum` and
# `l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum`). Their ratio is the number the microscope
# counts here: 4 for a clean `float32` load, 32 for the layout above. Its source view goes one
# step further and points at the lines whose loads fetch excess sectors.
#
# ## Key points
# * A warp request costs one 32-byte sector for each sector its lanes touch: 4 for 32
#   neighbouring floats, 5 if misaligned, 32 when each lane is on its own.
# * Effective bandwidth ≈ useful ÷ fetched bytes × the copy ceiling. For `float32` the sector
#   model's loss levels off at 8× (16× for fp16, 4× for fp64), not 32×; caches can soften it, and
#   DRAM fetch granularity, page and TLB misses can make a GPU's loss larger than the model's: an
#   H200 lost 15.4× at stride 32 (a 64-byte fetch per miss would give 16×; a hypothesis).
# * A coalesced copy still needs enough bytes in flight (Little's law: bandwidth × latency): one
#   4-byte load per thread kept an H200 at 0.61 of its ceiling; four independent loads per thread,
#   written before the stores, and 8-byte lanes keep 8× as much *(optional section)*.
# * Fix the layout, not the arithmetic: struct of arrays, and let `threadIdx.x` walk along the
#   contiguous dimension. The microscope (and a profiler) tell you sectors per request.
#
# **Next:** [lab 03](../labs/lab03_coalescing/lab03_coalescing.ipynb): count sectors, turn an
# array-of-structs kernel into a struct of arrays, and fix a column-wise traversal. The grader
# checks your kernels' sectors per request, not only their results.
