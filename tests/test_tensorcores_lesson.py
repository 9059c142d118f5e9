"""Lesson 11 "Tensor cores from Python": its recordings and fallback, its figures and widget, and the
figures its prose states, each computed from its source (the recording, the microscope, the published data).

Without Triton (macOS, Windows; here: ``tritonmode.triton_available`` monkeypatched to False) every call the
lesson makes must read the committed CPU recordings and say so; with Triton the recordings must agree with
what the compiler makes now (a Triton upgrade that changes them fails here: run tools/record_tensorcores.py).
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

from gpucourse.errors import InvalidConfig
from gpucourse.lessons.tensorcores import compiled, experiments, figures, model, recordings
from gpucourse.measure import tritonmode
from gpucourse.microscope import fragments
from gpucourse.viz.charts import caption_of

ROOT = Path(__file__).resolve().parents[1]
LESSON = ROOT / "notebooks" / "11_tensor_cores.py"
NOTES = ROOT / "instructor" / "11_tensor_cores.md"
HAS_TRITON = importlib.util.find_spec("triton") is not None
needs_triton = pytest.mark.skipif(not HAS_TRITON, reason="Triton ships Linux wheels only (none on macOS/Windows)")


def words(path: Path) -> str:
    text = path.read_text()
    if path.suffix == ".py":
        text = re.sub(r"^# ?", "", text, flags=re.MULTILINE)
    return " ".join(text.split())


@pytest.fixture
def without_triton(monkeypatch):
    """As on macOS/Windows: the one probe says no, and nothing may compile or interpret."""
    monkeypatch.setattr(tritonmode, "triton_available", lambda: False)

    def refuse(*args, **kwargs):
        raise AssertionError("compiled or interpreted although Triton is missing")

    monkeypatch.setattr(compiled, "compile_for", refuse)
    monkeypatch.setattr(experiments, "run_interpreted", refuse)


# --- the recordings ----------------------------------------------------------------------------------------

def test_the_recordings_have_their_provenance_and_hold_every_widget_configuration():
    for provenance in (recordings.recorded_compiled()[0], recordings.recorded_interpreted()[0]):
        assert {"command", "triton", "date", "python", "platform", "what"} <= set(provenance)
        assert provenance["command"] == recordings.RECORD_COMMAND
        assert "not a GPU measurement" in provenance["what"]
    held = recordings.recorded_compiled()[1]
    for config in recordings.recorded_configs():
        assert recordings._config_key(*config) in held
    assert set(recordings.recorded_interpreted()[1]) == set(recordings.INTERPRETED_RUNS)
    assert not (ROOT / "data" / "reference" / "tensorcores").exists()  # CPU recordings never pass as GPU data


def test_without_triton_the_lesson_reads_the_recordings(without_triton):
    facts, source = recordings.compiled_facts(90)
    assert source.startswith("recording (CPU, no GPU): Triton ") and recordings.RECORD_COMMAND in source
    assert facts.sass["HGMMA"] > 0 and facts.cc == 90
    table = figures.generations_table()
    assert table["from"].str.startswith("recording").all()
    assert list(table["GPU"]) == [g.name for g in model.GENERATIONS.values()]
    check = recordings.interpreted_check(100, 72, 64, "float16")
    assert check.matches and check.source.startswith("recording")
    line = recordings.mode_line()
    assert tritonmode.TRITON_MISSING in line and "recording" in line
    fig = figures.explorer_figure(80, (128, 256, 64), 3, 4)
    assert caption_of(fig).startswith("Compiled, not timed: recording (CPU, no GPU)")


def test_without_triton_an_unrecorded_configuration_says_which_are(without_triton):
    with pytest.raises(InvalidConfig, match="not in the recording.*tiles 64×64×32"):
        recordings.compiled_facts(90, tile=(32, 32, 32))
    with pytest.raises(InvalidConfig, match="not in the recording"):
        recordings.interpreted_check(64, 64, 64, "float16")


@pytest.mark.parametrize("triton_here", [True, False])
@pytest.mark.parametrize(("call", "words_"), [
    (lambda: recordings.compiled_facts(75), "cc must be one of 80, 90, 100"),
    (lambda: recordings.compiled_facts("sm_89"), "cc must be one of"),
    (lambda: recordings.compiled_facts(90, "float64"), "dtype must be one of"),
    (lambda: recordings.compiled_facts(90, tile=(128, 100, 64)), "powers of two"),
    (lambda: recordings.compiled_facts(90, num_warps=3), "num_warps"),
    (lambda: recordings.interpreted_check(100, 72, 64, "bfloat16"), "bfloat16 is refused"),
    (lambda: recordings.interpreted_check(100, 72, 64, "int8"), "dtype must be one of float16, float32"),
    (lambda: recordings.interpreted_check(512, 72, 64, "float16"), "keep M, N, K"),
    (lambda: experiments.measure_against_torch(n=4000), "multiple of the largest tile side"),
    (lambda: experiments.measure_against_torch(dtype="float32"), "float16 or bfloat16"),
    (lambda: experiments.measure_against_torch(tile=(128, 128, 48)), "powers of two"),
])
def test_bad_input_is_one_clear_error_before_anything_runs(monkeypatch, triton_here, call, words_):
    monkeypatch.setattr(tritonmode, "triton_available", lambda: triton_here)

    def refuse(*args, **kwargs):
        raise AssertionError("launched or compiled before the input was checked")

    monkeypatch.setattr(compiled, "compile_for", refuse)
    monkeypatch.setattr(experiments, "run_interpreted", refuse)
    monkeypatch.setattr(recordings, "recorded_compiled", refuse)
    monkeypatch.setattr(recordings, "recorded_interpreted", refuse)
    with pytest.raises(InvalidConfig, match=words_):
        call()


@needs_triton
@pytest.mark.parametrize("cc", [80, 90, 100])
def test_the_recording_is_what_the_compiler_makes_now(cc):
    live = asdict(compiled.compile_for(cc))
    recorded = asdict(recordings.recorded_compiled()[1][recordings._config_key(cc, "float16", (128, 128, 64), 4, 3)])
    for row in (live, recorded):
        row.pop("seconds")
    assert live == recorded, "the recording is stale: run python tools/record_tensorcores.py"


@needs_triton
def test_the_interpreter_check_is_what_the_recording_says():
    live = recordings.interpreted_check(100, 72, 64, "float32")
    recorded = recordings.recorded_interpreted()[1][(100, 72, 64, "float32")]
    assert live.matches and recorded.matches
    assert live.max_abs_error == pytest.approx(recorded.max_abs_error, rel=0.5, abs=1e-6)
    assert live.source.startswith("run now in Triton")


def test_a_wrong_result_does_not_match():
    check = recordings.InterpretedCheck(100, 72, 64, "float16", 0.5, 30.0, "3.7.1", 0.1)
    assert not check.matches


# --- the figures the prose states --------------------------------------------------------------------------

def test_instruction_counts_by_hand_equal_the_compiled_sass():
    held = recordings.recorded_compiled()[1]
    for tile in recordings.WIDGET_TILES:
        for stages in (2, 3, 4):
            sm80 = held[recordings._config_key(80, "float16", tile, 4, stages)]
            sm90 = held[recordings._config_key(90, "float16", tile, 4, stages)]
            assert sm80.sass["HMMA"] == figures.hmma_per_warp(tile, 4), (tile, stages)
            assert sm90.sass["HGMMA"] == figures.wgmma_per_warpgroup(tile), (tile, stages)
    assert figures.hmma_per_warp((128, 128, 64)) == 128 and figures.wgmma_per_warpgroup((128, 128, 64)) == 8
    with pytest.raises(InvalidConfig, match="N = 256"):
        figures.wgmma_per_warpgroup((128, 512, 64))


def test_what_the_lesson_says_each_generation_compiles_to():
    held = recordings.recorded_compiled()[1]
    default = {cc: held[recordings._config_key(cc, "float16", (128, 128, 64), 4, 3)] for cc in model.GENERATIONS}
    assert default[90].sass["HGMMA"] < default[80].sass["HMMA"]  # "fewer, larger instructions"
    assert default[80].registers >= 250  # "at or near the 255 a thread can have"
    assert [f.tmem_columns > 0 for f in default.values()] == [False, False, True]  # TMEM only on sm_100
    assert "LDTM" in default[100].sass and "SYNCS" in default[100].sass
    assert all("UTMALDG" not in f.sass for f in held.values())  # "what the table does not show is TMA"
    for cc in model.GENERATIONS:  # §6: 128×256×64 spills with 4 warps, not with 8, on every generation
        for stages in recordings.WIDGET_STAGES[1:]:
            assert held[recordings._config_key(cc, "float16", (128, 256, 64), 4, stages)].stack_bytes > 0
            assert held[recordings._config_key(cc, "float16", (128, 256, 64), 8, stages)].stack_bytes == 0


def test_the_typed_numbers_in_the_lesson_and_notes():
    lesson, notes = words(LESSON), words(NOTES)
    tile = recordings.DEFAULT_CONFIG
    assert (f"a {' × '.join(map(str, tile['tile']))} tile, {tile['num_warps']} warps and {tile['num_stages']} "
            "stages") in lesson
    m, n, k, _ = recordings.INTERPRETED_RUNS[0]
    assert f"({m} × {n} × {k} below" in lesson
    assert f"{figures.MAX_REGISTERS_PER_THREAD} a thread can have" in lesson
    assert f"is {128 * 256 // (4 * 32)} registers each" in lesson
    assert f"= **{figures.hmma_per_warp((128, 128, 64))}** `HMMA`" in notes
    assert f"= **{figures.wgmma_per_warpgroup((128, 128, 64))}** `HGMMA`" in notes
    assert f"= **{128 * 256 // (4 * 32)}** fp32 registers" in notes
    assert f"is {figures.matmul_intensity(4096):.0f} FLOP/byte" in notes
    held = figures.lane_elements(5, "a")
    rows, cols = sorted({r for _, r, _ in held}), sorted({c for _, _, c in held})
    assert f"rows **{rows[0]} and {rows[1]}**, columns **{', '.join(map(str, cols[:-1]))}, {cols[-1]}**" in notes


def test_the_fragment_picture_is_the_microscopes_table():
    fig = figures.fragment_figure("a")
    heat = fig.data[0]
    mma = fragments.mma_shape()
    assert np.array_equal(np.asarray(heat.z), mma.owners("a")[..., 0] // 4)  # coloured by group
    assert heat.text[1][2] == "T5 a0"  # lane 5 (group 1, thread 1) holds A[1, 2] in slot a0
    assert figures.lane_elements(5, "a")[0] == (0, 1, 2)
    assert caption_of(fig).startswith("Counted by the microscope: the PTX ISA's fragment table")
    with pytest.raises(InvalidConfig):
        figures.fragment_figure("x")


def test_the_roofs_come_from_the_published_tables():
    from gpucourse.viz import cited

    table = figures.roofs_table()
    assert list(table["max achievable bf16 TFLOP/s"]) == [cited.mamf("NVIDIA A100 SXM", "bf16"),
                                                          cited.mamf("NVIDIA H100 SXM", "bf16"),
                                                          cited.mamf("NVIDIA B200 SXM", "bf16")]
    hopper = table.iloc[1]
    assert hopper["streaming GB/s"] == cited.stream_best_gbps("NVIDIA H200")
    assert hopper["ridge point (FLOP/byte)"] == round(hopper["max achievable bf16 TFLOP/s"] * 1e3
                                                      / hopper["streaming GB/s"])
    assert np.isnan(table.iloc[2]["streaming GB/s"])  # no published Blackwell bandwidth: no slope invented
    assert figures.matmul_intensity(4096) == 1024  # 2n³ / (2·n²·2 + n²·4) = n/4
    assert (table["ridge point (FLOP/byte)"].dropna() < figures.matmul_intensity(4096)).all()
    caption = caption_of(figures.roofline_figure())
    assert "Machine Learning Engineering Open Book" in caption and "gpu-benches" in caption
    assert caption.startswith("Published, not your GPU")


# --- the widget --------------------------------------------------------------------------------------------

def test_the_explorer_reads_every_configuration_it_offers_from_the_recording(without_triton):
    chart = figures.explorer_widget()
    assert chart.errors == 0 and chart.runs == 1
    for name, control in chart.controls.items():
        for _label, value in (control.options if isinstance(control.options[0], tuple) else
                              [(v, v) for v in control.options]):
            control.value = value
            chart.wait(60)
            assert chart.errors == 0, (name, value, chart.status.value)
    assert chart.runs > 1


def test_the_explorer_bars_are_the_compiled_facts_and_occupancy(without_triton):
    info = figures.explorer_facts(90, (128, 128, 64), 3, 4)
    fig = figures.explorer_figure(90, (128, 128, 64), 3, 4)
    bars = fig.data[0]
    assert list(bars.y) == pytest.approx([info["shared % of SM"], info["registers % of max"],
                                          info["occupancy"].occupancy_pct])
    facts = info["facts"]
    assert info["shared % of SM"] == pytest.approx(100 * facts.shared_bytes / 232448)
    assert f"{facts.shared_bytes // 1024} KiB" in bars.text[0]
    assert "HGMMA ×8" in fig.layout.title.text
    assert figures.stage_bytes((128, 128, 64)) == 32 * 1024


# --- the whole lesson, as on macOS/Windows ---------------------------------------------------------------

def test_the_lesson_runs_from_the_recordings_without_triton(without_triton, monkeypatch):
    """Every code cell of the lesson, in this process, with Triton reported missing: nothing compiles or
    interprets (the fixture refuses it), everything shown comes from the recordings and says so."""
    import builtins
    import contextlib
    import io

    from gpucourse.tooling import plainrun

    monkeypatch.setattr(builtins, "display", print, raising=False)
    namespace: dict = {"__name__": "__lesson__"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for index, cell in enumerate(plainrun.code_cells(LESSON.read_text())):
            exec(compile(cell, f"{LESSON.name} cell {index}", "exec"), namespace)  # noqa: S102
    printed = out.getvalue()
    assert tritonmode.TRITON_MISSING in printed
    assert "(recording (CPU, no GPU): Triton" in printed  # the interpreter checks, labelled
    assert namespace["table"]["from"].str.startswith("recording").all()
    assert namespace["explorer"].errors == 0


def test_on_a_gpu_without_triton_the_explorer_draws_the_recording_and_measures_nothing(without_triton, monkeypatch):
    from gpucourse.measure import runtime

    monkeypatch.setattr(runtime, "is_gpu", lambda: True)
    monkeypatch.setattr(experiments, "measure_against_torch",
                        lambda **kwargs: pytest.fail("measured although Triton is missing"))
    fig = figures.explorer_figure(90, (128, 128, 64), 3, 4)
    assert len(fig.data) == 1


def test_on_a_gpu_the_explorer_adds_the_measured_bar(monkeypatch):
    from types import SimpleNamespace

    from gpucourse.measure import runtime

    monkeypatch.setattr(tritonmode, "triton_available", lambda: True)
    monkeypatch.setattr(recordings, "compiled_facts", lambda *a, **k: (
        recordings.recorded_compiled()[1][recordings._config_key(*a[:1], a[1], a[2], a[3], a[4])], "recording"))
    monkeypatch.setattr(runtime, "is_gpu", lambda: True)
    monkeypatch.setattr(runtime, "device", lambda: SimpleNamespace(name="NVIDIA H200", compute_capability=(9, 0)))
    fake = (SimpleNamespace(measured=True, tflops=600.0), SimpleNamespace(measured=True, tflops=750.0))
    monkeypatch.setattr(experiments, "measure_against_torch", lambda **kwargs: fake)
    monkeypatch.setattr(figures.charts, "set_source", lambda fig, text: fig.layout.update(meta={"caption": text}))
    fig = figures.explorer_figure(90, (128, 128, 64), 3, 4)
    assert fig.data[1].y[0] == pytest.approx(80.0) and "600 of 750 TFLOP/s" in fig.data[1].text[0]
    assert fig.layout.meta["caption"].startswith("Measured now on NVIDIA H200")
