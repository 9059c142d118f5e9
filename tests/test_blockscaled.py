"""Block-scaled formats: every E2M1 and E8M0 code against the OCP MX v1.0 tables, rounding, the MX
and NVFP4 block scales, and the error table's ordering."""

import math

import numpy as np
import pytest

from gpucourse.errors import InvalidConfig
from gpucourse.lessons.precision import blockscaled as bs

# OCP MX v1.0 §5.3.3, FP4 E2M1: codes 0b0000..0b0111 (then the same negated), no inf, no NaN
SPEC_E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def test_every_e2m1_code_matches_the_spec_table():
    for code in range(16):
        expected = SPEC_E2M1[code & 7] * (-1 if code & 8 else 1)
        got = bs.decode_e2m1(code)
        assert got == expected and math.copysign(1, got) == (-1 if code & 8 else 1), code
    assert bs.E2M1_VALUES[7] == bs.E2M1_MAX == 6.0


def test_every_e8m0_code_matches_the_spec():
    for code in range(255):  # 2^(code − 127): 2^-127 … 2^127
        assert bs.decode_e8m0(code) == 2.0 ** (code - 127), code
    assert math.isnan(bs.decode_e8m0(0xFF))
    with pytest.raises(ValueError):
        bs.decode_e8m0(256)


def test_e2m1_rounds_to_nearest_ties_to_even_and_saturates():
    # every representable value is kept; midpoints go to the even code
    assert list(bs.quantize_e2m1(SPEC_E2M1)) == SPEC_E2M1
    midpoints = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]
    assert list(bs.quantize_e2m1(midpoints)) == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0]
    assert list(bs.quantize_e2m1([-0.3, 7.0, -100.0, 5.1])) == [-0.5, 6.0, -6.0, 6.0]
    assert bs.quantize_e2m1([2.9])[0] != 2.0  # known-wrong: truncation would give 2
    with pytest.raises(InvalidConfig):
        bs.quantize_e2m1([float("nan")])


def test_mx_scale_is_the_spec_power_of_two():
    v = np.zeros(32)
    v[0] = 10.0  # ⌊log2 10⌋ = 3; E2M1's emax = 2 → X = 2^1; 10 / 2 = 5 → rounds to 4 (tie to even) → 8
    q, codes = bs.mx_quantize(v, "e2m1")
    assert codes[0] == 127 + 1 and q[0] == 8.0
    q8, codes8 = bs.mx_quantize(v, "fp8_e4m3")  # E4M3's emax = 8 → X = 2^-5; 10 · 32 = 320 exact in E4M3
    assert codes8[0] == 127 - 5 and q8[0] == 10.0
    with pytest.raises(InvalidConfig):
        bs.mx_quantize(np.ones(33))


def test_nvfp4_block_and_tensor_scales():
    v = bs.sample_data(1024)
    q, block_scales, tensor_scale = bs.nvfp4_quantize(v)
    assert block_scales.shape == (1024 // 16,) and tensor_scale == pytest.approx(np.abs(v).max() / (448 * 6))
    assert block_scales.max() <= 448.0
    # each dequantised value is an E2M1 value times its block's scale
    units = q.reshape(-1, 16) / (block_scales[:, None] * tensor_scale)
    assert np.isin(np.round(np.abs(units), 9), bs._E2M1_GRID).all()


def test_block_scaling_beats_one_scale_on_the_same_data():
    table = bs.block_scaled_errors().set_index("scheme").relative_rms_error
    assert table["MXFP4 (E2M1, E8M0 scale per 32)"] < table["FP4 E2M1, one scale per tensor"]
    assert table["NVFP4 (E2M1, E4M3 scale per 16, FP32 per tensor)"] < table["MXFP4 (E2M1, E8M0 scale per 32)"]
    flushed = bs.block_scaled_errors().set_index("scheme").values_flushed_to_zero_pct
    assert flushed["MXFP8 (E4M3, E8M0 scale per 32)"] < flushed["FP8 E4M3, one scale per tensor"]
    assert table["MXFP8 (E4M3, E8M0 scale per 32)"] < table["NVFP4 (E2M1, E4M3 scale per 16, FP32 per tensor)"]


def test_the_spec_scale_can_clip_a_block_maximum():
    # X = 2^(⌊log2 amax⌋ − 8) puts amax / X in [256, 512): above E4M3's 448 it saturates
    v = np.full(32, 0.01)
    v[0] = 1.9  # 1.9 / 2^-8 = 486.4 > 448
    q, _ = bs.mx_quantize(v, "fp8_e4m3")
    assert q[0] == 448 * 2.0**-8 < 1.9


# --- why MXFP8 shows a larger RMS error than per-tensor FP8 (facts F1/F2, learner-walk-2 W17) ---------------

def test_mxfp8_loses_in_rms_to_one_outlier_not_to_saturation():
    why = bs.mxfp8_against_per_tensor()
    assert why["MXFP8 relative RMS"] > 1.5 * why["per-tensor FP8 relative RMS"]  # the table's ordering
    assert why["saturation's share of MXFP8's squared error"] < 0.1  # saturation explains a small part
    assert why["MXFP8 rounded-up scale relative RMS"] > 1.5 * why["per-tensor FP8 relative RMS"]  # still loses
    # the cause: one value holds most of the energy, stored exactly by the per-tensor scale
    assert 0.7 < why["largest value's share of the energy"] < 0.75
    assert why["largest value's error, per-tensor"] == 0.0 < why["largest value's error, MXFP8"]
    assert why["largest value's share of MXFP8's squared error"] > 0.5
    # per element, MXFP8 is the better scheme
    assert why["MXFP8 mean relative error per element"] < why["per-tensor FP8 mean relative error per element"]


def test_per_element_mxfp8_beats_per_tensor_fp8_on_every_seed():
    for seed in range(10):
        why = bs.mxfp8_against_per_tensor(bs.sample_data(seed=seed))
        assert why["MXFP8 mean relative error per element"] < why["per-tensor FP8 mean relative error per element"]


def test_the_rounded_up_scale_never_saturates():
    rng = np.random.default_rng(3)
    v = rng.standard_normal(32 * 64) * np.repeat(np.exp(rng.normal(0, 3, 64)), 32)
    for element, largest in (("fp8_e4m3", 448.0), ("e2m1", 6.0)):
        _, codes = bs.mx_quantize(v, element, scale_rule="ceil")
        scale = np.repeat(np.ldexp(1.0, codes.astype(int) - 127), 32)
        assert (np.abs(v) / scale <= largest).all()
    one = np.full(32, 0.01)
    one[0] = 1.9  # the floor scale clips it to 448 · 2^-8 (above); the rounded-up one keeps it
    q, _ = bs.mx_quantize(one, "fp8_e4m3", scale_rule="ceil")
    assert q[0] == pytest.approx(1.9, rel=1 / 16)
    with pytest.raises(ValueError):
        bs.mx_quantize(one, "fp8_e4m3", scale_rule="round")


def test_the_table_has_the_per_element_column_and_the_rounded_up_row():
    table = bs.block_scaled_errors().set_index("scheme")
    assert "MXFP8, scale rounded up (TransformerEngine)" in table.index
    per_element = table.mean_relative_error_per_element
    assert per_element["MXFP8 (E4M3, E8M0 scale per 32)"] < per_element["FP8 E4M3, one scale per tensor"]
