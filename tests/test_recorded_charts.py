"""The lessons draw the course's own recordings (data/reference/<gpu>/ and <gpu>/quick/) without a GPU:
captioned with device, contract and date, never as the learner's GPU, with their spread; a missing
recording leaves the model and a plain sentence; where two GPUs recorded a sweep the learner picks."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from gpucourse.errors import CourseError
from gpucourse.lessons import coalescing, divergence, feeding, measuring, occupancy, races, reductions, tiling, warps
from gpucourse.measure import reference, runtime
from gpucourse.viz import charts

H200 = "nvidia-h200"
H200_QUICK = reference.REFERENCE_ROOT / H200 / reference.QUICK_FOLDER

# One chart per lesson that has a sweep (lesson 07's precision package is wired by its own helper).
FIGURES = {
    "00 measuring.async_pitfall": measuring.async_pitfall_figure,
    "01 warps.staircase": warps.staircase_figure,
    "02 divergence.fraction": divergence.fraction_figure,
    "03 coalescing.stride": coalescing.stride_figure,
    "04 tiling.matmul": tiling.gflops_figure,
    "04a reductions.sum": reductions.ladder_figure,
    "05 occupancy.memory_bound": lambda: occupancy.speed_figure("first_attempt"),  # the first attempt, as recorded
    "06 races.histogram": races.histogram_figure,
    "08 feeding.copy": feeding.copy_figure,
}


# charts whose model needs the loaded latency calibrated on a recording (gpucourse.measure.calibration)
NEEDS_CALIBRATION = {"05 occupancy.memory_bound"}


def _sweep(key: str) -> str:
    return key.split(" ", 1)[1]


def _quick_provenance() -> dict:
    return json.loads((H200_QUICK / reference.PROVENANCE_FILE).read_text())


def _ys(fig) -> list[tuple]:
    return [tuple(t.y) for t in fig.data if getattr(t, "y", None) is not None]


@pytest.fixture
def simulator():
    assert not runtime.is_gpu()


@pytest.mark.parametrize("key", FIGURES)
def test_each_lesson_chart_draws_the_committed_recording_with_its_contract(key, simulator, tmp_path, monkeypatch):
    meta = _quick_provenance()
    entry = meta["sweeps"][_sweep(key)]
    fig = FIGURES[key]()
    caption = charts.caption_of(fig)
    # device, contract, its GPU time a point and the date, all from the files (never typed here)
    assert f"measured by this course on an {meta['device']['device']} (not your GPU)" in caption, caption
    assert f"{entry['contract']} contract, 0.1 s of GPU time a point" in caption, caption
    assert entry["date"][:10] in caption and f"quick/{_sweep(key)}.csv" in caption, caption
    # the recording adds traces the chart without it lacks
    monkeypatch.setattr(reference, "REFERENCE_ROOT", tmp_path)
    without = FIGURES[key]()
    assert _ys(fig) != _ys(without)
    assert "measured by this course" not in charts.caption_of(without)


@pytest.mark.parametrize("key", FIGURES)
def test_without_a_recording_the_model_stays_with_a_plain_sentence(key, simulator, tmp_path, monkeypatch):
    monkeypatch.setattr(reference, "REFERENCE_ROOT", tmp_path)  # an empty data/reference/
    fig = FIGURES[key]()
    caption = charts.caption_of(fig)
    texts = caption + " ".join(str(a.text) for a in fig.layout.annotations)
    if key in NEEDS_CALIBRATION:  # no typed latency stands in for a missing calibration (facts.md F13)
        assert "No model drawn" in texts and "coalescing.stride" in texts, texts
    else:
        assert fig.data, key
    assert "measured by this course" not in caption
    assert "no recording" in texts.lower() or "Published by" in texts or "Model" in texts, texts


def test_the_stride_chart_draws_the_recorded_gbps_with_their_iqr(simulator):
    rec = reference.load("coalescing.stride")
    lead = "recorded on the course's NVIDIA H200 (quick)"
    trace = next(t for t in coalescing.stride_figure().data if t.name.startswith(lead))
    rows = rec.data.sort_values("stride")
    assert list(trace.y) == list(rows.gbps)
    expected = rows.gbps * rows.iqr_ms / rows.median_ms / 2
    assert list(trace.error_y.array) == pytest.approx(list(expected))
    assert "error bars: the IQR of the timings" in charts.caption_of(coalescing.stride_figure())
    assert "error bars" not in charts.caption_of(tiling.gflops_figure())  # no bars drawn there: none claimed


def test_spread_is_the_iqr_in_the_columns_units():
    rows = pd.DataFrame({"median_ms": [2.0, 4.0], "iqr_ms": [0.2, 0.4], "gbps": [100.0, 50.0]})
    assert reference.spread(rows, "gbps")["array"] == pytest.approx([5.0, 2.5])
    assert reference.spread(rows, "median_ms")["array"] == pytest.approx([0.1, 0.2])
    assert reference.spread(rows, "median_ms", scale=0.5)["array"] == pytest.approx([0.05, 0.1])
    assert reference.spread(rows.drop(columns="iqr_ms"), "gbps") is None  # nothing to show: no bars


def _two_gpus(tmp_path) -> str:
    """data/reference/ with the H200's quick recording and a second GPU's: a TEST FIXTURE, its numbers the
    H200's halved so that the two can be told apart (never committed, never a measurement)."""
    shutil.copytree(H200_QUICK, tmp_path / H200 / reference.QUICK_FOLDER)
    other = tmp_path / "test-gpu" / reference.QUICK_FOLDER
    shutil.copytree(H200_QUICK, other)
    meta = json.loads((other / reference.PROVENANCE_FILE).read_text())
    meta["device"]["device"] = "NVIDIA Test GPU"
    meta["sweeps"]["coalescing.stride"]["date"] = "2026-01-01T00:00:00+00:00"
    (other / reference.PROVENANCE_FILE).write_text(json.dumps(meta))
    data = pd.read_csv(other / "coalescing.stride.csv")
    data.assign(gbps=data.gbps / 2).to_csv(other / "coalescing.stride.csv", index=False)
    return "test-gpu"


def test_the_gpu_chosen_changes_the_drawn_trace_and_caption(simulator, tmp_path, monkeypatch):
    other = _two_gpus(tmp_path)
    monkeypatch.setattr(reference, "REFERENCE_ROOT", tmp_path)
    assert reference.gpus() == [H200, other]
    default = coalescing.stride_figure()
    assert "NVIDIA H200" in charts.caption_of(default)  # the newest recording by default
    with reference.chosen(other):
        picked = coalescing.stride_figure()
    assert "NVIDIA Test GPU" in charts.caption_of(picked)
    assert _ys(picked) != _ys(default)
    with reference.chosen("a-gpu-with-no-recording"):  # a GPU without this sweep: the default, captioned
        assert charts.caption_of(coalescing.stride_figure()) == charts.caption_of(default)


def test_the_chart_widget_offers_the_choice_and_redraws(simulator, tmp_path, monkeypatch):
    other = _two_gpus(tmp_path)
    monkeypatch.setattr(reference, "REFERENCE_ROOT", tmp_path)
    chart = coalescing.stride_widget(threaded=False)
    assert chart.recorded_gpu is not None and chart.recorded_gpu.value is None  # None: the newest
    assert ("NVIDIA Test GPU", other) in chart.recorded_gpu.options
    before = _ys(chart.figure)
    chart.recorded_gpu.value = other
    assert "NVIDIA Test GPU" in charts.caption_of(chart.figure) and _ys(chart.figure) != before


def test_one_gpu_or_a_gpu_here_means_no_choice(simulator, tmp_path, monkeypatch):
    assert coalescing.stride_widget(threaded=False).recorded_gpu is None  # only the H200 recorded
    _two_gpus(tmp_path)
    monkeypatch.setattr(reference, "REFERENCE_ROOT", tmp_path)
    monkeypatch.setattr(runtime, "is_gpu", lambda: True)  # on a GPU the live measurement is the chart
    from gpucourse.viz import widgets

    assert widgets.recorded_gpu_choice() is None


def test_a_full_recording_comes_before_the_same_gpus_quick_one(tmp_path):
    shutil.copytree(H200_QUICK, tmp_path / H200 / reference.QUICK_FOLDER)
    meta = _quick_provenance()
    meta["device"]["contract"] = "full"
    meta["sweeps"] = {"coalescing.stride": {**meta["sweeps"]["coalescing.stride"], "contract": "full"}}
    (tmp_path / H200 / reference.PROVENANCE_FILE).write_text(json.dumps(meta))
    shutil.copy(H200_QUICK / "coalescing.stride.csv", tmp_path / H200)
    rec = reference.load("coalescing.stride", root=tmp_path)
    assert rec.contract == "full" and "full contract, 0.5 s of GPU time a point" in rec.caption()
    assert reference.load("coalescing.offset", root=tmp_path).quick


def test_quick_recordings_stay_in_their_folder_and_say_so(tmp_path):
    shutil.copytree(H200_QUICK, tmp_path / H200)  # a quick recording where full ones go
    with pytest.raises(CourseError, match="quick validation recording"):
        reference.load("coalescing.stride", root=tmp_path)
    shutil.rmtree(tmp_path / H200)
    shutil.copytree(H200_QUICK, tmp_path / H200 / reference.QUICK_FOLDER)
    path = tmp_path / H200 / reference.QUICK_FOLDER / reference.PROVENANCE_FILE
    meta = json.loads(path.read_text())
    meta["device"]["contract"] = "full"
    for entry in meta["sweeps"].values():
        entry["contract"] = "full"
    path.write_text(json.dumps(meta))  # quick/ whose provenance does not say quick
    with pytest.raises(CourseError, match="does not say contract 'quick'"):
        reference.load("coalescing.stride", root=tmp_path)


def test_a_recorded_time_is_labelled_recorded_not_modelled(simulator):
    """08's fusion chart told recorded from modelled times by the caption's words; the caption changed once."""
    names = [t.name for t in feeding.fusion_figure().data]
    assert "time, ms (recorded)" in names and not any("model" in n for n in names)


def test_a_recording_without_the_rows_asked_for_says_so(simulator):
    caption = charts.caption_of(divergence.sort_pays_figure(density=1 / 32))  # the quick recording kept 0.25
    assert "the course's recording" in caption and "has no rows at density 0.0312 (it has 0.25)" in caption
    assert "no recording of this sweep yet" not in caption


def test_the_work_per_thread_chart_draws_the_rungs_recording_or_says_there_is_none(simulator, tmp_path, monkeypatch):
    """Issue 48: lesson 03's work-per-thread chart reads sweep coalescing.work where a GPU recorded it."""
    assert "coalescing.work" in reference.load_all_sweeps()
    monkeypatch.setattr(reference, "REFERENCE_ROOT", tmp_path)
    shutil.copytree(H200_QUICK, tmp_path / H200 / reference.QUICK_FOLDER)  # the model's calibration, no rungs
    without = coalescing.work_figure(4, 8)  # no recording of the rungs: the model, and it says so
    texts = " ".join(str(a.text) for a in without.layout.annotations)
    assert "no recording of the rungs yet" in texts and "coalescing.work" in texts, texts
    # a synthetic full recording (tmp_path only: data/reference/ holds GPU recordings alone)
    meta = _quick_provenance()
    meta["device"]["contract"] = "full"
    meta["sweeps"] = {"coalescing.work": {"lesson": "03_coalescing", "date": "2026-01-02T00:00:00", "rows": 4,
                                          "contract": "full", "command": "make record", "methods": "per row"}}
    (tmp_path / H200 / reference.PROVENANCE_FILE).write_text(json.dumps(meta))
    rows = pd.DataFrame({"elements_per_thread": [1, 4, 1, 4], "bytes_per_load": [4, 4, 8, 8],
                         "bytes_in_flight_per_sm": [8192, 32768, 16384, 65536], "median_ms": [1.0, 0.8, 0.9, 0.7],
                         "iqr_ms": [0.01] * 4, "n_samples": [25] * 4, "gbps": [3000.0, 3700.0, 3400.0, 3900.0],
                         "copy_ceiling_gbps": [4200.0] * 4})
    rows.to_csv(tmp_path / H200 / "coalescing.work.csv", index=False)
    fig = coalescing.work_figure(4, 8)
    trace = next(t for t in fig.data if "the rungs" in (t.name or ""))
    assert list(trace.y) == list(rows.gbps) and trace.name.startswith("recorded on")
    caption = charts.caption_of(fig)
    assert "measured by this course on an" in caption and "2026-01-02" in caption, caption
    assert "no recording" not in " ".join(str(a.text) for a in fig.layout.annotations)
