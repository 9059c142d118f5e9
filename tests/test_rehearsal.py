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
from gpucourse.measure import harness, recording, reference, rehearsal, runtime
from gpucourse.viz import charts

# the recording comes from conftest's gpu_report_rehearsal, shared with tests/test_gpureport.py: one worker
pytestmark = pytest.mark.xdist_group("rehearsal")


@pytest.fixture(scope="module")
def recorded(gpu_report_rehearsal):
    """What `make gpu-report REHEARSAL=1` recorded (its step 2 is `make record` inside a rehearsal):
    one rehearsal of every sweep serves this module and tests/test_gpureport.py."""
    return gpu_report_rehearsal.data_folder.parent, gpu_report_rehearsal.written


def test_every_registered_sweep_has_a_rehearsal_plan():
    assert set(rehearsal.SWEEP_PLANS) == set(reference.load_all_sweeps())
    assert len(rehearsal.SWEEP_PLANS) >= 24  # lessons 00–07 (17), 04a (1), 08 (6)
    for name, plan in rehearsal.SWEEP_PLANS.items():
        if name.startswith("feeding.") and plan.not_rehearsable:  # lesson 08: no stand-in yet, each says why
            assert len(plan.not_rehearsable.split()) >= 3, name
            continue
        assert not plan.not_rehearsable, f"{name}: {plan.not_rehearsable}"
        assert plan.attributes or plan.defaults or plan.stand_in, name


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


def test_record_runs_every_rehearsable_sweep_end_to_end(recorded):
    root, written = recorded
    folder = root / rehearsal.SLUG
    meta = json.loads((folder / reference.PROVENANCE_FILE).read_text())
    skipped = {name: plan.not_rehearsable for name, plan in rehearsal.SWEEP_PLANS.items() if plan.not_rehearsable}
    everything = set(reference.load_all_sweeps()) - set(skipped)
    assert len(everything) >= 19  # lessons 00–07 (17), 04a, and 08's fusion
    assert {p.stem for p in written} == everything == set(meta["sweeps"])
    assert meta["not_rehearsed"] == skipped  # each with its reason in the provenance
    assert meta["device"]["rehearsal"] is True and meta["device"]["mode"] == "gpu"
    assert set(harness.REQUIRED_PROVENANCE) <= set(meta["device"])
    for name in everything:
        assert meta["sweeps"][name]["rehearsal"] is True
        data = reference.load(name, root=root, allow_rehearsal=True).data
        assert len(data) and data.rehearsal.all() and len(data) == meta["sweeps"][name]["rows"], name
        assert set(reference.SWEEPS[name].columns) <= set(data.columns), name
        with pytest.raises(CourseError, match="rehearsal"):
            reference.load(name, root=root)
    # what stood in for the GPU is recorded beside each sweep that needed more than the simulator
    assert "ptxas" in meta["sweeps"]["occupancy.driver"]["stand_in"]
    assert "CPU torch" in meta["sweeps"]["precision.matmul"]["stand_in"]
    # the histogram's values fit in the L2, and its recording says so
    histogram = reference.load("races.histogram", root=root, allow_rehearsal=True).data
    assert (histogram.memory_level == "L2-resident").all()


def test_the_stand_ins_answer_as_the_gpu_code_expects(recorded):
    root, _ = recorded

    def load(name):
        return reference.load(name, root=root, allow_rehearsal=True).data

    driver = load("occupancy.driver")  # the calculator answers for the driver: they agree by construction
    assert (driver.model_blocks == driver.driver_blocks).all() and driver.model_blocks.nunique() >= 3
    assert set(load("precision.matmul").dtype) == {"fp32", "tf32", "fp16", "bf16", "fp8_e4m3"}
    assert set(load("precision.vocab_shape").vocab) == {50257, 50304}
    litmus = load("races.litmus_mp")
    assert (litmus.groupby("fences")["count"].sum() == litmus.groupby("fences").runs.first()).all()
    ladder = load("tiling.matmul")
    assert "cuBLAS" in set(ladder.kind) and ladder.fraction_of_library.notna().all()
    ceilings = load("measuring.ceilings").set_index("quantity").measured
    assert (ceilings > 0).all()
    assert set(load("measuring.async_pitfall").method) >= {"wall clock, launch only", "device events (harness median)"}


def test_cupy_and_torch_stand_ins_are_removed_afterwards():
    import sys

    import torch

    before = {name: sys.modules.get(name) for name in ("cupy", "torch", "cupy._core", "cupy._core._routines_linalg")}
    with rehearsal.rehearse():
        import cupy
        import torch as cuda_torch

        assert cupy.random.random(4, dtype=np.float32).data.ptr  # CuPy's .data.ptr on a NumPy array
        assert cuda_torch.randn(2, device="cuda").device.type == "cpu"
        assert cuda_torch.cuda.get_device_name() == rehearsal.DEVICE.name
    assert {name: sys.modules.get(name) for name in before} == before
    assert torch.randn(1).device.type == "cpu"


def test_the_loader_refuses_a_rehearsal(recorded):
    root, _ = recorded
    with pytest.raises(CourseError, match="rehearsal"):
        reference.load("warps.staircase", root=root)
    assert "rehearsal" in " ".join(reference.missing_provenance(root / rehearsal.SLUG))


def test_a_rehearsal_never_writes_into_the_course_data(tmp_path):
    with rehearsal.rehearse(), pytest.raises(CourseError, match="never writes"):
        recording.record(["warps.staircase"])


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
