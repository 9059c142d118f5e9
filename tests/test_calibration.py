"""gpucourse.measure.calibration: one loaded latency and one copy ceiling per GPU, from the recordings (issue 47).

Lessons 03, 04a and 05 once printed 823, 400 and 876 ns for the same H200: three formulas on three points. Now
one function computes the latency (lesson 03's one-element copy: read bytes in flight ÷ read rate) and the
ceiling (lesson 00's measured copy), and the lessons read them from it."""

from __future__ import annotations

import pytest

from gpucourse.errors import InvalidConfig
from gpucourse.measure import calibration, reference


def test_the_latency_is_read_bytes_over_read_rate():
    # 100 SMs × 8,192 B of reads = 819,200 B in flight; 2,048 GB/s effective is 1,024 GB/s of reads: 800 ns
    assert calibration.latency_from_copy_ns(2048.0, 8192, 100) == pytest.approx(800.0)
    # known-wrong: the read bytes over the read-plus-write rate (04a's old "400 ns") is half of it
    assert calibration.latency_from_copy_ns(2048.0, 8192, 100) != pytest.approx(8192 * 100 / 2048.0)
    cal = calibration.calibration_from("test GPU", 100, 2048.0, 3000.0, "by hand")
    assert cal.read_gbps == 1024.0 and cal.reads_in_flight_per_sm == 8192 and cal.latency_ns == pytest.approx(800.0)
    # Little's law on the calibration's own reads gives back the recorded read rate: the calibration is consistent
    assert calibration.bound_gbps(8192 * 100, cal.latency_ns, 3000.0) == pytest.approx(cal.read_gbps)
    assert calibration.bound_gbps(8192 * 100 * 8, cal.latency_ns, 3000.0) == 3000.0  # capped at the ceiling


@pytest.mark.parametrize("call", [
    lambda: calibration.latency_from_copy_ns(0.0, 8192, 100),
    lambda: calibration.latency_from_copy_ns(2048.0, 0, 100),
    lambda: calibration.latency_from_copy_ns(2048.0, 8192, 0),
    lambda: calibration.latency_from_copy_ns(2048.0, 8192, True),
    lambda: calibration.calibration_from("x", 100, 2048.0, 0.0, "by hand"),
    lambda: calibration.bound_gbps(1e6, 0.0, 4000.0),
])
def test_bad_input_is_a_clear_value_error(call):
    with pytest.raises(InvalidConfig) as error:
        call()
    assert isinstance(error.value, ValueError) and "\n" not in str(error.value)


def test_the_h200s_calibration_comes_from_its_recordings():
    cal = calibration.recorded("nvidia-h200")
    if cal is None:
        pytest.skip("no H200 recording in data/reference")
    stride = reference.load(calibration.CALIBRATION_SWEEP, gpu="nvidia-h200").data
    row = stride[(stride.dtype == "float32") & (stride.stride == 1)].iloc[0]
    assert cal.device == "NVIDIA H200" and cal.sm_count == 132 and cal.one_element_gbps == row.gbps
    assert "coalescing.stride.csv" in cal.source
    # one copy ceiling: lesson 00's measurement, the same number the stride sweep was normalised by
    assert cal.ceiling_gbps == calibration.recorded_ceiling_gbps("nvidia-h200")
    assert cal.ceiling_gbps == pytest.approx(float(row.copy_ceiling_gbps), rel=1e-9)
    assert cal.latency_ns == pytest.approx(2 * 2048 * 4 * 132 / row.gbps) and 800 < cal.latency_ns < 850
    assert calibration.for_device("NVIDIA H200") == cal
    assert calibration.for_device("NVIDIA B200") is None  # never recorded: no calibration, nothing typed in
    assert f"loaded latency {cal.latency_ns:.0f} ns" in calibration.summary(cal)


@pytest.mark.skipif(__import__("gpucourse.measure.runtime").measure.runtime.is_gpu(),
                    reason="on a GPU the lessons model that GPU")
def test_the_three_lessons_print_the_same_latency():
    """W4: lessons 03, 04a and 05 read one number (823 ns on the H200), where they once said 823, 400 and 876."""
    from gpucourse.lessons import occupancy, reductions
    from gpucourse.lessons.coalescing import inflight

    cal = calibration.recorded("nvidia-h200")
    if cal is None:
        pytest.skip("no H200 recording in data/reference")
    said = f"{cal.latency_ns:.0f} ns"
    assert said in inflight.derivation(inflight.h200_calibration())
    assert said in reductions.in_flight_model().attrs["source"]
    assert occupancy.lesson_speed_model("memory").assumptions.startswith(said)
