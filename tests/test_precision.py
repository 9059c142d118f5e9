"""gpucourse.lessons.precision on any machine: the classic demos, the accumulation kernels (in the simulator
here) against NumPy, loss scaling on a tiny torch model, matmul accuracy on the CPU, and the
throughput charts that must never invent a number."""

import math

import numpy as np
import pandas as pd
import pytest

from gpucourse.errors import InvalidConfig, NoGPU
from gpucourse.lessons import precision
from gpucourse.lessons.precision import METHODS, accumulate, reference_accumulate
from gpucourse.measure import reference, runtime
from gpucourse.viz import charts

# --- the classic demos, run for real ---------------------------------------------------------------


def test_classic_demos():
    table = precision.classic_demos().set_index("expression")
    assert table.loc["300 * 300", "fp16"] == math.inf and table.loc["300 * 300", "fp32"] == 90000
    assert table.loc["1e-8", "fp16"] == 0.0 and table.loc["1e-8", "fp32"] != 0
    assert table.loc["0.1 + 0.1 + … (2207 times)", "fp16"] == 256.0


def test_running_sum_of_a_tenth_sticks_at_256():
    total, additions = precision.running_sum_plateau(0.1, "fp16")
    assert total == 256.0
    assert np.float16(total) + np.float16(0.1) == np.float16(256)  # the next addition changes nothing
    assert additions == 2207
    # the same in the Numba kernel (simulator here, GPU in the GPU tier)
    x = np.full(4096, 0.1, dtype=np.float16)
    assert accumulate(x, "fp16")[0, 0] == 256.0
    assert accumulate(x, "fp32")[0, 0] == pytest.approx(4096 * float(np.float16(0.1)), rel=1e-6)


# --- accumulation kernels vs NumPy -------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["uniform", "normal"])
def test_kernels_match_numpy_bit_for_bit(kind):
    x = precision.make_data(kind, rows=3, n=1000, seed=5)
    points = [1, 10, 100, 999, 1000]
    for method in METHODS:
        from_kernel = accumulate(x, method, points)
        assert not np.isnan(from_kernel).any(), f"{method}: some checkpoints were never written"
        np.testing.assert_array_equal(from_kernel, reference_accumulate(x, method, points), err_msg=method)


def test_errors_are_ordered_and_kahan_rescues_fp16():
    errors = precision.accumulation_errors("uniform", max_n=4096, rows=4, seed=0)
    at_end = errors[errors.n == 4096].set_index("method").median_error
    assert at_end["fp16"] > 10 * at_end["fp16_kahan"]
    assert at_end["fp16_kahan"] > 10 * at_end["fp32"]
    assert at_end["fp32"] > at_end["fp32_kahan"]
    # Kahan makes fp16 as good as an fp16 result can be
    assert at_end["fp16_kahan"] < 2 * precision.formats.FORMATS["fp16"].unit_roundoff
    # fp16's error grows with n; Kahan's does not
    fp16 = errors[errors.method == "fp16"].set_index("n").median_error
    assert fp16[4096] > 10 * fp16[16]
    # the NumPy engine gives the same table
    from_numpy = precision.accumulation_errors("uniform", 4096, 4, 0, engine="numpy")
    pd.testing.assert_frame_equal(errors, from_numpy)


def test_kahan_on_a_constant_stays_within_one_fp16_spacing():
    x = np.full((1, 4096), 0.1, dtype=np.float16)
    exact = 4096 * float(np.float16(0.1))  # 409.5
    assert abs(accumulate(x, "fp16_kahan")[0, 0] - exact) <= 0.25  # fp16's spacing at 409.5
    assert accumulate(x, "fp32_kahan")[0, 0] == exact


def test_exact_sums_and_normwise_error():
    x = np.array([[1.0, -1.0, 2.0**-10]], dtype=np.float16)
    exact, absolute = precision.exact_sums(x, [2, 3])
    assert exact.tolist() == [[0.0, 2.0**-10]] and absolute.tolist() == [[2.0, 2.0 + 2.0**-10]]


def test_accumulation_figure_and_running_sum_figure():
    fig = precision.accumulation_figure("uniform", max_n=256, rows=2)
    assert len(fig.data) == 4 and fig.layout.yaxis.type == "log"
    caption = charts.caption_of(fig)
    assert "not timings" in caption and ("simulator" in caption or runtime.is_gpu())
    fig = precision.running_sum_figure(0.1, n=4096, every=512)
    by_name = {t.name: t for t in fig.data}
    assert by_name[precision.METHOD_LABELS["fp16"]].y[-1] == 256.0
    assert by_name["exact"].y[-1] == pytest.approx(409.5)


def test_kernel_source_is_shown_from_the_package():
    assert "compensation = (t - total) - y" in precision.kernel_source("fp16_kahan")


@pytest.mark.parametrize("call", [
    lambda: accumulate(np.ones(8, dtype=np.float32), "fp16"),
    lambda: accumulate(np.ones(8, dtype=np.float16), "fp64"),
    lambda: accumulate(np.ones(8, dtype=np.float16), "fp16", [4, 2]),
    lambda: accumulate(np.ones(8, dtype=np.float16), "fp16", [9]),
    lambda: accumulate(np.ones((2, 2, 2), dtype=np.float16)),
    lambda: accumulate(np.ones(0, dtype=np.float16)),
    lambda: precision.make_data("gaussian", 1, 8),
    lambda: precision.accumulation_errors(max_n=0),
    lambda: precision.running_sum_figure("a lot"),
    lambda: precision.running_sum_plateau(0.1, "fp8"),
])
def test_bad_accumulation_input(call):
    with pytest.raises(InvalidConfig):
        call()


@pytest.mark.skipif(runtime.is_gpu(), reason="the size limit is the simulator's")
def test_simulator_refuses_a_sum_that_would_take_minutes():
    with pytest.raises(InvalidConfig, match="simulator"):
        accumulate(np.ones((64, 1 << 13), dtype=np.float16))


# --- range and loss scaling ----------------------------------------------------------------------------


def test_loss_scaling_story_is_deterministic_and_fast():
    runs = precision.train_all(steps=60)
    # "fast" is counted, not timed: exactly the 60 steps asked for, per recipe
    assert {name: len(run.losses) for name, run in runs.items()} == dict.fromkeys(runs, 60)
    fp32, fp16, scaled, bf16 = (runs[r] for r in ("fp32", "fp16", "fp16+scaler", "bf16"))
    assert fp32.final_over_initial < 0.2, "the fp32 reference learns"
    assert fp16.final_over_initial == 1.0, "fp16 without a scaler: every gradient underflows, nothing moves"
    assert fp16.underflow_fraction[0] == 1.0
    assert scaled.final_over_initial == pytest.approx(fp32.final_over_initial, rel=0.01)
    assert scaled.underflow_fraction[0] < 0.01 and scaled.scales[0] == 2.0**16 and scaled.skipped_steps == 0
    assert bf16.final_over_initial == pytest.approx(fp32.final_over_initial, rel=0.01)
    assert bf16.underflow_fraction[0] == 0.0
    again = precision.train_tiny_model("bf16", steps=60)
    assert again.losses == bf16.losses
    table = precision.underflow_table(runs)
    assert len(table) == 4


def test_an_overflowing_scale_is_backed_off():
    run = precision.train_tiny_model("fp16+scaler", steps=8, init_scale=2.0**40)
    assert run.skipped_steps >= 1 and run.scales[-1] < 2.0**40


def test_gradient_histogram_against_the_formats_range():
    sample = precision.gradient_sample()
    dy = sample["activation gradients dL/dy"]
    assert precision.underflow_share(dy, "fp16") == 1.0
    assert precision.underflow_share(dy, "fp16", 2.0**16) < 0.01
    assert precision.underflow_share(dy, "bf16") == 0.0
    hist = precision.log2_histogram(dy)
    assert hist["count"].sum() + hist.attrs["zeros"] == dy.size
    assert hist.log2_bin[hist["count"].idxmax()] < -24, "most of dL/dy sits below fp16's smallest subnormal"
    shifted = precision.log2_histogram(dy, 2.0**16)
    assert shifted.log2_bin[shifted["count"].idxmax()] == hist.log2_bin[hist["count"].idxmax()] + 16
    fig = precision.gradient_histogram_figure("fp16", 16, sample)
    assert len(fig.data) == 2 and len(fig.layout.shapes) == 4
    assert {a.text for a in fig.layout.annotations} >= {"rounds to 0", "subnormal: few bits", "normal range"}
    assert "become 0" in charts.caption_of(fig)
    assert len(precision.gradient_histogram_figure("bf16", 0, sample).layout.shapes) == 1  # all normal range
    zones = precision.format_zones("fp8_e4m3")
    assert zones[-1][0] == "saturates" and zones[2][1:] == (-6.0, math.log2(448))


@pytest.mark.parametrize("call", [
    lambda: precision.train_tiny_model("fp8"),
    lambda: precision.train_tiny_model("fp16", steps=0),
    lambda: precision.gradient_histogram_figure("fp12"),
    lambda: precision.gradient_histogram_figure("fp16", -3),
    lambda: precision.underflow_share([1.0], "fp16", "big"),
])
def test_bad_training_input(call):
    with pytest.raises(InvalidConfig):
        call()


# --- tensor cores: accuracy for real on the CPU, throughput never invented ----------------------------


def test_matmul_relative_errors_on_the_cpu_are_ordered():
    table = precision.relative_errors(256).set_index("dtype").relative_error
    assert table["fp32"] < table["tf32"] <= table["fp16"] < table["bf16"] < table["fp8_e4m3"]
    for dtype, error in table.items():
        assert error < 2 * precision.formats.get_format(dtype).unit_roundoff * (4 if dtype == "fp32" else 1)
    fig = precision.accuracy_figure(precision.relative_errors(64))
    assert "emulated" in charts.caption_of(fig)


def test_measurement_in_simulator_mode_says_not_measured():
    if runtime.is_gpu():
        pytest.skip("GPU mode measures for real (tests/test_gpu_precision.py)")
    m = precision.measure_matmul("bf16", 1024)
    assert not m.measured and m.tflops is None
    with pytest.raises(NoGPU):
        precision.matmul_sweep()
    with pytest.raises(NoGPU):
        precision.vocab_shape_sweep()
    with pytest.raises(NoGPU):
        precision.relative_errors(64, device="cuda")


def test_throughput_chart_without_recording_says_so(monkeypatch):
    if runtime.is_gpu():
        pytest.skip("GPU mode measures for real")
    monkeypatch.setattr(reference, "load", lambda name, *a, **k: None)
    fig = precision.throughput_figure()
    # nothing measured is drawn; the published maxima (bf16, fp8) are, and the caption names their source
    assert [t.name.split(":")[0] for t in fig.data] == ["published max achievable bf16",
                                                         "published max achievable fp8_e4m3"]
    assert [t.y[0] for t in fig.data] == [794.5, 1453.4]
    assert charts.caption_of(fig).startswith("No GPU here and no recording")
    assert "Published by Stas Bekman" in charts.caption_of(fig) and "not your GPU" in charts.caption_of(fig)
    datasheet = [a.text for a in fig.layout.annotations if (a.text or "").startswith("datasheet")]
    assert any("494.7" in t for t in datasheet) and any("989.4" in t for t in datasheet)
    assert any("1978.9" in t for t in datasheet) and any("67" in t for t in datasheet)
    fig = precision.ceiling_figure()
    assert [t.name for t in fig.data] == ["datasheet (H200, assumed: no GPU or recording, dense)",
                                          "published max achievable (ml-engineering; H200 rows)"]
    assert list(fig.data[1].y) == [None, None, None, 794.5, 1453.4]  # fp32, tf32, fp16: not in the table
    assert all("H200, assumed" in t for t in datasheet)


def _fake_recording(tmp_path):
    data = pd.DataFrame({"dtype": ["fp32", "fp32", "bf16", "bf16"], "n": [1024, 8192, 1024, 8192],
                         "tflops": [40.0, 50.0, 500.0, 780.0], "median_ms": [0.05, 22.0, 0.004, 1.4]})
    return reference.Recording("precision.matmul", "nvidia-h200", data,
                               {"device": {"device": "NVIDIA H200"}, "sweeps": {"precision.matmul": {
                                   "date": "2026-10-01T00:00:00"}}}, tmp_path / "precision.matmul.csv")


def test_throughput_chart_draws_a_recording(monkeypatch, tmp_path):
    if runtime.is_gpu():
        pytest.skip("GPU mode measures for real")
    monkeypatch.setattr(reference, "load", lambda name, *a, **k: _fake_recording(tmp_path))
    fig = precision.throughput_figure(dtypes=("fp32", "bf16"))
    assert [t.name for t in fig.data] == [precision.MATMUL_LABELS["fp32"], precision.MATMUL_LABELS["bf16"]]
    assert "measured by this course on an NVIDIA H200 (not your GPU)" in charts.caption_of(fig)
    assert "2026-10-01" in charts.caption_of(fig)
    best = precision.ceiling_table(_fake_recording(tmp_path).data).set_index("dtype")
    assert best.loc["bf16", "measured ceiling (TFLOP/s)"] == 780.0
    assert best.loc["bf16", "% of datasheet"] == pytest.approx(100 * 780 / 989.4)
    fig = precision.ceiling_figure()
    assert len(fig.data) == 2 and fig.data[0].name == "datasheet (H200, dense)"


def test_datasheet_follows_the_recordings_device(monkeypatch, tmp_path):
    if runtime.is_gpu():
        pytest.skip("GPU mode measures for real")
    rec = _fake_recording(tmp_path)
    rec.provenance["device"] = {"device": "NVIDIA L40S"}  # not in the datasheet table
    monkeypatch.setattr(reference, "load", lambda name, *a, **k: rec)
    fig = precision.throughput_figure()
    assert not [a for a in fig.layout.annotations if (a.text or "").startswith("datasheet")]
    fig = precision.ceiling_figure()
    assert [t.name for t in fig.data] == ["measured ceiling (best of sweep)"]
    assert list(precision.ceiling_table(rec.data, rec.device)["% of datasheet"].isna()) == [True, True]
    rec.provenance["device"] = {"device": "NVIDIA H100 80GB HBM3"}
    assert "datasheet (H100 80GB HBM3, dense)" in [t.name for t in precision.ceiling_figure().data]


def test_vocab_ratios():
    table = pd.DataFrame({"dtype": "bf16", "pass": "forward: N = vocab", "vocab": [50257, 50304],
                          "tflops": [600.0, 660.0], "median_ms": [1.1, 1.0]})
    ratios = precision.vocab_ratios(table).iloc[0]
    assert ratios.tflops_ratio_50304_over_50257 == pytest.approx(1.1)
    assert ratios.time_ratio_50257_over_50304 == pytest.approx(1.1)


def test_sweeps_are_registered():
    for name in ("precision.matmul", "precision.vocab_shape"):
        assert reference.SWEEPS[name].lesson == "07_precision"
    assert precision.datasheet_tflops("NVIDIA H100 80GB HBM3")["tf32"] == 494.7
    assert set(precision.datasheet_tflops("Tesla T4")) == {"fp32", "fp16"}  # Turing: no tf32 or bf16 tensor cores
    assert precision.datasheet_tflops("NVIDIA H200")["fp8_e4m3"] == 1978.9
    for other_part in ("NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA H200 NVL"):  # not the SXM figures
        assert precision.datasheet_tflops(other_part) is None


@pytest.mark.parametrize("call", [
    lambda: precision.relative_errors(64, dtypes=["fp64"]),
    lambda: precision.relative_errors(10**6),
    lambda: precision.relative_errors(64, device="tpu"),
    lambda: precision.measure_matmul("int8", 64),
    lambda: precision._check_shape(64, 50257, 768, "fp8_e4m3", "cpu"),
    lambda: precision._check_shape(0, 64, 64, "bf16", "cpu"),
    lambda: precision.throughput_figure(dtypes=["fp64"]),
])
def test_bad_matmul_input(call):
    with pytest.raises(InvalidConfig):
        call()


def test_tensor_core_accumulation_is_never_stated_as_plain_fp32():
    """Lesson 07's Explain: fp16/fp8 inputs may accumulate in fp16, and the fp32-wide accumulator is not
    sequential IEEE fp32 (Fasi et al. 2021). No lesson or lab text may say tensor cores simply "accumulate in
    fp32" (the review found it at lesson 07:198 and in lab 07's intro and exercise 3)."""
    import re

    from gpucourse.tooling.build import ROOT

    for path in (ROOT / "notebooks" / "07_precision.py", ROOT / "solutions" / "lab07_precision" / "lab07_precision.py"):
        text = re.sub(r"\s*\n#\s*", " ", path.read_text(encoding="utf-8"))  # comment lines joined into prose
        for claim in re.finditer(r"tensor cores?[^.]{0,80}?accumulate[^.]{0,20}?\bin fp32", text, re.I):
            raise AssertionError(f"{path.name}: {claim.group(0)!r}")
        assert re.search(r"accumulate fp16 and bf16 products at about fp32 width", text) is None, path.name


def test_the_accumulation_explorer_runs_the_kernels_where_a_move_stays_under_a_second(monkeypatch):
    """Simulator mode: the Numba kernels up to 4,096 terms, NumPy's reference (the same table, tested
    above) beyond, and the caption says which; a move to 16,384 terms then launches no simulated kernel."""
    from gpucourse.lessons.precision import figures
    from gpucourse.lessons.precision import model as precision_model

    assert figures.widget_engine(4096) == "kernel" and figures.widget_engine(16384) == "numpy"
    launches = []
    real = precision_model.accumulate
    monkeypatch.setattr(precision_model, "accumulate", lambda *a, **k: launches.append(a[1]) or real(*a, **k))
    chart = figures.accumulation_widget(threaded=False)
    assert launches and "the Numba kernels in the simulator" in charts.caption_of(chart.figure)
    launches.clear()
    chart.controls["max_n"].value = 16384
    assert chart.errors == 0 and launches == [] and "NumPy" in charts.caption_of(chart.figure)


def test_vocab_figure_draws_the_committed_recording_with_its_label(monkeypatch):
    monkeypatch.setattr(runtime, "is_gpu", lambda: False)
    rec = reference.load("precision.vocab_shape")
    if rec is None:
        pytest.skip("no committed recording of precision.vocab_shape")
    committed = pd.read_csv(rec.path)
    fig = precision.vocab_figure()
    caption = charts.caption_of(fig)
    assert rec.device in caption and "quick contract" in caption and rec.date in caption
    assert "not your GPU" in caption and "s of GPU time a point" in caption and "IQR" in caption
    drawn = sorted(v for trace in fig.data for v in trace.y)
    assert drawn == sorted(committed.median_ms)  # the recording's own numbers, nothing typed in
    assert all(trace.error_y.array is not None for trace in fig.data)
    # known-wrong: the same chart without a recording says so and draws no bar
    empty = precision.vocab_figure(data=pd.DataFrame(), source="nothing")
    assert not [t for t in empty.data if t.type == "bar"]
