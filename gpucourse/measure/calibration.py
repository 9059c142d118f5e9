"""One loaded DRAM latency and one copy ceiling per GPU, computed here and only here from the recordings.

Lessons 03 (work per thread), 04a (the reduction ladder's bound) and 05 (occupancy) all apply Little's law,
bytes in flight = bandwidth × latency, and all three need the same two numbers for a GPU. They take them
from ``recorded(gpu)``:

* the **copy ceiling**: the measured device-to-device copy of ``measuring.ceilings`` (lesson 00), GB/s
  counting the read and the write;
* the **loaded latency**, calibrated on ONE recorded point: lesson 03's one-element float32 copy
  (``coalescing.stride``, stride 1) at full occupancy, one 4-byte load in flight per thread. Its reads in
  flight are 2,048 threads × 4 B per SM; its *read* rate is half its effective GB/s (which counts the read
  and the write). So

      latency = reads in flight ÷ read rate = SMs × 2,048 × 4 B ÷ (effective GB/s ÷ 2).

  Dividing the read bytes by the effective rate instead halves the latency (the slip that once gave lesson
  04a "400 ns"); ``test_calibration.py`` checks that the latency reproduces the recorded point.

The latency is a model constant, not a pointer-chase measurement: it holds DRAM latency under load *and*
block turnover (the copy's 1 M blocks retire and start while it runs), one number for both. Every other use
of it is a prediction: lesson 05's resident-grid copies and its first attempt's ILP-4 point, lesson 04a's
rungs. Nothing here is typed in: without a recording of a GPU, ``recorded`` returns None.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpucourse.errors import InvalidConfig
from gpucourse.measure import reference

CALIBRATION_SWEEP = "coalescing.stride"  # lesson 03's stride sweep: its float32 stride-1 row is the point
CEILINGS_SWEEP = "measuring.ceilings"  # lesson 00's measured ceilings: its "copy bandwidth" row
CALIBRATION_GPU = "nvidia-h200"  # the course's recorded GPU; its latency stands in for GPUs with no recording
THREADS_PER_SM = 2048  # the calibration copy's resident threads per SM (cc 8.0, 9.0, 10.x; 256-thread blocks)
ELEMENT_BYTES = 4  # one float32 load per thread


@dataclass(frozen=True)
class Calibration:
    """One GPU's recorded copy ceiling and its loaded latency, calibrated on its one-element copy."""

    device: str
    sm_count: int
    one_element_gbps: float  # effective GB/s (read + write) of the calibration point
    ceiling_gbps: float  # measured copy ceiling, effective GB/s
    latency_ns: float
    source: str

    @property
    def reads_in_flight_per_sm(self) -> int:
        return THREADS_PER_SM * ELEMENT_BYTES

    @property
    def read_gbps(self) -> float:
        """The calibration point's read rate: half its effective GB/s (a copy reads once and writes once)."""
        return self.one_element_gbps / 2

    @property
    def fraction_of_ceiling(self) -> float:
        return self.one_element_gbps / self.ceiling_gbps


def latency_from_copy_ns(effective_gbps: float, reads_in_flight_per_sm: float, sm_count: int) -> float:
    """Little's law solved for the latency of a latency-bound copy: reads in flight ÷ read rate, where the
    read rate is half the effective GB/s (read + write). Bytes per ns are GB/s."""
    if not effective_gbps > 0 or not reads_in_flight_per_sm > 0:
        raise InvalidConfig("a calibration needs a positive measurement and positive bytes in flight; got "
                            f"{effective_gbps!r} GB/s, {reads_in_flight_per_sm!r} B")
    if isinstance(sm_count, bool) or not isinstance(sm_count, int) or sm_count < 1:
        raise InvalidConfig(f"sm_count must be a positive integer; got {sm_count!r}")
    return reads_in_flight_per_sm * sm_count / (effective_gbps / 2)


def calibration_from(device: str, sm_count: int, one_element_gbps: float, ceiling_gbps: float,
                     source: str, threads_per_sm: int = THREADS_PER_SM) -> Calibration:
    """Calibrate on a one-element float32 copy at full occupancy (one 4-byte load per thread)."""
    if not ceiling_gbps > 0:
        raise InvalidConfig(f"the copy ceiling must be positive; got {ceiling_gbps!r}")
    latency = latency_from_copy_ns(one_element_gbps, threads_per_sm * ELEMENT_BYTES, int(sm_count))
    return Calibration(device, int(sm_count), float(one_element_gbps), float(ceiling_gbps), latency, source)


def recorded_ceiling_gbps(gpu: str) -> float | None:
    """``gpu``'s measured copy ceiling (``measuring.ceilings``), or None without that recording."""
    rec = reference.load(CEILINGS_SWEEP, gpu=gpu)
    if rec is None or "quantity" not in rec.data:
        return None
    rows = rec.data[rec.data.quantity == "copy bandwidth"]
    return float(rows.measured.iloc[0]) if len(rows) else None


def recorded(gpu: str = CALIBRATION_GPU) -> Calibration | None:
    """The calibration of the GPU whose folder under data/reference is ``gpu``, or None: its one-element copy
    (the float32 stride-1 row of ``coalescing.stride``) and its copy ceiling (``measuring.ceilings``; else the
    ceiling the stride sweep recorded beside the row)."""
    rec = reference.load(CALIBRATION_SWEEP, gpu=gpu)
    if rec is None or not {"dtype", "stride", "gbps", "copy_ceiling_gbps"} <= set(rec.data.columns):
        return None
    rows = rec.data[(rec.data.dtype == "float32") & (rec.data.stride == 1)]
    if "offset" in rows:
        rows = rows[rows.offset == 0]
    sm_count = rec.provenance.get("device", {}).get("sm_count")
    if not len(rows) or not sm_count:
        return None
    row = rows.iloc[0]
    ceiling = recorded_ceiling_gbps(gpu) or float(row.copy_ceiling_gbps)
    return calibration_from(rec.device, int(sm_count), float(row.gbps), ceiling, rec.caption())


def for_device(device: str) -> Calibration | None:
    """The calibration of the recorded GPU named ``device`` ("NVIDIA H200"), or None."""
    for gpu in reference.gpus():
        if reference.device_name(gpu) == device:
            return recorded(gpu)
    return None


def bound_gbps(reads_in_flight: float, latency_ns: float, ceiling_gbps: float) -> float:
    """Little's law for a kernel's *reads*: read GB/s = read bytes in flight ÷ latency, never above the ceiling."""
    if not reads_in_flight > 0 or not latency_ns > 0 or not ceiling_gbps > 0:
        raise InvalidConfig(f"bytes in flight, latency and ceiling must be positive; got {reads_in_flight!r}, "
                            f"{latency_ns!r} ns, {ceiling_gbps!r} GB/s")
    return min(float(ceiling_gbps), float(reads_in_flight) / float(latency_ns))


def summary(cal: Calibration) -> str:
    """One line: what is calibrated on what (the lessons print it beside their model)."""
    mb = cal.reads_in_flight_per_sm * cal.sm_count / 1e6
    return (f"{cal.device}: loaded latency {cal.latency_ns:.0f} ns, calibrated on lesson 03's one-element copy "
            f"({cal.one_element_gbps:,.0f} GB/s effective = {cal.read_gbps:,.0f} GB/s of reads, with "
            f"{cal.reads_in_flight_per_sm // 1024} KiB per SM × {cal.sm_count} SMs = {mb:.2f} MB of reads in "
            f"flight); copy ceiling {cal.ceiling_gbps:,.0f} GB/s (measured)")
