"""On a GPU the read-backs state the measurement (gpu-mode review G19; lessons 02, 06 and 07), in fake GPU mode:
runtime.is_gpu() true, the live measurements replaced by stand-in frames (no kernel runs)."""

from __future__ import annotations

import pandas as pd
import pytest

from gpucourse.lessons import divergence, precision, races
from gpucourse.lessons.divergence import experiments as divergence_experiments
from gpucourse.lessons.precision import experiments as precision_experiments
from gpucourse.lessons.precision import figures as precision_figures
from gpucourse.lessons.races import experiments as races_experiments
from gpucourse.measure import runtime
from gpucourse.viz import predictions

DEVICE = runtime.DeviceInfo(name="Fake GPU", compute_capability=(9, 0), sm_count=4)


@pytest.fixture
def gpu_mode(monkeypatch):
    monkeypatch.setattr(runtime, "is_gpu", lambda: True)
    monkeypatch.setattr(runtime, "device", lambda: DEVICE)
    for cached in (races_experiments._litmus_measured, precision_experiments._measured_vocab):
        cached.cache_clear()
    yield
    for cached in (races_experiments._litmus_measured, precision_experiments._measured_vocab):
        cached.cache_clear()


# --- 02: the folklore table's GPU column ------------------------------------------------------------------------


def _curve(body_a, body_b):
    rows = [{"placement": p, "fraction": f, "relative_time": 1.9 if p == "interleaved" and 0 < f < 1 else 1.0}
            for p in divergence.PLACEMENTS for f in divergence.SWEEP_FRACTIONS]
    return pd.DataFrame(rows)


def test_02_claims_on_a_gpu_quote_the_live_curves_not_the_recording(gpu_mode, monkeypatch, no_recordings):
    asked = []
    monkeypatch.setattr(divergence_experiments, "_live_curve", lambda a, b: asked.append((a, b)) or _curve(a, b))
    table = divergence.claims(128)
    assert divergence.GPU_RECORDED_COLUMN not in table  # it said "no recording yet" after the chart measured it
    column = table[divergence.GPU_MEASURED_COLUMN].tolist()
    assert column == ["1.90× (measured now)", "—", "1.90× (measured now)", "1.90× (measured now)"]
    assert set(asked) == {(128, 128), (128, divergence.path_b_body(128, "cheap"))}  # the chart's own curves


def test_02_claims_without_a_gpu_stay_recorded(no_recordings):
    table = divergence.claims(128)
    assert set(table[divergence.GPU_RECORDED_COLUMN]) == {"no recording yet", "—"}


# --- 06: the litmus table and read-back say what the chart just measured -----------------------------------------


def _litmus(fences, rounds=1000, **_):
    counts = {(1, 1): rounds * 4 - 1, (1, 0): 1 if fences == "none" else 0, (0, 0): 0, (0, 1): 0}
    return pd.DataFrame([{"fences": fences, "outcome": races.OUTCOMES[key], "flag_seen": key[0], "data_seen": key[1],
                          "count": count, "runs": rounds * 4} for key, count in counts.items()])


def test_06_the_table_after_the_chart_shows_the_same_measurement(gpu_mode, monkeypatch):
    launched = []
    monkeypatch.setattr(races_experiments, "run_litmus", lambda f, **k: launched.append(f) or _litmus(f, **k))
    races.litmus_figure(runs=5, seed=0)
    table = races.litmus_recording_table()
    assert "no GPU recording yet" not in table.to_string()
    assert set(table.measured) == {"measured now on Fake GPU, 1,000 launches × one pair per SM"}
    assert len(launched) == len(races.LITMUS_FENCES)  # measured once, for the chart and the table
    line = str(predictions.read_back(3, "nothing", measured=races.litmus_weak_per_million, unit="per million"))
    assert "the measurement says 250 per million" in line, line
    before = str(predictions.read_back(3, "nothing", unit="per million"))
    assert "the measurement is on the chart above" in before  # what the lesson said before G19


def test_06_without_a_gpu_the_recording_is_quoted(no_recordings):
    assert races.litmus_weak_per_million() is None
    assert "no GPU recording yet" in races.litmus_recording_table().to_string()


# --- 07: the speed-up and vocabulary read-backs -------------------------------------------------------------------


def _vocab():
    rows = []
    for dtype in ("bf16", "fp16"):
        for vocab, ms in ((50257, 2.2), (50304, 2.0)):
            for name in ("forward: N = vocab", "input gradient: K = vocab"):
                rows.append({"dtype": dtype, "vocab": vocab, "pass": name, "median_ms": ms, "iqr_ms": 0.01,
                             "tflops": 2 * 8192 * 768 * vocab / (ms * 1e9)})
    return pd.DataFrame(rows)


def test_07_the_vocabulary_read_back_states_the_ratio_measured_once(gpu_mode, monkeypatch):
    timed = []
    monkeypatch.setattr(precision_experiments, "vocab_shape_sweep", lambda: timed.append(1) or _vocab())
    table, ratios, source = precision.vocab_result()
    precision.vocab_figure()
    assert len(timed) == 1  # the table and the chart show one measurement
    text = precision.vocab_measured(ratios)
    assert text.startswith("TFLOP/s at 50304 ÷ at 50257: 1.10×") and "the table above" in text
    line = str(predictions.read_back("about 1.1", "nothing", measured=text, stands_in="nothing"))
    assert "the measurement says TFLOP/s at 50304 ÷ at 50257: 1.10×" in line
    assert precision.vocab_measured(None) is None


def test_07_the_speedup_read_back_states_the_measured_ratios(gpu_mode, monkeypatch):
    sweep = pd.DataFrame({"dtype": ["fp32", "fp32", "tf32", "bf16"], "n": [1024, 8192, 8192, 8192],
                          "tflops": [40.0, 50.0, 350.0, 700.0]})
    monkeypatch.setattr(precision_figures, "_measured_sweep", lambda: sweep)
    assert precision.measured_speedups() == {"bf16 / fp32": "14.0×", "tf32 / fp32": "7.0×"}
    line = str(predictions.read_back({"bf16 / fp32": 10, "tf32 / fp32": 5}, {"bf16 / fp32": "14.8× (datasheet)"},
                                     measured=precision.measured_speedups))
    assert "the measurement says bf16 / fp32: 14.0×; tf32 / fp32: 7.0×" in line


def test_the_lessons_pass_the_measurement():
    from pathlib import Path

    root = Path(__file__).parents[1] / "notebooks"
    assert "measured=races.litmus_weak_per_million" in (root / "06_races.py").read_text()
    text = (root / "07_precision.py").read_text()
    assert "measured=precision.measured_speedups" in text and "measured=precision.vocab_measured(" in text
