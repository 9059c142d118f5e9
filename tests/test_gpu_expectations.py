"""The GPU tier's per-architecture expectations (tests/gpu_expectations.py): every threshold of every GPU
test is written there, for every family Turing to Blackwell, with its derivation; an unknown GPU skips."""

import re
from pathlib import Path

import pytest
from gpu_expectations import (
    EXPECTATIONS,
    FAMILIES,
    FP32_LANES_PER_SM,
    REQUIRED_FAMILIES,
    Skip,
    _ilp_gain,
    expect,
)

from gpucourse import hardware
from gpucourse.measure import runtime

TESTS = Path(__file__).parent
GPU_TESTS = sorted(p for p in TESTS.glob("test_gpu_*.py") if p.name != Path(__file__).name)


def _used_keys() -> dict[str, list[str]]:
    used: dict[str, list[str]] = {}
    for path in GPU_TESTS:
        for key in re.findall(r"""expect\(\s*["']([^"']+)["']\s*\)""", path.read_text()):
            used.setdefault(key, []).append(path.name)
    return used


def test_every_key_a_gpu_test_asks_for_is_in_the_table_and_every_row_is_used():
    used = _used_keys()
    assert set(used) - set(EXPECTATIONS) == set(), "GPU tests ask for thresholds the table does not have"
    assert set(EXPECTATIONS) - set(used) == set(), "the table has thresholds no GPU test asserts"
    assert len(used) >= 25


def test_no_gpu_test_asserts_a_bare_threshold():
    # A ratio threshold written inline (`>= 0.85 *`, `ratio >= 1.7`) would hold on one GPU and not another.
    pattern = re.compile(r"assert .*((>=|<=|<|>)\s*\d+\.\d+\b(?!\.)|\b\d+\.\d+\s*\*)")
    offenders = [f"{path.name}:{n}: {line.strip()}" for path in GPU_TESTS
                 for n, line in enumerate(path.read_text().splitlines(), 1)
                 if pattern.search(line) and "not a hardware threshold" not in line]
    assert offenders == []


@pytest.mark.parametrize("key", sorted(EXPECTATIONS))
def test_every_required_family_has_a_threshold_or_a_reason(key):
    expectation = EXPECTATIONS[key]
    assert expectation.claim and len(expectation.derivation) > 40, key
    assert expectation.bound in ("at least", "at most")
    for cc in REQUIRED_FAMILIES:
        value = expectation.by_cc.get(cc)
        assert value is not None, f"{key}: nothing written for sm_{cc[0]}{cc[1]}"
        if isinstance(value, Skip):
            assert len(value.reason) > 20, (key, cc)
        else:
            assert isinstance(value, float) and value > 0, (key, cc)


def test_every_family_is_a_modelled_compute_capability():
    assert set(REQUIRED_FAMILIES) <= set(FAMILIES) <= set(hardware.COMPUTE_CAPABILITIES)
    assert set(FP32_LANES_PER_SM) == set(FAMILIES)


def _on(monkeypatch, cc, name="NVIDIA Test GPU"):
    info = runtime.DeviceInfo(name=name, compute_capability=cc, sm_count=40, memory_bytes=1 << 34,
                              l2_bytes=1 << 22, datasheet_bandwidth_gbps=None, simulated=False)
    monkeypatch.setattr(runtime, "device", lambda: info)


@pytest.mark.parametrize("cc", REQUIRED_FAMILIES)
def test_expect_gives_the_family_threshold_or_a_skip_naming_the_architecture(monkeypatch, cc):
    _on(monkeypatch, cc)
    for key, expectation in EXPECTATIONS.items():
        value = expectation.by_cc[cc]
        if isinstance(value, Skip):
            with pytest.raises(pytest.skip.Exception) as skipped:
                expect(key)
            assert f"compute capability {cc[0]}.{cc[1]}" in str(skipped.value) and value.reason in str(skipped.value)
        else:
            assert expect(key) == value


@pytest.mark.parametrize("cc", [(8, 7), (11, 0), (7, 0)])
def test_an_unknown_architecture_skips_every_expectation_and_says_which(monkeypatch, cc):
    _on(monkeypatch, cc, "NVIDIA Future GPU")
    for key in EXPECTATIONS:
        with pytest.raises(pytest.skip.Exception, match=rf"compute capability {cc[0]}\.{cc[1]} \(NVIDIA Future GPU\)"):
            expect(key)


def test_a_t4_is_not_asked_for_tensor_core_ratios_it_cannot_reach():
    t4 = {key: e.by_cc[(7, 5)] for key, e in EXPECTATIONS.items()}
    for key in ("precision.bf16_over_fp32", "precision.tf32_over_fp32", "precision.tensor_rounding_order",
                "precision.fp8_relative_error"):
        assert isinstance(t4[key], Skip), key
    assert "no bf16 or TF32" in t4["precision.bf16_over_fp32"].reason
    assert t4["tiling.padded_over_unpadded_transpose"] < 1.3


def test_geforce_families_skip_tf32_and_expect_less_of_bf16():
    e = EXPECTATIONS
    for cc in ((8, 6), (8, 9), (12, 0)):
        assert isinstance(e["precision.tf32_over_fp32"].by_cc[cc], Skip)
        assert "fp32 CUDA-core rate" in e["precision.tf32_over_fp32"].by_cc[cc].reason
        assert e["precision.bf16_over_fp32"].by_cc[cc] < e["precision.bf16_over_fp32"].by_cc[(9, 0)]
    assert (e["precision.bf16_over_fp32"].by_cc[(9, 0)], e["precision.tf32_over_fp32"].by_cc[(9, 0)]) == (8.0, 3.0)


def test_the_ilp_threshold_follows_its_derivation_on_every_family():
    # Asserted (1.3) only where Little's law predicts a clear gain; skipped where it predicts none.
    ilp = EXPECTATIONS["occupancy.ilp4_over_ilp1"]
    for cc in FAMILIES:
        gain, value = _ilp_gain(cc), ilp.by_cc[cc]
        if isinstance(value, Skip):
            assert gain < 1.3, (cc, gain)
        else:
            assert gain >= 1.5 * value, (cc, gain)
    assert _ilp_gain((8, 0)) == 1.0 and _ilp_gain((9, 0)) == 2.0 and _ilp_gain((7, 5)) == 2.0


def test_the_histogram_claim_is_asserted_only_where_every_part_has_many_sms():
    privatised = EXPECTATIONS["races.privatised_over_atomic"].by_cc
    assert {cc for cc, v in privatised.items() if not isinstance(v, Skip)} == {(8, 0), (9, 0), (10, 0), (10, 3)}
