"""What the GPU tier may expect on each architecture, in one place.

A ratio that holds on an H100 fails on a T4 or an RTX 4090 for reasons of the hardware, not of the
course: Turing (cc 7.5) has no bf16 or TF32 tensor cores; GeForce Ampere, Ada and Blackwell cards
run TF32 at the fp32 CUDA-core rate and fp16/bf16 with fp32 accumulation at half the tensor rate of
the data-centre parts (NVIDIA Ampere GA102, Ada and RTX Blackwell architecture whitepapers); cc 8.6,
8.9 and 12.0 hold both GeForce and data-centre cards (A10, L4, L40S), so their ratios are written for
the weaker of the two. A ratio left as None is skipped with its reason.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gpucourse.measure import runtime


@dataclass(frozen=True)
class Expectations:
    bf16_over_fp32: float | None  # bf16 matmul TFLOP/s ÷ fp32 (CUDA cores) at 8192³
    tf32_over_fp32: float | None
    padded_over_unpadded_transpose: float  # padded shared-memory transpose ÷ unpadded, 8192² float32
    why_not: str = ""  # why a ratio is not asserted here


_HBM_TENSOR = Expectations(8.0, 3.0, 1.3)  # A100, H100/H200, B200/B300: dense tensor ≥ 8× fp32 on the datasheets
# Where DRAM bandwidth is low next to shared memory's, removing bank conflicts buys little: padding
# must not cost bandwidth (0.95: one run's noise), a gain is reported, not asserted.
_MIXED = Expectations(1.5, None, 0.95, "TF32 runs at the fp32 rate on GeForce cards of this architecture")

BY_CC = {
    (7, 5): Expectations(None, None, 0.95, "Turing (T4, RTX 20xx) has no bf16 or TF32 tensor cores"),
    (8, 0): _HBM_TENSOR,
    (8, 6): _MIXED,
    (8, 9): _MIXED,
    (9, 0): _HBM_TENSOR,
    (10, 0): _HBM_TENSOR,
    (10, 3): _HBM_TENSOR,
    (12, 0): _MIXED,
}


def for_this_gpu() -> Expectations:
    """The expectations for the device's compute capability; skips the test when none is written."""
    cc = tuple(runtime.device().compute_capability)
    if cc not in BY_CC:
        pytest.skip(f"no GPU-tier expectations are written for compute capability {cc[0]}.{cc[1]} "
                    "(add a row to tests/gpu_expectations.py)")
    return BY_CC[cc]


def require(ratio: float | None, expectations: Expectations, what: str) -> float:
    """The ratio to assert, or a skip that says why this architecture has none."""
    if ratio is None:
        pytest.skip(f"{what} is not asserted on {runtime.device().name}: {expectations.why_not}")
    return ratio


# --- lesson 08 "Feeding the GPU" -----------------------------------------------------------------


@dataclass(frozen=True)
class FeedingExpectations:
    pinned_over_pageable: float  # host→device GB/s of a 256 MiB copy, pinned ÷ pageable
    eager_over_graph_per_kernel: float  # µs per tiny kernel of a 64-kernel chain, eager ÷ CUDA graph replay
    unfused_over_fused: float  # time of the five-kernel chain ÷ the fused kernel, n = 2^24 (bytes: 44/12 ≈ 3.7×)
    l2_over_dram: float  # warm copy GB/s, working set a quarter of the L2 ÷ 16× the L2
    why_not: str = ""


# Pinned never loses to pageable for a large copy (the driver stages pageable memory through a pinned
# buffer); by how much depends on the host, so only ≥ 1 is asserted. A graph replay saves the host's
# per-launch cost (several µs) and a tiny kernel runs ~2 µs, so 1.5× is a floor. The fused chain moves
# 3.7× fewer bytes of DRAM; 2.5× leaves room for the last kernel's tail and clocks. The L2's bandwidth
# is about 2–3× HBM's on A100/H100 and more over GDDR; 1.3× is a floor.
_FEEDING = FeedingExpectations(1.0, 1.5, 2.5, 1.3)

FEEDING_BY_CC = dict.fromkeys(BY_CC, _FEEDING)


def feeding_for_this_gpu() -> FeedingExpectations:
    """Lesson 08's expectations for this device's compute capability; skips when none is written."""
    cc = tuple(runtime.device().compute_capability)
    if cc not in FEEDING_BY_CC:
        pytest.skip(f"no lesson-08 GPU-tier expectations are written for compute capability {cc[0]}.{cc[1]} "
                    "(add a row to FEEDING_BY_CC in tests/gpu_expectations.py)")
    return FEEDING_BY_CC[cc]
