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


def test_tiled_beats_naive_and_the_best_rung_is_reported_against_cublas(record_property):
    data = tiling.measure_matmul_ladder([MATMUL_N])
    gflops = data.set_index("rung").gflops
    tiled = {t: gflops[f"tiled {t}"] for t in tiling.TILES}
    best_tile = max(tiled, key=tiled.get)
    ratio = tiled[best_tile] / gflops["naive"]
    own = data[~data.kind.isin(["cuBLAS", "CUDA C++"])].sort_values("gflops")  # the best Numba rung
    best = own.iloc[-1]
    fraction = best.gflops / gflops["cuBLAS"]
    summary = (f"N={MATMUL_N} fp32 on {runtime.device().name}: naive {gflops['naive']:.0f}, "
               + ", ".join(f"tiled {t} {g:.0f}" for t, g in tiled.items())
               + f", {best.rung} {best.gflops:.0f}, cuBLAS {gflops['cuBLAS']:.0f} GFLOP/s; "
               f"tiled {best_tile} / naive = {ratio:.2f}×; best rung ({best.rung}) reaches {fraction:.1%} of cuBLAS")
    print(summary)
    record_property("matmul_ladder", summary)
    record_property("best_rung_fraction_of_cublas", round(float(fraction), 4))
    assert ratio >= expect("tiling.tiled_over_naive"), summary
    # a sanity bound: our kernels do not beat the library by half
    assert 0.0 < fraction < expect("tiling.best_rung_over_cublas.max"), summary
    peak_tflops = runtime.datasheet_tflops(runtime.device().name).get("fp32")
    if peak_tflops:  # an fp32 GEMM above the CUDA cores' peak could only be using tensor cores (TF32)
        assert gflops["cuBLAS"] <= expect("tiling.cublas_over_fp32_peak.max") * peak_tflops * 1e3, summary


def test_register_blocking_done_right_against_tiling_and_cublas(record_property):
    # issue 38 item 2: the vectorised rungs (LDS.128, prefetch) and the CUDA C++ one, at N = 4096
    data = tiling.measure_matmul_ladder([MATMUL_N])  # measured once per process (_MEASURED)
    gflops = data.set_index("rung").gflops
    cublas = gflops["cuBLAS"]
    best_tiled = max(gflops[f"tiled {t}"] for t in tiling.TILES)
    blocked = {r.label: gflops[r.label] for r in tiling.numba_rungs()}
    best_blocked = max(blocked, key=blocked.get)
    vectorised = gflops["vectorised 128/8"]
    cpp = gflops[tiling.rung("CUDA C++").label]
    summary = (f"N={MATMUL_N} fp32 on {runtime.device().name}: best tiled {best_tiled:.0f}, "
               + ", ".join(f"{k} {v:.0f}" for k, v in blocked.items())
               + f", CUDA C++ {cpp:.0f}, cuBLAS {cublas:.0f} GFLOP/s; {best_blocked} / best tiled = "
               f"{blocked[best_blocked] / best_tiled:.2f}×; vectorised 128/8 = {vectorised / cublas:.1%}, "
               f"CUDA C++ = {cpp / cublas:.1%} of cuBLAS")
    print(summary)
    record_property("matmul_ladder_after_register_blocking", summary)
    record_property("vectorised_fraction_of_cublas", round(float(vectorised / cublas), 4))
    record_property("cuda_cpp_fraction_of_cublas", round(float(cpp / cublas), 4))
    assert blocked[best_blocked] >= expect("tiling.register_blocking_over_tiled") * best_tiled, summary
    assert vectorised >= expect("tiling.vectorised_over_cublas") * cublas, summary
    assert cpp >= expect("tiling.cuda_cpp_over_cublas") * cublas, summary


def test_padded_transpose_against_unpadded_and_copy(record_property):
    gbps = tiling.measure_transposes(TRANSPOSE_N, tile=32, pad=1).set_index("variant").gbps
    summary = (f"{TRANSPOSE_N}² float32 on {runtime.device().name}: " + ", ".join(
        f"{v} {g:.0f}" for v, g in gbps.items()) + " GB/s; padded / unpadded = "
        f"{gbps['shared+pad'] / gbps['shared']:.2f}×, padded / copy = {gbps['shared+pad'] / gbps['copy']:.2f}")
    print(summary)
    record_property("transpose_ladder", summary)
    assert gbps["shared+pad"] >= expect("tiling.padded_over_unpadded_transpose") * gbps["shared"], summary
    assert gbps["shared+pad"] >= expect("tiling.padded_transpose_over_copy") * gbps["copy"], summary


def test_hoisted_loads_bring_the_copy_and_the_padded_transpose_near_the_ceiling(record_property):
    # Four loads in flight per thread (Little's law, lesson 05): the tile copy near the device's copy ceiling,
    # the padded transpose near the course's best copy (tiling.BEST_COPY).
    from gpucourse.lessons import coalescing
    from gpucourse.measure import ceilings

    gbps = tiling.measure_transposes(TRANSPOSE_N, tile=32, pad=1).set_index("variant").gbps
    ceiling = ceilings.copy_gbps()
    # the course's best copy: lesson 03's coarsened best_copy on the same bytes, or this lesson's tile copy if
    # that one is faster (lessons import no other lesson, so the comparison is made here)
    lesson03 = coalescing.measure_rung(*coalescing.BEST_RUNG, n_elements=TRANSPOSE_N * TRANSPOSE_N,
                                       copy_ceiling_gbps=ceiling)
    assert lesson03.measured, lesson03.reason
    best_copy = max(tiling.best_copy_gbps(gbps), lesson03.gbps)
    summary = (f"{TRANSPOSE_N}² float32 on {runtime.device().name}: tile copy {gbps['copy']:.0f}, padded "
               f"{gbps['shared+pad']:.0f}, lesson 03's best copy {lesson03.gbps:.0f}, device copy ceiling "
               f"{ceiling:.0f} GB/s; tile copy / ceiling = {gbps['copy'] / ceiling:.2f}, padded / best copy = "
               f"{gbps['shared+pad'] / best_copy:.2f}")
    print(summary)
    record_property("transpose_in_flight", summary)
    assert gbps["copy"] >= expect("tiling.tile_copy_over_ceiling") * ceiling, summary
    assert gbps["shared+pad"] >= expect("tiling.padded_transpose_over_best_copy") * best_copy, summary


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
