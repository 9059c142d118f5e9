"""Lesson 04 "Shared memory: tiling and bank conflicts": the kernels learners read (and the constants they need)."""

from __future__ import annotations

import functools

# gpucourse/__init__ has chosen the mode before this runs. Kernels reach ``cuda`` through this
# module-level name so that the simulator (and the microscope) can swap in their own.
from numba import cuda, float32

from gpucourse import validate
from gpucourse.errors import InvalidConfig
from gpucourse.hardware import MAX_THREADS_PER_BLOCK
from gpucourse.measure import runtime

FLOAT_BYTES = 4
STATIC_SHARED_BYTES = 48 * 1024  # cuda.shared.array is static shared memory: 48 KB per block on every cc


def _check_block(threads_x: int, threads_y: int, what: str) -> None:
    threads = threads_x * threads_y
    if threads > MAX_THREADS_PER_BLOCK:
        raise InvalidConfig(
            f"{what} needs a {threads_x}×{threads_y} = {threads}-thread block; a block may hold at most "
            f"{MAX_THREADS_PER_BLOCK} threads"
        )


def _check_shared(shared_bytes: int, what: str) -> None:
    cc = runtime.device().compute_capability
    if shared_bytes > STATIC_SHARED_BYTES:
        from gpucourse.lessons.occupancy.calculator import architecture

        try:
            optin = architecture(cc).shared_per_block_optin_bytes
            beyond = (f"; the {optin // 1024} KB opt-in of cc {cc[0]}.{cc[1]} applies only to dynamic "
                      "shared memory")
        except InvalidConfig:
            beyond = ""
        raise InvalidConfig(
            f"{what} needs {shared_bytes:,} B of shared memory per block; statically declared shared arrays "
            f"may use at most {STATIC_SHARED_BYTES:,} B (48 KB) per block{beyond}"
        )


def check_tile(tile) -> int:
    """A matmul tile T: the block is T×T threads, so 1 ≤ T ≤ 32; two T×T float32 tiles must fit."""
    tile = validate.integer("tile", tile, minimum=1)
    _check_block(tile, tile, f"tile {tile}")
    _check_shared(2 * tile * tile * FLOAT_BYTES, f"tile {tile}")
    return tile


def check_register_blocking(block_tile, k_tile, thread_tile) -> tuple[int, int, int]:
    block_tile = validate.integer("block_tile", block_tile, minimum=1)
    k_tile = validate.integer("k_tile", k_tile, minimum=1)
    thread_tile = validate.integer("thread_tile", thread_tile, minimum=1)
    if block_tile % thread_tile:
        raise InvalidConfig(
            f"thread_tile must divide block_tile (each thread computes a thread_tile² patch); got "
            f"block_tile {block_tile}, thread_tile {thread_tile}"
        )
    side = block_tile // thread_tile
    _check_block(side, side, f"block_tile {block_tile} with thread_tile {thread_tile}")
    _check_shared(2 * block_tile * k_tile * FLOAT_BYTES, f"block_tile {block_tile} with k_tile {k_tile}")
    return block_tile, k_tile, thread_tile


def check_transpose_shape(tile, block_rows, pad) -> tuple[int, int, int]:
    """Transpose tile T, block T×R (R divides T), padding P ≥ 0: T·R ≤ 1024, T·(T+P)·4 B ≤ 48 KB."""
    tile = validate.integer("tile", tile, minimum=1)
    block_rows = validate.integer("block_rows", block_rows, minimum=1, maximum=tile)
    pad = validate.integer("pad", pad, minimum=0, maximum=32)
    if tile % block_rows:
        raise InvalidConfig(f"block_rows must divide the tile (each thread copies tile/block_rows rows); "
                            f"got tile {tile}, block_rows {block_rows}")
    _check_block(tile, block_rows, f"tile {tile} with {block_rows} block rows")
    _check_shared(tile * (tile + pad) * FLOAT_BYTES, f"a {tile}×{tile + pad} float32 tile")
    return tile, block_rows, pad


# --- matmul kernels (built per tile: shared arrays need their shape as a compile-time constant) ---


@functools.cache
def naive_matmul_kernel():
    """One thread per output; every multiply-add reads A and B from global memory."""

    @cuda.jit
    def naive_matmul(a, b, c):
        col, row = cuda.grid(2)
        if row < c.shape[0] and col < c.shape[1]:
            acc = float32(0.0)
            for k in range(a.shape[1]):
                acc += a[row, k] * b[k, col]
            c[row, col] = acc

    return naive_matmul


@functools.cache
def tiled_matmul_kernel(tile: int = 16, sync_after_load: bool = True, sync_after_compute: bool = True):
    """Shared-memory tiled matmul for a T×T block; the two flags drop a barrier (for the lesson only)."""
    T = check_tile(tile)
    SYNC_LOAD, SYNC_COMPUTE = bool(sync_after_load), bool(sync_after_compute)

    @cuda.jit
    def tiled_matmul(a, b, c):
        a_tile = cuda.shared.array((T, T), float32)
        b_tile = cuda.shared.array((T, T), float32)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        row = cuda.blockIdx.y * T + ty
        col = cuda.blockIdx.x * T + tx
        m = a.shape[0]
        depth = a.shape[1]
        n = b.shape[1]
        acc = float32(0.0)
        for k0 in range(0, depth, T):
            # Stage one tile of A and one of B; threads off the edge store zeros (non-multiples of T).
            if row < m and k0 + tx < depth:
                a_tile[ty, tx] = a[row, k0 + tx]
            else:
                a_tile[ty, tx] = 0.0
            if k0 + ty < depth and col < n:
                b_tile[ty, tx] = b[k0 + ty, col]
            else:
                b_tile[ty, tx] = 0.0
            if SYNC_LOAD:
                cuda.syncthreads()  # barrier 1: both tiles are complete before anyone reads them
            for kk in range(T):
                acc += a_tile[ty, kk] * b_tile[kk, tx]
            if SYNC_COMPUTE:
                cuda.syncthreads()  # barrier 2: nobody overwrites a tile that others are still reading
        if row < m and col < n:
            c[row, col] = acc

    return tiled_matmul


@functools.cache
def register_blocked_kernel(block_tile: int = 64, k_tile: int = 8, thread_tile: int = 4):
    """2-D register tiling: a block computes block_tile² outputs, each thread thread_tile² of them."""
    BM, BK, TM = check_register_blocking(block_tile, k_tile, thread_tile)
    SIDE = BM // TM  # the block is SIDE×SIDE threads
    THREADS = SIDE * SIDE

    @cuda.jit
    def register_blocked_matmul(a, b, c):
        a_tile = cuda.shared.array((BM, BK), float32)
        b_tile = cuda.shared.array((BK, BM), float32)
        acc = cuda.local.array((TM, TM), float32)
        a_frag = cuda.local.array(TM, float32)
        b_frag = cuda.local.array(TM, float32)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        tid = ty * SIDE + tx
        row0 = cuda.blockIdx.y * BM
        col0 = cuda.blockIdx.x * BM
        m = a.shape[0]
        depth = a.shape[1]
        n = b.shape[1]
        for i in range(TM):
            for j in range(TM):
                acc[i, j] = 0.0
        for k0 in range(0, depth, BK):
            for idx in range(tid, BM * BK, THREADS):  # neighbouring threads read neighbouring k: coalesced
                i = idx // BK
                kk = idx % BK
                if row0 + i < m and k0 + kk < depth:
                    a_tile[i, kk] = a[row0 + i, k0 + kk]
                else:
                    a_tile[i, kk] = 0.0
            for idx in range(tid, BK * BM, THREADS):  # neighbouring threads read neighbouring columns
                kk = idx // BM
                j = idx % BM
                if k0 + kk < depth and col0 + j < n:
                    b_tile[kk, j] = b[k0 + kk, col0 + j]
                else:
                    b_tile[kk, j] = 0.0
            cuda.syncthreads()
            for kk in range(BK):
                # Each thread's rows and columns are strided by SIDE: conflict-free, coalesced stores.
                for i in range(TM):
                    a_frag[i] = a_tile[ty + i * SIDE, kk]
                for j in range(TM):
                    b_frag[j] = b_tile[kk, tx + j * SIDE]
                for i in range(TM):
                    for j in range(TM):
                        acc[i, j] += a_frag[i] * b_frag[j]
            cuda.syncthreads()
        for i in range(TM):
            for j in range(TM):
                if row0 + ty + i * SIDE < m and col0 + tx + j * SIDE < n:
                    c[row0 + ty + i * SIDE, col0 + tx + j * SIDE] = acc[i, j]

    return register_blocked_matmul


# --- transpose kernels ----------------------------------------------------------------------------


@functools.cache
def copy_kernel(tile: int = 32, block_rows: int = 8):
    """A tile-shaped copy: coalesced reads and writes, the transposes' yardstick. Each thread first loads its
    T/R elements into registers, then stores them: T/R loads in flight per thread, not one."""
    T, R, _ = check_transpose_shape(tile, block_rows, 0)
    K = T // R  # elements per thread

    @cuda.jit
    def tile_copy(src, dst):
        rows = src.shape[0]
        cols = src.shape[1]
        x = cuda.blockIdx.x * T + cuda.threadIdx.x
        y0 = cuda.blockIdx.y * T + cuda.threadIdx.y
        v = cuda.local.array(K, float32)  # K registers (the loops are unrolled)
        for k in range(K):  # all K loads first: none waits for another
            y = y0 + k * R
            v[k] = src[y, x] if y < rows and x < cols else float32(0.0)
        for k in range(K):  # then the K stores
            y = y0 + k * R
            if y < rows and x < cols:
                dst[y, x] = v[k]

    return tile_copy


@functools.cache
def naive_transpose_kernel(tile: int = 32, block_rows: int = 8):
    """Reads rows (coalesced), writes columns (each lane a different row: 32 sectors per request)."""
    T, R, _ = check_transpose_shape(tile, block_rows, 0)

    @cuda.jit
    def naive_transpose(src, dst):
        x = cuda.blockIdx.x * T + cuda.threadIdx.x
        y0 = cuda.blockIdx.y * T + cuda.threadIdx.y
        for j in range(0, T, R):
            if y0 + j < src.shape[0] and x < src.shape[1]:
                dst[x, y0 + j] = src[y0 + j, x]

    return naive_transpose


@functools.cache
def shared_transpose_kernel(tile: int = 32, block_rows: int = 8, pad: int = 0):
    """Through a shared tile: both global accesses coalesced; the tile is read by columns. Loads are hoisted
    by hand (numba-cuda has no ``noalias``, so the compiler may not move a load above a store): T/R global
    loads, T/R shared stores, the barrier, T/R shared loads, T/R global stores."""
    T, R, P = check_transpose_shape(tile, block_rows, pad)
    W = T + P
    K = T // R  # elements per thread

    @cuda.jit
    def shared_transpose(src, dst):
        buf = cuda.shared.array((T, W), float32)
        v = cuda.local.array(K, float32)  # K registers (the loops are unrolled)
        rows = src.shape[0]
        cols = src.shape[1]
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        x = cuda.blockIdx.x * T + tx
        y0 = cuda.blockIdx.y * T + ty
        for k in range(K):  # all K global loads first: none waits for another
            y = y0 + k * R
            v[k] = src[y, x] if y < rows and x < cols else float32(0.0)
        # Unconditional shared stores (v[k] is already 0 off the edge): ptxas for sm_90 schedules a guarded
        # first store above loads 2-4, and a block then waits for two DRAM round trips instead of one.
        for k in range(K):
            buf[ty + k * R, tx] = v[k]  # a warp writes a row of the tile
        cuda.syncthreads()
        x = cuda.blockIdx.y * T + tx  # the block writes the mirrored tile, row by row
        y0 = cuda.blockIdx.x * T + ty
        for k in range(K):
            y = y0 + k * R
            v[k] = buf[tx, ty + k * R] if y < cols and x < rows else float32(0.0)  # a warp reads a column
        for k in range(K):  # then the K global stores
            y = y0 + k * R
            if y < cols and x < rows:
                dst[y, x] = v[k]

    return shared_transpose


# --- the rung after register blocking: contiguous fragments, a transposed A, prefetch ----------------

VECTOR_WIDTH = 4  # floats per 16-byte shared load (LDS.128)
A_PAD = 4  # floats of padding per row of the transposed A tile: conflict-free stores, 16-byte rows


def _power_of_two(name: str, value: int) -> None:
    if value & (value - 1):
        raise InvalidConfig(f"{name} must be a power of two (the kernel splits thread indices with shifts), "
                            f"got {value}")


def check_vectorised(block_tile, k_tile, thread_tile) -> tuple[int, int, int]:
    """A (block tile BM, k tile BK, thread tile TM) for ``vectorised_matmul_kernel``: powers of two,
    TM = 4 or 8, (BM/TM)² threads that can load BM×BK and BK×BM tiles in whole rounds."""
    bm = validate.integer("block_tile", block_tile, minimum=8)
    bk = validate.integer("k_tile", k_tile, minimum=1)
    tm = validate.integer("thread_tile", thread_tile, minimum=4, maximum=8)
    for name, value in (("block_tile", bm), ("k_tile", bk), ("thread_tile", tm)):
        _power_of_two(name, value)
    side = bm // tm
    threads = side * side
    _check_block(side, side, f"block_tile {bm} with thread_tile {tm}")
    if threads < bm or threads < bk or (bm * bk) % threads:
        raise InvalidConfig(f"{threads} threads cannot load a {bm}×{bk} tile in whole rounds (need ≥ {bm} "
                            f"threads and {bm}·{bk} a multiple of them); pick a larger k_tile or thread_tile 4")
    _check_shared(2 * bk * (2 * bm + A_PAD) * FLOAT_BYTES, f"block_tile {bm} with k_tile {bk}, double-buffered")
    return bm, bk, tm


@functools.cache
def vectorised_matmul_kernel(block_tile: int = 128, k_tile: int = 8, thread_tile: int = 8):
    """Register blocking done so the loads are few: each thread computes TM×TM outputs as 4×4 quadrants
    BM/2 apart (TM = 8) or one 4×4 block (TM = 4), so its 4 values of a row of B, and (A stored
    transposed in shared memory) its 4 values of a column of A, are contiguous: ptxas merges them into
    one 16-byte LDS.128. The next k-tile is loaded into registers before the current one is used
    (its global latency hides behind the FMAs), two shared buffers leave one barrier per k-tile, and
    thread indices are split with shifts and masks (no signed division)."""
    BM, BK, TM = check_vectorised(block_tile, k_tile, thread_tile)
    SIDE = BM // TM
    THREADS = SIDE * SIDE
    GROUPS = TM // VECTOR_WIDTH  # quadrants per side: 1 or 2
    GROUP_STRIDE = BM // GROUPS
    W = BM + A_PAD  # row length of the transposed A tile: 16-byte rows, conflict-free transposing stores
    LOADS_A = BM * BK // THREADS
    LOADS_B = BK * BM // THREADS
    ROW_STEP = THREADS // BK  # A: rows a round of loads covers
    K_STEP = THREADS // BM  # B: k rows a round of loads covers
    SIDE_SHIFT, BK_SHIFT, BM_SHIFT = SIDE.bit_length() - 1, BK.bit_length() - 1, BM.bit_length() - 1

    @cuda.jit
    def vectorised_matmul(a, b, c):
        a_s = cuda.shared.array((2, BK, W), float32)  # A transposed: a_s[buf, k, row]
        b_s = cuda.shared.array((2, BK, BM), float32)
        acc = cuda.local.array((TM, TM), float32)  # all indices constant after unrolling: registers
        a_frag = cuda.local.array(TM, float32)
        b_frag = cuda.local.array(TM, float32)
        a_next = cuda.local.array(LOADS_A, float32)  # the next k-tile, in flight while this one computes
        b_next = cuda.local.array(LOADS_B, float32)
        tid = cuda.threadIdx.x
        a_at = (tid >> SIDE_SHIFT) * VECTOR_WIDTH  # this thread's first row of the block tile
        b_at = (tid & (SIDE - 1)) * VECTOR_WIDTH  # and its first column
        row0 = cuda.blockIdx.y * BM
        col0 = cuda.blockIdx.x * BM
        m = a.shape[0]
        depth = a.shape[1]
        n = b.shape[1]
        a_k = tid & (BK - 1)  # A loads: neighbouring threads read neighbouring k of one row
        a_r = tid >> BK_SHIFT
        b_j = tid & (BM - 1)  # B loads: neighbouring threads read neighbouring columns
        b_k = tid >> BM_SHIFT
        for i in range(TM):
            for j in range(TM):
                acc[i, j] = 0.0
        # k-tile 0: into registers (zeros off the edge), then into buffer 0
        for q in range(LOADS_A):
            r = row0 + a_r + q * ROW_STEP
            if r < m and a_k < depth:
                a_next[q] = a[r, a_k]
            else:
                a_next[q] = 0.0
        for q in range(LOADS_B):
            kk = b_k + q * K_STEP
            if kk < depth and col0 + b_j < n:
                b_next[q] = b[kk, col0 + b_j]
            else:
                b_next[q] = 0.0
        for q in range(LOADS_A):
            a_s[0, a_k, a_r + q * ROW_STEP] = a_next[q]
        for q in range(LOADS_B):
            b_s[0, b_k + q * K_STEP, b_j] = b_next[q]
        cuda.syncthreads()
        tiles = (depth + BK - 1) // BK
        for t in range(tiles):
            cur = t & 1
            if t + 1 < tiles:  # k-tile t+1 into registers: in flight while k-tile t is computed
                k1 = (t + 1) * BK
                for q in range(LOADS_A):
                    r = row0 + a_r + q * ROW_STEP
                    if r < m and k1 + a_k < depth:
                        a_next[q] = a[r, k1 + a_k]
                    else:
                        a_next[q] = 0.0
                for q in range(LOADS_B):
                    kk = k1 + b_k + q * K_STEP
                    if kk < depth and col0 + b_j < n:
                        b_next[q] = b[kk, col0 + b_j]
                    else:
                        b_next[q] = 0.0
            for kk in range(BK):
                for g in range(GROUPS):
                    for v in range(VECTOR_WIDTH):  # 4 contiguous floats each: one LDS.128
                        a_frag[g * VECTOR_WIDTH + v] = a_s[cur, kk, g * GROUP_STRIDE + a_at + v]
                        b_frag[g * VECTOR_WIDTH + v] = b_s[cur, kk, g * GROUP_STRIDE + b_at + v]
                for i in range(TM):
                    for j in range(TM):
                        acc[i, j] += a_frag[i] * b_frag[j]
            if t + 1 < tiles:  # into the other buffer, A transposed
                nxt = 1 - cur
                for q in range(LOADS_A):
                    a_s[nxt, a_k, a_r + q * ROW_STEP] = a_next[q]
                for q in range(LOADS_B):
                    b_s[nxt, b_k + q * K_STEP, b_j] = b_next[q]
            cuda.syncthreads()  # one barrier per k-tile: a buffer is written only after everyone left it
        for g in range(GROUPS):
            for i in range(VECTOR_WIDTH):
                r = row0 + g * GROUP_STRIDE + a_at + i
                for h in range(GROUPS):
                    for j in range(VECTOR_WIDTH):
                        col = col0 + h * GROUP_STRIDE + b_at + j
                        if r < m and col < n:
                            c[r, col] = acc[g * VECTOR_WIDTH + i, h * VECTOR_WIDTH + j]

    return vectorised_matmul


# --- the same rung in CUDA C++ (a CuPy RawKernel): what Numba cannot write ---------------------------
# float4 (16-byte) global loads and stores, __restrict__ pointers, int32 index arithmetic and a
# fully unrolled k-loop (#pragma unroll). Same tiling as vectorised_matmul_kernel(128, 8, 8): a
# 128×128 block tile, k-tile 8, 256 threads, 8×8 outputs per thread as 4×4 quadrants 64 apart, A
# transposed in shared memory, the next k-tile prefetched into registers, two shared buffers.
# M, N and K must be multiples of 4 (a float4 never straddles a row end).

CUDA_BLOCK_TILE, CUDA_K_TILE, CUDA_THREADS = 128, 8, 256
SGEMM_CUDA_NAME = "sgemm_vec4"
SGEMM_CUDA_SOURCE = r"""
extern "C" __global__ void __launch_bounds__(256)
sgemm_vec4(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
           const int M, const int N, const int K)
{
    constexpr int BM = 128, BK = 8, W = BM + 4;    // A is stored transposed, rows padded to 132 floats
    __shared__ __align__(16) float As[2][BK][W];
    __shared__ __align__(16) float Bs[2][BK][BM];
    const int tid = threadIdx.x;
    const int ty4 = (tid >> 4) * 4, tx4 = (tid & 15) * 4;   // this thread's first row and column
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BM;
    const int a_row = tid >> 1, a_k = (tid & 1) * 4;         // A: one float4 per thread (128 rows x 8)
    const int b_k = tid >> 5, b_col = (tid & 31) * 4;        // B: one float4 per thread (8 rows x 128)
    const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
    float acc[8][8];
    #pragma unroll
    for (int i = 0; i < 8; ++i)
        #pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;

    float4 a_next = (row0 + a_row < M && a_k < K)
        ? *reinterpret_cast<const float4*>(&A[(row0 + a_row) * K + a_k]) : zero;
    float4 b_next = (b_k < K && col0 + b_col < N)
        ? *reinterpret_cast<const float4*>(&B[b_k * N + col0 + b_col]) : zero;
    As[0][a_k + 0][a_row] = a_next.x; As[0][a_k + 1][a_row] = a_next.y;
    As[0][a_k + 2][a_row] = a_next.z; As[0][a_k + 3][a_row] = a_next.w;
    *reinterpret_cast<float4*>(&Bs[0][b_k][b_col]) = b_next;
    __syncthreads();

    const int tiles = (K + BK - 1) / BK;
    for (int t = 0; t < tiles; ++t) {
        const int cur = t & 1;
        if (t + 1 < tiles) {                     // the next k-tile: in flight during the FMAs below
            const int k1 = (t + 1) * BK;
            a_next = (row0 + a_row < M && k1 + a_k < K)
                ? *reinterpret_cast<const float4*>(&A[(row0 + a_row) * K + k1 + a_k]) : zero;
            b_next = (k1 + b_k < K && col0 + b_col < N)
                ? *reinterpret_cast<const float4*>(&B[(k1 + b_k) * N + col0 + b_col]) : zero;
        }
        #pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float a[8], b[8];
            *reinterpret_cast<float4*>(&a[0]) = *reinterpret_cast<const float4*>(&As[cur][kk][ty4]);
            *reinterpret_cast<float4*>(&a[4]) = *reinterpret_cast<const float4*>(&As[cur][kk][ty4 + 64]);
            *reinterpret_cast<float4*>(&b[0]) = *reinterpret_cast<const float4*>(&Bs[cur][kk][tx4]);
            *reinterpret_cast<float4*>(&b[4]) = *reinterpret_cast<const float4*>(&Bs[cur][kk][tx4 + 64]);
            #pragma unroll
            for (int i = 0; i < 8; ++i)
                #pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        if (t + 1 < tiles) {
            const int nxt = cur ^ 1;
            As[nxt][a_k + 0][a_row] = a_next.x; As[nxt][a_k + 1][a_row] = a_next.y;
            As[nxt][a_k + 2][a_row] = a_next.z; As[nxt][a_k + 3][a_row] = a_next.w;
            *reinterpret_cast<float4*>(&Bs[nxt][b_k][b_col]) = b_next;
        }
        __syncthreads();
    }
    #pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int r = row0 + (i & 3) + ty4 + (i >> 2) * 64;
        #pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int c = col0 + tx4 + h * 64;
            if (r < M && c < N)
                *reinterpret_cast<float4*>(&C[r * N + c]) =
                    make_float4(acc[i][4 * h], acc[i][4 * h + 1], acc[i][4 * h + 2], acc[i][4 * h + 3]);
        }
    }
}
"""
