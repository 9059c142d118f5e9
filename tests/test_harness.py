"""The measurement contract, checked with a fake timer (no GPU needed)."""

import numpy as np
import pytest

from gpucourse.errors import InvalidConfig, WrongResult
from gpucourse.measure import harness


class QueuedTimer:
    """A timer with the queued method: each call 'takes' per_call_ms of GPU time."""

    def __init__(self, per_call_ms: float, log: list, held: bool = True):
        self.per_call_ms, self.log, self.held = per_call_ms, log, held

    def time_queued_ms(self, fn, repeat=1):
        self.log.append(("queued", repeat))
        for _ in range(repeat):
            fn()
        return self.per_call_ms * repeat, self.held

    def time_ms(self, fn, repeat=1):
        self.log.append(("timed", repeat))
        for _ in range(repeat):
            fn()
        return self.per_call_ms * repeat

    def synchronize(self):
        self.log.append(("sync",))


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
    assert f"per launch: {m.launches_per_sample} launches per event pair" in m.summary()


def test_kernels_under_a_millisecond_are_batched_too():
    # 30 µs: one launch between two events would count several µs of Python dispatch as kernel time
    m = harness.measure(lambda: None, timer=QueuedTimer(0.030, []), label="short")
    assert m.launches_per_sample == 34  # ⌈1 ms / 30 µs⌉ launches per event pair
    # 300 samples of 1.02 ms stop it before 0.5 s of GPU time (the sample cap, G3)
    assert m.n_samples == harness.MAX_SAMPLES and m.total_ms == pytest.approx(m.n_samples * 34 * 0.030)
    # 60 µs and 0.6 ms: batched too (each sample behind a blocker used to cost 1 ms of sleep)
    assert harness.measure(lambda: None, timer=QueuedTimer(0.060, []), label="mid").launches_per_sample == 17
    assert harness.measure(lambda: None, timer=QueuedTimer(0.6, []), label="near").launches_per_sample == 2
    long = harness.measure(lambda: None, timer=QueuedTimer(1.0, []), label="long")
    assert long.launches_per_sample == 1


def test_a_batch_stays_within_the_launch_queue():
    # 1 µs kernels would want 1000 launches; an H100 queued 256 behind a blocker but not 1,024
    assert harness.launches_per_sample(0.001) == harness.MAX_BATCH == 256
    assert harness.launches_per_sample(0.999) == 2 and harness.launches_per_sample(1.0) == 1


def test_the_blocker_follows_the_enqueue_time():
    assert harness.next_block_us(0.0) == harness.BLOCKER_MIN_US == 50  # never under its floor
    assert harness.next_block_us(0.5) == 650  # 1.2 × the 0.5 ms the host took, + 50 µs
    assert harness.next_block_us(1e6) == 1_000_000  # never over a second


def test_the_median_is_the_middle_sample_not_the_fastest():
    class Varied(FakeTimer):
        def __init__(self):
            super().__init__(0.0, [])
            self.times = iter([5.0, 5.0] + [3.0, 4.0, 5.0, 6.0, 100.0] * 4)

        def time_ms(self, fn, repeat=1):
            return next(self.times) * repeat

    m = harness.measure(lambda: None, timer=Varied(), min_total_ms=0, min_samples=20, warmup_ms=0)
    assert m.n_samples == 20
    assert m.median_ms == 5.0 and m.min_ms == 3.0 and m.iqr_ms == pytest.approx(2.0)


def test_the_quick_contract_caps_every_callers_gpu_time(monkeypatch):
    monkeypatch.setenv("GPUCOURSE_MEASURE", "quick")
    m = harness.measure(lambda: None, timer=FakeTimer(2.0, []), min_total_ms=500.0)
    assert m.contract == "quick" and m.n_samples == 50  # 100 ms of 2 ms samples, not 250
    monkeypatch.setenv("GPUCOURSE_MEASURE", "full")
    assert harness.measure(lambda: None, timer=FakeTimer(2.0, [])).n_samples == 250
    monkeypatch.setenv("GPUCOURSE_MEASURE", "fast")
    with pytest.raises(InvalidConfig, match="GPUCOURSE_MEASURE"):
        harness.measure(lambda: None, timer=FakeTimer(2.0, []))


def test_the_ledger_collects_each_measurement_in_order():
    with harness.ledger() as seen:
        a = harness.measure(lambda: None, timer=FakeTimer(2.0, []), label="a")
        b = harness.measure(lambda: None, timer=QueuedTimer(0.01, []), label="b")
    harness.measure(lambda: None, timer=FakeTimer(2.0, []), label="after")
    assert seen == [a, b] and [m.method for m in seen] == [harness.METHOD_EVENTS, harness.METHOD_QUEUED]


def test_the_method_is_named():
    queued = harness.measure(lambda: None, timer=QueuedTimer(1.0, []))
    assert queued.method == harness.METHOD_QUEUED and "blocking kernel" in queued.summary()
    plain = harness.measure(lambda: None, timer=FakeTimer(1.0, []))
    assert plain.method == harness.METHOD_EVENTS and "launch overhead included" in plain.summary()
    log = []
    drained = harness.measure(lambda: None, timer=QueuedTimer(1.0, log, held=False))
    assert "could not be queued" in drained.method and "launch overhead included" in drained.method
    assert log.count(("queued", 1)) == 1  # tried once, then plain events for every other call


def test_the_sample_loop_keeps_a_running_total(monkeypatch):
    def no_sum(*args):
        raise AssertionError("sum() over the samples on every iteration")

    monkeypatch.setattr(harness, "sum", no_sum, raising=False)
    m = harness.measure(lambda: None, timer=FakeTimer(1.0, []), min_total_ms=5000,
                        min_samples=5000)  # 5000 samples make 5 s
    assert m.n_samples == 5000


def test_bandwidth_and_flops_come_from_counted_work():
    m = harness.measure(lambda: None, timer=FakeTimer(1.0, []), bytes_moved=2 * 10**9, flops=10**12,
                        copy_ceiling_gbps=4000.0)
    assert m.gbps == pytest.approx(2000.0)
    assert m.tflops == pytest.approx(1000.0)
    assert m.pct_of_copy_ceiling == pytest.approx(50.0)
    assert set(harness.REQUIRED_PROVENANCE) <= set(m.provenance)


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


# --- the queued method: a model of the GPU's queue and the host's dispatch time ---------------------


class FakeGPU:
    """A stream: the host spends dispatch_ms per launch; the GPU runs launches in order."""

    def __init__(self, dispatch_ms: float):
        self.host_ms, self.free_at_ms, self.dispatch_ms = 0.0, 0.0, dispatch_ms

    def launch(self, gpu_ms: float):
        self.host_ms += self.dispatch_ms
        self.free_at_ms = max(self.free_at_ms, self.host_ms) + gpu_ms

    # the parts of numba.cuda that EventTimer uses
    def event(self, timing=True):
        gpu = self

        class Event:
            def record(self):
                self.at_ms = max(gpu.free_at_ms, gpu.host_ms)

            def synchronize(self):
                gpu.host_ms = max(gpu.host_ms, self.at_ms)

        return Event()

    @staticmethod
    def event_elapsed_time(start, stop):
        return stop.at_ms - start.at_ms

    def perf_counter(self):
        return self.host_ms / 1e3


def _fake_event_timer(monkeypatch, gpu: FakeGPU) -> harness.EventTimer:
    timer = harness.EventTimer.__new__(harness.EventTimer)
    timer._cuda, timer._block_us = gpu, 1000

    class Blocker:
        def __getitem__(self, launch_shape):
            return lambda microseconds: gpu.launch(microseconds / 1e3)

    timer._blocker = Blocker()
    monkeypatch.setattr(harness.time, "perf_counter", gpu.perf_counter)
    return timer


def test_queued_launches_time_the_kernels_not_the_dispatch(monkeypatch):
    gpu = FakeGPU(dispatch_ms=0.010)  # 10 µs of Python per launch, 2 µs of GPU work
    timer = _fake_event_timer(monkeypatch, gpu)
    assert timer.time_ms(lambda: gpu.launch(0.002), repeat=500) == pytest.approx(5.0, rel=0.01)  # dispatch-bound
    elapsed_ms, held = timer.time_queued_ms(lambda: gpu.launch(0.002), repeat=500)
    assert held and elapsed_ms == pytest.approx(1.0)  # 500 × 2 µs back to back
    # the 1 ms blocker ran dry under 5 ms of queuing, so it grew; then 1.2 × the 5.01 ms + 50 µs
    assert timer._block_us == harness.next_block_us(5.01) == 6062


def test_a_run_that_waits_for_the_gpu_is_reported_as_not_queued(monkeypatch):
    gpu = FakeGPU(dispatch_ms=0.010)
    timer = _fake_event_timer(monkeypatch, gpu)

    def synchronising_run():
        gpu.launch(0.5)
        gpu.host_ms = gpu.free_at_ms  # e.g. copy_to_host: the host waits for the GPU

    _, held = timer.time_queued_ms(synchronising_run)
    assert not held
    assert timer._block_us == 1000  # the blocker did not stay long for the next measurement
    # timed from before the blocker's launch, the host's part must end within 95 % of the blocked time
    assert harness.queue_held(0.9, 1.0) and not harness.queue_held(0.96, 1.0)


# --- the cold-cache flush, L2 residency, checks ----------------------------------------------------


class SpyArray:
    def __init__(self, n):
        self.size, self.reads, self.writes = n, 0, 0

    def sum(self):
        self.reads += 1
        return 0.0

    def fill(self, value):
        self.writes += 1

    def __setitem__(self, key, value):
        self.writes += 1


def test_the_cold_flush_reads_twice_the_l2_and_never_writes_it():
    made = []

    class FakeXP:
        float32 = "float32"

        @staticmethod
        def ones(n, dtype=None):
            made.append(SpyArray(n))
            return made[-1]

        empty = zeros = ones

    flush = harness._l2_flusher(xp=FakeXP, l2_bytes=50 * 2**20)
    for _ in range(3):
        flush()
    (buffer,) = made
    assert buffer.size * 4 >= 2 * 50 * 2**20
    assert buffer.reads == 3 and buffer.writes == 0  # clean lines: nothing left to write back


@pytest.fixture
def l2_of_50_mib(monkeypatch):
    from gpucourse.measure import runtime

    info = runtime.DeviceInfo(name="NVIDIA Test GPU", compute_capability=(9, 0), l2_bytes=50 * 2**20,
                              datasheet_bandwidth_gbps=4800.0)
    monkeypatch.setattr(runtime, "device", lambda: info)
    return info


def test_a_working_set_within_twice_the_l2_is_labelled_and_not_compared_with_dram(l2_of_50_mib):
    histogram = harness.measure(lambda: None, timer=FakeTimer(1.0, []), bytes_moved=4 * 10**7,
                                copy_ceiling_gbps=4000.0)  # 10^7 float32 values: 40 MB < 50 MiB
    assert histogram.memory_level == "L2-resident" and "L2-resident" in histogram.summary()
    assert histogram.pct_of_copy_ceiling is None and histogram.pct_of_datasheet is None
    partly = harness.measure(lambda: None, timer=FakeTimer(1.0, []), bytes_moved=80 * 2**20)
    assert partly.memory_level == "partly L2-resident"
    big = harness.measure(lambda: None, timer=FakeTimer(1.0, []), bytes_moved=2 * 2**30, copy_ceiling_gbps=4000.0)
    assert big.memory_level == "DRAM" and big.pct_of_copy_ceiling is not None
    assert "L2-resident" not in big.summary()
    cold = harness.measure(lambda: None, timer=FakeTimer(1.0, []), bytes_moved=4 * 10**7, cache="cold",
                           flush=lambda: None, copy_ceiling_gbps=4000.0)
    assert cold.memory_level == "DRAM" and cold.pct_of_copy_ceiling is not None


def test_the_memory_levels_change_at_one_and_two_l2s():
    l2 = 50 * 2**20
    assert harness.memory_level(l2, l2, "warm") == "L2-resident"
    assert harness.memory_level(l2 + 1, l2, "warm") == "partly L2-resident"
    assert harness.memory_level(2 * l2, l2, "warm") == "partly L2-resident"
    assert harness.memory_level(2 * l2 + 1, l2, "warm") == "DRAM"
    assert harness.memory_level(3 * l2, l2, "warm") == "DRAM"
    assert harness.memory_level(l2 // 2, l2, "cold") == "DRAM"
    assert harness.memory_level(None, l2, "warm") == harness.memory_level(l2, None, "warm") == "unknown"


@pytest.mark.parametrize("verdict", [np.False_, np.array(False), 0, None, np.int64(0)])
def test_any_falsy_check_result_is_a_failed_check(verdict):
    with pytest.raises(WrongResult, match="not timed"):
        harness.measure(lambda: None, check=lambda: verdict, timer=FakeTimer(1.0, []))


def test_a_check_returning_an_array_is_refused_in_one_line():
    with pytest.raises(InvalidConfig, match="one truth value"):
        harness.measure(lambda: None, check=lambda: np.array([True, False]), timer=FakeTimer(1.0, []))
