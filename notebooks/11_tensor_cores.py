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
# # 11 · Tensor cores from Python
#
# **Lesson 04's tiled matmul, written again in Triton with one `tl.dot`, runs on tensor cores. In this
# lesson you will run it without a GPU, read what the compiler makes of it for three GPU generations
# (Ampere, Hopper, Blackwell), see which thread holds which element of a tensor-core multiply, and place
# it under the tensor-core roofs of the roofline.**
#
# *48 minutes — objectives and wrap-up 6, §1 the kernel in Triton 3, §2 running it without a GPU 7,
# §3 one kernel, three generations 9, §4 fragments 7, §5 the roofline's tensor-core roofs 7, §6 the
# explorer 9 · prerequisites: lesson 04 (tiling, shared memory), lesson 07 (fp16, bf16, TF32), lesson 05
# (occupancy, registers); no GPU needed.*
#
# ## Objectives
# By the end you can:
# 1. read a Triton matmul: one program per output tile, `tl.dot` on tiles, masks at the edges;
# 2. run it in Triton's interpreter on a CPU, and say why bf16 is refused there;
# 3. name, for each generation, who issues a tensor-core multiply and where its operands live: a warp
#    (`mma.sync`, sm_80), a warpgroup (`wgmma`, sm_90a), one thread with tensor memory (`tcgen05`, sm_100a);
# 4. count the tensor-core instructions a tile needs, and check the count in the compiled SASS;
# 5. say which lane holds which element of an `mma.sync` fragment;
# 6. place a large matmul on the roofline under each generation's tensor-core roof, with the roof's source.
#
# Every number below says where it comes from: **compiled now** on this computer's CPU (Triton compiles
# for a GPU it does not have), **run now** in Triton's interpreter (NumPy on the CPU), a **recording** of
# both made on a CPU (where Triton is not installed: macOS, Windows), **counted** by the microscope, or
# **published** by others. Only on a GPU does the explorer also **measure** the kernel, against
# `torch.matmul`.

# %%
from gpucourse.lessons import tensorcores
from gpucourse.lessons.tensorcores import figures, recordings
from gpucourse.measure import runtime

runtime.banner()

# %%
print(recordings.mode_line())

# %% [markdown]
# ## 1 · Lesson 04's matmul, in Triton (3 min)
#
# In lesson 04 a block of threads computed one tile of C: each thread one element, the tiles of A and B
# staged in shared memory by hand, a `syncthreads` between loading and using them. Triton moves the
# unit up one level. A **program** computes a whole BLOCK_M × BLOCK_N tile of C, and a tile is one value:
# `tl.load` brings a tile of A, `tl.dot` multiplies two tiles. Which thread does what, how the tiles are
# staged in shared memory, how many copies are in flight and which tensor-core instruction multiplies
# are the compiler's choices, made for the GPU it compiles for. The edges are masks: a load outside A or
# B reads 0, a store outside C writes nothing, so any M, N, K works.
#
# <details><summary>Description of the picture</summary>
#
# The kernel's source: a function of pointers, sizes and strides, with three compile-time tile sizes.
# It takes its tile's row and column indices from its program id, starts an fp32 accumulator at zero,
# walks K in steps of BLOCK_K (load a tile of A, load a tile of B, `acc = tl.dot(a, b, acc)`) and
# stores the accumulator under a mask.
#
# </details>

# %%
import inspect

print(inspect.getsource(tensorcores.matmul_kernel))

# %% [markdown]
# ## 2 · Running it without a GPU (7 min)
#
# With `TRITON_INTERPRET=1`, Triton runs each program in NumPy instead of compiling it. The lesson turns
# the interpreter on for this one kernel only (`tensorcores.run_interpreted`), so the compiler below still
# compiles. It is slow (a 256³ matmul takes seconds) and models nothing of the hardware: `tl.dot` is a
# NumPy matmul there. It is for checking that the kernel computes the right thing, on sizes that are not
# multiples of the tile (100 × 72 × 64 below, so the masks matter).
#
# ### Predict
# The kernel accumulates in fp32. For fp16 inputs A and B, how far from the exact product (in float64,
# from the same fp16 inputs) do you expect C to be: about fp16's precision (1e-3 of the values), fp32's
# (1e-7), or exact?

# %%
prediction_fp16_relative_error = ...  # a number, e.g. 1e-3

# %%
checks = [recordings.interpreted_check(100, 72, 64, dtype) for dtype in ("float16", "float32")]
for check in checks:
    print(f"{check.m}×{check.n}×{check.k} {check.dtype}: max |error| {check.max_abs_error:.2g} of values up to "
          f"{check.max_abs_value:.3g} — {'matches' if check.matches else 'DIFFERS'} ({check.source})")

# %%
from gpucourse.viz import predictions

predictions.read_back(prediction_fp16_relative_error,
                      "about fp32's: the products of fp16 inputs are exact in fp32, only the sums round",
                      counted=f"the interpreter: {checks[0].max_abs_error / checks[0].max_abs_value:.1g} "
                              f"relative ({checks[0].source})")

# %% [markdown]
# **bf16 is refused in the interpreter, before anything runs.** Triton's interpreter computes a bf16
# `tl.dot` silently wrong (errors around 1e10 where fp16 is exact, in Triton 3.7.1 and 3.9.0; the course's
# test suite keeps reproducing it, so a Triton that fixes it is noticed). A silently wrong result would
# teach the wrong thing, so the lesson stops with one line instead. A GPU computes bf16 correctly: the
# compiled bf16 kernel is below, in §3's `generations_table(dtype="bfloat16")`.

# %%
from gpucourse.errors import InvalidConfig

try:
    recordings.interpreted_check(100, 72, 64, "bfloat16")
except InvalidConfig as error:  # refused before launch: nothing ran
    print(f"{type(error).__name__}: {error}")

# %% [markdown]
# ## 3 · One kernel, three generations (9 min)
#
# Triton can compile for a GPU that is not there: `triton.compile` with a target such as
# `GPUTarget("cuda", 90, 32)` runs its own LLVM and `ptxas`, and `cuobjdump` (shipped in Triton's wheel)
# disassembles the result to SASS. `tensorcores.compile_for(cc)` does this for sm_80, sm_90 and sm_100, with
# a 128 × 128 × 64 tile, 4 warps and 3 stages (what a real fp16 GEMM uses), and counts the instructions
# that matter. The table puts the three side by side; its last column says whether it was compiled now or
# read from the recording.
#
# ### Predict
# A 128 × 128 × 64 tile step is 128·128·64 multiply-adds. On sm_80 one `mma.sync.m16n8k16` (SASS `HMMA`)
# does 16·8·16 of them for one warp, and the 4 warps share the tile. On sm_90 one `wgmma` m64n128k16 (SASS
# `HGMMA`) does 64·128·16 for a whole warpgroup (the 4 warps together). How many `HMMA` does each warp
# issue per K-step on sm_80, and how many `HGMMA` does the warpgroup issue on sm_90?

# %%
prediction_hmma_per_warp = ...
prediction_hgmma_per_warpgroup = ...

# %%
table = figures.generations_table()
table

# %%
tile = recordings.DEFAULT_CONFIG["tile"]
sm80, _ = recordings.compiled_facts(80)
sm90, _ = recordings.compiled_facts(90)
predictions.read_back(
    {"HMMA per warp (sm_80)": prediction_hmma_per_warp, "HGMMA per warpgroup (sm_90)": prediction_hgmma_per_warpgroup},
    {"HMMA per warp (sm_80)": figures.hmma_per_warp(tile), "HGMMA per warpgroup (sm_90)": figures.wgmma_per_warpgroup(tile)},
    counted=f"the compiled SASS (one warp's code): HMMA ×{sm80.sass['HMMA']} on sm_80, HGMMA ×{sm90.sass['HGMMA']} "
            f"on sm_90 ({sm90.mma_opcodes[0]})")

# %% [markdown]
# **What each generation changes.** Read the table row by row; each claim names its generation.
#
# * **sm_80 (Ampere A100; also the consumer parts sm_86, sm_89 and sm_120): `mma.sync`.** A *warp*
#   multiplies. Each of its 32 lanes holds a few elements of A, B and C in its own registers (the
#   *fragments* of §4), so the accumulator of a 128 × 128 tile lives in registers: see the sm_80 row's
#   register count, at or near the 255 a thread can have. `ldmatrix` (SASS `LDSM`) moves tiles from shared
#   memory into fragments, and `cp.async` (SASS `LDGSTS`) copies global memory to shared memory without
#   passing through registers, which is how the stages overlap loading with multiplying.
# * **sm_90a (Hopper H100/H200): `wgmma.mma_async`.** A *warpgroup* of 4 warps multiplies one much larger
#   tile (m64nNk16, N up to 256), reading B (and optionally A) straight from shared memory through a
#   descriptor, and asynchronously: the warps issue it, go on, and wait later (`wgmma.wait_group`). Fewer,
#   larger instructions: compare the HMMA and HGMMA counts.
# * **sm_100a (Blackwell B200): `tcgen05.mma`.** *One thread* issues the multiply for the whole CTA, and the
#   accumulator lives in a new on-chip **tensor memory** (TMEM, allocated with `tcgen05.alloc`: the table's
#   tensor-memory columns), not in registers; `tcgen05.ld` (SASS `LDTM`) brings it back to registers at the
#   end, and completion is signalled through `mbarrier`s (SASS `SYNCS`).
#
# The same `tl.dot` became all three. The accumulator's move from registers (sm_80) to tensor memory (sm_100)
# is why the largest tiles, which the registers of sm_80 cannot hold, become possible. What the table does
# **not** show is TMA (`cp.async.bulk.tensor`, SASS `UTMALDG`): this kernel loads through pointers; a kernel
# that loads through `tl.make_tensor_descriptor` gets TMA on sm_90 and sm_100.
#
# bf16 compiles too (to the same instructions with bf16 types), and fp32 becomes TF32 on the tensor cores,
# the GPU's default for `tl.dot` (lesson 07):

# %%
figures.generations_table(dtype="bfloat16")[["GPU", "mma opcodes", "registers", "shared B", "from"]]

# %% [markdown]
# ## 4 · Fragments: who holds what (7 min)
#
# On sm_80 no lane holds a whole matrix. For `mma.sync.m16n8k16` with fp16 inputs, A is 16 × 16, B 16 × 8, C
# 16 × 8, and each of the 32 lanes holds 8 elements of A, 4 of B and 4 of C in numbered register slots. The PTX
# ISA fixes the mapping; the course's microscope (`gpucourse.microscope.fragments`) implements its table and
# checks it three ways (spot checks from the ISA's figures, `ldmatrix`'s own table, and the fragment-level
# multiply equal to A·B + C).
#
# <details><summary>Description of the picture</summary>
#
# A 16 × 16 grid, one cell per element of A, coloured by the lane that holds it and labelled "T5 a2"
# (lane 5, slot a2). Each run of four lanes (a "group") shares two rows, the group's row and the row 8 below
# it; within a group each lane holds two neighbouring columns, and the same two columns 8 further right. The
# colours form horizontal bands of four lanes, repeated in the lower half and the right half.
#
# </details>

# %%
figures.fragment_figure("a")

# %% [markdown]
# ### Predict
# With `groupID = lane >> 2` and `threadID_in_group = lane % 4`, lane 5 is in group 1, thread 1 of its group.
# Which rows and columns of A does it hold?

# %%
prediction_lane5_rows = ...  # e.g. [0, 8]
prediction_lane5_columns = ...

# %%
held = figures.lane_elements(5, "a")
predictions.read_back({"rows": prediction_lane5_rows, "columns": prediction_lane5_columns},
                      {"rows": sorted({r for _, r, _ in held}), "columns": sorted({c for _, _, c in held})},
                      counted="the microscope's fragment table (exact, from the PTX ISA)")
held

# %% [markdown]
# This is why lesson 04's bank conflicts matter again: `ldmatrix` has each lane of a group of 8 fetch one
# 16-byte row of an 8 × 8 matrix, and rows of a tile stored with 128-byte pitch all land in the same banks
# unless the tile is *swizzled* in shared memory. Triton swizzles for you; the microscope's
# `fragments.ldmatrix_bank_ways` counts both cases. On sm_90 and sm_100 the fragments of A and B stay in
# shared memory (descriptors say how they are laid out), and on sm_100 C's fragments are in tensor memory.

# %%
from gpucourse.microscope import fragments

rows = fragments.a_tile_addresses(64)
{"ldmatrix.x4 on a 64-element-wide fp16 tile: bank ways": fragments.ldmatrix_bank_ways(rows),
 "the same tile swizzled": fragments.ldmatrix_bank_ways(fragments.a_tile_addresses(64, swizzle=True))}

# %% [markdown]
# ## 5 · The roofline's tensor-core roofs (7 min)
#
# Lesson 00 drew the roofline `min(peak FLOP/s, I × bandwidth)`. A tensor core raises the roof. The table has
# one datacentre GPU per generation: its dense bf16 datasheet peak and the maximum achievable matmul
# throughput others measured (ml-engineering's "MAMF", the best of many shapes with `torch.matmul`), and the
# streaming bandwidth gpu-stream measured where it has that GPU. The Hopper row takes the H100 SXM's matmul row
# (the table's note: "H200 is the same") and the H200's bandwidth, as lesson 00 does; gpu-stream has no
# Blackwell, so sm_100 gets a roof without a slope. None of these is your GPU.

# %%
figures.roofs_table()

# %% [markdown]
# ### Predict
# A 4096³ fp16 matmul that reads A and B once and writes an fp32 C does 2·4096³ FLOPs on 2·4096²·2 + 4096²·4
# bytes. Is it under the compute roof or the bandwidth slope on each generation?

# %%
prediction_4096_matmul_limited_by = "..."  # "compute" or "bandwidth"

# %% [markdown]
# <details><summary>Description of the picture</summary>
#
# A log-log roofline: TFLOP/s against FLOP per byte. For Ampere (A100) and Hopper (H200 bandwidth, H100 matmul
# row) a solid line rises with slope 1 (bandwidth) and turns flat at the published maximum achievable bf16
# matmul; Blackwell (B200) has only its flat roof. Dotted lines just above each roof are the datasheet peaks.
# A dashed vertical line marks the 4096³ matmul far to the right of every ridge point; another marks an fp32
# vector add far to the left.
#
# </details>

# %%
figures.roofline_figure(4096)

# %%
ridges = figures.roofs_table()["ridge point (FLOP/byte)"].dropna()
predictions.read_back(prediction_4096_matmul_limited_by,
                      f"compute: {figures.matmul_intensity(4096):.0f} FLOP/B, far right of every ridge point "
                      f"({', '.join(f'{r:.0f}' for r in ridges)} FLOP/B)",
                      counted="published roofs, not your GPU (the chart's caption names them)")

# %% [markdown]
# Under the compute roof, what decides how close a kernel gets is whether the tensor cores are kept fed:
# tiles large enough to reuse each loaded byte many times, enough stages in flight to hide the loads, and
# enough registers (or tensor memory) for the accumulator. That is what the explorer shows.
#
# ## 6 · The explorer: tiles, stages and warps (9 min)
#
# Pick the generation to compile for, the tile, the number of pipeline stages and of warps. The chart shows,
# as a share of what one SM allows, the shared memory a block needs (all stages' A and B tiles), the registers
# each thread needs (255 is the most a thread can have; beyond it, spills to local memory, slow), and how many
# warps can be resident per SM (lesson 05's occupancy calculator). The title lists the tensor-core and copy
# instructions. On a GPU a fourth bar measures the kernel, compiled for *this* GPU, against `torch.matmul`
# (cuBLAS) at 4096³ fp16, under the live contract; without one, nothing is timed.
#
# ### Predict
# Take the largest tile, 128 × 256 × 64, with 4 warps. How many fp32 accumulator registers does each thread
# need for the tile of C alone on sm_80, and what happens then? Check it, then switch to 8 warps.

# %%
prediction_accumulators_per_thread = ...

# %% [markdown]
# <details><summary>Description of the picture</summary>
#
# Three bars in percent of one SM's limit: shared memory per block, registers per thread, resident warps per
# SM, each labelled with its value (KiB, registers of 255 and bytes spilled, warps of the SM's maximum). The
# title names the generation, tile, stages and warps and the tensor-core and copy instruction counts. On a GPU,
# a fourth, hatched bar: the Triton kernel's TFLOP/s as a percentage of torch.matmul's.
#
# </details>

# %%
explorer = figures.explorer_widget()
explorer

# %%
big = recordings.compiled_facts(80, tile=(128, 256, 64), num_warps=4, num_stages=3)[0]
predictions.read_back(prediction_accumulators_per_thread, 128 * 256 // (4 * 32), stands_in=explorer,
                      counted=f"compiled for sm_80: {big.registers} registers, {big.stack_bytes} bytes of "
                              f"spills per thread")

# %% [markdown]
# 128 × 256 fp32 accumulators over 128 threads is 256 registers each, more than a thread can have: the
# compiler spills to local memory on sm_80 (and on sm_90, where the accumulator of `wgmma` is in registers too).
# 8 warps halve it. On sm_100 the accumulator is in tensor memory, yet 4 warps still spill a little there: at
# the end the tile comes back into registers (`tcgen05.ld`) to be stored, so registers still bound the tile.
#
# ## Questions
# 1. Why can the interpreter check the kernel's *result* but tell you nothing about its *speed*?
# 2. The sm_90 row needs far fewer tensor-core instructions than the sm_80 row for the same tile. Does that
#    alone make it faster? What else changed (who issues, where the operands live, asynchrony)?
# 3. Which generation keeps the accumulator out of registers, and what does that free registers for?
# 4. A kernel with 4 stages needs more shared memory than one with 2. When does that cost occupancy, and
#    when is it worth it?
#
# ## Key points
# * `tl.dot` on tiles is the whole tensor-core interface in Triton; the compiler picks `mma.sync` (sm_80),
#   `wgmma` (sm_90a) or `tcgen05.mma` (sm_100a), the layouts and the staging.
# * Without a GPU: the interpreter checks results (fp16/fp32; never bf16 there), and the compiler shows the
#   instructions, registers and shared memory of every generation.
# * Count instructions from shapes: tile multiply-adds ÷ the instruction's m·n·k ÷ who issues it.
# * The tensor-core roof is several times the CUDA-core roof; a large matmul sits far right of the ridge,
#   and only tiles, stages and registers decide how close to the roof it gets.
#
# There is no lab for this lesson yet. On a GPU, the explorer's fourth bar is the measured comparison with
# cuBLAS; without one, nothing here is a timing.
