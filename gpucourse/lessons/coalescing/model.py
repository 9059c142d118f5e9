"""Lesson 03 "Memory coalescing":
the hardware model, counted quantities, and the checks and helpers the runners share."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

# Importing gpucourse.coalescing runs gpucourse/__init__ first, which chooses the mode before numba
# loads: numba.cuda is the GPU or the simulator.
from gpucourse import validate
from gpucourse.errors import CourseError, InvalidConfig, WrongResult
from gpucourse.hardware import WARP_SIZE
from gpucourse.lessons.coalescing.kernels import copy_columns, copy_rows, drift_aos, drift_soa, strided_copy
from gpucourse.measure.harness import Measurement

SECTOR_BYTES = 32  # since compute capability 6.0 global memory is served in 32-byte sectors
DTYPES = {"float16": np.float16, "float32": np.float32, "float64": np.float64}
STRIDES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
MAX_STRIDE = 1024
MAX_OFFSET = 1024
TRACE_ELEMENTS = 64  # two warps: enough to show that every full warp costs the same
SIM_MAX_ELEMENTS = 1 << 15  # the simulator runs ~7,000 threads a second: keep a run to seconds

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


def copy_arrays(n_elements, stride=1, offset=0, dtype="float32") -> tuple[np.ndarray, np.ndarray]:
    """Host source (a pattern) and destination (poisoned with NaN) for a strided copy."""
    n = validate.integer("n_elements", n_elements, minimum=1)
    stride, offset, name = check_copy(stride, offset, dtype)
    span = span_elements(n, stride, offset)
    src = pattern(span, name)
    dst = np.full(span, np.nan, dtype=DTYPES[name])
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


def matrix_launch(traversal: str, rows: int, cols: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """(grid, block) of the matrix copy: x covers the columns (row traversal) or the rows (column)."""
    bx, by = MATRIX_BLOCK
    if traversal == "row traversal":
        return (math.ceil(cols / bx), math.ceil(rows / by)), MATRIX_BLOCK
    return (math.ceil(rows / bx), math.ceil(cols / by)), MATRIX_BLOCK


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


def _row(m: Measurement, ceiling: float, datasheet, **keys) -> dict:
    return {**keys, "median_ms": m.median_ms, "iqr_ms": m.iqr_ms, "n_samples": m.n_samples, "gbps": m.gbps,
            "copy_ceiling_gbps": ceiling, "datasheet_gbps": datasheet if datasheet else np.nan}


def _bandwidth_title(ceiling) -> str:
    return "effective bandwidth (GB/s)" if ceiling else "effective bandwidth (fraction of the copy ceiling)"


def _access_label(row) -> str:
    return f"line {row.line}: {row.op} {row.array}"


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
