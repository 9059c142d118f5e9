"""Lesson 04a's host side: launching the reductions and scans, the microscope's counts, GPU sweeps.

In simulator mode the kernels run in Numba's simulator (warp intrinsics added by the microscope)
and nothing is timed; the microscope's counts are exact in both modes. On a GPU,
``measure_reductions`` times every rung of the ladder and the libraries (CuPy's ReductionKernel,
``cupy.sum``, ``torch.sum``) in the same run, by the course's measurement contract.

GPU sweep (``make record``): ``reductions.sum``.
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd

from gpucourse import validate
from gpucourse.errors import InvalidConfig, NoGPU
from gpucourse.hardware import WARP_SIZE
from gpucourse.lessons.reductions import kernels, model
from gpucourse.measure import calibration as calibrations
from gpucourse.measure import reference, runtime
from gpucourse.measure.harness import measure

SIM_MAX_N = 4096  # the microscope traces at most 4096 threads; the simulator is slow beyond that
GPU_MAX_N = 1 << 28
SWEEP_SIZES = (1 << 20, 1 << 22, 1 << 24, 1 << 26)
# The ladder chart's size: 2^26 float32 = 256 MiB, four times an H200's 60 MiB L2. At 2^24 (64 MiB, about one L2)
# launches and tails show: cupy.sum reached 3,230 GB/s there against 4,116 at 2^26 on the H200 (quick and full
# recordings, data/reference/nvidia-h200), so the libraries' ceiling itself moved with the size.
LADDER_N = 1 << 26
# In the simulator the grid-stride rung gets at most this many blocks (the microscope traces ≤ 4096 threads);
# on a GPU it gets model.resident_blocks: every block the SMs hold at once.
SIM_RESIDENT_BLOCKS = 2
SWEEP_BLOCK = 256
LIBRARIES = ("cupy.ReductionKernel", "cupy.sum", "torch.sum")

# The line of each kernel whose warp issues are the tree's (or the shuffles') adds.
ADD_LINES = {
    "interleaved": "sdata[tid] += sdata[tid + s]",
    "strided index": "sdata[index] += sdata[index + s]",
    "sequential": "sdata[tid] += sdata[tid + s]",
    "first add": "sdata[tid] += sdata[tid + s]",
    "warp shuffle": "cuda.shfl_down_sync",
    "atomic": "cuda.shfl_down_sync",
    "grid stride": "cuda.shfl_down_sync",
}
SCAN_ADD_LINES = {
    "Hillis-Steele": ("buf[src, tid] + buf[src, tid - offset]",),
    "Blelloch": ("temp[offset * (2 * tid + 2) - 1] +=", "temp[right] += t"),
}


# --- validation -------------------------------------------------------------------------------------------


def check_variant(variant) -> str:
    return validate.choice("variant", variant, kernels.REDUCTIONS)


def check_scan(variant) -> str:
    return validate.choice("scan", variant, kernels.SCANS)


def check_n(n) -> int:
    """Elements: ≥ 1; at most 4096 in simulator mode."""
    if runtime.is_gpu():
        return validate.integer("n", n, minimum=1, maximum=GPU_MAX_N)
    n = validate.integer("n", n, minimum=1)
    if n > SIM_MAX_N:
        raise InvalidConfig(f"n = {n} is too large for the simulator (the microscope traces at most 4096 threads); "
                            f"use n ≤ {SIM_MAX_N} here, or run on a GPU")
    return n


def check_input(x):
    """A 1-D float32 array with at least one element (NumPy, or CuPy on a GPU)."""
    if getattr(x, "ndim", None) != 1 or getattr(x, "dtype", None) != np.float32:
        raise InvalidConfig(f"x must be a 1-D float32 array; got {type(x).__name__} with shape "
                            f"{getattr(x, 'shape', '?')} and dtype {getattr(x, 'dtype', '?')}")
    check_n(int(x.size))
    return x


def random_input(n: int, seed: int = 0):
    """n float32 values in [0, 1) (positive, so a float32 sum stays close to the float64 one)."""
    n = check_n(n)
    x = np.random.default_rng(seed).random(n, dtype=np.float32)
    return runtime.xp.asarray(x) if runtime.is_gpu() else x


def _launch(kernel, grid: int, block: int, *args) -> None:
    """``kernel[grid, block](*args)``; in simulator mode through the microscope's deterministic scheduler
    (the plain simulator's warp intrinsics depend on thread timing in multi-block launches)."""
    if runtime.is_gpu():
        kernel[grid, block](*args)
    else:
        _trace(kernel, grid, block, *args)


def resident_grid(block: int) -> int:
    """Blocks of ``block`` threads resident at once: on a GPU from its SM count and compute capability, in the
    simulator SIM_RESIDENT_BLOCKS."""
    if not runtime.is_gpu():
        return SIM_RESIDENT_BLOCKS
    info = runtime.device()
    return model.resident_blocks(int(info.sm_count), tuple(info.compute_capability), block)


def launch_blocks(variant: str, n: int, block: int) -> int:
    """Blocks of the first (or only) launch of one rung over n elements."""
    if variant == "grid stride":
        return model.grid_stride_blocks(n, block, resident_grid(block))
    return model.blocks_needed(n, block, kernels.ELEMENTS_PER_THREAD[variant])


ONE_LAUNCH = ("atomic", "grid stride")  # rungs that finish with atomics: one launch, out[0] zeroed first


# --- running ----------------------------------------------------------------------------------------------


def _view(array):
    """A numba view of a CuPy array, made once: passed as it is, each launch converts every CuPy
    argument again (an H100 probe: 79 µs of host time per launch with three CuPy arrays, 28 µs
    with numba views; older numba-cuda also synchronised the stream for each one). The simulator's
    kernels take NumPy arrays as they are."""
    return runtime.cuda.as_cuda_array(array, sync=False) if runtime.is_gpu() else array


def _runner(x, variant: str, block: int):
    """(run, result): ``run()`` launches every pass into preallocated buffers; ``result()`` reads the sum."""
    xp = runtime.xp if runtime.is_gpu() else np
    kernel = kernels.reduction_kernel(variant, block)
    per_thread = kernels.ELEMENTS_PER_THREAD[variant]
    x_view = _view(x)
    if variant in ONE_LAUNCH:
        out = xp.zeros(1, dtype=np.float32)
        out_view = _view(out)
        grid = launch_blocks(variant, int(x.size), block)

        def run():
            out[0] = 0.0
            _launch(kernel, grid, block, x_view, out_view)

        return run, lambda: float(out[0])
    passes, size = [], int(x.size)
    while True:
        grid = model.blocks_needed(size, block, per_thread)
        out = xp.empty(grid, dtype=np.float32)
        passes.append((grid, out, _view(out)))
        size = grid
        if grid == 1:
            break

    def run():
        current = x_view
        for grid, _, view in passes:
            _launch(kernel, grid, block, current, view)
            current = view

    return run, lambda: float(passes[-1][1][0])


def reduce_sum(x, variant: str = "warp shuffle", block: int = 256) -> float:
    """The sum of float32 ``x`` by one rung of the ladder: launches pass after pass until one value is
    left (the ``atomic`` and ``grid stride`` rungs need one launch)."""
    variant, block, x = check_variant(variant), model.check_block(block), check_input(x)
    run, result = _runner(x, variant, block)
    run()
    return result()


def block_scan(x, variant: str = "Blelloch", block: int = 256):
    """Inclusive prefix sums of each block-sized segment of ``x`` (segments are independent)."""
    variant, block, x = check_scan(variant), model.check_block(block), check_input(x)
    xp = runtime.xp if runtime.is_gpu() else np
    out = xp.zeros(x.size, dtype=np.float32)
    _launch(kernels.scan_kernel(variant, block), model.blocks_needed(x.size, block), block, x, out)
    return out


def reference_block_scan(x, block: int) -> np.ndarray:
    """The specification of ``block_scan``, in float64: cumsum restarted at every block boundary."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    for start in range(0, x.size, block):
        out[start:start + block] = np.cumsum(x[start:start + block])
    return out


def count_above(x, threshold: float = 0.5, version: str = "ballot") -> int:
    """How many elements exceed ``threshold``: ``"per lane"`` (one atomic per passing lane) or ``"ballot"``."""
    version = validate.choice("version", version, ["per lane", "ballot"])
    x = check_input(x)
    xp = runtime.xp if runtime.is_gpu() else np
    count = xp.zeros(1, dtype=np.int32)
    kernel = kernels.count_above_ballot if version == "ballot" else kernels.count_above_per_lane
    _launch(kernel, -(-x.size // 256), 256, x, np.float32(threshold), count)
    return int(count[0])


# --- the microscope's counts -----------------------------------------------------------------------------


def _trace(kernel, grid, block, *args):
    from gpucourse.microscope import trace

    return trace(kernel, grid, block, *args)


def _line_issues(report, snippets) -> tuple[int, int]:
    """(warp issues, active lanes) summed over the executed lines whose source contains a snippet."""
    branches = report.branches()
    picked = branches[branches.source.apply(lambda s: any(snippet in s for snippet in snippets))]
    issues = int(picked.issues.sum())
    active = int(round(float((picked.issues * picked.active_lanes_mean).sum())))
    return issues, active


# The simulator launches the microscope has run for the lesson's counts and its explorer: a move of the
# explorer re-traces only a (variant, n, block) it has not traced yet (tests/test_reductions.py counts them).
TRACED_LAUNCHES = {"count": 0}


def trace_reduction(variant: str = "sequential", n: int = 1000, block: int = 256, seed: int = 0):
    """The microscope's report of the first pass of one rung, and whether its partial sums are right.

    Traced once per (variant, n, block, seed) and kept (a report is read, never changed): the counts table,
    the explorer's chart and its title all read the same launch."""
    return _traced(check_variant(variant), check_n(n), model.check_block(block), int(seed))


@functools.lru_cache(maxsize=64)
def _traced(variant: str, n: int, block: int, seed: int):
    TRACED_LAUNCHES["count"] += 1
    x = np.random.default_rng(seed).random(n, dtype=np.float32)
    grid = launch_blocks(variant, n, block)
    if grid * block > SIM_MAX_N:
        raise InvalidConfig(f"{grid} blocks of {block} threads are more than the microscope traces "
                            f"({SIM_MAX_N} threads): use a smaller n or block")
    out = np.zeros(1 if variant in ONE_LAUNCH else grid, dtype=np.float32)
    report = _trace(kernels.reduction_kernel(variant, block), grid, block, x, out)
    expected = float(np.sum(x, dtype=np.float64))
    return report, bool(abs(float(out.sum(dtype=np.float64)) - expected) <= 1e-5 * max(1.0, expected) + 1e-4)


@functools.lru_cache(maxsize=64)
def _counts(variant: str, n: int, block: int) -> dict:
    report, correct = trace_reduction(variant, n, block)
    issues, active = _line_issues(report, (ADD_LINES[variant],))
    memory, banks = report.memory(), report.banks()
    loads = memory[memory.op == "load"]
    per_thread = kernels.ELEMENTS_PER_THREAD[variant]
    grid = launch_blocks(variant, n, block)
    atomics = report.requests()
    atomics = atomics[atomics.op == "atomic"]
    return {
        "variant": variant,
        "n": n,
        "block": block,
        "blocks": grid,
        "loads per thread (most)": (model.grid_stride_loads_per_thread(n, block, grid)[1] if variant == "grid stride"
                                    else per_thread),
        "atomics": len(atomics),
        "warp line issues": int(report.warps().issues.sum()),
        "add issues": issues,
        "active lanes per add issue": active / issues if issues else 0.0,
        "idle lanes in adds": WARP_SIZE * issues - active,
        "max bank ways": int(banks.max_ways.max()) if len(banks) else 0,
        "load sectors": int(loads.sectors.sum()),
        "load sectors/request": float(loads.sectors.sum() / loads.requests.sum()),
        "barriers per warp": _barriers_per_warp(report),
        "launches to finish": 1 if variant in ONE_LAUNCH else model.reduction_passes(n, block, per_thread),
        "correct": correct,
    }


def _barriers_per_warp(report) -> float:
    branches = report.branches()
    syncs = branches[branches.source.str.contains("cuda.syncthreads()", regex=False)]
    return float(syncs.issues.sum()) / len(report.warps())


def reduction_counts(variant: str = "sequential", n: int = 1000, block: int = 256) -> dict:
    """The microscope's counts of one rung's first pass (exact in both modes; nothing is timed)."""
    return dict(_counts(check_variant(variant), check_n(n), model.check_block(block)))


def counts_table(n: int = 1000, block: int = 256, variants=kernels.REDUCTIONS) -> pd.DataFrame:
    """One row per rung: the microscope's counts at n elements and this block size."""
    n, block = check_n(n), model.check_block(block)
    table = pd.DataFrame([_counts(check_variant(v), n, block) for v in variants])
    table.attrs["source"] = f"counted by the microscope (first pass, n = {n}, {block}-thread blocks)"
    return table


@functools.lru_cache(maxsize=16)
def _scan_counts(block: int, n: int) -> pd.DataFrame:
    x = np.random.default_rng(1).random(n, dtype=np.float32)
    rows = []
    for variant in kernels.SCANS:
        out = np.zeros(n, dtype=np.float32)
        report = _trace(kernels.scan_kernel(variant, block), model.blocks_needed(n, block), block, x, out)
        issues, active = _line_issues(report, SCAN_ADD_LINES[variant])
        blocks = model.blocks_needed(n, block)
        banks = report.banks()
        rows.append({
            "scan": variant, "block": block, "n": n,
            "adds per block (counted)": active / blocks,
            "adds per block (model)": (model.hillis_steele_adds(block) if variant == "Hillis-Steele"
                                       else model.blelloch_adds(block)),
            "steps (model)": (model.hillis_steele_steps(block) if variant == "Hillis-Steele"
                              else model.blelloch_steps(block)),
            "barriers per warp": _barriers_per_warp(report),
            "add issues per block": issues / blocks,
            "max bank ways": int(banks.max_ways.max()) if len(banks) else 0,
            "correct": bool(np.allclose(out, reference_block_scan(x, block), rtol=1e-5, atol=1e-4)),
        })
    return pd.DataFrame(rows)


def scan_counts(block: int = 64, n: int | None = None) -> pd.DataFrame:
    """Hillis–Steele against Blelloch under the microscope: adds (work) and barriers (steps) per block."""
    block = model.check_block(block)
    n = check_n(block if n is None else n)
    return _scan_counts(block, n).copy()


def ballot_counts(n: int = 512, threshold: float = 0.9) -> pd.DataFrame:
    """Counting x > threshold with one atomic per lane against one per warp (ballot_sync + popc)."""
    n = check_n(n)
    x = np.random.default_rng(2).random(n, dtype=np.float32)
    expected = int((x > np.float32(threshold)).sum())
    rows = []
    for version, kernel in (("per lane", kernels.count_above_per_lane), ("ballot", kernels.count_above_ballot)):
        count = np.zeros(1, dtype=np.int32)
        report = _trace(kernel, -(-n // 256), 256, x, np.float32(threshold), count)
        mem = report.requests()
        atomics = mem[mem.op == "atomic"]
        rows.append({"version": version, "atomic lanes": int(atomics.lanes.sum()),
                     "atomic warp requests": len(atomics), "warp paths (max)": int(report.warps().paths.max()),
                     "count": int(count[0]), "correct": int(count[0]) == expected})
    return pd.DataFrame(rows)


# --- GPU measurements ---------------------------------------------------------------------------------------


_MEASURED: dict[tuple, dict] = {}


def torch_missing() -> str | None:
    """Why torch.sum cannot be measured here (torch is not importable), or None where it can."""
    import importlib

    try:
        importlib.import_module("torch")
    except ImportError as error:
        return f"torch.sum skipped: torch is not importable here ({error})"
    return None


def _library_runner(name: str, x):
    import cupy

    if name == "cupy.sum":
        return lambda: cupy.sum(x)
    if name == "cupy.ReductionKernel":
        kernel = kernels.cupy_reduction_kernel()
        return lambda: kernel(x)
    import torch

    tensor = torch.from_dlpack(x)
    return lambda: torch.sum(tensor)


def available_libraries(libraries=LIBRARIES) -> tuple[tuple[str, ...], list[str]]:
    """(the libraries that can run here, a note per one skipped): a site stack without torch still measures
    the ladder, CuPy's two sums and says that torch.sum was skipped and why."""
    missing = torch_missing() if "torch.sum" in libraries else None
    if missing is None:
        return tuple(libraries), []
    return tuple(name for name in libraries if name != "torch.sum"), [missing]


def measure_reductions(n: int = 1 << 24, block: int = 256, variants=kernels.REDUCTIONS,
                       libraries=LIBRARIES) -> pd.DataFrame:
    """GB/s (bytes read: 4n) of every rung and library at n float32 elements, in one run (GPU only)."""
    if not runtime.is_gpu():
        raise NoGPU("measuring the reductions needs a GPU: without one, lesson 04a shows recordings and the "
                    "microscope's counts")
    n, block = check_n(n), model.check_block(block)
    validate.fits_in_memory(2 * 4 * n, runtime.free_memory_bytes(), f"{n:,} float32 values")
    x = random_input(n, seed=5)
    xp = runtime.xp
    expected = float(xp.sum(x, dtype=np.float64))
    tolerance = 1e-4 * max(1.0, abs(expected))
    libraries, skipped = available_libraries(libraries)
    rows = []
    for name in list(variants) + list(libraries):
        key = (name, n, block)
        if key not in _MEASURED:
            if name in kernels.REDUCTIONS:
                run, result = _runner(x, name, block)
            else:
                holder = {}
                call = _library_runner(name, x)

                def run(call=call, holder=holder):
                    holder["value"] = call()

                def result(holder=holder):
                    return float(holder["value"])
            m = measure(run, label=f"{name} n={n}", bytes_moved=4 * n,
                        check=lambda result=result: abs(result() - expected) <= tolerance)
            _MEASURED[key] = {"n": n, "block": block, "variant": name,
                              "kind": "kernel" if name in kernels.REDUCTIONS else "library",
                              "median_ms": m.median_ms, "iqr_ms": m.iqr_ms, "n_samples": m.n_samples,
                              "gbps": m.gbps}
        rows.append(_MEASURED[key])
    table = pd.DataFrame(rows)
    table.attrs["skipped"] = skipped
    return table


@reference.register_sweep(
    "reductions.sum", lesson="04a_reductions",
    columns=("n", "block", "variant", "kind", "median_ms", "gbps"),
    description="float32 sum: the reduction ladder (256-thread blocks) and CuPy/torch sums; GB/s vs n",
)
def _sum_sweep() -> pd.DataFrame:
    return pd.concat([measure_reductions(n, SWEEP_BLOCK) for n in SWEEP_SIZES], ignore_index=True)


def ladder_data(n: int = LADDER_N) -> tuple[pd.DataFrame | None, str]:
    """(GB/s per rung and library, where they came from): measured now, recorded, or (None, why).

    Without a GPU, a recording at n if it has one, else at its largest n, and the caption says which size
    and why it matters (2^24 float32 is about an H200's L2)."""
    if runtime.is_gpu():
        data = measure_reductions(n)
        skipped = "; ".join(data.attrs.get("skipped", []))
        return data, f"{runtime.device().name}, one run{'; ' + skipped if skipped else ''}"
    rec = reference.load("reductions.sum")
    if rec is None:
        return None, "no GPU here and no recording yet (`make record` on a GPU)"
    data = rec.data[rec.data.n == n]
    if len(data):
        return data, rec.caption()
    largest = int(rec.data.n.max())
    missing = sorted(set(kernels.REDUCTIONS) - set(rec.data[rec.data.n == largest].variant))
    note = (f"recorded at n = {largest:,} ({4 * largest / 2**20:.0f} MiB), not at the {n:,} of the lesson: near "
            "the size of the L2, launches and tails show, so every bar, the libraries too, sits lower than at 2^26")
    if missing:
        note += f"; not in this recording: {', '.join(missing)}"
    return rec.data[rec.data.n == largest], f"{rec.caption()}. {note}"


def in_flight_model() -> pd.DataFrame:
    """Little's law per rung with the course's one calibration (``gpucourse.measure.calibration``): for this GPU
    (live SM count and compute capability; its recorded calibration, else the H200's latency, said so, and the
    copy ceiling measured now) or, without one, for the calibration GPU of the course's recordings."""
    reference_cal = calibrations.recorded(calibrations.CALIBRATION_GPU)
    if runtime.is_gpu():
        from gpucourse.measure import ceilings

        info = runtime.device()
        own = calibrations.for_device(info.name)
        cal = own or reference_cal
        if cal is None:
            raise NoGPU("Little's law needs a loaded latency: no recording of a one-element copy to calibrate it on")
        latency_from = ("calibrated on lesson 03's one-element copy on this GPU" if own else
                        f"the {cal.device}'s calibrated latency, assumed for this GPU")
        table = model.in_flight_table(int(info.sm_count), tuple(info.compute_capability), ceilings.copy_gbps(),
                                      cal.latency_ns, latency_from=latency_from)
        table.attrs["source"] = f"{table.attrs['source']}; this GPU ({info.name}), copy ceiling measured now"
        return table
    rec = reference.load(calibrations.CALIBRATION_SWEEP, gpu=calibrations.CALIBRATION_GPU)
    if reference_cal is None or rec is None:
        raise NoGPU("Little's law needs a GPU's SM count, copy ceiling and loaded latency: no GPU here and no "
                    "recording of them")
    cc = tuple(int(part) for part in str(rec.provenance["device"]["compute_capability"]).split("."))
    table = model.in_flight_table(reference_cal.sm_count, cc, reference_cal.ceiling_gbps, reference_cal.latency_ns,
                                  latency_from="calibrated on lesson 03's one-element copy")
    table.attrs["source"] = f"{table.attrs['source']}; {calibrations.summary(reference_cal)}"
    return table
