"""Lesson 03 on a real GPU: the issue's expectations, each a ratio of two measurements made in one run.

* the stride-1 Numba copy reaches ≥ 85 % of the device's copy ceiling, measured in the same run
  (a large array: 1 GiB each way, like the ceiling itself);
* float32 stride 8 reaches ≤ 0.35× the effective bandwidth of stride 1 (the sector model says 1/8);
* a copy misaligned by one element reaches ≥ 0.8× the aligned one (the model's lower bound is 4/5).
"""

import pytest

from gpucourse.errors import InvalidConfig
from gpucourse.lessons import coalescing
from gpucourse.measure import runtime

pytestmark = pytest.mark.gpu

LARGE_ELEMENTS = 1 << 28  # float32: 1 GiB each way
SWEEP_ELEMENTS = 1 << 26  # float32: 256 MiB each way (2 GiB arrays at stride 8)


def test_stride_one_copy_reaches_the_copy_ceiling():
    from gpucourse.measure import ceilings

    ceiling_gbps = ceilings.measure_copy_gbps()
    m = coalescing.measure_copy(1, 0, "float32", n_elements=LARGE_ELEMENTS, copy_ceiling_gbps=ceiling_gbps)
    assert m.measured, m.reason
    assert m.gbps >= 0.85 * ceiling_gbps, f"{m.summary()}; copy ceiling {ceiling_gbps:.0f} GB/s"


def test_stride_eight_costs_what_the_sector_model_says():
    stride_1 = coalescing.measure_copy(1, 0, "float32", n_elements=SWEEP_ELEMENTS)
    stride_8 = coalescing.measure_copy(8, 0, "float32", n_elements=SWEEP_ELEMENTS)
    assert stride_8.gbps <= 0.35 * stride_1.gbps, f"{stride_1.summary()} / {stride_8.summary()}"


def test_misaligned_by_one_element_keeps_most_of_the_bandwidth():
    aligned = coalescing.measure_copy(1, 0, "float32", n_elements=SWEEP_ELEMENTS)
    misaligned = coalescing.measure_copy(1, 1, "float32", n_elements=SWEEP_ELEMENTS)
    assert misaligned.gbps >= 0.8 * aligned.gbps, f"{aligned.summary()} / {misaligned.summary()}"


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
