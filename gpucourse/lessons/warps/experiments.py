"""Lesson 01 "Warps and SIMT": host runners, microscope traces, GPU sweeps and their recording registration."""

from __future__ import annotations

import numpy as np
import pandas as pd
from numba import cuda  # after gpucourse.measure.runtime (imported by the package) chose the mode

from gpucourse.lessons.warps.kernels import _fma_kernel
from gpucourse.lessons.warps.model import warps_per_block
from gpucourse.measure import reference, runtime
from gpucourse.measure.harness import measure

STAIRCASE_THREADS = (1, 8, 16, 31, 32, 33, 48, 63, 64, 65, 96, 97, 128)
FMA_ITERATIONS = 4096


def measure_staircase(threads=STAIRCASE_THREADS, blocks_per_sm: int = 16,
                      min_total_ms: float | None = None) -> pd.DataFrame:
    """On a GPU: time of a fixed number of blocks of T threads each (compute-bound).
    ``min_total_ms``: GPU time per point (default: the harness's contract; a live chart asks for less)."""
    kernel = _fma_kernel()
    blocks = blocks_per_sm * (runtime.device().sm_count or 1)
    out = cuda.device_array(blocks * max(threads), dtype=np.float32)
    rows = []
    for t in threads:
        m = measure(lambda t=t: kernel[blocks, t](out, FMA_ITERATIONS), label=f"{t} threads/block",
                    flops=blocks * t * FMA_ITERATIONS * 4 * 2, min_total_ms=min_total_ms)
        rows.append({"threads_per_block": t, "warps_per_block": warps_per_block(t), "median_ms": m.median_ms,
                     "iqr_ms": m.iqr_ms, "n_samples": m.n_samples})
    return pd.DataFrame(rows)


@reference.register_sweep(
    "warps.staircase", lesson="01_warps", columns=("threads_per_block", "warps_per_block", "median_ms"),
    description="compute-bound kernel: time vs threads per block (16 blocks per SM, 4096 FMAs x 4 chains)",
)
def _staircase_sweep() -> pd.DataFrame:
    return measure_staircase()
