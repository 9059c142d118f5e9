"""Lesson 00 "Start here: measuring GPU code": the kernels learners read (and the constants they need)."""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda  # after gpucourse.measure.runtime (imported by the package) chose the mode


@functools.cache  # one dispatcher per process: every call used to compile it again
def _spin_kernel():
    @cuda.jit
    def spin(out, iterations):
        # A long dependent chain: milliseconds of GPU work from one small launch.
        i = cuda.grid(1)
        x = np.float32(i)  # fp32 throughout: a bare 1.0 or 0.9999 is a float64 in Numba
        for _ in range(iterations):
            x = x * np.float32(0.9999) + np.float32(0.0001)
        if i < out.size:
            out[i] = x

    return spin
