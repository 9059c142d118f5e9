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
# # 00a · Your first kernels
#
# **In 55 minutes you will write a kernel as a function of its thread's coordinates, launch it with
# enough threads and a bounds check, and see — with the microscope — which thread touches which
# element; in 15 optional minutes, the same kernel in CuPy and in CUDA C++.** (*The microscope* is
# the course's tracing simulator: it runs a kernel in Numba's CUDA simulator and
# records every memory access of every thread, so it can count what a GPU would do, with or without a
# GPU.)
#
# *Teaching 33 min · predictions and explorers 22 min · optional sections (marked in their headings)
# 15 min · then lab 00a (90 min, eight short puzzles) ·
# prerequisites: Python and NumPy; lesson 00 helps but is not needed.*
#
# ## Objectives
# By the end you can:
# 1. compute the element a thread handles from `threadIdx`, `blockIdx` and `blockDim` (and say what
#    `cuda.grid(1)` and `cuda.grid(2)` return);
# 2. choose a launch — blocks and threads per block — for any n, and predict how many threads the
#    bounds check stops;
# 3. write a 2-D kernel and a grid-stride loop, and predict how many elements each thread handles;
# 4. say when Numba copies arrays between host and device, and avoid the copies you do not need;
# 5. *(optional section)* read the same kernel as Numba, as a CuPy `ElementwiseKernel` and as CUDA
#    C++, and find its two loads, one fused multiply-add and one store in the PTX of the Numba and
#    CUDA C++ versions.
#
# This lesson runs with or without a GPU: without one, kernels run in Numba's CUDA simulator (results
# correct to rounding, no timings: the PTX section shows why a GPU's last bit can differ), and the CuPy
# kernels are shown compiled rather than run.

# %%
from gpucourse.measure import runtime

runtime.banner()

# %% [markdown]
# ## A kernel is a function of its thread's coordinates
#
# You write a kernel for **one** thread, and launch it for many: `kernel[blocks, threads_per_block](...)`
# starts `blocks × threads_per_block` threads, all running the same function. The only thing that
# tells them apart is where they sit: `cuda.threadIdx.x` (the thread's index in its block, from 0),
# `cuda.blockIdx.x` (its block's index in the grid) and `cuda.blockDim.x` (threads per block). The
# element a thread works on is computed from them:
# `i = blockIdx.x × blockDim.x + threadIdx.x` — which `cuda.grid(1)` returns in one call.
#
# Here is a kernel whose only job is to write down each thread's coordinates:

# %%
from gpucourse.lessons import first_kernels

print(first_kernels.kernel_source(first_kernels.who_am_i))

# %% [markdown]
# ### Predict
# Launch it as `who_am_i[3, 8](...)`: 3 blocks of 8 threads. Which block and which `threadIdx.x`
# write element 13? What does that thread's `cuda.grid(1)` return?

# %%
prediction_element_13 = "block ..., threadIdx.x ..., cuda.grid(1) ..."

# %% [markdown]
# The picture is what the kernel itself wrote (it ran just now, on the GPU or in the simulator):
# one column per element, coloured by the block of the thread that wrote it.
#
# <details><summary>Description of the picture</summary>
#
# A table-like grid of 24 columns (elements 0–23) and three rows: blockIdx.x,
# threadIdx.x and cuda.grid(1). Columns 0–7 are one colour (block 0), 8–15 a second (block 1) and
# 16–23 a third (block 2). The threadIdx.x row counts 0 to 7 three times; the cuda.grid(1) row counts
# 0 to 23, equal to the element number.
#
# </details>

# %%
first_kernels.coordinates_figure(blocks=3, threads_per_block=8)

# %%
from gpucourse.viz import predictions

element_13 = first_kernels.coordinates_table(3, 8).iloc[13]
predictions.read_back(
    prediction_element_13, f"block {element_13['blockIdx.x']}, threadIdx.x {element_13['threadIdx.x']}, "
    f"cuda.grid(1) {element_13['cuda.grid(1)']} (13 = 1 × 8 + 5)",
    counted="the picture above is what the kernel itself wrote, in both modes")

# %% [markdown]
# ## The launch and the bounds check
#
# A launch gives every block the same number of threads, so n elements need
# `blocks = ⌈n / threads_per_block⌉` blocks — and unless n is a multiple of the block size, the last
# block has threads **past the end** of the arrays. Every one-element-per-thread kernel therefore
# starts with a **bounds check**: `if i < out.size:`. SAXPY (`out = a·x + y`, the "hello world" of
# GPU kernels):

# %%
print(first_kernels.kernel_source(first_kernels.saxpy))

# %% [markdown]
# ### Predict
# n = 200 with 64 threads per block: how many blocks, how many threads launched, and how many stop at
# the bounds check? And with 128 threads per block?

# %%
prediction_blocks_200_64 = ...
prediction_stopped_200_64 = ...

# %%
plan_64 = first_kernels.launch_plan(200, 64)
plan_64, first_kernels.launch_plan(200, 128)

# %%
predictions.read_back({"blocks": prediction_blocks_200_64, "stopped": prediction_stopped_200_64},
                      {"blocks": plan_64["blocks"], "stopped": plan_64["threads_past_the_end"]},
                      counted="⌈200/64⌉ blocks launch 256 threads; those past 199 stop at the check")

# %% [markdown]
# **Without the bounds check**, the 56 extra threads of n = 200 read `x[200]`… and write `out[200]`…:
# memory that is not theirs. On a GPU this is not always a crash: the read may return another
# array's data and the write may silently corrupt it, or the kernel stops with an "illegal address"
# error (`compute-sanitizer` finds it). The microscope checks every access against the array's
# bounds and reports the first one past the end — which thread, which line:

# %%
print(first_kernels.out_of_bounds(n=200, threads_per_block=64))

# %% [markdown]
# ## Which thread touches which element
#
# The microscope runs SAXPY in the simulator and records every global-memory access of every thread.
# One marker per read of `x`, at (element, thread that read it): a diagonal means thread i reads
# element i, once; the threads below the last marker stopped at the bounds check. Move the sliders:
# the title gives the launch and the microscope's per-thread counts.
#
# <details><summary>Description of the picture</summary>
#
# A scatter chart, element index of x on the horizontal axis, global thread index on
# the vertical axis (thread 0 at the top), dotted horizontal lines at the block edges. The markers form
# one straight diagonal from (0, 0) to (199, 199); the threads 200–255 of the last block have no marker.
#
# </details>

# %%
first_kernels.launch_explorer()

# %% [markdown]
# ## 2-D grids
#
# For a matrix, a 2-D launch is more natural: blocks of `(bx, by)` threads, a grid of
# `(⌈cols / bx⌉, ⌈rows / by⌉)` blocks, and `col, row = cuda.grid(2)` — **x first**, so x runs along a
# row (the columns) and y down the rows. The bounds check now has two halves.

# %%
print(first_kernels.kernel_source(first_kernels.saxpy_2d))

# %% [markdown]
# ### Predict
# A 20 × 40 array (20 rows, 40 columns) with blocks of 16 × 8 threads: what grid, and how many idle
# threads?

# %%
prediction_grid_20x40 = (..., ...)

# %% [markdown]
# <details><summary>Description of the picture</summary>
#
# A 24-row by 48-column grid of cells cut by black lines into 3 × 3 blocks of 16 × 8
# cells. The 20 × 40 array is outlined with a dashed rectangle at the top left; its cells are coloured by
# the block that owns them (nine colours), and the cells outside it — the right 8 columns and bottom 4
# rows — are grey: idle threads.
#
# </details>

# %%
first_kernels.grid_2d_figure(rows=20, cols=40, block_x=16, block_y=8)

# %% [markdown]
# The microscope confirms the launch: each of the 800 elements written once, and nothing read or written
# by the 352 idle threads.

# %%
report_2d = first_kernels.trace_saxpy_2d(rows=20, cols=40, block_x=16, block_y=8)
accesses = report_2d.thread_accesses()
print(report_2d)
print("threads that stored:", accesses[accesses.op == "store"].thread.nunique(),
      "· most stores by one thread:", report_2d.per_thread_max("store", "out"))

# %%
plan_2d = first_kernels.grid_2d(20, 40, 16, 8)
predictions.read_back(prediction_grid_20x40, f"grid {plan_2d['grid']}, {plan_2d['idle_threads']} idle threads",
                      counted=f"the microscope saw {accesses[accesses.op == 'store'].thread.nunique()} threads store "
                              "and the others touch nothing, in both modes")

# %% [markdown]
# ## Grid-stride loops
#
# A launch does not have to match n. In a **grid-stride loop** each thread starts at its `cuda.grid(1)`
# and steps by the number of threads launched (`cuda.gridsize(1)`) until it passes n: any grid covers
# any n, and the bounds check is the loop's condition. It lets you launch a grid sized for the GPU
# (a few blocks per SM) rather than for the data.

# %%
print(first_kernels.kernel_source(first_kernels.saxpy_grid_stride))

# %% [markdown]
# ### Predict
# n = 300, 2 blocks of 32 threads (64 threads). How many elements does thread 0 handle? Thread 63?

# %%
prediction_thread_0, prediction_thread_63 = ..., ...

# %% [markdown]
# <details><summary>Description of the picture</summary>
#
# A scatter chart like the one above, element index of x across, thread 0–63 down. The
# markers form five short diagonals side by side — element i is read by thread i mod 64 — the fifth
# covering only elements 256–299, read by threads 0–43.
#
# </details>

# %%
strided = first_kernels.trace_grid_stride(n=300, blocks=2, threads_per_block=32)
print("fewest and most elements per thread (model):", first_kernels.elements_per_thread(300, 64),
      "· most reads of x by one thread (microscope):", strided.per_thread_max("load", "x"))
strided.picture_threads("x")

# %%
predictions.read_back({"thread 0": prediction_thread_0, "thread 63": prediction_thread_63},
                      {"thread 0": len(range(0, 300, 64)), "thread 63": len(range(63, 300, 64))},
                      counted=f"the microscope counted at most {strided.per_thread_max('load', 'x')} reads of x "
                              "by one thread, in both modes")

# %% [markdown]
# ## Host and device arrays: when copies happen
#
# A GPU has its own memory. Numba accepts NumPy arrays in a launch for convenience, and then copies
# **every** array argument to the device before the launch and **back** after it — it cannot know
# which ones the kernel wrote. In a loop of launches that is two copies per array per launch. Move the
# data once instead: `dx = cuda.to_device(x)` copies to the device, `cuda.device_array(n, dtype)`
# allocates there without copying, and `dout.copy_to_host()` brings a result back when you need it.
# (With CuPy, `cupy.asarray(x)` and `cupy.asnumpy(d)` do the same.) Numba can warn about implicit
# copies (`NumbaPerformanceWarning: Host array used in CUDA kernel will incur copy overhead`); the course
# switches its performance warnings off, so count the copies yourself.
#
# ### Predict
# 20 launches of SAXPY (x and y in, out out): how many copies with NumPy arguments? With device arrays
# (x and y copied in once with `to_device`, out made on the device with `device_array`, the result copied
# back once)?

# %%
prediction_copies_numpy, prediction_copies_device = ..., ...

# %% [markdown]
# <details><summary>Description of the picture</summary>
#
# A grouped bar chart, copies (count) for two ways of passing the arrays. NumPy
# arrays: 60 copies to the device and 60 to the host. Device arrays: 2 to the device and 1 to the host.
# The launches slider changes the NumPy bars only.
#
# </details>

# %%
first_kernels.copies_explorer()

# %% [markdown]
# On a GPU the table below times both loops now (the harness: events, warm-up, median of samples),
# each with every copy it makes — the device-array loop's time includes copying x and y in and the result
# out; without a GPU it lists the copy counts only and times nothing.

# %%
first_kernels.transfer_timings()

# %%
copies = {way: first_kernels.transfers(20, 2, 1, device_resident=resident).iloc[0]
          for way, resident in (("NumPy", False), ("device", True))}
predictions.read_back(
    {"NumPy": prediction_copies_numpy, "device": prediction_copies_device},
    {way: int(row["copies to the device"] + row["copies to the host"]) for way, row in copies.items()},
    counted="Numba's rule, counted: 3 arrays copied in and out at every launch, against 2 in and 1 out once")

# %% [markdown]
# ## The same kernel in CuPy and in CUDA C++ *(optional, 10 min)*
#
# Numba is one way to write a kernel. **CuPy** offers two more, for the same GPU:
#
# * an `ElementwiseKernel`: you write the body for one element in C++ syntax, with typed parameters;
#   CuPy writes the index, the bounds check and the launch. It wraps your body in a **grid-stride loop**
#   (its `CUPY_FOR` macro, with 64-bit `ptrdiff_t` indices: `cupy/_core/include/cupy/carray.cuh`), the loop
#   of the section above;
# * a `RawKernel`: plain CUDA C++, everything written out — `blockIdx.x * blockDim.x + threadIdx.x` is
#   exactly `cuda.grid(1)`, and the bounds check is yours again.

# %%
print("ElementwiseKernel:", first_kernels.SAXPY_ELEMENTWISE)
print("RawKernel source:\n" + first_kernels.SAXPY_CUDA_SOURCE)

# %% [markdown]
# With a GPU, all three run on the same inputs and are checked against a float64 SAXPY; without one,
# the Numba kernel runs in the simulator and the CuPy rows say they need a GPU.

# %%
first_kernels.three_ways()

# %% [markdown]
# ### Predict
# Compiled to PTX (the GPU's portable assembly), how many global loads (`ld.global`), global stores
# (`st.global`) and fused multiply-adds (`fma`) does SAXPY need? Will Numba's PTX and the CUDA C++'s
# differ?

# %%
prediction_ptx_loads, prediction_ptx_stores, prediction_ptx_fmas = ..., ..., ...

# %% [markdown]
# Both compile without a GPU: the CUDA C++ with **NVRTC** (the runtime compiler CuPy's `RawKernel` uses),
# the Numba kernel with numba-cuda's own compiler (NVVM). Left and right, the kernel's body:

# %%
first_kernels.sources_side_by_side()

# %%
ptx_counts = first_kernels.ptx_counts_side_by_side()
ptx_counts

# %%
predictions.read_back(
    {"ld.global": prediction_ptx_loads, "st.global": prediction_ptx_stores, "fma": prediction_ptx_fmas},
    {"ld.global": 2, "st.global": 1, "fma": 1},
    counted=f"the compilers' PTX, counted just now: {ptx_counts}")

# %% [markdown]
# ## Reading a profiler report *(optional, 5 min)*
#
# On a GPU, the tool that tells you what a kernel did is a profiler: **Nsight Compute** (`ncu`). The
# microscope gives the same report for a simulated launch, under ncu's own metric names. Here is your
# SAXPY (256 elements, 64 threads per block), counted by the microscope on this machine:

# %%
saxpy_profile = first_kernels.trace_saxpy(n=256, threads_per_block=64).profile()
saxpy_profile

# %% [markdown]
# Three rows to read first:
# * **Sectors per request** (`l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio`): how
#   many 32-byte pieces of memory one warp's load fetched. 4 is ideal for 32 neighbouring `float32` values
#   (lesson 03 is about the rest).
# * **Threads per instruction** (`smsp__thread_inst_executed_per_inst_executed.ratio`): how many of a
#   warp's 32 lanes were doing work, on average. Below 32, lanes sat idle (lesson 02).
# * **Theoretical occupancy** (`sm__maximum_warps_per_active_cycle_pct`): the share of an SM's warp slots
#   your blocks can fill (lesson 05). Registers are chosen by the compiler, so without them this is an
#   upper bound; the table's notes (`saxpy_profile.notes()`) say how exact each row is.

# %%
saxpy_profile.table("first look")[["metric", "label", "microscope", "unit", "exactness"]]

# %% [markdown]
# On a machine with a GPU and the CUDA toolkit, the same names work on the command line (`my_saxpy.py`:
# a script that launches your kernel):
#
# ```
# ncu --metrics l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,smsp__thread_inst_executed_per_inst_executed.ratio,sm__maximum_warps_per_active_cycle_pct python my_saxpy.py
# ```
#
# and `gpucourse.measure.ncu.side_by_side(kernel, grid, block, *args)` runs it for you and puts ncu's
# numbers beside the microscope's (without a GPU it says so in one line).

# %% [markdown]
# ## Explain
#
# * **Coordinates.** The CUDA C++ Programming Guide (§ "Thread Hierarchy"): threads are grouped into
#   blocks and blocks into a grid; `threadIdx`, `blockIdx`, `blockDim` and `gridDim` are built-in
#   variables of every thread. Numba exposes them as `cuda.threadIdx` & co.; `cuda.grid(n)` and
#   `cuda.gridsize(n)` are its shorthands (Numba documentation, "Writing CUDA Kernels").
# * **The bounds check.** Blocks are whole, so a launch over n elements almost always has spare threads.
#   The guard costs one compare and a branch (`setp` and `@%p bra` in both PTX listings) — nothing next
#   to the memory access it protects.
# * **The same PTX.** Both listings have two `ld.global.f32`, one `fma.rn.f32` and one `st.global.f32`.
#   Numba's is longer around them: each array arrives as several parameters (data pointer, shape,
#   strides…), and Python's negative-index wraparound adds a few integer instructions per access. The
#   memory traffic — what lessons 03 and 04 are about — is identical. (A CuPy `ElementwiseKernel` is not
#   compiled here: its body sits inside CuPy's grid-stride loop, so its PTX has the loop's extra
#   instructions around the same loads, FMA and store.)
# * **Correct to rounding.** `fma.rn.f32` computes `a*x + y` with **one** rounding; NumPy, and so the
#   simulator, round the product and then the sum. The GPU's result can therefore differ from the
#   simulator's in the last bit — both are right to float32 rounding, and neither is "exact". The labs'
#   test data are small integers, whose sums and products are exact in float32, so there they agree bit
#   for bit.
# * **Copies.** Numba's documentation ("Memory management", its "Data transfer" section): NumPy arguments
#   are transferred automatically, in and out, at every launch; `cuda.to_device`, `device_array` and
#   `copy_to_host` make the transfers explicit. Over PCIe a copy moves tens of GB/s, a GPU's memory
#   hundreds of GB/s to several TB/s: an implicit copy can cost far more than the kernel.
#
# ### From the field
# The classic first port: a loop of 1,000 small kernel launches on NumPy arrays, "the GPU is slower than
# the CPU". A profiler's timeline (Nsight Systems) shows it at once: the kernels are slivers between
# long host-to-device and device-to-host copies. Keeping the arrays on the device fixes it before any
# kernel is tuned.
#
# ## Key points
# * A kernel is written for one thread; `i = blockIdx.x·blockDim.x + threadIdx.x` (`cuda.grid(1)`), and
#   `col, row = cuda.grid(2)` — x first.
# * Launch `⌈n / threads⌉` blocks and guard with `if i < n`; or use a grid-stride loop, which covers any n.
# * NumPy arguments are copied in and out at every launch: keep data on the device
#   (`cuda.to_device`, `device_array`, `copy_to_host`).
# * Numba and CUDA C++ compile SAXPY to the same loads, FMA and store; a CuPy `ElementwiseKernel` puts the
#   same body in a grid-stride loop. One FMA rounds once: results are correct to rounding, not bit for bit.
#
# **Next:** [lab 00a](../labs/lab00a_first_kernels/lab00a_first_kernels.ipynb) — eight short kernel
# puzzles graded by their results and by the microscope's per-thread counts; then lesson 01, warps.
