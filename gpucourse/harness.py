"""The one measurement harness. Every timing in the course comes from here.

    m = measure(run, check=check, bytes_moved=2 * a.nbytes, label="copy")
    m.median_ms, m.gbps, m.pct_of_copy_ceiling, m.provenance

1. check first: ``run()`` once untimed (absorbs compilation), then ``check()`` must pass —
   a fast wrong kernel is never timed;
2. warm up for ~25 ms of GPU time;
3. time with device events around ``run`` (launches under ~10 µs are batched between one
   event pair, and the result says so);
4. cache state stated: "warm", or "cold" (a buffer ≥ 2× the L2 is overwritten before each sample);
5. ≥ 10 samples and ≥ 0.5 s of GPU time; median, IQR, min and sample count;
6. GB/s and TFLOP/s from the bytes and FLOPs the caller counted, and the percentage of the
   device's measured ceiling (gpucourse.ceilings) beside the datasheet figure;
7. provenance: device, compute capability, driver, CUDA, library versions, date, command.

In simulator mode nothing is timed: the result says the measurement was not made, so no
simulator wall time can be mistaken for GPU performance.
"""

from __future__ import annotations

import math
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import metadata

import numpy as np

from gpucourse import runtime
from gpucourse.errors import GPUError, InvalidConfig, WrongResult

NOT_MEASURED = (
    "not measured: simulator mode has no GPU, and a simulator's wall time is not GPU performance; "
    "the charts use counted or recorded data instead"
)
BATCH_BELOW_MS = 0.010  # launches shorter than ~10 µs are batched between one event pair
BATCH_TARGET_MS = 0.1


@dataclass
class Measurement:
    label: str
    measured: bool
    reason: str = ""
    samples_ms: list[float] = field(default_factory=list)
    launches_per_sample: int = 1
    cache: str = "warm"
    bytes_moved: int | None = None
    flops: int | None = None
    median_ms: float | None = None
    iqr_ms: float | None = None
    min_ms: float | None = None
    gbps: float | None = None
    tflops: float | None = None
    pct_of_copy_ceiling: float | None = None
    pct_of_datasheet: float | None = None
    provenance: dict = field(default_factory=dict)

    @property
    def n_samples(self) -> int:
        return len(self.samples_ms)

    def summary(self) -> str:
        if not self.measured:
            return f"{self.label}: {self.reason}"
        text = (
            f"{self.label}: median {self.median_ms:.4g} ms (IQR {self.iqr_ms:.2g}, min {self.min_ms:.4g}, "
            f"n={self.n_samples}, {self.cache} L2"
        )
        if self.launches_per_sample > 1:
            text += f", {self.launches_per_sample} launches per event pair"
        text += ")"
        if self.gbps is not None:
            text += f" · {self.gbps:.0f} GB/s"
            if self.pct_of_copy_ceiling is not None:
                text += f" ({self.pct_of_copy_ceiling:.0f} % of the measured copy ceiling)"
        if self.tflops is not None:
            text += f" · {self.tflops:.1f} TFLOP/s"
        return text

    __str__ = summary

    def as_row(self) -> dict:
        row = asdict(self)
        row.pop("samples_ms")
        row.pop("provenance")
        row["n_samples"] = self.n_samples
        return row


class EventTimer:
    """Times a callable with CUDA events on the default stream (resolution ~0.5 µs)."""

    def __init__(self):
        from numba import cuda

        self._cuda = cuda

    def time_ms(self, fn: Callable[[], object], repeat: int = 1) -> float:
        cuda = self._cuda
        start, stop = cuda.event(timing=True), cuda.event(timing=True)
        start.record()
        for _ in range(repeat):
            fn()
        stop.record()
        stop.synchronize()
        return float(cuda.event_elapsed_time(start, stop))

    def synchronize(self) -> None:
        self._cuda.synchronize()


def measure(
    run: Callable[[], object],
    *,
    label: str = "kernel",
    check: Callable[[], object] | None = None,
    bytes_moved: int | None = None,
    flops: int | None = None,
    cache: str = "warm",
    min_samples: int = 10,
    min_total_ms: float = 500.0,
    warmup_ms: float = 25.0,
    max_wall_s: float = 20.0,
    timer=None,
    flush: Callable[[], object] | None = None,
    copy_ceiling_gbps: float | None = None,
) -> Measurement:
    """Measure ``run`` by the course's contract (module docstring). ``timer`` is for tests."""
    if cache not in ("warm", "cold"):
        raise InvalidConfig(f"cache must be 'warm' or 'cold', got {cache!r}")
    if min_samples < 1:
        raise InvalidConfig(f"min_samples must be ≥ 1, got {min_samples}")
    if timer is None and not runtime.is_gpu():
        return Measurement(label=label, measured=False, reason=NOT_MEASURED, cache=cache)
    timer = timer or EventTimer()
    if cache == "cold" and flush is None:
        flush = _l2_flusher()

    with gpu_errors(label):
        run()  # untimed: compilation, allocation, first-touch
        timer.synchronize()
        if check is not None and check() is False:
            raise WrongResult(f"{label} gave a wrong result, so it was not timed")

        # Warm up for ~warmup_ms of GPU time; the warm-up also estimates one launch's cost.
        warm_ms, estimates = 0.0, []
        while warm_ms < warmup_ms and len(estimates) < 1000:
            estimates.append(timer.time_ms(run))
            warm_ms += estimates[-1]
        one_ms = float(np.median(estimates))
        batch = 1 if one_ms >= BATCH_BELOW_MS else min(1000, math.ceil(BATCH_TARGET_MS / max(one_ms, 1e-6)))

        samples, started = [], time.monotonic()
        while len(samples) < min_samples or sum(samples) * batch < min_total_ms:
            if len(samples) >= min_samples and time.monotonic() - started > max_wall_s:
                break
            if flush is not None:
                flush()
            samples.append(timer.time_ms(run, repeat=batch) / batch)
    return _summarise(label, samples, batch, cache, bytes_moved, flops, copy_ceiling_gbps)


def _summarise(label, samples, batch, cache, bytes_moved, flops, copy_ceiling_gbps) -> Measurement:
    q25, median, q75 = np.percentile(samples, [25, 50, 75])
    m = Measurement(
        label=label, measured=True, samples_ms=[float(s) for s in samples], launches_per_sample=batch,
        cache=cache, bytes_moved=bytes_moved, flops=flops, median_ms=float(median),
        iqr_ms=float(q75 - q25), min_ms=float(min(samples)), provenance=provenance(),
    )
    seconds = m.median_ms / 1e3
    if bytes_moved is not None and seconds > 0:
        m.gbps = bytes_moved / seconds / 1e9
        if copy_ceiling_gbps:
            m.pct_of_copy_ceiling = 100.0 * m.gbps / copy_ceiling_gbps
        datasheet = runtime.device().datasheet_bandwidth_gbps
        if datasheet:
            m.pct_of_datasheet = 100.0 * m.gbps / datasheet
    if flops is not None and seconds > 0:
        m.tflops = flops / seconds / 1e12
    return m


def _l2_flusher() -> Callable[[], object]:
    """Overwrite a buffer twice the L2's size, so the next sample starts with a cold cache."""
    import cupy

    l2_bytes = runtime.device().l2_bytes or 64 * 2**20
    buffer = cupy.empty(2 * l2_bytes // 4, dtype=cupy.float32)
    return lambda: buffer.fill(0)


class gpu_errors:
    """Turn a CUDA error into one plain sentence (GPUError) instead of a driver traceback."""

    def __init__(self, what: str):
        self.what = what

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is None or isinstance(exc, GPUError):
            return False
        text = f"{type(exc).__name__}: {exc}"
        known = {
            "ILLEGAL_ADDRESS": "read or wrote outside its arrays (illegal memory access)",
            "OUT_OF_MEMORY": "asked for more GPU memory than is free",
            "LAUNCH_OUT_OF_RESOURCES": "asked for more registers or shared memory than one SM has",
            "INVALID_VALUE": "was launched with a configuration the GPU refuses",
        }
        for code, words in known.items():
            if code in text.upper().replace(" ", "_"):
                advice = (
                    " The GPU context is now unusable: restart the kernel (Kernel → Restart) to continue."
                    if code == "ILLEGAL_ADDRESS" else ""
                )
                raise GPUError(f"{self.what} {words}.{advice}") from exc
        return False


def poison(array) -> None:
    """Fill an output array with an impossible value before a run, so 'not written' shows up."""
    kind = array.dtype.kind
    array[...] = np.nan if kind in "fc" else np.iinfo(array.dtype).max if kind in "iu" else 0


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def provenance(command: str | None = None) -> dict:
    """Where a number came from: device, driver, CUDA, library versions, date, command."""
    info = runtime.device()
    return {
        "device": info.name,
        "compute_capability": f"{info.compute_capability[0]}.{info.compute_capability[1]}",
        "mode": runtime.MODE,
        "sm_count": info.sm_count,
        "memory_bytes": info.memory_bytes,
        "l2_bytes": info.l2_bytes,
        "driver": info.driver_version,
        "cuda": info.cuda_version,
        "python": platform.python_version(),
        "libraries": {
            name: _version(name)
            for name in ("gpucourse", "numba", "numba-cuda", "numpy", "cupy-cuda13x", "torch")
        },
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": command or " ".join(["python", *sys.argv]),
    }
