"""G24 (review gpu-mode-paths §7): the figures' GPU branches, run on the CPU.

Inside ``rehearsal.rehearse()`` runtime says GPU: each figure takes its "measured now" branch, its
kernels run in Numba's simulator at the rehearsal's small sizes (``SWEEP_PLANS``) and the harness's
event timer runs on the rehearsal clock. Where the simulator cannot stand in (CUDA graphs, copy
engines, working sets sized by a real L2, matmuls of N ≥ 256), the experiment is replaced by a fake
measurement: rows of the H200's recording, so the figure code (columns, captions, caches) still runs.
Every number drawn is a rehearsal placeholder or a fake: these tests check wiring, never performance.
Not covered (verify on a GPU): lesson 08's ``hidden_sync_table`` (torch's profiler with CUPTI).
"""

from __future__ import annotations

import functools
import importlib

import pandas as pd
import plotly.graph_objects as go
import pytest

from gpucourse.measure import rehearsal
from gpucourse.measure.plans import patched, plan_patches
from gpucourse.tooling.build import ROOT
from gpucourse.viz import charts

pytestmark = pytest.mark.slow  # kernels in the simulator: about two minutes in all, spread over the workers

H200 = ROOT / "data" / "reference" / "nvidia-h200" / "quick"


def _recorded(name: str) -> pd.DataFrame:
    """A fake measurement: the H200 recording's rows (never drawn as this machine's)."""
    return pd.read_csv(H200 / f"{name}.csv").drop(columns=["timing_method"], errors="ignore")


def _fake_litmus(monkeypatch):
    from gpucourse.lessons.races import experiments

    small = functools.partial(experiments.run_litmus.__wrapped__ if hasattr(experiments.run_litmus, "__wrapped__")
                              else experiments.run_litmus, spin_cap=4, stress_iters=1, threads=32)
    monkeypatch.setattr(experiments, "run_litmus", lambda fences, rounds=2, **kw: small(fences, rounds=2))


def _fake_feeding(monkeypatch, sweep: str, recording: str, **select):
    from gpucourse.lessons.feeding import experiments, figures

    def fake(*args, **kwargs):
        data = _recorded(recording)
        for column, value in select.items():
            data = data[data[column] == kwargs.get(column, value)]
        return data

    monkeypatch.setattr(experiments, sweep, fake)
    figures._measured_l2.cache_clear()


def _fake_matmul(monkeypatch):
    from gpucourse.lessons.tiling import figures

    def fake(sizes, rungs=None, progress=None):
        data = _recorded("tiling.matmul")
        return data[data.n.isin(sizes)]

    monkeypatch.setattr(figures, "measure_matmul_ladder", fake)


def _fake_transpose(monkeypatch):
    from gpucourse.lessons.tiling import figures

    def fake(n, tile, pad):
        from gpucourse.measure import runtime

        data = _recorded("tiling.transpose")
        return data[data.n == n], charts.source_caption("measured", runtime.device().name)

    monkeypatch.setattr(figures, "_transpose_data", fake)


# (lesson package, figure, arguments, fake or None): every figure G24 lists but hidden_sync_table
FIGURES = [
    ("measuring", "roofline_figure", {"precision": "fp32"}, None),
    ("measuring", "roofline_figure", {"precision": "bf16"}, None),
    ("warps", "staircase_figure", {"max_threads": 33}, None),
    ("divergence", "fraction_figure", {}, None),
    ("divergence", "predicated_figure", {}, None),
    ("divergence", "sort_pays_figure", {}, None),
    ("coalescing", "stride_figure", {}, None),
    ("coalescing", "offset_figure", {}, None),
    ("coalescing", "layout_bandwidth_figure", {}, None),
    ("coalescing", "work_figure", {"elements_per_thread": 4, "bytes_per_load": 8}, None),  # the rungs, measured
    ("tiling", "gflops_figure", {"max_n": 1024}, _fake_matmul),
    ("tiling", "fraction_figure", {"max_n": 1024}, _fake_matmul),
    ("tiling", "roofline_figure", {"n": 1024}, _fake_matmul),
    ("tiling", "transpose_figure", {"n": 4096}, _fake_transpose),
    ("reductions", "ladder_figure", {"n": 4096}, None),
    ("occupancy", "speed_figure", {"kind": "memory"}, None),
    ("occupancy", "speed_figure", {"kind": "compute"}, None),
    ("occupancy", "driver_comparison_figure", {}, None),
    ("races", "litmus_figure", {"runs": 5}, _fake_litmus),
    ("precision", "throughput_figure", {}, None),
    ("precision", "ceiling_figure", {}, None),
    ("precision", "vocab_figure", {}, None),
    ("feeding", "copy_figure", {}, None),
    ("feeding", "launch_figure", {}, lambda mp: _fake_feeding(mp, "launch_sweep", "feeding.launch")),
    ("feeding", "sync_figure", {}, lambda mp: _fake_feeding(mp, "sync_sweep", "feeding.sync")),  # CPU torch: 60 s
    ("feeding", "fusion_figure", {"n": 4096}, None),
    ("feeding", "l2_figure", {}, lambda mp: _fake_feeding(mp, "l2_sweep", "feeding.l2")),
    ("feeding", "measured_overlap_figure", {"streams": 2}, lambda mp: _fake_feeding(
        mp, "overlap_events", "feeding.overlap", streams=2)),
]


@pytest.fixture
def rehearsed():
    patches = []
    for plan in rehearsal.SWEEP_PLANS.values():
        if not plan.not_rehearsable:
            patches += plan_patches(plan)
    with rehearsal.rehearse(), patched(patches):
        yield


@pytest.mark.parametrize("lesson, name, kwargs, fake", FIGURES,
                         ids=[f"{lesson}.{name}{''.join(f'-{v}' for v in kw.values())}"
                              for lesson, name, kw, _ in FIGURES])
def test_the_gpu_branch_of_each_figure_draws(rehearsed, monkeypatch, lesson, name, kwargs, fake):
    from gpucourse.measure import runtime

    assert runtime.is_gpu()  # the rehearsal: the figure takes its GPU branch
    if fake is not None:
        fake(monkeypatch)
    fig = getattr(importlib.import_module(f"gpucourse.lessons.{lesson}"), name)(**kwargs)
    assert isinstance(fig, go.Figure) and len(fig.data) >= 1
    caption = charts.caption_of(fig)
    assert "REHEARSAL" in caption, caption  # every source it set is marked as the rehearsal's
    assert "no GPU here" not in caption, caption  # not the simulator's branch


def test_a_figure_whose_measurement_lacks_a_column_fails_here(rehearsed, monkeypatch):
    """The known-wrong case: a GPU branch reading a column its experiment does not give breaks this test."""
    from gpucourse.lessons import feeding
    from gpucourse.lessons.feeding import experiments

    monkeypatch.setattr(experiments, "launch_sweep",
                        lambda *a, **k: _recorded("feeding.launch").rename(columns={"us_per_kernel": "us"}))
    with pytest.raises((KeyError, AttributeError)):
        feeding.launch_figure()
