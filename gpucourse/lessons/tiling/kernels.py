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
        for k in range(K):
            if y0 + k * R < rows and x < cols:
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
