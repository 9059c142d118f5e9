"""The measurement contract, checked with a fake timer (no GPU needed)."""

import pytest

from gpucourse import harness
from gpucourse.errors import InvalidConfig, WrongResult


class FakeTimer:
    """Each timed call of `run` 'takes' per_call_ms; records what happened, in order."""

    def __init__(self, per_call_ms: float, log: list):
        self.per_call_ms, self.log = per_call_ms, log

    def time_ms(self, fn, repeat=1):
        self.log.append(("timed", repeat))
        for _ in range(repeat):
            fn()
        return self.per_call_ms * repeat

    def synchronize(self):
        self.log.append(("sync",))


def test_checks_the_result_before_timing_anything():
    log = []
    harness.measure(lambda: log.append("run"), check=lambda: log.append("check") or True,
                    timer=FakeTimer(1.0, log), min_total_ms=10)
    assert log[:4] == ["run", ("sync",), "check", ("timed", 1)]


def test_a_wrong_result_is_never_timed():
    log = []
    with pytest.raises(WrongResult, match="not timed"):
        harness.measure(lambda: None, check=lambda: False, timer=FakeTimer(1.0, log), label="k")
    assert not [e for e in log if e[0] == "timed"]


def test_at_least_ten_samples_and_half_a_second():
    m = harness.measure(lambda: None, timer=FakeTimer(2.0, []))
    assert m.measured and m.n_samples >= 10
    assert sum(m.samples_ms) >= 500.0
    assert m.median_ms == 2.0 and m.min_ms == 2.0 and m.iqr_ms == 0.0
    long = harness.measure(lambda: None, timer=FakeTimer(200.0, []))
    assert long.n_samples == 10  # ten samples already exceed 0.5 s


def test_short_kernels_are_batched_and_say_so():
    log = []
    m = harness.measure(lambda: None, timer=FakeTimer(0.002, log), label="tiny")
    assert m.launches_per_sample > 1
    assert ("timed", m.launches_per_sample) in log
    assert m.median_ms == pytest.approx(0.002)
    assert f"{m.launches_per_sample} launches per event pair" in m.summary()


def test_bandwidth_and_flops_come_from_counted_work():
    m = harness.measure(lambda: None, timer=FakeTimer(1.0, []), bytes_moved=2 * 10**9, flops=10**12,
                        copy_ceiling_gbps=4000.0)
    assert m.gbps == pytest.approx(2000.0)
    assert m.tflops == pytest.approx(1000.0)
    assert m.pct_of_copy_ceiling == pytest.approx(50.0)
    for key in ("device", "compute_capability", "driver", "cuda", "libraries", "date", "command"):
        assert key in m.provenance


def test_cold_cache_flushes_before_every_sample():
    flushes = []
    m = harness.measure(lambda: None, timer=FakeTimer(100.0, []), cache="cold", flush=lambda: flushes.append(1))
    assert m.cache == "cold" and len(flushes) == m.n_samples


def test_simulator_mode_measures_nothing_and_says_so():
    ran = []
    m = harness.measure(lambda: ran.append(1), label="copy")
    assert not m.measured and not ran
    assert m.median_ms is None and m.gbps is None
    assert "not measured" in m.summary() and "simulator" in m.summary()


def test_bad_options_are_refused():
    with pytest.raises(InvalidConfig, match="'warm' or 'cold'"):
        harness.measure(lambda: None, cache="tepid", timer=FakeTimer(1.0, []))


def test_gpu_errors_become_one_plain_sentence():
    from gpucourse.errors import GPUError

    with pytest.raises(GPUError, match="illegal memory access.*restart the kernel"):
        with harness.gpu_errors("my kernel"):
            raise RuntimeError("CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered")
    with pytest.raises(KeyError):  # anything else passes through untouched
        with harness.gpu_errors("my kernel"):
            raise KeyError("x")


def test_poison_fills_outputs_with_impossible_values():
    import numpy as np

    f, i = np.zeros(4, np.float32), np.zeros(4, np.int32)
    harness.poison(f)
    harness.poison(i)
    assert np.isnan(f).all() and (i == np.iinfo(np.int32).max).all()
