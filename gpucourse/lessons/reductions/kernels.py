"""Lesson 04a's kernels, exactly as learners read them: tree reductions, warp primitives, block scans.

Every kernel is built by a small factory because a shared array needs its size (the block size)
as a compile-time constant. Reductions take ``(x, out)``: block b sums its part of ``x`` (threads
past the end of ``x`` contribute 0, so any length works) and writes ``out[b]``; the ``atomic``
variant adds its block's sum into ``out[0]`` instead. Scans take ``(x, out)`` and write the
*inclusive* prefix sum of each block's segment of ``x``.
"""

from __future__ import annotations

import functools

# gpucourse/__init__ has chosen the mode before this runs. Kernels reach ``cuda`` through this
# module-level name so that the simulator (and the microscope) can swap in their own.
from numba import cuda, float32, int32

FULL_MASK = 0xFFFFFFFF
WARP = 32

# The reduction ladder, in teaching order; "elements per thread" says how much input one block eats.
REDUCTIONS = ("interleaved", "strided index", "sequential", "first add", "warp shuffle", "atomic", "grid stride")
# "grid stride" launches no more blocks than fit on the GPU at once, so one thread eats n / (grid · B) elements:
# at least GRID_STRIDE_PARTIALS where n allows (its blocks come from model.grid_stride_blocks, not from this table).
GRID_STRIDE_PARTIALS = 4  # independent partial sums per thread: four loads in flight per thread
ELEMENTS_PER_THREAD = {"interleaved": 1, "strided index": 1, "sequential": 1, "first add": 2,
                       "warp shuffle": 2, "atomic": 2, "grid stride": GRID_STRIDE_PARTIALS}
SCANS = ("Hillis-Steele", "Blelloch")


@functools.cache
def interleaved_kernel(block: int = 256):
    """Harris's kernel 1: neighbours pair up, ``tid % (2*s) == 0`` picks the adders (divergent warps)."""
    B = block

    @cuda.jit
    def reduce_interleaved(x, out):
        sdata = cuda.shared.array(B, float32)
        tid = cuda.threadIdx.x
        i = cuda.blockIdx.x * B + tid
        sdata[tid] = x[i] if i < x.size else float32(0.0)
        cuda.syncthreads()
        s = 1
        while s < B:
            if tid % (2 * s) == 0:
                sdata[tid] += sdata[tid + s]
            cuda.syncthreads()
            s *= 2
        if tid == 0:
            out[cuda.blockIdx.x] = sdata[0]

    return reduce_interleaved


@functools.cache
def strided_index_kernel(block: int = 256):
    """Harris's kernel 2: the first threads do the adds (no divergence) but ``2*s*tid`` strides the banks."""
    B = block

    @cuda.jit
    def reduce_strided_index(x, out):
        sdata = cuda.shared.array(B, float32)
        tid = cuda.threadIdx.x
        i = cuda.blockIdx.x * B + tid
        sdata[tid] = x[i] if i < x.size else float32(0.0)
        cuda.syncthreads()
        s = 1
        while s < B:
            index = 2 * s * tid
            if index < B:
                sdata[index] += sdata[index + s]
            cuda.syncthreads()
            s *= 2
        if tid == 0:
            out[cuda.blockIdx.x] = sdata[0]

    return reduce_strided_index


@functools.cache
def sequential_kernel(block: int = 256):
    """Harris's kernel 3: sequential addressing, the first half adds the second half (no bank conflicts)."""
    B = block

    @cuda.jit
    def reduce_sequential(x, out):
        sdata = cuda.shared.array(B, float32)
        tid = cuda.threadIdx.x
        i = cuda.blockIdx.x * B + tid
        sdata[tid] = x[i] if i < x.size else float32(0.0)
        cuda.syncthreads()
        s = B // 2
        while s > 0:
            if tid < s:
                sdata[tid] += sdata[tid + s]
            cuda.syncthreads()
            s //= 2
        if tid == 0:
            out[cuda.blockIdx.x] = sdata[0]

    return reduce_sequential


@functools.cache
def first_add_kernel(block: int = 256):
    """Harris's kernel 4: each thread adds two elements while loading, so half the blocks do the same work."""
    B = block

    @cuda.jit
    def reduce_first_add(x, out):
        sdata = cuda.shared.array(B, float32)
        tid = cuda.threadIdx.x
        i = cuda.blockIdx.x * (2 * B) + tid
        v = x[i] if i < x.size else float32(0.0)
        if i + B < x.size:
            v += x[i + B]
        sdata[tid] = v
        cuda.syncthreads()
        s = B // 2
        while s > 0:
            if tid < s:
                sdata[tid] += sdata[tid + s]
            cuda.syncthreads()
            s //= 2
        if tid == 0:
            out[cuda.blockIdx.x] = sdata[0]

    return reduce_first_add


@functools.cache
def warp_shuffle_kernel(block: int = 256, atomic: bool = False):
    """First add during load, a shuffle sum in every warp, then warp 0 sums the warps' results.

    ``atomic=True``: thread 0 adds the block's sum into ``out[0]`` (zeroed before the launch), so
    one launch finishes the whole reduction instead of a second pass over the partial sums."""
    B = block
    WARPS = B // WARP
    ATOMIC = bool(atomic)

    @cuda.jit
    def reduce_warp_shuffle(x, out):
        warp_sums = cuda.shared.array(WARPS, float32)
        tid = cuda.threadIdx.x
        lane = tid % WARP
        warp = tid // WARP
        i = cuda.blockIdx.x * (2 * B) + tid
        v = x[i] if i < x.size else float32(0.0)
        if i + B < x.size:
            v += x[i + B]
        offset = 16
        while offset > 0:  # the warp's sum, in lane 0: five shuffles, no shared memory, no barrier
            v += cuda.shfl_down_sync(FULL_MASK, v, offset)
            offset //= 2
        if lane == 0:
            warp_sums[warp] = v
        cuda.syncthreads()
        if warp == 0:
            v = warp_sums[lane] if lane < WARPS else float32(0.0)
            offset = 16
            while offset > 0:  # warp 0 sums the warps' sums the same way
                v += cuda.shfl_down_sync(FULL_MASK, v, offset)
                offset //= 2
            if lane == 0:
                if ATOMIC:
                    cuda.atomic.add(out, 0, v)
                else:
                    out[cuda.blockIdx.x] = v

    return reduce_warp_shuffle


@functools.cache
def grid_stride_kernel(block: int = 256):
    """Harris's kernel 7, many elements per thread: launch only the blocks that fit on the GPU at once; each
    thread walks its grid-stride slice of ``x`` with four independent partial sums (four loads in flight,
    no store between them), then the warp shuffles of ``warp_shuffle_kernel`` and one atomic per block
    into ``out[0]`` (zeroed before the launch). Any grid and any n: the second loop eats the ragged end."""
    B = block
    WARPS = B // WARP

    @cuda.jit
    def reduce_grid_stride(x, out):
        warp_sums = cuda.shared.array(WARPS, float32)
        tid = cuda.threadIdx.x
        lane = tid % WARP
        warp = tid // WARP
        n = x.size
        stride = cuda.gridDim.x * B  # every thread of the grid takes one element per stride
        i = cuda.blockIdx.x * B + tid
        a0 = float32(0.0)
        a1 = float32(0.0)
        a2 = float32(0.0)
        a3 = float32(0.0)
        while i + 3 * stride < n:  # four loads that do not wait for each other: all four in flight
            a0 += x[i]
            a1 += x[i + stride]
            a2 += x[i + 2 * stride]
            a3 += x[i + 3 * stride]
            i += 4 * stride
        while i < n:  # the ragged end: at most three more
            a0 += x[i]
            i += stride
        v = (a0 + a1) + (a2 + a3)
        offset = 16
        while offset > 0:  # then exactly the warp shuffle rung's block sum
            v += cuda.shfl_down_sync(FULL_MASK, v, offset)
            offset //= 2
        if lane == 0:
            warp_sums[warp] = v
        cuda.syncthreads()
        if warp == 0:
            v = warp_sums[lane] if lane < WARPS else float32(0.0)
            offset = 16
            while offset > 0:
                v += cuda.shfl_down_sync(FULL_MASK, v, offset)
                offset //= 2
            if lane == 0:
                cuda.atomic.add(out, 0, v)  # one atomic per block: a few hundred, not n / 512

    return reduce_grid_stride


def reduction_kernel(variant: str, block: int = 256):
    """The kernel of one rung of the ladder (``REDUCTIONS``) for a block of ``block`` threads."""
    return {
        "interleaved": interleaved_kernel,
        "strided index": strided_index_kernel,
        "sequential": sequential_kernel,
        "first add": first_add_kernel,
        "warp shuffle": warp_shuffle_kernel,
        "atomic": lambda b: warp_shuffle_kernel(b, atomic=True),
        "grid stride": grid_stride_kernel,
    }[variant](block)


# --- ballot and any: one decision per warp -------------------------------------------------------------


@cuda.jit
def count_above_per_lane(x, threshold, count):
    """Every passing lane asks for its own atomic: up to 32 per warp *in the source*. ptxas (CUDA 9 and
    later) aggregates a same-address add itself: a vote, a popcount and one atomic per warp in the SASS."""
    i = cuda.grid(1)
    if i < x.size and x[i] > threshold:
        cuda.atomic.add(count, 0, 1)


@cuda.jit
def count_above_ballot(x, threshold, count):
    """``ballot_sync`` gathers the warp's 32 answers into one mask; lane 0 adds its popcount: one atomic,
    written out, not left to the compiler.

    ``any_sync`` makes the branch warp-uniform: a warp with nothing to count skips it as a whole."""
    i = cuda.grid(1)
    passes = i < x.size and x[i] > threshold
    if cuda.any_sync(FULL_MASK, passes):
        votes = cuda.ballot_sync(FULL_MASK, passes)
        if cuda.laneid == 0:
            cuda.atomic.add(count, 0, cuda.popc(votes))


@cuda.jit
def compact_above_per_lane(x, threshold, count, out):
    """Stream compaction: every passing lane takes a slot with the value ``atomic.add`` returns, one atomic
    per lane in the source; each lane needs its own slot, so the compiler must hand the slots out."""
    i = cuda.grid(1)
    if i < x.size and x[i] > threshold:
        slot = cuda.atomic.add(count, 0, 1)
        out[slot] = x[i]


@cuda.jit
def histogram_per_lane(x, bins):
    """A histogram: every lane adds 1 to the bin of its value, so the lanes of a warp hit different
    addresses (``x`` in [0, 1))."""
    i = cuda.grid(1)
    if i < x.size:
        cuda.atomic.add(bins, min(int32(x[i] * bins.size), bins.size - 1), 1)


# --- block scans -------------------------------------------------------------------------------------------


@functools.cache
def hillis_steele_kernel(block: int = 256):
    """Inclusive scan of each block's segment: log2(B) steps, each adds ``offset`` back (double buffer)."""
    B = block

    @cuda.jit
    def scan_hillis_steele(x, out):
        buf = cuda.shared.array((2, B), float32)
        tid = cuda.threadIdx.x
        i = cuda.blockIdx.x * B + tid
        buf[0, tid] = x[i] if i < x.size else float32(0.0)
        cuda.syncthreads()
        src = 0
        offset = 1
        while offset < B:
            if tid >= offset:
                buf[1 - src, tid] = buf[src, tid] + buf[src, tid - offset]
            else:
                buf[1 - src, tid] = buf[src, tid]
            cuda.syncthreads()
            src = 1 - src
            offset *= 2
        if i < x.size:
            out[i] = buf[src, tid]

    return scan_hillis_steele


@functools.cache
def blelloch_kernel(block: int = 256):
    """Work-efficient scan: an up-sweep builds a sum tree (B - 1 adds), a down-sweep pushes prefixes
    back down (B - 1 adds): 2·log2(B) steps. It computes the exclusive scan; adding the thread's own
    element makes it inclusive like the Hillis–Steele kernel."""
    B = block

    @cuda.jit
    def scan_blelloch(x, out):
        temp = cuda.shared.array(B, float32)
        tid = cuda.threadIdx.x
        i = cuda.blockIdx.x * B + tid
        mine = x[i] if i < x.size else float32(0.0)
        temp[tid] = mine
        offset = 1
        d = B // 2
        while d > 0:  # up-sweep
            cuda.syncthreads()
            if tid < d:
                temp[offset * (2 * tid + 2) - 1] += temp[offset * (2 * tid + 1) - 1]
            offset *= 2
            d //= 2
        if tid == 0:
            temp[B - 1] = 0.0
        d = 1
        while d < B:  # down-sweep
            offset //= 2
            cuda.syncthreads()
            if tid < d:
                left = offset * (2 * tid + 1) - 1
                right = offset * (2 * tid + 2) - 1
                t = temp[left]
                temp[left] = temp[right]
                temp[right] += t
            d *= 2
        cuda.syncthreads()
        if i < x.size:
            out[i] = temp[tid] + mine

    return scan_blelloch


def scan_kernel(variant: str, block: int = 256):
    return {"Hillis-Steele": hillis_steele_kernel, "Blelloch": blelloch_kernel}[variant](block)


# CuPy's ReductionKernel: the same sum, written as map / reduce / post-map expressions; CuPy generates the
# kernel and picks its launch parameters by a fixed heuristic (no autotuning: that is opt-in, through
# cupyx.optimizing). Shown as source in every mode, built and measured only on a GPU.
REDUCTION_KERNEL_SOURCE = '''cupy.ReductionKernel(
    "T x",            # input parameter
    "T y",            # output parameter
    "x",              # map: what each element contributes
    "a + b",          # reduce: how two partial results combine
    "y = a",          # post-map: what is written
    "0",              # identity
    "course_sum",
)'''


def cupy_reduction_kernel():
    """Build CuPy's ReductionKernel from ``REDUCTION_KERNEL_SOURCE`` (needs CuPy, i.e. a GPU)."""
    import cupy

    return eval(REDUCTION_KERNEL_SOURCE, {"cupy": cupy})  # noqa: S307 - our own constant, shown to learners

