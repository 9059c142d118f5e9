"""Lesson 05's redesigned speed experiment, on the CPU: the resident-grid copies, the unrolled FMA chains,
the Little's-law model with the recordings as inputs, and the compiled order of loads and stores."""

import re
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from gpucourse.errors import InvalidConfig
from gpucourse.lessons import occupancy as ol
from gpucourse.lessons.occupancy import experiments
from gpucourse.lessons.occupancy.calculator import occupancy
from gpucourse.measure import calibration, ptxinfo, reference, runtime

sim_only = pytest.mark.skipif(runtime.is_gpu(), reason="checks the simulator-mode behaviour")


# --- the kernels compute what they claim (the simulator, small sizes) ---


@pytest.mark.parametrize("n, blocks, threads", [(300, 2, 32), (1000, 3, 64), (5, 1, 32)])
def test_resident_copies_copy_everything_with_a_small_grid(n, blocks, threads):
    src = np.arange(n, dtype=np.float32)
    for kernel in (ol.copy_resident_kernel, ol.copy_resident_ilp4_kernel):
        dst = np.full(n, np.nan, dtype=np.float32)
        kernel[blocks, threads](dst, src)  # far fewer threads than elements: each thread loops
        assert np.array_equal(dst, src), kernel


def test_fma_chain_length_counts_whole_iterations_of_eight():
    assert ol.fma_chain_length(4096, 1) == 4096 and ol.fma_chain_length(4096, 4) == 1024
    assert ol.fma_chain_length(40, 1) == 40 and ol.fma_chain_length(40, 4) == 8  # 40 // 32 = 1 iteration
    assert ol.fma_chain_length(7, 1) == 0
    with pytest.raises(InvalidConfig):
        ol.fma_chain_length(64, 2)
    # known-wrong: a reference that ran iterations // ilp FMAs per chain would disagree with the kernel
    out = np.zeros(16, dtype=np.float32)
    ol.fma_ilp4_kernel[1, 16](out, np.int32(40))
    np.testing.assert_allclose(out, ol._fma_reference(40, 4), rtol=1e-5)
    assert not np.allclose(out, ol._fma_reference(40, 1), rtol=1e-5)


# --- the grid is exactly the resident blocks ---


def test_resident_grid_is_blocks_per_sm_times_sms():
    assert ol.resident_grid(8, 132) == 1056 and ol.resident_grid(32, 132) == 4224
    for bad in (0, -1, 2.5, True, "8"):
        with pytest.raises(InvalidConfig, match="positive integer"):
            ol.resident_grid(bad, 132)


@sim_only
def test_rig_launches_the_resident_blocks_and_the_first_attempt_one_block_per_64(monkeypatch):
    """SpeedRig.grid with a stand-in device (132 SMs, cc 9.0) and the calculator as the driver."""
    device = SimpleNamespace(compute_capability=(9, 0), sm_count=132, name="stand-in H200")
    monkeypatch.setattr(experiments.runtime, "is_gpu", lambda: True)
    monkeypatch.setattr(experiments.runtime, "device", lambda: device)
    monkeypatch.setattr(experiments, "COPY_ELEMENTS", 1 << 12)

    def driver(name, threads, dynamic=0, cap=None):
        return occupancy(threads, 12, dynamic, (9, 0)).active_blocks

    monkeypatch.setattr(experiments, "driver_blocks", driver)
    rig = experiments.SpeedRig("memory")
    levels = dict((r.active_blocks, pad) for pad, r in ol.padding_levels(12, 0, 64, (9, 0)))
    for blocks, pad in levels.items():
        assert rig.grid("copy_resident", 64, pad) == blocks * 132
        assert rig.grid("copy_resident_ilp4", 64, pad) == blocks * 132
    assert rig.grid("copy_resident", 64, levels[8]) == 1056  # 25 %: 8 blocks × 132 SMs, one wave
    first = experiments.SpeedRig("first_attempt")
    assert first.grid("copy", 64, levels[8]) == (1 << 12) // 64  # padding does not change the first attempt's grid
    assert first.grid("copy_ilp4", 64, 0) == (1 << 12) // 256
    with pytest.raises(InvalidConfig, match="kind must be one of"):
        experiments.SpeedRig("io")


# --- the compiled code: loads before stores; eight FMAs per chain per iteration ---


def _ptx(name):
    k = ol.KERNELS[name]
    result = ptxinfo.compile_ptx([(k.kernel, k.signature)], (9, 0))[0]
    if "ptx" not in result:
        pytest.skip(f"numba-cuda could not write PTX here: {result.get('error')}")
    return result["ptx"]


def _loop_bodies(ptx: str) -> list[list[str]]:
    """The instructions of each block that branches back to its own label (a loop body)."""
    bodies, label, body = [], None, []
    for line in ptx.splitlines():
        line = line.strip()
        if re.match(r"^\$L\w+:$", line):
            label, body = line[:-1], []
        elif label:
            body.append(line)
            if re.search(rf"bra(\.uni)?\s+{re.escape(label)};", line):
                bodies.append(body)
                label = None
    return bodies


def _memory_order(body):
    return ["ld" if "ld.global" in line else "st" for line in body if "ld.global" in line or "st.global" in line]


def test_ilp4_copy_loop_issues_four_loads_before_any_store():
    orders = [_memory_order(b) for b in _loop_bodies(_ptx("copy_resident_ilp4"))]
    assert ["ld"] * 4 + ["st"] * 4 in orders, orders


def test_the_compiler_does_not_hoist_loads_for_us():
    """Known-wrong for the test above: the ILP-1 loop (which LLVM unrolls) keeps each load next to its
    store, because numba-cuda's array arguments carry no noalias. Hoisting is the author's job."""
    orders = [_memory_order(b) for b in _loop_bodies(_ptx("copy_resident"))]
    assert orders and all(o == ["ld", "st"] * (len(o) // 2) for o in orders), orders


@pytest.mark.parametrize("name, at_least", [("fma", 8), ("fma_ilp4", 32)])
def test_fma_loops_hold_eight_fmas_per_chain_per_iteration(name, at_least):
    bodies = _loop_bodies(_ptx(name))
    fmas = [sum("fma.rn.f32" in line for line in b) for b in bodies]
    assert max(fmas) >= at_least, fmas
    # and the loop's counter, compare and branch are a small share of the body
    biggest = bodies[fmas.index(max(fmas))]
    assert max(fmas) / len(biggest) >= 0.7, biggest


# --- the model: Little's law with the recordings as inputs ---


def _recording(name, frame, device="NVIDIA H200", sm_count=132):
    return reference.Recording(
        name, "nvidia-h200", frame,
        {"device": {"device": device, "sm_count": sm_count, "compute_capability": "9.0"},
         "sweeps": {name: {"date": "2026-10-01T00:00:00"}}},
        reference.REFERENCE_ROOT / "nvidia-h200" / f"{name}.csv",
    )


FIRST = pd.DataFrame({
    "kernel": ["copy", "copy", "copy_ilp4", "copy_ilp4"], "ilp": [1, 1, 4, 4], "threads_per_block": 64,
    "active_blocks": [8, 32, 8, 32], "occupancy_pct": [25.0, 100.0, 25.0, 100.0],
    "gbps": [800.0, 800.0, 2000.0, 3000.0],
})
CEILINGS = pd.DataFrame({"quantity": ["copy bandwidth", "fp32 matmul"], "unit": ["GB/s", "TFLOP/s"],
                         "measured": [4000.0, 50.0]})


def test_recorded_latency_is_littles_law_on_the_ilp4_low_occupancy_point():
    rec = _recording("occupancy.memory_bound", FIRST)
    # 8 blocks × 2 warps × 4 loads × 256 B = 16 KiB per SM; × 132 SMs ÷ 2,000 B/ns = 1,081.3 ns
    assert ol.recorded_latency_ns(rec) == pytest.approx(16384 * 132 / 2000)
    # known-wrong inputs: the ILP-1 point (dispatch-bound) is never used, and no ILP-4 row means no latency
    assert ol.recorded_latency_ns(_recording("x", FIRST[FIRST.kernel == "copy"])) is None
    assert ol.recorded_latency_ns(None) is None
    assert ol.recorded_copy_gbps(_recording("measuring.ceilings", CEILINGS)) == 4000.0
    assert ol.recorded_copy_gbps(_recording("x", FIRST)) is None


def test_memory_model_from_a_calibration_predicts_the_ratios():
    rec = _recording("occupancy.memory_resident", FIRST)
    cal = calibration.calibration_from("NVIDIA H200", 132, 2000.0, 4000.0, "by hand")
    model = ol.speed_model("memory", rec, calibration=cal)
    latency = 2 * 8192 * 132 / 2000  # reads in flight ÷ read rate (half the effective GB/s)
    assert cal.latency_ns == pytest.approx(latency)
    assert model.warps_needed == pytest.approx(4000 / 132 * latency / 256)  # = 128 warp copies per SM
    assert "recorded copy ceiling" in model.assumptions and "calibrated on lesson 03" in model.assumptions
    assert model.ratio(0.25, 1) == pytest.approx(0.25)  # both below the need: linear in warps
    assert model.ratio(0.25, 4) == pytest.approx(64 / 128)  # 100 %: capped at the ceiling
    assert model.ratio(0.125, 4) == pytest.approx(32 / 128)
    # a GPU the course never recorded: the H200's calibrated latency, said to be an assumption, and its datasheet
    other = _recording("occupancy.memory_resident", FIRST, device="NVIDIA H100 80GB HBM3")
    fallback = ol.speed_model("memory", other)
    h200 = calibration.recorded()
    assert (f"{h200.latency_ns:.0f} ns loaded latency (the NVIDIA H200's calibrated latency, assumed for the "
            "NVIDIA H100 80GB HBM3)") in fallback.assumptions and "(datasheet)" in fallback.assumptions
    assert "600 ns" not in fallback.assumptions  # the unsourced "typical unloaded" constant is gone (F13)
    with pytest.raises(InvalidConfig):
        model.ratio(0, 1)
    with pytest.raises(InvalidConfig):
        model.ratio(0.25, 1, high_occupancy=1.5)


@sim_only
def test_the_lessons_predictions_from_the_course_recordings():
    """The stated predictions come from the one calibration (lesson 03's copy: ≈ 823 ns, 4,271 GB/s), not from
    a point of this lesson's own data (W3: the ILP-4 prediction used to return the point it was calibrated on)."""
    h200 = calibration.recorded()
    if h200 is None:
        pytest.skip("no calibration recording in data/reference")
    model = ol.lesson_speed_model("memory")
    assert model.warps_needed == pytest.approx(h200.ceiling_gbps / h200.sm_count * h200.latency_ns / 256)
    said = ol.predictions()
    assert said["copy_resident at 25 %"] == 0.25
    assert said["copy_resident_ilp4 at 25 %"] == round(64 / model.warps_needed, 2)
    assert said["FMA ILP 1 at 12.5 %"] == 0.5 and said["FMA ILP 4 at 12.5 %"] == 1.0
    check = ol.first_attempt_check(model)
    if check is not None:  # the first attempt is a check of the model, not its input
        assert 0.85 < check["recorded GB/s"] / check["predicted GB/s"] < 1.0
        assert said["copy_resident_ilp4 at 25 %"] != round(check["recorded GB/s"] / h200.ceiling_gbps, 2)


def test_first_attempt_recording_contradicts_the_model_as_the_lesson_says():
    """The one-element recording stays labelled as a first attempt: its ILP-1 ratio is far from the model's."""
    rec = reference.load(ol.FIRST_ATTEMPT_SWEEP)
    if rec is None:
        pytest.skip("no first-attempt recording in data/reference")
    copy = rec.data[rec.data.kernel == "copy"].set_index("occupancy_pct").gbps
    assert copy.loc[25.0] / copy.loc[100.0] > 0.9  # flat: the dispatcher, not latency hiding
    assert "first attempt" in reference.SWEEPS[ol.FIRST_ATTEMPT_SWEEP].description
