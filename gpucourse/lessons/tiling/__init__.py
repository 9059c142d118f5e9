"""Lesson 04 "Shared memory: tiling and bank conflicts": the matmul ladder, the transpose ladder, barriers.

Matrix multiply, one rung at a time (fp32, C = A @ B, A is m×k, B is k×n):

* ``naive``: one thread per output, every operand read from global memory (16×16 blocks);
* ``tiled`` (tile T = 8, 16, 32): a T×T block stages T×T tiles of A and B in shared memory, so
  every element fetched from global memory is used T times; two ``syncthreads`` per step;
* ``register-blocked``: a block computes a BM×BN tile and each thread a TM×TN patch of it from
  registers (2-D register tiling), so each shared-memory read feeds TM or TN multiply-adds;
* ``vectorised``: the same idea with few instructions per FMA: each thread's fragments are 4
  contiguous floats (A stored transposed), so one 16-byte LDS.128 fetches four; the next k-tile
  is prefetched into registers, two shared buffers leave one barrier per k-tile;
* ``CUDA C++``: the vectorised 128/8 tiling as a CuPy RawKernel, with what Numba cannot write
  (float4 global loads and stores, ``__restrict__``, int32 indices, a fully unrolled k-loop);
* ``cuBLAS``: the library (CuPy → cuBLAS, fp32 compute type: TF32 off).

Traffic is counted, not guessed: ``matmul_traffic_bytes`` is the number of bytes the kernel's
loads and stores request from global memory (the microscope counts the same number at small
sizes, and the tests check that they agree), so FLOPs per byte place each rung on the roofline.

Transpose, one rung at a time: a tile-shaped ``copy`` (the yardstick, ``BEST_COPY``), ``naive`` (reads rows,
writes columns), ``shared`` (through a T×T shared tile: the column read is a 32-way bank
conflict) and the same with the tile padded to T×(T+1). ``bank_ways`` is the rule for 4-byte
words (32 banks of 4 bytes, one phase per warp); ``warp_bank_ways`` is the microscope's rule for
any element size (8- and 16-byte elements are served in half- and quarter-warp phases), and the
bank explorer uses it for float32 and float64 tiles.

``compiled.sass_table`` shows what ptxas makes of each rung without a GPU (LDS.128 or 4-byte LDS, the
FFMA share of the k-loop, registers, spills); ``ladder_table`` puts it beside each rung's speed.

GPU sweeps (``make record``): ``tiling.matmul`` and ``tiling.transpose``. In simulator mode
nothing is timed: the charts show recordings or say that there are none, and the microscope's
counts (exact in both modes) carry the lesson.
"""

from __future__ import annotations

from gpucourse.lessons.tiling.compiled import ladder_table, sass_table
from gpucourse.lessons.tiling.experiments import (
    _MEASURED,
    BEST_COPY,
    LOADS_HOISTED_SINCE,
    MATMUL_SIZES,
    REFERENCE_GPU,
    TILES,
    TRANSPOSE_SIZES,
    _device_view,
    _matmul_sweep,
    _random,
    best_copy_gbps,
    ceilings_for_roofline,
    folklore_table,
    matmul,
    measure_matmul,
    measure_matmul_ladder,
    measure_transposes,
    transpose,
)
from gpucourse.lessons.tiling.figures import (
    BANKS,
    bank_explorer,
    bank_picture,
    barrier_explorer,
    barrier_figure,
    fraction_figure,
    gflops_figure,
    matmul_explorer,
    roofline_figure,
    tiling_picture,
    transpose_explorer,
    transpose_figure,
)
from gpucourse.lessons.tiling.kernels import (
    FLOAT_BYTES,
    SGEMM_CUDA_NAME,
    SGEMM_CUDA_SOURCE,
    STATIC_SHARED_BYTES,
    check_register_blocking,
    check_tile,
    check_transpose_shape,
    check_vectorised,
    copy_kernel,
    naive_matmul_kernel,
    naive_transpose_kernel,
    register_blocked_kernel,
    shared_transpose_kernel,
    tiled_matmul_kernel,
    vectorised_matmul_kernel,
)
from gpucourse.lessons.tiling.model import (
    BANK_BYTES,
    BARRIER_CASES,
    ELEMENT_BYTES,
    KINDS,
    NAIVE_BLOCK,
    REGISTER_BLOCKED,
    RUNG_COLOURS,
    SIM_MAX_N,
    TRANSPOSE_VARIANTS,
    VECTORISED,
    BarrierResult,
    Rung,
    _host_inputs,
    _trace,
    add_library_fraction,
    bank_of,
    bank_ways,
    barrier_experiment,
    check_size,
    counted_traffic,
    default_block_rows,
    intensity,
    intensity_table,
    ladder,
    matmul_flops,
    matmul_traffic_bytes,
    numba_rungs,
    rung,
    trace_transpose,
    traffic_table,
    transpose_bank_ways,
    transpose_counts,
    transpose_kernel,
    transpose_launch,
    transpose_warp_words,
    warp_bank_ways,
)
