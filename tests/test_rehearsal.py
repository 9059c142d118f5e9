"""The GPU-mode code paths, rehearsed on the CPU (gpucourse.measure.rehearsal): harness with events,
every registered sweep through `make record`, provenance, the loader, a chart of a measured result.

Plain tests (not marked gpu): they run in `make test` on a machine without a GPU. Every number
they make is a rehearsal number, marked so, and refused by the loader."""

from __future__ import annotations

import json

import numpy as np
import pytest
from numba import cuda  # after gpucourse (imported by conftest) chose the simulator

from gpucourse.errors import CourseError
from gpucourse.lessons import warps
from gpucourse.measure import harness, reference, rehearsal, runtime
from gpucourse.viz import charts


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    root = tmp_path_factory.mktemp("reference")
    with rehearsal.rehearse():
        written = reference.record(root=root, command="make record (rehearsal)")
    return root, written


def test_every_registered_sweep_has_a_rehearsal_plan_or_a_reason():
    assert set(rehearsal.SWEEP_PLANS) == set(reference.load_all_sweeps())
    for name, plan in rehearsal.SWEEP_PLANS.items():
        assert plan.not_rehearsable or plan.attributes or plan.defaults, name


def test_the_harness_times_with_its_event_timer_and_marks_the_result():
    out = np.zeros(64, dtype=np.float32)

    @cuda.jit
    def fill(a):
        i = cuda.grid(1)
        if i < a.size:
            a[i] = 2.0

    with rehearsal.rehearse():
        assert runtime.is_gpu() and runtime.device() is rehearsal.DEVICE
        m = harness.measure(lambda: fill[2, 32](out), check=lambda: np.all(out == 2.0), bytes_moved=out.nbytes)
    assert (out == 2.0).all()  # the kernel really ran, in the simulator
    assert m.measured and m.method == harness.METHOD_QUEUED and m.n_samples >= 10
    assert m.median_ms == rehearsal.TICK_MS  # a counted placeholder, not a time
    assert m.provenance["rehearsal"] is True and m.provenance["device"] == rehearsal.DEVICE.name
    assert m.summary().startswith("REHEARSAL")
    assert m.memory_level == "L2-resident"  # 256 bytes on the rehearsal device's 1 MiB L2


def test_record_runs_every_sweep_it_can_and_says_why_not_for_the_others(recorded):
    root, written = recorded
    folder = root / rehearsal.SLUG
    meta = json.loads((folder / reference.PROVENANCE_FILE).read_text())
    runnable = {n for n, p in rehearsal.SWEEP_PLANS.items() if not p.not_rehearsable}
    assert {p.stem for p in written} == runnable == set(meta["sweeps"])
    assert set(meta["not_rehearsed"]) == set(reference.load_all_sweeps()) - runnable
    assert all(meta["not_rehearsed"].values())
    assert meta["device"]["rehearsal"] is True and meta["device"]["mode"] == "gpu"
    assert set(harness.REQUIRED_PROVENANCE) <= set(meta["device"])
    for name in runnable:
        assert meta["sweeps"][name]["rehearsal"] is True
        data = reference.load(name, root=root, allow_rehearsal=True).data
        assert data.rehearsal.all() and len(data) == meta["sweeps"][name]["rows"]
        assert set(reference.SWEEPS[name].columns) <= set(data.columns)
    # the histogram's values fit in the L2, and its recording says so
    histogram = reference.load("races.histogram", root=root, allow_rehearsal=True).data
    assert (histogram.memory_level == "L2-resident").all()


def test_the_loader_refuses_a_rehearsal(recorded):
    root, _ = recorded
    with pytest.raises(CourseError, match="rehearsal"):
        reference.load("warps.staircase", root=root)
    assert "rehearsal" in " ".join(reference.missing_provenance(root / rehearsal.SLUG))


def test_a_rehearsal_never_writes_into_the_course_data(tmp_path):
    with rehearsal.rehearse(), pytest.raises(CourseError, match="never writes"):
        reference.record(["warps.staircase"])


def test_a_chart_draws_a_measured_result_marked_rehearsal():
    plan = rehearsal.SWEEP_PLANS["warps.staircase"]
    with rehearsal.rehearse(), rehearsal._patched(rehearsal.plan_patches(plan)):
        fig = warps.staircase_figure(max_threads=33)
    caption = charts.caption_of(fig)
    assert caption.startswith(rehearsal.CAPTION) and "Measured now" in caption
    table = charts.data_table(fig)
    measured = table[table.series.str.startswith("time")]
    assert len(measured) == 6 and (measured.y == 1.0).all()  # ticks ÷ ticks


def test_the_rehearsal_leaves_nothing_behind():
    before = (runtime.MODE, runtime.device(), harness.default_timer, warps.experiments.FMA_ITERATIONS,
              warps.measure_staircase.__defaults__)
    with rehearsal.rehearse(), rehearsal._patched(rehearsal.plan_patches(rehearsal.SWEEP_PLANS["warps.staircase"])):
        assert warps.experiments.FMA_ITERATIONS == 2 and runtime.MODE == "gpu"
    assert (runtime.MODE, runtime.device(), harness.default_timer, warps.experiments.FMA_ITERATIONS,
            warps.measure_staircase.__defaults__) == before
    assert not rehearsal.active()
    fig = charts.figure("t", "x (n)", "y (ms)", charts.source_caption("model"))
    assert "REHEARSAL" not in charts.caption_of(fig)
