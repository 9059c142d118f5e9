"""Microscope exactness: global-memory sectors per warp request, against the hardware's rule.

A warp request is served in 32-byte sectors (sector = address // 32, allocations 256-byte aligned):
32 consecutive float32 = 4 sectors, stride s float32 = min(4s, 32), one element off = 5.
"""

import numpy as np
import pytest
from numba import cuda, float32, uint8

from gpucourse import microscope


@cuda.jit
def strided_copy(out, a, stride):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i * stride]


@cuda.jit
def shifted_copy(out, a, shift):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i + shift]


@cuda.jit
def sum_rows(out, a):
    i = cuda.grid(1)  # one thread per row: the lanes of a warp walk down a column
    s = 0.0
    for j in range(a.shape[1]):
        s += a[i, j]
    out[i] = s


@cuda.jit
def sum_columns(out, a):
    j = cuda.grid(1)  # one thread per column: the lanes of a warp read one row together
    s = 0.0
    for i in range(a.shape[0]):
        s += a[i, j]
    out[j] = s


@cuda.jit
def row_view_copy(out, a):
    i = cuda.grid(1)
    row = a[1]  # a view into the second row
    out[i] = row[i]


@pytest.mark.parametrize(("stride", "sectors"), [(1, 4), (2, 8), (4, 16), (8, 32), (32, 32)])
def test_float32_stride_gives_hardware_sectors_per_request(stride, sectors):
    a = np.arange(64 * stride, dtype=np.float32)
    out = np.zeros(64, dtype=np.float32)
    report = microscope.trace(strided_copy, 2, 32, out, a, stride)
    assert np.array_equal(out, a[::stride])  # results are written back
    assert report.sectors_per_request(array="a") == sectors
    assert report.sectors_per_request(array="out") == 4
    row = report.memory().set_index("array").loc["a"]
    assert row.requests == 2
    assert row.bytes_requested == 2 * 128
    assert row.bytes_fetched == 2 * sectors * 32
    assert row.efficiency == pytest.approx(4 / sectors)


def test_copy_misaligned_by_one_element_touches_five_sectors():
    a = np.arange(4 * 32 + 1, dtype=np.float32)
    out = np.zeros(4 * 32, dtype=np.float32)
    report = microscope.trace(shifted_copy, 4, 32, out, a, 1)
    requests = report.requests()
    loads = requests[requests.array == "a"]
    assert list(loads.sectors) == [5, 5, 5, 5]
    assert report.efficiency(array="a") == pytest.approx(128 / 160)


def test_misaligned_view_argument_counts_from_its_allocation():
    base = np.arange(4 * 32 + 1, dtype=np.float32)
    out = np.zeros(4 * 32, dtype=np.float32)
    report = microscope.trace(strided_copy, 4, 32, out, base[1:], 1)  # a view 4 bytes into its buffer
    assert np.array_equal(out, base[1:])
    assert report.sectors_per_request(array="a") == 5


@pytest.mark.parametrize(("dtype", "sectors"), [(np.float64, 8), (np.float32, 4), (np.float16, 2), (np.int8, 1)])
def test_contiguous_access_sectors_scale_with_element_size(dtype, sectors):
    a = np.arange(64).astype(dtype)
    out = np.zeros(64, dtype=dtype)
    report = microscope.trace(strided_copy, 2, 32, out, a, 1)
    assert report.sectors_per_request(array="a") == sectors
    assert report.efficiency(array="a") == 1.0


def test_row_traversal_strides_and_column_traversal_coalesces():
    a = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    out = np.zeros(64, dtype=np.float32)
    rows = microscope.trace(sum_rows, 2, 32, out, a)
    np.testing.assert_allclose(out, a.sum(axis=1))
    assert rows.sectors_per_request(line="s += a[i, j]") == 32
    cols = microscope.trace(sum_columns, 2, 32, out, a)
    np.testing.assert_allclose(out, a.sum(axis=0))
    assert cols.sectors_per_request(line="s += a[i, j]") == 4
    # The same kernel on a Fortran-ordered array (or a transposed view) flips the verdict.
    assert microscope.trace(sum_columns, 2, 32, out, np.asfortranarray(a)).sectors_per_request(array="a") == 32
    assert microscope.trace(sum_rows, 2, 32, out, a.T).sectors_per_request(array="a") == 4


def test_view_made_inside_the_kernel_keeps_its_offset():
    a = np.arange(3 * 36, dtype=np.float32).reshape(3, 36)  # row 1 starts at byte 144, mid-sector: 5 sectors
    out = np.zeros(32, dtype=np.float32)
    report = microscope.trace(row_view_copy, 1, 32, out, a)
    assert np.array_equal(out, a[1, :32])
    assert report.sectors_per_request(array="a") == 5
    assert report.requests().iloc[0].source == "out[i] = row[i]"


def test_memory_table_columns_and_per_line_grouping():
    a = np.arange(128, dtype=np.float32)
    out = np.zeros(64, dtype=np.float32)
    table = microscope.trace(strided_copy, 2, 32, out, a, 2).memory()
    for column in ["line", "source", "op", "array", "requests", "sectors_per_request", "efficiency",
                   "bytes_requested", "bytes_fetched"]:  # fmt: skip
        assert column in table.columns
    assert sorted(zip(table.array, table.op, strict=True)) == [("a", "load"), ("out", "store")]
    assert set(table.source) == {"out[i] = a[i * stride]"}
    assert (table.line == strided_copy.py_func.__code__.co_firstlineno + 4).all()


def test_partial_warp_counts_only_active_lanes():
    a = np.arange(48, dtype=np.float32)
    out = np.zeros(48, dtype=np.float32)
    report = microscope.trace(strided_copy, 1, 64, out, a, 1)  # lanes 48..63 skip the copy
    requests = report.requests()
    loads = requests[requests.array == "a"]
    assert list(loads.lanes) == [32, 16]
    assert list(loads.sectors) == [4, 2]


# --- allocation alignment: sizes that are not a multiple of a sector --------------------------------


@cuda.jit
def copy_after_a_small_buffer(small, out, a):
    i = cuda.grid(1)
    if i == 0:
        small[0] = small[4]  # touch it, so the hook sees its base too
    out[i] = a[i]


class AddressLog(microscope.MemorySystem):
    """Records the byte address of every access (the memory-system hook sees them all)."""

    def __init__(self):
        self.first: dict = {}  # (space, array name or shape) -> lowest address seen

    def _log(self, space, array, address):
        key = (space, array.dtype.str, array.shape)
        self.first[key] = min(address, self.first.get(key, address))

    def load(self, thread, space, array, index, address):
        self._log(space, array, address)
        return super().load(thread, space, array, index, address)

    def store(self, thread, space, array, index, address, value):
        self._log(space, array, address)
        super().store(thread, space, array, index, address, value)


@pytest.mark.parametrize("small_floats", [5, 7, 9, 33, 100])
def test_allocations_after_a_buffer_of_odd_size_start_256_byte_aligned(small_floats):
    # cudaMalloc returns 256-byte-aligned bases (CUDA C++ Programming Guide, "Device Memory Accesses":
    # "any address of a variable residing in global memory or returned by one of the memory allocation
    # routines from the driver or runtime API is always aligned to at least 256 bytes").
    small = np.zeros(small_floats, dtype=np.float32)  # 20, 28, 36, 132, 400 bytes: not multiples of 32
    out, a = np.zeros(32, dtype=np.float32), np.arange(64, dtype=np.float32)  # three different shapes
    log = AddressLog()
    report = microscope.trace(copy_after_a_small_buffer, 1, 32, small, out, a, memory=log)
    assert np.array_equal(out, a[:32])
    # Worked by hand: small at 0; out at the next multiple of 256 after 4·small_floats bytes
    # (20 → 256, 400 → 512); a 256 bytes later (out is 128 bytes, rounded up to 256).
    out_base = {5: 256, 7: 256, 9: 256, 33: 256, 100: 512}[small_floats]
    lowest = {key[2][0]: addr for key, addr in log.first.items()}
    assert lowest == {small_floats: 0, 32: out_base, 64: out_base + 256}
    assert report.sectors_per_request(array="a") == report.sectors_per_request(array="out") == 4


@cuda.jit
def shared_after_odd_bytes(out):
    pad = cuda.shared.array(5, uint8)  # 5 bytes: the next array starts at the next 16-byte boundary
    words = cuda.shared.array(32, float32)
    tx = cuda.threadIdx.x
    if tx < 5:
        pad[tx] = tx
    words[tx] = tx
    cuda.syncthreads()
    out[tx] = words[tx] + pad[0]


def test_static_shared_arrays_start_16_byte_aligned():
    out = np.zeros(32, dtype=np.float32)
    log = AddressLog()
    microscope.trace(shared_after_odd_bytes, 1, 32, out, memory=log)
    assert np.array_equal(out, np.arange(32, dtype=np.float32))
    shared = {key[1:]: addr for key, addr in log.first.items() if key[0] == "shared"}
    assert shared == {("|u1", (5,)): 0, ("<f4", (32,)): 16}  # 5 bytes rounded up to 16


def test_an_element_across_a_sector_boundary_touches_both_sectors():
    """Worked by hand: sector k holds bytes 32k .. 32k + 31 (a misaligned view can put an element across)."""
    from gpucourse.microscope import analysis

    assert analysis.sectors([28], 4) == [0]  # bytes 28..31
    assert analysis.sectors([30], 4) == [0, 1]  # bytes 30..33
    assert analysis.sectors([60], 8) == [1, 2]  # bytes 60..67
    assert analysis.sectors([0, 4, 30, 96], 4) == [0, 1, 3]
