"""GPU-mode paths of the harness and the LiveChart, with fake timers and a fake GPU (no GPU needed).

Review gpu-mode-paths §7: G2 (the live contract for charts a widget redraws), G3 (batch sizing, blocker,
sample cap), G4 (one measurement at a time), G5 (a chart shows before it measures), G17 (a run that
waits for the GPU goes to events at once), G22 (kernels compiled once), G23 (no torch: rows skipped).
"""

from __future__ import annotations

import sys
import threading
import time

import ipywidgets as widgets
import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from gpucourse.measure import harness, runtime
from gpucourse.viz.widgets import WAITING, LiveChart
from tests.test_harness import FakeGPU, FakeTimer, QueuedTimer, _fake_event_timer

H200 = runtime.DeviceInfo(name="NVIDIA H200", compute_capability=(9, 0), sm_count=132, l2_bytes=60 * 2**20,
                          datasheet_bandwidth_gbps=4800.0)


@pytest.fixture
def gpu_mode(monkeypatch):
    """runtime says GPU (an H200); no kernel runs: whatever a test measures goes through its fakes."""
    monkeypatch.setattr(runtime, "is_gpu", lambda: True)
    monkeypatch.setattr(runtime, "device", lambda: H200)
    return H200


# --- G3: batch from a queued batch, the blocker, the sample cap -------------------------------------


class GappedTimer(QueuedTimer):
    """A 2 µs kernel whose timed batch also holds one 24 µs launch gap (the first launch's latency)."""

    def time_queued_ms(self, fn, repeat=1):
        self.log.append(("queued", repeat))
        return 0.002 * repeat + 0.024, True


def test_the_batch_is_sized_from_queued_launches_not_one():
    log = []
    m = harness.measure(lambda: None, timer=GappedTimer(0.0, log), label="tiny")
    assert ("queued", harness.PROBE_LAUNCHES) in log[:3]
    # 8 launches in 40 µs: 5 µs a launch → 200 launches a sample (one launch, 26 µs, gave 39)
    assert m.launches_per_sample == 200
    assert harness.launches_per_sample(0.026) == 39  # the known-wrong size, for contrast


def test_a_long_kernel_needs_no_probe_batch():
    log = []
    harness.measure(lambda: None, timer=QueuedTimer(2.0, log), label="long")
    assert ("queued", harness.PROBE_LAUNCHES) not in log


def test_the_blocker_is_1_2_times_the_enqueue_time_plus_50_us():
    assert harness.BLOCKER_MARGIN == 1.2
    assert harness.next_block_us(1.0) == 1250 and harness.next_block_us(0.010) == 62
    # the next sample still queues behind it when the host is up to ~13 % slower than last time
    blocked_ms = harness.next_block_us(1.0) / 1e3
    assert harness.queue_held(1.13, blocked_ms) and not harness.queue_held(1.25, blocked_ms)


def test_a_tiny_kernel_stops_at_the_sample_cap_not_the_wall_clock():
    m = harness.measure(lambda: None, timer=QueuedTimer(0.001, []), label="1 µs")
    assert m.n_samples == harness.MAX_SAMPLES and m.total_ms < 500.0
    # a caller asking for more samples than the cap gets them
    assert harness.measure(lambda: None, timer=QueuedTimer(0.001, []), min_samples=400).n_samples == 400
    # a long kernel still stops on GPU time (0.5 s of 2-ms samples: 250, under the cap)
    assert harness.measure(lambda: None, timer=FakeTimer(2.0, [])).n_samples == 250


# --- G17: a run that waits for the GPU ---------------------------------------------------------------


def _counting_blocker(timer, gpu, blocks):
    class Blocker:
        def __getitem__(self, launch_shape):
            def launch(microseconds):
                blocks.append(microseconds)
                gpu.launch(microseconds / 1e3)
            return launch

    timer._blocker = Blocker()


def test_a_run_that_waits_for_the_gpu_goes_to_events_after_one_retry(monkeypatch):
    gpu = FakeGPU(dispatch_ms=0.010)
    timer = _fake_event_timer(monkeypatch, gpu)
    blocks = []
    _counting_blocker(timer, gpu, blocks)

    def synchronising_run():  # e.g. copy_to_host: the host waits for the GPU
        gpu.launch(0.5)
        gpu.host_ms = gpu.free_at_ms

    _, held = timer.time_queued_ms(synchronising_run)
    assert not held
    assert len(blocks) == 2, blocks  # was four tries, the blocker doubling towards a second
    assert sum(blocks) < 10_000  # µs the GPU slept for nothing (four tries slept ≈ 35 ms here)


def test_a_dispatch_bound_batch_still_queues_on_its_retry(monkeypatch):
    gpu = FakeGPU(dispatch_ms=0.079)  # numba with three CuPy arrays (H100 probe): longer than the 50 µs blocker
    timer = _fake_event_timer(monkeypatch, gpu)
    timer._block_us = harness.BLOCKER_MIN_US
    blocks = []
    _counting_blocker(timer, gpu, blocks)
    elapsed_ms, held = timer.time_queued_ms(lambda: gpu.launch(0.002), repeat=8)
    assert held and elapsed_ms == pytest.approx(0.016) and len(blocks) == 2


# --- G2: charts a widget redraws measure under the live contract ------------------------------------


def _measuring_compute(seen: list):
    def compute(n: int = 1) -> go.Figure:
        # a figure whose experiment asks for the full 0.5 s, as lessons 03, 05 and 07 do
        m = harness.measure(lambda: None, timer=FakeTimer(2.0, []), min_total_ms=500.0)
        seen.append(m)
        return go.Figure(go.Bar(x=[1], y=[m.median_ms]))

    return compute


def test_a_livechart_measures_under_the_live_contract():
    seen = []
    chart = LiveChart({"n": widgets.IntSlider(value=1)}, _measuring_compute(seen), threaded=False)
    chart.controls["n"].value = 2
    assert chart.runs == 2 and len(seen) == 2
    # 30 ms of 2-ms samples: 15, not the 250 that 0.5 s takes
    assert all(m.contract == "live" and m.n_samples == 15 for m in seen)
    # outside a chart (make record, a static cell) the full contract is unchanged
    full = harness.measure(lambda: None, timer=FakeTimer(2.0, []))
    assert full.contract == "full" and full.n_samples == 250


def test_the_live_contract_caps_wall_time_and_warm_up(monkeypatch):
    with harness.live() as terms:
        assert harness.is_live() and terms.max_wall_s <= 2.0 and terms.min_total_ms == harness.LIVE_MIN_TOTAL_MS
    assert not harness.is_live()
    monkeypatch.setenv("GPUCOURSE_MEASURE", "quick")
    with harness.live():  # quick and live: the smaller of each
        m = harness.measure(lambda: None, timer=FakeTimer(2.0, []), min_total_ms=500.0)
    assert m.contract == "quick" and m.n_samples == 15


def test_every_widget_chart_runs_in_livechart_so_under_the_live_contract():
    """Each lesson's widget builders make a viz.widgets.LiveChart (whose _run enters harness.live()):
    no lesson overrides the run, so no widget-driven figure escapes the live contract."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "gpucourse"
    builders = [p for p in root.rglob("*.py") if "LiveChart(" in p.read_text(encoding="utf-8")]
    assert len(builders) >= 8  # lessons 01-08's figures modules
    for path in builders:
        text = path.read_text(encoding="utf-8")
        assert "(LiveChart)" not in text, f"{path} subclasses LiveChart"


def test_lesson_06_times_each_bins_and_items_once_whatever_the_seed(gpu_mode, monkeypatch):
    from gpucourse.lessons.races import experiments, figures

    recorded = pd.read_csv("data/reference/nvidia-h200/quick/races.histogram.csv")
    calls = []

    def fake_measure_histogram(bins_list, items):
        calls.append((tuple(bins_list), items, harness.is_live()))
        rows = recorded[recorded.bins == 1].copy()  # timings only shaped like a measurement (a fake)
        rows["bins"], rows["items"] = bins_list[0], items
        return rows

    def fake_lost_updates(bins, items, seed):
        return pd.DataFrame({"variant": ["racy", "atomic", "privatised"], "where": "GPU (measured now)",
                             "items": items, "lost": [seed, 0, 0]})

    experiments._measured_histogram.cache_clear()
    monkeypatch.setattr(experiments, "measure_histogram", fake_measure_histogram)
    monkeypatch.setattr(figures, "lost_updates", fake_lost_updates)
    chart = figures.histogram_widget(threaded=False)
    chart.controls["seed"].value = 7  # the race scheduler's seed: no new timing
    chart.controls["bins"].value = 256
    chart.controls["seed"].value = 8
    chart.controls["bins"].value = 16  # back: cached
    assert chart.errors == 0, chart.status.value
    assert calls == [((16,), 10**6, True), ((256,), 10**6, True)]
    experiments._measured_histogram.cache_clear()


# --- G4: one measurement at a time ----------------------------------------------------------------


class SlowLoggingTimer(FakeTimer):
    def time_ms(self, fn, repeat=1):
        self.log.append(threading.current_thread().name)
        time.sleep(0.0005)
        return self.per_call_ms * repeat


def test_two_threads_never_measure_at_the_same_time():
    log = []

    def one(name):
        harness.measure(lambda: None, timer=SlowLoggingTimer(1.0, log), min_total_ms=20.0, label=name)

    threads = [threading.Thread(target=one, args=(name,), name=name) for name in ("A", "B")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    log = [entry for entry in log if isinstance(entry, str)]  # the thread of each timed call
    switches = sum(1 for a, b in zip(log, log[1:]) if a != b)
    assert sorted(set(log)) == ["A", "B"] and switches == 1, "".join(log)


def test_a_chart_waits_for_another_charts_measurement_and_says_so(gpu_mode):
    release, started = threading.Event(), []

    def slow(n: int = 1) -> go.Figure:
        started.append("A")
        release.wait(10)
        return go.Figure(go.Bar(x=[1], y=[n]))

    def quick(n: int = 1) -> go.Figure:
        started.append("B")
        return go.Figure(go.Bar(x=[1], y=[n]))

    a = LiveChart({"n": widgets.IntSlider(value=1)}, slow)
    deadline = time.monotonic() + 5
    while not started and time.monotonic() < deadline:
        time.sleep(0.01)
    b = LiveChart({"n": widgets.IntSlider(value=1)}, quick)
    deadline = time.monotonic() + 5
    while WAITING not in b.status.value and time.monotonic() < deadline:
        time.sleep(0.01)
    assert WAITING in b.status.value and started == ["A"]
    release.set()
    a.wait(10)
    b.wait(10)
    assert started == ["A", "B"] and a.runs == b.runs == 1 and "updated" in b.status.value


# --- G5: a chart shows first, then measures -------------------------------------------------------


def test_on_a_gpu_a_chart_is_built_at_once_and_measures_in_its_worker(gpu_mode):
    release = threading.Event()

    def compute(n: int = 1) -> go.Figure:
        release.wait(10)
        return go.Figure(go.Bar(x=[1], y=[n]))

    started = time.monotonic()
    chart = LiveChart({"n": widgets.IntSlider(value=1)}, compute)
    assert time.monotonic() - started < 5  # before: blocked until the first measurement ended
    assert chart._busy and chart.runs == 0
    assert "measuring on NVIDIA H200" in chart.status.value
    release.set()
    chart.wait(10)
    assert chart.runs == 1 and list(chart.figure.data[0].y) == [1]


def test_in_the_simulator_the_first_run_is_still_done_before_the_chart_is_shown():
    chart = LiveChart({"n": widgets.IntSlider(value=3)}, lambda n: go.Figure(go.Bar(x=[1], y=[n])))
    assert chart.runs == 1 and not chart._busy  # the static website and tests draw it at once


# --- G22: kernels compiled once a process ---------------------------------------------------------


def test_the_kernel_factories_return_one_dispatcher():
    from gpucourse.lessons.measuring.kernels import _spin_kernel
    from gpucourse.lessons.warps.kernels import _fma_kernel

    assert _fma_kernel() is _fma_kernel() and _spin_kernel() is _spin_kernel()
    assert _fma_kernel() is not _spin_kernel()


# --- G23: a GPU stack without torch --------------------------------------------------------------


def test_without_torch_the_ceilings_skip_the_matmul_rows_with_a_note(gpu_mode, monkeypatch):
    from gpucourse.lessons.measuring import experiments, figures
    from gpucourse.measure import ceilings
    from gpucourse.viz import charts

    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    monkeypatch.setattr(ceilings, "copy_gbps", lambda refresh=False: 4271.0)  # a fake measurement
    assert not ceilings.torch_available()
    assert ceilings.matmul_tflops("float32") is None
    table = experiments.ceilings()
    assert table.measured.iloc[0] == 4271.0 and np.isnan(table.measured.iloc[1:]).all()
    for precision in ("fp32", "bf16"):
        fig = figures.roofline_figure(precision)
        names = [trace.name for trace in fig.data]
        assert not any(name.startswith("measured") for name in names) and any("datasheet" in n for n in names)
        assert "torch is not installed" in charts.caption_of(fig)


def test_a_prediction_marked_while_the_first_run_measures_is_on_its_figure(gpu_mode):
    from gpucourse.viz import predictions

    release = threading.Event()

    def compute(n: int = 1) -> go.Figure:
        release.wait(10)
        return go.Figure(go.Scatter(x=[1, 2], y=[n, n], name="data"))

    chart = predictions.mark_chart(LiveChart({"n": widgets.IntSlider(value=1)}, compute), 2.5, x=1.5)
    release.set()
    chart.wait(10)
    assert chart.runs == 1 and [t.name for t in chart.figure.data] == ["data", "your prediction"]


def test_without_torch_lesson_04s_roofline_keeps_the_datasheet_roof(gpu_mode, monkeypatch):
    from gpucourse.lessons.tiling import experiments
    from gpucourse.measure import ceilings

    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setattr(ceilings, "copy_gbps", lambda refresh=False: 4271.0)
    roof = experiments.ceilings_for_roofline()  # used to multiply None by 1e3 (TypeError)
    assert roof["copy_gbps"] == 4271.0 and roof["library_gflops"] is None
