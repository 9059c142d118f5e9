"""The one measurement harness. Every timing in the course comes from here.

    m = measure(run, check=check, bytes_moved=2 * a.nbytes, label="copy")
    m.median_ms, m.gbps, m.pct_of_copy_ceiling, m.method, m.memory_level, m.provenance

1. check first: ``run()`` once untimed (absorbs compilation), then ``check()`` must give a true
   value (any falsy result fails, NumPy and CuPy booleans included) — a fast wrong kernel is
   never timed;
2. warm up for ~25 ms of GPU time;
3. time with device events. One launch from Python costs several µs of dispatch (more per
   argument), which events around a single launch would count as kernel time. So each timed
   call is queued behind a short blocking kernel: the launches are all in the GPU's queue before
   the start event fires, and run back to back (the "blocking kernel" technique of NVIDIA's
   nvbench). The blocker runs 1.2 × the host's time to queue the last sample, plus 50 µs.
   Kernels under ``QUEUE_BELOW_MS`` (~1 ms) are timed as N launches between one event pair (at
   most ``MAX_BATCH``, within the launch queue) and reported per launch; N is sized from
   ``PROBE_LAUNCHES`` queued launches (one launch alone would count its launch gap as kernel
   time). A run that waits for the GPU (a copy to the host, a sync) is seen on the second try
   and timed with plain events, without more blocker retries. ``Measurement.method`` names the
   method used;
4. cache state stated: "warm", or "cold" (before each sample a buffer of 2× the L2 is *read*,
   which evicts the previous contents without leaving dirty lines that the timed kernel would
   then pay to write back); a warm result whose working set fits in 2× the L2 is labelled
   "L2-resident" and not compared with DRAM bandwidth;
5. ≥ 10 samples and ≥ 0.5 s of GPU time or ``MAX_SAMPLES`` samples, whichever comes first (the
   "full" contract; "quick", for validation runs: ≥ 0.1 s; "live", inside ``live()``, which
   every LiveChart enters: 30 ms and at most ~1.5 s of wall time); median, IQR, min and sample
   count. Measurements are serialised by one process-wide lock (``MEASURING``): two charts'
   threads never queue launches between each other's events;
6. GB/s and TFLOP/s from the bytes and FLOPs the caller counted, and the percentage of the
   device's measured ceiling (gpucourse.measure.ceilings) beside the datasheet figure;
7. provenance: device, compute capability, driver release and API level, CUDA runtime, NVRTC,
   library versions, whether the GPU was shared, date, command.

In simulator mode nothing is timed: the result says the measurement was not made, so no
simulator wall time can be mistaken for GPU performance.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
import os
import platform
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import metadata

import numpy as np
from numba import cuda  # after gpucourse.measure.runtime (imported by the package) chose the mode

from gpucourse.errors import GPUError, InvalidConfig, WrongResult, explain_gpu_error
from gpucourse.measure import gpuinfo, runtime

NOT_MEASURED = (
    "not measured: simulator mode has no GPU, and a simulator's wall time is not GPU performance; "
    "the charts use counted or recorded data instead"
)
# What an H100 showed (data/reference/nvidia-h100-80gb-hbm3/first-contact/probe.jsonl): one launch
# costs the host 17 µs (empty numba kernel) to 79 µs (numba with three CuPy arguments); 256 launches
# queue behind a blocking kernel in 4.3 ms, 1,024 do not (the host waited for the blocker); the
# blocker sleeps about what it is asked for from 200 µs on, and never less than about 45 µs.
QUEUE_BELOW_MS = 1.0  # kernels shorter than ~1 ms: N launches per event pair, reported per launch
BATCH_TARGET_MS = 1.0  # N launches make about this much GPU time per sample
MAX_BATCH = 256  # launches per sample: within the launch queue's depth (256 queued, 1,024 did not)
BLOCKER_MIN_US = 50  # the blocking kernel's floor: it never blocked less than ~45 µs on the H100
BLOCKER_START_MS = BLOCKER_MIN_US / 1000  # its first duration; then 1.2 × the enqueue time + 50 µs
# The next blocker: BLOCKER_MARGIN × the host's last enqueue time (blocker launch included) +
# BLOCKER_MIN_US. The host's enqueue time varies by a few % from sample to sample; the 20 % and the
# 50 µs (the blocker's own floor) cover that, and a blocker that runs dry is seen (queue_held) and the
# sample retaken, so a short blocker costs a retry, never a wrong time. 2× (before) slept the GPU for
# twice the host's time on every sample of a µs kernel.
BLOCKER_MARGIN = 1.2
PROBE_LAUNCHES = 8  # a short kernel's batch is sized from this many queued launches, per launch
MAX_SAMPLES = 300  # enough for a stable median: a µs kernel stops here before its 0.5 s of GPU time


@dataclass(frozen=True)
class Contract:
    """How much GPU time a measurement takes (module docstring, point 5)."""

    name: str
    min_total_ms: float
    warmup_ms: float
    max_wall_s: float


# "quick": the validation profile of `gpu-report --quick` (GPUCOURSE_MEASURE=quick); a recording made
# with it is marked as such; a lesson draws it labelled with this contract, never as a full recording.
LIVE_MIN_TOTAL_MS = 30.0  # a chart a widget redraws: a response in about a second, not six full contracts

LIVE_MAX_WALL_S = 1.5  # and at most this much wall time a point once it has its samples
CONTRACTS = {"full": Contract("full", 500.0, 25.0, 20.0), "quick": Contract("quick", 100.0, 5.0, 3.0)}
LIVE = Contract("live", LIVE_MIN_TOTAL_MS, 5.0, LIVE_MAX_WALL_S)
_live = contextvars.ContextVar("gpucourse_live_contract", default=False)
# One measurement at a time in this process: numba's events, CuPy's null stream and torch's default
# stream are one legacy stream, so a second thread's blocker and launches would land between the
# first's events. Re-entrant: a sweep holds it around its measurements, each measure() again.
MEASURING = threading.RLock()


@contextlib.contextmanager
def live():
    """Every measure() inside (in this thread) is capped at the live contract: a chart a widget
    redraws answers in about a second (LiveChart enters this around each run; ``make record`` does not)."""
    token = _live.set(True)
    try:
        yield LIVE
    finally:
        _live.reset(token)


def is_live() -> bool:
    return _live.get()


def contract() -> Contract:
    """The contract in force: GPUCOURSE_MEASURE=quick|full (default full)."""
    name = os.environ.get("GPUCOURSE_MEASURE", "full") or "full"
    if name not in CONTRACTS:
        raise InvalidConfig(f"GPUCOURSE_MEASURE={name!r}: choose one of {', '.join(CONTRACTS)}")
    return CONTRACTS[name]


METHOD_QUEUED = "events, launches queued behind a blocking kernel"
METHOD_EVENTS = "events around the launches (Python launch overhead included)"


@dataclass
class Measurement:
    label: str
    measured: bool
    reason: str = ""
    samples_ms: list[float] = field(default_factory=list)  # per launch
    total_ms: float = 0.0  # GPU time of every timed launch (samples × launches per sample)
    launches_per_sample: int = 1
    method: str = ""
    cache: str = "warm"
    bytes_moved: int | None = None
    footprint_bytes: int | None = None
    memory_level: str = "unknown"  # "DRAM", "L2-resident", "partly L2-resident" or "unknown"
    flops: int | None = None
    median_ms: float | None = None
    iqr_ms: float | None = None
    min_ms: float | None = None
    gbps: float | None = None
    tflops: float | None = None
    pct_of_copy_ceiling: float | None = None
    pct_of_datasheet: float | None = None
    contract: str = "full"
    provenance: dict = field(default_factory=dict)

    @property
    def n_samples(self) -> int:
        return len(self.samples_ms)

    @property
    def rehearsal(self) -> bool:
        return bool(self.provenance.get("rehearsal"))

    def summary(self) -> str:
        if not self.measured:
            return f"{self.label}: {self.reason}"
        text = (
            f"{self.label}: median {self.median_ms:.4g} ms (IQR {self.iqr_ms:.2g}, min {self.min_ms:.4g}, "
            f"n={self.n_samples}, {self.cache} L2"
        )
        if self.launches_per_sample > 1:
            text += f", per launch: {self.launches_per_sample} launches per event pair"
        text += f"; {self.method})"
        if self.memory_level in ("L2-resident", "partly L2-resident"):
            text += (f" · {self.memory_level}: the working set ({self.footprint_bytes / 2**20:.3g} MiB) fits in "
                     "2× the L2, so this is not DRAM bandwidth")
        if self.gbps is not None:
            text += f" · {self.gbps:.0f} GB/s"
            if self.pct_of_copy_ceiling is not None:
                text += f" ({self.pct_of_copy_ceiling:.0f} % of the measured copy ceiling)"
        if self.tflops is not None:
            text += f" · {self.tflops:.1f} TFLOP/s"
        if self.rehearsal:
            text = "REHEARSAL (simulator, not a GPU timing) · " + text
        return text

    __str__ = summary

    def as_row(self) -> dict:
        row = asdict(self)
        row.pop("samples_ms")
        row.pop("provenance")
        row["n_samples"] = self.n_samples
        return row


def block_for(microseconds):
    """The blocking kernel (one thread): sleeps about ``microseconds`` µs (PTX ``nanosleep``)."""
    for _ in range(microseconds):
        cuda.nanosleep(1000)


@functools.cache
def _compiled_blocker():
    """The blocking kernel, compiled once per process (each measurement used to compile it again)."""
    blocker = cuda.jit(block_for)
    blocker[1, 1](1)  # compile it now: a compile inside a sample would look like blocking
    cuda.synchronize()
    return blocker


class EventTimer:
    """Times a callable with CUDA events on the default stream (resolution ~0.5 µs).

    ``time_queued_ms`` first launches a one-thread kernel that sleeps (``nanosleep``), records
    the start event behind it, then makes the ``repeat`` calls: they wait in the GPU's queue and
    run back to back once it ends, so Python's dispatch time falls outside the event pair. If
    making the calls took longer than the blocker ran (the queue ran dry, or ``fn``
    synchronises), the blocker grows and the sample is taken again. If the host's time on that
    second try covered the whole blocker, which was sized well past the first try's enqueue
    time, ``fn`` waits for the GPU (a copy to the host, a sync): the answer says the launches were
    not queued at once, instead of two more retries with blockers up to a second (G17). After a
    sample that queued, the next blocker runs ``BLOCKER_MARGIN`` × the enqueue time just measured
    + ``BLOCKER_MIN_US``: the GPU sleeps about as long as the host needs to queue a sample."""

    def __init__(self):
        from numba import cuda

        self._cuda = cuda
        self._blocker = None
        self._block_us = int(BLOCKER_START_MS * 1000)

    def time_ms(self, fn: Callable[[], object], repeat: int = 1) -> float:
        cuda = self._cuda
        start, stop = cuda.event(timing=True), cuda.event(timing=True)
        start.record()
        for _ in range(repeat):
            fn()
        stop.record()
        stop.synchronize()
        return float(cuda.event_elapsed_time(start, stop))

    def _blocking_kernel(self):
        if self._blocker is None:
            self._blocker = _compiled_blocker()
        return self._blocker

    def time_queued_ms(self, fn: Callable[[], object], repeat: int = 1) -> tuple[float, bool]:
        """(GPU ms of ``repeat`` calls of ``fn``, whether they were all queued before they ran)."""
        cuda, blocker = self._cuda, self._blocking_kernel()
        first_block_us = self._block_us
        for attempt in range(4):
            before, start, stop = (cuda.event(timing=True) for _ in range(3))
            t0 = time.perf_counter()  # from before the blocker's launch: the host's whole part
            before.record()
            blocker[1, 1](self._block_us)
            start.record()
            for _ in range(repeat):
                fn()
            stop.record()
            enqueue_ms = (time.perf_counter() - t0) * 1e3
            stop.synchronize()
            blocked_ms = float(cuda.event_elapsed_time(before, start))
            elapsed_ms = float(cuda.event_elapsed_time(start, stop))
            if queue_held(enqueue_ms, blocked_ms):
                self._block_us = next_block_us(enqueue_ms)
                return elapsed_ms, True
            if attempt and waits_for_gpu(enqueue_ms, blocked_ms):
                break  # the host sat out a blocker sized well past its own time: fn waits for the GPU
            self._block_us = min(max(2 * self._block_us, math.ceil(4e3 * enqueue_ms)), 1_000_000)
        self._block_us = first_block_us  # fn waits for the GPU: a longer blocker would not help
        return elapsed_ms, False

    def synchronize(self) -> None:
        self._cuda.synchronize()


def next_block_us(enqueue_ms: float) -> int:
    """The next blocker's duration after a sample whose launches took ``enqueue_ms`` to queue:
    ``BLOCKER_MARGIN`` × that + ``BLOCKER_MIN_US`` (at most a second)."""
    return min(BLOCKER_MIN_US + math.ceil(BLOCKER_MARGIN * 1e3 * enqueue_ms), 1_000_000)


def queue_held(enqueue_ms: float, blocked_ms: float) -> bool:
    """The host finished queuing (timed from before the blocker's launch, whose start event can only
    fire later) before the blocker ended, with 5 % to spare for the two clocks."""
    return enqueue_ms < 0.95 * blocked_ms


def waits_for_gpu(enqueue_ms: float, blocked_ms: float) -> bool:
    """The host's enqueue time covered the blocker: its launches waited for the GPU, not the queue."""
    return enqueue_ms >= 0.9 * blocked_ms


def check_passed(result) -> bool:
    """A check passes on any true value; NumPy and CuPy booleans and 0-d arrays count by value."""
    try:
        return bool(result)
    except ValueError as exc:  # an array of many truth values
        raise InvalidConfig("check() must return one truth value (use .all()), not an array") from exc


class _Samples:
    """Per-launch samples with a running total of GPU time (no sum over the list per sample)."""

    def __init__(self):
        self.per_launch_ms: list[float] = []
        self.total_ms = 0.0
        self.all_queued = True

    def add(self, elapsed_ms: float, launches: int) -> None:
        self.per_launch_ms.append(elapsed_ms / launches)
        self.total_ms += elapsed_ms


def measure(
    run: Callable[[], object],
    *,
    label: str = "kernel",
    check: Callable[[], object] | None = None,
    bytes_moved: int | None = None,
    footprint_bytes: int | None = None,
    flops: int | None = None,
    cache: str = "warm",
    min_samples: int = 10,
    min_total_ms: float | None = None,
    warmup_ms: float | None = None,
    max_wall_s: float | None = None,
    timer=None,
    flush: Callable[[], object] | None = None,
    copy_ceiling_gbps: float | None = None,
) -> Measurement:
    """Measure ``run`` by the course's contract (module docstring). ``timer`` is for tests.

    ``footprint_bytes``: the distinct bytes the kernel touches (default ``bytes_moved``), which
    decides whether a warm result is L2-resident. ``min_total_ms``, ``warmup_ms`` and ``max_wall_s``
    default to the contract in force (``contract()``); the quick contract also caps a caller's own."""
    terms = contract()
    min_total_ms = terms.min_total_ms if min_total_ms is None else min_total_ms
    warmup_ms = terms.warmup_ms if warmup_ms is None else warmup_ms
    max_wall_s = terms.max_wall_s if max_wall_s is None else max_wall_s
    for cap in ([terms] if terms.name == "quick" else []) + ([LIVE] if is_live() else []):
        # a validation run, or a chart a widget redraws: no caller gets more than that contract
        min_total_ms = min(min_total_ms, cap.min_total_ms)
        warmup_ms, max_wall_s = min(warmup_ms, cap.warmup_ms), min(max_wall_s, cap.max_wall_s)
    if cache not in ("warm", "cold"):
        raise InvalidConfig(f"cache must be 'warm' or 'cold', got {cache!r}")
    if min_samples < 1:
        raise InvalidConfig(f"min_samples must be ≥ 1, got {min_samples}")
    if timer is None and not runtime.is_gpu():
        return Measurement(label=label, measured=False, reason=NOT_MEASURED, cache=cache)
    timer = timer or default_timer()
    if cache == "cold" and flush is None:
        flush = _l2_flusher()
    queued = hasattr(timer, "time_queued_ms")
    samples = _Samples()

    def timed(repeat: int) -> float:
        nonlocal queued
        if queued:
            elapsed_ms, held = timer.time_queued_ms(run, repeat=repeat)
            if held:
                return elapsed_ms
            queued = samples.all_queued = False  # run() waits for the GPU: plain events from now on
        return timer.time_ms(run, repeat=repeat)

    with MEASURING, gpu_errors(label):
        run()  # untimed: compilation, allocation, first-touch
        timer.synchronize()
        if check is not None and not check_passed(check()):
            raise WrongResult(f"{label} gave a wrong result, so it was not timed")

        # One launch estimates the batch; then warm up for ~warmup_ms of GPU time in batches (a
        # warm-up of single launches, each behind its own blocker, cost seconds for µs kernels).
        one_ms = warm_ms = timed(1)
        if cache == "warm" and one_ms < QUEUE_BELOW_MS:  # per launch from a queued batch (G3)
            probe_ms = timed(PROBE_LAUNCHES)
            warm_ms += probe_ms
            one_ms = probe_ms / PROBE_LAUNCHES
        # A cold sample is one launch after a flush: only the first of N launches would be cold.
        batch = launches_per_sample(one_ms) if cache == "warm" else 1
        while warm_ms < warmup_ms:
            warm_ms += timed(batch)

        started = time.monotonic()
        enough = max(MAX_SAMPLES, min_samples)
        while len(samples.per_launch_ms) < min_samples or (
                samples.total_ms < min_total_ms and len(samples.per_launch_ms) < enough):
            if len(samples.per_launch_ms) >= min_samples and time.monotonic() - started > max_wall_s:
                break
            if flush is not None:
                flush()
            samples.add(timed(batch), batch)
    method = METHOD_QUEUED if queued else METHOD_EVENTS
    if not samples.all_queued:
        method += " (the launches could not be queued ahead: run() waits for the GPU)"
    m = _summarise(label, samples.per_launch_ms, batch, method, cache, bytes_moved,
                   bytes_moved if footprint_bytes is None else footprint_bytes, flops, copy_ceiling_gbps,
                   getattr(timer, "rehearsal", False))
    m.total_ms = samples.total_ms
    m.contract = "live" if is_live() and terms.name != "quick" else terms.name
    for collected in _LEDGERS:
        collected.append(m)
    return m


_LEDGERS: list[list[Measurement]] = []


@contextlib.contextmanager
def ledger():
    """Every Measurement made inside the block, in order (``make record`` writes each row's method)."""
    collected: list[Measurement] = []
    _LEDGERS.append(collected)
    try:
        yield collected
    finally:
        _LEDGERS.remove(collected)


def launches_per_sample(one_launch_ms: float) -> int:
    """1 for kernels of ≥ ~1 ms; else enough launches for ~1 ms of GPU time (at most ``MAX_BATCH``)."""
    if one_launch_ms >= QUEUE_BELOW_MS:
        return 1
    return max(2, min(MAX_BATCH, math.ceil(BATCH_TARGET_MS / max(one_launch_ms, 1e-6))))


def memory_level(footprint_bytes: int | None, l2_bytes: int | None, cache: str) -> str:
    """Where a warm kernel's data lives: a working set within 2× the L2 may stay in it between
    launches (the L2 does not evict by strict LRU), so only past that is it DRAM traffic."""
    if cache == "cold":
        return "DRAM"
    if not footprint_bytes or not l2_bytes:
        return "unknown"
    if footprint_bytes <= l2_bytes:
        return "L2-resident"
    if footprint_bytes <= 2 * l2_bytes:
        return "partly L2-resident"
    return "DRAM"


def _summarise(label, samples, batch, method, cache, bytes_moved, footprint, flops, copy_ceiling_gbps,
               rehearsal=False) -> Measurement:
    q25, median, q75 = np.percentile(samples, [25, 50, 75])
    info = runtime.device()
    m = Measurement(
        label=label, measured=True, samples_ms=[float(s) for s in samples], launches_per_sample=batch,
        method=method, cache=cache, bytes_moved=bytes_moved, footprint_bytes=footprint,
        memory_level=memory_level(footprint, info.l2_bytes, cache), flops=flops, median_ms=float(median),
        iqr_ms=float(q75 - q25), min_ms=float(min(samples)), provenance=provenance(rehearsal=rehearsal),
    )
    seconds = m.median_ms / 1e3
    if bytes_moved is not None and seconds > 0:
        m.gbps = bytes_moved / seconds / 1e9
        # DRAM ceilings only for DRAM traffic: an L2-resident rate is not a share of DRAM bandwidth
        if m.memory_level in ("DRAM", "unknown"):
            if copy_ceiling_gbps:
                m.pct_of_copy_ceiling = 100.0 * m.gbps / copy_ceiling_gbps
            if info.datasheet_bandwidth_gbps:
                m.pct_of_datasheet = 100.0 * m.gbps / info.datasheet_bandwidth_gbps
    if flops is not None and seconds > 0:
        m.tflops = flops / seconds / 1e12
    return m


def default_timer():
    """The timer ``measure`` uses on a GPU (the rehearsal replaces it with its own)."""
    return EventTimer()


def _l2_flusher(xp=None, l2_bytes: int | None = None) -> Callable[[], object]:
    """Evict the L2 before a cold sample by *reading* a buffer twice its size.

    Writing the buffer (a memset or ``fill``) would evict too, but leaves the L2 full of dirty
    lines: the L2 is a write-back cache, so the timed kernel's misses would then pay for writing
    them to DRAM. Lines brought in by reads are clean and are dropped for free; dirty lines the
    previous sample left are written back during the flush, before the start event."""
    if xp is None:
        import cupy as xp
    l2_bytes = l2_bytes or runtime.device().l2_bytes or 64 * 2**20
    buffer = xp.ones(2 * l2_bytes // 4, dtype=xp.float32)  # written once, here, never again

    def flush():
        return buffer.sum()  # reads every line; the one-element result is all it writes

    return flush


class gpu_errors:
    """Turn a GPU library's error into one plain sentence (GPUError) instead of a traceback."""

    def __init__(self, what: str):
        self.what = what

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is None or isinstance(exc, GPUError):
            return False
        line = explain_gpu_error(exc, self.what)
        if line is None:
            return False
        raise GPUError(line) from exc


def poison(array) -> None:
    """Fill an output array with an impossible value before a run, so 'not written' shows up."""
    kind = array.dtype.kind
    array[...] = np.nan if kind in "fc" else np.iinfo(array.dtype).max if kind in "iu" else 0


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


LIBRARIES = ("gpucourse", "numba", "numba-cuda", "numpy", "cupy-cuda13x", "cupy-cuda12x", "torch", "cuda-bindings",
             "nvidia-cuda-runtime", "nvidia-cuda-nvrtc", "nvidia-cuda-runtime-cu12", "nvidia-cuda-nvrtc-cu12")
# What every recording's provenance must state (a contributed data/reference/<gpu>/ is refused
# without them): the device, the software stack each under its true name, when and how.
REQUIRED_PROVENANCE = ("device", "compute_capability", "sm_count", "memory_bytes", "l2_bytes",
                       "driver_release", "driver_api", "cuda_runtime", "nvrtc", "python", "libraries",
                       "gpu_sharing", "date", "command")


@functools.cache
def course_version() -> dict:
    """The course's own commit and whether the checkout had changes (a checkout has no installed version)."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    try:
        def git(*args):
            return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                                  timeout=10, check=True).stdout.strip()

        return {"commit": git("rev-parse", "--short=12", "HEAD"), "dirty": bool(git("status", "--porcelain", "-uno"))}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


@functools.cache
def software_stack() -> dict:
    """Driver release and API level, CUDA runtime, NVRTC: asked once per process."""
    return {"driver_release": gpuinfo.driver_release(), "driver_api": gpuinfo.driver_api(),
            "cuda_runtime": gpuinfo.cuda_runtime(), "nvrtc": gpuinfo.nvrtc()}


def provenance(command: str | None = None, *, rehearsal: bool = False) -> dict:
    """Where a number came from: device, driver release and API level, CUDA runtime, NVRTC,
    library versions, whether the GPU was shared, date, command. A rehearsal says so."""
    info = runtime.device()
    if rehearsal:
        stack = dict.fromkeys(("driver_release", "driver_api", "cuda_runtime", "nvrtc"),
                              "none (rehearsal on the simulator)")
        sharing = "none (rehearsal on the simulator)"
    else:
        stack = {**software_stack(), "board": gpuinfo.board() if runtime.is_gpu() else {}}
        sharing = gpuinfo.gpu_sharing().state if runtime.is_gpu() else "no GPU"
    record = {
        "device": info.name,
        "compute_capability": f"{info.compute_capability[0]}.{info.compute_capability[1]}",
        "mode": runtime.MODE,
        "sm_count": info.sm_count,
        "memory_bytes": info.memory_bytes,
        "l2_bytes": info.l2_bytes,
        **stack,
        "python": platform.python_version(),
        "libraries": {name: _version(name) for name in LIBRARIES},
        "course": course_version(),
        "gpu_sharing": sharing,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": command or " ".join(["python", *sys.argv]),
    }
    if rehearsal:
        record["rehearsal"] = True
    return record
