"""Counted quantities of lesson 04a, as pure functions (no kernel launches): steps, adds, warp issues.

All of them follow from the kernels' index arithmetic, for a block of B threads (a power of two,
32 ≤ B ≤ 1024) and 32-lane warps; the tests check them against hand-worked numbers and against
the microscope's counts of the same kernels.
"""

from __future__ import annotations

import math

from gpucourse.errors import InvalidConfig
from gpucourse.hardware import COMPUTE_CAPABILITIES, MAX_THREADS_PER_BLOCK, WARP_SIZE
from gpucourse.lessons.reductions.kernels import ELEMENTS_PER_THREAD, GRID_STRIDE_PARTIALS
from gpucourse.measure import calibration as calibrations

BANKS = 32


def check_block(block) -> int:
    """A block size for these kernels: a power of two from 32 to 1024 (the tree halves it each step)."""
    if isinstance(block, bool) or not isinstance(block, int):
        raise InvalidConfig(f"block must be an integer power of two from 32 to {MAX_THREADS_PER_BLOCK}; "
                            f"got {block!r}")
    if block < WARP_SIZE or block > MAX_THREADS_PER_BLOCK or block & (block - 1):
        raise InvalidConfig(f"block must be a power of two from 32 to {MAX_THREADS_PER_BLOCK} (the tree halves "
                            f"the block at each step, and the shuffle step needs whole warps); got {block}")
    return block


def tree_steps(block: int) -> int:
    """Steps (barrier-separated rounds) of a tree reduction over one block: log2(B)."""
    return int(math.log2(check_block(block)))


def tree_adds(block: int) -> int:
    """Adds of a tree reduction over B values: B - 1, whatever the indexing."""
    return check_block(block) - 1


def _strides(block: int, variant: str) -> list[int]:
    b = check_block(block)
    strides = [1 << k for k in range(tree_steps(b))]
    return strides if variant in ("interleaved", "strided index") else strides[::-1]


def active_threads_per_step(block: int, variant: str = "sequential") -> list[int]:
    """Threads that add at each step: B/2, B/4, …, 1 (the same for every indexing)."""
    check_block(block)
    if variant in ("interleaved", "strided index"):
        return [block // (2 * s) for s in _strides(block, variant)]
    return list(_strides(block, variant))


def add_warp_issues_per_step(block: int, variant: str) -> list[int]:
    """Warps that issue the add at each step (a warp issues it if any of its lanes adds).

    * interleaved: the adders are threads 0, 2s, 4s, …, spread over min(B/32, B/(2s)) warps;
    * strided index and sequential: the adders are the first threads, packed into ⌈adders/32⌉ warps."""
    issues = []
    for s, adders in zip(_strides(block, variant), active_threads_per_step(block, variant), strict=True):
        if variant == "interleaved":
            issues.append(min(block // WARP_SIZE, block // (2 * s)))
        else:
            issues.append(-(-adders // WARP_SIZE))
    return issues


def add_warp_issues(block: int, variant: str) -> int:
    """Total warp issues of the tree's add line over one block (the shared tree only)."""
    return sum(add_warp_issues_per_step(block, variant))


def idle_lanes(block: int, variant: str) -> int:
    """Lanes that ride along without adding, summed over the tree's add issues: 32·issues − (B − 1)."""
    return WARP_SIZE * add_warp_issues(block, variant) - tree_adds(block)


def strided_index_max_ways(block: int) -> int:
    """Worst bank conflict of the strided-index kernel: at stride s a warp's lanes touch words
    0, 2s, 4s, …, so min(2s, B/32) lanes share a bank while 2s ≤ 32 and all active lanes
    (min(32, B/2s)) share bank 0 beyond; the worst over all steps is min(32, B/32)."""
    return max(1, min(BANKS, check_block(block) // WARP_SIZE))


def blocks_needed(n: int, block: int, elements_per_thread: int = 1) -> int:
    """Blocks one pass needs to cover n elements."""
    return -(-int(n) // (check_block(block) * elements_per_thread))


def reduction_passes(n: int, block: int, elements_per_thread: int = 1) -> int:
    """Launches until one value is left, each pass reducing the previous pass's partial sums."""
    passes, left = 0, int(n)
    while True:
        left = blocks_needed(left, block, elements_per_thread)
        passes += 1
        if left == 1:
            return passes


def warp_shuffle_steps() -> int:
    """Shuffle steps of a warp sum: offsets 16, 8, 4, 2, 1."""
    return int(math.log2(WARP_SIZE))


# --- the grid-stride rung and Little's law ---------------------------------------------------------------

FLOAT32_BYTES = 4
# Little's law needs a loaded latency: the course's one calibration per GPU (gpucourse.measure.calibration,
# lesson 03's one-element copy: its *reads* in flight ÷ its *read* rate), passed in by the caller. A reduction
# moves only reads, so its bound is read bytes in flight ÷ that latency, compared with read GB/s.


def resident_blocks(sm_count: int, cc: tuple[int, int], block: int) -> int:
    """Blocks of B threads the GPU holds at once when threads are the only limit: SMs × (threads per SM ÷ B).
    (The grid-stride rung uses a few registers and 32 B of shared memory per warp: threads are its limit.)"""
    if cc not in COMPUTE_CAPABILITIES:
        raise InvalidConfig(f"compute capability {cc[0]}.{cc[1]} is not modelled; known: "
                            + ", ".join(f"{a}.{b}" for a, b in COMPUTE_CAPABILITIES))
    if isinstance(sm_count, bool) or not isinstance(sm_count, int) or sm_count < 1:
        raise InvalidConfig(f"sm_count must be a positive integer; got {sm_count!r}")
    return sm_count * (COMPUTE_CAPABILITIES[cc].max_threads_per_sm // check_block(block))


def grid_stride_blocks(n: int, block: int, resident: int) -> int:
    """The grid-stride rung's grid: no more blocks than are resident, and no more than give every thread
    GRID_STRIDE_PARTIALS elements (a small n needs few blocks); at least one."""
    if isinstance(resident, bool) or not isinstance(resident, int) or resident < 1:
        raise InvalidConfig(f"resident must be a positive number of blocks; got {resident!r}")
    return max(1, min(resident, blocks_needed(n, block, GRID_STRIDE_PARTIALS)))


def grid_stride_loads_per_thread(n: int, block: int, grid: int) -> tuple[int, int]:
    """(fewest, most) elements one thread of the grid-stride rung loads: ⌊n / (grid·B)⌋ and ⌈n / (grid·B)⌉."""
    threads = int(grid) * check_block(block)
    return int(n) // threads, -(-int(n) // threads)


def loads_in_flight_per_thread(variant: str) -> int:
    """Global loads one thread can have in flight at once: its independent loads before the first use.
    1 for the first three rungs, 2 with the first add, GRID_STRIDE_PARTIALS for the grid-stride rung."""
    if variant not in ELEMENTS_PER_THREAD:
        raise InvalidConfig(f"variant must be one of {', '.join(ELEMENTS_PER_THREAD)}; got {variant!r}")
    return ELEMENTS_PER_THREAD[variant]


def bytes_in_flight(sm_count: int, threads_per_sm: int, loads_per_thread: int, bytes_per_load: int = FLOAT32_BYTES
                    ) -> int:
    """At most this many bytes of loads are on their way from DRAM: every resident thread with all its
    independent loads issued."""
    for name, value in (("sm_count", sm_count), ("threads_per_sm", threads_per_sm),
                        ("loads_per_thread", loads_per_thread), ("bytes_per_load", bytes_per_load)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidConfig(f"{name} must be a positive integer; got {value!r}")
    return sm_count * threads_per_sm * loads_per_thread * bytes_per_load


def littles_law_gbps(in_flight_bytes: float, latency_ns: float, ceiling_gbps: float) -> float:
    """Little's law: bandwidth = bytes in flight ÷ latency (bytes per ns are GB/s), never above the ceiling."""
    return calibrations.bound_gbps(in_flight_bytes, latency_ns, ceiling_gbps)


def in_flight_table(sm_count: int, cc: tuple[int, int], ceiling_gbps: float, latency_ns: float,
                    variants=tuple(ELEMENTS_PER_THREAD), latency_from: str = "calibrated"):
    """One row per rung: loads in flight per thread, the most bytes in flight on the whole GPU, and the
    bandwidth Little's law allows with them (an upper bound: a rung's blocks also spend time in the tree,
    with nothing in flight, so the measured rate sits below it)."""
    import pandas as pd

    threads = COMPUTE_CAPABILITIES[cc].max_threads_per_sm if cc in COMPUTE_CAPABILITIES else None
    if threads is None:
        resident_blocks(sm_count, cc, 256)  # raises the one-line error
    rows = []
    for variant in variants:
        loads = loads_in_flight_per_thread(variant)
        flight = bytes_in_flight(sm_count, threads, loads)
        rows.append({"variant": variant, "loads in flight per thread": loads, "bytes in flight (MB)": flight / 1e6,
                     "Little's law bound (GB/s)": littles_law_gbps(flight, latency_ns, ceiling_gbps)})
    table = pd.DataFrame(rows)
    table.attrs["source"] = (f"model: {sm_count} SMs × {threads} threads, 4 B per load, loaded latency "
                             f"{latency_ns:.0f} ns ({latency_from}), ceiling {ceiling_gbps:,.0f} GB/s")
    return table


# --- scans -----------------------------------------------------------------------------------------------


def hillis_steele_steps(block: int) -> int:
    return int(math.log2(check_block(block)))


def hillis_steele_adds(block: int) -> int:
    """At offset d, threads d … B−1 add: Σ (B − d) over d = 1, 2, 4, … = B·log2(B) − (B − 1)."""
    b = check_block(block)
    return b * hillis_steele_steps(b) - (b - 1)


def blelloch_steps(block: int) -> int:
    """Up-sweep log2(B) steps, down-sweep log2(B) steps."""
    return 2 * int(math.log2(check_block(block)))


def blelloch_adds(block: int) -> int:
    """B − 1 adds up the tree, B − 1 down: 2(B − 1), linear like a serial scan (which does B − 1)."""
    return 2 * (check_block(block) - 1)


def serial_scan_adds(block: int) -> int:
    return check_block(block) - 1


def model_table(blocks=(32, 64, 128, 256, 512, 1024)):
    """One row per block size: the curves the lesson draws."""
    import pandas as pd

    rows = []
    for b in blocks:
        row = {"block": b, "tree steps": tree_steps(b), "tree adds": tree_adds(b),
               "Hillis-Steele steps": hillis_steele_steps(b), "Hillis-Steele adds": hillis_steele_adds(b),
               "Blelloch steps": blelloch_steps(b), "Blelloch adds": blelloch_adds(b)}
        for v in ("interleaved", "sequential"):
            row[f"{v} add issues"] = add_warp_issues(b, v)
            row[f"{v} idle lanes"] = idle_lanes(b, v)
        rows.append(row)
    return pd.DataFrame(rows)
