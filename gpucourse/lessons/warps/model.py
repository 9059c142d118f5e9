"""Lesson 01 "Warps and SIMT": the hardware model, counted quantities, and the checks and helpers the runners share."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from gpucourse import validate
from gpucourse.hardware import WARP_SIZE


def warps_per_block(threads_per_block: int) -> int:
    """A block of T threads occupies ⌈T/32⌉ warps: a partial warp still takes a whole warp."""
    threads = validate.integer("threads per block", threads_per_block, minimum=1, maximum=1024)
    return math.ceil(threads / WARP_SIZE)


def lane_map(block_shape) -> pd.DataFrame:
    """One row per thread of a block: tx, ty, tz, linear, warp, lane."""
    bx, by, bz = validate.block(block_shape)
    tz, ty, tx = np.meshgrid(np.arange(bz), np.arange(by), np.arange(bx), indexing="ij")
    linear = (tx + ty * bx + tz * bx * by).ravel()
    return pd.DataFrame({
        "tx": tx.ravel(), "ty": ty.ravel(), "tz": tz.ravel(), "linear": linear,
        "warp": linear // WARP_SIZE, "lane": linear % WARP_SIZE,
    })


def staircase_model(threads: list[int]) -> list[int]:
    """Warps issued per block: the cost unit of a compute-bound kernel."""
    return [warps_per_block(t) for t in threads]
