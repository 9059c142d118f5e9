"""Lesson 04 on a real GPU: the issue's ratios, each measured within one run (never absolute times).

Run with ``pytest -m gpu tests/test_gpu_tiling.py -s`` to see the reported numbers.
"""

import numpy as np
import pytest
from gpu_expectations import expect

from gpucourse.lessons import tiling
from gpucourse.measure import runtime

pytestmark = pytest.mark.gpu

MATMUL_N = 4096
TRANSPOSE_N = 8192  # 512 MiB moved per transpose: far beyond the L2, and long enough that launches don't matter


@pytest.mark.parametrize("kind, tile, blocking", [
    ("naive", 16, {}), ("tiled", 8, {}), ("tiled", 16, {}), ("tiled", 32, {}),
    ("register-blocked", 64, {"k_tile": 8, "thread_tile": 4}),
    ("register-blocked", 128, {"k_tile": 8, "thread_tile": 8}),
    ("vectorised", 64, {"k_tile": 8, "thread_tile": 4}), ("vectorised", 128, {"k_tile": 8, "thread_tile": 8}),
    ("CUDA C++", 128, {}),  # 1000 is a multiple of 4 (float4) but not of the 128 tile
])
def test_every_rung_is_right_on_the_gpu_for_a_non_multiple_size(kind, tile, blocking):
    # On real hardware a missing barrier would race for real: check a ragged size against float64.
    rng = np.random.default_rng(0)
    a, b = (rng.uniform(-1, 1, (1000, 1000)).astype(np.float32) for _ in range(2))
    c = runtime.xp.asnumpy(tiling.matmul(a, b, kind, tile, **blocking))
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, atol=1e-3)


def test_library_runs_in_plain_fp32_not_tf32():
    # TF32 keeps 10 mantissa bits: errors near 1e-2 at this size; plain fp32 stays far below 1e-3.
    rng = np.random.default_rng(1)
    a, b = (rng.uniform(-1, 1, (2048, 2048)).astype(np.float32) for _ in range(2))
    c = runtime.xp.asnumpy(tiling.matmul(a, b, "cuBLAS"))
    assert np.abs(c - a.astype(np.float64) @ b).max() < 1e-3


@pytest.fixture(scope="module")
def ladder():
    """The matmul ladder at N = 4096, measured once for the tests below (one verdict per expectation)."""
    data = tiling.measure_matmul_ladder([MATMUL_N])  # measured once per process (_MEASURED)
    gflops = data.set_index("rung").gflops
    tiled = {t: gflops[f"tiled {t}"] for t in tiling.TILES}
    own = data[~data.kind.isin(["cuBLAS", "CUDA C++"])].sort_values("gflops")  # the best Numba rung
    best = own.iloc[-1]
    blocked = {r.label: gflops[r.label] for r in tiling.numba_rungs()}
    cpp = gflops[tiling.rung("CUDA C++").label]
    summary = (f"N={MATMUL_N} fp32 on {runtime.device().name}: naive {gflops['naive']:.0f}, "
               + ", ".join(f"tiled {t} {g:.0f}" for t, g in tiled.items())
               + ", " + ", ".join(f"{k} {v:.0f}" for k, v in blocked.items())
               + f", CUDA C++ {cpp:.0f}, cuBLAS {gflops['cuBLAS']:.0f} GFLOP/s; best Numba rung {best.rung}")
    print(summary)
    return {"gflops": gflops, "best_tiled": max(tiled.values()), "best": best, "blocked": max(blocked.values()),
            "cpp": cpp, "summary": summary}


def _verdict(record_property, name: str, ratio: float, threshold: float, summary: str) -> str:
    """Record the ratio and its threshold (the tier's expectations.json shows both); the assert's message."""
    record_property(name, summary)
    record_property("ratio", round(float(ratio), 4))
    record_property("threshold", threshold)
    return f"{summary}; ratio {ratio:.3f}, threshold {threshold}"


def test_tiled_beats_naive(ladder, record_property):
    ratio = ladder["best_tiled"] / ladder["gflops"]["naive"]
    bound = expect("tiling.tiled_over_naive")
    message = _verdict(record_property, "matmul_ladder", ratio, bound, ladder["summary"])
    assert ratio >= bound, message


def test_the_best_rung_is_reported_against_cublas(ladder, record_property):
    fraction = ladder["best"].gflops / ladder["gflops"]["cuBLAS"]
    record_property("best_rung_fraction_of_cublas", round(float(fraction), 4))
    bound = expect("tiling.best_rung_over_cublas.max")
    message = _verdict(record_property, "matmul_ladder", fraction, bound, ladder["summary"])
    assert 0.0 < fraction < bound, message  # a sanity bound: our kernels do not beat the library by half


def test_cublas_runs_below_the_fp32_peak(ladder, record_property):
    peak_tflops = runtime.datasheet_tflops(runtime.device().name).get("fp32")
    if not peak_tflops:
        pytest.skip(f"no fp32 datasheet peak for {runtime.device().name}")
    # an fp32 GEMM above the CUDA cores' peak could only be using tensor cores (TF32)
    ratio = ladder["gflops"]["cuBLAS"] / (peak_tflops * 1e3)
    bound = expect("tiling.cublas_over_fp32_peak.max")
    message = _verdict(record_property, "matmul_ladder", ratio, bound, ladder["summary"])
    assert ratio <= bound, message


def test_register_blocking_beats_tiling(ladder, record_property):
    # issue 38 item 2: the vectorised rungs (LDS.128, prefetch) and the CUDA C++ one, at N = 4096
    ratio = ladder["blocked"] / ladder["best_tiled"]
    bound = expect("tiling.register_blocking_over_tiled")
    message = _verdict(record_property, "matmul_ladder_after_register_blocking", ratio, bound, ladder["summary"])
    assert ratio >= bound, message


def test_the_vectorised_rung_against_cublas(ladder, record_property):
    ratio = ladder["gflops"]["vectorised 128/8"] / ladder["gflops"]["cuBLAS"]
    record_property("vectorised_fraction_of_cublas", round(float(ratio), 4))
    bound = expect("tiling.vectorised_over_cublas")
    message = _verdict(record_property, "matmul_ladder_after_register_blocking", ratio, bound, ladder["summary"])
    assert ratio >= bound, message


def test_the_cuda_cpp_rung_against_cublas(ladder, record_property):
    ratio = ladder["cpp"] / ladder["gflops"]["cuBLAS"]
    record_property("cuda_cpp_fraction_of_cublas", round(float(ratio), 4))
    bound = expect("tiling.cuda_cpp_over_cublas")
    message = _verdict(record_property, "matmul_ladder_after_register_blocking", ratio, bound, ladder["summary"])
    assert ratio >= bound, message


@pytest.fixture(scope="module")
def transposes():
    """The transposes and the tile copy at 8192², lesson 03's best_copy on the same bytes and the copy ceiling
    (the session's fresh one, or the report's: tests/conftest.py), measured once for the tests below."""
    from gpucourse.lessons import coalescing
    from gpucourse.measure import ceilings

    gbps = tiling.measure_transposes(TRANSPOSE_N, tile=32, pad=1).set_index("variant").gbps
    ceiling = ceilings.copy_gbps()
    # the course's best copy: lesson 03's coarsened best_copy on the same bytes, or this lesson's tile copy if
    # that one is faster (lessons import no other lesson, so the comparison is made here)
    lesson03 = coalescing.measure_rung(*coalescing.BEST_RUNG, n_elements=TRANSPOSE_N * TRANSPOSE_N,
                                       copy_ceiling_gbps=ceiling)
    assert lesson03.measured, lesson03.reason
    summary = (f"{TRANSPOSE_N}² float32 on {runtime.device().name}: " + ", ".join(
        f"{v} {g:.0f}" for v, g in gbps.items()) + f" GB/s, lesson 03's best copy {lesson03.gbps:.0f}, device "
        f"copy ceiling {ceiling:.0f} GB/s")
    print(summary)
    return {"gbps": gbps, "ceiling": ceiling, "best_copy": max(tiling.best_copy_gbps(gbps), lesson03.gbps),
            "summary": summary}


def test_padding_beats_the_unpadded_transpose(transposes, record_property):
    ratio = transposes["gbps"]["shared+pad"] / transposes["gbps"]["shared"]
    bound = expect("tiling.padded_over_unpadded_transpose")
    message = _verdict(record_property, "transpose_ladder", ratio, bound, transposes["summary"])
    assert ratio >= bound, message


def test_the_padded_transpose_against_the_tile_copy(transposes, record_property):
    ratio = transposes["gbps"]["shared+pad"] / transposes["gbps"]["copy"]
    bound = expect("tiling.padded_transpose_over_copy")
    message = _verdict(record_property, "transpose_ladder", ratio, bound, transposes["summary"])
    assert ratio >= bound, message


def test_hoisted_loads_bring_the_tile_copy_near_the_ceiling(transposes, record_property):
    # Four loads in flight per thread (Little's law, lesson 05): the tile copy near the device's copy ceiling
    ratio = transposes["gbps"]["copy"] / transposes["ceiling"]
    bound = expect("tiling.tile_copy_over_ceiling")
    message = _verdict(record_property, "transpose_in_flight", ratio, bound, transposes["summary"])
    assert ratio >= bound, message


def test_hoisted_loads_bring_the_padded_transpose_near_the_best_copy(transposes, record_property):
    # ... and the padded transpose near the course's best copy (tiling.BEST_COPY)
    ratio = transposes["gbps"]["shared+pad"] / transposes["best_copy"]
    bound = expect("tiling.padded_transpose_over_best_copy")
    message = _verdict(record_property, "transpose_in_flight", ratio, bound, transposes["summary"])
    assert ratio >= bound, message


def test_the_twenty_times_claim_is_measured_not_assumed(record_property):
    # The source texts: two transposes with equal arithmetic can differ ~20× in bandwidth. Measure it.
    gbps = tiling.measure_transposes(TRANSPOSE_N, tile=32, pad=1).set_index("variant").gbps
    transposes = gbps.drop("copy")
    spread = transposes.max() / transposes.min()
    text = (f"best/worst transpose bandwidth at {TRANSPOSE_N}² = {spread:.1f}× "
            f"({transposes.idxmax()} vs {transposes.idxmin()}); the sector model bounds the naive one at 4.5×")
    print(text)
    record_property("transpose_spread", text)
    assert transposes["shared+pad"] > expect("tiling.padded_over_naive_transpose") * transposes["naive"], text
    table = tiling.folklore_table(TRANSPOSE_N)
    assert table.iloc[2]["best / worst transpose bandwidth"] == f"{spread:.1f}×"
