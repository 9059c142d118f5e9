"""Lesson 05 on a real GPU: the calculator against the driver, and latency hiding measured.

Every expectation is a ratio or an equality measured in one run, never an absolute time.
"""

import pytest
from gpu_expectations import expect

from gpucourse.lessons import occupancy as ol
from gpucourse.lessons.occupancy.calculator import occupancy
from gpucourse.measure import ptxinfo, runtime

pytestmark = pytest.mark.gpu


def test_calculator_equals_the_driver_for_real_kernels():
    data = ol.driver_comparison()
    # 8 kernels × 3 register caps × 5 block sizes × 3 dynamic shared sizes.
    assert len(data) >= 20
    mismatches = data[data.model_blocks != data.driver_blocks]
    agree = 1 - len(mismatches) / len(data)
    assert agree >= expect("occupancy.calculator_matches_driver"), mismatches.to_string()
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
    # G20: on a GPU the spill fields come from ptxas on the PTX for this device's cc, so the explorer can show them
    assert capped.spill_store_bytes is not None and capped.spill_store_bytes > 0, capped
    assert free.spill_store_bytes == 0, free


def test_ptxas_without_a_gpu_agrees_with_the_gpu_on_static_shared_memory():
    cc = tuple(runtime.device().compute_capability)
    k = ol.KERNELS["block_sum"]
    offline = ptxinfo.resource_usage(k.kernel, k.signature, cc, use_gpu=False)
    if not offline.known:
        pytest.skip(offline.reason)
    assert offline.shared_bytes == ol.usage("block_sum").shared_bytes


def _levels(rig, name, targets):
    u = rig.usage(name)
    return ol.padding_levels(u.registers, u.shared_bytes, ol.SWEEP_THREADS, rig.cc, targets=targets)


@pytest.fixture(scope="module")
def memory_bound():
    """The resident-grid copies (grid = driver blocks/SM × SMs) at 25 % and 100 % occupancy, ILP 1 and ILP 4,
    measured once for the three tests below (one verdict per expectation)."""
    rig = ol.SpeedRig("memory")
    measured = {}  # ILP 1 and ILP 4, each (25 %, 100 %)
    for name in ("copy_resident", "copy_resident_ilp4"):
        (low_pad, low), (high_pad, high) = (levels := _levels(rig, name, (0.25, 1.0)))[0], levels[-1]
        assert low.occupancy <= 0.25 and high.occupancy >= 0.75  # the calculator's levels: not a hardware threshold
        # The padding really lowers occupancy: the driver agrees with the calculator at both levels,
        # and the grid is exactly the resident blocks.
        for pad, level in ((low_pad, low), (high_pad, high)):
            assert ol.driver_blocks(name, ol.SWEEP_THREADS, pad) == level.active_blocks
            assert rig.grid(name, ol.SWEEP_THREADS, pad) == level.active_blocks * rig.sm_count
        measured[name] = (rig.measure(name, ol.SWEEP_THREADS, low_pad),
                          rig.measure(name, ol.SWEEP_THREADS, high_pad))
    assert all(m.measured for pair in measured.values() for m in pair)
    return measured


def _ratio(record_property, slow, fast, threshold: float) -> tuple[float, tuple]:
    record_property("ratio", round(float(slow.gbps / fast.gbps), 4))
    record_property("threshold", threshold)
    return slow.gbps / fast.gbps, (slow.summary(), fast.summary())


def test_ilp4_at_low_occupancy_matches_ilp1_at_full(memory_bound, record_property):
    """ILP 4 at 25 % occupancy matches ILP 1 at 100 %: the same bytes in flight per SM."""
    bound = expect("occupancy.memory_ilp4_low_over_ilp1_high")
    ratio, why = _ratio(record_property, memory_bound["copy_resident_ilp4"][0], memory_bound["copy_resident"][1],
                        bound)
    assert ratio >= bound, why


def test_memory_bound_kernel_needs_occupancy_to_hide_latency(memory_bound, record_property):
    """ILP 1 loses speed at low occupancy."""
    bound = expect("occupancy.memory_low_over_high")
    ratio, why = _ratio(record_property, *memory_bound["copy_resident"], bound)
    assert ratio <= bound, why


def test_four_loads_in_flight_keep_most_of_the_bandwidth_at_low_occupancy(memory_bound, record_property):
    """Four loads in flight per thread keep most of the bandwidth at 25 % (derived for Hopper; skipped elsewhere)."""
    bound = expect("occupancy.memory_ilp4_low_over_high")
    ratio, why = _ratio(record_property, *memory_bound["copy_resident_ilp4"], bound)
    assert ratio >= bound, why


@pytest.fixture(scope="module")
def fma_chains():
    """The FMA chains, one and four per thread, at 12.5 % occupancy (measured once for the two tests below)."""
    rig = ol.SpeedRig("compute")
    u = rig.usage("fma")
    threads = ol.SWEEP_THREADS
    (pad, level), *_ = ol.padding_levels(u.registers, u.shared_bytes, threads, rig.cc, targets=(0.125,))
    u4 = rig.usage("fma_ilp4")
    same = occupancy(threads, u4.registers, u4.shared_bytes + pad, rig.cc)
    assert same.active_blocks == level.active_blocks
    one_chain = rig.measure("fma", ol.SWEEP_THREADS, pad)
    four_chains = rig.measure("fma_ilp4", ol.SWEEP_THREADS, pad)
    return one_chain, four_chains


def test_instruction_level_parallelism_makes_up_for_low_occupancy(fma_chains, record_property):
    # Same FMAs, same occupancy (12.5 %): four independent chains per thread keep more FMAs in flight ...
    one_chain, four_chains = fma_chains
    gain, bound = four_chains.tflops / one_chain.tflops, expect("occupancy.ilp4_over_ilp1")
    record_property("ratio", round(float(gain), 4))
    record_property("threshold", bound)
    assert gain >= bound, (one_chain.summary(), four_chains.summary())


def test_the_ilp_gain_stays_within_the_latency_model(fma_chains, record_property):
    # ... but no more than the latency model allows: a larger gain means loop overhead, not latency, binds.
    one_chain, four_chains = fma_chains
    gain, bound = four_chains.tflops / one_chain.tflops, expect("occupancy.ilp4_over_ilp1.max")
    record_property("ratio", round(float(gain), 4))
    record_property("threshold", bound)
    assert gain <= bound, (one_chain.summary(), four_chains.summary())


def test_four_fma_chains_need_little_occupancy():
    rig = ol.SpeedRig("compute")
    (low_pad, _), *_, (high_pad, _) = _levels(rig, "fma_ilp4", (0.25, 1.0))
    slow = rig.measure("fma_ilp4", ol.SWEEP_THREADS, low_pad)
    fast = rig.measure("fma_ilp4", ol.SWEEP_THREADS, high_pad)
    assert slow.tflops >= expect("occupancy.fma_ilp4_low_over_high") * fast.tflops, (slow.summary(), fast.summary())


def test_speed_sweep_columns_match_the_registration():
    data = ol.measure_speed("compute", targets=(0.25, 1.0))
    for column in ol.SPEED_COLUMNS + ("tflops", "driver_blocks"):
        assert column in data.columns
    assert (data.driver_blocks == data.active_blocks).all()
