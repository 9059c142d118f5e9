"""Lesson 05's library: kernels (in the simulator), charts, the SM picture, widgets, sweeps' CPU side."""

import html

import numpy as np
import pandas as pd
import pytest

from gpucourse.errors import InvalidConfig, NoGPU
from gpucourse.lessons import occupancy as ol
from gpucourse.lessons.occupancy.calculator import LIMITERS, occupancy
from gpucourse.measure import calibration, ptxinfo, reference, runtime
from gpucourse.viz import charts

KB = 1024
sim_only = pytest.mark.skipif(runtime.is_gpu(), reason="checks the simulator-mode behaviour")


@pytest.fixture
def no_ptxas(monkeypatch, tmp_path):
    """Resource usage answers "unknown" (no toolchain), without touching the user's cache."""
    monkeypatch.setenv(ptxinfo.PTXAS_ENV, "none")
    monkeypatch.setattr(ptxinfo, "CACHE_DIR", tmp_path)


# --- the kernels compute what they claim (small sizes: the simulator is slow) ---


def test_copy_kernels_copy_everything():
    src = np.arange(300, dtype=np.float32)
    dst = np.full(300, np.nan, dtype=np.float32)
    ol.copy_kernel[5, 64](dst, src)
    assert np.array_equal(dst, src)
    dst[:] = np.nan
    ol.copy_ilp4_kernel[3, 32](dst, src)  # 3 × 32 threads × 4 elements ≥ 300
    assert np.array_equal(dst, src)


def test_fma_kernels_match_their_reference():
    for kernel, ilp in ((ol.fma_kernel, 1), (ol.fma_ilp4_kernel, 4)):
        out = np.zeros(32, dtype=np.float32)
        kernel[1, 32](out, np.int32(40))
        np.testing.assert_allclose(out[:16], ol._fma_reference(40, ilp), rtol=1e-5)
        np.testing.assert_allclose(out[16:], ol._fma_reference(40, ilp), rtol=1e-5)  # i & 15 repeats


def test_accumulators_and_block_sum():
    x = np.arange(40, dtype=np.float32)
    out = np.zeros(32, dtype=np.float32)
    ol.accumulators_kernel[1, 32](out, x, np.int32(0))
    expected = [sum(x[(i + k) % 40] for k in range(ol.ACCUMULATORS)) for i in range(32)]
    np.testing.assert_allclose(out, expected)
    x = np.arange(256, dtype=np.float32)
    sums = np.zeros(2, dtype=np.float32)
    ol.block_sum_kernel[2, 128](sums, x)
    assert list(sums) == [x[:128].sum(), x[128:].sum()]


def test_kernel_registry():
    assert set(ol.KERNELS) == {"copy_resident", "copy_resident_ilp4", "copy", "copy_ilp4", "fma", "fma_ilp4",
                               "accumulators", "block_sum"}
    with pytest.raises(InvalidConfig, match="kernel must be one of"):
        ol.lesson_kernel("nope")
    assert ol.lesson_cc() == (9, 0) or runtime.is_gpu()


# --- charts ---


def test_sweep_axis_agrees_with_the_calculator():
    data = ol.sweep_axis("registers_per_thread", 128, 37, 0, (9, 0))
    row = data[data.x == 37].iloc[0]
    assert row.occupancy_pct == 75.0 and row.active_blocks == 12 and row.limiter == "registers"
    blocks = ol.sweep_axis("threads_per_block", 128, 116, 0, (9, 0))
    # 116 registers → rpw 3840 → 4 warps per sub-partition → 16 warps: a 20-warp block cannot launch.
    assert blocks.set_index("x").limiter[640] == ol.CANNOT_LAUNCH
    shared = ol.sweep_axis("shared_bytes_per_block", 256, 32, 0, (9, 0))
    assert shared.x.max() == 227 and shared.x.iloc[1] == 0.5  # KB on the axis
    with pytest.raises(InvalidConfig):
        ol.sweep_axis("warps", 128, 32)


def test_limiter_styles_never_rely_on_colour_alone():
    names = list(LIMITERS) + [" + ".join(t) for t in ol._tie_order()] + [ol.CANNOT_LAUNCH]
    styles = [ol.limiter_style(n) for n in names]
    singles = styles[:4] + styles[-1:]
    assert len({s[1] for s in singles}) == len(singles), "each single limiter has its own marker shape"
    assert len({s[0] for s in singles}) == len(singles)
    assert all(symbol for _, symbol in styles)


def test_three_classic_charts():
    fig = ol.occupancy_charts(128, 37, 0, (9, 0), registers_source="typed")
    assert "75.0 %" in fig.layout.title.text and "registers" in fig.layout.title.text
    assert charts.caption_of(fig).startswith("Model")
    xaxes = [fig.layout[a].title.text for a in ("xaxis", "xaxis2", "xaxis3")]
    assert xaxes == ["threads per block", "registers per thread", "shared memory per block (KB)"]
    marker_traces = [t for t in fig.data if t.mode == "markers"]
    by_name = {}
    for t in marker_traces:
        by_name.setdefault(t.name, set()).add((t.marker.color, t.marker.symbol))
    assert all(len(v) == 1 for v in by_name.values()), "a limiter looks the same in every panel"
    assert len({next(iter(v))[1] for v in by_name.values()}) == len(by_name), "shapes differ per limiter"
    assert sum(t.showlegend is not False for t in marker_traces) == len(by_name)  # one legend entry each
    table = charts.data_table(fig)
    assert len(table) > 500 and {"series", "x", "y"} <= set(table.columns)


def test_single_chart_and_cannot_launch_title():
    fig = ol.occupancy_chart("shared_bytes_per_block", 128, 32, 100 * KB, (8, 6))
    assert "cannot launch" in fig.layout.title.text
    assert charts.caption_of(fig).startswith("Model")


def test_sm_picture_accounts_for_every_register_and_byte():
    fig = ol.sm_picture(128, 37, 20000, (8, 6))
    r = occupancy(128, 37, 20000, (8, 6))
    assert r.summary() in fig.layout.title.text
    bars = [t for t in fig.data if t.type == "bar"]
    per_sp = np.zeros(4)
    for t in bars:
        if t.orientation == "h":
            per_sp += np.asarray(t.x, dtype=float)
    assert list(per_sp) == [16384] * 4
    shared_kb = sum(float(t.y[0]) for t in bars if t.orientation != "h")
    assert shared_kb == pytest.approx(r.shared_per_sm_bytes / KB)
    slots = next(t for t in fig.data if t.type == "scatter")
    assert sum(1 for s in slots.text if s) == r.active_warps
    assert len(slots.text) == r.max_warps
    assert {p for t in bars for p in [t.marker.pattern.shape]} >= {"", "/", "."}  # patterns, not colour alone


def test_explorer_with_a_typed_register_count(no_ptxas):
    fig = ol.explorer_figure(ol.TYPED, 256, "none", 64, 0, cc=(9, 0))
    assert "64 typed by you" in fig.layout.title.text
    assert "50.0 %" in fig.layout.title.text
    capped = ol.explorer_figure(ol.TYPED, 256, 32, 64, 0, cc=(9, 0))
    assert "100.0 %" in capped.layout.title.text  # max_registers=32 applies to a typed count too


def test_explorer_without_a_toolchain_uses_the_typed_number(no_ptxas):
    fig = ol.explorer_figure("accumulators", 128, "none", 40, 8, cc=(9, 0))
    assert "unknown" in fig.layout.title.text and "using your 40" in fig.layout.title.text


@pytest.mark.skipif(ptxinfo.find_ptxas() is None, reason="no ptxas (cuda-toolkit wheel)")
def test_explorer_uses_the_compilers_registers():
    free = ol.explorer_figure("accumulators", 128, "none", 40, 0, cc=(9, 0))
    capped = ol.explorer_figure("accumulators", 128, 64, 40, 0, cc=(9, 0))
    assert "ptxas" in free.layout.title.text and "maxrregcount=64" in capped.layout.title.text
    assert "spills" in capped.layout.title.text
    assert "50.0 %" in capped.layout.title.text  # 64 registers → rpw 2048 → 32 warps


def test_explorer_widget_runs_and_reacts(no_ptxas):
    chart = ol.occupancy_explorer(cc=(9, 0), threaded=False)
    assert chart.runs == 1 and chart.errors == 0
    chart.controls["kernel"].value = ol.TYPED
    chart.controls["threads_per_block"].value = 256
    chart.controls["dynamic_shared_kb"].value = 100
    chart.wait()
    assert chart.runs == 4 and chart.errors == 0
    assert "2 blocks" in chart.figure.layout.title.text  # 100 KB + 1 KB → 233472 / 103424 = 2
    chart.show_data.value = True
    assert "<table" in chart.table.value


def test_calculator_widget_runs(no_ptxas):
    chart = ol.calculator_widget(cc=(7, 0), threaded=False)
    chart.controls["registers_per_thread"].value = 37
    chart.controls["threads_per_block"].value = 320
    assert chart.errors == 0 and "62.5 %" in chart.figure.layout.title.text


# --- GPU sweeps: their CPU-side behaviour ---


def test_padding_levels_hand_checked():
    levels = ol.padding_levels(12, 0, 64, (9, 0))
    got = {r.active_blocks: dynamic for dynamic, r in levels}
    # 4 blocks: the per-block allocation must exceed 233472 / 5 = 46694.4 → 46720 (a multiple of 128)
    # → padding 46720 − 1024 reserved = 45696. 32 blocks: no padding at all.
    assert got[4] == 45696 and got[32] == 0
    assert [round(r.occupancy_pct, 2) for _, r in levels] == [12.5, 18.75, 25.0, 37.5, 50.0, 75.0, 100.0]
    assert all(d <= ol.MAX_PADDING_BYTES for d, _ in levels)
    for dynamic, r in levels:
        assert occupancy(64, 12, dynamic, (9, 0)).active_blocks == r.active_blocks


def test_sweeps_are_registered():
    for name in ("occupancy.driver", "occupancy.memory_resident", "occupancy.memory_bound",
                 "occupancy.compute_unrolled"):
        assert reference.SWEEPS[name].lesson == "05_occupancy"
    assert "gpucourse.lessons.occupancy" in reference.SWEEP_MODULES


@sim_only
def test_gpu_only_functions_refuse_in_the_simulator():
    with pytest.raises(NoGPU):
        ol.driver_comparison()
    with pytest.raises(NoGPU):
        ol.measure_speed("memory")
    with pytest.raises(NoGPU):
        ol.driver_blocks("copy", 128)


@sim_only
def test_speed_and_driver_figures_without_a_recording_say_so(monkeypatch):
    real = reference.load
    swept = {*ol.figures.SPEED_SWEEPS.values(), "occupancy.driver"}
    monkeypatch.setattr(reference, "load", lambda name, *a, **k: None if name in swept else real(name, *a, **k))
    for fig in (ol.speed_figure("compute"), ol.speed_figure("first_attempt"), ol.driver_comparison_figure()):
        assert charts.caption_of(fig).startswith("No data")
        assert "Model and counts only, because" in charts.caption_of(fig)
        assert any("No " in a.text for a in fig.layout.annotations if a.name != "source")
        # only the model is drawn: nothing measured is invented
        assert all(t.name.startswith("model: ") for t in fig.data)
    assert len(ol.driver_comparison_figure().data) == 0
    # the memory-bound sweep: the model only, and why gpu-stream's published sweeps are not its stand-in (W2)
    memory = ol.speed_figure("memory")
    names = [t.name for t in memory.data]
    assert names == ["model: copy_resident (ILP 1)", "model: copy_resident_ilp4 (ILP 4)"]
    caption = charts.caption_of(memory)
    assert caption.startswith("No data") and "Measured" not in caption
    for difference in ("one float64 element per thread", "131,073 to 4.2 M blocks", "256 B per warp load",
                       "block turnover"):
        assert difference in caption, difference
    with pytest.raises(InvalidConfig):
        ol.speed_figure("io")


@sim_only
@pytest.mark.parametrize("kind", ["memory", "first_attempt"])
def test_the_chart_draws_the_model_the_text_states(kind):
    """W1: without a GPU the dashed lines are ``lesson_speed_model`` (what the prediction cell prints), with or
    without a recording of the sweep; before, the chart fell back to an assumed 600 ns and the datasheet."""
    stated = ol.lesson_speed_model("memory")
    fig = ol.speed_figure(kind)
    notes = html.unescape(" ".join(a.text for a in fig.layout.annotations if a.name == "model").replace("<br>", " "))
    assert stated.assumptions in notes
    shown = [t for t in fig.data if t.name.startswith("model: ")]
    warps = np.arange(2, stated.max_warps + 1, 2)
    for trace, ilp in zip(shown, (1, 4), strict=True):
        assert np.allclose(trace.y, stated.relative_speed(warps, ilp))


@sim_only
def test_without_anything_to_calibrate_on_the_chart_draws_no_model_and_says_why(monkeypatch):
    monkeypatch.setattr(reference, "load", lambda name, *a, **k: None)
    fig = ol.speed_figure("memory")
    assert fig.data == () or all(not t.name.startswith("model: ") for t in fig.data)
    notes = " ".join(a.text for a in fig.layout.annotations if a.name == "model")
    assert "No model drawn" in notes and "coalescing.stride" in notes
    assert [t.name for t in ol.speed_figure("compute").data][0].startswith("model: ")  # FMAs need no latency


def _fake_recording(name, frame):
    return reference.Recording(
        name,
        "nvidia-h200",
        frame,
        {"device": {"device": "NVIDIA H200"}, "sweeps": {name: {"date": "2026-10-01T00:00:00"}}},
        reference.REFERENCE_ROOT / "nvidia-h200" / f"{name}.csv",
    )


@sim_only
def test_speed_figure_draws_a_recording(monkeypatch):
    frame = pd.DataFrame(
        {
            "kernel": ["copy", "copy", "copy_ilp4", "copy_ilp4"],
            "ilp": [1, 1, 4, 4],
            "threads_per_block": 64,
            "dynamic_shared_bytes": [45696, 0, 45696, 0],
            "occupancy_pct": [12.5, 100.0, 12.5, 100.0],
            "median_ms": [1.0, 0.2, 0.3, 0.2],
            "gbps": [1, 2, 3, 4],
        }
    )
    real = reference.load  # the fake stands in for the sweep; the calibration stays the course's recording
    monkeypatch.setattr(reference, "load", lambda name, *a, **k: (
        _fake_recording(name, frame) if name.startswith("occupancy.") else real(name, *a, **k)))
    fig = ol.speed_figure("first_attempt")  # the one-element recording, drawn as what it is
    assert charts.caption_of(fig).startswith("Recorded") and "NVIDIA H200" in charts.caption_of(fig)
    assert "first attempt" in fig.layout.title.text
    assert [t.name for t in fig.data] == [
        "copy (ILP 1)", "copy_ilp4 (ILP 4)", "model: copy (ILP 1)", "model: copy_ilp4 (ILP 4)"
    ]
    assert list(fig.data[1].y) == [3, 4]
    assert {t.yaxis for t in fig.data[2:]} == {"y2"}  # the model has its own, relative axis


@sim_only
def test_speed_model_is_littles_law_normalised_to_full_occupancy():
    memory = ol.speed_model("memory")  # no GPU, no recording of the sweep: the course's calibration GPU
    h200 = calibration.recorded()
    assert "calibrated on lesson 03's one-element copy" in memory.assumptions and "H200" in memory.assumptions
    # calibrated latency × recorded copy ceiling ÷ 132 SMs ÷ 256 B per warp copy ≈ 104 warps' loads per SM
    assert memory.warps_needed == pytest.approx(h200.latency_ns * h200.ceiling_gbps / 132 / 256)
    warps = np.array([8, 16, 32, 64])
    assert memory.relative_speed(warps, 1) == pytest.approx([0.125, 0.25, 0.5, 1.0])  # 64 < 104: linear
    assert memory.relative_speed(warps, 4) == pytest.approx([32 / memory.warps_needed, 64 / memory.warps_needed,
                                                             1.0, 1.0])
    compute = ol.speed_model("compute")  # 4-cycle FMA × 4 sub-partitions = 16 FMAs in flight per SM
    assert compute.warps_needed == 16
    assert list(compute.relative_speed(warps, 1)) == [0.5, 1.0, 1.0, 1.0]
    assert list(compute.relative_speed(warps, 4)) == [1.0, 1.0, 1.0, 1.0]
    with pytest.raises(InvalidConfig):
        ol.speed_model("io")


@sim_only
def test_speed_model_uses_the_recordings_device(monkeypatch):
    frame = pd.DataFrame(
        {"kernel": ["fma"], "ilp": [1], "threads_per_block": 64, "dynamic_shared_bytes": 0,
         "occupancy_pct": [100.0], "median_ms": [1.0], "tflops": [40.0]}
    )
    rec = _fake_recording("occupancy.memory_bound", frame)
    rec.provenance["device"] = {"device": "NVIDIA H100 80GB HBM3", "sm_count": 132, "compute_capability": "9.0"}
    model = ol.speed_model("memory", rec)
    assert model.device == "NVIDIA H100 80GB HBM3" and "(NVIDIA H100 80GB HBM3)" in model.assumptions
    # no recording of an H100's copy: the H200's calibrated latency × its 3,350 GB/s datasheet ÷ 132 SMs ÷ 256 B
    assert model.warps_needed == pytest.approx(calibration.recorded().latency_ns * 3350 / 132 / 256)
    assert "assumed for the NVIDIA H100 80GB HBM3" in model.assumptions and "(datasheet)" in model.assumptions


@sim_only
def test_driver_figure_draws_a_recording(monkeypatch):
    frame = pd.DataFrame(
        {
            "kernel": ["copy", "fma"],
            "max_registers": [0, 0],
            "registers": [12, 12],
            "threads_per_block": [128, 256],
            "dynamic_shared_bytes": [0, 0],
            "model_blocks": [16, 8],
            "driver_blocks": [16, 8],
        }
    )
    monkeypatch.setattr(reference, "load", lambda name, *a, **k: _fake_recording(name, frame))
    fig = ol.driver_comparison_figure()
    assert "2 of 2 agree" in fig.layout.title.text


@sim_only
def test_speed_explorer_builds(monkeypatch):
    monkeypatch.setattr(reference, "load", lambda name, *a, **k: None)
    chart = ol.speed_explorer(threaded=False)
    chart.controls["kind"].value = "compute"
    assert chart.errors == 0 and chart.runs == 2


def test_usage_table_unknown_without_toolchain(no_ptxas):
    table = ol.usage_table(cc=(9, 0))
    assert list(table.kernel) == list(ol.KERNELS)
    assert all(s.startswith("unknown") for s in table.source)
