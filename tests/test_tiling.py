"""Lesson 04 (gpucourse.lessons.tiling): kernels, counted traffic, bank model, barriers, figures, widgets.

Everything here runs in the simulator at tiny sizes; GPU timings live in test_gpu_tiling.py.
"""

import numpy as np
import pandas as pd
import pytest

from gpucourse.errors import InvalidConfig, NoGPU
from gpucourse.lessons import tiling
from gpucourse.measure import reference, runtime
from gpucourse.viz import charts, cited

RNG = np.random.default_rng(4)


def operands(m, k, n):
    return RNG.random((m, k), dtype=np.float32) * 2 - 1, RNG.random((k, n), dtype=np.float32) * 2 - 1


# --- bad input: one line, before anything launches -------------------------------------------------


@pytest.fixture
def no_launch(monkeypatch):
    """Fail the test if a kernel is built or launched."""
    def refuse(*_args, **_kwargs):
        raise AssertionError("a kernel was built or launched before the input was checked")

    monkeypatch.setattr(tiling.Rung, "kernel", refuse)
    monkeypatch.setattr(tiling.model, "transpose_kernel", refuse)  # where they are looked up
    monkeypatch.setattr(tiling.experiments, "transpose_kernel", refuse)
    monkeypatch.setattr(tiling.model, "_trace", refuse)


@pytest.mark.parametrize("tile, words", [
    (0, "≥ 1"), (33, "1089-thread block"), (64, "at most 1024 threads"), (2.5, "integer"), (True, "integer"),
])
def test_tiles_whose_block_cannot_launch_are_refused(no_launch, tile, words):
    a, b = operands(8, 8, 8)
    with pytest.raises(InvalidConfig, match=words):
        tiling.matmul(a, b, "tiled", tile)


def test_register_blocking_over_the_shared_memory_limit_is_refused(no_launch):
    a, b = operands(8, 8, 8)
    with pytest.raises(InvalidConfig, match=r"65,536 B of shared memory.*48 KB"):
        tiling.matmul(a, b, "register-blocked", 128, k_tile=64, thread_tile=8)
    with pytest.raises(InvalidConfig, match="4096-thread block"):
        tiling.check_register_blocking(256, 8, 4)
    with pytest.raises(InvalidConfig, match="must divide"):
        tiling.check_register_blocking(64, 8, 3)


@pytest.mark.parametrize("shape_a, shape_b, words", [
    ((0, 4), (4, 4), "matrix size m must be an integer ≥ 1"),
    ((4, 4), (4, 0), "matrix size n"),
    ((4, 5), (4, 4), "must have 5 rows"),
    ((65, 4), (4, 4), "too large for the simulator"),
])
def test_sizes_are_checked_before_launch(no_launch, shape_a, shape_b, words):
    a, b = np.zeros(shape_a, np.float32), np.zeros(shape_b, np.float32)
    with pytest.raises(InvalidConfig, match=words):
        tiling.matmul(a, b, "tiled", 8)


def test_wrong_dtype_and_rank_are_refused(no_launch):
    with pytest.raises(InvalidConfig, match="float32"):
        tiling.matmul(np.zeros((4, 4)), np.zeros((4, 4), np.float32))
    with pytest.raises(InvalidConfig, match="2-D"):
        tiling.matmul(np.zeros(4, np.float32), np.zeros((4, 4), np.float32))
    with pytest.raises(InvalidConfig, match="rung"):
        tiling.matmul(np.zeros((4, 4), np.float32), np.zeros((4, 4), np.float32), "blocked")


@pytest.mark.parametrize("kwargs, words", [
    ({"tile": 64, "block_rows": 32}, "2048-thread block"),
    ({"tile": 128, "block_rows": 1}, "48 KB"),
    ({"tile": 32, "block_rows": 3}, "must divide"),
    ({"tile": 32, "block_rows": 8, "pad": -1}, "pad"),
    ({"tile": 0, "block_rows": 1}, "tile"),
])
def test_bad_transpose_shapes_are_refused(no_launch, kwargs, words):
    with pytest.raises(InvalidConfig, match=words):
        tiling.transpose(np.zeros((8, 8), np.float32), "shared+pad", **kwargs)


def test_n_zero_and_negative_are_refused_everywhere(no_launch):
    for bad in (0, -3):
        with pytest.raises(InvalidConfig):
            tiling.check_size("N", bad)
        with pytest.raises(InvalidConfig):
            tiling.barrier_experiment("both barriers", n=bad)
        with pytest.raises(InvalidConfig):
            tiling.transpose_counts(32, 1, n=bad)
    with pytest.raises(InvalidConfig, match="case"):
        tiling.barrier_experiment("no barriers at all")


def test_gpu_measurements_say_plainly_that_they_need_a_gpu():
    if runtime.is_gpu():
        pytest.skip("simulator-mode behaviour")
    with pytest.raises(NoGPU):
        tiling.measure_matmul(tiling.rung("tiled", 16), 256)
    with pytest.raises(NoGPU):
        tiling.measure_transposes(1024)


# --- kernels are correct, including sizes that are not multiples of the tile ------------------------


@pytest.mark.parametrize("kind, tile, blocking", [
    ("naive", 16, {}), ("tiled", 8, {}), ("tiled", 16, {}),
    ("register-blocked", 16, {"k_tile": 4, "thread_tile": 2}), ("cuBLAS", 16, {}),
])
def test_every_rung_multiplies_non_multiple_shapes(kind, tile, blocking):
    a, b = operands(5, 13, 9)
    c = tiling.matmul(a, b, kind, tile, **blocking)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, atol=1e-5)


def test_tiled_matmul_with_several_tiles_in_each_direction():
    a, b = operands(20, 20, 20)  # tile 8: a 3×3 grid, three k-steps, ragged edges
    np.testing.assert_allclose(tiling.matmul(a, b, "tiled", 8), a.astype(np.float64) @ b, atol=1e-5)


@pytest.mark.parametrize("variant", tiling.TRANSPOSE_VARIANTS)
@pytest.mark.parametrize("tile", [8, 32])
def test_transpose_ladder_is_correct(variant, tile):
    a = np.arange(20 * 28, dtype=np.float32).reshape(20, 28)
    out = tiling.transpose(a, variant, tile)
    np.testing.assert_array_equal(out, a if variant == "copy" else a.T)


# --- counted traffic: the model equals what the microscope counts ----------------------------------


# Worked by hand: A (n·n floats) is read once per block column, B once per block row, C written once,
# 4 bytes a float. Output tile BM×BN → 4·(n²·⌈n/BN⌉ + n²·⌈n/BM⌉ + n²).
@pytest.mark.parametrize("r, n, expected_bytes", [
    (tiling.rung("naive"), 16, 4 * (256 * 1 + 256 * 8 + 256)),  # a warp's 2×16 patch: 10240
    (tiling.rung("tiled", 8), 16, 4 * (256 * 2 + 256 * 2 + 256)),  # 8×8 tiles, 2×2 blocks: 5120
    (tiling.rung("tiled", 8), 20, 4 * (400 * 3 + 400 * 3 + 400)),  # not a multiple of the tile, 3×3: 11200
    (tiling.rung("register-blocked", 16, k_tile=8, thread_tile=2), 16, 4 * (256 + 256 + 256)),  # one block: 3072
])
def test_traffic_model_matches_the_microscope(r, n, expected_bytes):
    counted = tiling.counted_traffic(r, n)
    assert counted["correct"]
    assert counted["counted_bytes"] == counted["model_bytes"] == expected_bytes
    if r.kind != "naive":
        assert counted["max_bank_ways"] == 1  # the tiles are read conflict-free as written


def test_traffic_and_intensity_formulas():
    n = 4096
    assert tiling.matmul_flops(n) == 2 * n**3
    assert tiling.matmul_traffic_bytes(tiling.rung("tiled", 16), n) == 4 * (2 * n**3 // 16 + n * n)
    assert tiling.matmul_traffic_bytes(tiling.rung("naive"), n) == 4 * (n**3 // 16 + n**3 // 2 + n * n)
    assert tiling.matmul_traffic_bytes(tiling.rung("cuBLAS"), n) == 4 * 3 * n * n
    for t in tiling.TILES:  # tiling buys about T/4 FLOP per byte
        assert tiling.intensity(tiling.rung("tiled", t), n) == pytest.approx(t / 4, rel=0.01)
    ladder = [tiling.intensity(r, n) for r in tiling.ladder(16)]
    assert ladder == sorted(ladder), "each rung of the ladder moves right on the roofline"
    table = tiling.intensity_table(n, 16)
    assert list(table.rung) == [r.label for r in tiling.ladder(16)]


# --- banks: the exact rule, and the microscope agrees -----------------------------------------------


def test_bank_ways_rule():
    assert tiling.bank_ways(range(32)) == 1
    assert tiling.bank_ways([0] * 32) == 1  # one word: a broadcast
    assert tiling.bank_ways([0, 32]) == 2
    assert tiling.bank_ways([0, 0, 32, 64]) == 3
    assert tiling.bank_ways(range(0, 32 * 32, 32)) == 32
    assert tiling.bank_ways([]) == 0 and tiling.bank_ways([None, 5, None]) == 1


def test_bank_rule_is_the_microscopes(monkeypatch):
    from gpucourse.microscope import analysis

    assert (tiling.BANKS, tiling.BANK_BYTES) == (analysis.BANKS, analysis.BANK_WORD_BYTES)
    calls = []
    monkeypatch.setattr(analysis, "bank_ways", lambda *args: calls.append(args) or 7)
    assert tiling.bank_ways([0, 32]) == 7 and calls == [(range(2), [0, 128], 4)]


@pytest.mark.parametrize("tile, pad, expected", [
    (32, 0, {"row": 1, "column": 32}), (32, 1, {"row": 1, "column": 1}),
    (16, 0, {"row": 1, "column": 8}), (16, 1, {"row": 2, "column": 2}),
    (8, 0, {"row": 1, "column": 2}),
])
def test_transpose_bank_model(tile, pad, expected):
    assert tiling.transpose_bank_ways(tile, pad) == expected


@pytest.mark.parametrize("tile", [32, 16])
def test_microscope_counts_match_the_bank_model_and_the_sector_rule(tile):
    counts = tiling.transpose_counts(tile, pad=1).set_index("variant")
    assert counts.correct.all()
    model_plain, model_padded = tiling.transpose_bank_ways(tile, 0), tiling.transpose_bank_ways(tile, 1)
    assert counts.loc["shared", "shared load ways"] == model_plain["column"]
    assert counts.loc["shared+pad 1", "shared load ways"] == model_padded["column"]
    assert counts.loc["shared+pad 1", "shared store ways"] == model_padded["row"]
    assert counts.loc["naive", "global store sectors/request"] == tile  # one lane per row: a sector each
    assert (counts["global load sectors/request"] == 4).all()
    assert counts.loc["shared+pad 1", "global store sectors/request"] == 4
    assert counts.loc["copy", "shared max ways"] == 0


def test_bank_picture_draws_one_lane_per_square():
    fig = tiling.bank_picture(32, 0)
    assert "32-way conflict" in fig.layout.title.text
    assert fig.layout.xaxis.title.text.startswith("bank")
    assert len(fig.data[0].x) == 32 and set(fig.data[0].x) == {0}
    assert "no conflict" in tiling.bank_picture(32, 1).layout.title.text
    assert charts.caption_of(fig).startswith("Model")


# --- barriers --------------------------------------------------------------------------------------------


def test_both_barriers_no_race_and_right_answer():
    result = tiling.barrier_experiment("both barriers", schedule="random", seed=2)
    assert result.wrong_outputs == 0 and result.race_count == 0


@pytest.mark.parametrize("case, kind", [
    ("no barrier after the load", "write-read"), ("no barrier after the compute", "read-write"),
])
def test_a_missing_barrier_is_a_reported_race(case, kind):
    result = tiling.barrier_experiment(case, schedule="random", seed=0)
    assert result.race_count > 0
    assert kind in set(result.races.kind)  # the order the interleaving met them in, plus this one
    assert set(result.races.array) == {"a_tile", "b_tile"}
    assert set(result.races.space) == {"shared"}
    assert result.wrong_outputs > 0
    assert str(result.wrong_outputs) in result.summary()


def test_round_robin_can_hide_the_wrong_answer_but_not_the_race():
    # The lesson's claim: a lucky interleaving gives the right result, the race report still flags it.
    lucky = tiling.barrier_experiment("no barrier after the compute", schedule="round-robin")
    assert lucky.wrong_outputs == 0 and lucky.race_count > 0


def test_barrier_figure_maps_the_wrong_outputs():
    fig = tiling.barrier_figure("no barrier after the load", seed=0)
    result = tiling.barrier_experiment("no barrier after the load", seed=0)
    assert f"{result.wrong_outputs} of 256 outputs wrong" in fig.layout.title.text
    assert int(np.sum(fig.data[0].z)) == result.wrong_outputs
    assert charts.caption_of(fig).startswith("Counted by the microscope")
    assert all(isinstance(v, str) for v in np.ravel(fig.data[0].customdata))  # NaN cannot travel as JSON


# --- figures and the no-data honesty -----------------------------------------------------------------------


def test_ladder_charts_without_a_gpu_or_recording_show_the_model_and_the_published_ladder(no_recordings):
    if runtime.is_gpu():
        pytest.skip("simulator-mode behaviour")
    fig = tiling.gflops_figure(tile=16)
    assert fig.layout.yaxis.title.text == "throughput (GFLOP/s, log)"
    assert fig.layout.xaxis.title.text.startswith("matrix size N")
    names = [t.name for t in fig.data]
    assert names[:2] == ["model bound, naive: FLOP/byte × 4800 GB/s", "model bound, tiled 16: FLOP/byte × 4800 GB/s"]
    # nothing measured is invented: the rest is SGEMM_CUDA's published ladder, at its N, cited
    assert all(n.startswith("published: ") and n.endswith("(SGEMM_CUDA, RTX A6000)") for n in names[2:])
    assert {t.x[0] for t in fig.data[2:]} == {4096} and len(names) == 2 + len(cited.SGEMM_RUNGS)
    caption = charts.caption_of(fig)
    assert "Published by Simon Boehm (siboehm)" in caption and "MIT" in caption and "not your GPU" in caption
    assert "Tiling alone (SMEM Caching) reaches 13% of cuBLAS" in caption
    fraction = tiling.fraction_figure()
    shares = {t.name: t.y[0] for t in fraction.data}
    assert shares["published: SMEM Caching (SGEMM_CUDA, RTX A6000)"] == pytest.approx(0.128)
    assert "Published by Simon Boehm" in charts.caption_of(fraction)
    roof = tiling.roofline_figure(16, 4096)
    assert charts.caption_of(roof).startswith("Model")
    assert "FLOP per byte" in roof.layout.xaxis.title.text
    bounds = [t for t in roof.data if t.mode == "markers+text"]
    assert len(bounds) == len(tiling.ladder(16)) and all("bound, not measured" in t.name for t in bounds)


def fake_recording(monkeypatch):
    rows = [{"n": n, "rung": r.label, "kind": r.kind, "tile": r.tile, "flop_per_byte": tiling.intensity(r, n),
             "median_ms": 1.0, "gflops": 1000.0 * (i + 1)}
            for n in (256, 4096) for i, r in enumerate(tiling.ladder(16))]
    data = tiling.add_library_fraction(pd.DataFrame(rows))
    rec = reference.Recording("tiling.matmul", "test-gpu", data, {"device": {"device": "Test GPU"}},
                              reference.REFERENCE_ROOT / "test-gpu" / "tiling.matmul.csv")
    monkeypatch.setattr(reference, "load", lambda name, *a, **k: rec if name == "tiling.matmul" else None)
    return data


def test_recorded_ladder_is_drawn_with_its_provenance(monkeypatch):
    if runtime.is_gpu():
        pytest.skip("simulator-mode behaviour")
    data = fake_recording(monkeypatch)
    fig = tiling.gflops_figure(tile=16)
    assert charts.caption_of(fig).startswith("Recorded on a real GPU: measured by this course on a Test GPU")
    measured = [t for t in fig.data if not t.name.startswith("model")]
    assert [t.name for t in measured] == [r.label for r in tiling.ladder(16)]
    assert list(measured[1].y) == list(data[data.rung == "tiled 16"].gflops)
    fraction = tiling.fraction_figure()
    assert len(fraction.data) == len(tiling.ladder(16)) - 1  # every rung but the library itself
    roof = tiling.roofline_figure(16, 4096)
    assert {t.name for t in roof.data if t.mode == "markers+text"} == {f"{r.label} (recorded)"
                                                                       for r in tiling.ladder(16)}


def test_library_fraction():
    data = pd.DataFrame({"n": [256, 256], "kind": ["tiled", "cuBLAS"], "gflops": [50.0, 200.0]})
    assert list(tiling.add_library_fraction(data).fraction_of_library) == [0.25, 1.0]


def test_transpose_figure_shows_ways_beside_bandwidth(no_recordings):
    plain, padded = tiling.transpose_figure(32, 0), tiling.transpose_figure(32, 1)
    assert "32-way bank conflict" in plain.layout.title.text
    assert "conflict-free" in padded.layout.title.text
    ways = [t for t in padded.data if t.name == "max bank ways (counted)"][0]
    assert dict(zip(ways.x, ways.y))["shared+pad 1"] == 1
    assert "counted by the microscope" in charts.caption_of(padded)
    assert padded.layout.yaxis.title.text == "bandwidth (GB/s)"
    if not runtime.is_gpu():
        assert "no GPU here" in charts.caption_of(plain)


def test_folklore_table_states_the_model_and_never_invents_a_measurement(no_recordings):
    table = tiling.folklore_table()
    assert table.iloc[1]["best / worst transpose bandwidth"] == "≤ 4.5×"
    if not runtime.is_gpu():
        assert table.iloc[2]["best / worst transpose bandwidth"] == "not measured here"


def test_tiling_picture():
    fig = tiling.tiling_picture(4, 12, 1)
    assert "step 2 of 3" in fig.layout.title.text
    with pytest.raises(InvalidConfig):
        tiling.tiling_picture(4, 12, 3)


def test_sweeps_are_registered_for_make_record():
    for name, column in (("tiling.matmul", "fraction_of_library"), ("tiling.transpose", "gbps")):
        sweep = reference.SWEEPS[name]
        assert sweep.lesson == "04_shared_memory" and column in sweep.columns


# --- widgets ------------------------------------------------------------------------------------------------


def test_bank_explorer_redraws_for_the_learners_tile():
    chart = tiling.bank_explorer(threaded=False)
    assert "32-way" in chart.figure.layout.title.text
    chart.controls["pad"].value = 1
    assert "no conflict" in chart.figure.layout.title.text
    chart.controls["tile"].value = 16
    assert "16×17" in chart.figure.layout.title.text and "2-way" in chart.figure.layout.title.text
    assert chart.errors == 0 and chart.runs == 3


def test_transpose_and_barrier_explorers_update():
    chart = tiling.transpose_explorer(threaded=False)
    chart.controls["pad"].value = 1
    assert "conflict-free" in chart.figure.layout.title.text
    barrier = tiling.barrier_explorer(threaded=False)
    barrier.controls["case"].value = "both barriers"
    assert "0 of 256 outputs wrong" in barrier.figure.layout.title.text
    assert chart.errors == 0 and barrier.errors == 0


def test_matmul_explorer_builds_without_a_gpu():
    if runtime.is_gpu():
        pytest.skip("on a GPU this measures the ladder")
    chart = tiling.matmul_explorer(threaded=False)
    chart.controls["tile"].value = 32
    assert "tile 32" in chart.figure.layout.title.text and chart.errors == 0


# --- the same kernels compile for a real GPU (PTX for sm_90), checked without one -----------------------

PTX_SCRIPT = r'''
import json, os, re
from numba import cuda, float32, void  # no NUMBA_ENABLE_CUDASIM in this child: the real CUDA target
os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # lets gpucourse import beside the real target (no GPU here)
import gpucourse  # noqa: F401
from gpucourse.lessons import tiling
two, three = void(float32[:, :], float32[:, :]), void(float32[:, :], float32[:, :], float32[:, :])
kernels = {"naive": (tiling.naive_matmul_kernel(), three)}
kernels.update({f"tiled {t}": (tiling.tiled_matmul_kernel(t), three) for t in tiling.TILES})
kernels.update({f"register-blocked {b}": (tiling.register_blocked_kernel(b, k, t), three)
                for b, k, t in tiling.REGISTER_BLOCKED})
kernels.update({f"transpose {v}": (tiling.transpose_kernel(v, 32, 8, 1), two) for v in tiling.TRANSPOSE_VARIANTS})
out = {}
for name, (kernel, sig) in kernels.items():
    ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=(9, 0))
    out[name] = {"shared": sum(int(n) for n in re.findall(r"\.shared \.align \d+ \.b8 \w+\[(\d+)\]", ptx)),
                 "barriers": len(re.findall(r"\bbar(?:rier)?\.sync", ptx)), "local": ".local" in ptx}
print(json.dumps(out))
'''


def test_kernels_compile_to_ptx_for_sm_90():
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM", "GPUCOURSE_MODE")}
    done = subprocess.run([sys.executable, "-c", PTX_SCRIPT], capture_output=True, text=True, env=env,
                          timeout=300, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if done.returncode != 0 and "libNVVM" in done.stderr:
        pytest.skip("NVVM is not installed (numba-cuda[cu13] provides it)")
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["tiled 16"] == {"shared": 2 * 16 * 16 * 4, "barriers": 2, "local": False}
    assert found["transpose shared+pad"]["shared"] == 32 * 33 * 4
    assert found["naive"]["shared"] == 0 and found["naive"]["barriers"] == 0
    # the register-blocked accumulators live in registers, not in (slow) local memory
    assert not any(v["local"] for v in found.values())
