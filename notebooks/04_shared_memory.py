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
# # 04 · Shared memory: tiling and bank conflicts
#
# **Shared memory in two halves: in part A you count the bytes a tiled matrix multiply saves and
# see what each of its two `syncthreads` protects; in part B you find how shared memory's banks
# serve a warp and remove a 32-way bank conflict with one extra column.**
#
# *65 minutes in two halves — part A 35 min (teaching 23 · predictions and explorers 12), part B
# 30 min (teaching 18 · predictions and explorers 12), and 11 optional minutes (the ladder after register
# blocking) — then lab 04 (65 min: its matmul exercises
# belong to part A, its transpose to part B) · prerequisites: lessons 01–03 (warps, sectors,
# coalescing).*

# %%
from gpucourse.measure import runtime

runtime.banner()

# %% [markdown]
# ## Part A · Tiling and barriers (35 min)
#
# ### Objectives of part A
# By the end of part A you can:
# 1. count the global-memory bytes of a naive and a T-tiled matmul and place both on a roofline
#    (FLOP per byte);
# 2. say what each of the two barriers in the tiled loop protects, and read the microscope's race
#    report of a kernel that lacks one;
# 3. name the limits that stop a tile from growing (threads per block, shared memory per block).
#
# ## Reuse: why a matmul wants shared memory
#
# `C = A·B` with N×N matrices does 2N³ floating-point operations on only 3N² numbers: each
# element of A is used N times. The naive kernel gives each thread one output and reads its row
# of A and column of B straight from global memory, so the same numbers are fetched again and
# again. A **tiled** kernel lets a block of T×T threads fetch a T×T tile of A and one of B into
# **shared memory** (on-chip, per block), wait until both are complete, and then let every
# thread use them T times before moving on to the next pair of tiles.
#
# The picture: the block that owns the orange tile of C walks along a strip of A and a strip of
# B; at each step it holds one dark-blue tile of each.
#
# <details><summary>Description of the picture</summary>
#
# Three 12 × 12 matrices cut into a 3 × 3 grid of 4 × 4 tiles: B at the top right, A at the bottom
# left and C = A·B at the bottom right. One tile of C is orange; the row strip of A and the column
# strip of B that it needs are light blue, and in each strip the tile loaded at this step (the
# second of three) is dark blue. A note at the top left lists one step: load a tile of A and of B
# into shared memory, syncthreads, 4 multiply-adds per thread, syncthreads.
#
# </details>

# %%
from gpucourse.lessons import tiling

tiling.tiling_picture(tile=4, n=12, step=1)

# %% [markdown]
# The kernel, exactly as the course runs it (the tile is a compile-time constant, so the
# kernel is built for each tile size by a small factory):

# %%
import inspect

print(inspect.getsource(tiling.tiled_matmul_kernel))

# %% [markdown]
# ### Predict
# Count bytes requested from global memory for N = 16 (float32, 4 bytes each). The tiled
# kernel with T = 8 reads each element of A once per block *column* (⌈N/T⌉ times) and each
# element of B once per block *row*, and writes C once. How many bytes in total? The naive
# kernel has no shared memory, but the 32 lanes of a warp (a 2×16 patch of C) share the words
# they all read (a broadcast): how many bytes for it? Write both numbers down.

# %%
prediction_tiled_bytes = ...  # an integer: bytes requested by the tiled kernel (T = 8, N = 16)
prediction_naive_bytes = ...  # and by the naive kernel

# %% [markdown]
# The microscope runs each kernel in the simulator and adds up the bytes every warp request
# asked for. These counts are exact in both modes (no timing involved), and the `model_bytes`
# column is the formula `tiling.matmul_traffic_bytes` the charts use for any N.

# %%
counts = tiling.traffic_table(n=16, tile=8)
counts[["rung", "n", "load_bytes", "store_bytes", "counted_bytes", "model_bytes", "flop_per_byte",
        "max_bank_ways", "correct"]]

# %%
from gpucourse.viz import predictions

traffic = counts.set_index("rung")
predictions.read_back(
    {"tiled": prediction_tiled_bytes, "naive": prediction_naive_bytes},
    {"tiled": traffic.loc["tiled 8", "model_bytes"], "naive": traffic.loc["naive", "model_bytes"]},
    counted=f"the microscope counted {traffic.loc['tiled 8', 'counted_bytes']} and "
            f"{traffic.loc['naive', 'counted_bytes']} bytes, exactly, in both modes", unit="B")

# %% [markdown]
# FLOP per byte is what places a kernel on the **roofline**: below the ridge point a kernel is
# limited by bandwidth × intensity, above it by the arithmetic peak. Tiling raises the
# intensity to about T/4 FLOP per byte (each pair of fetched floats, 8 bytes, serves T
# multiply-adds of 2 FLOPs); register blocking (each thread computes a patch of outputs, reusing
# values held in registers) raises the FLOP per byte further — which moves the roof up, not the
# kernel: whether it runs faster depends on the instructions it issues (the ladder below); cuBLAS
# is drawn at its compulsory traffic (each matrix once).
#
# <details><summary>Description of the picture</summary>
#
# A log–log roofline: throughput in GFLOP/s against arithmetic intensity in FLOP per byte. The roof
# rises diagonally (bandwidth × intensity) and turns flat at the fp32 peak, both from the datasheet.
# Eight labelled points, one per rung — naive, tiled 16, the register-blocked and vectorised kernels
# (64 and 128 tiles), the CUDA C++ kernel and cuBLAS — sit left to right in that order (each pair
# with one tile at the same FLOP per byte), each labelled with its FLOP per byte; naive and tiled
# sit on the sloping part, the others on the flat part. Rungs that are recorded are drawn at their
# recorded speed, far under the roof; the others at the roof's bound, marked "bound, not measured".
#
# </details>

# %%
tiling.roofline_figure(tile=16, n=4096)

# %% [markdown]
# The ladder measured: GFLOP/s against N for each rung, next to cuBLAS (fp32, TF32 off) in the
# same run. On a GPU each point is measured now (result checked against float64 first, then
# events, warm-up, median of ≥ 10 samples). Without a GPU the chart shows the course's own
# recording: a quick one, on an NVIDIA H200, at N = 1024 only (the caption names the contract and the
# date; not your GPU). Where no recording exists it shows a published ladder instead, labelled as
# such: Simon Boehm's SGEMM_CUDA kernels (naive, coalesced, shared-memory tiled, register-blocked,
# warp-tiled) against cuBLAS on an RTX A6000 at N = 4096 (CUDA C++, not the course's Numba kernels;
# not your GPU). The dotted lines are the roofline's bound for the naive and the tiled rung. Look at
# the tiled rung: in the H200 recording, shared-memory tiling alone (16 × 16) reached about a fifth
# of cuBLAS and less than half of its dotted bound (in the published ladder, about 13 % of cuBLAS) —
# below what the traffic model allows. The model bounds a kernel by its memory traffic; it says nothing about the
# instructions each loaded value costs — the next section counts them.

# %%
tiling.matmul_explorer()

# %% [markdown]
# <details><summary>Description of the picture</summary>
#
# A line chart of each rung's fraction of cuBLAS's GFLOP/s (in %) against the matrix size N on a log
# axis, one line per rung and a faint line at 100 % for cuBLAS. Without a GPU or a recording of the
# matmul ladder it shows the published SGEMM_CUDA kernels instead, one marker each at N = 4096 (the
# shared-memory tiled one at 13 %, the warp-tiled one at 94 %), and the caption names the source.
#
# </details>

# %%
tiling.fraction_figure()

# %% [markdown]
# ## The ladder after register blocking, step by step *(optional, 11 min)*
#
# In the H200 recording the two register-blocked rungs did **not** beat the 32×32 tile: the 64/4
# rung matched it, and the 128/8 rung was slower (at N = 1024 it has 64 blocks for 132 SMs, and
# 150 registers a thread leave one block per SM). Register blocking cuts global traffic, but a
# rung is fast only if the SM spends its issue slots on multiply-adds. Simon Boehm's SGEMM
# worklog (the published ladder above) climbs by counting instructions; so does this section.
# The compiler's own output (SASS, assembled by `ptxas` for cc 9.0 on this CPU, no GPU needed)
# shows per rung: FFMAs per shared-memory load, the FFMA share of the k-loop's instructions,
# registers and spills.
#
# ### Predict
# The old register-blocked 128/8 rung issues 16 four-byte shared loads (LDS) per 64 FFMAs, because
# a thread's 8 values of a row of B sit 16 floats apart. Store A transposed and give each thread
# 4 *contiguous* values per quadrant: how many 16-byte loads (LDS.128) per 64 FFMAs now? What
# share of cuBLAS do you expect from a Numba kernel: 20 %, 50 %, 90 %?

# %%
prediction_lds128_per_64_ffma = ...  # an integer
prediction_share_of_cublas = ...  # a fraction, e.g. 0.5

# %% [markdown]
# Each rung, what changed, what `ptxas` made of it and its speed: measured now on a GPU; without
# one, the course's recording (its size and contract are in the caption line printed below; the
# quick H200 recording is at N = 1024, which treats the 128 tiles unfairly) or, for the rungs not yet
# recorded, the GPU tier's **prediction** — a claim a GPU run will confirm or refute, not a
# measurement.

# %%
steps = tiling.ladder_table()
print("speed:", steps.attrs["source"])
steps

# %%
from gpucourse.lessons.tiling.compiled import PREDICTIONS

vectorised = steps.set_index("rung").loc["vectorised 128/8"]
ffma_per_load = vectorised.get("FFMA per shared load")  # NaN where this machine has no ptxas
timed = vectorised["GFLOP/s"] is not None and vectorised["GFLOP/s"] == vectorised["GFLOP/s"]
predictions.read_back(
    {"LDS.128 per 64 FFMA": prediction_lds128_per_64_ffma, "of cuBLAS": prediction_share_of_cublas},
    {"LDS.128 per 64 FFMA": round(64 / ffma_per_load) if ffma_per_load > 0 else "no SASS here",
     "of cuBLAS": PREDICTIONS["vectorised 128/8"]}, measured=vectorised["of cuBLAS"],
    stands_in=steps.attrs["source"] if timed else "nothing yet (no GPU has timed this rung)")

# %% [markdown]
# What the SASS says (compiled for cc 9.0 by this machine's `ptxas`; the counts are pinned in
# `tests/test_tiling_vectorised.py`):
#
# * **tiled 32**: 40 shared loads for 32 FFMAs in a 134-instruction loop — under a quarter of the
#   issue slots do arithmetic.
# * **register-blocked**: every fragment value is a 4-byte LDS (8 per 16 FFMAs, 16 per 64), and
#   the next k-tile's global loads start only after the barrier, so their latency is exposed
#   every 8 values of k.
# * **vectorised**: the same tiling with few instructions. A is stored transposed (`a_s[k, row]`,
#   rows padded by 4 floats so the transposing stores are conflict-free), each thread's values
#   are 4 contiguous floats, so `ptxas` merges them into one LDS.128: 4 per 64 FFMAs. The next
#   k-tile is loaded into registers *before* the FMAs of the current one (its latency hides
#   behind them), stored into a second shared buffer afterwards, and one barrier per k-tile
#   suffices. No spills: the 8×8 accumulators stay in 120 registers.
# * What Numba cannot express: no 16-byte global loads from a float32 array (each `a[r, k]` is
#   a 4-byte LDG), no `__restrict__` (so no reordering of loads past stores), 64-bit index and
#   loop arithmetic (most of the 28 instructions of the vectorised k-loop's 96 that are neither
#   FFMA nor LDS), no `#pragma unroll` for the k-loop, and none of the instructions the fastest kernels are built on — `cp.async`
#   (asynchronous global→shared copies), `ldmatrix`, `mma`/`wgmma` (tensor cores) and TMA. The
#   CUDA C++ rung below adds only the first four; its k-tile is 512 FFMAs in 600 instructions.
#
# The last factor to cuBLAS is made of what neither rung has: warp tiling (each warp's
# fragments reused across a warp-shaped tile), asynchronous multi-stage copies that keep more
# bytes in flight, and tuning per GPU. On the course's H200, cuBLAS ran fp32 at 0.77 of the CUDA
# cores' 67 TFLOP/s datasheet peak at N = 8192 (51.3 TFLOP/s, lesson 00's ceilings recording), and at
# 0.57 at the ladder's N = 1024 (37.9 TFLOP/s). Register blocking done this way is predicted to
# *narrow* the gap (≥ 40 % of cuBLAS for the vectorised 128/8 rung, ≥ 60 % for the CUDA C++ rung, at
# N = 4096). Plainly: **no GPU has run the two vectorised rungs or the CUDA C++ rung yet** — their rows say "not measured
# here" or "prediction", and only their SASS counts are data.
#
# The CUDA C++ rung, as CuPy compiles it (NVRTC) and launches it (`tiling.matmul(a, b,
# "CUDA C++")` on a GPU; m, n and k must be multiples of 4 for its float4 loads):

# %%
print(tiling.SGEMM_CUDA_SOURCE)

# %% [markdown]
# ## The two barriers
#
# The tiled loop has two `cuda.syncthreads()`:
#
# 1. **after the load**: no thread may read the tiles until *every* thread has written its
#    element of them;
# 2. **after the compute**: no thread may overwrite the tiles with the next step's values while
#    another thread is still reading the current ones.
#
# ### Predict
# Delete barrier 1. Do some outputs come out wrong, all of them, or none? Delete barrier 2
# instead: which outputs go wrong now? Could a test that checks the result ever pass?

# %%
prediction_without_barrier_1 = "..."
prediction_without_barrier_2 = "..."

# %% [markdown]
# Numba's plain simulator runs threads one after another and can hide a race. The
# microscope's `"random"` schedule interleaves the threads at every memory access (change the
# seed for another interleaving), and its race detector reports every pair of accesses to the
# same shared word, at least one a write, that no barrier orders — whatever order they happened
# to run in. The map shows which outputs came out wrong.

# %%
tiling.barrier_explorer()

# %%
no_load_barrier = tiling.barrier_experiment("no barrier after the load", schedule="random", seed=0)
print(no_load_barrier.summary())
no_load_barrier.races[["line_a", "source_a", "line_b", "source_b", "array", "kind", "scope", "count"]]

# %% [markdown]
# Try the `"round-robin"` schedule (threads take turns at every access, close to a warp in
# lockstep): the *result* can come out right, and the race report still flags the kernel.
# That is why the lab's checker reads the race report, not only the answer.

# %%
lucky = tiling.barrier_experiment("no barrier after the compute", schedule="round-robin")
print(lucky.summary())

# %%
predictions.read_back(
    {"without barrier 1": prediction_without_barrier_1, "without barrier 2": prediction_without_barrier_2},
    "each missing barrier lets a thread read a tile element before it is written or after it is overwritten; "
    "which outputs go wrong depends on the schedule, and a result check can pass by luck",
    counted=f"the microscope, in both modes: {no_load_barrier.summary()}; {lucky.summary()}")

# %% [markdown]
# ## Explain (part A)
#
# * **Barriers.** `__syncthreads()` (Numba: `cuda.syncthreads()`) waits until every thread of
#   the block has reached it *and* makes their earlier shared- and global-memory writes visible
#   to the whole block (Programming Guide, § "Synchronization Functions"). It must be reached
#   by all threads of the block: inside an `if` that not all threads take, the behaviour is
#   undefined. Since Volta (cc 7.0) the threads of one warp are scheduled independently, so
#   even two lanes of the same warp race without a barrier — which is why the microscope
#   reports "same warp" races.
# * **Reuse.** The Best Practices Guide's section on shared memory in matrix multiplication
#   makes the same argument as the roofline above: the tile turns T separate global reads of a
#   value into one read and T shared-memory reads. Register blocking repeats the trick one level
#   down: each value read from shared memory feeds several multiply-adds held in registers.
# * **Limits.** A block has at most 1024 threads (so a T×T tile with one thread per output
#   stops at T = 32), and statically declared shared arrays at most 48 KB per block; more needs
#   dynamic shared memory and an explicit opt-in (up to 227 KB per block on cc 9.0). The module
#   refuses both before anything launches:

# %%
from gpucourse.errors import InvalidConfig

for bad in (lambda: tiling.check_tile(33), lambda: tiling.check_register_blocking(128, 64, 8),
            lambda: tiling.check_size("N", 0)):
    try:
        bad()
    except InvalidConfig as error:
        print("refused:", error)

# %% [markdown]
# ### From the field
# The HPC book among the course's source texts shows this very tiled kernel — zero fill at the
# edges, both barriers — and then advises reaching for a library (cuBLAS) before writing your own
# GEMM: the `fraction_figure` above is that advice measured, rung by rung. (The same book lists
# "~60 TFLOPS" for an fp32 cuBLAS GEMM on an H100; an fp32 GEMM with TF32 off cannot exceed the
# 67 TFLOP/s of the CUDA cores, so a figure near it means either an excellent kernel or tensor
# cores quietly in use — the ladder turns TF32 off to compare like with like.)
#
# How a profiler shows it: Nsight Compute's roofline chart places the kernel by the bytes it
# really moved at each level (L1, L2, DRAM) — the caches make the DRAM intensity higher than the
# "requested bytes" counted here.
#
# ### Key points of part A
# * A tile in shared memory turns T global reads into one: about T/4 FLOP per byte for a
#   T-tiled fp32 matmul; register blocking multiplies the reuse again, but pays only when the
#   instructions per FMA fall too (contiguous fragments: LDS.128; prefetch; count them in SASS).
# * Barrier 1 (after the load) and barrier 2 (before the next overwrite) are both required; a
#   missing one is a race even when the answer happens to come out right.
# * A tile stops growing at 1,024 threads and 48 KB of static shared memory per block.

# %% [markdown]
# ## Part B · Banks and the transpose (30 min)
#
# ### Objectives of part B
# By the end of part B you can:
# 1. predict the bank-conflict ways of a warp's shared-memory access from its byte addresses:
#    4-byte words, bank = word mod 32, distinct words per bank counted within each *phase* of the
#    request (the whole warp for elements of up to 4 bytes, half a warp for 8-byte elements,
#    a quarter for 16-byte ones);
# 2. fix the transpose's column-read conflict by padding, and say when "pad by one" is not enough;
# 3. tell a model's bound from a measurement when a source claims a speed-up.

# %% [markdown]
# ## Banks: how shared memory serves a warp
#
# Shared memory is split into 32 **banks**; consecutive 4-byte words sit in consecutive banks
# (bank = word index mod 32), so one pass delivers at most 32 words = 128 bytes. A warp's access
# of 4-byte elements is served in one pass if its 32 lanes touch 32 different banks, or the
# *same* word (a broadcast). Lanes that touch *different* words in one bank are served one after
# another: a k-way conflict costs k passes.
#
# Wider elements do not fit in one pass: 32 lanes × 8 bytes is 256 bytes. A float64 access is
# served in two **phases** of 16 lanes (128 bytes each), and only lanes of the same phase can
# conflict; 16-byte elements go in four phases of 8 lanes. So a warp reading 32 consecutive
# float64 values is **conflict-free** — although it touches 64 words, two in every bank — and the
# rule "count distinct words per bank over the whole warp" would wrongly call it 2-way.
#
# The shared-memory transpose writes a 32×32 tile row by row (conflict-free) and reads it
# column by column, so that both global accesses are coalesced. Reading a column of a 32-wide
# tile means words 0, 32, 64, … — all in bank 0.
#
# ### Predict
# How many ways is the column read of a 32×32 float32 tile? Of a 32×33 tile (one unused column
# of padding)? Of a 16×17 tile, read the same way by a block of 16 × 8 threads (so one warp
# spans two rows of threads)? And the column read of a 32×32 **float64** tile (each element two
# words, half-warp phases)? Write your four answers.

# %%
prediction_ways_32x32 = ...
prediction_ways_32x33 = ...
prediction_ways_16x17 = ...
prediction_ways_32x32_float64 = ...

# %% [markdown]
# Each square is one lane, placed in the bank its word falls in; a column of k squares is a
# k-way conflict. Move the sliders: tile width, padding, whether the warp reads a column or
# writes a row, and the element type. With float64 each lane fills two banks (two squares with
# its number) and the two phases are drawn side by side: the ways are those of the worse phase.

# %%
tiling.bank_explorer()

# %%
predictions.read_back(
    {"32×32": prediction_ways_32x32, "32×33": prediction_ways_32x33, "16×17": prediction_ways_16x17,
     "32×32 float64": prediction_ways_32x32_float64},
    {"32×32": tiling.transpose_bank_ways(32, 0)["column"], "32×33": tiling.transpose_bank_ways(32, 1)["column"],
     "16×17": tiling.transpose_bank_ways(16, 1, 8)["column"],
     "32×32 float64": tiling.transpose_bank_ways(32, 0, dtype="float64")["column"]},
    counted="bank arithmetic on every lane's word, exact in both modes (the explorer above draws each case)")

# %% [markdown]
# ## The transpose ladder
#
# Four kernels with the same arithmetic (none) and the same bytes: a tile-shaped **copy** (the
# yardstick), the **naive** transpose (reads rows, writes columns: each lane's store lands in a
# different row), the **shared**-tile transpose, and the same with the tile **padded**. The
# left panel is bandwidth (measured now on a GPU, else recorded, else absent); the right panel
# is the bank-conflict ways the microscope counts on the very same kernels.
#
# Each thread of a 32 × 8 block moves four elements, and the kernels issue its **four global loads
# before any store** (into four registers, then four shared stores, the barrier, four shared loads,
# four global stores). Written as one loop of `buf[...] = src[...]`, the compiler may not hoist them:
# numba-cuda has no `noalias`, so a store might change what the next load reads, and each thread kept
# one load in flight. The course's H200 recording timed those earlier kernels: the tile copy reached
# 0.70 of the device's copy ceiling and the padded transpose 0.81 of the tile copy, 0.56 of the ceiling
# (`data/reference/nvidia-h200/expectations.json`). Four loads in flight per thread is the prediction
# that closes the gap (lesson 05 explains it: bytes in flight ÷ latency); the GPU tier holds the
# padded transpose to ≥ 0.85 of the course's best copy on the next run. Sectors and bank ways do not
# change: the same accesses, in a different order.

# %%
tiling.transpose_explorer()

# %% [markdown]
# The microscope's full account of each rung (global sectors per warp request, 4 = ideal for
# 32 float32 values; shared-memory ways per access):

# %%
tiling.transpose_counts(tile=32, pad=1)

# %% [markdown]
# In Nsight Compute's words, a shared-memory access is an *instruction* served in *wavefronts*; each
# wavefront beyond the first is a *bank conflict*. The unpadded tile's column read under those names,
# beside the course's recordings of the same kernel (a bigger launch: counts per warp; recorded on
# that GPU, not on this machine). For the padded tile, change the call to
# `tiling.trace_transpose("shared+pad", pad=1)` and `"shared_transpose pad=1"`: 1 wavefront per instruction.

# %%
from gpucourse.measure import ncu

ncu.beside_recorded(tiling.trace_transpose("shared", pad=0).profile(), "shared_transpose pad=0", rows="shared")

# %% [markdown]
# ### A claim to test: "two transposes with equal arithmetic can differ ~20× in bandwidth"
#
# One of the source texts says so, without a GPU, a size or a kernel. The sector model (lesson
# 03) counts a warp's read as 4 sectors and its write as 32, against 4 + 4 for a copy: 4.5× more
# sector traffic. That is the **model's** figure, not a hardware bound. The L2 cache can merge
# much of it (the neighbouring warps write the other parts of those sectors moments later), which
# makes the real cost smaller; and it can also be larger than the model: an L2 miss may fetch up
# to 128 bytes from DRAM rather than one 32-byte sector, partial-sector writes may cost DRAM
# read-modify-writes, and a column walk touches many pages (TLB misses). The model alone does
# not predict 20×, nor rule it out. The table shows what was measured (on a GPU, or in a
# recording); the course's GPU-tier test measures it on every GPU it runs on.

# %%
tiling.folklore_table()

# %% [markdown]
# ## Explain (part B)
#
# * **Banks.** The CUDA C++ Programming Guide (§ "Shared Memory", compute capability 5.x and
#   later): shared memory has 32 banks; successive 32-bit words map to successive banks; a
#   request whose addresses fall in n distinct banks is served at once; addresses in the same
#   bank but different words are a bank conflict and the hardware splits the request into as
#   many conflict-free requests as needed; lanes reading the same word get it by broadcast.
#   Column k of a tile W words wide is at words k, W + k, 2W + k, …: with W = 32 all in one
#   bank (32-way); with W = 33 the bank advances by one per row (conflict-free). With a 16-wide
#   tile a warp covers two rows of threads, and W = 17 leaves a 2-way conflict: padding by one
#   is tuned to 32-wide tiles — count, don't guess.
# * **Wider elements.** A warp reading 8-byte elements asks for 256 bytes, more than the 32 banks
#   deliver in one pass (128 bytes); the request is served in two phases of 16 lanes, and the
#   conflict ways are those of the worse phase (16-byte elements: four phases of 8 lanes). This is
#   the rule the course's microscope counts with (`gpucourse/microscope/analysis.py`), and
#   Nsight Compute's shared-memory wavefronts let you check it on a GPU.
#
# ### From the field
# The cheat sheet's one-liner "pad shared arrays to avoid bank conflicts" is true for the 32-wide
# float32 transpose and not automatically for other shapes, as the bank picture shows.
#
# How a profiler shows it: Nsight Compute's *Memory Workload Analysis* reports shared-memory
# bank conflicts per kernel (the metrics `l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld`
# and `..._op_st`), and shared-memory *wavefronts* per request: a 32-way conflict is 32
# wavefronts where one would do.

# %% [markdown]
# ## On other GPUs
# The figures in this lesson are those of an H100/H200 (cc 9.0: up to 227 KB of shared memory per
# block, 50 MB or more of L2). What changes elsewhere:
# * **T4 (Turing, cc 7.5)**: 40 SMs, 64 KB of shared memory per SM (and at most 64 KB per block),
#   a 4 MB L2 and 320 GB/s of GDDR6 (NVIDIA T4 datasheet). The tiles here fit (a 32×32 float tile
#   is 4 KB), but fewer blocks share an SM, and with so little DRAM bandwidth the memory-bound
#   rungs and transposes are DRAM-limited sooner, and when DRAM is the limit, removing bank
#   conflicts (padding the transpose tile) gains less.
# * **GeForce cards (RTX 30xx/40xx/50xx)**: 100 KB of shared memory per SM; their fp32 CUDA-core
#   rate is high but fp64 runs at 1/64 of it (NVIDIA's Ampere GA102 and Ada architecture
#   whitepapers), which matters for the float64 check against which every rung is verified.
# * The bank rules do not change: 32 banks of 4 bytes on every compute capability this course
#   models (7.0 to 12.0).

# %% [markdown]
# ### Key points of part B
# * Bank = 4-byte word index mod 32; count the distinct words per bank *within each phase* of a
#   warp's request (whole warp for ≤ 4-byte elements, half-warps for 8-byte ones): a contiguous
#   float64 warp read is conflict-free.
# * Pad the tile so a column walks across the banks — and check the padding with the microscope.
# * A bound from a model is not a measurement: the transpose's sector-model figure is a guide,
#   not a ceiling.
#
# **Next:** [lab 04](../labs/lab04_shared_memory/lab04_shared_memory.ipynb) — write the tiled
# matmul (correct for any N) and a conflict-free transpose; then lesson 05, occupancy.
