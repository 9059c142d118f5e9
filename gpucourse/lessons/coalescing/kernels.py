"""Lesson 03 "Memory coalescing": the kernels learners read (and the constants they need)."""

from __future__ import annotations

import numpy as np

# Importing gpucourse.coalescing runs gpucourse/__init__ first, which chooses the mode before numba
# loads: numba.cuda is the GPU or the simulator.
from numba import cuda

# --- kernels ---------------------------------------------------------------------------------------


@cuda.jit
def strided_copy(src, dst, n, stride, offset):
    i = cuda.grid(1)
    if i < n:
        j = i * stride + offset  # lane l of a warp touches element (base + l)·stride + offset
        dst[j] = src[j]


@cuda.jit
def drift_aos(p, dt):
    # p[i] is one particle: 8 float32 fields side by side (x y z vx vy vz mass charge).
    i = cuda.grid(1)
    step = np.float32(dt)  # a Python float arrives as float64: fp32 arithmetic needs an fp32 step
    if i < p.shape[0]:
        p[i, 0] += p[i, 3] * step
        p[i, 1] += p[i, 4] * step
        p[i, 2] += p[i, 5] * step


@cuda.jit
def drift_soa(x, y, z, vx, vy, vz, dt):
    # One array per field: neighbouring lanes read neighbouring floats.
    i = cuda.grid(1)
    step = np.float32(dt)  # a Python float arrives as float64: fp32 arithmetic needs an fp32 step
    if i < x.shape[0]:
        x[i] += vx[i] * step
        y[i] += vy[i] * step
        z[i] += vz[i] * step


@cuda.jit
def copy_rows(a, out):
    col, row = cuda.grid(2)  # x → column: a warp's lanes walk along one row
    if row < a.shape[0] and col < a.shape[1]:
        out[row, col] = a[row, col]


@cuda.jit
def copy_columns(a, out):
    row, col = cuda.grid(2)  # x → row: a warp's lanes walk down one column
    if row < a.shape[0] and col < a.shape[1]:
        out[row, col] = a[row, col]


# --- work per thread: the copy within reach of the ceiling ------------------------------------------------
# numba-cuda passes arrays without `noalias` (C's __restrict__): the compiler must assume that a store to dst
# may change src, so it will not move a later load above an earlier store. The four loads are written first,
# by hand, so four are in flight per thread before the first store.

ILP = 4  # independent loads per thread per trip of the grid-stride loop


@cuda.jit
def copy_ilp4(src, dst, n, stride, offset):
    # Grid-stride: thread i copies elements i, i + G, i + 2G, i + 3G (G = threads in the grid), then moves
    # on by 4G. Each of the four loads is a warp request with the same lane-to-element mapping as
    # strided_copy's (lane l → (base + l)·stride + offset): the same sectors per request.
    g = cuda.gridsize(1)
    i = cuda.grid(1)
    while i < n:
        if i + 3 * g < n:
            j0 = i * stride + offset
            j1 = (i + g) * stride + offset
            j2 = (i + 2 * g) * stride + offset
            j3 = (i + 3 * g) * stride + offset
            a0 = src[j0]  # four loads in flight ...
            a1 = src[j1]
            a2 = src[j2]
            a3 = src[j3]
            dst[j0] = a0  # ... before the first store
            dst[j1] = a1
            dst[j2] = a2
            dst[j3] = a3
        else:  # the last trip: fewer than four elements left for this thread
            for k in range(ILP):
                if i + k * g < n:
                    j = (i + k * g) * stride + offset
                    dst[j] = src[j]
        i += ILP * g


@cuda.jit
def best_copy(src, dst, n):
    # The course's best Numba copy: copy_ilp4 at stride 1. Pass 8-byte lanes (a float32 array viewed as
    # float64: `a.view(np.float64)`) and each load is one 64-bit LDG.E.64: 4 × 8 B = 32 B in flight per thread.
    g = cuda.gridsize(1)
    i = cuda.grid(1)
    while i < n:
        if i + 3 * g < n:
            a0 = src[i]
            a1 = src[i + g]
            a2 = src[i + 2 * g]
            a3 = src[i + 3 * g]
            dst[i] = a0
            dst[i + g] = a1
            dst[i + 2 * g] = a2
            dst[i + 3 * g] = a3
        else:
            for k in range(ILP):
                if i + k * g < n:
                    dst[i + k * g] = src[i + k * g]
        i += ILP * g
