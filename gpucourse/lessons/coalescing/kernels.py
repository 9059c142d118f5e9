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
