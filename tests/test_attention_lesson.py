"""Lesson 12 "Attention": its prose figures computed from the source, the recording it shows without Triton, and
its chart and widget builders (no GPU: the GPU timing is tests/test_gpu_attention.py's)."""

import json
import math

import numpy as np
import pytest
from gpu_expectations import EXPECTATIONS
from prose import lesson_text, number

from gpucourse.errors import InvalidConfig, NoGPU
from gpucourse.lessons.attention import experiments, figures, model, online, recorded, timing
from gpucourse.measure import runtime, tritonmode
from gpucourse.tooling.build import ROOT
from gpucourse.viz import charts

LESSON = "12_attention.py"
NOTES = (ROOT / "instructor" / "12_attention.md").read_text()
MB = 1e6


@pytest.fixture(scope="module")
def text():
    return lesson_text(LESSON)


@pytest.fixture(autouse=True)
def simulator(monkeypatch):
    monkeypatch.setenv("GPUCOURSE_MODE", "sim")
    monkeypatch.setattr(runtime, "is_gpu", lambda: False)


# --- prose figures ------------------------------------------------------------------------------------------

def test_the_byte_ratio_the_prose_states_is_the_models_limit(text):
    assert "ratio tends to 2·br/d — with 64-row tiles and d = 64, that is 2" in text
    assert model.quadratic_coefficient_ratio(64, 64) == number(r"d = 64, that is (\d+)", text)
    big = 2 ** 20
    assert model.naive_bytes(big, 64) / model.flash_bytes(big, 64, 64, 64) == pytest.approx(2, rel=1e-4)


def test_kv_size_memory_and_overflow_figures(text):
    kv_mb = 2 * 4096 * 64 * 2 / MB  # K and V of one head, fp16
    assert f"{kv_mb:.1f} MB at n = 4096, d = 64 in fp16" in text
    assert f"would hold {model.extra_memory_bytes(65536, 'fp16', flash=False) / 1e9:.0f} GB of S and P" in text
    assert model.extra_memory_bytes(65536, "fp16", flash=True) / MB == pytest.approx(0.25, rel=0.05)
    assert "a quarter of a megabyte" in text
    mantissa, exponent = f"{math.exp(100):.1e}".split("e+")
    assert f"`e^100` is about {mantissa} × 10⁴³" in text and exponent == "43"
    largest = f"{float(np.finfo(np.float32).max):.1e}"
    assert largest == "3.4e+38" and "(3.4 × 10³⁸)" in text
    assert np.isnan(online.naive_softmax(np.array([[10.0, 20.0, 100.0]], np.float32))).any()


def test_intensity_claims_hold_for_large_n(text):
    naive, flash, cached = model.placements(2 ** 16, 64, 64, 64, "fp16", False, figures.GPU)
    assert naive.intensity_flop_per_byte == pytest.approx(64 / 2, rel=1e-3)  # d/2 FLOP per fp16 byte
    assert flash.intensity_flop_per_byte == pytest.approx(64, rel=1e-3)  # br FLOP per fp16 byte
    assert (naive.bound, flash.bound, cached.bound) == ("memory-bound", "memory-bound", "compute-bound")
    assert "d/2 FLOP per fp16 byte" in text and "br FLOP per fp16 byte" in text
    tiles = figures.intensity_by_tile(4096, 64, "fp16", gpu=figures.GPU).set_index("Q tile rows br")
    assert tiles.loc[128, "bound"] == "memory-bound" and "Even 128-row tiles stay left of the H200's ridge" in text


def test_settings_the_prose_names(text):
    assert timing.GPU_SETTINGS[64][0] == timing.GPU_SETTINGS[128][0] == 128
    assert "(128 rows on Hopper)" in text
    assert f"({timing.BATCH} × {timing.HEADS} heads, fp16)" in text
    threshold = EXPECTATIONS["attention.flash_over_sdpa"].by_cc[(9, 0)]
    assert f"at least {threshold:.2f} of SDPA's FlashAttention speed" in text
    assert f"{figures.online_check().block.iloc[0]} columns at a time" in text
    assert any(case[2] == 200 for case in recorded.CASES) and "a partial last tile (n = 200)" in text
    assert "Triton 3.7 and 3.9" in text and "3.7.1 and 3.9.0" in experiments.BF16_REFUSED
    with pytest.raises(InvalidConfig, match="bf16 is refused in Triton's interpreter"):  # the lesson's cell
        experiments.check_inputs(*experiments.random_qkv(1, 1, 64, 64, "bfloat16"), 32, 32, interpreted=True)


def test_the_recording_bears_out_the_prose(text):
    """'agree to the byte' and 'within tolerance of SDPA': for every recorded case."""
    rows = recorded.load()["rows"]
    check = figures.traffic_check(figures.pd.DataFrame(rows, columns=recorded.COLUMNS))
    assert check.equal.all() and all(row["close"] for row in rows)
    assert "agree to the byte" in text and "Every case is within tolerance of SDPA" in text


def test_instructor_answers_are_the_models():
    naive, flash = model.naive_bytes(4096, 64, "fp16") / MB, model.flash_bytes(4096, 64, 64, 64, "fp16") / MB
    read = sum(v for k, v in model.flash_traffic(256, 64, 32, 32, "fp16").items() if k.startswith("read"))
    written = sum(v for k, v in model.flash_traffic(256, 64, 32, 32, "fp16").items() if k.startswith("write"))
    placements = model.placements(4096, 64, 64, 64, "fp16", False, figures.GPU)
    for figure in (f"naive **{naive:.1f} MB**", f"FlashAttention\n  **{flash:.1f} MB**", f"**{naive / flash:.2f}**",
                   f"**{model.compulsory_bytes(4096, 64, 'fp16') / MB:.1f} MB**", f"**{math.exp(-3):.4f}**",
                   f"3·α + 1 = {3 * math.exp(-3) + 1:.4f}", f"{read:,} bytes read", f"{written:,} bytes written",
                   f"**{placements[0].ridge_flop_per_byte:.1f}**",
                   f"sits at\n  {placements[0].intensity_flop_per_byte:.1f}",
                   f"at {placements[1].intensity_flop_per_byte:.1f}", f"({placements[2].intensity_flop_per_byte:.1f})",
                   f"({model.extra_memory_bytes(65536, 'fp16', flash=False) / 1e9:.0f} GB for one head"):
        assert figure in NOTES, figure


# --- the recording, and the lesson without Triton --------------------------------------------------------------

def test_the_recording_has_its_provenance_and_its_label():
    recording = recorded.load()
    p = recording["provenance"]
    assert p["command"] == recorded.COMMAND and p["triton"] and p["torch"] and p["date"]
    assert [tuple(r[c] for c in ("batch", "heads", "n", "d", "dtype", "causal", "block_m", "block_n"))
            for r in recording["rows"]] == [tuple(c) for c in recorded.CASES]
    assert recorded.RECORDING.parent.name == "attention" and recorded.RECORDING.parent.parent.name == "compiled"


def test_without_triton_the_lesson_shows_the_recording_labelled(monkeypatch):
    monkeypatch.setattr(tritonmode, "triton_available", lambda: False)
    monkeypatch.setattr(recorded, "run_case", lambda *case: pytest.fail("ran the interpreter without Triton"))
    table, source = figures.interpreter_results()
    assert list(table.columns) == list(recorded.COLUMNS) and len(table) == len(recorded.CASES)
    assert source.startswith("Recorded on a CPU by Triton") and "not a GPU's numbers" in source
    assert recorded.COMMAND in source and recorded.load()["provenance"]["triton"] in source


def test_without_triton_and_without_the_recording_one_clear_line(monkeypatch, tmp_path):
    monkeypatch.setattr(tritonmode, "triton_available", lambda: False)
    monkeypatch.setattr(recorded, "RECORDING", tmp_path / "absent.json")
    with pytest.raises(InvalidConfig, match="regenerate it"):
        recorded.load()


def test_on_a_gpu_errors_are_measured_now_and_bytes_come_from_the_recording(monkeypatch):
    monkeypatch.setattr(tritonmode, "triton_available", lambda: True)
    monkeypatch.setattr(runtime, "is_gpu", lambda: True)
    monkeypatch.setattr(runtime, "device", lambda: type("D", (), {"name": "NVIDIA H200"})())
    monkeypatch.setattr(recorded, "run_case", lambda *case: pytest.fail("the interpreter's counter runs on a CPU"))
    compared = []
    monkeypatch.setattr(experiments, "compare_with_sdpa", lambda *case: compared.append(case) or {
        **dict(zip(recorded.COLUMNS[:8], case)), "max_abs_error_o": 1e-3, "max_abs_error_lse": 1e-4,
        "close": True, "seconds": 1e-4, "mode": "compiled"})
    table, source = figures.interpreter_results()
    assert compared == [tuple(c) for c in recorded.CASES]
    assert table["bytes read"].tolist() == [r["bytes read"] for r in recorded.load()["rows"]]
    assert source.startswith("Errors and seconds: compiled and run now on NVIDIA H200; bytes: Recorded on a CPU")


@pytest.mark.skipif(not tritonmode.triton_available(), reason=tritonmode.TRITON_MISSING)
def test_with_triton_the_cases_run_now_and_match_the_recording():
    table, source = figures.interpreter_results()
    assert source.startswith("Run now in Triton's interpreter")
    rows = recorded.load()["rows"]
    assert table["bytes read"].tolist() == [r["bytes read"] for r in rows]
    assert table["bytes written"].tolist() == [r["bytes written"] for r in rows]
    assert table.close.all()
    assert table.max_abs_error_o.tolist() == pytest.approx([r["max_abs_error_o"] for r in rows], abs=1e-6)


def test_the_recording_is_valid_json_with_unique_cases():
    data = json.loads(recorded.RECORDING.read_text())
    assert len({tuple(r[c] for c in recorded.COLUMNS[:8]) for r in data["rows"]}) == len(data["rows"])


# --- charts and the widget ------------------------------------------------------------------------------------

def test_charts_draw_the_model_and_say_so():
    fig = figures.bytes_figure()
    assert len(fig.data) == 3 and charts.caption_of(fig).startswith("Model")
    table = figures.bytes_table()
    assert (table["naive bytes"] > table["FlashAttention bytes (no L2)"]).all()
    assert (table["FlashAttention bytes (no L2)"] > table["compulsory bytes"]).all()
    roof = figures.roofline_figure()
    assert len(roof.data) == 4 and charts.caption_of(roof).startswith("Model")
    tiles = figures.tiles_figure(512, 64, 64, True)
    assert "36 of 64 tiles computed" in tiles.layout.title.text  # 8 Q tiles: 1 + 2 + … + 8


def test_measured_points_are_labelled_measured(monkeypatch):
    measured = {"kernel_ms": 1.0, "sdpa_ms": 0.8, "kernel_tflops": 300.0, "sdpa_tflops": 375.0,
                "contract": "live"}
    monkeypatch.setattr(runtime, "device", lambda: type("D", (), {"name": "NVIDIA H200"})())
    fig = figures.roofline_figure(measured=measured)
    assert len(fig.data) == 6 and charts.caption_of(fig).startswith("Measured now")
    assert [t.y[0] for t in fig.data[-2:]] == [300.0, 375.0]


def test_the_explorer_builds_and_redraws_every_option_without_a_gpu():
    chart = figures.attention_explorer()
    assert set(chart.controls) == {"n", "d", "tiles", "causal"}
    assert chart.errors == 0
    for d in chart.controls["d"].options:
        for tiles in chart.controls["tiles"].options:
            fig = figures.explorer_figure(4096, d, tiles, True)
            assert charts.caption_of(fig).startswith("Model")
    bigger = [figures.explorer_figure(4096, 64, t, False).data[2].x[0] for t in (16, 128)]
    assert bigger[0] < bigger[1]  # FlashAttention's point moves right with the Q tile


def test_online_check_and_tables():
    assert figures.online_check().iloc[0, -2] < 1e-12
    memory = figures.extra_memory_table().set_index("n")
    assert memory.loc[65536, "naive: S and P (MB)"] > 1000 * memory.loc[65536, "FlashAttention: logsumexp (MB)"]


# --- GPU timing without a GPU, and its settings ---------------------------------------------------------------

def test_timing_refuses_without_a_gpu_in_one_line():
    with pytest.raises(NoGPU, match="needs a GPU"):
        timing.against_sdpa(4096, 64)


def test_timing_settings():
    assert timing.settings(64) == (128, 64, 4, 3)
    assert timing.settings(128) == (128, 64, 8, 3)  # 128×128 fp32 accumulator: 8 warps
    assert timing.settings(64, block_m=32, block_n=32)[:3] == (32, 32, 4)
    with pytest.raises(InvalidConfig, match="d must be one of"):
        timing.settings(96)
    with pytest.raises(InvalidConfig, match="block_m must be one of"):
        timing.settings(64, block_m=48)


@pytest.mark.skipif(not tritonmode.triton_available(), reason=tritonmode.TRITON_MISSING)
@pytest.mark.parametrize("options, words", [({"num_warps": 3}, "num_warps must be one of"),
                                            ({"num_stages": 0}, "num_stages must be None or an integer"),
                                            ({"num_stages": True}, "num_stages must be None or an integer")])
def test_launch_options_are_refused_before_launch(options, words):
    q, k, v = experiments.random_qkv(1, 1, 32, 16)
    with pytest.raises(InvalidConfig, match=words):
        experiments.flash_attention(q, k, v, **options)


NO_TRITON = '''# %%
import sys


class _NoTriton:  # as on macOS or Windows: no Triton wheel, so no module named triton
    def find_spec(self, name, path=None, target=None):
        if name == "triton" or name.startswith("triton."):
            raise ModuleNotFoundError("No module named 'triton'")


sys.meta_path.insert(0, _NoTriton())
from gpucourse.measure import tritonmode  # noqa: E402

assert not tritonmode.triton_available()

'''


def test_the_whole_lesson_runs_without_triton_and_shows_the_recording(tmp_path, monkeypatch):
    from gpucourse.tooling import plainrun

    lesson = tmp_path / LESSON
    shown = '\n# %%\nassert results_source.startswith("Recorded on a CPU by Triton"), results_source\n'
    lesson.write_text(NO_TRITON + (ROOT / "notebooks" / LESSON).read_text() + shown)
    monkeypatch.setenv("GPUCOURSE_MODE", "sim")
    done = plainrun.run(lesson, timeout_s=300)
    assert done.ok, done.detail
