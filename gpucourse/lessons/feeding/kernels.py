"""Lesson 08's kernels: exactly the code learners read.

* the elementwise chain y = (max(2x + bias, 0))² + 1 written as five small kernels
  (``scale``, ``add``, ``relu``, ``square``, ``add_scalar``) and as one fused kernel
  (``fused_chain``): the same arithmetic, in the same fp32 order;
* ``add_one``: a tiny kernel for timing launches;
* ``sweep_copy``: a grid-stride copy for the L2 working-set sweep, ``passes`` times over the
  working set in one launch (one pass over 13 MB is a few µs: launch and drain, not the L2).
"""

from __future__ import annotations

import numpy as np
from numba import cuda  # after gpucourse.measure.runtime (imported by the package) chose the mode

TWO, ZERO, ONE = np.float32(2.0), np.float32(0.0), np.float32(1.0)


@cuda.jit
def scale(x, out, factor):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = x[i] * factor


@cuda.jit
def add(a, b, out):
    i = cuda.grid(1)
    if i < a.size:
        out[i] = a[i] + b[i]


@cuda.jit
def relu(x, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = max(x[i], ZERO)


@cuda.jit
def square(x, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = x[i] * x[i]


@cuda.jit
def add_scalar(x, out, value):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = x[i] + value


@cuda.jit
def fused_chain(x, bias, out):
    # The five operations in one pass: x and bias are read once, y written once; t stays in a register.
    i = cuda.grid(1)
    if i < x.size:
        t = x[i] * TWO + bias[i]
        t = max(t, ZERO)
        out[i] = t * t + ONE


@cuda.jit
def add_one(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] += ONE


@cuda.jit
def sweep_copy(src, dst, passes):
    stride = cuda.gridsize(1)
    for _ in range(passes):
        i = cuda.grid(1)
        while i < src.size:
            dst[i] = src[i]
            i += stride
