"""Lesson 04 "Shared memory: tiling and bank conflicts": the matmul ladder, the transpose ladder, barriers.

Matrix multiply, one rung at a time (fp32, C = A @ B, A is m×k, B is k×n):

* ``naive``: one thread per output, every operand read from global memory (16×16 blocks);
* ``tiled`` (tile T = 8, 16, 32): a T×T block stages T×T tiles of A and B in shared memory, so
  every element fetched from global memory is used T times; two ``syncthreads`` per step;
* ``register-blocked``: a block computes a BM×BN tile and each thread a TM×TN patch of it from
  registers (2-D register tiling), so each shared-memory read feeds TM or TN multiply-adds;
* ``cuBLAS``: the library (CuPy → cuBLAS, fp32 compute type: TF32 off).

Traffic is counted, not guessed: ``matmul_traffic_bytes`` is the number of bytes the kernel's
loads and stores request from global memory (the microscope counts the same number at small
sizes, and the tests check that they agree), so FLOPs per byte place each rung on the roofline.

Transpose, one rung at a time: a tile-shaped ``copy`` (the ceiling), ``naive`` (reads rows,
writes columns), ``shared`` (through a T×T shared tile: the column read is a 32-way bank
conflict) and the same with the tile padded to T×(T+1). ``bank_ways`` is the rule for 4-byte
words (32 banks of 4 bytes, one phase per warp); ``warp_bank_ways`` is the microscope's rule for
any element size (8- and 16-byte elements are served in half- and quarter-warp phases), and the
bank explorer uses it for float32 and float64 tiles.

GPU sweeps (``make record``): ``tiling.matmul`` and ``tiling.transpose``. In simulator mode
nothing is timed: the charts show recordings or say that there are none, and the microscope's
counts (exact in both modes) carry the lesson.
"""

from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go

# gpucourse/__init__ has chosen the mode before this runs. Kernels reach ``cuda`` through this
# module-level name so that the simulator (and the microscope) can swap in their own.
from numba import cuda, float32

from gpucourse import validate
from gpucourse.errors import InvalidConfig, NoGPU
from gpucourse.hardware import MAX_THREADS_PER_BLOCK, WARP_SIZE
from gpucourse.measure import reference, runtime
from gpucourse.measure.harness import measure, poison
from gpucourse.viz import charts

TILES = (8, 16, 32)
BANKS = 32
BANK_BYTES = 4
FLOAT_BYTES = 4
STATIC_SHARED_BYTES = 48 * 1024  # cuda.shared.array is static shared memory: 48 KB per block on every cc
SIM_MAX_N = 64  # the simulator runs a few hundred threads per second: keep it small
NAIVE_BLOCK = (16, 16)
REGISTER_BLOCKED = ((64, 8, 4), (128, 8, 8))  # (block tile, k tile, thread tile) of the two recorded variants
MATMUL_SIZES = (256, 512, 1024, 2048, 4096)
TRANSPOSE_SIZES = (1024, 2048, 4096, 8192)
TRANSPOSE_VARIANTS = ("copy", "naive", "shared", "shared+pad")
REFERENCE_GPU = "H200"  # the datasheet drawn in simulator mode (runtime.datasheet_tflops)

RUNG_COLOURS = {"naive": 3, "tiled": 0, "register-blocked": 2, "cuBLAS": 7}  # palette index per rung


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


def _check_block(threads_x: int, threads_y: int, what: str) -> None:
    threads = threads_x * threads_y
    if threads > MAX_THREADS_PER_BLOCK:
        raise InvalidConfig(
            f"{what} needs a {threads_x}×{threads_y} = {threads}-thread block; a block may hold at most "
            f"{MAX_THREADS_PER_BLOCK} threads"
        )


def _check_shared(shared_bytes: int, what: str) -> None:
    cc = runtime.device().compute_capability
    if shared_bytes > STATIC_SHARED_BYTES:
        from gpucourse.occupancy import architecture

        try:
            optin = architecture(cc).shared_per_block_optin_bytes
            beyond = (f"; the {optin // 1024} KB opt-in of cc {cc[0]}.{cc[1]} applies only to dynamic "
                      "shared memory")
        except InvalidConfig:
            beyond = ""
        raise InvalidConfig(
            f"{what} needs {shared_bytes:,} B of shared memory per block; statically declared shared arrays "
            f"may use at most {STATIC_SHARED_BYTES:,} B (48 KB) per block{beyond}"
        )


def check_tile(tile) -> int:
    """A matmul tile T: the block is T×T threads, so 1 ≤ T ≤ 32; two T×T float32 tiles must fit."""
    tile = validate.integer("tile", tile, minimum=1)
    _check_block(tile, tile, f"tile {tile}")
    _check_shared(2 * tile * tile * FLOAT_BYTES, f"tile {tile}")
    return tile


def check_register_blocking(block_tile, k_tile, thread_tile) -> tuple[int, int, int]:
    block_tile = validate.integer("block_tile", block_tile, minimum=1)
    k_tile = validate.integer("k_tile", k_tile, minimum=1)
    thread_tile = validate.integer("thread_tile", thread_tile, minimum=1)
    if block_tile % thread_tile:
        raise InvalidConfig(
            f"thread_tile must divide block_tile (each thread computes a thread_tile² patch); got "
            f"block_tile {block_tile}, thread_tile {thread_tile}"
        )
    side = block_tile // thread_tile
    _check_block(side, side, f"block_tile {block_tile} with thread_tile {thread_tile}")
    _check_shared(2 * block_tile * k_tile * FLOAT_BYTES, f"block_tile {block_tile} with k_tile {k_tile}")
    return block_tile, k_tile, thread_tile


def check_transpose_shape(tile, block_rows, pad) -> tuple[int, int, int]:
    """Transpose tile T, block T×R (R divides T), padding P ≥ 0: T·R ≤ 1024, T·(T+P)·4 B ≤ 48 KB."""
    tile = validate.integer("tile", tile, minimum=1)
    block_rows = validate.integer("block_rows", block_rows, minimum=1, maximum=tile)
    pad = validate.integer("pad", pad, minimum=0, maximum=32)
    if tile % block_rows:
        raise InvalidConfig(f"block_rows must divide the tile (each thread copies tile/block_rows rows); "
                            f"got tile {tile}, block_rows {block_rows}")
    _check_block(tile, block_rows, f"tile {tile} with {block_rows} block rows")
    _check_shared(tile * (tile + pad) * FLOAT_BYTES, f"a {tile}×{tile + pad} float32 tile")
    return tile, block_rows, pad


def default_block_rows(tile: int) -> int:
    """Harris's shape: a 32×8 block for a 32×32 tile; smaller tiles keep up to 8 rows."""
    return math.gcd(int(tile), 8) if isinstance(tile, int) and tile > 0 else 8


# --- matmul kernels (built per tile: shared arrays need their shape as a compile-time constant) ---


@functools.cache
def naive_matmul_kernel():
    """One thread per output; every multiply-add reads A and B from global memory."""

    @cuda.jit
    def naive_matmul(a, b, c):
        col, row = cuda.grid(2)
        if row < c.shape[0] and col < c.shape[1]:
            acc = float32(0.0)
            for k in range(a.shape[1]):
                acc += a[row, k] * b[k, col]
            c[row, col] = acc

    return naive_matmul


@functools.cache
def tiled_matmul_kernel(tile: int = 16, sync_after_load: bool = True, sync_after_compute: bool = True):
    """Shared-memory tiled matmul for a T×T block; the two flags drop a barrier (for the lesson only)."""
    T = check_tile(tile)
    SYNC_LOAD, SYNC_COMPUTE = bool(sync_after_load), bool(sync_after_compute)

    @cuda.jit
    def tiled_matmul(a, b, c):
        a_tile = cuda.shared.array((T, T), float32)
        b_tile = cuda.shared.array((T, T), float32)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        row = cuda.blockIdx.y * T + ty
        col = cuda.blockIdx.x * T + tx
        m = a.shape[0]
        depth = a.shape[1]
        n = b.shape[1]
        acc = float32(0.0)
        for k0 in range(0, depth, T):
            # Stage one tile of A and one of B; threads off the edge store zeros (non-multiples of T).
            if row < m and k0 + tx < depth:
                a_tile[ty, tx] = a[row, k0 + tx]
            else:
                a_tile[ty, tx] = 0.0
            if k0 + ty < depth and col < n:
                b_tile[ty, tx] = b[k0 + ty, col]
            else:
                b_tile[ty, tx] = 0.0
            if SYNC_LOAD:
                cuda.syncthreads()  # barrier 1: both tiles are complete before anyone reads them
            for kk in range(T):
                acc += a_tile[ty, kk] * b_tile[kk, tx]
            if SYNC_COMPUTE:
                cuda.syncthreads()  # barrier 2: nobody overwrites a tile that others are still reading
        if row < m and col < n:
            c[row, col] = acc

    return tiled_matmul


@functools.cache
def register_blocked_kernel(block_tile: int = 64, k_tile: int = 8, thread_tile: int = 4):
    """2-D register tiling: a block computes block_tile² outputs, each thread thread_tile² of them."""
    BM, BK, TM = check_register_blocking(block_tile, k_tile, thread_tile)
    SIDE = BM // TM  # the block is SIDE×SIDE threads
    THREADS = SIDE * SIDE

    @cuda.jit
    def register_blocked_matmul(a, b, c):
        a_tile = cuda.shared.array((BM, BK), float32)
        b_tile = cuda.shared.array((BK, BM), float32)
        acc = cuda.local.array((TM, TM), float32)
        a_frag = cuda.local.array(TM, float32)
        b_frag = cuda.local.array(TM, float32)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        tid = ty * SIDE + tx
        row0 = cuda.blockIdx.y * BM
        col0 = cuda.blockIdx.x * BM
        m = a.shape[0]
        depth = a.shape[1]
        n = b.shape[1]
        for i in range(TM):
            for j in range(TM):
                acc[i, j] = 0.0
        for k0 in range(0, depth, BK):
            for idx in range(tid, BM * BK, THREADS):  # neighbouring threads read neighbouring k: coalesced
                i = idx // BK
                kk = idx % BK
                if row0 + i < m and k0 + kk < depth:
                    a_tile[i, kk] = a[row0 + i, k0 + kk]
                else:
                    a_tile[i, kk] = 0.0
            for idx in range(tid, BK * BM, THREADS):  # neighbouring threads read neighbouring columns
                kk = idx // BM
                j = idx % BM
                if k0 + kk < depth and col0 + j < n:
                    b_tile[kk, j] = b[k0 + kk, col0 + j]
                else:
                    b_tile[kk, j] = 0.0
            cuda.syncthreads()
            for kk in range(BK):
                # Each thread's rows and columns are strided by SIDE: conflict-free, coalesced stores.
                for i in range(TM):
                    a_frag[i] = a_tile[ty + i * SIDE, kk]
                for j in range(TM):
                    b_frag[j] = b_tile[kk, tx + j * SIDE]
                for i in range(TM):
                    for j in range(TM):
                        acc[i, j] += a_frag[i] * b_frag[j]
            cuda.syncthreads()
        for i in range(TM):
            for j in range(TM):
                if row0 + ty + i * SIDE < m and col0 + tx + j * SIDE < n:
                    c[row0 + ty + i * SIDE, col0 + tx + j * SIDE] = acc[i, j]

    return register_blocked_matmul


# --- the ladder's rungs --------------------------------------------------------------------------


@dataclass(frozen=True)
class Rung:
    """One rung of the matmul ladder and how it launches."""

    kind: str  # "naive" | "tiled" | "register-blocked" | "cuBLAS"
    tile: int = 0  # tiled: T; register-blocked: the block tile
    k_tile: int = 0
    thread_tile: int = 0

    @property
    def label(self) -> str:
        if self.kind == "tiled":
            return f"tiled {self.tile}"
        if self.kind == "register-blocked":
            return f"register-blocked {self.tile}/{self.thread_tile}"
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
        raise InvalidConfig("cuBLAS is a library call, not a kernel of this module")

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
        raise InvalidConfig("cuBLAS chooses its own launch")

    @property
    def shared_bytes(self) -> int:
        if self.kind == "tiled":
            return 2 * self.tile * self.tile * FLOAT_BYTES
        if self.kind == "register-blocked":
            return 2 * self.tile * self.k_tile * FLOAT_BYTES
        return 0


def rung(kind: str, tile: int = 16, *, k_tile: int = 8, thread_tile: int = 4) -> Rung:
    """A validated rung: ``rung("tiled", 16)``, ``rung("register-blocked", 64, thread_tile=4)``."""
    kind = validate.choice("rung", kind, ["naive", "tiled", "register-blocked", "cuBLAS"])
    if kind == "tiled":
        return Rung("tiled", check_tile(tile))
    if kind == "register-blocked":
        return Rung("register-blocked", *check_register_blocking(tile, k_tile, thread_tile))
    return Rung(kind)


def ladder(tile: int = 16) -> list[Rung]:
    """The rungs a chart shows for one tile choice."""
    return [rung("naive"), rung("tiled", tile)] + [
        rung("register-blocked", bt, k_tile=kt, thread_tile=tt) for bt, kt, tt in REGISTER_BLOCKED
    ] + [rung("cuBLAS")]


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


def matmul(a, b, kind: str = "tiled", tile: int = 16, **blocking):
    """C = A @ B with one rung of the ladder (float32; returns NumPy in the simulator, CuPy on a GPU).

    ``kind="cuBLAS"`` is the library on a GPU and NumPy's matmul in the simulator.
    """
    r = rung(kind, tile, **blocking)
    m, _, n = _check_operands(a, b)
    xp = runtime.xp
    a, b = xp.asarray(a), xp.asarray(b)
    c = xp.zeros((m, n), dtype=np.float32)
    if r.kind == "cuBLAS":
        with _fp32_library():
            return xp.matmul(a, b, out=c)
    grid, block = r.launch_config(m, n)
    r.kernel()[grid, block](_device_view(a), _device_view(b), _device_view(c))
    return c


def _device_view(x):
    """On a GPU, a zero-copy Numba view of a CuPy array (a cheaper launch); in the simulator, x itself."""
    return cuda.as_cuda_array(x) if runtime.is_gpu() else x


@contextlib.contextmanager
def _fp32_library():
    """cuBLAS in plain fp32 (compute type 32F: no TF32 tensor cores), restored afterwards."""
    if not runtime.is_gpu():
        yield
        return
    from cupy._core import _routines_linalg as linalg

    old = linalg.get_compute_type(np.float32)
    linalg.set_compute_type(np.float32, linalg.COMPUTE_TYPE_FP32)
    try:
        yield
    finally:
        linalg.set_compute_type(np.float32, old)


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


# --- GPU measurements -------------------------------------------------------------------------------


def _require_gpu(what: str) -> None:
    if not runtime.is_gpu():
        raise NoGPU(f"{what} is measured on a GPU; in simulator mode the chart shows recordings")


def _random(shape, seed: int):
    xp = runtime.xp
    rng = xp.random.RandomState(seed) if runtime.is_gpu() else np.random.default_rng(seed)
    values = rng.random_sample(shape) if runtime.is_gpu() else rng.random(shape)
    return (2 * values - 1).astype(np.float32)


def _matmul_checker(a, b, c, rows: int = 64):
    """Compare a sample of rows of C with a float64 reference (errors scaled by |A|·|B|)."""
    xp = runtime.xp
    pick = xp.linspace(0, a.shape[0] - 1, min(rows, a.shape[0])).astype(np.int64)
    a64, b64 = a[pick].astype(np.float64), b.astype(np.float64)
    ref = a64 @ b64
    scale = xp.abs(a64) @ xp.abs(b64)

    def check() -> bool:
        got = c[pick].astype(np.float64)
        return bool(xp.all(xp.abs(got - ref) <= 1e-4 * scale + 1e-6))

    return check


_MEASURED: dict = {}  # (rung, n) -> row: moving a slider back shows the earlier measurement at once


def measure_matmul(r: Rung, n: int) -> dict:
    """Time one rung at size n×n×n on this GPU (checked against float64 first)."""
    _require_gpu("the matmul ladder")
    n = check_size("n", n)
    key = (r, n)
    if key in _MEASURED:
        return _MEASURED[key]
    xp = runtime.xp
    validate.fits_in_memory(3 * n * n * FLOAT_BYTES, runtime.free_memory_bytes(),
                            f"three {n}×{n} float32 matrices")
    a, b = _random((n, n), 1), _random((n, n), 2)
    c = xp.empty((n, n), dtype=np.float32)
    poison(c)
    if r.kind == "cuBLAS":
        def run():
            xp.matmul(a, b, out=c)
    else:
        kernel, (grid, block) = r.kernel(), r.launch_config(n, n)
        args = (_device_view(a), _device_view(b), _device_view(c))

        def run():
            kernel[grid, block](*args)

    with _fp32_library():
        m = measure(run, label=f"{r.label} N={n}", check=_matmul_checker(a, b, c), flops=matmul_flops(n),
                    bytes_moved=matmul_traffic_bytes(r, n))
    row = {"n": n, "rung": r.label, "kind": r.kind, "tile": r.tile, "flops": matmul_flops(n),
           "traffic_bytes": matmul_traffic_bytes(r, n), "flop_per_byte": intensity(r, n),
           "median_ms": m.median_ms, "iqr_ms": m.iqr_ms, "n_samples": m.n_samples, "gflops": m.tflops * 1e3}
    _MEASURED[key] = row
    return row


def measure_matmul_ladder(sizes=MATMUL_SIZES, rungs=None, progress=None) -> pd.DataFrame:
    """Every rung at every size, in one run; adds each row's fraction of cuBLAS at the same size."""
    rungs = list(rungs) if rungs is not None else [rung("naive")] + [rung("tiled", t) for t in TILES] + [
        rung("register-blocked", bt, k_tile=kt, thread_tile=tt) for bt, kt, tt in REGISTER_BLOCKED
    ] + [rung("cuBLAS")]
    if not any(r.kind == "cuBLAS" for r in rungs):
        rungs.append(rung("cuBLAS"))
    jobs = [(r, n) for n in sizes for r in rungs]
    rows = []
    for i, (r, n) in enumerate(jobs):
        rows.append(measure_matmul(r, n))
        if progress is not None:
            progress((i + 1) / len(jobs))
    return add_library_fraction(pd.DataFrame(rows))


def add_library_fraction(data: pd.DataFrame) -> pd.DataFrame:
    data = data.copy()
    library = data[data.kind == "cuBLAS"].set_index("n").gflops
    data["fraction_of_library"] = data.gflops / data.n.map(library)
    return data


@reference.register_sweep(
    "tiling.matmul", lesson="04_shared_memory",
    columns=("n", "rung", "kind", "tile", "flop_per_byte", "median_ms", "gflops", "fraction_of_library"),
    description="fp32 matmul ladder: naive, tiled 8/16/32, register-blocked, cuBLAS (TF32 off); GFLOP/s vs N",
)
def _matmul_sweep() -> pd.DataFrame:
    return measure_matmul_ladder()


def _matmul_data() -> tuple[pd.DataFrame | None, str]:
    """(data, caption) for the ladder charts: measured now, recorded, or none."""
    if runtime.is_gpu():
        return None, charts.source_caption("measured", runtime.device().name)
    rec = reference.load("tiling.matmul")
    if rec is None:
        return None, charts.source_caption(
            "none", "no GPU here and no recording of the matmul ladder yet (run `make record` on a GPU)")
    return rec.data, charts.source_caption("recorded", rec.caption())


def _style_index(r_label: str, kind: str) -> int:
    """Colour/marker/dash index: one per rung (the second register-blocked variant gets its own)."""
    first = REGISTER_BLOCKED[0]
    if kind == "register-blocked" and not r_label.endswith(f" {first[0]}/{first[2]}"):
        return 4
    return RUNG_COLOURS.get(kind, 5)


def _fit_bottom(fig: go.Figure) -> go.Figure:
    """Room under the plot for the axis title, the legend and the caption, fixed in pixels.

    (charts.figure places legend and caption at fractions of the plot height, so a short plot or a
    two-row legend can clip or overlap the caption.)
    """
    height = fig.layout.height or 420
    names = [t.name or "" for t in fig.data if t.showlegend is not False and t.type != "heatmap"]
    legend_rows = math.ceil(sum(len(name) + 8 for name in names) / 110) if names else 0
    legend_px = 22 * legend_rows
    bottom = 64 + legend_px + 34
    fig.update_layout(margin={"b": bottom},
                      legend={"yref": "container", "y": (34 + legend_px) / height, "yanchor": "top", "x": 0})
    for annotation in fig.layout.annotations:
        if annotation.name == "source":
            annotation.update(y=0, yanchor="top", yshift=-(64 + legend_px))
    return fig


def gflops_figure(tile: int = 16, max_n: int = 4096, progress=None) -> go.Figure:
    """GFLOP/s vs N for naive, tiled (this tile), register-blocked and cuBLAS."""
    tile = check_tile(tile)
    max_n = validate.integer("largest N", max_n, minimum=MATMUL_SIZES[0], maximum=MATMUL_SIZES[-1])
    sizes = [n for n in MATMUL_SIZES if n <= max_n]
    data, source = _matmul_data()
    if runtime.is_gpu():
        data = measure_matmul_ladder(sizes, ladder(tile), progress=progress)
    fig = charts.figure(f"Matmul ladder (fp32, tile {tile}): GFLOP/s vs N", "matrix size N (N×N×N)",
                        "throughput (GFLOP/s, log)", source)
    labels = [r.label for r in ladder(tile)]
    roof = ceilings_for_roofline()
    bw = roof["copy_gbps"] or roof["datasheet_gbps"]
    peak = roof["library_gflops"] or roof["datasheet_gflops"]
    for r in ladder(tile)[:2]:  # the two rungs the roof bounds below the compute peak
        bound = [min(peak, intensity(r, n) * bw) for n in sizes]
        charts.line(fig, sizes, bound, f"model bound, {r.label}: FLOP/byte × {bw:.0f} GB/s",
                    _style_index(r.label, r.kind), dash="dot", opacity=0.6)
    if data is not None:
        data = data[data.n.isin(sizes) & data.rung.isin(labels)]
    if data is None or data.empty:
        charts.no_data(fig, "No GPU timing here: the dotted lines are the model (traffic × bandwidth)")
    else:
        for label in labels:
            part = data[data.rung == label].sort_values("n")
            if len(part):
                kind = part.kind.iloc[0]
                charts.line(fig, part.n, part.gflops, label, _style_index(label, kind),
                            customdata=part.get("fraction_of_library"),
                            hovertemplate="N=%{x}: %{y:.0f} GFLOP/s (%{customdata:.0%} of cuBLAS)")
    fig.update_xaxes(type="log", dtick=math.log10(2))
    fig.update_yaxes(type="log")
    return _fit_bottom(fig)


def fraction_figure(max_n: int = 4096) -> go.Figure:
    """Each rung's fraction of cuBLAS at the same N (measured on a GPU, else recorded)."""
    max_n = validate.integer("largest N", max_n, minimum=MATMUL_SIZES[0], maximum=MATMUL_SIZES[-1])
    sizes = [n for n in MATMUL_SIZES if n <= max_n]
    data, source = _matmul_data()
    if runtime.is_gpu():
        data = measure_matmul_ladder(sizes)
    fig = charts.figure("Fraction of the library (cuBLAS fp32) each rung reaches", "matrix size N",
                        "fraction of cuBLAS GFLOP/s", source)
    if data is None or data.empty:
        charts.no_data(fig, "No GPU timing to show here")
    else:
        data = data[data.n.isin(sizes) & (data.kind != "cuBLAS")]
        for i, label in enumerate(dict.fromkeys(data.rung)):
            part = data[data.rung == label].sort_values("n")
            charts.line(fig, part.n, part.fraction_of_library, label, i)
        charts.hline(fig, 1.0, "cuBLAS", faint=True)
    fig.update_xaxes(type="log", dtick=math.log10(2))
    fig.update_yaxes(tickformat=".0%", rangemode="tozero")
    return _fit_bottom(fig)


def ceilings_for_roofline() -> dict:
    """Bandwidth (GB/s) and fp32 peak (GFLOP/s) lines: measured + datasheet on a GPU, datasheet otherwise."""
    if runtime.is_gpu():
        from gpucourse.measure import ceilings

        info = runtime.device()
        out = {"copy_gbps": ceilings.copy_gbps(), "library_gflops": ceilings.matmul_tflops("float32") * 1e3,
               "device": info.name}
        sheet = runtime.datasheet_tflops(info.name).get("fp32")
        out["datasheet_gbps"] = info.datasheet_bandwidth_gbps
        out["datasheet_gflops"] = sheet * 1e3 if sheet else None
        return out
    out = {"copy_gbps": None, "library_gflops": None, "device": f"NVIDIA {REFERENCE_GPU}",
           "datasheet_gbps": runtime.DATASHEET_BANDWIDTH_GBPS[f"NVIDIA {REFERENCE_GPU}"],
           "datasheet_gflops": runtime.datasheet_tflops(f"NVIDIA {REFERENCE_GPU}")["fp32"] * 1e3}
    rec = reference.load("measuring.ceilings")  # lesson 00's recorded ceilings, when a GPU has made them
    if rec is not None:
        measured = rec.data.set_index("quantity").measured
        if "copy bandwidth" in measured and "fp32 matmul" in measured:
            out.update(copy_gbps=float(measured["copy bandwidth"]),
                       library_gflops=float(measured["fp32 matmul"]) * 1e3, device=rec.device)
    return out


def roofline_figure(tile: int = 16, n: int = 4096) -> go.Figure:
    """Each rung at its counted FLOP/byte, under the roof min(peak, intensity × bandwidth)."""
    tile = check_tile(tile)
    n = validate.integer("n", n, minimum=MATMUL_SIZES[0], maximum=MATMUL_SIZES[-1])
    roof = ceilings_for_roofline()
    data, source = _matmul_data()
    if runtime.is_gpu():
        data = measure_matmul_ladder([n], ladder(tile))
    measured_kind = "measured" if runtime.is_gpu() else ("recorded" if data is not None else None)
    roof_kind = "measured" if runtime.is_gpu() else "recorded"
    if measured_kind is None:
        where = (f"ceilings recorded on {roof['device']}" if roof["copy_gbps"]
                 else f"NVIDIA {REFERENCE_GPU} SXM datasheet")
        source = (f"Model: roof = {where}; rungs at their counted FLOP/byte, drawn at the roof's bound "
                  "(no GPU, no recording yet)")
    fig = charts.figure(f"Roofline: the matmul ladder at N = {n} (fp32, tile {tile})",
                        "arithmetic intensity (FLOP per byte requested from global memory, log)",
                        "throughput (GFLOP/s, log)", source)
    x = np.logspace(-1.5, 3.5, 200)
    lines = []
    if roof["copy_gbps"]:
        name = (f"{roof_kind} roof: copy {roof['copy_gbps']:.0f} GB/s, cuBLAS fp32 "
                f"{roof['library_gflops'] / 1e3:.1f} TFLOP/s")
        lines.append((name, roof["copy_gbps"], roof["library_gflops"], 7, "solid"))
    if roof["datasheet_gbps"] and roof["datasheet_gflops"]:
        name = (f"datasheet roof ({roof['device'] if runtime.is_gpu() else 'NVIDIA ' + REFERENCE_GPU}): "
                f"{roof['datasheet_gbps']:.0f} GB/s, fp32 {roof['datasheet_gflops'] / 1e3:.0f} TFLOP/s")
        lines.append((name, roof["datasheet_gbps"], roof["datasheet_gflops"], 5, "dot"))
    for name, gbps, gflops, index, dash in lines:
        charts.line(fig, x, np.minimum(gflops, x * gbps), name, index, dash=dash, mode="lines")
    bw, peak = (lines[0][1], lines[0][2]) if lines else (None, None)
    for i, r in enumerate(ladder(tile)):
        ai = intensity(r, n)
        style = _style_index(r.label, r.kind)
        position = "top center" if i % 2 else "bottom center"
        if data is not None and measured_kind:
            row = data[(data.rung == r.label) & (data.n == n)]
            if not len(row):
                continue
            y, symbol, kind = float(row.gflops.iloc[0]), charts.MARKERS[style % 8], measured_kind
        elif bw:
            y, symbol, kind = min(peak, ai * bw), charts.MARKERS[style % 8] + "-open", "bound, not measured"
        else:
            continue
        fig.add_scatter(x=[ai], y=[y], name=f"{r.label} ({kind})", mode="markers+text", showlegend=False,
                        text=[f"{r.label}<br>{ai:.2f} FLOP/B"], textposition=position, textfont={"size": 11},
                        hovertemplate=f"{r.label}: %{{x:.2f}} FLOP/B, %{{y:.0f}} GFLOP/s ({kind})"
                                      "<extra></extra>",
                        marker={"size": 12, "symbol": symbol, "color": charts.PALETTE[style % 8],
                                "line": {"width": 2, "color": charts.PALETTE[style % 8]}})
    fig.update_xaxes(type="log")
    tops = [g for _, _, g, _, _ in lines]
    if data is not None and len(data):
        tops.append(float(data.gflops.max()))
    top = max(tops, default=1e5)
    fig.update_yaxes(type="log", range=[2, math.log10(top) + 0.6])  # headroom for the labels
    return _fit_bottom(fig)


# --- the picture ---------------------------------------------------------------------------------


def tiling_picture(tile: int = 4, n: int = 12, step: int = 1) -> go.Figure:
    """C = A·B drawn as grids: one block's output tile, its strips of A and B, and step ``step``'s tiles."""
    tile = validate.integer("tile", tile, minimum=1, maximum=32)
    n = validate.integer("n", n, minimum=tile, maximum=64)
    steps = -(-n // tile)
    step = validate.integer("step", step, minimum=0, maximum=steps - 1)
    gap = max(1.5, n / 6)
    fig = go.Figure()
    fig.update_layout(
        title={"text": f"Tiled matmul, tile {tile}: the block that owns the orange tile of C, at step "
                       f"{step + 1} of {steps}", "x": 0.02},
        template="plotly_white", height=560, showlegend=False, margin={"l": 10, "r": 10, "t": 50, "b": 70})
    charts.set_source(fig, charts.source_caption("model", "a drawing of shared-memory tiling (CUDA C++ Programming "
                                                          "Guide, shared memory matrix multiplication)"))
    origin = {"A": (0, n + gap), "B": (n + gap, 0), "C": (n + gap, n + gap)}
    by = bx = min(1, steps - 1)  # the highlighted block: second row and column of tiles when there is one

    def rect(name, r0, c0, rows, cols, colour, opacity, width=1):
        x0, y0 = origin[name]
        fig.add_shape(type="rect", x0=x0 + c0, y0=y0 + r0, x1=x0 + c0 + cols, y1=y0 + r0 + rows,
                      line={"color": "#000", "width": width}, fillcolor=colour, opacity=opacity)

    for name, (x0, y0) in origin.items():
        rect(name, 0, 0, n, n, "#ffffff", 1.0, 2)
        for i in range(tile, n, tile):
            grid_line = {"color": "#bbb", "width": 1}
            fig.add_shape(type="line", x0=x0 + i, y0=y0, x1=x0 + i, y1=y0 + n, line=grid_line)
            fig.add_shape(type="line", x0=x0, y0=y0 + i, x1=x0 + n, y1=y0 + i, line=grid_line)
    rows_here = min(tile, n - by * tile)
    cols_here = min(tile, n - bx * tile)
    depth_here = min(tile, n - step * tile)
    rect("A", by * tile, 0, rows_here, n, charts.PALETTE[5], 0.35)  # the strip of A this block reads
    rect("B", 0, bx * tile, n, cols_here, charts.PALETTE[5], 0.35)
    rect("A", by * tile, step * tile, rows_here, depth_here, charts.PALETTE[0], 0.85, 2)  # this step's tiles
    rect("B", step * tile, bx * tile, depth_here, cols_here, charts.PALETTE[0], 0.85, 2)
    rect("C", by * tile, bx * tile, rows_here, cols_here, charts.PALETTE[1], 0.9, 2)
    notes = {"A": "A (m×k): the block's row strip", "B": "B (k×n): the block's column strip",
             "C": "C = A·B: the block's output tile"}
    for name, (x0, y0) in origin.items():
        fig.add_annotation(x=x0 + n / 2, y=y0 - 0.3, text=f"<b>{notes[name]}</b>", showarrow=False,
                           yanchor="bottom", font={"size": 12})
    fig.add_annotation(
        x=n / 2, y=n / 2, showarrow=False, font={"size": 12}, align="left",
        text=(f"each step: load one {tile}×{tile} tile of A and one of B<br>into shared memory "
              f"(dark blue), syncthreads,<br>then each thread does {tile} multiply-adds<br>from them, "
              f"syncthreads, next step.<br>Each element fetched is used {tile} times."))
    fig.update_xaxes(visible=False, range=[-0.5, 2 * n + gap + 0.5])
    fig.update_yaxes(visible=False, range=[2 * n + gap + 0.5, -2], scaleanchor="x")
    return fig


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
    if r.kind == "cuBLAS":
        raise InvalidConfig("cuBLAS cannot run under the microscope: its traffic is modelled, not counted")
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


def barrier_figure(case: str = "no barrier after the load", seed: int = 0, n: int = 16,
                   tile: int = 8) -> go.Figure:
    """Which outputs come out wrong without a barrier (counted under the microscope's random schedule)."""
    result = barrier_experiment(case, n, tile, seed=seed)
    fig = charts.figure(f"Tiled matmul, {case}: {result.wrong_outputs} of {n * n} outputs wrong, "
                        f"{result.race_count} racing pairs", "output column", "output row",
                        charts.source_caption("counted", f"N = {n}, tile {tile}, random interleaving, "
                                              f"seed {seed}; ✗ (orange) = wrong output"), height=460)
    error = np.abs(result.c - result.reference)
    # Text, not numbers: a NaN (a read of a never-written shared word) cannot travel as JSON.
    error_text = np.where(np.isfinite(error), np.char.mod("%.3g", np.nan_to_num(error)),
                          "NaN (never written)")
    fig.add_heatmap(z=result.wrong.astype(int), colorscale=[[0, "#56B4E9"], [1, "#D55E00"]], zmin=0, zmax=1,
                    showscale=False, xgap=1, ygap=1, name="wrong (1) / right (0)", customdata=error_text,
                    text=np.where(result.wrong, "✗", ""), texttemplate="%{text}",  # not colour alone
                    hovertemplate="C[%{y}, %{x}]: error %{customdata}<extra></extra>")
    for edge in range(0, n + 1, tile):
        fig.add_vline(x=edge - 0.5, line_color="#000", line_width=1)
        fig.add_hline(y=edge - 0.5, line_color="#000", line_width=1)
    fig.update_yaxes(autorange="reversed")
    return _fit_bottom(fig)


# --- transpose kernels ----------------------------------------------------------------------------


@functools.cache
def copy_kernel(tile: int = 32, block_rows: int = 8):
    """A tile-shaped copy: coalesced reads and writes, the transpose's ceiling."""
    T, R, _ = check_transpose_shape(tile, block_rows, 0)

    @cuda.jit
    def tile_copy(src, dst):
        x = cuda.blockIdx.x * T + cuda.threadIdx.x
        y0 = cuda.blockIdx.y * T + cuda.threadIdx.y
        for j in range(0, T, R):
            if y0 + j < src.shape[0] and x < src.shape[1]:
                dst[y0 + j, x] = src[y0 + j, x]

    return tile_copy


@functools.cache
def naive_transpose_kernel(tile: int = 32, block_rows: int = 8):
    """Reads rows (coalesced), writes columns (each lane a different row: 32 sectors per request)."""
    T, R, _ = check_transpose_shape(tile, block_rows, 0)

    @cuda.jit
    def naive_transpose(src, dst):
        x = cuda.blockIdx.x * T + cuda.threadIdx.x
        y0 = cuda.blockIdx.y * T + cuda.threadIdx.y
        for j in range(0, T, R):
            if y0 + j < src.shape[0] and x < src.shape[1]:
                dst[x, y0 + j] = src[y0 + j, x]

    return naive_transpose


@functools.cache
def shared_transpose_kernel(tile: int = 32, block_rows: int = 8, pad: int = 0):
    """Through a shared tile: both global accesses coalesced; the tile is read by columns."""
    T, R, P = check_transpose_shape(tile, block_rows, pad)
    W = T + P

    @cuda.jit
    def shared_transpose(src, dst):
        buf = cuda.shared.array((T, W), float32)
        rows = src.shape[0]
        cols = src.shape[1]
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        x = cuda.blockIdx.x * T + tx
        y0 = cuda.blockIdx.y * T + ty
        for j in range(0, T, R):
            if y0 + j < rows and x < cols:
                buf[ty + j, tx] = src[y0 + j, x]  # a warp writes a row of the tile
        cuda.syncthreads()
        x = cuda.blockIdx.y * T + tx  # the block writes the mirrored tile, row by row
        y0 = cuda.blockIdx.x * T + ty
        for j in range(0, T, R):
            if y0 + j < cols and x < rows:
                dst[y0 + j, x] = buf[tx, ty + j]  # a warp reads a column of the tile

    return shared_transpose


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


def transpose(a, variant: str = "shared+pad", tile: int = 32, block_rows: int | None = None, pad: int = 1):
    """aᵀ (or a copy of a, for ``variant="copy"``) with one rung of the transpose ladder."""
    variant = validate.choice("variant", variant, TRANSPOSE_VARIANTS)
    block_rows = default_block_rows(tile) if block_rows is None else block_rows
    tile, block_rows, pad = check_transpose_shape(tile, block_rows, pad)
    if getattr(a, "ndim", None) != 2 or np.dtype(a.dtype) != np.float32:
        raise InvalidConfig("a must be a 2-D float32 array")
    rows, cols = (check_size("rows", a.shape[0]), check_size("cols", a.shape[1]))
    xp = runtime.xp
    a = xp.asarray(a)
    out = xp.zeros((rows, cols) if variant == "copy" else (cols, rows), dtype=np.float32)
    grid, block = transpose_launch(rows, cols, tile, block_rows)
    transpose_kernel(variant, tile, block_rows, pad)[grid, block](_device_view(a), _device_view(out))
    return out


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

    ``access="row"``: the store ``buf[ty + j, tx]``; ``access="column"``: the load ``buf[tx, ty + j]``.
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


def bank_picture(tile: int = 32, pad: int = 0, access: str = "column",
                 block_rows: int | None = None, dtype: str = "float32") -> go.Figure:
    """One warp's lanes placed in the 32 banks; a column of k lanes in one bank = a k-way conflict.

    For float64 each lane's element spans two banks (two squares with its number), and the warp is
    served in two phases of 16 lanes (128 bytes each): squares are stacked per phase, and the
    conflict ways are those of the worse phase."""
    block_rows = default_block_rows(tile) if block_rows is None else block_rows
    itemsize = _element_bytes(dtype)
    words = transpose_warp_words(tile, pad, block_rows, access)
    lanes, addresses = [x[0] for x in words], [x[3] * itemsize for x in words]
    ways = warp_bank_ways(lanes, addresses, itemsize)
    per_phase = WARP_SIZE if itemsize <= 4 else WARP_SIZE * 4 // itemsize
    what = "reads a column" if access == "column" else "writes a row"
    verdict = "no conflict" if ways == 1 else f"{ways}-way conflict: {ways} passes"
    phases = "" if per_phase == WARP_SIZE else f" (served in phases of {per_phase} lanes)"
    fig = charts.figure(
        f"Warp 0 {what} of a {tile}×{tile + pad} {dtype} tile{phases} → {verdict}", "bank (4-byte word index mod 32)",
        "pass (distinct words queued in the bank, per phase)",
        charts.source_caption("model", "32 banks × 4 bytes; lanes reading one word share it (broadcast); "
                                       "8-byte elements in half-warp phases"),
        height=470)
    seen: dict[tuple, list[int]] = {}
    series: dict[int, tuple] = {}
    for lane, r, c, element in words:
        phase = lane // per_phase
        xs, ys, text, hover = series.setdefault(phase, ([], [], [], []))
        first_word = element * itemsize // 4
        for w in range(first_word, first_word + max(1, itemsize // 4)):
            queue = seen.setdefault((phase, bank_of(w)), [])
            if w not in queue:
                queue.append(w)
            xs.append(bank_of(w))
            ys.append(queue.index(w) + 1)
            text.append(str(lane))
            hover.append(f"lane {lane} (phase {phase + 1}): tile[{r}][{c}] = word {w}, bank {bank_of(w)}")
    for phase, (xs, ys, text, hover) in series.items():
        name = "lane (number) in its bank" if len(series) == 1 else (
            f"lanes {phase * per_phase}–{(phase + 1) * per_phase - 1} (phase {phase + 1})")
        # later phases are drawn slightly to the right so both phases of a bank stay readable
        offset = 0.0 if len(series) == 1 else (phase - (len(series) - 1) / 2) * 0.35
        fig.add_scatter(x=[x + offset for x in xs], y=ys, mode="markers+text", text=text, hovertext=hover,
                        hoverinfo="text", name=name, textfont={"size": 9 if len(series) > 1 else 10, "color": "#000"},
                        marker={"symbol": charts.MARKERS[1 + 1 * phase % 2], "size": 20 if len(series) == 1 else 13,
                                "color": charts.PALETTE[5 + phase % 2] if len(series) > 1 else charts.PALETTE[5],
                                "line": {"color": "#000", "width": 1}})
    fig.update_xaxes(range=[-0.7, BANKS - 0.3], dtick=1, tickfont={"size": 9})
    fig.update_yaxes(range=[0.3, max(ways, 4) + 0.7], dtick=1 if ways <= 16 else 4)
    return _fit_bottom(fig)


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


@functools.lru_cache(maxsize=64)
def _transpose_counts(tile: int, pad: int, n: int) -> pd.DataFrame:
    block_rows = default_block_rows(tile)
    a = np.arange(n * n, dtype=np.float32).reshape(n, n)
    variants = ["copy", "naive", "shared"] + (["shared+pad"] if pad else [])
    rows = []
    for variant in variants:
        out = np.zeros((n, n), dtype=np.float32)
        grid, block = transpose_launch(n, n, tile, block_rows)
        report = _trace(transpose_kernel(variant, tile, block_rows, pad), grid, block, a, out)
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


# --- transpose measurements ---------------------------------------------------------------------------


def measure_transposes(n: int = 4096, tile: int = 32, pad: int = 1) -> pd.DataFrame:
    """GB/s of copy, naive, shared and shared+pad at n×n, in one run (bytes: read + write)."""
    _require_gpu("the transpose ladder")
    n = check_size("n", n)
    block_rows = default_block_rows(tile)
    tile, block_rows, pad = check_transpose_shape(tile, block_rows, pad)
    xp = runtime.xp
    validate.fits_in_memory(2 * n * n * FLOAT_BYTES, runtime.free_memory_bytes(),
                            f"two {n}×{n} float32 arrays")
    src = _random((n, n), 3)
    out = xp.empty((n, n), dtype=np.float32)
    grid, block = transpose_launch(n, n, tile, block_rows)
    rows = []
    for variant in TRANSPOSE_VARIANTS:
        key = ("transpose", variant, n, tile, pad if variant == "shared+pad" else 0)
        if key not in _MEASURED:
            kernel = transpose_kernel(variant, tile, block_rows, pad)
            expected = src if variant == "copy" else src.T
            poison(out)
            args = (_device_view(src), _device_view(out))
            m = measure(lambda k=kernel, args=args: k[grid, block](*args), label=f"{variant} {n}×{n}",
                        check=lambda e=expected: bool(xp.array_equal(out, e)),
                        bytes_moved=2 * n * n * FLOAT_BYTES)
            _MEASURED[key] = {"n": n, "tile": tile, "pad": key[-1], "variant": variant,
                              "median_ms": m.median_ms, "iqr_ms": m.iqr_ms, "n_samples": m.n_samples,
                              "gbps": m.gbps, "memory_level": m.memory_level}  # small n: L2-resident
        rows.append(_MEASURED[key])
    return pd.DataFrame(rows)


@reference.register_sweep(
    "tiling.transpose", lesson="04_shared_memory",
    columns=("n", "tile", "pad", "variant", "median_ms", "gbps"),
    description="float32 transpose ladder (32×8 blocks): copy, naive, shared tile, padded tile; GB/s vs N",
)
def _transpose_sweep() -> pd.DataFrame:
    return pd.concat([measure_transposes(n) for n in TRANSPOSE_SIZES], ignore_index=True)


def _transpose_data(n: int, tile: int, pad: int) -> tuple[pd.DataFrame | None, str]:
    if runtime.is_gpu():
        return measure_transposes(n, tile, pad), f"measured now on {runtime.device().name}"
    rec = reference.load("tiling.transpose")
    if rec is None:
        return None, "none (no GPU here, no recording yet: `make record` on a GPU)"
    data = rec.data[(rec.data.n == n) & (rec.data.tile == tile)]
    return data, rec.caption()


def transpose_figure(tile: int = 32, pad: int = 0, n: int = 4096) -> go.Figure:
    """Left: GB/s per rung (measured or recorded) against the copy; right: the microscope's bank ways."""
    from plotly.subplots import make_subplots

    block_rows = default_block_rows(tile)
    tile, block_rows, pad = check_transpose_shape(tile, block_rows, pad)
    n = validate.integer("n", n, minimum=TRANSPOSE_SIZES[0], maximum=TRANSPOSE_SIZES[-1])
    data, source = _transpose_data(n, tile, pad)
    counts = transpose_counts(tile, pad)
    shared_label = "shared" if pad == 0 else f"shared+pad {pad}"
    ways = int(counts.loc[counts.variant == shared_label, "shared max ways"].iloc[0])
    fig = make_subplots(rows=1, cols=2, column_widths=[0.6, 0.4], horizontal_spacing=0.12, subplot_titles=(
        f"bandwidth at N = {n} (GB/s, read + write)", "shared-memory bank ways"))
    fig.update_layout(
        title={"text": f"Transpose ladder, {tile}×{tile + pad} tile: the shared tile's column read is "
                       f"{'conflict-free' if ways == 1 else f'a {ways}-way bank conflict'}", "x": 0.02},
        template="plotly_white", colorway=charts.PALETTE, height=440, font={"size": 13},
        margin={"l": 70, "r": 20, "t": 80, "b": 95}, legend={"orientation": "h", "y": -0.28, "x": 0})
    shared_variant = "shared" if pad == 0 else "shared+pad"
    if data is not None and len(data):
        picked = data[data.variant.isin(["copy", "naive", shared_variant])
                      & ((data.variant != "shared+pad") | (data.pad == pad))]
        labels = [v if v != "shared+pad" else shared_label for v in picked.variant]
        kind = "measured" if runtime.is_gpu() else "recorded"
        fig.add_bar(x=labels, y=list(picked.gbps), name=f"bandwidth ({kind})", row=1, col=1,
                    marker={"color": charts.PALETTE[0], "pattern": {"shape": "/"}},
                    text=[f"{v:.0f}" for v in picked.gbps], textposition="outside")
        copy = picked.loc[picked.variant == "copy", "gbps"]
        if len(copy):
            fig.add_hline(y=float(copy.iloc[0]), line_dash="dash", line_color="#000", row=1, col=1,
                          annotation_text="copy", annotation_position="top right")
    else:
        fig.add_bar(x=["copy", "naive", shared_label], y=[0, 0, 0], name="bandwidth (no data)", row=1, col=1,
                    marker={"color": "#ccc"})
        fig.add_annotation(text="no GPU timing here", showarrow=False, xref="x domain", yref="y domain",
                           x=0.5, y=0.5, font={"size": 14, "color": "#444"})
    fig.add_bar(x=list(counts.variant), y=list(counts["shared max ways"]), name="max bank ways (counted)",
                row=1, col=2, marker={"color": charts.PALETTE[3], "pattern": {"shape": "x"}},
                text=[str(v) if v else "none" for v in counts["shared max ways"]], textposition="outside")
    fig.update_yaxes(title_text="bandwidth (GB/s)", row=1, col=1, rangemode="tozero")
    fig.update_yaxes(title_text="bank ways (1 = conflict-free)", row=1, col=2, range=[0, 36])
    fig.update_xaxes(title_text="rung", row=1, col=1)
    fig.update_xaxes(title_text="rung (no shared memory: none)", row=1, col=2)
    charts.set_source(fig, f"Bandwidth: {source}. Bank ways: counted by the microscope (exact), "
                           f"N = {counts.attrs['n']}")
    return _fit_bottom(fig)


def folklore_table(n: int = 4096) -> pd.DataFrame:
    """The source texts' "~20× between two transposes" claim beside the sector model and the data."""
    model = (4 + 32) / (4 + 4)  # sectors per 32-element warp access: naive read 4 + write 32; copy 4 + 4
    rows = [{"quantity": "claim in the source texts", "best / worst transpose bandwidth": "≈ 20×",
             "where from": "source text 000 (no GPU, size or kernel named)"},
            {"quantity": "sector model (L2 transactions)",
             "best / worst transpose bandwidth": f"≤ {model:.1f}×",
             "where from": "naive: 4 + 32 sectors per warp row vs copy 4 + 4; the L2 merges many of the 32"}]
    if runtime.is_gpu():
        data, where = measure_transposes(n), f"measured now on {runtime.device().name}"
    else:
        rec = reference.load("tiling.transpose")
        data = None if rec is None else rec.data[rec.data.n == n]
        where = (rec.caption() if rec is not None
                 else "no GPU here and no recording yet: the GPU tier measures it")
    if data is not None and len(data):
        gbps = data.set_index("variant").gbps
        transposes = gbps.drop("copy")
        rows.append({"quantity": f"measured at N = {n}",
                     "best / worst transpose bandwidth": f"{transposes.max() / transposes.min():.1f}×",
                     "where from": where})
    else:
        rows.append({"quantity": "measured", "best / worst transpose bandwidth": "not measured here",
                     "where from": where})
    return pd.DataFrame(rows)


# --- widget builders ------------------------------------------------------------------------------


def matmul_explorer(*, threaded: bool = True):
    import ipywidgets as w

    from gpucourse.viz.widgets import LiveChart

    return LiveChart({
        "tile": w.Dropdown(options=list(TILES), value=16, description="tile"),
        "max_n": w.SelectionSlider(options=list(MATMUL_SIZES), value=MATMUL_SIZES[-1], description="up to N"),
    }, compute=gflops_figure, threaded=threaded,
        description="Matmul ladder: GFLOP/s vs N for each rung (fp32).")


def transpose_explorer(*, threaded: bool = True):
    import ipywidgets as w

    from gpucourse.viz.widgets import LiveChart

    return LiveChart({
        "tile": w.Dropdown(options=list(TILES), value=32, description="tile"),
        "pad": w.ToggleButtons(options=[("no padding", 0), ("pad +1", 1)], value=0, description="padding"),
    }, compute=transpose_figure, threaded=threaded,
        description="Transpose ladder: bandwidth (left) and bank ways (right).")


def bank_explorer(*, threaded: bool = True):
    import ipywidgets as w

    from gpucourse.viz.widgets import LiveChart

    return LiveChart({
        "tile": w.IntSlider(value=32, min=4, max=32, step=4, description="tile"),
        "pad": w.IntSlider(value=0, min=0, max=4, description="padding"),
        "access": w.ToggleButtons(options=[("read a column", "column"), ("write a row", "row")],
                                  value="column", description="access"),
        "dtype": w.ToggleButtons(options=[("float32 (4 bytes)", "float32"), ("float64 (8 bytes)", "float64")],
                                 value="float32", description="element"),
    }, compute=bank_picture, threaded=threaded,
        description="Banks under one warp of the shared-memory transpose.")


def barrier_explorer(*, threaded: bool = True):
    import ipywidgets as w

    from gpucourse.viz.widgets import LiveChart

    return LiveChart({
        "case": w.Dropdown(options=list(BARRIER_CASES), value="no barrier after the load",
                           description="kernel"),
        "seed": w.IntSlider(value=0, min=0, max=9, description="seed"),
    }, compute=barrier_figure, threaded=threaded,
        description="The tiled matmul under the microscope's random interleaving.")
