"""``trace()``: run one launch of a kernel in the simulator, under the microscope; ``profile()``: the same launch
in Nsight Compute's words (nsight.py's ``Profile``)."""

from __future__ import annotations

import contextlib
import gc
import inspect
import numbers

import numpy as np

from gpucourse.microscope.errors import KernelArgumentError, MicroscopeError, TraceTooLarge
from gpucourse.microscope.limits import DEFAULT_CC, check_shared_memory, validate_launch
from gpucourse.microscope.nsight import Profile
from gpucourse.microscope.report import Report
from gpucourse.microscope.scheduler import SCHEDULES, make_grid

# Beyond this many threads a trace takes too long to be interactive (tens of seconds for a small
# kernel, more with barriers or the race schedules); trace a smaller grid: the counts per warp
# request do not depend on the grid size.
MAX_THREADS = 4096
# A guard against kernels that loop for a very long time (tens of seconds of tracing).
MAX_LINES = 3_000_000


def _kernel_function(kernel):
    """The Python function behind a @cuda.jit kernel, in simulator or GPU mode."""
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    if isinstance(kernel, FakeCUDAKernel):
        if kernel._device:
            raise KernelArgumentError(f"{kernel.__name__} is a device function; trace() runs kernels (@cuda.jit)")
        return kernel.fn
    py_func = getattr(kernel, "py_func", None)
    if py_func is not None and hasattr(kernel, "targetoptions") and type(kernel).__name__ == "CUDADispatcher":
        if kernel.targetoptions.get("device"):
            raise KernelArgumentError(f"{py_func.__name__} is a device function; trace() runs kernels (@cuda.jit)")
        return py_func
    if hasattr(kernel, "dispatcher") and hasattr(kernel, "griddim"):
        raise KernelArgumentError(
            "pass the kernel itself and the launch separately: trace(kernel, griddim, blockdim, *args), not "
            "trace(kernel[griddim, blockdim], ...)"
        )
    name = getattr(kernel, "__name__", type(kernel).__name__)
    if callable(kernel):
        raise KernelArgumentError(f"{name} is not a CUDA kernel: decorate it with @cuda.jit (from numba import cuda)")
    raise KernelArgumentError(f"trace() needs a @cuda.jit kernel as its first argument; got {name}")


def _bind(fn, args) -> list[str]:
    params = list(inspect.signature(fn).parameters.values())
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.KEYWORD_ONLY) for p in params):
        raise KernelArgumentError(f"kernel {fn.__name__} must take plain positional arguments (no *args or keywords)")
    if len(args) != len(params):
        names = ", ".join(p.name for p in params)
        raise KernelArgumentError(
            f"kernel {fn.__name__} takes {len(params)} argument(s) ({names}); trace() was given {len(args)} after "
            "griddim and blockdim"
        )
    return [p.name for p in params]


def _host_array(name: str, value, writebacks: list):
    """A NumPy array for an array argument (device arrays are copied and written back), else None."""
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray, FakeWithinKernelCUDAArray

    if isinstance(value, FakeWithinKernelCUDAArray):
        value = value._item
    if isinstance(value, FakeCUDAArray):
        return value._ary
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "__cuda_array_interface__"):  # a real GPU array (GPU mode): trace a host copy
        if hasattr(value, "copy_to_host") and hasattr(value, "copy_to_device"):
            host = value.copy_to_host()
            writebacks.append(lambda: value.copy_to_device(host))
            return host
        if hasattr(value, "get") and hasattr(value, "set"):  # CuPy
            host = value.get()
            writebacks.append(lambda: value.set(host))
            return host
        raise KernelArgumentError(f"argument {name}: copy this GPU array to a NumPy array first (e.g. .cpu().numpy())")
    return None


def _check_scalar(name: str, value):
    if isinstance(value, (numbers.Number, np.generic)):
        return value
    if isinstance(value, tuple) and all(isinstance(v, (numbers.Number, np.generic)) for v in value):
        return value
    if isinstance(value, list):
        raise KernelArgumentError(
            f"argument {name} is a list; pass a NumPy array (np.asarray({name})) or a device array instead"
        )
    raise KernelArgumentError(
        f"argument {name} is a {type(value).__name__}; a kernel takes NumPy arrays, device arrays (cuda.to_device) "
        "and numbers"
    )


def _prepare_args(names, args):
    """Host arrays for the arguments now (so misuse fails before running), TracedArrays later."""
    writebacks, prepared = [], []
    for name, value in zip(names, args, strict=True):
        host = _host_array(name, value, writebacks)
        if host is None:
            prepared.append((name, None, _check_scalar(name, value)))
            continue
        if host.dtype.hasobject:
            raise KernelArgumentError(f"argument {name} has dtype object; kernels take numeric arrays")
        if host.ndim == 0:
            prepared.append((name, None, host[()]))
            continue
        prepared.append((name, host, None))

    def build(tracer):
        return tuple(
            tracer.space.global_array(host, tracer, name) if host is not None else scalar
            for name, host, scalar in prepared
        )

    return build, writebacks


@contextlib.contextmanager
def _simulated_device_functions(fn):
    """GPU mode: calls to real @cuda.jit(device=True) functions go to the simulator while tracing."""
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    swapped, seen, todo = [], set(), [fn]
    while todo:
        f = todo.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        for name, value in list(f.__globals__.items()):
            if type(value).__name__ == "CUDADispatcher" and getattr(value, "targetoptions", {}).get("device"):
                swapped.append((f.__globals__, name, value))
                f.__globals__[name] = FakeCUDAKernel(value.py_func, device=True)
                todo.append(value.py_func)
            elif isinstance(value, FakeCUDAKernel) and value._device:
                todo.append(value.fn)
    try:
        yield
    finally:
        for globs, name, value in reversed(swapped):
            globs[name] = value


def trace(
    kernel,
    griddim,
    blockdim,
    *args,
    schedule=None,
    seed=0,
    cc=DEFAULT_CC,
    dynamic_shared_bytes=0,
    shared_opt_in=False,
    memory=None,
    max_threads=MAX_THREADS,
    max_lines=MAX_LINES,
    resident_blocks=None,
) -> Report:
    """Run ``kernel[griddim, blockdim](*args)`` in the simulator and report what the hardware would do.

    Arguments are those of a normal launch (NumPy arrays, simulator/GPU device arrays, numbers);
    results are written back to them. Options:

    * ``schedule``: ``None``/``"sequential"`` (threads one after another, fast), or a race
      scheduler that interleaves threads at every memory access: ``"round-robin"`` or ``"random"``
      (with ``seed``). The same launch and seed always give the same report.
    * ``cc``: compute capability whose limits are checked, default ``(9, 0)``.
    * ``dynamic_shared_bytes``: dynamic shared memory per block (the launch's 4th parameter);
      ``shared_opt_in=True`` models the opt-in above 48 KiB.
    * ``memory``: a ``MemorySystem`` that sees every access and decides what loads read.
    * ``max_threads`` (default 4096) and ``max_lines``: size guards, checked before / while running.
    * ``resident_blocks`` (race schedules): how many blocks run at once, default all; the others
      start, in index order, as resident blocks end (a block that waits for one not yet started waits forever).
    """
    fn = _kernel_function(kernel)
    schedule = "sequential" if schedule is None else schedule
    if schedule not in SCHEDULES:
        raise MicroscopeError(f"schedule must be None, 'sequential', 'round-robin' or 'random'; got {schedule!r}")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise MicroscopeError(f"seed must be an integer; got {seed!r}")
    grid, block = validate_launch(griddim, blockdim, cc)
    if (
        isinstance(dynamic_shared_bytes, bool)
        or not isinstance(dynamic_shared_bytes, numbers.Integral)
        or dynamic_shared_bytes < 0
    ):
        raise MicroscopeError(f"dynamic_shared_bytes must be an integer ≥ 0; got {dynamic_shared_bytes!r}")
    if resident_blocks is not None and (
        isinstance(resident_blocks, bool) or not isinstance(resident_blocks, numbers.Integral) or resident_blocks < 1
    ):
        raise MicroscopeError(f"resident_blocks must be None or an integer ≥ 1; got {resident_blocks!r}")
    threads = grid[0] * grid[1] * grid[2] * block[0] * block[1] * block[2]
    if threads > max_threads:
        raise TraceTooLarge(
            f"this launch has {threads:,} threads; the microscope traces at most {max_threads:,} (e.g. 16 blocks of "
            "256): trace a smaller grid, since the counts per warp do not depend on the grid size"
        )
    check_shared_memory(0, int(dynamic_shared_bytes), cc, shared_opt_in)
    names = _bind(fn, args)
    build_args, writebacks = _prepare_args(names, args)

    from numba.cuda.simulator import kernel as simulator_kernel
    from numba.cuda.simulator.kernelapi import swapped_cuda_module

    from gpucourse.microscope.fakecuda import TracedCUDAModule
    from gpucourse.microscope.tracer import Tracer

    if simulator_kernel._get_kernel_context() is not None:
        raise MicroscopeError("trace() cannot run inside another simulated kernel")
    tracer = Tracer(
        fn,
        build_args,
        make_grid(grid, block),
        schedule=schedule,
        seed=int(seed),
        memory=memory,
        arch_cc=tuple(cc),
        dynamic_shared_bytes=int(dynamic_shared_bytes),
        shared_opt_in=shared_opt_in,
        max_lines=max_lines,
        resident_blocks=resident_blocks,
    )
    module = TracedCUDAModule(tracer, grid, block)
    with (
        _no_cyclic_gc(),
        simulator_kernel._push_kernel_context(module),
        swapped_cuda_module(fn, module),
        _simulated_device_functions(fn),
    ):
        tracer.run()
        report = Report(
            tracer,
            kernel_name=fn.__name__,
            grid_dim=grid,
            block_dim=block,
            schedule=schedule,
            seed=seed,
            cc=cc,
        )
    for writeback in writebacks:
        writeback()
    return report


def profile(kernel, griddim, blockdim, *args, registers_per_thread=None, shared_config_bytes=None,
            **trace_options) -> Profile:
    """Trace ``kernel[griddim, blockdim](*args)`` (``trace()``'s options apply) and report it in ncu's words.

    ``registers_per_thread``: ptxas's count, for the occupancy rows (None: the register limit is left out).
    ``shared_config_bytes``: the SM's shared-memory size the driver chose (ncu's launch__shared_mem_config_size;
    None: the largest carve-out)."""
    report = trace(kernel, griddim, blockdim, *args, **trace_options)
    return Profile(report, registers_per_thread=registers_per_thread, shared_config_bytes=shared_config_bytes)


@contextlib.contextmanager
def _no_cyclic_gc():
    # A trace allocates millions of small tuples and dicts that all stay alive until it ends; the
    # cyclic collector would rescan them again and again (a third of the run time) for nothing.
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
