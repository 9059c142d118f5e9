"""Lesson 04a on a real GPU: every rung right on ragged sizes, and the ladder's ratios measured in one run.

Run with ``pytest -m gpu tests/test_gpu_reductions.py -s`` to see the reported numbers.
"""

import numpy as np
import pytest
from gpu_expectations import expect

from gpucourse.lessons import reductions
from gpucourse.lessons.reductions import kernels
from gpucourse.measure import runtime

pytestmark = pytest.mark.gpu

SUM_N = 1 << 26  # 256 MiB read: far beyond every L2


@pytest.mark.parametrize("variant", kernels.REDUCTIONS)
@pytest.mark.parametrize("n", [1, 1000, 1_000_003])
def test_every_rung_sums_ragged_sizes_on_the_gpu(variant, n):
    x = reductions.random_input(n, seed=n % 97)
    expected = float(runtime.xp.sum(x, dtype=np.float64))
    assert reductions.reduce_sum(x, variant, 256) == pytest.approx(expected, rel=1e-4)


@pytest.mark.parametrize("variant", kernels.SCANS)
def test_block_scans_on_the_gpu(variant):
    x = reductions.random_input(100_003, seed=3)
    out = runtime.xp.asnumpy(reductions.block_scan(x, variant, 256))
    np.testing.assert_allclose(out, reductions.reference_block_scan(runtime.xp.asnumpy(x), 256), rtol=1e-4, atol=1e-3)


def test_ballot_counts_like_the_per_lane_atomics():
    x = reductions.random_input(1_000_003, seed=7)
    expected = int((runtime.xp.asnumpy(x) > 0.5).sum())
    assert reductions.count_above(x, 0.5, "ballot") == reductions.count_above(x, 0.5, "per lane") == expected


def test_sequential_beats_interleaved_and_the_best_rung_reaches_the_library(record_property):
    data = reductions.measure_reductions(SUM_N, 256)
    gbps = data.set_index("variant").gbps
    own = data[data.kind == "kernel"].set_index("variant").gbps
    best, library = own.idxmax(), data[data.kind == "library"].gbps.max()
    summary = (f"{SUM_N:,} float32 on {runtime.device().name}: " + ", ".join(f"{v} {g:.0f}" for v, g in gbps.items())
               + f" GB/s; sequential / interleaved = {gbps['sequential'] / gbps['interleaved']:.2f}×, "
               f"best rung ({best}) / cupy.sum = {own.max() / gbps['cupy.sum']:.2f}, "
               f"best rung / best library = {own.max() / library:.2f}"
               + ("; " + "; ".join(data.attrs["skipped"]) if data.attrs.get("skipped") else ""))
    print(summary)
    record_property("reduction_ladder", summary)
    assert gbps["sequential"] >= expect("reductions.sequential_over_interleaved") * gbps["interleaved"], summary
    # the grid-stride rung (Little's law: four loads in flight per thread) reaches the library's rate
    assert own.max() >= expect("reductions.best_rung_over_cupy_sum") * gbps["cupy.sum"], summary
    assert best == "grid stride", summary
    assert own.max() <= expect("reductions.best_rung_over_library.max") * library, summary
