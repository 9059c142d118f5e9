import threading
import time
import types

import pytest

from gpucourse.errors import InvalidConfig
from gpucourse.lessons import measuring, warps
from gpucourse.tooling import launch
from gpucourse.viz import charts, diagrams


def test_lane_map_follows_the_hardware_rule():
    table = warps.lane_map((12, 8))
    assert len(table) == 96
    row = table[(table.tx == 4) & (table.ty == 2)].iloc[0]
    assert (row.linear, row.warp, row.lane) == (28, 0, 28)
    row = table[(table.tx == 8) & (table.ty == 2)].iloc[0]
    assert (row.warp, row.lane) == (1, 0)  # warp 1 starts in the middle of row 2
    three_d = warps.lane_map((8, 4, 2))
    assert three_d[(three_d.tz == 1)].warp.min() == 1


@pytest.mark.parametrize("threads, expected", [(1, 1), (32, 1), (33, 2), (64, 2), (65, 3), (1024, 32)])
def test_warps_per_block(threads, expected):
    assert warps.warps_per_block(threads) == expected


@pytest.mark.parametrize("bad", [0, 1025, 3.5])
def test_bad_block_sizes_are_refused(bad):
    with pytest.raises(InvalidConfig):
        warps.warps_per_block(bad)
    with pytest.raises(InvalidConfig):
        warps.lane_map((bad, 1))


def test_lane_map_figure_names_partial_warps():
    fig = warps.lane_map_figure(10, 10)
    assert "100 threads = 4 warp(s)" in fig.layout.title.text and "4 of 32 lanes busy" in fig.layout.title.text
    assert charts.caption_of(fig).startswith("Model")


def test_staircase_without_a_gpu_shows_the_model_and_says_there_is_no_recording(no_recordings):
    fig = warps.staircase_figure(128)
    names = [t.name for t in fig.data]
    assert names == ["model: ⌈threads/32⌉ warps per block"]
    assert list(fig.data[0].y) == [1, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 4, 4]
    assert "no recording" in charts.caption_of(fig)


def test_coverage_figure_counts_idle_threads():
    fig = warps.coverage_figure(37, 45, 16, 16)
    assert "grid 3×3" in fig.layout.title.text and f"{48 * 48 - 37 * 45} threads must skip" in fig.layout.title.text


def test_async_analogy_is_labelled_as_an_analogy_not_gpu_time(monkeypatch, no_recordings):
    fig = measuring.async_pitfall_figure()
    assert charts.caption_of(fig).startswith("CPU analogy, not a GPU timing")
    # Counted, not timed: the "kernel" may start only once the launch has been timed, so the order
    # of events is fixed; the launch's time is read before the work ends, the wait's after.
    gate, events = threading.Event(), []

    def sleep(seconds):
        gate.wait(10)
        time.sleep(seconds)
        events.append("work done")

    def clock():
        events.append("clock")
        if events.count("clock") == 2:
            gate.set()
        return time.perf_counter()

    monkeypatch.setattr(measuring.experiments, "time", types.SimpleNamespace(sleep=sleep, perf_counter=clock))
    data = measuring.async_analogy(50)
    launch_ms, waited_ms = data.ms
    assert events == ["clock", "clock", "work done", "clock"]
    assert waited_ms >= 50 and launch_ms < waited_ms


def test_roofline_without_a_gpu_draws_only_datasheet_lines(no_recordings):
    fig = measuring.roofline_figure("fp32")
    assert [t.name.split(":")[0] for t in fig.data] == ["datasheet"]
    assert max(fig.data[0].y) == pytest.approx(67.0)
    with pytest.raises(InvalidConfig, match="'bf16', 'fp16', 'fp32'"):
        measuring.roofline_figure("fp64")


def test_diagrams_have_titles_and_shapes():
    for fig in (diagrams.execution_hierarchy(), diagrams.memory_hierarchy()):
        assert fig.layout.title.text and len(fig.layout.shapes) >= 4


def test_lab_command_flags():
    cmd = launch.lab_command(9999, is_root=True, has_display=False)
    assert "--port=9999" in cmd and "--ip=127.0.0.1" in cmd and "--allow-root" in cmd and "--no-browser" in cmd
    assert any(a.endswith("notebooks/00_measuring.ipynb") for a in cmd)
    cmd = launch.lab_command(8888, is_root=False, has_display=True)
    assert "--allow-root" not in cmd and "--no-browser" not in cmd


def test_doctor_passes_in_simulator_mode_and_fails_with_a_fix(monkeypatch):
    from gpucourse.tooling import doctor

    lines = []
    assert doctor.run_doctor(lines.append) == 0
    text = "\n".join(lines)
    assert "mode: simulator" in text and "valid mode" in text and "a kernel runs" in text
    monkeypatch.setattr(doctor, "REQUIRED", doctor.REQUIRED + ("no_such_package_xyz",))
    lines = []
    assert doctor.run_doctor(lines.append) == 1
    assert "fix: run `make setup`" in "\n".join(lines)
