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


@pytest.fixture(scope="module")
def ladder():
    """The reduction ladder and the libraries at 2^26, measured once for the tests below (one verdict each)."""
    data = reductions.measure_reductions(SUM_N, 256)
    gbps = data.set_index("variant").gbps
    own = data[data.kind == "kernel"].set_index("variant").gbps
    summary = (f"{SUM_N:,} float32 on {runtime.device().name}: " + ", ".join(f"{v} {g:.0f}" for v, g in gbps.items())
               + f" GB/s; best rung {own.idxmax()}"
               + ("; " + "; ".join(data.attrs["skipped"]) if data.attrs.get("skipped") else ""))
    print(summary)
    return {"gbps": gbps, "own": own, "library": data[data.kind == "library"].gbps.max(), "summary": summary}


def _record(record_property, ratio: float, threshold: float, summary: str) -> str:
    record_property("reduction_ladder", summary)
    record_property("ratio", round(float(ratio), 4))
    record_property("threshold", threshold)
    return f"{summary}; ratio {ratio:.3f}, threshold {threshold}"


def test_sequential_beats_interleaved(ladder, record_property):
    ratio = ladder["gbps"]["sequential"] / ladder["gbps"]["interleaved"]
    bound = expect("reductions.sequential_over_interleaved")
    message = _record(record_property, ratio, bound, ladder["summary"])
    assert ratio >= bound, message


def test_the_grid_stride_rung_reaches_cupy_sum(ladder, record_property):
    # the grid-stride rung (Little's law: four loads in flight per thread) reaches the library's rate
    own = ladder["own"]
    ratio = own.max() / ladder["gbps"]["cupy.sum"]
    bound = expect("reductions.best_rung_over_cupy_sum")
    message = _record(record_property, ratio, bound, ladder["summary"])
    assert own.idxmax() == "grid stride", message
    assert ratio >= bound, message


def test_no_rung_beats_the_best_library(ladder, record_property):
    ratio = ladder["own"].max() / ladder["library"]
    bound = expect("reductions.best_rung_over_library.max")
    message = _record(record_property, ratio, bound, ladder["summary"])
    assert ratio <= bound, message
