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
# # 05 · Occupancy
#
# **In 48 minutes you will work out how many blocks of any kernel fit on an SM, name what stops
# the next one, and say when that number matters for speed and when it does not; in 3 optional minutes,
# why a first version of the speed experiment fooled us and what changes on other GPUs.**
#
# *Teaching 30 min · exercises 18 min · two optional sections (marked in their headings) 3 min in all ·
# prerequisites: lessons 01 (warps) and 04 (shared memory).*
#
# ## Objectives
# By the end you can:
# 1. compute, by hand, the blocks and warps resident per SM for a block size, a register count
#    and a shared-memory size on compute capability 7.0–9.0, and name the limiter;
# 2. read a kernel's real register and shared-memory use (`ptxas -v` without a GPU,
#    `get_regs_per_thread()` with one) and predict its occupancy;
# 3. use `max_registers` to trade registers for occupancy, and spot the spills it can cost;
# 4. predict, with Little's law, how much a memory-bound copy slows down at low occupancy (a lot
#    with one load in flight per thread, much less with four), and why an FMA chain needs little
#    occupancy once each thread has independent chains (ILP);
# 5. tell theoretical occupancy from achieved: a copy launched as a million tiny blocks fills few of
#    its warp slots, whatever the calculator allows.

# %%
from gpucourse.measure import runtime

runtime.banner()

# %% [markdown]
# ## An SM is a fixed set of resources
#
# A block runs on one SM (streaming multiprocessor) from start to finish, and the SM keeps the
# state of every resident block at once: its warps' **registers**, its **shared memory** and a
# **warp slot** for each warp. The SM switches between resident warps every cycle at no cost;
# that is how it hides the hundreds of cycles a load from memory takes. **Occupancy** is the
# share of the SM's warp slots that are filled: resident warps ÷ the maximum (64 on an H100
# or H200).
#
# Four limits decide how many blocks are resident (NVIDIA's rules, as in its occupancy
# calculator `cuda_occupancy.h`):
#
# | limit | rule (cc 9.0 numbers) |
# |---|---|
# | registers | each warp gets registers/thread × 32, **rounded up to 256**; each of the SM's 4 sub-partitions has 16,384, so it holds ⌊16,384 ÷ registers-per-warp⌋ warps |
# | shared memory | each block takes its bytes **+ 1 KB reserved by the driver** (cc ≥ 8.0), rounded up to 128 B; the SM has up to 228 KB |
# | warps | 64 warp slots ÷ warps per block |
# | blocks | at most 32 resident blocks |
#
# The picture is one SM running NVIDIA's documented example: 128-thread blocks of a kernel
# that uses 37 registers per thread, on a V100 (cc 7.0). Each square is a warp slot (its number
# is the block); the bars are the register file's four quarters and the shared memory.
#
# <details><summary>Description of the picture</summary>
#
# Three panels for one SM. Warp slots: four rows (sub-partitions SP 0–3) of 16 squares; in each row
# the first 12 are filled and numbered with their block, 0 to 11, and the last 4 are empty.
# Registers: one bar per sub-partition of 16,384 registers, almost full: the resident warps'
# registers, a thin striped part lost to rounding (1,184 registers per warp rounded up to 1,280) and
# a small free part. Shared memory: one bar of 96 KB, all free. The title says 12 blocks × 4 warps =
# 48 of 64 warps (75 %), limited by registers.
#
# </details>

# %%
from gpucourse.lessons import occupancy as lesson

lesson.sm_picture(threads_per_block=128, registers_per_thread=37, shared_bytes_per_block=0, cc=(7, 0))

# %% [markdown]
# ### Predict
# Same kernel (37 registers, no shared memory, cc 7.0), but blocks of **320** threads. How many
# blocks fit, how many warps is that, what occupancy, and which limit binds? Write it down
# before you run the next cell.

# %%
prediction_320_threads = {"blocks": "...", "warps": "...", "occupancy %": "...", "limiter": "..."}

# %% [markdown]
# The calculator shows its arithmetic, line by line. (It is `gpucourse.lessons.occupancy.calculator.occupancy`; a
# test compares it with NVIDIA's own header on thousands of configurations.)

# %%
from gpucourse.lessons.occupancy.calculator import occupancy

answer = occupancy(320, 37, cc=(7, 0))
print(answer.explain())

# %%
from gpucourse.viz import predictions

predictions.read_back(
    prediction_320_threads,
    {"blocks": answer.active_blocks, "warps": answer.active_warps, "occupancy %": round(100 * answer.occupancy, 1),
     "limiter": ", ".join(answer.limiters)},
    counted="the calculator's arithmetic above is exact (the same in both modes)")

# %% [markdown]
# Move the sliders: the picture is the calculator's answer for an H100/H200 (cc 9.0), or for
# this GPU's compute capability when you have one. Watch the orange "rounding" stripes when the
# register count is not a multiple of 8, and the 1 KB per block the driver keeps for itself.

# %%
lesson.calculator_widget()

# %% [markdown]
# ## What do real kernels use?
#
# You rarely choose a register count: the compiler does. This lesson has eight kernels; here is
# the register-hungry one. Each thread keeps 48 running values in a local array; the compiler
# unrolls the loops and keeps them all in registers.

# %%
print(lesson.kernel_source("accumulators"))

# %% [markdown]
# The table asks the toolchain. On a GPU, numba-cuda compiles each kernel for the device and
# the driver reports its attributes, and ptxas reads the same PTX for the device's compute
# capability to report the spills. Without a GPU, numba-cuda still writes the PTX (in a
# separate process, since the simulator cannot compile), and `ptxas -arch=sm_90 -v` from the
# CUDA toolkit wheel reports registers, shared memory and spills. If neither is installed the
# table says *unknown* and the explorer below lets you type a number instead.
#
# The first run compiles all eight kernels (a few seconds); the answers are cached.

# %%
lesson.usage_table()

# %% [markdown]
# ### Predict
# The `accumulators` kernel in blocks of 128 threads (on cc 9.0 without a GPU, else on your GPU's
# compute capability; read its registers in the table above): what occupancy? Then set
# `max_registers=64` (as in `cuda.jit(max_registers=64)`): what occupancy now, and what do you
# expect the compiler to do with 48 accumulators and 64 registers?

# %%
prediction_accumulators = {"occupancy %": "...", "with max_registers=64": "...", "side effect": "..."}

# %% [markdown]
# ## The three classic charts
#
# NVIDIA's occupancy spreadsheet drew three charts: occupancy against block size, against
# registers per thread and against shared memory per block, each with your kernel marked. Here
# they are, driven by a real kernel. Choose the kernel, the block size, a register cap and
# some dynamic shared memory. Colour *and* marker shape name the limiter; the dashed line is you.
#
# * `max_registers` is applied by `ptxas --maxrregcount` without a GPU (it never appears in the
#   PTX: numba-cuda applies it when it links the kernel), and by `cuda.jit(max_registers=N)` on a
#   GPU. ptxas will not go below 24 on sm_90 and says so.
# * Spills are the price of a cap: values that no longer fit in registers go to *local memory*,
#   which lives in the same DRAM as global memory (cached in L1/L2).

# %%
lesson.occupancy_explorer()

# %%
predictions.read_back(
    prediction_accumulators, model=lesson.accumulators_answer(),
    counted="the calculator's arithmetic on the toolchain's register count for this compute capability")

# %% [markdown]
# Things to try: the `accumulators` kernel at 128 threads with no cap, then 64, then 32 (watch
# the spills in the subtitle); the `block_sum` kernel with 40 KB of dynamic shared memory; any
# kernel at 1024 threads per block (a single block can be the whole limit: warps, or it cannot
# launch at all when its registers exceed 65,536).

# %% [markdown]
# ## Does occupancy make a kernel faster?
#
# Resident warps hide latency: while one warp waits for memory, others issue. **Little's law**
# says how many must wait at once: bytes in flight = bandwidth × latency. A copy that keeps one
# 4-byte load in flight per thread (one 128-byte warp load, plus its store) needs
# bandwidth × latency ÷ SMs ÷ 256 B warps per SM to keep DRAM busy; with fewer resident warps it
# slows down in proportion. A warp can also keep several loads in flight *itself* when they do not
# depend on each other (instruction-level parallelism, ILP): then fewer warps are enough.
#
# The experiment copies 256 MiB with 64-thread blocks. The grid is **exactly the blocks that fit
# at once** (the driver's blocks per SM × the SM count), and each thread walks the array with a
# grid-sized stride, so every block stays resident until the copy is done. The occupancy is
# lowered by asking for dynamic shared memory that nobody uses (padding), so fewer blocks fit —
# the calculator picks the padding and, on a GPU, the driver confirms the level. Each point is
# measured by the course's harness (events, warm-up, ≥ 10 samples, median). Here is the ILP-4 copy:
# the four loads are written before the four stores, by hand, because numba-cuda gives array
# arguments no `noalias` and the compiler may not move a load above a store that might overlap it.

# %%
print(lesson.kernel_source("copy_resident_ilp4"))

# %% [markdown]
# The compute-bound kernels are FMA chains: `a = a * b + c`, 4,096 times per thread, each FMA
# waiting for the previous one (ILP 1), or four independent chains of 1,024 (ILP 4). The loop body
# holds eight FMAs per chain, so the loop's counter and branch are a small part of the work and the
# FMA latency (about 4 cycles) sets the pace.
#
# ### Predict
# 1. The resident-grid copy (ILP 1) at 25 % occupancy reaches what fraction of its bandwidth at 100 %?
# 2. The ILP-4 copy at 25 %?
# 3. One FMA chain versus four independent chains, at 12.5 %: what share of its speed at 100 % does each keep?

# %%
prediction_latency_hiding = {"copy_resident at 25 %": "...", "copy_resident_ilp4 at 25 %": "...",
                             "FMA ILP 1 at 12.5 %": "...", "FMA ILP 4 at 12.5 %": "..."}

# %% [markdown]
# **The model's prediction, stated before anything is measured.** Lessons 03, 04a and 05 take Little's
# law's two inputs for a GPU from one place (`gpucourse.measure.calibration`): the **copy ceiling**
# measured in lesson 00, and a **loaded latency calibrated on lesson 03's one-element copy** (its
# 8 KiB of reads in flight per SM ÷ its read rate). That latency is a model constant, not a
# pointer-chase measurement: it holds DRAM latency under load *and* block turnover, so an unloaded
# round trip is shorter. Nothing measured in this lesson went into it. The cell prints both for the
# H200 of the course's recordings, and the warp loads an SM needs: ceiling ÷ SMs × latency ÷ 256 B
# (a 128-byte warp load and its store).
# * ILP 1: 16 warps at 25 % and 64 at 100 % are both below the need, so the bandwidth is
#   proportional to the warps: **16 ÷ 64 = 0.25**.
# * ILP 4: 16 warps × 4 = 64 loads at 25 %; 256 at 100 % is above the need (the ceiling), so the
#   ratio is 64 ÷ the need. ILP 4 at 25 % keeps as many bytes in flight as ILP 1 at 100 %, so the
#   two should match.
# * FMAs: four sub-partitions × 4-cycle latency = 16 FMAs in flight per SM keep the fp32 units
#   busy. At 12.5 % (8 warps) one chain per warp gives **0.5**, four chains **1.0**.
#
# One check is already on record: the first attempt (optional section below) ran the ILP-4 copy at
# 25 % with lesson 03's 8 KiB of reads in flight per SM. The cell prints the model's prediction for
# that point beside the recording; Little's law on it gives a latency about 6 % longer (another
# kernel, its own block turnover). A GPU the course has not recorded takes the H200's latency, and
# the line says so; with less bandwidth per SM (an L4) the knee moves to lower occupancy.

# %%
print(lesson.lesson_speed_model("memory").assumptions)
print(lesson.first_attempt_text())
lesson.predictions()

# %% [markdown]
# On a GPU the chart is measured now (the first view of each kind takes at least 7 s: 14 points
# × 0.5 s, plus compilation); without one it shows a recording made on a real GPU, labelled with
# its GPU and date. **No GPU has recorded the resident-grid copies or the FMA chains yet**: without a
# GPU those views draw the model only and say so. The published occupancy sweeps (gpu-benches'
# gpu-stream) copy one float64 element per thread over hundreds of thousands of blocks, the first
# attempt's launch, so they are not drawn in its place. The dashed lines are the model above, each
# curve 1 at full occupancy, with its inputs printed under the chart.

# %%
speed = lesson.speed_explorer()
speed

# %%
predictions.read_back(
    prediction_latency_hiding, stands_in=speed, model=lesson.predictions(),
    measured=lambda: lesson.measured_ratios())

# %% [markdown]
# ## Why the first version of this experiment fooled us *(optional, 2 min)*
#
# The first version of this lesson launched the obvious copy: one element per thread, one 64-thread
# block per 64 elements — about a million blocks. On an H200 it measured **841 GB/s at 25 % and
# 847 GB/s at 100 %** (an H100: 838 and 846): flat, where Little's law predicts a quarter. Three
# configurations with different occupancy and ILP all ran at about 1.65 billion blocks per second,
# one 64-thread block per SM every ~80 ns: the rate at which the GPU *starts and retires blocks*.
# A tiny block lives about as long as a DRAM round trip, so the SM never had more than about eight
# of them resident: the calculator's **theoretical** 100 % was an **achieved** ~25 %, the same as
# the 25 % configuration. Nsight Compute reports both (its *Occupancy* section:
# "Achieved Occupancy", `sm__warps_active.avg.pct_of_peak_sustained_active`). A grid of exactly
# the resident blocks, each thread looping, starts each block once, so the occupancy the
# calculator allows is the occupancy the SM has. Select *first attempt* above to see the recording
# (without a GPU) or the measurement (with one), labelled as what it is.
# %% [markdown]
# ## Our calculator against the driver
#
# The driver has its own answer: `cudaOccupancyMaxActiveBlocksPerMultiprocessor` (in Numba,
# the context's `get_active_blocks_per_multiprocessor`; in CuPy, the driver API). On a GPU this
# asks it for every lesson kernel at 5 block sizes × 3 dynamic shared sizes × 3 register caps (360
# configurations) and puts the answers side by side with the calculator's. Points on the diagonal
# agree. Without a GPU the chart shows the course's quick recording, which asked for fewer: 72
# configurations of 6 kernels (3 block sizes × 2 shared sizes × 2 register caps; the title counts them).
#
# <details><summary>Description of the picture</summary>
#
# A scatter chart of blocks per SM, the calculator's answer across and the driver's up, one marker
# shape per kernel and one point per configuration, with a dashed diagonal where the two agree; the
# title counts how many agree. Without a GPU or a recording it is empty and says so.
#
# </details>

# %%
lesson.driver_comparison_figure()

# %% [markdown]
# ## Explain
#
# * **The limits are hardware partitions.** The CUDA C++ Programming Guide (*Hardware
#   Multithreading*) says the registers and shared memory of an SM are partitioned among the
#   resident blocks and warps, and that a launch fails if not even one block fits; its
#   *Compute Capabilities* table gives the per-SM limits used here. The allocation units (256
#   registers per warp, 128 B of shared memory, the 1 KB per block reserved since cc 8.0) are
#   those of NVIDIA's `cuda_occupancy.h`; our tests compare our calculator with it.
# * **Registers are allocated per sub-partition.** An SM is four quarters with 16,384 registers
#   each, and a warp lives in one quarter. With 96 registers per thread (3,072 per warp) a
#   quarter holds ⌊16,384 ÷ 3,072⌋ = 5 warps: 20 per SM, not the ⌊65,536 ÷ 3,072⌋ = 21 a
#   whole-SM division suggests.
# * **Occupancy is a means, not a goal.** The CUDA C++ Best Practices Guide (*Occupancy*)
#   says low occupancy hinders latency hiding, but also that past a point more occupancy does
#   not improve performance. Volkov ("Better Performance at Lower Occupancy", GTC 2010)
#   showed kernels that run faster at low occupancy because each thread keeps several
#   independent operations in flight. Little's law is the reason: what hides latency is the
#   number of *operations in flight*, and that is warps × independent operations per warp.
# * **Theoretical is not achieved.** The calculator says how many warps *may* be resident. How
#   many *are* depends on the launch: a grid of tiny blocks that finish as fast as the GPU can start
#   them keeps only a few resident (the first attempt above). Nsight Compute's *Achieved Occupancy*
#   is the measured share; compare it with the theoretical one before reasoning about latency.
# * **Claims in the wild, checked.** One of our source texts lists heavy `__syncthreads()`
#   among the things that "kill occupancy". It does not change occupancy: the calculator's
#   barrier limit (2 per block slot on cc 9.0) never binds; a barrier stalls warps that are
#   already resident, which is a different cost. And "target 100 % occupancy" is folklore:
#   the chart above (or the recording) shows where it matters and where it does not.
#
# ## A common case from the field
# A kernel with many live values per thread shows "Theoretical occupancy 25 %, limited by
# registers" in Nsight Compute (its *Occupancy* section). Someone adds `-maxrregcount=32` (in
# Numba: `max_registers=32`) and the theoretical occupancy climbs to 100 %. Often the kernel gets
# no faster, and sometimes it gets slower. The same profile tells why: *spill stores* and
# local-memory traffic appear where there were none. Our `accumulators` kernel shows the start
# of that story without a GPU: capped at 32 registers, ptxas 13.0 (the CUDA 13 wheel's) for sm_90 reports 2,228 bytes
# of spill stores and 1,644 bytes of spill loads, where the uncapped kernel has none. Before
# capping registers, check whether the kernel is latency-bound at all (memory throughput far
# below the copy ceiling while warps sit waiting), and compare spills before and after.

# %% [markdown]
# ## On other GPUs *(optional, 1 min)*
# The calculator knows every compute capability from 7.0 (V100) to 12.0 (RTX 50xx): Volta,
# Turing, Ampere (8.0, 8.6, 8.7), Ada (8.9), Hopper (9.0) and Blackwell (10.0 B200, 10.3 B300,
# 12.0), with NVIDIA's own limits (`cuda_occupancy.h`; pass `cc=(7, 5)`, `"8.9"` or `"sm_120"`).
# The same kernel can be limited by something else on another GPU:
# * **T4 (cc 7.5)**: 1,024 threads (32 warps) and 16 blocks per SM, 64 KB of shared memory per SM,
#   40 SMs. One block of 1,024 threads fills a whole SM, and the occupancy percentages differ from
#   an H100's for the same launch: try `occupancy(320, 37, cc=(7, 5))` against `cc=(9, 0)`.
# * **cc 8.6, 8.9 and 12.0** (A10, L4, L40S, GeForce RTX 30xx/40xx/50xx): 1,536 threads (48 warps)
#   per SM and about 100 KB of shared memory, so 1,024-thread blocks leave a third of the warp
#   slots empty.
# * **cc 10.0 and 10.3** (B200, B300) have Hopper's limits: 2,048 threads, 32 blocks, 228 KB.

# %% [markdown]
# ## Key points
# * Resident blocks = the smallest of four limits: registers (per warp, rounded to 256, per
#   sub-partition), shared memory (+ 1 KB per block from cc 8.0), warp slots, block slots.
# * Read the real numbers from the toolchain (`ptxas -v`, `get_regs_per_thread()`); a register
#   cap raises occupancy and can add spills.
# * Little's law sets what occupancy buys: bytes (or FMAs) in flight = resident warps × independent
#   operations per warp must reach bandwidth × latency. A one-load-per-thread copy at 25 % moves about a
#   quarter of what it moves at 100 % on an H200; four independent loads per thread at 25 % match one
#   load at 100 % (a prediction here until a GPU confirms it).
# * Theoretical occupancy is an upper bound: launch the resident blocks and loop (grid stride), or
#   check the achieved occupancy, before blaming latency.
#
# **Next:** [lab 05](../labs/lab05_occupancy/lab05_occupancy.ipynb) — compute occupancy by hand
# for configurations you have not seen, name the limiter, and choose a block size and a register
# budget.
