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
    # Lesson 04a, 2²⁶ float32 summed with 256-thread blocks (GB/s within one run). Sequential addressing
    # drops the interleaved kernel's integer modulo and 35 of its 47 add issues per block; the library
    # (CUB under cupy.sum) must reach a good fraction of our best rung. Not yet calibrated on a GPU:
    # conservative until the first recording (README: the GPU tier).
    sequential_over_interleaved_sum: float = 1.2
    library_over_best_sum: float = 0.8


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
