"""Lesson 00a's runs: launch the first kernels, trace them with the microscope, compile them to PTX.

Everything here runs in both modes. A plain launch runs on the GPU, or in Numba's CUDA simulator
without one; ``microscope.trace`` always runs in the simulator and counts what each thread did.
The CuPy kernels need a GPU (CuPy compiles them for it); without one the lesson shows their CUDA
C++ compiled to PTX by NVRTC, which needs no GPU, beside Numba's PTX for the same SAXPY.
"""

from __future__ import annotations

import inspect
import re

import numpy as np
import pandas as pd
from numba import cuda  # after gpucourse.measure.runtime (imported by the package) chose the mode

from gpucourse import microscope, validate
from gpucourse.errors import InvalidConfig
from gpucourse.lessons.first_kernels import kernels, model
from gpucourse.measure import ptxinfo, runtime
from gpucourse.measure.harness import measure

SAXPY_SIGNATURE = "void(float32, float32[::1], float32[::1], float32[::1])"
A = np.float32(2.0)
TRACE_MAX_N = 2048  # the microscope traces at most 4096 threads: n plus one block's spare threads


def kernel_source(kernel) -> str:
    """The source of a @cuda.jit kernel, as the learner reads it (GPU or simulator dispatcher)."""
    return inspect.getsource(ptxinfo.python_function(kernel))


def inputs(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, n).astype(np.float32), rng.uniform(-1, 1, n).astype(np.float32)


def reference(x: np.ndarray, y: np.ndarray, a=A) -> np.ndarray:
    """SAXPY in float64: the specification every version is checked against."""
    return float(a) * x.astype(np.float64) + y.astype(np.float64)


def coordinates_table(blocks: int, threads_per_block: int, n: int | None = None) -> pd.DataFrame:
    """Launch ``who_am_i`` and return what every thread wrote: element, blockIdx.x, threadIdx.x, cuda.grid(1)."""
    blocks = validate.integer("blocks", blocks, minimum=1, maximum=64)
    threads = validate.integer("threads per block", threads_per_block, minimum=1, maximum=1024)
    n = blocks * threads if n is None else validate.integer("n", n, minimum=1, maximum=blocks * threads)
    block_of, thread_of, global_of = (np.full(n, -1, dtype=np.int32) for _ in range(3))
    kernels.who_am_i[blocks, threads](block_of, thread_of, global_of)
    return pd.DataFrame({"element": np.arange(n), "blockIdx.x": block_of, "threadIdx.x": thread_of,
                         "cuda.grid(1)": global_of})


def run_saxpy(n: int, threads_per_block: int = 128, kernel=None) -> dict:
    """One launch of SAXPY (guarded by default), checked against float64; a dict of the launch and result."""
    n = validate.integer("n", n, minimum=1, maximum=2**26)
    plan = model.launch_plan(n, threads_per_block)
    x, y = inputs(n)
    out = np.full(n, np.nan, dtype=np.float32)  # poisoned: an element nobody wrote stays NaN
    (kernel or kernels.saxpy)[plan["blocks"], threads_per_block](A, x, y, out)
    error = float(np.max(np.abs(out - reference(x, y))))
    return {**plan, "max_abs_error": error, "correct": bool(error < 1e-5)}


def trace_saxpy(n: int = 200, threads_per_block: int = 64, kernel=None) -> microscope.Report:
    """SAXPY under the microscope: which thread read and wrote which element, and how often."""
    n = validate.integer("n", n, minimum=1, maximum=TRACE_MAX_N)
    plan = model.launch_plan(n, threads_per_block)
    x, y = inputs(n)
    out = np.zeros(n, dtype=np.float32)
    return microscope.trace(kernel or kernels.saxpy, plan["blocks"], threads_per_block, A, x, y, out)


def out_of_bounds(n: int = 200, threads_per_block: int = 64) -> str:
    """Trace the unguarded SAXPY; return the microscope's report of the first access past the end."""
    try:
        trace_saxpy(n, threads_per_block, kernels.saxpy_unguarded)
    except IndexError as error:
        return str(error)
    return f"no access out of bounds: n = {n} is a multiple of {threads_per_block}, so no thread is past the end"


def trace_saxpy_2d(rows: int = 20, cols: int = 40, block_x: int = 16, block_y: int = 8) -> microscope.Report:
    """The 2-D SAXPY under the microscope, its result checked against float64."""
    plan = model.grid_2d(rows, cols, block_x, block_y)
    x, y = (v.reshape(rows, cols) for v in inputs(rows * cols))
    out = np.zeros_like(x)
    report = microscope.trace(kernels.saxpy_2d, plan["grid"], plan["block"], A, x, y, out)
    if not np.allclose(out, reference(x, y), atol=1e-5):
        raise AssertionError("saxpy_2d gave a wrong result")
    return report


def trace_grid_stride(n: int = 300, blocks: int = 2, threads_per_block: int = 32) -> microscope.Report:
    """The grid-stride SAXPY with a grid much smaller than n: each thread takes several elements."""
    n = validate.integer("n", n, minimum=1, maximum=TRACE_MAX_N)
    x, y = inputs(n)
    out = np.zeros(n, dtype=np.float32)
    report = microscope.trace(kernels.saxpy_grid_stride, blocks, threads_per_block, A, x, y, out)
    if not np.allclose(out, reference(x, y), atol=1e-5):
        raise AssertionError("the grid-stride SAXPY gave a wrong result")
    return report


# --- the same kernel three ways ---------------------------------------------------------------


def _cupy_kernels():
    import cupy

    elementwise = cupy.ElementwiseKernel(**kernels.SAXPY_ELEMENTWISE)
    raw = cupy.RawKernel(kernels.SAXPY_CUDA_SOURCE, "saxpy")
    return cupy, elementwise, raw


def three_ways(n: int = 1_000_000, threads_per_block: int = 256) -> pd.DataFrame:
    """SAXPY as Numba, CuPy ElementwiseKernel and CUDA C++ RawKernel on the same inputs, each checked
    against float64. Without a GPU only the Numba kernel runs (in the simulator, on a small n)."""
    n = validate.integer("n", n, minimum=1, maximum=2**28)
    if not runtime.is_gpu():
        n = min(n, 4096)
    x, y = inputs(n)
    expected = reference(x, y)
    blocks = model.blocks_for(n, threads_per_block)
    rows = []
    if runtime.is_gpu():
        cupy, elementwise, raw = _cupy_kernels()
        dx, dy = cupy.asarray(x), cupy.asarray(y)
        results = {}
        out = cupy.full(n, cupy.nan, dtype=cupy.float32)
        kernels.saxpy[blocks, threads_per_block](A, dx, dy, out)
        results["Numba @cuda.jit"] = out
        results["CuPy ElementwiseKernel"] = elementwise(A, dx, dy)
        out = cupy.full(n, cupy.nan, dtype=cupy.float32)
        raw((blocks,), (threads_per_block,), (A, dx, dy, out, np.int32(n)))
        results["CUDA C++ RawKernel"] = out
        for way, result in results.items():
            error = float(np.max(np.abs(cupy.asnumpy(result) - expected)))
            rows.append({"way": way, "ran on": runtime.device().name, "n": n, "max_abs_error": error,
                         "correct": error < 1e-5})
        return pd.DataFrame(rows)
    out = np.full(n, np.nan, dtype=np.float32)
    kernels.saxpy[blocks, threads_per_block](A, x, y, out)
    error = float(np.max(np.abs(out - expected)))
    rows.append({"way": "Numba @cuda.jit", "ran on": "Numba's CUDA simulator", "n": n, "max_abs_error": error,
                 "correct": error < 1e-5})
    for way in ("CuPy ElementwiseKernel", "CUDA C++ RawKernel"):
        rows.append({"way": way, "ran on": "not run: CuPy needs a GPU (its CUDA C++ and PTX are shown below)",
                     "n": n, "max_abs_error": float("nan"), "correct": None})
    return pd.DataFrame(rows)


def nvrtc_ptx(source: str = kernels.SAXPY_CUDA_SOURCE, cc=(9, 0)) -> str:
    """CUDA C++ compiled to PTX by NVRTC (the compiler CuPy's RawKernel uses); needs no GPU."""
    try:
        from cuda.bindings import nvrtc
    except ImportError as error:
        raise InvalidConfig(f"NVRTC is not installed here (cuda-bindings): {error}") from None
    major, minor = validate.integer("cc major", cc[0], minimum=5, maximum=12), int(cc[1])

    def ok(result):
        status, *rest = result
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise InvalidConfig(f"NVRTC failed: {status.name}")
        return rest[0] if len(rest) == 1 else rest

    program = ok(nvrtc.nvrtcCreateProgram(source.encode(), b"saxpy.cu", 0, [], []))
    try:
        options = [f"--gpu-architecture=compute_{major}{minor}".encode()]
        status, = nvrtc.nvrtcCompileProgram(program, len(options), options)
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            size = ok(nvrtc.nvrtcGetProgramLogSize(program))
            log = b" " * size
            nvrtc.nvrtcGetProgramLog(program, log)
            raise InvalidConfig(f"NVRTC could not compile the source: {log.decode(errors='replace').strip()}")
        size = ok(nvrtc.nvrtcGetPTXSize(program))
        buffer = b" " * size
        ok((*nvrtc.nvrtcGetPTX(program, buffer), None))
        return buffer.rstrip(b"\x00 ").decode()
    finally:
        nvrtc.nvrtcDestroyProgram(program)


def numba_ptx(cc=(9, 0)) -> str:
    """The Numba SAXPY's PTX, compiled by numba-cuda's real CUDA target in a child process (no GPU needed)."""
    result = ptxinfo.compile_ptx([(kernels.saxpy, SAXPY_SIGNATURE)], cc=tuple(cc))[0]
    if "ptx" not in result:
        raise InvalidConfig(f"Numba could not compile SAXPY to PTX here: {result.get('error')}")
    return result["ptx"]


def ptx_body(ptx: str) -> str:
    """The kernel's instructions only: the entry's body without the header, declarations and blank lines."""
    start = ptx.find(".entry")
    body = ptx[ptx.find("{", start) + 1: ptx.rfind("}")] if start >= 0 else ptx
    keep = [line.rstrip() for line in body.splitlines()
            if line.strip() and not line.strip().startswith((".reg", "//", ".loc", ".file", "$L__tmp", "$L__func"))]
    text = "\n".join(keep)
    return re.sub(r"\b_Z\w+?_param_(\d+)\b", r"param_\1", text)  # Numba's mangled names, shortened


def ptx_instruction_counts(ptx: str) -> dict[str, int]:
    """How many global loads, global stores and fused multiply-adds the PTX has."""
    body = ptx_body(ptx)
    return {"ld.global": len(re.findall(r"\bld\.global", body)), "st.global": len(re.findall(r"\bst\.global", body)),
            "fma": len(re.findall(r"\bfma\.", body))}


def ptx_counts_side_by_side(cc=(9, 0)) -> dict[str, dict[str, int] | str]:
    """The counts of ``ptx_instruction_counts`` for the CUDA C++ (NVRTC) and the Numba SAXPY; where a compiler
    is missing (no CUDA packages on macOS or Windows), one line that says so instead of an error."""
    counts: dict[str, dict[str, int] | str] = {}
    for name, compile_ptx, missing in (("CUDA C++ (NVRTC)", nvrtc_ptx, "NVRTC"), ("Numba", numba_ptx, "numba-cuda")):
        try:
            counts[name] = ptx_instruction_counts(compile_ptx(cc=cc))
        except Exception as error:  # noqa: BLE001 - told to the learner instead of a traceback
            counts[name] = f"{missing} cannot compile here ({error}); the counts need the CUDA packages"
    return counts


# --- host and device arrays --------------------------------------------------------------------


def transfer_timings(n: int = 1 << 22, launches: int = 20) -> pd.DataFrame:
    """On a GPU: ``launches`` SAXPYs with NumPy arguments (copied in and out every launch) against the same
    with device arrays. Both timed loops include every copy they make: the device-array loop copies x and y
    in, allocates out on the device, launches, and copies out back, so the two rows compare like with like.
    Without a GPU: the copy counts of the model only, no times."""
    plan = model.launch_plan(n, 256)
    counted = pd.concat([model.transfers(launches, 2, 1, device_resident=False),
                         model.transfers(launches, 2, 1, device_resident=True)], ignore_index=True)
    if not runtime.is_gpu():
        counted["median_ms"] = float("nan")
        counted["source"] = "model (no GPU: copy counts only, nothing timed)"
        return counted
    x, y = inputs(n)
    out = np.zeros(n, dtype=np.float32)
    grid = plan["blocks"]

    def with_numpy():
        for _ in range(launches):
            kernels.saxpy[grid, 256](A, x, y, out)

    def with_device_arrays():
        dx, dy, dout = cuda.to_device(x), cuda.to_device(y), cuda.device_array(n, dtype=np.float32)
        for _ in range(launches):
            kernels.saxpy[grid, 256](A, dx, dy, dout)
        dout.copy_to_host(out)

    times = [measure(with_numpy, label="NumPy arguments", min_samples=5).median_ms,
             measure(with_device_arrays, label="device arrays", min_samples=5).median_ms]
    counted["median_ms"] = times
    counted["source"] = f"measured now on {runtime.device().name}, every copy of the loop inside the timing"
    return counted
