"""Lesson 05 "Occupancy": host runners, microscope traces, GPU sweeps and their recording registration."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from numba import cuda

from gpucourse.errors import InvalidConfig, NoGPU
from gpucourse.lessons.occupancy.calculator import (
    KB,
    WARP_SIZE,
    architecture,
    occupancy,
)
from gpucourse.lessons.occupancy.model import (
    CANNOT_LAUNCH,
    KERNELS,
    SWEEP_THREADS,
    TARGET_OCCUPANCIES,
    _fma_reference,
    fma_chain_length,
    lesson_kernel,
    padding_levels,
    resident_grid,
)
from gpucourse.measure import reference, runtime
from gpucourse.measure.ptxinfo import ResourceUsage, gpu_kernel, resource_usage

LESSON = "05_occupancy"


AXES = {
    "threads_per_block": "threads per block",
    "registers_per_thread": "registers per thread",
    "shared_bytes_per_block": "shared memory per block (KB)",
}


def sweep_axis(
    axis: str, threads_per_block: int, registers_per_thread: int, shared_bytes_per_block: int = 0, cc=(9, 0)
) -> pd.DataFrame:
    """The calculator along one axis, the other two held: x, occupancy %, blocks, limiter."""
    if axis not in AXES:
        raise InvalidConfig(f"axis must be one of {', '.join(AXES)}; got {axis!r}")
    arch = architecture(cc)
    if axis == "threads_per_block":
        xs = list(range(WARP_SIZE, 1025, WARP_SIZE))
    elif axis == "registers_per_thread":
        xs = list(range(8, 256, 1))
    else:
        xs = list(range(0, arch.shared_per_block_optin_bytes + 1, 512))
    rows = []
    for x in xs:
        args = {
            "threads_per_block": threads_per_block,
            "registers_per_thread": registers_per_thread,
            "shared_bytes_per_block": shared_bytes_per_block,
            axis: x,
        }
        r = occupancy(
            args["threads_per_block"], args["registers_per_thread"], args["shared_bytes_per_block"], cc
        )
        rows.append(
            {
                "x": x / KB if axis == "shared_bytes_per_block" else x,
                "occupancy_pct": r.occupancy_pct,
                "active_blocks": r.active_blocks,
                "active_warps": r.active_warps,
                "limiter": r.limiter if r.launches else CANNOT_LAUNCH,
            }
        )
    return pd.DataFrame(rows)
COPY_ELEMENTS = 1 << 26  # 256 MiB per array: far beyond the L2
FMA_THREADS = 1 << 20
FMA_ITERATIONS = 4096
KINDS = {  # the speed sweeps' kernels: (ILP 1, ILP 4)
    "memory": ("copy_resident", "copy_resident_ilp4"),  # grid = resident blocks × SMs, grid-stride loops
    "first_attempt": ("copy", "copy_ilp4"),  # one block per 64 (or 256) elements: dispatch-bound
    "compute": ("fma", "fma_ilp4"),
}


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise InvalidConfig(f"kind must be one of {', '.join(KINDS)}; got {kind!r}")


def _need_gpu(what: str) -> None:
    if not runtime.is_gpu():
        raise NoGPU(f"{what} runs on a GPU; in simulator mode the charts show a recording instead")


def driver_blocks(
    name: str, threads_per_block: int, dynamic_shared_bytes: int = 0, max_registers: int | None = None
) -> int:
    """The driver's answer: cuOccupancyMaxActiveBlocksPerMultiprocessor for the compiled kernel."""
    _need_gpu("asking the driver")
    k = lesson_kernel(name)
    _, compiled = gpu_kernel(k.kernel, k.signature, max_registers)
    cufunc = compiled._codelibrary.get_cufunc()
    return int(
        cuda.current_context().get_active_blocks_per_multiprocessor(
            cufunc, int(threads_per_block), int(dynamic_shared_bytes)
        )
    )


DRIVER_THREADS = (64, 128, 256, 512, 1024)
DRIVER_DYNAMIC_BYTES = (0, 12 * KB, 40 * KB)
DRIVER_CAPS = (None, 32, 64)


def driver_comparison(
    names=None, threads=DRIVER_THREADS, dynamic_bytes=DRIVER_DYNAMIC_BYTES, caps=DRIVER_CAPS
) -> pd.DataFrame:
    """Our calculator and the driver side by side for the lesson's real kernels (GPU only)."""
    _need_gpu("comparing the calculator with the driver")
    cc = tuple(runtime.device().compute_capability)
    architecture(cc)  # a clear error on a compute capability the calculator does not model
    rows = []
    for name in names or KERNELS:
        k = lesson_kernel(name)
        for cap in caps:
            u = resource_usage(k.kernel, k.signature, cc, cap, use_gpu=True)
            for t in threads:
                for dynamic in dynamic_bytes:
                    model = occupancy(t, u.registers, u.shared_bytes + dynamic, cc)
                    driver = driver_blocks(name, t, dynamic, cap)
                    rows.append(
                        {
                            "kernel": name,
                            "max_registers": cap or 0,
                            "registers": u.registers,
                            "static_shared_bytes": u.shared_bytes,
                            "threads_per_block": t,
                            "dynamic_shared_bytes": dynamic,
                            "model_blocks": model.active_blocks,
                            "driver_blocks": driver,
                            "model_limiter": model.limiter,
                            "match": model.active_blocks == driver,
                        }
                    )
    return pd.DataFrame(rows)


@reference.register_sweep(
    "occupancy.driver",
    lesson=LESSON,
    columns=(
        "kernel",
        "max_registers",
        "registers",
        "threads_per_block",
        "dynamic_shared_bytes",
        "model_blocks",
        "driver_blocks",
    ),
    description="blocks per SM: gpucourse.occupancy vs the driver's occupancy query, lesson kernels",
)
def _driver_sweep() -> pd.DataFrame:
    return driver_comparison()


class SpeedRig:
    """The arrays and launches of the speed sweeps on a GPU (allocated once, reused for every point)."""

    def __init__(self, kind: str = "memory"):
        _check_kind(kind)
        _need_gpu("timing kernels")
        self.kind = kind
        self.cc = tuple(runtime.device().compute_capability)
        self.sm_count = int(runtime.device().sm_count)
        self.names = KINDS[kind]
        if kind != "compute":
            self.host = np.arange(COPY_ELEMENTS, dtype=np.float32)
            self.poison_host = np.full(COPY_ELEMENTS, np.nan, dtype=np.float32)
            self.src = cuda.to_device(self.host)
            self.dst = cuda.device_array(COPY_ELEMENTS, dtype=np.float32)
        else:
            self.poison_host = np.full(FMA_THREADS, np.nan, dtype=np.float32)
            self.out = cuda.device_array(FMA_THREADS, dtype=np.float32)

    def usage(self, name: str) -> ResourceUsage:
        k = lesson_kernel(name)
        return resource_usage(k.kernel, k.signature, self.cc, use_gpu=True)

    def measure(self, name: str, threads_per_block: int, dynamic_shared_bytes: int, *, min_total_ms=500.0):
        """One harness measurement of kernel ``name`` with this block size and shared-memory padding."""
        from gpucourse.measure.harness import measure

        k = lesson_kernel(name)
        dispatcher, _ = gpu_kernel(k.kernel, k.signature)
        grid = self.grid(name, threads_per_block, dynamic_shared_bytes)
        launch = dispatcher[grid, threads_per_block, 0, int(dynamic_shared_bytes)]
        label = f"{name}, {threads_per_block} threads × {grid} blocks, {dynamic_shared_bytes} B padding"
        if self.kind != "compute":
            self.dst.copy_to_device(self.poison_host)  # a kernel that writes nothing cannot pass the check
            return measure(
                lambda: launch(self.dst, self.src),
                label=label,
                min_total_ms=min_total_ms,
                check=lambda: bool(np.array_equal(self.dst.copy_to_host(), self.host)),
                bytes_moved=2 * COPY_ELEMENTS * 4,
                copy_ceiling_gbps=self.ceiling(),
            )
        ilp = 4 if name.endswith("ilp4") else 1
        expected = _fma_reference(FMA_ITERATIONS, ilp)
        iterations = np.int32(FMA_ITERATIONS)
        self.out.copy_to_device(self.poison_host)
        return measure(
            lambda: launch(self.out, iterations),
            label=label,
            min_total_ms=min_total_ms,
            check=lambda: bool(
                np.allclose(self.out.copy_to_host()[:16].astype(np.float64), expected, rtol=1e-3)
            ),
            flops=2 * FMA_THREADS * ilp * fma_chain_length(FMA_ITERATIONS, ilp),
        )

    def ceiling(self) -> float | None:
        if self.kind == "compute":
            return None
        from gpucourse.measure import ceilings

        return ceilings.copy_gbps()

    def grid(self, name: str, threads_per_block: int, dynamic_shared_bytes: int = 0) -> int:
        """Blocks launched: for the resident-grid copies, the driver's blocks per SM × SMs (one wave);
        for the first attempt, one block per 64 (ILP 4: 256) elements; for the FMAs, one per 64 threads."""
        if self.kind == "memory":
            return resident_grid(driver_blocks(name, threads_per_block, dynamic_shared_bytes), self.sm_count)
        if self.kind == "first_attempt":
            ilp = 4 if name.endswith("ilp4") else 1
            return math.ceil(COPY_ELEMENTS / (threads_per_block * ilp))
        return math.ceil(FMA_THREADS / threads_per_block)


def measure_speed(
    kind: str = "memory", threads_per_block: int = SWEEP_THREADS, targets=TARGET_OCCUPANCIES, progress=None
) -> pd.DataFrame:
    """On a GPU: the resident-grid copies ("memory"), the first attempt's one-element copies
    ("first_attempt") or the FMA chains ("compute"), each ILP 1 and 4, at several occupancies.

    Occupancy is lowered by dynamic shared-memory padding per block; the calculator gives the
    level and the driver confirms it. Each point is measured by the course's harness.
    """
    _check_kind(kind)
    rig = SpeedRig(kind)
    plans = []
    for name in rig.names:
        u = rig.usage(name)
        for dynamic, model in padding_levels(u.registers, u.shared_bytes, threads_per_block, rig.cc, targets):
            plans.append((name, u, dynamic, model))
    rows = []
    for step, (name, u, dynamic, model) in enumerate(plans):
        m = rig.measure(name, threads_per_block, dynamic)
        rows.append(
            {
                "kernel": name,
                "ilp": 4 if name.endswith("ilp4") else 1,
                "threads_per_block": threads_per_block,
                "registers": u.registers,
                "dynamic_shared_bytes": dynamic,
                "active_blocks": model.active_blocks,
                "driver_blocks": driver_blocks(name, threads_per_block, dynamic),
                "occupancy_pct": model.occupancy_pct,
                "grid_blocks": rig.grid(name, threads_per_block, dynamic),
                "median_ms": m.median_ms,
                "iqr_ms": m.iqr_ms,
                "n_samples": m.n_samples,
                "gbps": m.gbps,
                "tflops": m.tflops,
                "pct_of_copy_ceiling": m.pct_of_copy_ceiling,
            }
        )
        if progress:
            progress((step + 1) / len(plans))
    return pd.DataFrame(rows)


SPEED_COLUMNS = ("kernel", "ilp", "threads_per_block", "dynamic_shared_bytes", "occupancy_pct", "median_ms")


@reference.register_sweep(
    "occupancy.memory_resident",
    lesson=LESSON,
    columns=SPEED_COLUMNS + ("grid_blocks", "gbps"),
    description="float32 grid-stride copy (ILP 1 and 4), grid = resident blocks × SMs, 64-thread blocks, "
    "occupancy lowered by shared-memory padding",
)
def _memory_sweep() -> pd.DataFrame:
    return measure_speed("memory")


@reference.register_sweep(
    "occupancy.memory_bound",
    lesson=LESSON,
    columns=SPEED_COLUMNS + ("gbps",),
    description="the first attempt: float32 copy, one element (ILP 4: four) per thread, ~1 M 64-thread blocks "
    "(dispatch-bound), occupancy lowered by shared-memory padding",
)
def _first_attempt_sweep() -> pd.DataFrame:
    return measure_speed("first_attempt")


@reference.register_sweep(
    "occupancy.compute_unrolled",
    lesson=LESSON,
    columns=SPEED_COLUMNS + ("tflops",),
    description="float32 FMA chains (ILP 1 and 4, 8 FMAs per chain per loop iteration, 4096 FMAs/thread), "
    "64-thread blocks, occupancy via padding",
)
def _compute_sweep() -> pd.DataFrame:
    return measure_speed("compute")
