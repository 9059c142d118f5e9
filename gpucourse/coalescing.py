"""Lesson 03 "Memory coalescing": what one warp's addresses cost, in 32-byte sectors.

* The sector model (pure arithmetic): lane ``l`` of warp ``w`` reads element
  ``(32·w + l)·stride + offset``; the memory system fetches every 32-byte sector holding one of
  those elements. ``sectors_per_request``, ``useful_fraction`` (useful bytes ÷ fetched bytes) and
  ``model_gbps`` (that fraction × the device's measured copy ceiling).
* Kernels: ``strided_copy`` (stride 1…64 and offset 0…32 elements, fp16/fp32/fp64), the particle
  update ``drift_aos`` / ``drift_soa`` (array of structs vs struct of arrays), and the matrix copies
  ``copy_rows`` / ``copy_columns`` (a warp walks along a row, or down a column).
* The microscope counts the sectors per request of those kernels (exact, in both modes):
  ``counted_sectors_per_request``, ``layout_counts``.
* GPU sweeps (``coalescing.stride``, ``coalescing.offset``, ``coalescing.layout``) timed by the harness;
  figures that show them measured (GPU), recorded (``data/reference``) or say there is no data.
* Figures: ``warp_figure`` (the lesson's picture: 32 lanes above the sectors they touch),
  ``stride_figure``, ``sectors_figure``, ``offset_figure``, ``layout_figure``, ``layout_bandwidth_figure``;
  widget builders return ``LiveChart``s.

Effective GB/s counts useful bytes only: elements copied × element size × 2 (read + write).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

# Importing gpucourse.coalescing runs gpucourse/__init__ first, which chooses the mode before numba
# loads: numba.cuda is the GPU or the simulator.
from numba import cuda

from gpucourse import validate
from gpucourse.errors import CourseError, InvalidConfig, WrongResult
from gpucourse.hardware import WARP_SIZE
from gpucourse.measure import reference, runtime
from gpucourse.measure.harness import Measurement, measure
from gpucourse.viz import charts

LESSON = "03_coalescing"
SECTOR_BYTES = 32  # since compute capability 6.0 global memory is served in 32-byte sectors
LINE_BYTES = 128  # a cache line = 4 sectors (what older GPUs fetched as one "transaction")
DTYPES = {"float16": np.float16, "float32": np.float32, "float64": np.float64}
STRIDES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
OFFSETS = tuple(range(33))
MAX_STRIDE = 1024
MAX_OFFSET = 1024
THREADS_PER_BLOCK = 256
TRACE_ELEMENTS = 64  # two warps: enough to show that every full warp costs the same
SIM_MAX_ELEMENTS = 1 << 15  # the simulator runs ~7,000 threads a second: keep a run to seconds
SWEEP_USEFUL_BYTES = 256 * 2**20  # per side, per launch: several times any L2
LAUNCHES_PER_SAMPLE = 4  # back-to-back launches per timed call, so launch overhead is amortised
MEMORY_HEADROOM = 0.8  # use at most this share of the free device memory

FIELDS = ("x", "y", "z", "vx", "vy", "vz", "mass", "charge")  # one particle = 8 float32 = 32 bytes
DRIFT_FIELDS = FIELDS[:6]  # the update reads 6 fields and writes 3
DRIFT_DT = 1e-3
LAYOUTS = ("array of structs", "struct of arrays", "row traversal", "column traversal")
MATRIX_BLOCK = (32, 8)
TRACE_PARTICLES = 64
TRACE_MATRIX = (32, 32)



# --- validation -------------------------------------------------------------------------------------


def dtype_name(dtype) -> str:
    """'float16', 'float32' or 'float64' from a name, a NumPy dtype or a NumPy scalar type."""
    name = dtype
    if isinstance(dtype, np.dtype) or (isinstance(dtype, type) and issubclass(dtype, np.generic)):
        name = np.dtype(dtype).name
    if not isinstance(name, str) or name not in DTYPES:
        allowed = ", ".join(map(repr, DTYPES))
        raise InvalidConfig(f"dtype must be one of {allowed} (2-, 4- or 8-byte floats); got {dtype!r}")
    return name


def itemsize(dtype) -> int:
    return np.dtype(DTYPES[dtype_name(dtype)]).itemsize


def check_stride(stride) -> int:
    return validate.integer("stride (elements between neighbouring lanes)", stride, minimum=1,
                            maximum=MAX_STRIDE)


def check_offset(offset) -> int:
    return validate.integer("offset (elements of misalignment)", offset, minimum=0, maximum=MAX_OFFSET)


def check_copy(stride, offset, dtype) -> tuple[int, int, str]:
    """(stride, offset, dtype name), or InvalidConfig saying what is allowed."""
    return check_stride(stride), check_offset(offset), dtype_name(dtype)


def check_layout(layout) -> str:
    return validate.choice("layout", layout, LAYOUTS)


# --- the sector model ------------------------------------------------------------------------------


def lane_elements(stride=1, offset=0, warp: int = 0) -> np.ndarray:
    """The element each of warp ``warp``'s 32 lanes copies: (32·warp + lane)·stride + offset."""
    stride, offset = check_stride(stride), check_offset(offset)
    warp = validate.integer("warp", warp, minimum=0)
    return (WARP_SIZE * warp + np.arange(WARP_SIZE, dtype=np.int64)) * stride + offset


def lane_addresses(stride=1, offset=0, dtype="float32", warp: int = 0) -> np.ndarray:
    """Byte address of each lane's element, from the start of a (256-byte-aligned) allocation."""
    return lane_elements(stride, offset, warp) * itemsize(dtype)


def sectors_touched(stride=1, offset=0, dtype="float32", warp: int = 0) -> np.ndarray:
    """The distinct 32-byte sectors (address // 32) one warp request touches, in order."""
    from gpucourse.microscope import analysis  # the microscope's rule: one implementation of it

    addresses = lane_addresses(stride, offset, dtype, warp)
    return np.array(analysis.sectors(addresses.tolist(), itemsize(dtype)), dtype=np.int64)


def sectors_per_request(stride=1, offset=0, dtype="float32") -> int:
    """Sectors one full warp request fetches. The same for every warp: warp w starts 32·w·stride
    elements later, a whole number of sectors, so its pattern is warp 0's moved along."""
    return int(len(sectors_touched(stride, offset, dtype)))


def ideal_sectors_per_request(dtype="float32") -> int:
    """32 lanes × element size ÷ 32 bytes: 2 (fp16), 4 (fp32), 8 (fp64)."""
    return WARP_SIZE * itemsize(dtype) // SECTOR_BYTES


def useful_fraction(stride=1, offset=0, dtype="float32") -> float:
    """Useful bytes ÷ fetched bytes of a warp request (read and write alike in the copy)."""
    return WARP_SIZE * itemsize(dtype) / (sectors_per_request(stride, offset, dtype) * SECTOR_BYTES)


def slowdown(stride=1, offset=0, dtype="float32") -> float:
    """How many times slower than a perfect copy the sector model predicts (1 / useful fraction)."""
    return 1.0 / useful_fraction(stride, offset, dtype)


def model_gbps(stride, offset, dtype, copy_ceiling_gbps) -> float:
    """Effective GB/s the sector model predicts: useful ÷ fetched × the measured copy ceiling."""
    ceiling = validate.number("copy ceiling (GB/s)", copy_ceiling_gbps, minimum=0)
    return useful_fraction(stride, offset, dtype) * ceiling


def model_table(dtype="float32", strides=STRIDES, offset=0) -> pd.DataFrame:
    """The sector model for each stride: sectors per request, useful fraction, predicted slowdown."""
    name = dtype_name(dtype)
    rows = [{"dtype": name, "stride": s, "offset": offset,
             "sectors_per_request": sectors_per_request(s, offset, name),
             "useful_fraction": useful_fraction(s, offset, name), "slowdown": slowdown(s, offset, name)}
            for s in strides]
    return pd.DataFrame(rows)


def span_elements(n_elements: int, stride: int, offset: int) -> int:
    """Elements an array needs so that n threads can copy element i·stride + offset."""
    return (n_elements - 1) * stride + offset + 1


def copy_bytes_allocated(n_elements, stride=1, offset=0, dtype="float32") -> int:
    """Bytes of the source and destination arrays of a strided copy together."""
    n = validate.integer("n_elements", n_elements, minimum=1)
    stride, offset, name = check_copy(stride, offset, dtype)
    return 2 * span_elements(n, stride, offset) * itemsize(name)


def useful_bytes(n_elements, dtype="float32") -> int:
    """Bytes a copy of n elements must move: read once + written once."""
    return 2 * int(n_elements) * itemsize(dtype)


# --- kernels ---------------------------------------------------------------------------------------


@cuda.jit
def strided_copy(src, dst, n, stride, offset):
    i = cuda.grid(1)
    if i < n:
        j = i * stride + offset  # lane l of a warp touches element (base + l)·stride + offset
        dst[j] = src[j]


@cuda.jit
def drift_aos(p, dt):
    # p[i] is one particle: 8 float32 fields side by side (x y z vx vy vz mass charge).
    i = cuda.grid(1)
    step = np.float32(dt)  # a Python float arrives as float64: fp32 arithmetic needs an fp32 step
    if i < p.shape[0]:
        p[i, 0] += p[i, 3] * step
        p[i, 1] += p[i, 4] * step
        p[i, 2] += p[i, 5] * step


@cuda.jit
def drift_soa(x, y, z, vx, vy, vz, dt):
    # One array per field: neighbouring lanes read neighbouring floats.
    i = cuda.grid(1)
    step = np.float32(dt)  # a Python float arrives as float64: fp32 arithmetic needs an fp32 step
    if i < x.shape[0]:
        x[i] += vx[i] * step
        y[i] += vy[i] * step
        z[i] += vz[i] * step


@cuda.jit
def copy_rows(a, out):
    col, row = cuda.grid(2)  # x → column: a warp's lanes walk along one row
    if row < a.shape[0] and col < a.shape[1]:
        out[row, col] = a[row, col]


@cuda.jit
def copy_columns(a, out):
    row, col = cuda.grid(2)  # x → row: a warp's lanes walk down one column
    if row < a.shape[0] and col < a.shape[1]:
        out[row, col] = a[row, col]


def kernel_source(kernel) -> str:
    """The Python source of one of this module's kernels, as CI ran it (GPU or simulator object)."""
    import inspect
    import textwrap

    fn = getattr(kernel, "py_func", None) or getattr(kernel, "fn", None)
    if fn is None:
        raise InvalidConfig(f"{kernel!r} is not a @cuda.jit kernel")
    return textwrap.dedent(inspect.getsource(fn))


# --- host side: inputs, launches, checks -----------------------------------------------------------


def pattern(n: int, dtype="float32") -> np.ndarray:
    """Distinct, finite, exactly representable values 1, 2, … (repeating every 1021)."""
    return ((np.arange(n) % 1021) + 1).astype(DTYPES[dtype_name(dtype)])


def _check_fits(nbytes: int, what: str) -> None:
    validate.fits_in_memory(nbytes, runtime.free_memory_bytes(), what)


def _check_sim_size(threads: int, what: str) -> None:
    if not runtime.is_gpu() and threads > SIM_MAX_ELEMENTS:
        raise InvalidConfig(
            f"{what} would run {threads} threads; in simulator mode at most {SIM_MAX_ELEMENTS} "
            "(the simulator runs about 7,000 threads a second)"
        )


def copy_arrays(n_elements, stride=1, offset=0, dtype="float32") -> tuple[np.ndarray, np.ndarray]:
    """Host source (a pattern) and destination (poisoned with NaN) for a strided copy."""
    n = validate.integer("n_elements", n_elements, minimum=1)
    stride, offset, name = check_copy(stride, offset, dtype)
    span = span_elements(n, stride, offset)
    src = pattern(span, name)
    dst = np.full(span, np.nan, dtype=DTYPES[name])
    return src, dst


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


def check_copied(src, dst, n, stride, offset) -> None:
    """Raise WrongResult unless exactly the n elements i·stride + offset were copied."""
    picked = slice(offset, offset + (n - 1) * stride + 1, stride)
    if not np.array_equal(np.asarray(dst)[picked], np.asarray(src)[picked]):
        raise WrongResult("the strided copy did not copy every element i·stride + offset")


def make_particles(n_particles=1024, seed: int = 0) -> np.ndarray:
    """n particles as an array of structs: shape (n, 8) float32, fields in FIELDS order."""
    n = validate.integer("n_particles", n_particles, minimum=1)
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, len(FIELDS))).astype(np.float32)


def to_soa(particles: np.ndarray) -> dict[str, np.ndarray]:
    """The six fields the update uses, each as its own contiguous array (a struct of arrays)."""
    particles = np.asarray(particles)
    if particles.ndim != 2 or particles.shape[1] != len(FIELDS) or particles.dtype != np.float32:
        raise InvalidConfig(f"particles must be a float32 array of shape (n, {len(FIELDS)}); got "
                            f"{particles.dtype} {particles.shape}")
    return {f: np.ascontiguousarray(particles[:, k]) for k, f in enumerate(FIELDS) if f in DRIFT_FIELDS}


def drift_reference(particles: np.ndarray, dt: float = DRIFT_DT) -> np.ndarray:
    """NumPy: positions after one step, shape (n, 3)."""
    p = np.asarray(particles, dtype=np.float64)
    return (p[:, 0:3] + p[:, 3:6] * dt).astype(np.float32)


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


def matrix_launch(traversal: str, rows: int, cols: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """(grid, block) of the matrix copy: x covers the columns (row traversal) or the rows (column)."""
    bx, by = MATRIX_BLOCK
    if traversal == "row traversal":
        return (math.ceil(cols / bx), math.ceil(rows / by)), MATRIX_BLOCK
    return (math.ceil(rows / bx), math.ceil(cols / by)), MATRIX_BLOCK


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


# --- the microscope: exact counts in both modes ----------------------------------------------------


def _trace(kernel, griddim, blockdim, *args):
    try:
        from gpucourse.microscope import trace
    except ImportError as exc:
        raise CourseError("the microscope (gpucourse.microscope) is not available here") from exc
    return trace(kernel, griddim, blockdim, *args)


def trace_copy(stride=1, offset=0, dtype="float32", n_elements=TRACE_ELEMENTS):
    """Microscope report of one strided-copy launch (small: two warps by default)."""
    n = validate.integer("n_elements", n_elements, minimum=1, maximum=SIM_MAX_ELEMENTS)
    stride, offset, name = check_copy(stride, offset, dtype)
    src, dst = copy_arrays(n, stride, offset, name)
    report = _trace(strided_copy, math.ceil(n / WARP_SIZE), WARP_SIZE, src, dst, n, stride, offset)
    check_copied(src, dst, n, stride, offset)
    return report


def counted_sectors_per_request(stride=1, offset=0, dtype="float32",
                                n_elements=TRACE_ELEMENTS) -> dict[str, float]:
    """Sectors per warp request of the copy's load (src) and store (dst), counted by the microscope."""
    report = trace_copy(stride, offset, dtype, n_elements)
    return {"src": float(report.sectors_per_request(array="src")),
            "dst": float(report.sectors_per_request(array="dst"))}


def counted_sectors_table(dtype="float32", offset=0, strides=STRIDES) -> pd.DataFrame:
    """For each stride: the microscope's sectors per request beside the model's."""
    name = dtype_name(dtype)
    offset = check_offset(offset)
    rows = []
    for s in strides:
        counted = counted_sectors_per_request(s, offset, name)
        rows.append({"stride": s, "counted_src": counted["src"], "counted_dst": counted["dst"],
                     "model": sectors_per_request(s, offset, name)})
    return pd.DataFrame(rows)


def trace_layout(layout="array of structs"):
    """Microscope report of one of the four layout kernels on a small input."""
    layout = check_layout(layout)
    if layout in LAYOUTS[:2]:
        particles = make_particles(TRACE_PARTICLES)
        blocks = math.ceil(TRACE_PARTICLES / WARP_SIZE)
        if layout == "array of structs":
            return _trace(drift_aos, blocks, WARP_SIZE, particles.copy(), DRIFT_DT)
        soa = to_soa(particles)
        return _trace(drift_soa, blocks, WARP_SIZE, *(soa[f] for f in DRIFT_FIELDS), DRIFT_DT)
    rows, cols = TRACE_MATRIX
    a = pattern(rows * cols).reshape(rows, cols)
    out = np.full_like(a, np.nan)
    grid, block = matrix_launch(layout, rows, cols)
    return _trace(copy_rows if layout == "row traversal" else copy_columns, grid, block, a, out)


def layout_model(layout="array of structs") -> int:
    """Sectors per request of every access of the layout's kernel, by the sector model."""
    layout = check_layout(layout)
    if layout == "array of structs":
        return sectors_per_request(len(FIELDS), 0, "float32")  # a field of the next particle is 8 floats on
    if layout == "column traversal":
        return sectors_per_request(TRACE_MATRIX[1], 0, "float32")  # the next row is a whole row on
    return sectors_per_request(1, 0, "float32")


def layout_counts(layout="array of structs") -> pd.DataFrame:
    """The microscope's memory table for the layout's kernel (one row per line, op and array)."""
    table = trace_layout(layout).memory()
    return table.assign(model=layout_model(layout))


# --- GPU measurements (never run in simulator mode) ------------------------------------------------


def _cupy():
    import cupy

    return cupy


def _free_pool() -> None:
    cupy = _cupy()
    cupy.get_default_memory_pool().free_all_blocks()


def _device_pattern(span: int, name: str):
    """A device array of `span` elements holding the pattern, made on the device with no temporary as large
    as the array (a 4096-element block broadcast over rows of a padded buffer)."""
    cupy = _cupy()
    period = 4096
    block = cupy.asarray(pattern(period, name))
    padded = cupy.empty(-(-span // period) * period, dtype=DTYPES[name])
    padded.reshape(-1, period)[...] = block
    return padded[:span]


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
                 min_total_ms: float = 500.0) -> Measurement:
    """Time the strided copy with the harness (GPU). Effective GB/s = elements × size × 2 ÷ time."""
    stride, offset, name = check_copy(stride, offset, dtype)
    label = f"{name} copy, stride {stride}, offset {offset}"
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
        return _measure_copy_on_device(n, stride, offset, name, label, copy_ceiling_gbps, min_total_ms)
    finally:
        _free_pool()  # the arrays are gone now: hand their memory back for the next size


def _measure_copy_on_device(n, stride, offset, name, label, copy_ceiling_gbps, min_total_ms) -> Measurement:
    cupy = _cupy()
    span = span_elements(n, stride, offset)
    src = _device_pattern(span, name)
    dst = cupy.empty_like(src)
    dst.fill(np.nan)  # poisoned: an element the kernel misses stays NaN
    d_src, d_dst = cuda.as_cuda_array(src), cuda.as_cuda_array(dst)
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


def _row(m: Measurement, ceiling: float, datasheet, **keys) -> dict:
    return {**keys, "median_ms": m.median_ms, "iqr_ms": m.iqr_ms, "n_samples": m.n_samples, "gbps": m.gbps,
            "copy_ceiling_gbps": ceiling, "datasheet_gbps": datasheet if datasheet else np.nan}


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


# --- where chart data comes from: measured now, recorded, or none ----------------------------------

_MEASURED: dict[tuple, pd.DataFrame] = {}  # GPU mode: a widget that moves a highlight does not re-measure


def _bandwidth_data(sweep: str, name: str | None, progress=None):
    """(data or None, copy ceiling or None, datasheet or None, caption) for a chart."""
    if runtime.is_gpu():
        key = (sweep, name)
        if key not in _MEASURED:
            if sweep == "coalescing.stride":
                _MEASURED[key] = stride_sweep((name,), progress=progress)
            elif sweep == "coalescing.offset":
                _MEASURED[key] = offset_sweep((name,), progress=progress)
            else:
                _MEASURED[key] = layout_sweep(progress=progress)
        data = _MEASURED[key]
        caption = charts.source_caption("measured", f"{runtime.device().name}, by the course harness "
                                        f"(median of ≥ 10 samples; no L2 flush; ≥ {SWEEP_USEFUL_BYTES >> 20} "
                                        f"MiB per side, far beyond the L2)")
    else:
        rec = reference.load(sweep)
        if rec is None:
            return None, None, None, charts.source_caption(
                "none", "no GPU here and no recording of this sweep yet (run `make record` on a GPU); "
                "the dashed line is the sector model")
        data = rec.data if name is None else rec.data[rec.data.dtype == name]
        if not len(data):
            return None, None, None, charts.source_caption("none", f"the recording has no {name} rows")
        caption = charts.source_caption("recorded", rec.caption())
    ceiling = float(data.copy_ceiling_gbps.median())
    datasheet = data.datasheet_gbps.dropna() if "datasheet_gbps" in data else pd.Series(dtype=float)
    return data, ceiling, (float(datasheet.iloc[0]) if len(datasheet) else None), caption


def _ceiling_lines(fig: go.Figure, ceiling, datasheet) -> None:
    if ceiling:
        charts.hline(fig, ceiling, f"measured copy ceiling {ceiling:.0f} GB/s")
        if datasheet:
            charts.hline(fig, datasheet, f"datasheet {datasheet:.0f} GB/s", faint=True)
    else:
        charts.hline(fig, 1.0, "copy ceiling (1.0)")


# --- figures ---------------------------------------------------------------------------------------


def warp_figure(stride=1, offset=0, dtype="float32") -> go.Figure:
    """The lesson's picture: one warp's 32 lanes above the 32-byte sectors their elements lie in."""
    stride, offset, name = check_copy(stride, offset, dtype)
    size = itemsize(name)
    addresses = lane_addresses(stride, offset, name)
    touched = sectors_touched(stride, offset, name)
    first_sector, last_sector = 0, int(touched.max())
    every = np.arange(first_sector, last_sector + 1)
    idle = np.setdiff1d(every, touched)
    fetched = len(touched) * SECTOR_BYTES
    useful = WARP_SIZE * size
    # two lines: as one, the title was cut off at ~700 px
    title = (f"stride {stride}, offset {offset}, {name}: one warp touches {len(touched)} sectors<br>"
             f"{fetched} bytes fetched for {useful} useful ({100 * useful / fetched:.1f} %)")
    fig = charts.figure(title, "byte address from the start of the array (bytes)", "", charts.source_caption(
        "model", f"lane l copies element l·{stride} + {offset}; each 32-byte sector holding one is fetched "
        "whole"),
        height=380)
    centre = every * SECTOR_BYTES + SECTOR_BYTES / 2
    width = SECTOR_BYTES * 0.96
    fig.add_bar(x=list(touched * SECTOR_BYTES + SECTOR_BYTES / 2), y=[1.0] * len(touched), width=width,
                name=f"sector fetched ({len(touched)})",
                marker={"color": charts.PALETTE[5], "line": {"color": "#000"}},
                hovertemplate="sector at byte %{x}: fetched<extra></extra>")
    if len(idle):
        fig.add_bar(x=list(idle * SECTOR_BYTES + SECTOR_BYTES / 2), y=[1.0] * len(idle), width=width,
                    name="sector not fetched", marker={"color": "#ffffff", "line": {"color": "#999"},
                                                        "pattern": {"shape": "/", "fgcolor": "#bbb"}},
                    hovertemplate="sector at byte %{x}: not fetched<extra></extra>")
    fig.add_bar(x=list(addresses + size / 2), y=[1.0] * WARP_SIZE, width=size, name="bytes a lane asked for",
                marker={"color": charts.PALETTE[0], "pattern": {"shape": "x", "fgcolor": "#fff"}},
                hovertemplate="lane's element at byte %{x}<extra></extra>")
    # Lanes above, each joined to the element it copies.
    lanes = np.arange(WARP_SIZE)
    lane_x = np.linspace(centre.min(), centre.max(), WARP_SIZE) if last_sector else addresses + size / 2
    xs, ys = [], []
    for lx, ax in zip(lane_x, addresses + size / 2, strict=True):
        xs += [lx, ax, None]
        ys += [2.0, 1.05, None]
    fig.add_scatter(x=xs, y=ys, mode="lines", line={"color": "#777", "width": 1}, name="lane → element",
                    hoverinfo="skip")
    fig.add_scatter(x=list(lane_x), y=[2.05] * WARP_SIZE, mode="markers+text", name="lanes 0–31 of one warp",
                    marker={"symbol": "triangle-down", "size": 9, "color": charts.PALETTE[1]},
                    text=[str(lane) for lane in lanes],
                    textposition="top center", textfont={"size": 9},
                    customdata=addresses, hovertemplate="lane %{text}: byte %{customdata}<extra></extra>")
    span_bytes = (last_sector + 1) * SECTOR_BYTES
    if span_bytes <= 16 * LINE_BYTES:  # beyond that the line boundaries would hide the sectors
        for line_start in range(0, span_bytes + 1, LINE_BYTES):
            fig.add_vline(x=line_start, line_dash="dot", line_color="#444", line_width=1)
        fig.add_annotation(text="dotted lines: 128-byte cache lines (4 sectors)", showarrow=False,
                           xref="paper", yref="paper", x=1, y=1.02, xanchor="right",
                           font={"size": 11, "color": "#444"})
    fig.update_layout(barmode="overlay", bargap=0)
    fig.update_yaxes(visible=False, range=[0, 2.6])
    fig.update_xaxes(range=[-4, span_bytes + 4])
    return fig


def _bandwidth_title(ceiling) -> str:
    return "effective bandwidth (GB/s)" if ceiling else "effective bandwidth (fraction of the copy ceiling)"


def _log_strides(fig: go.Figure, strides) -> None:
    fig.update_xaxes(type="log", tickvals=list(strides), ticktext=[str(s) for s in strides])


def stride_figure(dtype="float32", stride=None, progress=None) -> go.Figure:
    """Effective GB/s vs stride: measured (GPU) or recorded, the sector model, the ceiling and datasheet."""
    name = dtype_name(dtype)
    chosen = check_stride(stride) if stride is not None else None
    data, ceiling, datasheet, caption = _bandwidth_data("coalescing.stride", name, progress)
    strides = list(STRIDES)
    scale = ceiling or 1.0
    y_title = _bandwidth_title(ceiling)
    fig = charts.figure(f"Strided {name} copy: effective bandwidth vs stride", "stride (elements, log scale)",
                        y_title, caption)
    model = [useful_fraction(s, 0, name) * scale for s in strides]
    charts.line(fig, strides, model, "sector model: useful ÷ fetched bytes × copy ceiling", 1)
    if data is not None:
        data = data.sort_values("stride")
        charts.line(fig, data.stride, data.gbps, "measured: effective GB/s (useful bytes)", 0, dash="solid")
    else:
        charts.no_data(fig, "No GPU timing to show here: the dashed line is the sector model")
    _ceiling_lines(fig, ceiling, datasheet)
    charts.hline(fig, scale / 32, "folklore: 1/32 of the bandwidth", faint=True)
    if chosen is not None:
        fig.add_scatter(x=[chosen], y=[useful_fraction(chosen, 0, name) * scale], mode="markers",
                        name=f"your stride ({chosen}): model", marker={"symbol": "star", "size": 16,
                                                                        "color": charts.PALETTE[3]})
    _log_strides(fig, strides)
    fig.update_yaxes(rangemode="tozero")
    return fig


def sectors_figure(dtype="float32", offset=0) -> go.Figure:
    """Sectors per warp request vs stride: counted by the microscope, beside the model and the ideal."""
    name = dtype_name(dtype)
    offset = check_offset(offset)
    table = counted_sectors_table(name, offset)
    fig = charts.figure(f"Sectors per warp request vs stride ({name}, offset {offset})",
                        "stride (elements, log scale)", "sectors per warp request (32 bytes each)",
                        charts.source_caption("counted", "the microscope ran the strided copy (two warps) "
                                              "for each stride; the dashed line is the sector model"))
    charts.line(fig, table.stride, table.counted_src, "counted: load of src", 0, dash="solid")
    charts.line(fig, table.stride, table.model, "sector model", 1)
    ideal = ideal_sectors_per_request(name)
    charts.hline(fig, ideal, f"ideal: 32 lanes × {itemsize(name)} bytes ÷ 32 = {ideal}", faint=True)
    charts.hline(fig, WARP_SIZE, "one sector per lane (32)", faint=True)
    _log_strides(fig, STRIDES)
    fig.update_yaxes(rangemode="tozero")
    return fig


def offset_figure(dtype="float32", offset=None, progress=None) -> go.Figure:
    """Effective GB/s vs misalignment (stride 1): measured or recorded, and the sector model."""
    name = dtype_name(dtype)
    chosen = check_offset(offset) if offset is not None else None
    data, ceiling, datasheet, caption = _bandwidth_data("coalescing.offset", name, progress)
    scale = ceiling or 1.0
    y_title = _bandwidth_title(ceiling)
    fig = charts.figure(f"Misaligned {name} copy: effective bandwidth vs offset", "offset (elements)",
                        y_title, caption)
    offsets = list(OFFSETS)
    charts.line(fig, offsets, [useful_fraction(1, o, name) * scale for o in offsets],
                "sector model (each warp on its own, no cache reuse)", 1, line_shape="hv")
    if data is not None:
        data = data.sort_values("offset")
        charts.line(fig, data.offset, data.gbps, "measured: effective GB/s", 0, dash="solid")
    else:
        charts.no_data(fig, "No GPU timing to show here: the dashed line is the sector model")
    _ceiling_lines(fig, ceiling, datasheet)
    if chosen is not None:
        fig.add_scatter(x=[chosen], y=[useful_fraction(1, chosen, name) * scale], mode="markers",
                        name=f"your offset ({chosen}): model", marker={"symbol": "star", "size": 16,
                                                                        "color": charts.PALETTE[3]})
    fig.update_yaxes(rangemode="tozero")
    return fig


def _access_label(row) -> str:
    return f"line {row.line}: {row.op} {row.array}"


def layout_figure(layout="array of structs") -> go.Figure:
    """Sectors per request of each memory access of a layout's kernel, counted by the microscope."""
    layout = check_layout(layout)
    table = layout_counts(layout)
    fig = charts.figure(f"{layout}: sectors per warp request of each access",
                        "access (source line, op, array)", "sectors per warp request", charts.source_caption(
                            "counted", f"the microscope ran the {layout} kernel on a small input; "
                            "dashed: the sector model"))
    labels = [_access_label(r) for r in table.itertuples()]
    fig.add_bar(x=labels, y=list(table.sectors_per_request), name="counted by the microscope",
                marker={"color": charts.PALETTE[0], "pattern": {"shape": ""}},
                customdata=list(table.source),
                hovertemplate="%{x}<br>%{customdata}<br>%{y} sectors<extra></extra>")
    fig.add_scatter(x=labels, y=[layout_model(layout)] * len(labels), mode="lines+markers",
                    name="sector model", line={"dash": "dash", "color": charts.PALETTE[1]},
                    marker={"symbol": "square"})
    charts.hline(fig, ideal_sectors_per_request("float32"), "ideal for float32: 4", faint=True)
    fig.update_yaxes(range=[0, WARP_SIZE + 2])
    return fig


def layout_model_fractions() -> pd.DataFrame:
    """Useful ÷ fetched bytes of each layout kernel, with no cache reuse and with perfect reuse.

    No reuse: every warp request fetches its own sectors from DRAM. Perfect reuse: a sector fetched
    for one access serves every later access to it (the other fields of the same particles; the other
    warps of a 32×8 block, which read the neighbouring columns of the same rows) — the L1/L2 can give
    anything between the two, which only a measurement can tell.
    """
    field_bytes = 4
    used = len(DRIFT_FIELDS) + 3  # 6 loads + 3 stores per particle
    aos_no_reuse = used * field_bytes / (used * layout_model("array of structs") * SECTOR_BYTES / WARP_SIZE)
    # Perfect reuse: each particle's 32-byte sector is read once and written back once.
    aos_reuse = used * field_bytes / (2 * len(FIELDS) * field_bytes)
    column = useful_fraction(TRACE_MATRIX[1], 0, "float32")
    return pd.DataFrame({
        "layout": list(LAYOUTS),
        "no_reuse": [aos_no_reuse, 1.0, 1.0, column],
        "full_reuse": [aos_reuse, 1.0, 1.0, 1.0],
    })


def layout_bandwidth_figure(progress=None) -> go.Figure:
    """Effective GB/s of the four layout kernels (measured, recorded or none) between the model's bounds."""
    data, ceiling, datasheet, caption = _bandwidth_data("coalescing.layout", None, progress)
    scale = ceiling or 1.0
    fig = charts.figure("Array of structs vs struct of arrays, row vs column traversal", "kernel",
                        _bandwidth_title(ceiling), caption)
    fig.update_xaxes(categoryorder="array", categoryarray=list(LAYOUTS))
    if data is not None:
        fig.add_bar(x=list(data.layout), y=list(data.gbps), name="measured: effective GB/s (useful bytes)",
                    marker={"color": charts.PALETTE[5], "line": {"color": "#000"}})
    else:
        charts.no_data(fig, "No GPU timing to show here: the markers are the model's bounds")
    bounds = layout_model_fractions()
    fig.add_scatter(x=list(bounds.layout), y=list(bounds.no_reuse * scale), mode="markers",
                    name="sector model, no cache reuse", marker={"symbol": "triangle-down", "size": 13,
                                                                 "color": charts.PALETTE[3]})
    fig.add_scatter(x=list(bounds.layout), y=list(bounds.full_reuse * scale), mode="markers",
                    name="sector model, perfect reuse", marker={"symbol": "triangle-up", "size": 13,
                                                                "color": charts.PALETTE[2]})
    _ceiling_lines(fig, ceiling, datasheet)
    fig.update_yaxes(rangemode="tozero")
    return fig


# --- widgets -----------------------------------------------------------------------------------------


def _controls(**which):
    import ipywidgets as w

    made = {
        "stride": lambda v: w.IntSlider(value=v, min=1, max=64, description="stride"),
        "offset": lambda v: w.IntSlider(value=v, min=0, max=32, description="offset"),
        "dtype": lambda v: w.Dropdown(options=list(DTYPES), value=v, description="dtype"),
        "layout": lambda v: w.Dropdown(options=list(LAYOUTS), value=v, description="layout"),
    }
    return {name: made[name](value) for name, value in which.items()}


def picture_widget(stride=8, offset=0, dtype="float32", threaded=True):
    from gpucourse.viz.widgets import LiveChart

    return LiveChart(_controls(stride=stride, offset=offset, dtype=dtype), warp_figure, threaded=threaded,
                     description="Stride, offset and element size → the sectors one warp touches.")


def stride_widget(dtype="float32", stride=8, threaded=True):
    from gpucourse.viz.widgets import LiveChart

    return LiveChart(_controls(dtype=dtype, stride=stride), stride_figure, threaded=threaded,
                     description="Effective bandwidth of the strided copy; the star marks your stride.")


def sectors_widget(dtype="float32", offset=0, threaded=True):
    from gpucourse.viz.widgets import LiveChart

    return LiveChart(_controls(dtype=dtype, offset=offset), sectors_figure, threaded=threaded,
                     description="Sectors per warp request, counted by the microscope for every stride.")


def offset_widget(dtype="float32", offset=1, threaded=True):
    from gpucourse.viz.widgets import LiveChart

    return LiveChart(_controls(dtype=dtype, offset=offset), offset_figure, threaded=threaded,
                     description="Effective bandwidth of a copy that starts `offset` elements late.")


def layout_widget(layout="array of structs", threaded=True):
    from gpucourse.viz.widgets import LiveChart

    return LiveChart(_controls(layout=layout), layout_figure, threaded=threaded,
                     description="Each memory access of the chosen kernel, as the microscope counts it.")
