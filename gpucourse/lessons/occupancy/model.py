"""Lesson 05 "Occupancy": the hardware model, counted quantities, and the checks and helpers the runners share."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpucourse.errors import CourseError, InvalidConfig
from gpucourse.lessons.occupancy.calculator import (
    ARCHITECTURES,
    KB,
    LIMITERS,
    SUB_PARTITIONS,
    WARP_SIZE,
    architecture,
    occupancy,
)
from gpucourse.lessons.occupancy.kernels import (
    FMA_B,
    FMA_C,
    FMAS_PER_ITERATION,
    accumulators_kernel,
    block_sum_kernel,
    copy_ilp4_kernel,
    copy_kernel,
    copy_resident_ilp4_kernel,
    copy_resident_kernel,
    fma_ilp4_kernel,
    fma_kernel,
)
from gpucourse.measure import calibration as calibrations
from gpucourse.measure import runtime
from gpucourse.measure.ptxinfo import ResourceUsage, resource_usage, resource_usage_all
from gpucourse.viz import charts


@dataclass(frozen=True)
class LessonKernel:
    name: str
    kernel: object
    signature: str
    role: str


KERNELS = {
    k.name: k
    for k in (
        LessonKernel(
            "copy_resident", copy_resident_kernel, "void(float32[::1], float32[::1])",
            "memory-bound, ILP 1, grid = resident blocks",
        ),
        LessonKernel(
            "copy_resident_ilp4", copy_resident_ilp4_kernel, "void(float32[::1], float32[::1])",
            "memory-bound, ILP 4, grid = resident blocks",
        ),
        LessonKernel(
            "copy", copy_kernel, "void(float32[::1], float32[::1])", "first attempt: one element per thread"
        ),
        LessonKernel(
            "copy_ilp4", copy_ilp4_kernel, "void(float32[::1], float32[::1])",
            "first attempt: four elements per thread",
        ),
        LessonKernel("fma", fma_kernel, "void(float32[::1], int32)", "compute-bound, ILP 1"),
        LessonKernel("fma_ilp4", fma_ilp4_kernel, "void(float32[::1], int32)", "compute-bound, ILP 4"),
        LessonKernel(
            "accumulators", accumulators_kernel, "void(float32[::1], float32[::1], int32)", "register-hungry"
        ),
        LessonKernel(
            "block_sum", block_sum_kernel, "void(float32[::1], float32[::1])", "static shared memory"
        ),
    )
}


def lesson_kernel(name: str) -> LessonKernel:
    if name not in KERNELS:
        raise InvalidConfig(f"kernel must be one of {', '.join(KERNELS)}; got {name!r}")
    return KERNELS[name]


def kernel_source(name: str) -> str:
    """The source of a lesson kernel, as CI ran it (for the learner to read)."""
    import inspect

    from gpucourse.measure.ptxinfo import python_function

    return inspect.getsource(python_function(lesson_kernel(name).kernel)).rstrip()


def lesson_cc() -> tuple[int, int]:
    """The compute capability the lesson models: the GPU's, or cc 9.0 (H100/H200) in the simulator."""
    cc = tuple(runtime.device().compute_capability)
    return cc if cc in ARCHITECTURES else (9, 0)


# --- resource usage ----------------------------------------------------------------------------


def usage(name: str, max_registers: int | None = None, cc=None) -> ResourceUsage:
    k = lesson_kernel(name)
    return resource_usage(k.kernel, k.signature, cc or lesson_cc(), max_registers)


def usage_table(max_registers: int | None = None, cc=None, names=None) -> pd.DataFrame:
    """Registers, static shared memory and spills of the lesson's kernels (one compile for all)."""
    chosen = [lesson_kernel(n) for n in (names or KERNELS)]
    found = resource_usage_all([(k.kernel, k.signature) for k in chosen], cc or lesson_cc(), max_registers)
    rows = []
    for k, u in zip(chosen, found, strict=True):
        rows.append(
            {
                "kernel": k.name,
                "role": k.role,
                "registers": u.registers if u.known else "unknown",
                "static_shared_bytes": u.shared_bytes if u.known else "unknown",
                "spill_stores_bytes": u.spill_store_bytes if u.spill_store_bytes is not None else "—",
                "local_bytes_per_thread": u.stack_frame_bytes if u.stack_frame_bytes is not None else "—",
                "source": u.source if u.known else f"unknown: {u.reason}",
                "seconds": round(u.seconds, 2),
            }
        )
    return pd.DataFrame(rows)


# --- the calculator's three classic charts -----------------------------------------------------

_SINGLE_STYLE = {
    "registers": (charts.PALETTE[0], "circle"),
    "shared memory": (charts.PALETTE[1], "square"),
    "warps": (charts.PALETTE[2], "diamond"),
    "blocks": (charts.PALETTE[3], "triangle-up"),
}
_TIE_STYLES = [
    (charts.PALETTE[4], "x"),
    (charts.PALETTE[5], "star"),
    (charts.PALETTE[6], "cross"),
    (charts.PALETTE[7], "triangle-down"),
    ("#777777", "hexagon"),
    ("#999999", "pentagon"),
]
CANNOT_LAUNCH = "cannot launch"


def limiter_style(limiter: str) -> tuple[str, str]:
    """(colour, marker symbol) of a limiter name; ties get their own colour and shape."""
    if limiter in _SINGLE_STYLE:
        return _SINGLE_STYLE[limiter]
    if limiter == CANNOT_LAUNCH:
        return "#000000", "x-thin-open"
    ties = [" + ".join(c) for c in _tie_order()]
    index = ties.index(limiter) if limiter in ties else len(ties)
    return _TIE_STYLES[index % len(_TIE_STYLES)]


def _tie_order() -> list[tuple[str, ...]]:
    from itertools import combinations

    return [c for n in (2, 3, 4) for c in combinations(LIMITERS, n)]


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def _sm_summary(r) -> str:
    """``r.summary()`` with singulars where a count is 1 ("1 block × 1 warp")."""
    if not r.launches:
        return r.summary()
    return (f"{_plural(r.active_blocks, 'block')} × {_plural(r.warps_per_block, 'warp')} = {r.active_warps} of "
            f"{r.max_warps} warps ({r.occupancy_pct:.1f} %), limited by {r.limiter}")


# --- GPU sweeps: speed vs occupancy, and our calculator against the driver ----------------------

SWEEP_THREADS = 64  # 2 warps per block: 4…32 resident blocks spans 12.5 %…100 % on cc 9.0 without opt-in
TARGET_OCCUPANCIES = (0.125, 0.1875, 0.25, 0.375, 0.5, 0.75, 1.0)
MAX_PADDING_BYTES = 48 * KB  # dynamic shared memory without opting in


def padding_levels(
    registers: int,
    static_shared_bytes: int,
    threads_per_block: int = SWEEP_THREADS,
    cc=(9, 0),
    targets=TARGET_OCCUPANCIES,
) -> list[tuple[int, object]]:
    """(dynamic shared bytes, Occupancy) pairs: the least padding that lowers occupancy to each level.

    Padding is dynamic shared memory the kernel never touches; it only makes fewer blocks fit.
    """
    reachable: dict[int, tuple[int, object]] = {}
    for dynamic in range(0, MAX_PADDING_BYTES - static_shared_bytes + 1, 128):
        r = occupancy(threads_per_block, registers, static_shared_bytes + dynamic, cc)
        if r.active_blocks and r.active_blocks not in reachable:
            reachable[r.active_blocks] = (dynamic, r)
    chosen: dict[int, tuple[int, object]] = {}
    for target in targets:
        dynamic, r = min(reachable.values(), key=lambda v: (abs(v[1].occupancy - target), v[0]))
        chosen[r.active_blocks] = (dynamic, r)
    return sorted(chosen.values(), key=lambda v: v[1].occupancy)


def fma_chain_length(iterations: int, ilp: int) -> int:
    """FMAs each chain of fma_kernel / fma_ilp4_kernel runs: whole loop iterations of 8 per chain."""
    if ilp not in (1, 4):
        raise InvalidConfig(f"ilp must be 1 or 4; got {ilp!r}")
    return (int(iterations) // (ilp * FMAS_PER_ITERATION)) * FMAS_PER_ITERATION


def _fma_reference(iterations: int, ilp: int, lanes: int = 16) -> np.ndarray:
    """What fma_kernel / fma_ilp4_kernel compute for i & 15 = 0…15 (float64 model of the chain)."""
    b, c = float(FMA_B), float(FMA_C)
    length = fma_chain_length(iterations, ilp)
    out = []
    for lane in range(lanes):
        starts = [lane * c + k * c for k in range(ilp)]
        values = []
        for a in starts:
            for _ in range(length):
                a = a * b + c
            values.append(a)
        out.append(sum(values))
    return np.array(out)


def resident_grid(blocks_per_sm: int, sm_count: int) -> int:
    """The grid of the resident-grid copies: exactly the blocks that fit at once (no second wave, so the
    block dispatcher works once per block slot, not once per 64 elements)."""
    for name, value in (("blocks_per_sm", blocks_per_sm), ("sm_count", sm_count)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise InvalidConfig(f"{name} must be a positive integer; got {value!r}")
    return int(blocks_per_sm) * int(sm_count)


# --- Little's-law model of the speed sweeps (inputs: the one calibration per GPU, measure/calibration.py) ---

MODEL_FMA_LATENCY_CYCLES = 4  # assumed: FP32 FMA dependent-issue latency (Volta and later)
MODEL_BYTES_PER_WARP_COPY = 2 * WARP_SIZE * 4  # one float32 load (128 B) + its store: the store never waits
FIRST_ATTEMPT_SWEEP = "occupancy.memory_bound"  # one element per thread, ~1 M blocks: checked, not calibrated on
CEILINGS_SWEEP = calibrations.CEILINGS_SWEEP


@dataclass(frozen=True)
class SpeedModel:
    """Little's law for the speed sweeps: speed ∝ min(1, resident warps × operations in flight per
    warp ÷ warps needed to cover the latency), normalised to 1 at full occupancy (no GB/s invented)."""

    kind: str
    device: str
    warps_needed: float  # per SM, with one operation in flight per warp
    max_warps: int  # warp slots per SM
    assumptions: str  # one line, for the chart: what the model assumed

    def relative_speed(self, resident_warps, ilp: int) -> np.ndarray:
        def raw(warps):
            return np.minimum(1.0, np.asarray(warps, dtype=float) * ilp / self.warps_needed)

        return raw(resident_warps) / raw(self.max_warps)

    def ratio(self, low_occupancy: float, ilp: int, high_occupancy: float = 1.0) -> float:
        """Predicted speed at ``low_occupancy`` ÷ speed at ``high_occupancy`` (shares of the warp slots)."""
        for value in (low_occupancy, high_occupancy):
            if not 0 < value <= 1:
                raise InvalidConfig(f"occupancy must be a share in (0, 1]; got {value!r}")
        low, high = self.relative_speed([low_occupancy * self.max_warps, high_occupancy * self.max_warps], ilp)
        return float(low / high)


def _latency_bound_row(rec):
    """The first attempt's ILP-4 copy at its lowest occupancy (latency-bound: its blocks retire slower than the
    block dispatcher's rate), or None."""
    if rec is None or rec.data is None or not len(rec.data) or "kernel" not in rec.data:
        return None
    rows = rec.data[rec.data.kernel == "copy_ilp4"]
    return rows.loc[rows.occupancy_pct.idxmin()] if len(rows) else None


def recorded_latency_ns(rec) -> float | None:
    """Little's law on a first-attempt recording's ILP-4 copy at the lowest occupancy: blocks × warps × 4 loads ×
    256 B (load + store) per SM ÷ its GB/s. Not the model's latency (that is calibrated on lesson 03's copy,
    ``measure.calibration``): the lesson compares the two, since the same law must give about the same
    number on another kernel with the same reads in flight."""
    row = _latency_bound_row(rec)
    sm_count = rec.provenance.get("device", {}).get("sm_count") if rec is not None else None
    if row is None or not sm_count:
        return None
    warps = int(row.active_blocks) * int(row.threads_per_block) // WARP_SIZE
    in_flight = warps * int(row.ilp) * MODEL_BYTES_PER_WARP_COPY  # bytes per SM
    return float(in_flight * int(sm_count) / float(row.gbps))  # GB/s = bytes/ns


def recorded_copy_gbps(rec) -> float | None:
    """The measured copy ceiling of a measuring.ceilings recording (GB/s), or None."""
    if rec is None or rec.data is None or "quantity" not in rec.data:
        return None
    rows = rec.data[rec.data.quantity == "copy bandwidth"]
    return float(rows.measured.iloc[0]) if len(rows) else None


def _cc_of(rec) -> tuple[int, int]:
    return tuple(int(v) for v in str(rec.provenance.get("device", {}).get("compute_capability", "9.0")).split("."))


def memory_inputs(name: str, own, reference_calibration, ceiling_now_gbps: float | None = None,
                  datasheet_gbps: float | None = None) -> tuple[float, str, float, str]:
    """(latency ns, where it comes from, copy ceiling GB/s, where it comes from) for the memory model of GPU
    ``name``: its own calibration where the course recorded it (``own``); else the reference GPU's calibrated
    latency, said to be an assumption for this GPU, with this GPU's ceiling measured now (else its datasheet)."""
    if own is not None:
        return (own.latency_ns, "calibrated on lesson 03's one-element copy", own.ceiling_gbps,
                "recorded copy ceiling")
    if reference_calibration is None:
        raise CourseError("the occupancy model needs a loaded latency and none can be calibrated here: the course's "
                          f"recording data/reference/{calibrations.CALIBRATION_GPU}/…/"
                          f"{calibrations.CALIBRATION_SWEEP}.csv is missing")
    latency_from = f"the {reference_calibration.device}'s calibrated latency, assumed for the {name}"
    if ceiling_now_gbps:
        return reference_calibration.latency_ns, latency_from, float(ceiling_now_gbps), "copy ceiling measured now"
    if datasheet_gbps:
        return reference_calibration.latency_ns, latency_from, float(datasheet_gbps), "datasheet"
    raise CourseError(f"the occupancy model needs the {name}'s copy bandwidth: no measurement and no datasheet entry")


def speed_model(kind: str = "memory", rec=None, *, calibration=None, ceiling_now_gbps: float | None = None
                ) -> SpeedModel:
    """The Little's-law model for the memory- or compute-bound sweep, on the GPU the chart shows: this GPU, else
    the recording's GPU (``rec``), else the course's calibration GPU. The memory model's latency and copy ceiling
    are that GPU's calibration (``measure.calibration``: ``calibration`` if given, else looked up by name); a GPU
    the course never recorded takes the reference GPU's latency (said so) and ``ceiling_now_gbps``."""
    if kind not in ("memory", "compute"):
        raise InvalidConfig(f"kind must be 'memory' or 'compute'; got {kind!r}")
    reference_cal = calibrations.recorded(calibrations.CALIBRATION_GPU)
    if runtime.is_gpu():
        info = runtime.device()
        name, sm_count, cc, datasheet = (info.name, int(info.sm_count), tuple(info.compute_capability),
                                         info.datasheet_bandwidth_gbps)
    elif rec is not None:
        name, sm_count, cc = rec.device, rec.provenance.get("device", {}).get("sm_count"), _cc_of(rec)
        datasheet = runtime.datasheet_bandwidth_gbps(name)
    else:
        from gpucourse.measure import reference

        base = reference.load(calibrations.CALIBRATION_SWEEP, gpu=calibrations.CALIBRATION_GPU)
        if reference_cal is not None and base is not None:
            name, sm_count, cc, datasheet = reference_cal.device, reference_cal.sm_count, _cc_of(base), None
        elif kind == "compute":  # FMA chains need only the warp slots: an H100/H200's, said so
            name, sm_count, cc, datasheet = "cc 9.0 (an H100 or H200, assumed)", None, (9, 0), None
        else:
            raise CourseError("the memory model needs a loaded latency, and there is no GPU here and no recording "
                              f"to calibrate it on (data/reference/{calibrations.CALIBRATION_GPU}/…/"
                              f"{calibrations.CALIBRATION_SWEEP}.csv)")
    max_warps = architecture(cc).max_warps_per_sm
    if kind == "compute":
        needed = float(MODEL_FMA_LATENCY_CYCLES * SUB_PARTITIONS)
        assumptions = (
            f"assumed {MODEL_FMA_LATENCY_CYCLES}-cycle FMA latency × {SUB_PARTITIONS} sub-partitions issuing "
            f"one warp FMA per cycle → {needed:.0f} FMAs in flight per SM; {max_warps} warp slots (cc "
            f"{cc[0]}.{cc[1]}, {name}); loop overhead ignored (8 FMAs per chain per iteration)"
        )
        return SpeedModel(kind, name, needed, max_warps, assumptions)
    own = calibration if calibration is not None else calibrations.for_device(name)
    if own is not None:
        sm_count = own.sm_count
    if not sm_count:
        raise CourseError(f"the occupancy model needs the {name}'s SM count: the recording does not give it")
    latency, latency_from, bandwidth, bandwidth_from = memory_inputs(name, own, reference_cal, ceiling_now_gbps,
                                                                     datasheet)
    needed = bandwidth / int(sm_count) * latency / MODEL_BYTES_PER_WARP_COPY  # GB/s = bytes/ns
    assumptions = (
        f"{latency:.0f} ns loaded latency ({latency_from}) × {bandwidth:,.0f} GB/s ({bandwidth_from}) ÷ "
        f"{sm_count} SMs ({name}) ÷ {MODEL_BYTES_PER_WARP_COPY} B per warp copy → {needed:.0f} warp loads "
        f"in flight per SM; {max_warps} warp slots"
    )
    return SpeedModel(kind, name, needed, max_warps, assumptions)


def lesson_speed_model(kind: str = "memory") -> SpeedModel:
    """``speed_model`` for the GPU the lesson shows: this GPU (its copy ceiling measured now where the course has
    no recording of it), else the course's calibration GPU. The chart and the stated prediction both call it."""
    ceiling_now = None
    if kind == "memory" and runtime.is_gpu() and calibrations.for_device(runtime.device().name) is None:
        from gpucourse.measure import ceilings

        ceiling_now = ceilings.copy_gbps()
    return speed_model(kind, ceiling_now_gbps=ceiling_now)


def first_attempt_check(model: SpeedModel | None = None) -> dict | None:
    """The first attempt's recorded ILP-4 point at the lowest occupancy against the model (a check: the model is
    calibrated on another kernel): recorded GB/s, predicted GB/s, and the latency Little's law gives on it."""
    from gpucourse.measure import reference

    model = model or lesson_speed_model("memory")
    cal = calibrations.for_device(model.device)
    rec = next((r for r in reference.recordings(FIRST_ATTEMPT_SWEEP) if r.device == model.device), None)
    row = _latency_bound_row(rec)
    if cal is None or row is None:
        return None
    warps = int(row.active_blocks) * int(row.threads_per_block) // WARP_SIZE
    predicted = min(1.0, warps * int(row.ilp) / model.warps_needed) * cal.ceiling_gbps
    return {"occupancy %": float(row.occupancy_pct), "warps": warps, "ilp": int(row.ilp),
            "recorded GB/s": float(row.gbps), "predicted GB/s": predicted,
            "latency on this point (ns)": recorded_latency_ns(rec), "calibrated latency (ns)": cal.latency_ns,
            "source": rec.caption()}


def first_attempt_text(model: SpeedModel | None = None) -> str:
    """``first_attempt_check`` in one line (the lesson prints it)."""
    check = first_attempt_check(model)
    if check is None:
        return "first attempt: no recording of it on this GPU to check the model against"
    ratio = check["recorded GB/s"] / check["predicted GB/s"]
    return (f"check, the first attempt's ILP-4 copy at {check['occupancy %']:.0f} % ({check['warps']} warps × "
            f"{check['ilp']} loads per SM): model {check['predicted GB/s']:,.0f} GB/s, recorded "
            f"{check['recorded GB/s']:,.0f} GB/s ({ratio:.2f}×); Little's law on that point gives "
            f"{check['latency on this point (ns)']:.0f} ns against the calibrated "
            f"{check['calibrated latency (ns)']:.0f} ns")


def predictions(model_memory: SpeedModel | None = None, model_compute: SpeedModel | None = None) -> dict:
    """The lesson's stated predictions (before measuring): low ÷ full occupancy per kernel, from the models."""
    memory = model_memory or lesson_speed_model("memory")
    compute = model_compute or lesson_speed_model("compute")
    return {
        "copy_resident at 25 %": round(memory.ratio(0.25, 1), 2),
        "copy_resident_ilp4 at 25 %": round(memory.ratio(0.25, 4), 2),
        "FMA ILP 1 at 12.5 %": round(compute.ratio(0.125, 1), 2),
        "FMA ILP 4 at 12.5 %": round(compute.ratio(0.125, 4), 2),
    }


def accumulators_answer(threads_per_block: int = 128, capped: int = 64, cc=None) -> dict:
    """The model answer to the lesson's `accumulators` prediction, for the lesson's compute capability
    (the GPU's, else cc 9.0): occupancy from the toolchain's register count, then with a register cap."""
    cc = tuple(cc or lesson_cc())
    free, low = usage("accumulators", cc=cc), usage("accumulators", max_registers=capped, cc=cc)
    if not (free.known and low.known):
        return {"occupancy %": "unknown here (no toolchain): use the typed register count in the explorer",
                "with max_registers=64": "unknown", "side effect": "spilling to local memory"}
    arch = f"sm_{cc[0]}{cc[1]}"
    first, second = (occupancy(threads_per_block, u.registers, u.shared_bytes, cc) for u in (free, low))
    spills = (f"{low.spill_store_bytes:,} bytes of spill stores" if low.spill_store_bytes
              else "the spill bytes (none reported here)" if low.spill_store_bytes == 0 else "spills (not reported)")
    return {
        "occupancy %": f"{first.occupancy_pct:g} ({free.registers} registers on {arch}: "
                       f"{_plural(first.active_blocks, 'block')} of {threads_per_block} threads)",
        f"with max_registers={capped}": f"{second.occupancy_pct:g} ({low.registers} registers)",
        "side effect": f"spilling to local memory: {spills}",
    }
