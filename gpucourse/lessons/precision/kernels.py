"""Lesson 07 "Mixed precision and tensor cores": the kernels learners read (and the constants they need)."""

from __future__ import annotations

from numba import cuda  # gpucourse/__init__ ran first and chose the mode: the GPU or the simulator
from numba.types import float16, float32

# --- accumulation kernels (one thread per row; the running sum is saved at checkpoints) -----------


@cuda.jit
def sum_fp16_kernel(x, checkpoints, out):
    row = cuda.grid(1)
    if row < x.shape[0]:
        total = float16(0.0)
        k = 0
        for j in range(x.shape[1]):
            total = total + x[row, j]  # fp16 + fp16, rounded to fp16 every step
            if k < checkpoints.shape[0] and j + 1 == checkpoints[k]:
                out[row, k] = float32(total)
                k += 1


@cuda.jit
def sum_fp32_kernel(x, checkpoints, out):
    row = cuda.grid(1)
    if row < x.shape[0]:
        total = float32(0.0)
        k = 0
        for j in range(x.shape[1]):
            total += float32(x[row, j])  # fp16 input widened exactly, sum kept in fp32
            if k < checkpoints.shape[0] and j + 1 == checkpoints[k]:
                out[row, k] = total
                k += 1


@cuda.jit
def sum_kahan_fp16_kernel(x, checkpoints, out):
    row = cuda.grid(1)
    if row < x.shape[0]:
        total = float16(0.0)
        compensation = float16(0.0)  # the low-order part that the last addition lost
        k = 0
        for j in range(x.shape[1]):
            y = x[row, j] - compensation
            t = total + y
            compensation = (t - total) - y  # algebraically 0; in fp16 exactly what rounding dropped
            total = t
            if k < checkpoints.shape[0] and j + 1 == checkpoints[k]:
                out[row, k] = float32(total)
                k += 1


@cuda.jit
def sum_kahan_fp32_kernel(x, checkpoints, out):
    row = cuda.grid(1)
    if row < x.shape[0]:
        total = float32(0.0)
        compensation = float32(0.0)
        k = 0
        for j in range(x.shape[1]):
            y = float32(x[row, j]) - compensation
            t = total + y
            compensation = (t - total) - y
            total = t
            if k < checkpoints.shape[0] and j + 1 == checkpoints[k]:
                out[row, k] = total
                k += 1
