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
