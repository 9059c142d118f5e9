"""measure/ceilings.py: a recording never carries a ceiling cached on another day (gpu-path review, C11)."""

from __future__ import annotations

import pytest

from gpucourse.measure import ceilings, runtime


@pytest.fixture
def on_a_gpu(monkeypatch, tmp_path):
    monkeypatch.setattr(runtime, "is_gpu", lambda: True)
    monkeypatch.setattr(ceilings, "CACHE_PATH", tmp_path / "ceilings.json")
    monkeypatch.setattr(ceilings, "_cache_key", lambda: "nvidia-test|driver 13.0")


def test_inside_fresh_each_ceiling_is_measured_once_then_reused(on_a_gpu):
    measured = []

    def measure():
        measured.append(1)
        return 3000.0 + len(measured)

    assert ceilings._cached("copy_gbps", measure, refresh=False) == 3001.0  # first time: measured
    assert ceilings._cached("copy_gbps", measure, refresh=False) == 3001.0  # then the cache
    with ceilings.fresh():
        assert ceilings._cached("copy_gbps", measure, refresh=False) == 3002.0  # a recording: measured again
        with ceilings.fresh():  # gpu-report records sweep by sweep inside one report: once per report
            assert ceilings._cached("copy_gbps", measure, refresh=False) == 3002.0
    assert len(measured) == 2
    with ceilings.fresh():
        assert ceilings._cached("copy_gbps", measure, refresh=False) == 3003.0


def test_a_report_hands_its_fresh_copy_ceiling_to_the_tier(on_a_gpu, monkeypatch):
    # Issue 48, P4: the tier's pytest process compares with the ceiling the report measured, never a cached one.
    measured = []
    monkeypatch.setattr(ceilings, "measure_copy_gbps", lambda: measured.append(1) or 4200.0 + len(measured))
    monkeypatch.delenv(ceilings.HANDED_ON_ENV, raising=False)
    assert ceilings.copy_gbps() == 4201.0  # an old day's value, now in the cache
    with ceilings.fresh():
        env = ceilings.hand_on()  # the report: measured again, once
        assert ceilings.copy_gbps() == 4202.0
    monkeypatch.setenv(ceilings.HANDED_ON_ENV, env[ceilings.HANDED_ON_ENV])
    with ceilings.fresh():  # the tier's session (tests/conftest.py): the report's value, not measured a third time
        assert ceilings.copy_gbps() == 4202.0
    assert len(measured) == 2
    monkeypatch.setattr(ceilings, "_cache_key", lambda: "another-gpu|driver 13.0")  # never another GPU's value
    assert ceilings.copy_gbps() == 4203.0
