"""Lesson 02 "Warp divergence": the kernels learners read (and the constants they need)."""

from __future__ import annotations

import numpy as np
from numba import cuda  # importing gpucourse has already chosen the mode (simulator or GPU)

SIG_TWO_PATHS = "void(uint8[::1], float32[::1], float32[::1], int64, int64)"
SIG_REMAPPED = "void(int64[::1], uint8[::1], float32[::1], float32[::1], int64, int64)"
SIG_PREDICATED = "void(uint8[::1], float32[::1], float32[::1])"


# --- kernels -------------------------------------------------------------------------------------


@cuda.jit
def two_paths(flags, x, out, body_a, body_b):
    i = cuda.grid(1)
    if i < out.size:
        v = x[i]
        if flags[i]:
            for _ in range(body_a):  # path A: real work, kept as a branch
                v = v * np.float32(0.999) + np.float32(0.001)
        else:
            for _ in range(body_b):  # path B: different real work
                v = v * np.float32(0.998) + np.float32(0.004)
        out[i] = v


@cuda.jit
def two_paths_remapped(order, flags, x, out, body_a, body_b):
    t = cuda.grid(1)
    if t < order.size:
        i = order[t]  # thread t works on element order[t]: in sorted order, warps agree
        v = x[i]
        if flags[i]:
            for _ in range(body_a):
                v = v * np.float32(0.999) + np.float32(0.001)
        else:
            for _ in range(body_b):
                v = v * np.float32(0.998) + np.float32(0.004)
        out[i] = v


@cuda.jit
def predicated(flags, x, out):
    i = cuda.grid(1)
    if i < out.size:
        v = x[i]
        if flags[i]:  # one instruction per side: the compiler computes both and selects
            v = v * np.float32(0.5)
        else:
            v = v + np.float32(1.0)
        out[i] = v
