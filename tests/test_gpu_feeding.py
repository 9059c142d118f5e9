"""GPU tier for lesson 08 (`pytest -m gpu -rP tests/test_gpu_feeding.py` on a machine with a GPU).

Each expectation is a ratio measured in one run (tests/gpu_expectations.py, FEEDING_BY_CC); the
numbers are printed and recorded as test properties so that a run documents the device.
"""

import numpy as np
import pytest
from gpu_expectations import expect

from gpucourse.lessons import feeding
from gpucourse.lessons.feeding import model

pytestmark = pytest.mark.gpu

BIG = 256 << 20


@pytest.fixture(scope="module")
def copies():
    """4 KiB and 256 MiB host→device copies, pinned and pageable: measured once for the two tests below."""
    table = feeding.copy_sweep(sizes=(4096, BIG))
    print(table.to_string())
    return table.set_index(["bytes", "memory"]).gbps


def test_pinned_beats_pageable_for_large_copies(copies, record_property):
    ratio = copies[(BIG, "pinned")] / copies[(BIG, "pageable")]
    record_property("pinned_over_pageable_256MiB", ratio)
    assert ratio >= expect("feeding.pinned_over_pageable")


def test_small_copies_are_latency_bound(copies, record_property):
    small_over_big = copies[(4096, "pinned")] / copies[(BIG, "pinned")]
    record_property("small_over_big", small_over_big)
    assert small_over_big <= expect("feeding.small_copy_over_big"), "a 4 KiB copy should be latency-bound"


def test_graph_replay_is_faster_per_kernel_than_launches(record_property):
    table = feeding.launch_sweep(chain_lengths=(64,))
    print(table.to_string())
    per = table.set_index("way").us_per_kernel
    ratio = per["eager launches"] / per["CUDA graph replay"]
    record_property("eager_over_graph_per_kernel", ratio)
    assert ratio >= expect("feeding.eager_over_graph_per_kernel")


def test_fused_chain_beats_the_unfused_chain(record_property):
    table = feeding.fusion_sweep(sizes=(1 << 24,))
    print(table.to_string())
    ms = table.set_index("version").median_ms
    ratio = ms["unfused"] / ms["fused"]
    record_property("unfused_over_fused", ratio)
    record_property("counted_byte_ratio", model.chain_bytes(1) / model.chain_bytes(1, fused=True))
    assert ratio >= expect("feeding.unfused_over_fused")


def test_l2_plateau_is_above_dram(record_property):
    table = feeding.l2_sweep(points_per_octave=1)
    print(table.to_string())
    l2 = table.l2_bytes.iloc[0]
    inside = table[table.working_set_bytes <= l2 / 4].gbps.iloc[-1]
    outside = table[table.working_set_bytes >= 16 * l2 * 0.99].gbps.iloc[0]
    record_property("l2_over_dram", inside / outside)
    assert inside >= expect("feeding.l2_over_dram") * outside


def test_no_sync_in_the_loop_is_not_slower(record_property):
    table = feeding.sync_sweep()
    print(table.to_string())
    ms = table.set_index("way").ms_per_step
    record_property("item_over_no_sync", ms[".item() every step"] / ms["no sync in the loop"])
    assert ms["no sync in the loop"] / ms[".item() every step"] <= expect("feeding.no_sync_over_item")


def test_two_streams_overlap_copies_with_kernels():
    one = feeding.overlap_events(streams=1)
    two = feeding.overlap_events(streams=2)
    print(two.to_string())
    assert two.end_us.max() < one.end_us.max(), "two streams should finish earlier than one"
    copies = two[two.engine != model.SMS]
    kernels = two[two.engine == model.SMS]
    overlapping = [(c, k) for c in copies.itertuples() for k in kernels.itertuples()
                   if c.start_us < k.end_us and k.start_us < c.end_us]
    assert overlapping, "no copy ran while a kernel ran"
    assert np.isfinite(two[["start_us", "end_us"]].to_numpy()).all()


def test_a_blocking_copy_and_a_read_wait_for_the_stream_and_a_pinned_non_blocking_copy_does_not(record_property):
    """Lesson 08 and lab 08's 3 host waits per step: a host→device `.to("cuda")` without non_blocking
    is cudaMemcpyAsync + cudaStreamSynchronize (PyTorch's memcpy_and_sync), `.item()` one more; from
    pinned memory with non_blocking=True the copy is queued. Counted per iteration as (8 − 4) ÷ 4
    iterations, so that what the profiler does at its start and stop drops out."""
    import torch

    host = torch.randn(64, 256)
    pinned = host.pin_memory()

    def blocking(n):
        for _ in range(n):
            host.to("cuda").sum().item()

    def queued(n):
        total = torch.zeros((), device="cuda")
        for _ in range(n):
            total += pinned.to("cuda", non_blocking=True).sum()
        return total

    def per_iteration(fn):
        four, eight = feeding.profile_counts(fn, 4), feeding.profile_counts(fn, 8)
        return {name: (eight[name] - four[name]) / 4 for name in eight if eight[name] != four[name]}

    waits, free = per_iteration(blocking), per_iteration(queued)
    print(waits, free, sep="\n")
    record_property("cudaStreamSynchronize_per_blocking_iteration", waits.get("cudaStreamSynchronize", 0))
    assert waits.get("cudaStreamSynchronize", 0) >= 2, waits  # the copy's and the .item()'s
    assert waits.get(feeding.BLOCKING_COPY) == 1 and waits.get("host sync: tensor.item()") == 1
    assert not feeding.host_syncs(free), free
