"""Lesson 00a's arithmetic: how many blocks a launch needs, how many threads idle, what gets copied.

Pure functions, no kernel launches: the lesson checks its predictions against them and the
microscope's counts.
"""

from __future__ import annotations

import math

import pandas as pd

from gpucourse import validate


def blocks_for(n: int, threads_per_block: int) -> int:
    """⌈n / threads per block⌉: enough whole blocks to give every element a thread."""
    n = validate.integer("n", n, minimum=1, maximum=2**31 - 1)
    threads = validate.integer("threads per block", threads_per_block, minimum=1, maximum=1024)
    return math.ceil(n / threads)


def launch_plan(n: int, threads_per_block: int) -> dict:
    """The launch a one-thread-per-element kernel needs: blocks, threads launched, threads past the end."""
    blocks = blocks_for(n, threads_per_block)
    launched = blocks * threads_per_block
    return {"n": n, "threads_per_block": threads_per_block, "blocks": blocks, "threads_launched": launched,
            "threads_past_the_end": launched - n}


def grid_2d(rows: int, cols: int, block_x: int, block_y: int) -> dict:
    """A 2-D launch over a rows × cols array: grid (⌈cols/bx⌉, ⌈rows/by⌉), x along the columns."""
    rows = validate.integer("rows", rows, minimum=1, maximum=65535)
    cols = validate.integer("cols", cols, minimum=1, maximum=2**31 - 1)
    bx, by, _ = validate.block((block_x, block_y))
    grid = (math.ceil(cols / bx), math.ceil(rows / by))
    launched = grid[0] * bx * grid[1] * by
    return {"grid": grid, "block": (bx, by), "threads_launched": launched, "idle_threads": launched - rows * cols}


def elements_per_thread(n: int, threads_launched: int) -> tuple[int, int]:
    """A grid-stride loop's share: the fewest and the most elements one thread handles."""
    n = validate.integer("n", n, minimum=0, maximum=2**40)
    threads = validate.integer("threads launched", threads_launched, minimum=1, maximum=2**40)
    return n // threads, math.ceil(n / threads)


def transfers(launches: int, input_arrays: int, output_arrays: int, *, device_resident: bool) -> pd.DataFrame:
    """Host↔device copies of a loop of ``launches`` launches.

    Passing NumPy arrays to a Numba kernel copies every array to the device before each launch and
    back after it (Numba cannot know which ones the kernel wrote). With device arrays the inputs are
    copied in once (``cuda.to_device``), the outputs are allocated on the device without a copy
    (``cuda.device_array``) and copied out once (``copy_to_host``), whatever the number of launches."""
    launches = validate.integer("launches", launches, minimum=1, maximum=10**6)
    inputs = validate.integer("input arrays", input_arrays, minimum=0, maximum=64)
    outputs = validate.integer("output arrays", output_arrays, minimum=1, maximum=64)
    arrays = inputs + outputs
    if device_resident:
        to_device, to_host = inputs, outputs
    else:
        to_device, to_host = launches * arrays, launches * arrays
    return pd.DataFrame([{"launches": launches, "arrays passed": "device arrays" if device_resident else "NumPy arrays",
                          "copies to the device": to_device, "copies to the host": to_host}])
