"""Lesson 04 "Shared memory: tiling and bank conflicts":
the hardware model, counted quantities, and the checks and helpers the runners share."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

# gpucourse/__init__ has chosen the mode before this runs. Kernels reach ``cuda`` through this
# module-level name so that the simulator (and the microscope) can swap in their own.
from gpucourse import validate
from gpucourse.errors import InvalidConfig
from gpucourse.hardware import WARP_SIZE
from gpucourse.lessons.tiling.kernels import (
    CUDA_BLOCK_TILE,
    CUDA_K_TILE,
    CUDA_THREADS,
    FLOAT_BYTES,
    check_register_blocking,
    check_tile,
    check_transpose_shape,
    check_vectorised,
    copy_kernel,
    naive_matmul_kernel,
    naive_transpose_kernel,
    register_blocked_kernel,
    shared_transpose_kernel,
    tiled_matmul_kernel,
    vectorised_matmul_kernel,
)
from gpucourse.measure import runtime

BANK_BYTES = 4
SIM_MAX_N = 64  # the simulator runs a few hundred threads per second: keep it small
NAIVE_BLOCK = (16, 16)
REGISTER_BLOCKED = ((64, 8, 4), (128, 8, 8))  # (block tile, k tile, thread tile) of the two recorded variants
# The rungs after them (kernels.vectorised_matmul_kernel): contiguous fragments (LDS.128), A transposed,
# register prefetch, one barrier per k-tile. Then the same tiling in CUDA C++ (float4 global loads).
VECTORISED = ((64, 8, 4), (128, 8, 8))
KINDS = ("naive", "tiled", "register-blocked", "vectorised", "CUDA C++", "cuBLAS")
TRANSPOSE_VARIANTS = ("copy", "naive", "shared", "shared+pad")

RUNG_COLOURS = {"naive": 3, "tiled": 0, "register-blocked": 2, "vectorised": 1, "CUDA C++": 6,
                "cuBLAS": 7}  # palette index per rung


# --- validation: every public entry point refuses bad input before anything launches -------------


def check_size(name: str, value) -> int:
    """A matrix size: ≥ 1, and ≤ 64 in simulator mode."""
    if runtime.is_gpu():
        return validate.integer(name, value, minimum=1, maximum=65536)
    value = validate.integer(name, value, minimum=1)
    if value > SIM_MAX_N:
        raise InvalidConfig(
            f"{name} = {value} is too large for the simulator (it runs a few hundred threads per second); "
            f"use {name} ≤ {SIM_MAX_N} here, or run on a GPU"
        )
    return value


def default_block_rows(tile: int) -> int:
    """Harris's shape: a 32×8 block for a 32×32 tile; smaller tiles keep up to 8 rows."""
    return math.gcd(int(tile), 8) if isinstance(tile, int) and tile > 0 else 8


# --- the ladder's rungs --------------------------------------------------------------------------


@dataclass(frozen=True)
class Rung:
    """One rung of the matmul ladder and how it launches."""

    kind: str  # one of KINDS
    tile: int = 0  # tiled: T; register-blocked: the block tile
    k_tile: int = 0
    thread_tile: int = 0

    @property
    def label(self) -> str:
        if self.kind == "tiled":
            return f"tiled {self.tile}"
        if self.kind in ("register-blocked", "vectorised"):
            return f"{self.kind} {self.tile}/{self.thread_tile}"
        if self.kind == "CUDA C++":
            return f"CUDA C++ {self.tile}/{self.thread_tile} (float4)"
        return self.kind

    @property
    def output_tile(self) -> tuple[int, int]:
        """The patch of C whose operands are fetched together (rows, columns): it sets the traffic."""
        if self.kind == "naive":
            # No shared memory, but the lanes of one warp (a 2×16 patch of C with 16×16 blocks) that
            # read the same word of A or B share it: a broadcast, counted once.
            bx = NAIVE_BLOCK[0]
            return WARP_SIZE // bx, bx
        if self.kind == "cuBLAS":
            return 0, 0  # not modelled: its compulsory traffic is used instead
        return self.tile, self.tile

    def kernel(self):
        if self.kind == "naive":
            return naive_matmul_kernel()
        if self.kind == "tiled":
            return tiled_matmul_kernel(self.tile)
        if self.kind == "register-blocked":
            return register_blocked_kernel(self.tile, self.k_tile, self.thread_tile)
        if self.kind == "vectorised":
            return vectorised_matmul_kernel(self.tile, self.k_tile, self.thread_tile)
        raise InvalidConfig(f"{self.kind} is not a Numba kernel of this module (cuBLAS is a library call; the "
                            "CUDA C++ rung is a CuPy RawKernel, launched by tiling.matmul on a GPU)")

    def launch_config(self, m: int, n: int) -> tuple[tuple[int, int], tuple[int, int]]:
        """(grid, block) covering an m×n output."""
        if self.kind == "naive":
            bx, by = NAIVE_BLOCK
            return (-(-n // bx), -(-m // by)), NAIVE_BLOCK
        if self.kind == "tiled":
            t = self.tile
            return (-(-n // t), -(-m // t)), (t, t)
        if self.kind == "register-blocked":
            side = self.tile // self.thread_tile
            return (-(-n // self.tile), -(-m // self.tile)), (side, side)
        if self.kind in ("vectorised", "CUDA C++"):  # a 1-D block of (BM/TM)² threads
            side = self.tile // self.thread_tile
            return (-(-n // self.tile), -(-m // self.tile)), (side * side,)
        raise InvalidConfig("cuBLAS chooses its own launch")

    @property
    def shared_bytes(self) -> int:
        if self.kind == "tiled":
            return 2 * self.tile * self.tile * FLOAT_BYTES
        if self.kind == "register-blocked":
            return 2 * self.tile * self.k_tile * FLOAT_BYTES
        if self.kind in ("vectorised", "CUDA C++"):  # two buffers, A's rows padded by 4 floats
            return 2 * self.k_tile * (2 * self.tile + 4) * FLOAT_BYTES
        return 0


def rung(kind: str, tile: int = 16, *, k_tile: int = 8, thread_tile: int = 4) -> Rung:
    """A validated rung: ``rung("tiled", 16)``, ``rung("register-blocked", 64, thread_tile=4)``,
    ``rung("vectorised", 128, thread_tile=8)``, ``rung("CUDA C++")`` (its tiling is fixed: 128/8/8)."""
    kind = validate.choice("rung", kind, list(KINDS))
    if kind == "tiled":
        return Rung("tiled", check_tile(tile))
    if kind == "register-blocked":
        return Rung("register-blocked", *check_register_blocking(tile, k_tile, thread_tile))
    if kind == "vectorised":
        return Rung("vectorised", *check_vectorised(tile, k_tile, thread_tile))
    if kind == "CUDA C++":
        return Rung("CUDA C++", CUDA_BLOCK_TILE, CUDA_K_TILE, CUDA_BLOCK_TILE // int(CUDA_THREADS ** 0.5))
    return Rung(kind)


def numba_rungs() -> list[Rung]:
    """The register-blocked and vectorised Numba rungs, each block tile's pair together (the roofline's order)."""
    return [rung(kind, bt, k_tile=kt, thread_tile=tt)
            for old, new in zip(REGISTER_BLOCKED, VECTORISED, strict=True)
            for kind, (bt, kt, tt) in (("register-blocked", old), ("vectorised", new))]


def ladder(tile: int = 16) -> list[Rung]:
    """The rungs a chart shows for one tile choice."""
    return [rung("naive"), rung("tiled", tile)] + numba_rungs() + [rung("CUDA C++"), rung("cuBLAS")]


def _check_operands(a, b) -> tuple[int, int, int]:
    for name, x in (("a", a), ("b", b)):
        if getattr(x, "ndim", None) != 2:
            raise InvalidConfig(f"{name} must be a 2-D array, got {type(x).__name__} with shape "
                                f"{getattr(x, 'shape', None)}")
        if np.dtype(x.dtype) != np.float32:
            raise InvalidConfig(f"{name} must be float32 (the ladder is an fp32 comparison), got {x.dtype}")
    m, depth = a.shape
    if b.shape[0] != depth:
        raise InvalidConfig(f"a is {m}×{depth} so b must have {depth} rows, got {b.shape[0]}×{b.shape[1]}")
    for name, value in (("m", m), ("k", depth), ("n", b.shape[1])):
        check_size(f"matrix size {name}", value)
    return m, depth, int(b.shape[1])


# --- counting: FLOPs, global traffic, intensity ---------------------------------------------------


def matmul_flops(m: int, n: int | None = None, k: int | None = None) -> int:
    """2·m·n·k: one multiply and one add per term."""
    n = m if n is None else n
    k = m if k is None else k
    return 2 * m * n * k


def matmul_traffic_bytes(r: Rung, m: int, n: int | None = None, k: int | None = None) -> int:
    """Bytes the warps request from global memory (distinct bytes per warp request; caches ignored).

    A block that computes a BM×BN output tile reads a BM×k strip of A and a k×BN strip of B once.
    Over ⌈n/BN⌉ × ⌈m/BM⌉ blocks: A is read ⌈n/BN⌉ times, B ⌈m/BM⌉ times, C written once. For the
    naive kernel the sharing is only within a warp (a 2×16 patch of C). cuBLAS is given its
    compulsory traffic (each matrix once). The microscope counts the same bytes (``bytes_requested``)
    and agrees exactly when the sizes are multiples of the tile (and of 16 for the naive kernel).
    """
    n = m if n is None else n
    k = m if k is None else k
    if r.kind == "cuBLAS":
        return FLOAT_BYTES * (m * k + k * n + m * n)
    bm, bn = r.output_tile
    return FLOAT_BYTES * (m * k * -(-n // bn) + k * n * -(-m // bm) + m * n)


def intensity(r: Rung, n: int) -> float:
    """FLOPs per byte of global traffic for an n×n×n product."""
    return matmul_flops(n) / matmul_traffic_bytes(r, n)


def intensity_table(n: int = 4096, tile: int = 16) -> pd.DataFrame:
    """FLOPs, counted bytes and FLOP/byte for each rung at size n (a model: no kernel runs)."""
    n = validate.integer("n", n, minimum=1, maximum=65536)
    rows = []
    for r in ladder(tile):
        traffic = matmul_traffic_bytes(r, n)
        rows.append({"rung": r.label, "n": n, "flops": matmul_flops(n), "traffic_bytes": traffic,
                     "flop_per_byte": matmul_flops(n) / traffic,
                     "note": ("compulsory traffic (each matrix once)" if r.kind == "cuBLAS"
                              else "bytes the warps request (counted)")})
    return pd.DataFrame(rows)


def add_library_fraction(data: pd.DataFrame) -> pd.DataFrame:
    data = data.copy()
    library = data[data.kind == "cuBLAS"].set_index("n").gflops
    data["fraction_of_library"] = data.gflops / data.n.map(library)
    return data


def _style_index(r_label: str, kind: str) -> int:
    """Colour/marker/dash index: one per rung (the second register-blocked and vectorised variants get their own)."""
    first = REGISTER_BLOCKED[0]
    if kind == "register-blocked" and not r_label.endswith(f" {first[0]}/{first[2]}"):
        return 4
    if kind == "vectorised" and not r_label.endswith(f" {VECTORISED[0][0]}/{VECTORISED[0][2]}"):
        return 5
    return RUNG_COLOURS.get(kind, 5)


# --- the microscope on the matmul ------------------------------------------------------------------


def _trace(kernel, grid, block, *args, **kwargs):
    from gpucourse.microscope import trace

    return trace(kernel, grid, block, *args, **kwargs)


def _host_inputs(m: int, k: int, n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return (rng.random((m, k), dtype=np.float32) * 2 - 1, rng.random((k, n), dtype=np.float32) * 2 - 1)


def counted_traffic(r: Rung, n: int) -> dict:
    """Run one rung under the microscope at size n (≤ 64) and sum what its warps requested."""
    n = check_size("n", n)
    if r.kind in ("cuBLAS", "CUDA C++"):
        raise InvalidConfig(f"{r.kind} cannot run under the microscope (it is not a Numba kernel): its traffic "
                            "is modelled, not counted")
    a, b = _host_inputs(n, n, n)
    c = np.zeros((n, n), dtype=np.float32)
    grid, block = r.launch_config(n, n)
    report = _trace(r.kernel(), grid, block, a, b, c)
    mem = report.memory()
    loads = int(mem.loc[mem.op == "load", "bytes_requested"].sum())
    stores = int(mem.loc[mem.op == "store", "bytes_requested"].sum())
    banks = report.banks()
    return {"rung": r.label, "n": n, "load_bytes": loads, "store_bytes": stores,
            "counted_bytes": loads + stores,
            "model_bytes": matmul_traffic_bytes(r, n), "flops": matmul_flops(n),
            "flop_per_byte": matmul_flops(n) / (loads + stores),
            "max_bank_ways": int(banks.max_ways.max()) if len(banks) else 0,
            "correct": bool(np.allclose(c, a.astype(np.float64) @ b, atol=1e-4 * n))}


def traffic_table(n: int = 16, tile: int = 8) -> pd.DataFrame:
    """The microscope's byte counts for naive, tiled and register-blocked at a small n, beside the model."""
    rungs = [rung("naive"), rung("tiled", tile), rung("register-blocked", 16, k_tile=8, thread_tile=2)]
    return pd.DataFrame([counted_traffic(r, n) for r in rungs])


# --- barriers: what breaks without each syncthreads ------------------------------------------------

BARRIER_CASES = {
    "both barriers": (True, True),
    "no barrier after the load": (False, True),
    "no barrier after the compute": (True, False),
}


@dataclass
class BarrierResult:
    case: str
    n: int
    tile: int
    schedule: str
    seed: int
    c: np.ndarray
    reference: np.ndarray
    races: pd.DataFrame

    @property
    def wrong(self) -> np.ndarray:
        return ~np.isclose(self.c, self.reference, atol=1e-4 * self.n)

    @property
    def wrong_outputs(self) -> int:
        return int(self.wrong.sum())

    @property
    def race_count(self) -> int:
        """Racing access pairs: two threads, one shared word, at least one write, no barrier between."""
        return int(self.races["count"].sum()) if len(self.races) else 0

    def summary(self) -> str:
        return (f"{self.case}: {self.wrong_outputs} of {self.n * self.n} outputs wrong; the microscope "
                "reports "
                f"{self.race_count} racing access pairs on {len(self.races)} line pair(s) "
                f"({self.schedule} schedule, seed {self.seed})")


def barrier_experiment(case: str = "both barriers", n: int = 16, tile: int = 8, *, schedule: str = "random",
                       seed: int = 0) -> BarrierResult:
    """The tiled matmul with or without one barrier, under one of the microscope's schedules."""
    case = validate.choice("case", case, list(BARRIER_CASES))
    tile = check_tile(tile)
    n = check_size("n", n)
    schedule = validate.choice("schedule", schedule, ["sequential", "round-robin", "random"])
    seed = validate.integer("seed", seed, minimum=0)
    return _barrier_run(case, n, tile, schedule, seed)


@functools.lru_cache(maxsize=64)
def _barrier_run(case: str, n: int, tile: int, schedule: str, seed: int) -> BarrierResult:
    # Deterministic for a given (case, n, tile, schedule, seed), so a repeat is served from here.
    kernel = tiled_matmul_kernel(tile, *BARRIER_CASES[case])
    a, b = _host_inputs(n, n, n, seed=1)
    c = np.zeros((n, n), dtype=np.float32)
    grid, block = rung("tiled", tile).launch_config(n, n)
    report = _trace(kernel, grid, block, a, b, c, schedule=schedule, seed=seed)
    return BarrierResult(case, n, tile, schedule, seed, c, a.astype(np.float64) @ b, report.races())


def transpose_kernel(variant: str, tile: int = 32, block_rows: int | None = None, pad: int = 1):
    variant = validate.choice("variant", variant, TRANSPOSE_VARIANTS)
    block_rows = default_block_rows(tile) if block_rows is None else block_rows
    if variant == "copy":
        return copy_kernel(tile, block_rows)
    if variant == "naive":
        return naive_transpose_kernel(tile, block_rows)
    return shared_transpose_kernel(tile, block_rows, pad if variant == "shared+pad" else 0)


def transpose_launch(rows: int, cols: int, tile: int, block_rows: int):
    """(grid, block) for a rows×cols input: one block per tile, tile × block_rows threads."""
    return (-(-cols // tile), -(-rows // tile)), (tile, block_rows)


# --- banks: the exact rule ------------------------------------------------------------------------


def bank_of(word: int) -> int:
    """32 banks of 4 bytes: consecutive 32-bit words sit in consecutive banks (the microscope's rule)."""
    from gpucourse.microscope import analysis

    return analysis.bank_of(int(word))


def bank_ways(words) -> int:
    """Conflict ways of one warp-wide access of 4-byte elements: the most *distinct* words any bank
    must serve. Lanes reading the same word share it (a broadcast), so only distinct words count.
    Only for elements of 4 bytes: wider ones are served in phases (``warp_bank_ways``). The rule is
    the microscope's (``gpucourse.microscope.analysis.bank_ways``).
    """
    from gpucourse.microscope import analysis

    addresses = [int(w) * analysis.BANK_WORD_BYTES for w in words if w is not None]
    return analysis.bank_ways(range(len(addresses)), addresses, analysis.BANK_WORD_BYTES)


ELEMENT_BYTES = {"float32": 4, "float64": 8}


def warp_bank_ways(lanes, byte_addresses, itemsize: int) -> int:
    """Conflict ways of one warp's shared-memory access of ``itemsize``-byte elements: the
    microscope's rule (``gpucourse.microscope.analysis.bank_ways``). A request wider than 128 bytes
    is split into 128-byte phases (16 lanes of 8 bytes, 8 lanes of 16 bytes); the ways are those of
    the worst phase, so a contiguous float64 warp read is conflict-free."""
    from gpucourse.microscope import analysis

    return analysis.bank_ways(list(lanes), list(byte_addresses), int(itemsize))


def _element_bytes(dtype: str) -> int:
    return ELEMENT_BYTES[validate.choice("dtype", dtype, list(ELEMENT_BYTES))]


def transpose_warp_words(tile: int, pad: int, block_rows: int, access: str, warp: int = 0, step: int = 0):
    """Per lane of one warp: (lane, tile row, tile column, element index) of the shared transpose's
    access (for float32 the element index is the 4-byte word).

    ``access="row"``: the store ``buf[ty + k * R, tx]``; ``access="column"``: the load ``buf[tx, ty + k * R]``.
    """
    tile, block_rows, pad = check_transpose_shape(tile, block_rows, pad)
    access = validate.choice("access", access, ["row", "column"])
    threads = tile * block_rows
    warps = -(-threads // WARP_SIZE)
    warp = validate.integer("warp", warp, minimum=0, maximum=warps - 1)
    step = validate.integer("step", step, minimum=0, maximum=tile // block_rows - 1)
    width = tile + pad
    out = []
    for lane in range(WARP_SIZE):
        linear = warp * WARP_SIZE + lane
        if linear >= threads:
            break
        tx, ty = linear % tile, linear // tile
        r, c = (ty + step * block_rows, tx) if access == "row" else (tx, ty + step * block_rows)
        out.append((lane, r, c, r * width + c))
    return out


def transpose_bank_ways(tile: int = 32, pad: int = 0, block_rows: int | None = None,
                        dtype: str = "float32") -> dict[str, int]:
    """The worst conflict ways of the shared transpose's row store and column load, over all warps."""
    block_rows = default_block_rows(tile) if block_rows is None else block_rows
    tile, block_rows, pad = check_transpose_shape(tile, block_rows, pad)
    itemsize = _element_bytes(dtype)
    warps = -(-tile * block_rows // WARP_SIZE)
    result = {}
    for access in ("row", "column"):
        ways = []
        for warp in range(warps):
            for step in range(tile // block_rows):
                words = transpose_warp_words(tile, pad, block_rows, access, warp, step)
                ways.append(bank_ways(w for *_, w in words) if itemsize == 4 else
                            warp_bank_ways([x[0] for x in words], [x[3] * itemsize for x in words], itemsize))
        result[access] = max(ways)
    return result


# --- the microscope on the transposes ---------------------------------------------------------------


def transpose_counts(tile: int = 32, pad: int = 1, n: int | None = None) -> pd.DataFrame:
    """The microscope on each rung at a small size: sectors per request (global) and bank ways (shared).

    The default size is one tile (one block): counts per warp request do not depend on the grid.
    """
    tile, _, pad = check_transpose_shape(tile, default_block_rows(tile), pad)
    n = check_size("n", n if n is not None else max(tile, 8))
    table = _transpose_counts(tile, pad, n)
    copy = table.copy()
    copy.attrs["n"] = n
    return copy


def trace_transpose(variant: str = "shared", pad: int = 0, tile: int = 32, n: int = 32):
    """The microscope's report of one transpose rung on an n×n float32 matrix (default: one 32×32 tile)."""
    tile, _, pad = check_transpose_shape(tile, default_block_rows(tile), pad)
    n = check_size("n", n)
    return _traced_transpose(variant, tile, pad, np.arange(n * n, dtype=np.float32).reshape(n, n))[0]


def _traced_transpose(variant: str, tile: int, pad: int, a: np.ndarray):
    block_rows = default_block_rows(tile)
    n = a.shape[0]
    out = np.zeros((n, n), dtype=np.float32)
    grid, block = transpose_launch(n, n, tile, block_rows)
    return _trace(transpose_kernel(variant, tile, block_rows, pad), grid, block, a, out), out


@functools.lru_cache(maxsize=64)
def _transpose_counts(tile: int, pad: int, n: int) -> pd.DataFrame:
    a = np.arange(n * n, dtype=np.float32).reshape(n, n)
    variants = ["copy", "naive", "shared"] + (["shared+pad"] if pad else [])
    rows = []
    for variant in variants:
        report, out = _traced_transpose(variant, tile, pad, a)
        mem, banks = report.memory(), report.banks()
        rows.append({
            "variant": variant if variant != "shared+pad" else f"shared+pad {pad}",
            "global load sectors/request": _weighted(mem[mem.op == "load"]),
            "global store sectors/request": _weighted(mem[mem.op == "store"]),
            "shared store ways": _max_ways(banks, "store"), "shared load ways": _max_ways(banks, "load"),
            "shared max ways": int(banks.max_ways.max()) if len(banks) else 0,
            "correct": bool(np.array_equal(out, a if variant == "copy" else a.T)),
        })
    table = pd.DataFrame(rows)
    table.attrs["n"] = n
    return table


def _max_ways(banks: pd.DataFrame, op: str) -> int:
    part = banks[banks.op == op]
    return int(part.max_ways.max()) if len(part) else 0


def _weighted(mem: pd.DataFrame) -> float:
    if mem.empty:
        return float("nan")
    return float((mem.sectors_per_request * mem.requests).sum() / mem.requests.sum())
