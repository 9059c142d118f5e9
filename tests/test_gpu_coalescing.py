"""Lesson 03 on a real GPU: the issue's expectations, each a ratio of two measurements made in one run.

* the course's best Numba copy (best_copy: four 8-byte loads per thread) reaches ≥ 90 % (Hopper) / 85 % of the
  device's copy ceiling, measured in the same run (1 GiB each way, like the ceiling itself);
* bytes in flight: its gain over the one-element copy reaches ≥ 0.8 of what Little's law predicts here;
* float32 stride 32 keeps between 1/32 and 0.16 of stride 1 (both with four loads per thread);
* float32 stride 8 reaches ≤ 0.35× the effective bandwidth of stride 1 (the sector model says 1/8);
* a copy misaligned by one element reaches ≥ 0.8× the aligned one (the model's lower bound is 4/5).
"""

import pytest
from gpu_expectations import expect

from gpucourse.errors import InvalidConfig
from gpucourse.lessons import coalescing
from gpucourse.measure import runtime

pytestmark = pytest.mark.gpu

LARGE_ELEMENTS = 1 << 28  # float32: 1 GiB each way
SWEEP_ELEMENTS = 1 << 26  # float32: 256 MiB each way (2 GiB arrays at stride 8)
STRIDE32_ELEMENTS = 1 << 25  # float32: 128 MiB each way, beyond every L2; 4 GiB arrays at stride 32 fit a 16-GB part


@pytest.fixture(scope="module")
def large_copies():
    """The copy ceiling (the session's fresh one, or the report's: tests/conftest.py), best_copy and the
    one-element copy on 1 GiB each way: measured once for the tests below (one verdict per expectation)."""
    from gpucourse.measure import ceilings

    ceiling_gbps = ceilings.copy_gbps()
    best = coalescing.measure_rung(*coalescing.BEST_RUNG, n_elements=LARGE_ELEMENTS, copy_ceiling_gbps=ceiling_gbps)
    one = coalescing.measure_copy(1, 0, "float32", n_elements=LARGE_ELEMENTS, copy_ceiling_gbps=ceiling_gbps)
    return ceiling_gbps, best, one


def test_the_best_copy_reaches_the_copy_ceiling(large_copies, record_property):
    ceiling_gbps, m, _ = large_copies
    assert m.measured, m.reason
    bound = expect("coalescing.best_copy_over_copy_ceiling")
    record_property("ratio", round(m.gbps / ceiling_gbps, 4))
    record_property("threshold", bound)
    assert m.gbps >= bound * ceiling_gbps, f"{m.summary()}; copy ceiling {ceiling_gbps:.0f} GB/s"


def test_bytes_in_flight_explain_the_one_element_copy(large_copies, record_property):
    from gpu_expectations import ONE_ELEMENT_FLOOR

    from gpucourse import hardware
    from gpucourse.lessons.coalescing import inflight

    bound = expect("coalescing.best_over_one_element_vs_model")
    ceiling_gbps, best, one = large_copies
    assert one.measured and best.measured, (one.reason, best.reason)
    info = runtime.device()
    threads = hardware.COMPUTE_CAPABILITIES[info.compute_capability].max_threads_per_sm
    latency = inflight.h200_calibration().latency_ns

    def model(loads, width):
        flight = inflight.bytes_in_flight_per_sm(threads, loads, width)
        return inflight.predicted_gbps(flight, info.sm_count, latency, ceiling_gbps)

    predicted_gain = model(*coalescing.BEST_RUNG) / model(1, 4)
    needed = max(ONE_ELEMENT_FLOOR, bound * predicted_gain)
    record_property("ratio", round(best.gbps / one.gbps, 4))
    record_property("threshold", round(needed, 4))
    assert best.gbps / one.gbps >= needed, (
        f"{one.summary()} / {best.summary()}; model gain {predicted_gain:.2f} at {latency:.0f} ns")


@pytest.fixture(scope="module")
def stride_32():
    stride_1 = coalescing.measure_copy(1, 0, "float32", n_elements=STRIDE32_ELEMENTS, coarsened=True)
    stride_32 = coalescing.measure_copy(32, 0, "float32", n_elements=STRIDE32_ELEMENTS, coarsened=True)
    assert stride_1.measured and stride_32.measured, (stride_1.reason, stride_32.reason)
    return stride_1, stride_32


def test_stride_32_costs_at_least_the_sector_model(stride_32, record_property):
    stride_1, stride_32 = stride_32
    most = expect("coalescing.stride32_over_stride1.max")
    record_property("ratio", round(stride_32.gbps / stride_1.gbps, 4))
    assert stride_32.gbps <= most * stride_1.gbps, f"{stride_1.summary()} / {stride_32.summary()}"


def test_stride_32_costs_at_most_a_whole_line(stride_32, record_property):
    stride_1, stride_32 = stride_32
    least = expect("coalescing.stride32_over_stride1.min")
    record_property("ratio", round(stride_32.gbps / stride_1.gbps, 4))
    assert stride_32.gbps >= least * stride_1.gbps, f"{stride_1.summary()} / {stride_32.summary()}"


def test_stride_eight_costs_what_the_sector_model_says():
    stride_1 = coalescing.measure_copy(1, 0, "float32", n_elements=SWEEP_ELEMENTS)
    stride_8 = coalescing.measure_copy(8, 0, "float32", n_elements=SWEEP_ELEMENTS)
    bound = expect("coalescing.stride8_over_stride1")
    assert stride_8.gbps <= bound * stride_1.gbps, f"{stride_1.summary()} / {stride_8.summary()}"


def test_misaligned_by_one_element_keeps_most_of_the_bandwidth():
    aligned = coalescing.measure_copy(1, 0, "float32", n_elements=SWEEP_ELEMENTS)
    misaligned = coalescing.measure_copy(1, 1, "float32", n_elements=SWEEP_ELEMENTS)
    bound = expect("coalescing.misaligned_over_aligned")
    assert misaligned.gbps >= bound * aligned.gbps, f"{aligned.summary()} / {misaligned.summary()}"


def test_sweeps_produce_their_columns():
    data = coalescing.stride_sweep(dtypes=("float16",), strides=(1, 8))
    assert list(data.stride) == [1, 8] and data.gbps.notna().all()
    assert data.copy_ceiling_gbps.iloc[0] > 0
    layout = coalescing.layout_sweep(n_particles=1 << 22, matrix_side=2048)
    assert list(layout.layout) == list(coalescing.LAYOUTS) and layout.gbps.notna().all()


def test_an_array_larger_than_the_device_is_refused():
    free = runtime.free_memory_bytes()
    with pytest.raises(InvalidConfig, match="GiB"):
        coalescing.measure_copy(64, 0, "float64", n_elements=free // 64 + 1)


def test_the_microscope_runs_on_a_gpu_machine_too():
    table = coalescing.counted_sectors_table("float32", 1, strides=(1, 8))
    assert list(table.counted_src) == [5.0, 32.0]
