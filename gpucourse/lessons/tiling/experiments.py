"""Lesson 04 "Shared memory: tiling and bank conflicts":
host runners, microscope traces, GPU sweeps and their recording registration."""

from __future__ import annotations

import contextlib

import numpy as np
import pandas as pd

# gpucourse/__init__ has chosen the mode before this runs. Kernels reach ``cuda`` through this
# module-level name so that the simulator (and the microscope) can swap in their own.
from numba import cuda

from gpucourse import validate
from gpucourse.errors import InvalidConfig, NoGPU
from gpucourse.lessons.tiling.kernels import (
    FLOAT_BYTES,
    SGEMM_CUDA_NAME,
    SGEMM_CUDA_SOURCE,
    check_transpose_shape,
)
from gpucourse.lessons.tiling.model import (
    TRANSPOSE_VARIANTS,
    Rung,
    _check_operands,
    add_library_fraction,
    check_size,
    default_block_rows,
    intensity,
    matmul_flops,
    matmul_traffic_bytes,
    numba_rungs,
    rung,
    transpose_kernel,
    transpose_launch,
)
from gpucourse.measure import reference, runtime
from gpucourse.measure.harness import measure, poison

TILES = (8, 16, 32)
MATMUL_SIZES = (256, 512, 1024, 2048, 4096)
TRANSPOSE_SIZES = (1024, 2048, 4096, 8192)
REFERENCE_GPU = "H200"  # the datasheet drawn in simulator mode (runtime.datasheet_tflops)


def matmul(a, b, kind: str = "tiled", tile: int = 16, **blocking):
    """C = A @ B with one rung of the ladder (float32; returns NumPy in the simulator, CuPy on a GPU).

    ``kind="cuBLAS"`` is the library on a GPU and NumPy's matmul in the simulator; ``kind="CUDA C++"``
    (a CuPy RawKernel) runs only on a GPU.
    """
    r = rung(kind, tile, **blocking)
    m, _, n = _check_operands(a, b)
    if r.kind == "CUDA C++":
        _require_gpu("the CUDA C++ rung (a CuPy RawKernel)")
        _check_float4_shape(*a.shape, n)
    xp = runtime.xp
    a, b = xp.asarray(a), xp.asarray(b)
    c = xp.zeros((m, n), dtype=np.float32)
    if r.kind == "cuBLAS":
        with _fp32_library():
            return xp.matmul(a, b, out=c)
    if r.kind == "CUDA C++":
        _cuda_cpp_launcher(a, b, c)()
        return c
    grid, block = r.launch_config(m, n)
    r.kernel()[grid, block](_device_view(a), _device_view(b), _device_view(c))
    return c


def _check_float4_shape(m: int, k: int, n: int) -> None:
    if m % 4 or k % 4 or n % 4:
        raise InvalidConfig(f"the CUDA C++ rung loads float4s: m, k and n must be multiples of 4, "
                            f"got {m}×{k} @ {k}×{n}")
    if max(m * k, k * n, m * n) >= 2**31:
        raise InvalidConfig("the CUDA C++ rung indexes with int32: each matrix must hold fewer than 2^31 elements")


_RAW_KERNEL: list = []  # the compiled RawKernel (NVRTC compiles once per process)


def _cuda_cpp_launcher(a, b, c):
    """A no-argument launch of the CUDA C++ rung on CuPy arrays a (m×k), b (k×n), c (m×n)."""
    if not _RAW_KERNEL:
        import cupy

        _RAW_KERNEL.append(cupy.RawKernel(SGEMM_CUDA_SOURCE, SGEMM_CUDA_NAME))
    kernel = _RAW_KERNEL[0]
    m, k = a.shape
    n = b.shape[1]
    _check_float4_shape(m, k, n)
    grid, block = rung("CUDA C++").launch_config(m, n)
    args = (a, b, c, np.int32(m), np.int32(n), np.int32(k))

    def run():
        kernel(grid, block, args)

    return run


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
    elif r.kind == "CUDA C++":
        run = _cuda_cpp_launcher(a, b, c)
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
    from gpucourse.measure import rehearsal

    # the CUDA C++ rung is a CuPy RawKernel (NVRTC): a rehearsal's NumPy stand-in for CuPy cannot compile it
    cpp = [] if rehearsal.active() else [rung("CUDA C++")]
    rungs = list(rungs) if rungs is not None else [rung("naive")] + [rung("tiled", t) for t in TILES] + (
        numba_rungs() + cpp + [rung("cuBLAS")])
    if not any(r.kind == "cuBLAS" for r in rungs):
        rungs.append(rung("cuBLAS"))
    jobs = [(r, n) for n in sizes for r in rungs]
    rows = []
    for i, (r, n) in enumerate(jobs):
        rows.append(measure_matmul(r, n))
        if progress is not None:
            progress((i + 1) / len(jobs))
    return add_library_fraction(pd.DataFrame(rows))


@reference.register_sweep(
    "tiling.matmul", lesson="04_shared_memory",
    columns=("n", "rung", "kind", "tile", "flop_per_byte", "median_ms", "gflops", "fraction_of_library"),
    description="fp32 matmul ladder: naive, tiled 8/16/32, register-blocked, vectorised (LDS.128, prefetch), "
                "CUDA C++ (float4), cuBLAS (TF32 off); GFLOP/s vs N",
)
def _matmul_sweep() -> pd.DataFrame:
    return measure_matmul_ladder()


def ceilings_for_roofline() -> dict:
    """Bandwidth (GB/s) and fp32 peak (GFLOP/s) lines: measured + datasheet on a GPU, datasheet otherwise."""
    if runtime.is_gpu():
        from gpucourse.measure import ceilings

        info = runtime.device()
        tflops = ceilings.matmul_tflops("float32")  # None where the stack has no torch (G23)
        out = {"copy_gbps": ceilings.copy_gbps(), "library_gflops": None if tflops is None else tflops * 1e3,
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


# The transposes' yardstick on the chart: this lesson's own tile copy (loads hoisted, T/R in flight per thread).
# The GPU tier's `tiling.padded_transpose_over_best_copy` holds the padded transpose against the faster of this
# and lesson 03's coarsened best_copy on the same bytes (tests/test_gpu_tiling.py: lessons import no lesson).
BEST_COPY = "copy"
# The kernels hoist their loads (T/R global loads before any store) since this date; a recording made
# before it timed the earlier kernels (one load in flight per thread), and its caption says so.
LOADS_HOISTED_SINCE = "2026-11-29"


def best_copy_gbps(gbps) -> float:
    """The yardstick's GB/s from one run's GB/s per variant (a Series or mapping indexed by variant)."""
    return float(gbps[BEST_COPY])


def _transpose_data(n: int, tile: int, pad: int) -> tuple[pd.DataFrame | None, str]:
    if runtime.is_gpu():
        return measure_transposes(n, tile, pad), f"measured now on {runtime.device().name}"
    rec = reference.load("tiling.transpose")
    if rec is None:
        return None, "none (no GPU here, no recording yet: `make record` on a GPU)"
    data = rec.data[(rec.data.n == n) & (rec.data.tile == tile)]
    caption = rec.caption()
    if rec.date < LOADS_HOISTED_SINCE:
        caption += ("; recorded with the earlier kernels, one load in flight per thread (the loads are hoisted "
                    f"since {LOADS_HOISTED_SINCE}: not yet recorded)")
    return data, caption


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
