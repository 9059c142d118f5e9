"""The GPU tier's per-architecture expectations (tests/gpu_expectations.py) say what each GPU can do."""

from gpu_expectations import BY_CC

from gpucourse import hardware


def test_every_row_is_a_modelled_compute_capability():
    assert set(BY_CC) <= set(hardware.COMPUTE_CAPABILITIES)
    assert {(7, 5), (8, 0), (8, 9), (9, 0), (12, 0)} <= set(BY_CC)  # T4, A100, L4/RTX 4090, H100, RTX 5090


def test_a_t4_is_not_asked_for_tensor_core_ratios_it_cannot_reach():
    t4 = BY_CC[(7, 5)]
    assert t4.bf16_over_fp32 is None and t4.tf32_over_fp32 is None and "no bf16 or TF32" in t4.why_not
    assert t4.padded_over_unpadded_transpose < 1.3


def test_geforce_architectures_skip_tf32_and_expect_less_of_bf16():
    for cc in ((8, 6), (8, 9), (12, 0)):
        assert BY_CC[cc].tf32_over_fp32 is None and "fp32 rate" in BY_CC[cc].why_not
        assert BY_CC[cc].bf16_over_fp32 < BY_CC[(9, 0)].bf16_over_fp32
    assert (BY_CC[(9, 0)].bf16_over_fp32, BY_CC[(9, 0)].tf32_over_fp32) == (8.0, 3.0)
