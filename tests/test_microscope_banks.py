"""Microscope exactness: shared-memory bank conflicts (32 banks × 4 bytes, broadcast of one word)."""

import numpy as np
import pytest
from numba import cuda, float32, float64

from gpucourse import microscope
from gpucourse.microscope import analysis


@cuda.jit
def tile_read_by_column(out):
    tile = cuda.shared.array((32, 32), float32)
    tx = cuda.threadIdx.x
    for r in range(32):
        tile[r, tx] = r * 32 + tx  # a row per step: conflict-free
    cuda.syncthreads()
    out[tx] = tile[tx, 3]  # a column: every lane in bank 3


@cuda.jit
def padded_tile_read_by_column(out):
    tile = cuda.shared.array((32, 33), float32)
    tx = cuda.threadIdx.x
    for r in range(32):
        tile[r, tx] = r * 32 + tx
    cuda.syncthreads()
    out[tx] = tile[tx, 3]


@cuda.jit
def broadcast(out):
    word = cuda.shared.array(1, float32)
    if cuda.threadIdx.x == 0:
        word[0] = 7.0
    cuda.syncthreads()
    out[cuda.threadIdx.x] = word[0]


@cuda.jit
def doubles(out, stride):
    buf = cuda.shared.array(64, float64)
    tx = cuda.threadIdx.x
    buf[tx * stride] = tx
    cuda.syncthreads()
    out[tx] = buf[tx * stride]


def test_column_of_a_32x32_float_tile_is_a_32_way_conflict():
    out = np.zeros(32, dtype=np.float32)
    report = microscope.trace(tile_read_by_column, 1, 32, out)
    assert np.array_equal(out, np.arange(32) * 32 + 3)
    assert report.max_bank_ways(line="tile[tx, 3]") == 32
    assert report.max_bank_ways(line="tile[r, tx] =") == 1
    table = report.banks()
    assert list(table.max_ways) == [1, 32]  # rows in line order: the stores, then the column read
    assert list(table.mean_ways) == [1.0, 32.0]
    assert list(table.op) == ["store", "load"]
    assert set(table.array) == {"tile"}


def test_padding_to_33_columns_removes_the_conflict():
    out = np.zeros(32, dtype=np.float32)
    report = microscope.trace(padded_tile_read_by_column, 1, 32, out)
    assert np.array_equal(out, np.arange(32) * 32 + 3)
    assert report.max_bank_ways() == 1


def test_all_lanes_reading_one_word_is_a_broadcast():
    out = np.zeros(32, dtype=np.float32)
    report = microscope.trace(broadcast, 1, 32, out)
    assert (out == 7).all()
    assert report.max_bank_ways(line="word[0]", op="load") == 1


@pytest.mark.parametrize(("stride", "ways"), [(1, 1), (2, 2)])
def test_eight_byte_elements_span_two_banks_and_go_by_half_warps(stride, ways):
    out = np.zeros(32, dtype=np.float64)
    report = microscope.trace(doubles, 1, 32, out, stride)
    assert np.array_equal(out, np.arange(32))
    assert report.max_bank_ways(op="load") == ways


def test_bank_rule_on_raw_addresses():
    lanes = list(range(32))
    assert analysis.bank_ways(lanes, [4 * lane for lane in lanes], 4) == 1
    assert analysis.bank_ways(lanes, [8 * lane for lane in lanes], 4) == 2  # stride 2 words
    assert analysis.bank_ways(lanes, [128 * lane for lane in lanes], 4) == 32
    assert analysis.bank_ways(lanes, [0] * 32, 4) == 1  # broadcast
    assert analysis.bank_ways(lanes, [2 * lane for lane in lanes], 2) == 1  # float16: two lanes per word
    assert analysis.bank_ways(lanes, [8 * lane for lane in lanes], 8) == 1  # float64, one half-warp per phase
    assert analysis.bank_ways(lanes, [16 * lane for lane in lanes], 16) == 1  # 16-byte vectors, quarter warps
    assert analysis.bank_ways([0, 1], [0, 128], 4) == 2
