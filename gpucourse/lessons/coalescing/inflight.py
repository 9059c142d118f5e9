"""Lesson 03 "Within reach of the ceiling": work per thread, bytes in flight and Little's law (a model).

Little's law: the bytes a GPU has in flight = bandwidth × latency. A copy's reads are in flight from the
load until the data arrive; to read at R bytes/s with a round trip of L seconds, R·L bytes must be on
their way at every moment. Each resident thread contributes its outstanding loads:

    bytes in flight per SM = resident threads per SM × independent loads per thread × bytes per load

and the model's bandwidth is the smaller of what those bytes sustain and the copy ceiling:

    read rate  = bytes in flight per SM × SMs ÷ latency
    effective  = min(2 × read rate, copy ceiling)        (effective GB/s counts read + write)

It is a *model*: one latency stands for DRAM latency under load plus block turnover, and it is
calibrated on one recorded point: the H200's one-element copy. The calibration (latency and copy ceiling
per GPU) is computed in one place, ``gpucourse.measure.calibration``, which lessons 04a and 05 use too;
``h200_calibration`` returns it. Everything else here is pure arithmetic on numbers the caller passes.
"""

from __future__ import annotations

import math

from gpucourse import validate
from gpucourse.errors import InvalidConfig
from gpucourse.measure import calibration as calibrations
from gpucourse.measure.calibration import Calibration, calibration_from  # noqa: F401  (the lesson's names)

MAX_THREADS_PER_SM = 2048  # sm_80, sm_90, sm_100 (Programming Guide, "Compute Capabilities" table)
ELEMENT_BYTES = 4  # the lesson's float32 element
VECTOR_BYTES = (4, 8, 16)  # bytes per load: float32, a float64 view (LDG.E.64), CUDA C's float4 (LDG.E.128)
NUMBA_VECTOR_BYTES = (4, 8)  # what numba-cuda 0.30 expresses from a float32 array (see kernels.best_copy)
ELEMENTS_PER_THREAD = (1, 2, 4, 8)  # independent loads per thread (per grid-stride trip)


def bytes_in_flight_per_sm(threads_per_sm: int, loads_per_thread: int, bytes_per_load: int) -> int:
    """Reads a full SM keeps on their way: threads × independent loads each × bytes per load."""
    threads = validate.integer("threads_per_sm", threads_per_sm, minimum=1)
    loads = validate.integer("loads_per_thread", loads_per_thread, minimum=1)
    size = validate.integer("bytes_per_load", bytes_per_load, minimum=1)
    if size not in VECTOR_BYTES:
        raise InvalidConfig(f"bytes_per_load is {size}; a global load is one of {VECTOR_BYTES} bytes here")
    return threads * loads * size


def sustained_gbps(bytes_in_flight_sm: float, sm_count: int, latency_ns: float) -> float:
    """Effective GB/s (read + write) that ``bytes_in_flight_sm`` of reads per SM sustain at ``latency_ns``."""
    if bytes_in_flight_sm <= 0 or latency_ns <= 0:
        raise InvalidConfig("bytes in flight and latency must be positive")
    sms = validate.integer("sm_count", sm_count, minimum=1)
    return 2 * bytes_in_flight_sm * sms / latency_ns  # bytes per ns = GB/s


def predicted_gbps(bytes_in_flight_sm: float, sm_count: int, latency_ns: float, ceiling_gbps: float) -> float:
    """The model's effective GB/s: what the bytes in flight sustain, capped by the copy ceiling."""
    if ceiling_gbps <= 0:
        raise InvalidConfig("the copy ceiling must be positive")
    return min(sustained_gbps(bytes_in_flight_sm, sm_count, latency_ns), float(ceiling_gbps))


def calibrated_latency_ns(measured_gbps: float, bytes_in_flight_sm: float, sm_count: int) -> float:
    """The one latency that makes the model reproduce a latency-bound measurement (effective GB/s)."""
    sms = validate.integer("sm_count", sm_count, minimum=1)
    return calibrations.latency_from_copy_ns(measured_gbps, bytes_in_flight_sm, sms)


def needed_bytes_in_flight_per_sm(ceiling_gbps: float, sm_count: int, latency_ns: float) -> float:
    """Reads per SM that must be in flight to copy at the ceiling (Little's law solved for bytes)."""
    if ceiling_gbps <= 0 or latency_ns <= 0:
        raise InvalidConfig("the ceiling and latency must be positive")
    sms = validate.integer("sm_count", sm_count, minimum=1)
    return ceiling_gbps / 2 * latency_ns / sms


def waves(blocks: int, sm_count: int, blocks_per_sm: int) -> float:
    """How many full rounds of resident blocks a grid takes (1.25 = one full wave and a quarter)."""
    b = validate.integer("blocks", blocks, minimum=1)
    per_wave = validate.integer("sm_count", sm_count, minimum=1) * validate.integer("blocks_per_sm", blocks_per_sm,
                                                                                     minimum=1)
    return b / per_wave


def tail_efficiency(blocks: int, sm_count: int, blocks_per_sm: int) -> float:
    """Share of the SM slots the grid keeps busy: waves ÷ rounds started (a partial last wave idles SMs)."""
    w = waves(blocks, sm_count, blocks_per_sm)
    return w / math.ceil(w)


def h200_calibration() -> Calibration | None:
    """The calibration from the course's H200 recording (``measure.calibration.recorded``), or None without it."""
    return calibrations.recorded(calibrations.CALIBRATION_GPU)


def model_rows(calibration: Calibration, elements_per_thread=ELEMENTS_PER_THREAD, vector_bytes=VECTOR_BYTES,
               threads_per_sm: int = MAX_THREADS_PER_SM) -> list[dict]:
    """One row per (elements per thread, bytes per load): bytes in flight per SM and the model's GB/s."""
    rows = []
    for width in vector_bytes:
        for k in elements_per_thread:
            flight = bytes_in_flight_per_sm(threads_per_sm, k, width)
            gbps = predicted_gbps(flight, calibration.sm_count, calibration.latency_ns, calibration.ceiling_gbps)
            rows.append({"elements_per_thread": k, "bytes_per_load": width, "bytes_in_flight_per_sm": flight,
                         "model_gbps": gbps, "model_fraction": gbps / calibration.ceiling_gbps})
    return rows


def loads_needed(calibration: Calibration, bytes_per_load: int = ELEMENT_BYTES,
                 threads_per_sm: int = MAX_THREADS_PER_SM) -> int:
    """Independent loads per thread the model needs for the ceiling (whole loads, rounded up)."""
    need = needed_bytes_in_flight_per_sm(calibration.ceiling_gbps, calibration.sm_count, calibration.latency_ns)
    return math.ceil(need / bytes_in_flight_per_sm(threads_per_sm, 1, bytes_per_load))


def derivation(calibration: Calibration) -> str:
    """Little's law on the recorded numbers, step by step (the lesson prints it)."""
    c = calibration
    one = bytes_in_flight_per_sm(MAX_THREADS_PER_SM, 1, ELEMENT_BYTES)
    need = needed_bytes_in_flight_per_sm(c.ceiling_gbps, c.sm_count, c.latency_ns)
    return "\n".join([
        f"Recorded on an {c.device} ({c.sm_count} SMs): the one-element copy {c.one_element_gbps:,.0f} GB/s, "
        f"the copy ceiling {c.ceiling_gbps:,.0f} GB/s ({c.one_element_gbps / c.ceiling_gbps:.2f} of it).",
        f"One 4-byte load per thread × {MAX_THREADS_PER_SM:,} threads per SM = {one:,} B = {one // 1024} KiB of "
        f"reads in flight per SM; × {c.sm_count} SMs = {one * c.sm_count / 1e6:.2f} MB.",
        f"Little's law, latency = bytes in flight ÷ read rate = {one * c.sm_count / 1e6:.2f} MB ÷ "
        f"{c.one_element_gbps / 2:,.0f} GB/s = {c.latency_ns:.0f} ns (calibrated: DRAM under load plus block "
        "turnover, one number for both).",
        f"A copy at the ceiling reads at half of it ({c.ceiling_gbps / 2:,.0f} GB/s); for {c.latency_ns:.0f} ns: "
        f"{need * c.sm_count / 1e6:.2f} MB in flight = {need / 1024:.1f} KiB per SM, "
        f"{need / one:.1f}× what one load per thread keeps.",
        f"So: at least {loads_needed(c)} independent 4-byte loads per thread (or fewer, wider loads). "
        "A model, calibrated on one recorded point: its latency is the H200's.",
    ])


def prediction_text(calibration: Calibration | None, loads_per_thread: int, bytes_per_load: int) -> str:
    """What the model says for one rung on the calibrated GPU, in words (for a read-back)."""
    if calibration is None:
        return "nothing: no recording here to calibrate the model on"
    c = calibration
    flight = bytes_in_flight_per_sm(MAX_THREADS_PER_SM, loads_per_thread, bytes_per_load)
    need = needed_bytes_in_flight_per_sm(c.ceiling_gbps, c.sm_count, c.latency_ns)
    gbps = predicted_gbps(flight, c.sm_count, c.latency_ns, c.ceiling_gbps)
    return (f"{gbps / c.ceiling_gbps:.2f} of the ceiling on the {c.device}: {flight // 1024} KiB per SM in flight "
            f"against the {need / 1024:.1f} KiB it needs at {c.latency_ns:.0f} ns")
