"""Warp intrinsics in the simulator: hardware semantics with full and partial masks, and misuse."""

import numpy as np
import pytest
from numba import cuda

from gpucourse import microscope
from gpucourse.measure import runtime
from gpucourse.microscope import warp

FULL = 0xFFFFFFFF


@cuda.jit
def shuffle_down_sum(out, a):
    i = cuda.grid(1)
    v = a[i]
    offset = 16
    while offset > 0:
        v += cuda.shfl_down_sync(0xFFFFFFFF, v, offset)
        offset //= 2
    if cuda.laneid == 0:
        cuda.atomic.add(out, 0, v)


@cuda.jit
def butterfly_sum(out, a):
    i = cuda.grid(1)
    v = a[i]
    for m in (16, 8, 4, 2, 1):
        v += cuda.shfl_xor_sync(0xFFFFFFFF, v, m)
    out[i] = v  # every lane holds its warp's total


@cuda.jit
def full_mask_intrinsics(out, vals):
    i = cuda.threadIdx.x
    v = vals[i]
    out[i, 0] = cuda.shfl_sync(0xFFFFFFFF, v, 3)
    out[i, 1] = cuda.shfl_up_sync(0xFFFFFFFF, v, 1)
    out[i, 2] = cuda.shfl_down_sync(0xFFFFFFFF, v, 1)
    out[i, 3] = cuda.ballot_sync(0xFFFFFFFF, v % 2 == 1)
    out[i, 4] = cuda.all_sync(0xFFFFFFFF, v >= 0)
    out[i, 5] = cuda.any_sync(0xFFFFFFFF, v == 31)
    out[i, 6] = cuda.eq_sync(0xFFFFFFFF, v < 100)
    out[i, 7] = cuda.match_any_sync(0xFFFFFFFF, v // 8)
    mask, pred = cuda.match_all_sync(0xFFFFFFFF, v)
    out[i, 8] = mask
    out[i, 9] = pred
    out[i, 10] = cuda.activemask()
    out[i, 11] = cuda.lanemask_lt()
    cuda.syncwarp()


@cuda.jit
def partial_mask_intrinsics(out, vals):
    i = cuda.threadIdx.x
    v = vals[i]
    if i < 10:
        m = cuda.activemask()
        out[i, 0] = m
        out[i, 1] = cuda.shfl_xor_sync(m, v, 1)
        out[i, 2] = cuda.ballot_sync(m, v > 5)
        out[i, 3] = cuda.shfl_up_sync(m, v, 2)
        mask, pred = cuda.match_all_sync(m, 7)
        out[i, 4] = mask
        out[i, 5] = cuda.any_sync(m, v == 31)  # lane 31 is not in the mask
        cuda.syncwarp(m)
    else:
        out[i, 0] = cuda.activemask()
        out[i, 2] = cuda.ballot_sync(0xFFFFFC00, v % 2 == 0)


@cuda.jit
def caller_not_in_mask(out):
    i = cuda.threadIdx.x
    out[i] = cuda.shfl_sync(0x0000FFFF, i, 0)


@cuda.jit
def reads_outside_mask(out):
    i = cuda.threadIdx.x
    if i < 16:
        out[i] = cuda.shfl_down_sync(0x0000FFFF, i, 8)


@cuda.jit
def lane_exits_first(out):
    i = cuda.threadIdx.x
    if i == 5:
        return
    out[i] = cuda.shfl_sync(0xFFFFFFFF, i, 0)


@cuda.jit
def full_mask_in_partial_warp(out):
    i = cuda.threadIdx.x
    out[i] = cuda.shfl_sync(0xFFFFFFFF, i, 0)


def test_shuffle_reduction_equals_numpy_sum():
    a = np.random.default_rng(1).integers(-1000, 1000, size=256).astype(np.int64)
    out = np.zeros(1, dtype=np.int64)
    microscope.trace(shuffle_down_sum, 4, 64, out, a)
    assert out[0] == a.sum()
    x = np.random.default_rng(2).random(128)
    totals = np.zeros(128)
    microscope.trace(butterfly_sum, 2, 64, totals, x)
    np.testing.assert_allclose(totals, np.repeat(x.reshape(4, 32).sum(axis=1), 32), rtol=1e-12)


def test_full_mask_semantics():
    vals = np.arange(32, dtype=np.int64)
    out = np.zeros((32, 12), dtype=np.int64)
    microscope.trace(full_mask_intrinsics, 1, 32, out, vals)
    lanes = np.arange(32)
    assert (out[:, 0] == 3).all()
    assert list(out[:, 1]) == [0] + list(range(31))  # lane 0 keeps its own value
    assert list(out[:, 2]) == list(range(1, 32)) + [31]  # lane 31 keeps its own value
    assert (out[:, 3] == 0xAAAAAAAA).all()
    assert (out[:, 4] == 1).all() and (out[:, 5] == 1).all() and (out[:, 6] == 1).all()
    assert list(out[:, 7]) == [0xFF << (8 * (lane // 8)) for lane in lanes]
    assert (out[:, 8] == 0).all() and (out[:, 9] == 0).all()  # values differ: (0, False)
    assert (out[:, 10] == FULL).all()
    assert list(out[:, 11]) == [(1 << lane) - 1 for lane in lanes]


def test_partial_mask_semantics_and_activemask_of_a_branch():
    vals = np.arange(32, dtype=np.int64)
    out = np.zeros((32, 6), dtype=np.int64)
    microscope.trace(partial_mask_intrinsics, 1, 32, out, vals)
    assert (out[:10, 0] == 0x3FF).all()
    assert (out[10:, 0] == 0xFFFFFC00).all()
    assert list(out[:10, 1]) == [1, 0, 3, 2, 5, 4, 7, 6, 9, 8]
    assert (out[:10, 2] == 0x3C0).all()  # lanes 6..9 of the mask 0x3ff
    assert (out[10:, 2] == 0x55555400).all()  # even lanes among 10..31
    assert list(out[:10, 3]) == [0, 1, 0, 1, 2, 3, 4, 5, 6, 7]
    assert (out[:10, 4] == 0x3FF).all()
    assert (out[:10, 5] == 0).all()


@pytest.mark.parametrize(
    ("kernel", "block", "message"),
    [
        (caller_not_in_mask, 32, "does not include lane 16"),
        (reads_outside_mask, 32, "reads lane 16, which is not in mask"),
        (lane_exits_first, 32, "lane 5 of warp 0"),
        (full_mask_in_partial_warp, 48, "has only 16 lanes"),
    ],
)
def test_misused_intrinsics_raise_one_line_errors(kernel, block, message):
    with pytest.raises(microscope.WarpSyncError, match=message) as info:
        microscope.trace(kernel, 1, block, np.zeros(64))
    assert "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)


def test_resolve_rules():
    assert warp.shuffle_source("shfl_sync", 5, 35) == 3  # the source lane is taken mod 32
    assert warp.shuffle_source("shfl_down_sync", 30, 4) == 30
    assert warp.shuffle_source("shfl_up_sync", 1, 2) == 1
    assert warp.shuffle_source("shfl_xor_sync", 6, 1) == 7
    operands = {lane: (float(lane), None) for lane in range(4)}
    assert warp.resolve("match_any_sync", 0xF, {0: (1.0, None), 1: (1.0, None), 2: (-0.0, None), 3: (0.0, None)}) == {
        0: 0b0011,
        1: 0b0011,
        2: 0b0100,
        3: 0b1000,
    }  # bits are compared: -0.0 is not 0.0
    assert warp.resolve("eq_sync", 0xF, operands) == dict.fromkeys(range(4), False)


@pytest.mark.skipif(runtime.MODE != "sim", reason="a plain launch runs the simulator only in simulator mode")
def test_install_warp_intrinsics_makes_plain_simulator_launches_work():
    microscope.install_warp_intrinsics()
    microscope.install_warp_intrinsics()  # idempotent
    a = np.arange(128, dtype=np.int64)
    out = np.zeros(1, dtype=np.int64)
    shuffle_down_sum[2, 64](out, a)
    assert out[0] == a.sum()
    with pytest.raises(microscope.WarpSyncError, match="exited"):
        lane_exits_first[1, 32](np.zeros(32))


@cuda.jit
def activemask_per_side(out):
    i = cuda.threadIdx.x
    if i % 2 == 0:
        out[i] = cuda.activemask()
    else:
        out[i] = cuda.activemask()


@cuda.jit
def match_in_ten_threads(out, vals):
    i = cuda.threadIdx.x
    out[i, 0] = cuda.match_any_sync(0xFFFFFFFF, vals[i])
    mask, pred = cuda.match_all_sync(0xFFFFFFFF, vals[i] // 100)
    out[i, 1] = mask
    out[i, 2] = pred


EVEN, ODD = 0x55555555, 0xAAAAAAAA


def _check_match_in_ten_threads(run):
    vals = np.array([1, 1, 2, 2, 2, 3, 1, 3, 4, 5], dtype=np.int64)
    out = np.zeros((10, 3), dtype=np.int64)
    run(out, vals)
    expected_any = [sum(1 << j for j in range(10) if vals[j] == vals[i]) for i in range(10)]
    assert list(out[:, 0]) == expected_any
    assert (out[:, 1] == 0x3FF).all() and (out[:, 2] == 1).all()  # lanes 10..31 do not exist: exited


def test_activemask_of_each_side_of_a_branch_in_a_trace():
    out = np.zeros(64, dtype=np.int64)
    microscope.trace(activemask_per_side, 1, 64, out)
    assert (out[0::2] == EVEN).all() and (out[1::2] == ODD).all()


def test_match_with_the_full_mask_in_a_block_of_ten_threads_is_legal_in_a_trace():
    _check_match_in_ten_threads(lambda out, vals: microscope.trace(match_in_ten_threads, 1, 10, out, vals))


@pytest.mark.skipif(runtime.MODE != "sim", reason="a plain launch runs the simulator only in simulator mode")
def test_plain_launch_agrees_with_trace_on_activemask_and_match():
    microscope.install_warp_intrinsics()
    out = np.zeros(64, dtype=np.int64)
    activemask_per_side[1, 64](out)
    assert (out[0::2] == EVEN).all() and (out[1::2] == ODD).all(), [hex(v) for v in out[:4]]
    _check_match_in_ten_threads(lambda out, vals: match_in_ten_threads[1, 10](out, vals))
    # shuffles still refuse a mask naming lanes that do not exist
    with pytest.raises(microscope.WarpSyncError, match="has only 16 lanes"):
        full_mask_in_partial_warp[1, 48](np.zeros(48))
