"""Lesson 05 "Occupancy": the kernels learners read (and the constants they need)."""

from __future__ import annotations

import numpy as np
from numba import cuda, float32

FMA_B = np.float32(0.9990234375)  # exactly representable: the chain neither overflows nor underflows
FMA_C = np.float32(0.0009765625)
ACCUMULATORS = 48  # live values per thread in the register-hungry kernel
FMAS_PER_ITERATION = 8  # FMAs per chain per loop iteration in the FMA kernels (an unrolled body)


# --- the lesson's kernels (module level, so the PTX compiler can find them by name) -----------


@cuda.jit
def copy_kernel(dst, src):
    """The first attempt (memory-bound): one 4-byte load and one store per thread, one block per 64
    elements: about a million blocks, so the block dispatcher, not latency hiding, sets the pace."""
    i = cuda.grid(1)
    if i < src.size:
        dst[i] = src[i]


@cuda.jit
def copy_ilp4_kernel(dst, src):
    """The first attempt with ILP 4: four independent loads per thread, a quarter of the blocks."""
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    n = src.size
    if i + 3 * stride < n:
        a = src[i]
        b = src[i + stride]
        c = src[i + 2 * stride]
        d = src[i + 3 * stride]
        dst[i] = a
        dst[i + stride] = b
        dst[i + 2 * stride] = c
        dst[i + 3 * stride] = d
    else:
        for k in range(4):
            j = i + k * stride
            if j < n:
                dst[j] = src[j]


@cuda.jit
def copy_resident_kernel(dst, src):
    """Memory-bound, ILP 1: a grid of exactly the resident blocks; each thread loops over the array
    (grid stride), one load in flight per thread at a time."""
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    n = src.size
    while i < n:
        dst[i] = src[i]
        i += step


@cuda.jit
def copy_resident_ilp4_kernel(dst, src):
    """Memory-bound, ILP 4: the same grid, four independent loads written before any store.

    numba-cuda gives kernel arguments no ``noalias``, so the compiler may not move a load of
    ``src`` above a store to ``dst`` itself: the loads are hoisted here by hand.
    """
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    n = src.size
    while i + 3 * step < n:
        a = src[i]
        b = src[i + step]
        c = src[i + 2 * step]
        d = src[i + 3 * step]
        dst[i] = a
        dst[i + step] = b
        dst[i + 2 * step] = c
        dst[i + 3 * step] = d
        i += 4 * step
    while i < n:
        dst[i] = src[i]
        i += step


@cuda.jit
def fma_kernel(out, iterations):
    """Compute-bound, one dependent chain: each FMA waits for the previous one (no ILP).

    Eight FMAs per loop iteration, so the loop's counter, compare and branch are a small share of
    the instructions and the chain's FMA latency, not the loop, sets the pace.
    """
    i = cuda.grid(1)
    a = float32(i & 15) * FMA_C
    for _ in range(iterations // FMAS_PER_ITERATION):
        a = a * FMA_B + FMA_C
        a = a * FMA_B + FMA_C
        a = a * FMA_B + FMA_C
        a = a * FMA_B + FMA_C
        a = a * FMA_B + FMA_C
        a = a * FMA_B + FMA_C
        a = a * FMA_B + FMA_C
        a = a * FMA_B + FMA_C
    if i < out.size:
        out[i] = a


@cuda.jit
def fma_ilp4_kernel(out, iterations):
    """Compute-bound, four independent chains: the same FMAs, four at a time (ILP 4), eight per
    chain per loop iteration."""
    i = cuda.grid(1)
    a0 = float32(i & 15) * FMA_C
    a1 = a0 + FMA_C
    a2 = a1 + FMA_C
    a3 = a2 + FMA_C
    for _ in range(iterations // (4 * FMAS_PER_ITERATION)):
        for _k in range(FMAS_PER_ITERATION):  # a constant trip count: unrolled by the compiler
            a0 = a0 * FMA_B + FMA_C
            a1 = a1 * FMA_B + FMA_C
            a2 = a2 * FMA_B + FMA_C
            a3 = a3 * FMA_B + FMA_C
    if i < out.size:
        out[i] = a0 + a1 + a2 + a3


@cuda.jit
def accumulators_kernel(out, x, iterations):
    """Register-hungry: 48 live accumulators per thread (the loops unroll into registers)."""
    i = cuda.grid(1)
    acc = cuda.local.array(ACCUMULATORS, float32)
    for k in range(ACCUMULATORS):
        acc[k] = x[(i + k) % x.size]
    for _ in range(iterations):
        for k in range(ACCUMULATORS):
            acc[k] = acc[k] * FMA_B + FMA_C
    total = float32(0)
    for k in range(ACCUMULATORS):
        total += acc[k]
    if i < out.size:
        out[i] = total


@cuda.jit
def block_sum_kernel(out, x):
    """Shared memory: a 1024-float tile (4 KB of static shared memory per block), tree reduction."""
    tile = cuda.shared.array(1024, float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    tile[t] = x[i] if i < x.size else float32(0)
    cuda.syncthreads()
    stride = cuda.blockDim.x // 2
    while stride > 0:
        if t < stride:
            tile[t] += tile[t + stride]
        cuda.syncthreads()
        stride //= 2
    if t == 0:
        out[cuda.blockIdx.x] = tile[0]
