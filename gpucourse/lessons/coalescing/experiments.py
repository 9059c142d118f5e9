"""Lesson 03 "Memory coalescing": host runners, microscope traces, GPU sweeps and their recording registration."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

# Importing gpucourse.coalescing runs gpucourse/__init__ first, which chooses the mode before numba
# loads: numba.cuda is the GPU or the simulator.
from numba import cuda

from gpucourse import validate
from gpucourse.errors import InvalidConfig, WrongResult
from gpucourse.hardware import WARP_SIZE
from gpucourse.lessons.coalescing import inflight
from gpucourse.lessons.coalescing.kernels import (
    ILP,
    best_copy,
    copy_columns,
    copy_ilp4,
    copy_rows,
    drift_aos,
    drift_soa,
    strided_copy,
)
from gpucourse.lessons.coalescing.model import (
    DRIFT_DT,
    DRIFT_FIELDS,
    DTYPES,
    FIELDS,
    LAYOUTS,
    SIM_MAX_ELEMENTS,
    STRIDES,
    _cupy,
    _device_pattern,
    _free_pool,
    _row,
    _trace,
    check_copied,
    check_copy,
    check_layout,
    check_offset,
    check_stride,
    copy_arrays,
    copy_bytes_allocated,
    drift_reference,
    dtype_name,
    itemsize,
    make_particles,
    matrix_launch,
    pattern,
    span_elements,
    to_soa,
    useful_bytes,
)
from gpucourse.measure import reference, runtime
from gpucourse.measure.harness import Measurement, measure

LESSON = "03_coalescing"
OFFSETS = tuple(range(33))
THREADS_PER_BLOCK = 256
SWEEP_USEFUL_BYTES = 256 * 2**20  # per side, per launch: several times any L2
LAUNCHES_PER_SAMPLE = 4  # back-to-back launches per timed call, so launch overhead is amortised
MEMORY_HEADROOM = 0.8  # use at most this share of the free device memory


def _check_fits(nbytes: int, what: str) -> None:
    validate.fits_in_memory(nbytes, runtime.free_memory_bytes(), what)


def _check_sim_size(threads: int, what: str) -> None:
    if not runtime.is_gpu() and threads > SIM_MAX_ELEMENTS:
        raise InvalidConfig(
            f"{what} would run {threads} threads; in simulator mode at most {SIM_MAX_ELEMENTS} "
            "(the simulator runs about 7,000 threads a second)"
        )


def run_copy(n_elements=1024, stride=1, offset=0, dtype="float32", threads_per_block=THREADS_PER_BLOCK):
    """Run the strided copy once (GPU or simulator), check it, and return (src, dst) on the host."""
    n = validate.integer("n_elements", n_elements, minimum=1)
    stride, offset, name = check_copy(stride, offset, dtype)
    threads = validate.block(threads_per_block)[0]
    _check_fits(copy_bytes_allocated(n, stride, offset, name), "the strided copy's two arrays")
    _check_sim_size(n, "this copy")
    src, dst = copy_arrays(n, stride, offset, name)
    strided_copy[math.ceil(n / threads), threads](src, dst, n, stride, offset)
    check_copied(src, dst, n, stride, offset)
    return src, dst


def run_drift(layout="struct of arrays", n_particles=1024, dt=DRIFT_DT, seed=0) -> np.ndarray:
    """One update step with the chosen layout; returns the new positions (n, 3), checked."""
    layout = check_layout(layout)
    if layout not in LAYOUTS[:2]:
        raise InvalidConfig(f"run_drift takes 'array of structs' or 'struct of arrays'; got {layout!r}")
    n = validate.integer("n_particles", n_particles, minimum=1)
    dt = validate.number("dt", dt)
    _check_fits(n * len(FIELDS) * 4, "the particles")
    _check_sim_size(n, "this update")
    particles = make_particles(n, seed)
    blocks = math.ceil(n / THREADS_PER_BLOCK)
    if layout == "array of structs":
        p = particles.copy()
        drift_aos[blocks, THREADS_PER_BLOCK](p, dt)
        out = p[:, 0:3]
    else:
        soa = to_soa(particles)
        drift_soa[blocks, THREADS_PER_BLOCK](*(soa[f] for f in DRIFT_FIELDS), dt)
        out = np.stack([soa["x"], soa["y"], soa["z"]], axis=1)
    if not np.allclose(out, drift_reference(particles, dt), rtol=1e-5, atol=1e-6):
        raise WrongResult(f"the {layout} update gave wrong positions")
    return out


def run_matrix_copy(traversal="row traversal", rows=64, cols=64) -> np.ndarray:
    """Copy a rows × cols float32 matrix with a warp walking along rows or down columns; checked."""
    traversal = check_layout(traversal)
    if traversal not in LAYOUTS[2:]:
        raise InvalidConfig(f"run_matrix_copy takes 'row traversal' or 'column traversal'; got {traversal!r}")
    rows = validate.integer("rows", rows, minimum=1)
    cols = validate.integer("cols", cols, minimum=1)
    _check_fits(2 * rows * cols * 4, "the two matrices")
    _check_sim_size(rows * cols, "this copy")
    a = pattern(rows * cols).reshape(rows, cols)
    out = np.full_like(a, np.nan)
    grid, block = matrix_launch(traversal, rows, cols)
    kernel = copy_rows if traversal == "row traversal" else copy_columns
    kernel[grid, block](a, out)
    if not np.array_equal(a, out):
        raise WrongResult(f"the {traversal} copy missed elements")
    return out


def sweep_elements(stride=1, offset=0, dtype="float32", useful_bytes_per_side=SWEEP_USEFUL_BYTES,
                   free_bytes: int | None = None) -> int:
    """Elements a sweep copies: `useful_bytes_per_side` worth, fewer if the arrays would not fit."""
    stride, offset, name = check_copy(stride, offset, dtype)
    size = itemsize(name)
    n = int(useful_bytes_per_side) // size
    if free_bytes is not None:
        n = min(n, int(free_bytes * MEMORY_HEADROOM) // (2 * size * stride) - offset)
    n -= n % THREADS_PER_BLOCK
    if n < THREADS_PER_BLOCK:
        raise InvalidConfig(f"not enough free device memory for a stride-{stride} {name} copy")
    return n


def measure_copy(stride=1, offset=0, dtype="float32", *, n_elements=None, copy_ceiling_gbps=None,
                 min_total_ms: float = 500.0, coarsened: bool = False) -> Measurement:
    """Time the strided copy with the harness (GPU). Effective GB/s = elements × size × 2 ÷ time.
    ``coarsened``: copy_ilp4 (four loads per thread, grid-stride over a resident grid) instead of
    strided_copy (one element per thread): the same sectors per request, four times the bytes in flight."""
    stride, offset, name = check_copy(stride, offset, dtype)
    label = f"{name} copy{' (4 loads per thread)' if coarsened else ''}, stride {stride}, offset {offset}"
    if n_elements is not None:
        n_elements = validate.integer("n_elements", n_elements, minimum=1)
    if runtime.is_gpu():
        _free_pool()  # memory CuPy still caches from earlier arrays counts as free here
    if n_elements is not None:
        _check_fits(copy_bytes_allocated(n_elements, stride, offset, name), "the strided copy's two arrays")
    if not runtime.is_gpu():
        return measure(lambda: None, label=label)  # says "not measured": nothing runs in the simulator
    n = n_elements or sweep_elements(stride, offset, name, free_bytes=runtime.free_memory_bytes())
    try:
        return _measure_copy_on_device(n, stride, offset, name, label, copy_ceiling_gbps, min_total_ms, coarsened)
    finally:
        _free_pool()  # the arrays are gone now: hand their memory back for the next size


def _measure_copy_on_device(n, stride, offset, name, label, copy_ceiling_gbps, min_total_ms,
                            coarsened=False) -> Measurement:
    cupy = _cupy()
    span = span_elements(n, stride, offset)
    src = _device_pattern(span, name)
    dst = cupy.empty_like(src)
    dst.fill(np.nan)  # poisoned: an element the kernel misses stays NaN
    d_src, d_dst = cuda.as_cuda_array(src), cuda.as_cuda_array(dst)
    if coarsened:
        full_wave = resident_grid(runtime.device().sm_count)
        blocks = min(full_wave, math.ceil(n / (ILP * THREADS_PER_BLOCK)))
        copy_ilp4[blocks, THREADS_PER_BLOCK](d_src, d_dst, n, stride, offset)  # compile, then ask the driver
        launch = copy_ilp4[min(blocks, resident_blocks(copy_ilp4, THREADS_PER_BLOCK, full_wave)), THREADS_PER_BLOCK]
        dst.fill(np.nan)  # poisoned again: the check must see the timed launches' copy
    else:
        launch = strided_copy[math.ceil(n / THREADS_PER_BLOCK), THREADS_PER_BLOCK]

    def run():
        for _ in range(LAUNCHES_PER_SAMPLE):
            launch(d_src, d_dst, n, stride, offset)

    def check():
        picked = slice(offset, offset + (n - 1) * stride + 1, stride)
        return bool((dst[picked] == src[picked]).all())

    return measure(run, label=label, check=check, bytes_moved=LAUNCHES_PER_SAMPLE * useful_bytes(n, name),
                   copy_ceiling_gbps=copy_ceiling_gbps, min_total_ms=min_total_ms)


def _ceiling_and_datasheet() -> tuple[float, float | None]:
    from gpucourse.measure import ceilings

    return ceilings.copy_gbps(), runtime.device().datasheet_bandwidth_gbps


def stride_sweep(dtypes=tuple(DTYPES), strides=STRIDES, offset=0, progress=None) -> pd.DataFrame:
    """GPU: effective GB/s of the strided copy for each dtype and stride."""
    names = [dtype_name(d) for d in dtypes]
    strides = [check_stride(s) for s in strides]
    offset = check_offset(offset)
    ceiling, datasheet = _ceiling_and_datasheet()
    rows, total = [], len(names) * len(strides)
    for name in names:
        for s in strides:
            n = sweep_elements(s, offset, name, free_bytes=runtime.free_memory_bytes())
            m = measure_copy(s, offset, name, n_elements=n, copy_ceiling_gbps=ceiling)
            rows.append(_row(m, ceiling, datasheet, dtype=name, stride=s, offset=offset, n_elements=n))
            if progress:
                progress(len(rows) / total)
    return pd.DataFrame(rows)


def offset_sweep(dtypes=tuple(DTYPES), offsets=OFFSETS, progress=None) -> pd.DataFrame:
    """GPU: effective GB/s of the copy misaligned by 0…32 elements, for each dtype."""
    names = [dtype_name(d) for d in dtypes]
    offsets = [check_offset(o) for o in offsets]
    ceiling, datasheet = _ceiling_and_datasheet()
    rows, total = [], len(names) * len(offsets)
    for name in names:
        n = sweep_elements(1, max(offsets), name, free_bytes=runtime.free_memory_bytes())
        for o in offsets:
            m = measure_copy(1, o, name, n_elements=n, copy_ceiling_gbps=ceiling)
            rows.append(_row(m, ceiling, datasheet, dtype=name, stride=1, offset=o, n_elements=n))
            if progress:
                progress(len(rows) / total)
    return pd.DataFrame(rows)


def _measure_layout(layout: str, ceiling: float, n_particles: int,
                    matrix_side: int) -> tuple[Measurement, int, int]:
    """(measurement, elements, useful bytes per launch) of one layout kernel on the GPU."""
    cupy = _cupy()
    _free_pool()
    if layout in LAYOUTS[:2]:
        host = make_particles(n_particles)
        expected = cupy.asarray(drift_reference(host, DRIFT_DT))
        blocks = math.ceil(n_particles / THREADS_PER_BLOCK)
        if layout == "array of structs":
            p = cupy.asarray(host)
            args = (cuda.as_cuda_array(p), DRIFT_DT)
            launch = drift_aos[blocks, THREADS_PER_BLOCK]

            def positions():
                return p[:, 0:3]
        else:
            soa = {f: cupy.asarray(v) for f, v in to_soa(host).items()}
            args = (*(cuda.as_cuda_array(soa[f]) for f in DRIFT_FIELDS), DRIFT_DT)
            launch = drift_soa[blocks, THREADS_PER_BLOCK]

            def positions():
                return cupy.stack([soa["x"], soa["y"], soa["z"]], axis=1)
        first = {"done": False}

        def run():
            for _ in range(1 if not first["done"] else LAUNCHES_PER_SAMPLE):
                launch(*args)

        def check():
            first["done"] = True  # the harness checks after the first (single-launch) run
            return bool(cupy.allclose(positions(), expected, rtol=1e-5, atol=1e-6))

        useful = n_particles * 4 * (len(DRIFT_FIELDS) + 3)  # 6 fields read, 3 written
        elements = n_particles
    else:
        side = matrix_side
        a = _device_pattern(side * side, "float32").reshape(side, side)
        out = cupy.full_like(a, np.nan)
        grid, block = matrix_launch(layout, side, side)
        kernel = copy_rows if layout == "row traversal" else copy_columns
        args = (cuda.as_cuda_array(a), cuda.as_cuda_array(out))
        launch = kernel[grid, block]

        def run():
            for _ in range(LAUNCHES_PER_SAMPLE):
                launch(*args)

        def check():
            return bool((a == out).all())

        useful = 2 * side * side * 4
        elements = side * side
    try:
        m = measure(run, label=f"{layout} kernel", check=check, bytes_moved=LAUNCHES_PER_SAMPLE * useful,
                    copy_ceiling_gbps=ceiling)
    finally:
        _free_pool()
    return m, elements, useful


def layout_sweep(n_particles: int = 1 << 25, matrix_side: int = 8192, progress=None) -> pd.DataFrame:
    """GPU: effective GB/s of the four layout kernels (useful bytes only)."""
    n_particles = validate.integer("n_particles", n_particles, minimum=THREADS_PER_BLOCK)
    matrix_side = validate.integer("matrix side", matrix_side, minimum=32)
    _check_fits(max(n_particles * 32 * 2, 2 * matrix_side**2 * 4), "the layout sweep's arrays")
    ceiling, datasheet = _ceiling_and_datasheet()
    rows = []
    for layout in LAYOUTS:
        m, elements, useful = _measure_layout(layout, ceiling, n_particles, matrix_side)
        rows.append(_row(m, ceiling, datasheet, layout=layout, elements=elements, useful_bytes=useful))
        if progress:
            progress(len(rows) / len(LAYOUTS))
    return pd.DataFrame(rows)


@reference.register_sweep(
    "coalescing.stride", lesson=LESSON, columns=("dtype", "stride", "gbps", "copy_ceiling_gbps"),
    description=f"effective GB/s (useful bytes) of a strided copy, fp16/fp32/fp64, stride 1-64, "
                f"{SWEEP_USEFUL_BYTES >> 20} MiB per side, {LAUNCHES_PER_SAMPLE} launches per timed call",
)
def _stride_sweep() -> pd.DataFrame:
    return stride_sweep()


@reference.register_sweep(
    "coalescing.offset", lesson=LESSON, columns=("dtype", "offset", "gbps", "copy_ceiling_gbps"),
    description=f"effective GB/s of a copy misaligned by 0-32 elements, fp16/fp32/fp64, "
                f"{SWEEP_USEFUL_BYTES >> 20} MiB per side, {LAUNCHES_PER_SAMPLE} launches per timed call",
)
def _offset_sweep() -> pd.DataFrame:
    return offset_sweep()


@reference.register_sweep(
    "coalescing.layout", lesson=LESSON, columns=("layout", "gbps", "copy_ceiling_gbps"),
    description="effective GB/s of the particle update (AoS vs SoA, 2^25 particles) and the 8192² "
                "matrix copy (row vs column traversal, 32×8 blocks)",
)
def _layout_sweep() -> pd.DataFrame:
    return layout_sweep()


# --- within reach of the ceiling: more work per thread --------------------------------------------------------
# Rungs of the stride-1 float32 copy, named by (elements per thread, bytes per load):
# (1, 4) strided_copy, one 4-byte load per thread, one block per 256 elements (the lesson's kernel);
# (4, 4) copy_ilp4, a grid-stride loop over a resident grid with four independent loads per trip;
# (1, 8) and (4, 8): the same kernels on 8-byte lanes (the float32 arrays viewed as float64: one LDG.E.64 per
# load). (4, 8) is best_copy, the course's best Numba copy. 16-byte loads (CUDA C's float4, LDG.E.128):
# numba-cuda 0.30's array *indexing* never emits one (a complex128 view compiles to two LDG.E.64); a
# numba.cuda.extending.intrinsic that loads <4 x float> aligned to 16 B does (review gpu-predictions.md P10),
# but the course's kernels stop at 8 bytes, so 16-byte loads appear in the model only.

RUNGS = ((1, 4), (4, 4), (1, 8), (4, 8))  # (elements per thread, bytes per load) that a kernel here runs
BEST_RUNG = (4, 8)
WORK_USEFUL_BYTES = 1 << 30  # per side: 1 GiB each way, like the copy ceiling itself
TRACE_BYTES = 2048  # per side: what every rung copies under the microscope (the same bytes for each)
_MEASURED_RUNGS: dict[str, pd.DataFrame] = {}
WORK_SWEEP = "coalescing.work"  # the rungs' recording, drawn by the work-per-thread chart without a GPU

def resident_blocks(kernel, threads_per_block: int, fallback: int) -> int:
    """GPU, after the kernel's first launch: the blocks that fit on the device at once (the driver's occupancy
    calculator, which knows the kernel's registers: copy_ilp4 uses 31 and best_copy 32 a thread on sm_90, so
    2,048 threads fit; more would lower the blocks per SM). ``fallback`` where it cannot say."""
    try:
        compiled = next(iter(kernel.overloads.values()))
        return max(1, int(compiled.max_cooperative_grid_blocks(threads_per_block)))
    except Exception:  # the simulator, or a numba-cuda without the call: the arithmetic's grid
        return fallback


def check_rung(elements_per_thread, bytes_per_load) -> tuple[int, int]:
    k = validate.integer("elements_per_thread", elements_per_thread, minimum=1)
    width = validate.integer("bytes_per_load", bytes_per_load, minimum=1)
    if (k, width) not in RUNGS:
        raise InvalidConfig(f"no kernel runs {k} element(s) of {width} bytes per thread; the rungs are {RUNGS} "
                            "(16-byte loads are in the model only: numba-cuda's array indexing never issues them)")
    return k, width


def lanes(array: np.ndarray, bytes_per_load: int):
    """A float32 array seen as lanes of ``bytes_per_load`` (4: itself; 8: a float64 view, no copy)."""
    if bytes_per_load == 4:
        return array
    if bytes_per_load == 8:
        return array.view(np.float64)
    raise InvalidConfig(f"bytes_per_load is {bytes_per_load}; the kernels here load 4 or 8 bytes")


def resident_grid(sm_count: int, threads_per_block: int = THREADS_PER_BLOCK, waves: int = 1,
                  threads_per_sm: int = inflight.MAX_THREADS_PER_SM) -> int:
    """Blocks for a grid-stride kernel: ``waves`` full rounds of resident blocks on every SM (no tail)."""
    sms = validate.integer("sm_count", sm_count, minimum=1)
    per_sm = threads_per_sm // validate.integer("threads_per_block", threads_per_block, minimum=WARP_SIZE)
    return sms * max(per_sm, 1) * validate.integer("waves", waves, minimum=1)


def launch(elements_per_thread: int, bytes_per_load: int, n_lanes: int, blocks_resident: int,
           threads_per_block: int = THREADS_PER_BLOCK):
    """(kernel, blocks, threads per block, arguments after src and dst) for one rung over ``n_lanes`` lanes:
    one block per 256 lanes for the one-element kernel, at most ``blocks_resident`` for the grid-stride ones."""
    k, _ = check_rung(elements_per_thread, bytes_per_load)
    if k == 1:
        return strided_copy, math.ceil(n_lanes / threads_per_block), threads_per_block, (n_lanes, 1, 0)
    blocks = min(blocks_resident, math.ceil(n_lanes / (ILP * threads_per_block)))
    if bytes_per_load == 8:
        return best_copy, blocks, threads_per_block, (n_lanes,)
    return copy_ilp4, blocks, threads_per_block, (n_lanes, 1, 0)


def run_rung(elements_per_thread=4, bytes_per_load=8, n_elements=1024, blocks_resident=2):
    """Copy ``n_elements`` float32 with one rung (GPU or simulator), check it, return the copy."""
    k, width = check_rung(elements_per_thread, bytes_per_load)
    n = validate.integer("n_elements", n_elements, minimum=1, maximum=1 << 16)
    if n % (width // 4):
        raise InvalidConfig(f"{n} float32 do not split into {width}-byte lanes")
    src = pattern(n)
    dst = np.full_like(src, np.nan)
    kernel, blocks, threads, extra = launch(k, width, n * 4 // width, blocks_resident, WARP_SIZE)
    kernel[blocks, threads](lanes(src, width), lanes(dst, width), *extra)
    if not np.array_equal(src, dst):
        raise WrongResult(f"the {k}×{width}-byte copy missed elements")
    return dst


def trace_rung(elements_per_thread=4, bytes_per_load=4):
    """The microscope's report of one rung copying ``TRACE_BYTES`` (warps of 32 threads, each thread one trip:
    ``elements_per_thread`` loads)."""
    k, width = check_rung(elements_per_thread, bytes_per_load)
    n = TRACE_BYTES // 4  # float32 elements
    n_lanes = TRACE_BYTES // width
    src = pattern(n)
    dst = np.full_like(src, np.nan)
    kernel, blocks, threads, extra = launch(k, width, n_lanes, math.ceil(n_lanes / (ILP * WARP_SIZE)), WARP_SIZE)
    report = _trace(kernel, blocks, threads, lanes(src, width), lanes(dst, width), *extra)
    if not np.array_equal(src, dst):
        raise WrongResult("the traced copy missed elements")
    return report


def rung_counts(elements_per_thread=4, bytes_per_load=4) -> dict:
    """What the microscope counts for one rung's loads: sectors per request, bytes per load and per thread."""
    k, width = check_rung(elements_per_thread, bytes_per_load)
    report = trace_rung(k, width)
    loads = report.requests()
    loads = loads[loads.op == "load"]
    per_thread = report.per_thread_max("load", array="src")
    return {"elements_per_thread": k, "bytes_per_load": width,
            "sectors_per_request": float(report.sectors_per_request(array="src", op="load")),
            "load_requests": len(loads), "loads_per_thread": per_thread,
            "bytes_per_thread": per_thread * width, "bytes_copied": int(report.requests().query("op == 'load'")
                                                                           .bytes_requested.sum()),
            "bytes_in_flight_per_sm": inflight.bytes_in_flight_per_sm(inflight.MAX_THREADS_PER_SM, k, width)}


def counts_table() -> pd.DataFrame:
    return pd.DataFrame([rung_counts(k, w) for k, w in RUNGS])


# --- the GPU -------------------------------------------------------------------------------------------------


def measure_rung(elements_per_thread=4, bytes_per_load=8, *, n_elements=None, copy_ceiling_gbps=None,
                 min_total_ms: float = 500.0) -> Measurement:
    """Time one rung with the harness (GPU). Effective GB/s = useful bytes × 2 ÷ time."""
    k, width = check_rung(elements_per_thread, bytes_per_load)
    label = f"float32 copy, {k} element(s) of {width} B per thread"
    if not runtime.is_gpu():
        return measure(lambda: None, label=label)  # "not measured": nothing runs in the simulator
    n = validate.integer("n_elements", n_elements or WORK_USEFUL_BYTES // 4, minimum=WARP_SIZE)
    n -= n % 4
    _free_pool()
    try:
        src = _device_pattern(n, "float32")
        dst = _cupy().empty_like(src)
        dst.fill(np.nan)
        d_src, d_dst = cuda.as_cuda_array(lanes(src, width)), cuda.as_cuda_array(lanes(dst, width))
        full_wave = resident_grid(runtime.device().sm_count)
        kernel, blocks, threads, extra = launch(k, width, n * 4 // width, full_wave)
        if k > 1:  # compile, then size the grid to what the driver says is resident (one wave, no tail)
            kernel[blocks, threads](d_src, d_dst, *extra)
            blocks = min(blocks, resident_blocks(kernel, threads, full_wave))
            dst.fill(np.nan)  # poisoned again: the check must see the timed launches' copy, not this one's
        configured = kernel[blocks, threads]

        def run():
            for _ in range(LAUNCHES_PER_SAMPLE):
                configured(d_src, d_dst, *extra)

        def check():
            return bool((dst == src).all())

        return measure(run, label=label, check=check, bytes_moved=LAUNCHES_PER_SAMPLE * 2 * n * 4,
                       copy_ceiling_gbps=copy_ceiling_gbps, min_total_ms=min_total_ms)
    finally:
        _free_pool()


def work_sweep(min_total_ms: float = 500.0) -> pd.DataFrame:
    """GPU: every rung (``RUNGS``) timed once against the copy ceiling measured now, with its spread and the
    bytes in flight per SM the chart puts it at."""
    from gpucourse.measure import ceilings

    ceiling = ceilings.copy_gbps()
    rows = []
    for k, width in RUNGS:
        m = measure_rung(k, width, copy_ceiling_gbps=ceiling, min_total_ms=min_total_ms)
        rows.append({"elements_per_thread": k, "bytes_per_load": width,
                     "bytes_in_flight_per_sm": inflight.bytes_in_flight_per_sm(inflight.MAX_THREADS_PER_SM, k, width),
                     "median_ms": m.median_ms, "iqr_ms": m.iqr_ms, "n_samples": m.n_samples, "gbps": m.gbps,
                     "copy_ceiling_gbps": ceiling})
    return pd.DataFrame(rows)


def _measured_rungs(min_total_ms: float) -> pd.DataFrame:
    if "rungs" not in _MEASURED_RUNGS:
        _MEASURED_RUNGS["rungs"] = work_sweep(min_total_ms)
    return _MEASURED_RUNGS["rungs"]


# Issue 48: the work-per-thread chart had no recording, so a learner without a GPU saw the model only.
@reference.register_sweep(
    WORK_SWEEP, lesson=LESSON,
    columns=("elements_per_thread", "bytes_per_load", "bytes_in_flight_per_sm", "gbps", "copy_ceiling_gbps"),
    description="effective GB/s of the float32 copy's rungs of work per thread (1×4, 4×4, 1×8, 4×8 B: "
                "strided_copy, copy_ilp4, best_copy), 1 GiB each way, grid-stride rungs on one resident wave",
)
def _work_sweep() -> pd.DataFrame:
    return work_sweep()


