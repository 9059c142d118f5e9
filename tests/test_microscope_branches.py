"""Microscope exactness: active-lane masks, SIMT efficiency and paths of divergent warps."""

import numpy as np
import plotly.graph_objects as go
import pytest
from numba import cuda

from gpucourse import microscope
from gpucourse.microscope import analysis


@cuda.jit
def half_warp_branch(out):
    i = cuda.grid(1)
    lane = cuda.threadIdx.x % 32
    if lane < 16:
        out[i] = 1.0
    else:
        out[i] = 2.0


@cuda.jit
def uniform(out):
    i = cuda.grid(1)
    out[i] = 3.0


@cuda.jit
def lane_dependent_loop(out):
    i = cuda.grid(1)
    s = 0
    for k in range(i % 4):
        s += k + 1
    out[i] = s


@cuda.jit
def early_exit(out, n):
    i = cuda.grid(1)
    if i >= n:
        return
    out[i] = 1.0


def test_lane_below_16_splits_each_warp_in_two_paths_at_half_efficiency():
    out = np.zeros(64)
    report = microscope.trace(half_warp_branch, 1, 64, out)
    assert list(out[:32]) == [1.0] * 16 + [2.0] * 16
    assert report.paths() == 2
    assert report.paths(line="if lane < 16") == 2
    assert report.simt_efficiency(line="out[i] = 1.0") == 0.5
    assert report.simt_efficiency(line="out[i] = 2.0") == 0.5
    table = report.branches().set_index("source")
    assert table.loc["if lane < 16:", "paths"] == 2
    assert table.loc["if lane < 16:", "simt_efficiency"] == 1.0
    assert table.loc["out[i] = 1.0", "active_lanes_mean"] == 16
    assert table.loc["out[i] = 1.0", "issues"] == 2  # once per warp
    # 3 lines at 32 lanes + 2 lines at 16 lanes per warp
    assert report.simt_efficiency() == pytest.approx((3 * 32 + 2 * 16) / (5 * 32))
    warps = report.warps()
    assert list(warps.paths) == [2, 2]


def test_uniform_kernel_is_fully_efficient_with_one_path():
    report = microscope.trace(uniform, 2, 32, np.zeros(64))
    assert report.simt_efficiency() == 1.0
    assert report.paths() == 1
    assert (report.branches().paths == 1).all()


def test_loop_with_lane_dependent_trip_count():
    out = np.zeros(32, dtype=np.int64)
    report = microscope.trace(lane_dependent_loop, 1, 32, out)
    assert list(out[:4]) == [0, 1, 3, 6]
    # The body runs for 24, 16 and 8 lanes in its 1st, 2nd and 3rd iteration.
    assert report.simt_efficiency(line="s += k + 1") == pytest.approx((24 + 16 + 8) / 3 / 32)
    assert report.paths(line="for k in range") == 2
    assert report.paths() == 4


def test_early_exit_leaves_a_partial_mask():
    report = microscope.trace(early_exit, 1, 64, np.zeros(64), 40)
    warps = report.branches().set_index("source")
    assert warps.loc["out[i] = 1.0", "active_lanes_mean"] == (32 + 8) / 2


def test_warp_issues_groups_kth_occurrences():
    issues, paths = analysis.warp_issues({0: ["a", "b", "b", "c"], 1: ["a", "b", "c"]})
    assert [(i["key"], i["k"], i["mask"], i["successors"]) for i in issues] == [
        ("a", 0, 0b11, 1), ("b", 0, 0b11, 2), ("b", 1, 0b01, 1), ("c", 0, 0b11, 1)]  # fmt: skip
    assert paths == 2


def test_picture_lanes_is_labelled_and_colour_blind_safe():
    report = microscope.trace(half_warp_branch, 1, 64, np.zeros(64))
    fig = report.picture_lanes(warp=1)
    assert isinstance(fig, go.Figure)
    assert "warp 1" in fig.layout.title.text and "50%" not in fig.layout.title.text
    assert fig.layout.xaxis.title.text and fig.layout.yaxis.title.text
    for trace in fig.data:
        assert trace.marker.color in microscope.OKABE_ITO
        assert trace.hovertext and trace.name
    assert {t.marker.symbol for t in fig.data} == {"square", "x-thin-open"}  # shape, not only colour
