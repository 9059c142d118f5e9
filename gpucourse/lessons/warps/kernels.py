"""Lesson 01 "Warps and SIMT": the kernels learners read (and the constants they need)."""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda  # after gpucourse.measure.runtime (imported by the package) chose the mode

# --- the staircase: a compute-bound kernel, time vs threads per block --------------------------


@functools.cache  # one dispatcher per process: every call used to compile it again
def _fma_kernel():
    @cuda.jit
    def fma_chains(out, iterations):
        # Four independent chains per thread keep the FMA pipes busy (throughput-bound, not latency).
        i = cuda.grid(1)
        # fp32 throughout: a bare 1.0 or 0.999 is a float64 in Numba (1/32 to 1/64 of fp32 speed)
        m, k = np.float32(0.999), np.float32(0.001)
        a, b, c, d = np.float32(i), np.float32(2 * i), np.float32(3 * i), np.float32(4 * i)
        for _ in range(iterations):
            a = a * m + k
            b = b * m + k
            c = c * m + k
            d = d * m + k
        if i < out.size:
            out[i] = a + b + c + d

    return fma_chains
