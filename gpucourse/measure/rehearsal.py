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
* CuPy's array functions are answered by NumPy (a device-to-device ``memcpyAsync`` by a
  ``memmove`` between the arrays, cuBLAS's compute-type switch by a recorded setting),
  ``cuda.as_cuda_array`` by the array itself;
* torch's CUDA device is CPU torch behind the same calls (``device="cuda"`` tensors and
  generators are made on the CPU, ``torch.cuda`` answers for the rehearsal device);
* the driver's kernel attributes (registers, shared memory) come from ptxas on numba-cuda's PTX
  for the rehearsal device's cc 9.0, and its occupancy query
  (``cuOccupancyMaxActiveBlocksPerMultiprocessor``) is answered by the course's calculator, so a
  rehearsed "calculator vs driver" comparison agrees by construction: it tests the wiring only;
* blocks run one after another in the simulator, so the cross-block litmus test's consumers
  mostly give up at their spin cap: its counts are wiring, never a weak-memory observation;
* sizes are small (``SWEEP_PLANS``) so the whole rehearsal runs in about a minute on two cores.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from gpucourse.measure import harness, reference, runtime
from gpucourse.measure.plans import SweepPlan, _resolve, patched, plan_patches

_patched = patched  # the name gpu-report and the tests used before plans.py

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


def _device_view(array, sync=True):
    """``cuda.as_cuda_array`` on the simulator: its kernels take NumPy arrays as they are."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"the rehearsal has NumPy arrays only, got {type(array).__name__}")
    return array


class _DeviceBuffer(np.ndarray):
    """A NumPy array with CuPy's ``.data.ptr`` (the address a CUDA runtime call takes)."""

    @property
    def data(self):
        return types.SimpleNamespace(ptr=self.ctypes.data)


def _memcpy_async(dst: int, src: int, nbytes: int, kind: int, stream=0) -> None:
    """``cupy.cuda.runtime.memcpyAsync`` for device-to-device copies (kind 3) between rehearsal arrays."""
    if kind != 3:
        raise ValueError(f"the rehearsal copies device to device only (kind 3), got kind {kind}")
    ctypes.memmove(dst, src, nbytes)


class _ReductionKernel:
    """``cupy.ReductionKernel`` for the one shape the lessons build: map ``x``, reduce ``a + b``, identity 0."""

    def __init__(self, in_params, out_params, map_expr, reduce_expr, post_map_expr, identity, name="reduce"):
        if (map_expr.strip(), reduce_expr.replace(" ", ""), identity.strip()) != ("x", "a+b", "0"):
            raise NotImplementedError(f"the rehearsal stands in for a plain sum only, not {name!r}")

    def __call__(self, x):
        return np.sum(np.asarray(x))


def _numpy_as_cupy() -> dict[str, types.ModuleType]:
    """CuPy's modules as the lessons and the harness use them, answered by NumPy (no CUDA here)."""
    shim = types.ModuleType("cupy", "NumPy standing in for CuPy in a rehearsal")
    shim.__path__ = []  # a package: ``from cupy._core import _routines_linalg`` finds the stand-in below

    class Pool:
        def free_all_blocks(self):
            pass

    def random_array(size=None, dtype=np.float64):
        return np.random.default_rng(0).random(size, dtype=dtype).view(_DeviceBuffer)

    random = types.ModuleType("cupy.random", "NumPy's random standing in for CuPy's")
    random.random = random_array
    random.__getattr__ = lambda name: getattr(np.random, name)

    runtime_api = types.SimpleNamespace(memcpyAsync=_memcpy_async)
    shim.cuda = types.SimpleNamespace(runtime=runtime_api)
    shim.random = random
    shim.asnumpy = np.asarray
    shim.get_default_memory_pool = Pool
    shim.ReductionKernel = _ReductionKernel
    shim.__getattr__ = lambda name: getattr(np, name)

    # cuBLAS's compute type (tiling's plain-fp32 switch): a setting kept here; NumPy computes in fp32 anyway.
    linalg = types.ModuleType("cupy._core._routines_linalg", "cuBLAS compute-type settings, recorded only")
    linalg.COMPUTE_TYPE_DEFAULT, linalg.COMPUTE_TYPE_FP32 = 0, 4
    linalg.compute_types = {}
    linalg.get_compute_type = lambda dtype: linalg.compute_types.get(np.dtype(dtype), linalg.COMPUTE_TYPE_DEFAULT)
    linalg.set_compute_type = lambda dtype, value: linalg.compute_types.__setitem__(np.dtype(dtype), value)
    core = types.ModuleType("cupy._core")
    core.__path__ = []
    core._routines_linalg = linalg
    shim._core = core
    return {"cupy": shim, "cupy.random": random, "cupy._core": core, "cupy._core._routines_linalg": linalg}


_TORCH_FACTORIES = ("randn", "rand", "randint", "randperm", "empty", "zeros", "ones", "full", "tensor",
                    "as_tensor", "arange", "linspace", "eye", "empty_like", "zeros_like", "ones_like",
                    "randn_like", "rand_like", "full_like")


def _cpu_device(device):
    text = str(device) if device is not None else "cpu"
    return "cpu" if text.startswith("cuda") else device


def _torch_on_cpu(torch) -> types.ModuleType:
    """torch with its CUDA device answered by the CPU: tensors and generators made with
    ``device="cuda"`` live on the CPU, ``torch.cuda`` speaks for the rehearsal device. Every other
    name is torch's own (matmul, scaled_mm, ``backends.cuda.matmul.fp32_precision``)."""
    shim = types.ModuleType("torch", "CPU torch behind torch's CUDA calls, for a rehearsal")
    shim.__path__ = getattr(torch, "__path__", [])

    def on_cpu(factory):
        @functools.wraps(factory)
        def make(*args, **kwargs):
            if "device" in kwargs:
                kwargs["device"] = _cpu_device(kwargs["device"])
            return factory(*args, **kwargs)

        return make

    for name in _TORCH_FACTORIES:
        setattr(shim, name, on_cpu(getattr(torch, name)))

    def generator(device="cpu"):
        return torch.Generator(device=_cpu_device(device))

    shim.Generator = generator
    shim.cuda = types.SimpleNamespace(
        is_available=lambda: True, device_count=lambda: 1, current_device=lambda: 0,
        synchronize=lambda device=None: None, get_device_name=lambda device=None: DEVICE.name,
        get_device_capability=lambda device=None: DEVICE.compute_capability,
    )
    shim.__getattr__ = lambda name: getattr(torch, name)
    return shim


# --- the driver's kernel attributes and occupancy query ---------------------------------------------


class _RehearsalFunction:
    """What ``codelibrary.get_cufunc()`` hands the occupancy query: here, ptxas's resource usage."""

    def __init__(self, usage):
        self.usage = usage


class _RehearsalKernel:
    """One compiled overload as numba-cuda exposes it (``regs_per_thread``…), from ptxas for cc 9.0."""

    def __init__(self, usage):
        self.regs_per_thread = usage.registers
        self.shared_mem_per_block = usage.shared_bytes
        self.local_mem_per_thread = usage.stack_frame_bytes or 0
        function = _RehearsalFunction(usage)
        self._codelibrary = types.SimpleNamespace(get_cufunc=lambda: function)


class _RehearsalDispatcher:
    """``cuda.jit(signature, max_registers=cap)(fn)`` on the rehearsal device: launches run in the
    simulator (which ignores the cap), the compiled overload's attributes come from ptxas."""

    def __init__(self, fn, signature: str, cap: int | None):
        from numba import cuda as simulator

        from gpucourse.measure import ptxinfo

        # The module's own kernel object, so that ptxinfo compiles it in its module (with its globals).
        kernel = getattr(sys.modules.get(fn.__module__), fn.__name__, fn)
        if ptxinfo.python_function(kernel) is not fn:
            kernel = fn
        usage = ptxinfo.resource_usage(kernel, signature, DEVICE.compute_capability, cap, use_gpu=False)
        if not usage.known:
            raise RuntimeError(f"the rehearsal reads kernel attributes from ptxas, which could not say: {usage.reason}")
        self.overloads = {signature: _RehearsalKernel(usage)}
        self._launcher = simulator.jit(fn)

    def __getitem__(self, launch_config):
        return self._launcher[launch_config]


OCCUPANCY_CALCULATOR = "gpucourse.lessons.occupancy.calculator.occupancy"


class _RehearsalContext:
    """``cuda.current_context()``'s occupancy query, answered by gpucourse.occupancy for the rehearsal device."""

    @staticmethod
    def get_active_blocks_per_multiprocessor(function, threads_per_block: int, dynamic_shared_bytes: int) -> int:
        # The lessons' calculator, named as a string like the sweep plans (measure/ imports no lesson).
        occupancy = getattr(*_resolve(OCCUPANCY_CALCULATOR))
        usage = function.usage
        return occupancy(int(threads_per_block), usage.registers, usage.shared_bytes + int(dynamic_shared_bytes),
                         DEVICE.compute_capability).active_blocks


REHEARSAL_COPY_BYTES = 1 << 16
REHEARSAL_MATMUL_N = 64


def _ceiling(name: str, dtype: str = "float32") -> float:
    """A rehearsal 'ceiling': the course's own ceiling measurement (CuPy copy, torch matmul) on the
    stand-ins at a small size, never cached (the cache is for a GPU's real ceilings)."""
    from gpucourse.measure import ceilings

    if name == "copy_gbps":
        return ceilings.measure_copy_gbps(REHEARSAL_COPY_BYTES, min_total_ms=1.0)
    return ceilings.measure_matmul_tflops(dtype, REHEARSAL_MATMUL_N)


# --- small sizes for every sweep that can run on the simulator ----------------------------------------


_DRIVER_STAND_IN = ("the driver's kernel attributes come from ptxas (cc 9.0) and its occupancy query from the "
                    "course's calculator")
_TORCH_STAND_IN = "torch's CUDA device is CPU torch behind the same calls"

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
        attributes={"gpucourse.lessons.measuring.experiments.SPIN_BLOCKS": 2,
                    "gpucourse.lessons.measuring.experiments.SPIN_THREADS": 32},
        defaults={"gpucourse.lessons.measuring.experiments.async_pitfall": {"iterations": 4}},
        stand_in="the simulator's launches are synchronous: 'launch only' and 'with synchronize' time the same work"),
    "measuring.ceilings": SweepPlan(stand_in=(
        "the course's ceiling measurements at small sizes: CuPy's device-to-device memcpyAsync as a memmove "
        "between NumPy arrays, torch's fp32/bf16 matmul on CPU torch")),
    "reductions.sum": SweepPlan(
        # a part-filled block and two full ones: the simulator spends ~0.5 s per 256-thread block
        attributes={"gpucourse.lessons.reductions.experiments.SWEEP_SIZES": (200, 512)},
        # The shuffle rungs need warp intrinsics, which the plain simulator lacks (the lesson runs them in the
        # microscope's trace()): the rehearsal records the four shared-memory rungs and the libraries.
        defaults={"gpucourse.lessons.reductions.experiments.measure_reductions": {
            "variants": ("interleaved", "strided index", "sequential", "first add")}},
        stand_in="cupy.sum and CuPy's ReductionKernel (map 'x', reduce 'a + b') as NumPy sums; torch.sum on CPU torch"),
    "coalescing.stride": SweepPlan(defaults={
        "gpucourse.lessons.coalescing.sweep_elements": {"useful_bytes_per_side": 2048},
        "gpucourse.lessons.coalescing.stride_sweep": {"dtypes": ("float32",), "strides": (1, 8)}}),
    "coalescing.offset": SweepPlan(defaults={
        "gpucourse.lessons.coalescing.sweep_elements": {"useful_bytes_per_side": 2048},
        "gpucourse.lessons.coalescing.offset_sweep": {"dtypes": ("float32",), "offsets": (0, 1)}}),
    "coalescing.work": SweepPlan(defaults={  # each rung over 1,024 float32 (four 256-thread blocks at most)
        "gpucourse.lessons.coalescing.experiments.measure_rung": {"n_elements": 1024}}),
    "coalescing.layout": SweepPlan(defaults={
        "gpucourse.lessons.coalescing.layout_sweep": {"n_particles": 256, "matrix_side": 32}}),
    "divergence.sort_pays": SweepPlan(
        attributes={"gpucourse.lessons.divergence.experiments.SPARSE_DENSITIES": (1 / 4,)},
        defaults={"gpucourse.lessons.divergence.measure_sort_pays": {"bodies": (2,), "n_threads": 256,
                                                             "min_total_ms": 1.0}}),
    "occupancy.driver": SweepPlan(defaults={"gpucourse.lessons.occupancy.experiments.driver_comparison": {
        "names": ("copy", "block_sum"), "threads": (64, 256), "dynamic_bytes": (0, 12 * 1024), "caps": (None, 32)}},
        stand_in=_DRIVER_STAND_IN + "; the two columns agree by construction"),
    "occupancy.memory_resident": SweepPlan(
        attributes={"gpucourse.lessons.occupancy.experiments.COPY_ELEMENTS": 1024},
        defaults={"gpucourse.lessons.occupancy.experiments.measure_speed": {"targets": (0.25, 1.0)}},
        stand_in=_DRIVER_STAND_IN),
    "occupancy.memory_bound": SweepPlan(
        attributes={"gpucourse.lessons.occupancy.experiments.COPY_ELEMENTS": 1024},
        defaults={"gpucourse.lessons.occupancy.experiments.measure_speed": {"targets": (0.25, 1.0)}},
        stand_in=_DRIVER_STAND_IN),
    "occupancy.compute_unrolled": SweepPlan(
        attributes={"gpucourse.lessons.occupancy.experiments.FMA_THREADS": 512,
                    "gpucourse.lessons.occupancy.experiments.FMA_ITERATIONS": 32},
        defaults={"gpucourse.lessons.occupancy.experiments.measure_speed": {"targets": (0.25, 1.0)}},
        stand_in=_DRIVER_STAND_IN),
    "precision.matmul": SweepPlan(defaults={"gpucourse.lessons.precision.experiments.matmul_sweep": {"sizes": (64,)}},
                                  stand_in=_TORCH_STAND_IN + " (fp8: scaled_mm on the CPU)"),
    "precision.vocab_shape": SweepPlan(defaults={"gpucourse.lessons.precision.experiments.vocab_shape_sweep": {
        "dtypes": ("bf16",), "tokens": 16, "hidden": 16}}, stand_in=_TORCH_STAND_IN),
    "races.litmus_mp": SweepPlan(
        defaults={"gpucourse.lessons.races.experiments.run_litmus": {
            "rounds": 2, "spin_cap": 4, "stress_iters": 1, "threads": 32}},
        stand_in=("the simulator runs blocks one after another, so a consumer whose producer comes later gives up "
                  "at its spin cap: the counts test the harness's accounting, never the memory model")),
    "tiling.matmul": SweepPlan(
        attributes={"gpucourse.lessons.tiling.experiments._MEASURED": {}},
        defaults={"gpucourse.lessons.tiling.experiments.measure_matmul_ladder": {"sizes": (32,)}},
        stand_in=("cuBLAS is NumPy's matmul; its plain-fp32 compute-type switch is set on a stand-in and not used; "
                  "the CUDA C++ rung (a CuPy RawKernel) is left out: NumPy cannot compile CUDA C++")),
    "tiling.transpose": SweepPlan(attributes={"gpucourse.lessons.tiling.experiments.TRANSPOSE_SIZES": (64,),
                                              "gpucourse.lessons.tiling.experiments._MEASURED": {}}),
    "feeding.copy": SweepPlan(not_rehearsable="pageable vs pinned host memory: the simulator has no copy engine"),
    "feeding.overlap": SweepPlan(not_rehearsable="streams and events around copies: the simulator has no copy engines"),
    "feeding.launch": SweepPlan(not_rehearsable="torch CUDA graphs need CUDA"),
    "feeding.sync": SweepPlan(not_rehearsable="torch on device='cuda'"),
    "feeding.fusion": SweepPlan(defaults={"gpucourse.lessons.feeding.experiments.fusion_sweep": {"sizes": (256,)}}),
    "feeding.l2": SweepPlan(not_rehearsable="its working sets are sized by the device's L2 (tens of MB)"),
}


@contextlib.contextmanager
def rehearse() -> Iterator[None]:
    """GPU mode on the rehearsal device, for the duration of the block (tests, gpu-report)."""
    global _ACTIVE
    if not runtime.MODE == "sim":
        raise RuntimeError("a rehearsal stands in for a GPU on a machine without one; here is a real GPU")
    from numba import cuda as simulator

    from gpucourse.measure import ceilings, ptxinfo
    dispatchers = functools.cache(_RehearsalDispatcher)
    patches = [
        (runtime, "MODE", "gpu"), (runtime, "device", lambda: DEVICE),
        (runtime, "free_memory_bytes", lambda: DEVICE.memory_bytes),
        (runtime, "xp", np), (runtime, "cuda", simulator),
        (harness, "default_timer", RehearsalTimer), (harness, "_l2_flusher", _flusher),
        (simulator, "as_cuda_array", _device_view),
        (simulator, "current_context", _RehearsalContext), (ptxinfo, "_gpu_dispatcher", dispatchers),
        (ceilings, "copy_gbps", lambda refresh=False: _ceiling("copy_gbps")),
        (ceilings, "matmul_tflops", lambda dtype="float32", refresh=False: _ceiling("matmul_tflops", dtype)),
    ]
    stand_ins = _numpy_as_cupy()  # `import cupy` (and `import torch`, below) inside lesson code get these
    try:
        import torch
    except ImportError:  # an environment without torch: its sweeps fail with torch's own ImportError
        pass
    else:
        stand_ins["torch"] = _torch_on_cpu(torch)
    saved = {name: sys.modules.get(name) for name in stand_ins}
    with _patched(patches):
        _ACTIVE = True
        sys.modules.update(stand_ins)
        try:
            yield
        finally:
            _ACTIVE = False
            for name, module in saved.items():
                if module is None:
                    sys.modules.pop(name, None)
                else:
                    sys.modules[name] = module


@dataclass
class SweepOutcome:
    name: str
    status: str  # "recorded" or "not rehearsed"
    detail: str = ""
    rows: int = 0


def run_sweep(name: str):
    """One registered sweep at rehearsal sizes (inside ``rehearse()``): its data frame."""
    sweep = reference.load_all_sweeps()[name]
    plan = SWEEP_PLANS.get(name)
    if plan is None or plan.not_rehearsable:
        return None
    with patched(plan_patches(plan)):
        return sweep.run()


def caption(source: str) -> str:
    return f"{CAPTION} · {source}" if not source.startswith(CAPTION) else source
