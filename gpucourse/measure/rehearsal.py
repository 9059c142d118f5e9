"""GPU mode rehearsed on the CPU: the GPU code paths run end to end on the simulator.

Simulator mode never enters the code that only runs on a GPU: the harness's event timer,
``make record``, recordings' provenance, the loader, the charts' "measured now" branch. A
rehearsal runs all of it on a stand-in device:

    with rehearsal.rehearse():
        runtime.is_gpu()          # True: lesson code takes its GPU branch
        warps.staircase_figure()  # kernels run in Numba's simulator, timed by the rehearsal clock

* kernels really run (in the simulator), once per measurement, untimed, and are checked;
* the harness's own ``EventTimer`` code runs, on a rehearsal clock that charges every timed call
  ``TICK_MS`` and never re-runs it: a counted placeholder, not a time;
* every number is marked rehearsal (the provenance's ``"rehearsal": true``, a ``rehearsal``
  column in recorded CSVs, "REHEARSAL" in chart captions and measurement summaries), and the
  reference loader refuses rehearsal folders, so no lesson ever draws one;
* CuPy's array functions are answered by NumPy, ``cuda.as_cuda_array`` by the array itself;
* sizes are small (``SWEEP_PLANS``) so the whole rehearsal runs in seconds on two cores.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from gpucourse.measure import harness, runtime

TICK_MS = 1.0  # what the rehearsal clock charges per timed call: a placeholder, never a time
SLUG = "rehearsal"
CAPTION = "REHEARSAL: simulator numbers standing in for a GPU, not GPU performance"
DEVICE = runtime.DeviceInfo(
    name="Rehearsal device (Numba's simulator standing in for a GPU)", compute_capability=(9, 0),
    sm_count=2, memory_bytes=1 << 30, l2_bytes=1 << 20, datasheet_bandwidth_gbps=None, simulated=True,
)

_ACTIVE = False


def active() -> bool:
    return _ACTIVE


class RehearsalClock:
    """The parts of ``numba.cuda`` that ``harness.EventTimer`` uses, on a counted clock: the
    blocking kernel advances it by its microseconds, each timed call by ``TICK_MS``."""

    def __init__(self):
        self.now_ms = 0.0

    def event(self, timing=True):
        clock = self

        class Event:
            at_ms = 0.0

            def record(self, stream=0):
                self.at_ms = clock.now_ms

            def synchronize(self):
                pass

        return Event()

    @staticmethod
    def event_elapsed_time(start, stop) -> float:
        return stop.at_ms - start.at_ms

    def synchronize(self):
        pass

    def advance(self, ms: float) -> None:
        self.now_ms += ms


class RehearsalTimer(harness.EventTimer):
    """The harness's event timer on the rehearsal clock (its queueing logic runs unchanged)."""

    rehearsal = True

    def __init__(self):
        self._cuda = clock = RehearsalClock()
        self._block_us = int(harness.BLOCKER_START_MS * 1000)
        self.timed_calls = 0

        class Blocker:
            def __getitem__(self, launch_shape):
                return lambda microseconds: clock.advance(microseconds / 1e3)

        self._blocker = Blocker()

    def _tick(self, fn):
        def charged():  # the kernel already ran (untimed, checked); a timed call is only counted
            self.timed_calls += 1
            self._cuda.advance(TICK_MS)

        return charged

    def time_ms(self, fn, repeat: int = 1) -> float:
        return super().time_ms(self._tick(fn), repeat)

    def time_queued_ms(self, fn, repeat: int = 1):
        return super().time_queued_ms(self._tick(fn), repeat)


def _flusher(xp=None, l2_bytes=None):
    return harness._l2_flusher(xp=np, l2_bytes=l2_bytes or DEVICE.l2_bytes)


def _device_view(array):
    """``cuda.as_cuda_array`` on the simulator: its kernels take NumPy arrays as they are."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"the rehearsal has NumPy arrays only, got {type(array).__name__}")
    return array


def _numpy_as_cupy() -> types.ModuleType:
    """CuPy's array functions the lessons use, answered by NumPy (the rehearsal has no CUDA)."""
    shim = types.ModuleType("cupy", "NumPy standing in for CuPy in a rehearsal")

    class Pool:
        def free_all_blocks(self):
            pass

    shim.asnumpy = np.asarray
    shim.get_default_memory_pool = Pool
    shim.__getattr__ = lambda name: getattr(np, name)
    return shim


def _ceiling(name: str):
    """A rehearsal 'ceiling': a NumPy copy through the harness (rehearsal-marked, never shown)."""
    src = np.ones(1 << 16, dtype=np.float32)
    dst = np.empty_like(src)
    m = harness.measure(lambda: np.copyto(dst, src), label=f"rehearsal {name}",
                        check=lambda: bool((dst == src).all()), bytes_moved=2 * src.nbytes, flops=2 * src.size)
    return m.gbps if name == "copy_gbps" else m.tflops


# --- small sizes for every sweep that can run on the simulator ----------------------------------------


@dataclass
class SweepPlan:
    """How one registered sweep is rehearsed: module attributes and function defaults to shrink."""

    attributes: dict[str, object] = field(default_factory=dict)  # "module.NAME": value
    defaults: dict[str, dict[str, object]] = field(default_factory=dict)  # "module.function": {arg: value}
    not_rehearsable: str = ""  # why it cannot run on the simulator


SWEEP_PLANS: dict[str, SweepPlan] = {
    "warps.staircase": SweepPlan(
        attributes={"gpucourse.lessons.warps.experiments.FMA_ITERATIONS": 2},
        defaults={"gpucourse.lessons.warps.measure_staircase": {"threads": (1, 32, 33), "blocks_per_sm": 1}}),
    "races.histogram": SweepPlan(
        defaults={"gpucourse.lessons.races.measure_histogram": {"bins_list": (1, 4), "items": 64}}),
    "divergence.fraction": SweepPlan(
        attributes={"gpucourse.lessons.divergence.experiments.BODY_COSTS": (2,)},
        defaults={"gpucourse.lessons.divergence.measure_fraction_curve": {
            "placements": ("interleaved", "clustered"), "fractions": (0.5, 1.0), "n_threads": 256,
            "min_total_ms": 1.0}}),
    "measuring.async_pitfall": SweepPlan(
        not_rehearsable="times a 132×256-thread launch with the host's wall clock: no simulator stand-in"),
    "measuring.ceilings": SweepPlan(not_rehearsable="CuPy copies and torch matmuls need CUDA"),
    "coalescing.stride": SweepPlan(defaults={
        "gpucourse.lessons.coalescing.sweep_elements": {"useful_bytes_per_side": 2048},
        "gpucourse.lessons.coalescing.stride_sweep": {"dtypes": ("float32",), "strides": (1, 8)}}),
    "coalescing.offset": SweepPlan(defaults={
        "gpucourse.lessons.coalescing.sweep_elements": {"useful_bytes_per_side": 2048},
        "gpucourse.lessons.coalescing.offset_sweep": {"dtypes": ("float32",), "offsets": (0, 1)}}),
    "coalescing.layout": SweepPlan(defaults={
        "gpucourse.lessons.coalescing.layout_sweep": {"n_particles": 256, "matrix_side": 32}}),
    "divergence.sort_pays": SweepPlan(
        attributes={"gpucourse.lessons.divergence.experiments.SPARSE_DENSITIES": (1 / 4,)},
        defaults={"gpucourse.lessons.divergence.measure_sort_pays": {"bodies": (2,), "n_threads": 256,
                                                             "min_total_ms": 1.0}}),
    "occupancy.driver": SweepPlan(not_rehearsable="asks the CUDA driver's occupancy API"),
    "occupancy.memory_bound": SweepPlan(not_rehearsable="confirms each level with the driver's occupancy API"),
    "occupancy.compute_bound": SweepPlan(not_rehearsable="confirms each level with the driver's occupancy API"),
    "precision.matmul": SweepPlan(not_rehearsable="torch matmuls on device='cuda'"),
    "precision.vocab_shape": SweepPlan(not_rehearsable="torch matmuls on device='cuda'"),
    "races.litmus_mp": SweepPlan(not_rehearsable="needs blocks running concurrently on real SMs"),
    "tiling.matmul": SweepPlan(not_rehearsable="its cuBLAS rung is CuPy's, which needs CUDA"),
    "tiling.transpose": SweepPlan(attributes={"gpucourse.lessons.tiling.experiments.TRANSPOSE_SIZES": (64,),
                                              "gpucourse.lessons.tiling.experiments._MEASURED": {}}),
    "feeding.copy": SweepPlan(not_rehearsable="pageable vs pinned host memory: the simulator has no copy engine"),
    "feeding.overlap": SweepPlan(not_rehearsable="streams and events around copies: the simulator has no copy engines"),
    "feeding.launch": SweepPlan(not_rehearsable="torch CUDA graphs need CUDA"),
    "feeding.sync": SweepPlan(not_rehearsable="torch on device='cuda'"),
    "feeding.fusion": SweepPlan(defaults={"gpucourse.lessons.feeding.experiments.fusion_sweep": {"sizes": (256,)}}),
    "feeding.l2": SweepPlan(not_rehearsable="its working sets are sized by the device's L2 (tens of MB)"),
}


def _resolve(dotted: str):
    import importlib

    module, _, name = dotted.rpartition(".")
    return importlib.import_module(module), name


@contextlib.contextmanager
def _patched(patches: list[tuple[object, str, object]]) -> Iterator[None]:
    missing = object()
    saved = [(obj, name, getattr(obj, name, missing)) for obj, name, _ in patches]
    try:
        for obj, name, value in patches:
            setattr(obj, name, value)
        yield
    finally:
        for obj, name, value in reversed(saved):
            if value is missing:
                delattr(obj, name)
            else:
                setattr(obj, name, value)


def _default_patches(fn, new: dict[str, object]) -> list[tuple[object, str, object]]:
    """Replace some default arguments of ``fn`` (positional-or-keyword and keyword-only)."""
    params = inspect.signature(fn).parameters
    unknown = set(new) - set(params)
    if unknown:
        raise TypeError(f"{fn.__qualname__} has no argument(s) {sorted(unknown)}")
    positional = [p for p in params.values() if p.kind is p.POSITIONAL_OR_KEYWORD and p.default is not p.empty]
    defaults = tuple(new.get(p.name, p.default) for p in positional)
    kwdefaults = {p.name: new.get(p.name, p.default) for p in params.values()
                  if p.kind is p.KEYWORD_ONLY and p.default is not p.empty}
    return [(fn, "__defaults__", defaults or None), (fn, "__kwdefaults__", kwdefaults or None)]


def plan_patches(plan: SweepPlan) -> list[tuple[object, str, object]]:
    patches = []
    for dotted, value in plan.attributes.items():
        module, name = _resolve(dotted)
        patches.append((module, name, value))
    for dotted, new in plan.defaults.items():
        module, name = _resolve(dotted)
        patches += _default_patches(getattr(module, name), new)
    return patches


@contextlib.contextmanager
def rehearse() -> Iterator[None]:
    """GPU mode on the rehearsal device, for the duration of the block (tests, gpu-report)."""
    global _ACTIVE
    if not runtime.MODE == "sim":
        raise RuntimeError("a rehearsal stands in for a GPU on a machine without one; here is a real GPU")
    from numba import cuda as simulator

    from gpucourse.measure import ceilings

    patches = [
        (runtime, "MODE", "gpu"), (runtime, "device", lambda: DEVICE),
        (runtime, "free_memory_bytes", lambda: DEVICE.memory_bytes),
        (runtime, "xp", np), (runtime, "cuda", simulator),
        (harness, "default_timer", RehearsalTimer), (harness, "_l2_flusher", _flusher),
        (simulator, "as_cuda_array", _device_view),
        (ceilings, "copy_gbps", lambda refresh=False: _ceiling("copy_gbps")),
        (ceilings, "matmul_tflops", lambda dtype="float32", refresh=False: _ceiling("matmul_tflops")),
    ]
    real_cupy = sys.modules.get("cupy")
    with _patched(patches):
        _ACTIVE = True
        sys.modules["cupy"] = _numpy_as_cupy()  # `import cupy` inside lesson code gets NumPy
        try:
            yield
        finally:
            _ACTIVE = False
            if real_cupy is None:
                sys.modules.pop("cupy", None)
            else:
                sys.modules["cupy"] = real_cupy


@dataclass
class SweepOutcome:
    name: str
    status: str  # "recorded" or "not rehearsed"
    detail: str = ""
    rows: int = 0


def run_sweep(name: str):
    """One registered sweep at rehearsal sizes (inside ``rehearse()``): its data frame."""
    from gpucourse.measure import reference

    sweep = reference.load_all_sweeps()[name]
    plan = SWEEP_PLANS.get(name)
    if plan is None or plan.not_rehearsable:
        return None
    with _patched(plan_patches(plan)):
        return sweep.run()


def caption(source: str) -> str:
    return f"{CAPTION} · {source}" if not source.startswith(CAPTION) else source
