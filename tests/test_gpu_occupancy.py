"""Lesson 05 on a real GPU: the calculator against the driver, and latency hiding measured.

Every expectation is a ratio or an equality measured in one run, never an absolute time.
"""

import pytest

from gpucourse.lessons import occupancy as ol
from gpucourse.lessons.occupancy.calculator import occupancy
from gpucourse.measure import ptxinfo, runtime

pytestmark = pytest.mark.gpu


def test_calculator_equals_the_driver_for_real_kernels():
    data = ol.driver_comparison()
    # 6 kernels × 3 register caps × 5 block sizes × 3 dynamic shared sizes.
    assert len(data) >= 20
    mismatches = data[data.model_blocks != data.driver_blocks]
    assert mismatches.empty, mismatches.to_string()
    # The comparison is not trivial: several limiters and several answers are covered.
    assert data.model_blocks.nunique() >= 5
    named = {part for limiter in data.model_limiter for part in limiter.split(" + ")}
    assert {"registers", "shared memory", "warps"} <= named


def test_resource_usage_on_the_gpu_and_max_registers():
    free = ol.usage("accumulators")
    capped = ol.usage("accumulators", max_registers=32)
    assert "numba-cuda" in free.source
    assert free.registers > 32 >= capped.registers
    assert ol.usage("block_sum").shared_bytes == 4096
    assert ol.usage("copy").registers < free.registers


def test_ptxas_without_a_gpu_agrees_with_the_gpu_on_static_shared_memory():
    cc = tuple(runtime.device().compute_capability)
    k = ol.KERNELS["block_sum"]
    offline = ptxinfo.resource_usage(k.kernel, k.signature, cc, use_gpu=False)
    if not offline.known:
        pytest.skip(offline.reason)
    assert offline.shared_bytes == ol.usage("block_sum").shared_bytes


def test_memory_bound_kernel_needs_occupancy_to_hide_latency():
    rig = ol.SpeedRig("memory")
    u = rig.usage("copy")
    levels = ol.padding_levels(u.registers, u.shared_bytes, ol.SWEEP_THREADS, rig.cc, targets=(0.25, 1.0))
    (low_pad, low), (high_pad, high) = levels[0], levels[-1]
    assert low.occupancy <= 0.25 and high.occupancy >= 0.75
    # The padding really lowers occupancy: the driver agrees with the calculator at both levels.
    assert ol.driver_blocks("copy", ol.SWEEP_THREADS, low_pad) == low.active_blocks
    assert ol.driver_blocks("copy", ol.SWEEP_THREADS, high_pad) == high.active_blocks
    slow = rig.measure("copy", ol.SWEEP_THREADS, low_pad)
    fast = rig.measure("copy", ol.SWEEP_THREADS, high_pad)
    assert slow.measured and fast.measured
    assert slow.gbps <= 0.7 * fast.gbps, (slow.summary(), fast.summary())


def test_instruction_level_parallelism_makes_up_for_low_occupancy():
    rig = ol.SpeedRig("compute")
    u = rig.usage("fma")
    threads = ol.SWEEP_THREADS
    (pad, level), *_ = ol.padding_levels(u.registers, u.shared_bytes, threads, rig.cc, targets=(0.125,))
    u4 = rig.usage("fma_ilp4")
    same = occupancy(threads, u4.registers, u4.shared_bytes + pad, rig.cc)
    assert same.active_blocks == level.active_blocks
    one_chain = rig.measure("fma", ol.SWEEP_THREADS, pad)
    four_chains = rig.measure("fma_ilp4", ol.SWEEP_THREADS, pad)
    # Same FMAs, same occupancy (12.5 %): four independent chains per thread keep more FMAs in flight.
    assert four_chains.tflops >= 1.3 * one_chain.tflops, (one_chain.summary(), four_chains.summary())


def test_speed_sweep_columns_match_the_registration():
    data = ol.measure_speed("compute", targets=(0.25, 1.0))
    for column in ol.SPEED_COLUMNS + ("tflops", "driver_blocks"):
        assert column in data.columns
    assert (data.driver_blocks == data.active_blocks).all()
