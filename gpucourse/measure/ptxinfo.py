"""What a kernel really uses: registers, shared memory and spills, with or without a GPU.

    usage = resource_usage(kernel, "void(float32[::1], float32[::1])")
    usage.registers, usage.shared_bytes, usage.spill_store_bytes, usage.source

* On a GPU: numba-cuda compiles the kernel for the device and the driver reports its
  attributes (``regs_per_thread``, ``shared_mem_per_block``, ``local_mem_per_thread``).
* Without one: numba-cuda's ``compile_ptx`` (which needs the real CUDA target, so it runs in a
  child process without ``NUMBA_ENABLE_CUDASIM``) writes the PTX, and the ``ptxas`` of the
  ``cuda-toolkit[nvcc]`` wheel assembles it with ``-v`` and reports registers, shared memory
  and spills. ``max_registers`` never shows in the PTX (numba-cuda applies it when it links a
  cubin), so a register cap is shown with ``ptxas --maxrregcount=N``.
* Neither available: every number is ``None`` and ``reason`` says why; the lesson then asks
  the learner to type a number.

PTX and ptxas results are cached in ``~/.cache/gpucourse/ptxinfo/`` (``GPUCOURSE_CACHE``
moves it): the first compile of a set of kernels takes a few seconds, later ones nothing.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from gpucourse.errors import InvalidConfig
from gpucourse.measure import runtime
from gpucourse.measure.compat import CHILD_PRELUDE

CACHE_DIR = Path(os.environ.get("GPUCOURSE_CACHE", Path.home() / ".cache" / "gpucourse")) / "ptxinfo"
PTXAS_ENV = "GPUCOURSE_PTXAS"  # a path to use instead of the wheel's ptxas ("" or "none": no ptxas)
COMPILE_TIMEOUT_S = 180.0
PTXAS_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class ResourceUsage:
    """One kernel's resources for one signature, compute capability and register cap."""

    kernel: str
    signature: str
    cc: tuple[int, int]
    max_registers: int | None
    registers: int | None = None
    shared_bytes: int | None = None  # static shared memory per block
    stack_frame_bytes: int | None = None  # local memory per thread
    spill_store_bytes: int | None = None
    spill_load_bytes: int | None = None
    barriers: int | None = None
    source: str = "unknown"  # where the numbers came from
    reason: str = ""  # why they are unknown
    note: str = ""  # e.g. ptxas raising a register cap to its lower bound
    seconds: float = 0.0  # time this answer took (0 when it came from the cache)
    cached: bool = False

    @property
    def known(self) -> bool:
        return self.registers is not None

    @property
    def spills(self) -> bool:
        return bool(self.spill_store_bytes or self.spill_load_bytes)

    def summary(self) -> str:
        cap = f" (max_registers={self.max_registers})" if self.max_registers else ""
        if not self.known:
            return f"{self.kernel}{cap}: unknown — {self.reason}"
        text = (f"{self.kernel}{cap}: {self.registers} registers/thread, "
                f"{self.shared_bytes or 0:,} B static shared")
        if self.spill_store_bytes is not None:
            text += f", spills {self.spill_store_bytes} B stored / {self.spill_load_bytes} B loaded"
        elif self.stack_frame_bytes:
            text += f", {self.stack_frame_bytes} B local memory per thread"
        return f"{text} ({self.source})"

    __str__ = summary

    def as_row(self) -> dict:
        row = asdict(self)
        row["cc"] = f"{self.cc[0]}.{self.cc[1]}"
        return row


# --- finding ptxas ---------------------------------------------------------------------------

def _wheel_ptxas_candidates() -> list[Path]:
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    roots = {Path(sysconfig.get_paths()["purelib"]), Path(sys.prefix) / "lib" / version / "site-packages"}
    # CUDA 13 wheels install under nvidia/cu13; CUDA 12's nvidia-cuda-nvcc-cu12 under nvidia/cuda_nvcc.
    return [root / "nvidia" / folder / "bin" / "ptxas" for root in sorted(roots)
            for folder in ("cu13", "cu12", "cuda_nvcc")]


def find_ptxas() -> Path | None:
    """The ptxas to use: $GPUCOURSE_PTXAS, else the CUDA toolkit wheel's, else one on PATH."""
    override = os.environ.get(PTXAS_ENV)
    if override is not None:
        if override.strip().lower() in ("", "none"):
            return None
        path = Path(override)
        return path if path.is_file() and os.access(path, os.X_OK) else None
    for path in _wheel_ptxas_candidates():
        if path.is_file() and os.access(path, os.X_OK):
            return path
    found = shutil.which("ptxas")
    return Path(found) if found else None


@functools.cache
def _ptxas_version(path: str) -> str:
    try:
        text = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown version"
    match = re.search(r"release ([\d.]+)", text)
    return match.group(1) if match else "unknown version"


def ptxas_version() -> str | None:
    path = find_ptxas()
    return _ptxas_version(str(path)) if path else None


# --- parsing ptxas -v ------------------------------------------------------------------------

_PATTERNS = {
    "registers": r"Used (\d+) registers",
    "barriers": r"used (\d+) barriers",
    "shared_bytes": r"(\d+) bytes smem",
    "stack_frame_bytes": r"(\d+) bytes stack frame",
    "spill_store_bytes": r"(\d+) bytes spill stores",
    "spill_load_bytes": r"(\d+) bytes spill loads",
}


def parse_ptxas(text: str) -> dict:
    """Registers, shared memory, stack and spills of the first entry function in ``ptxas -v`` output."""
    start = text.find("Compiling entry function")
    if start < 0:
        raise ValueError("ptxas printed no entry function")
    following = text.find("Compiling entry function", start + 1)
    section = text[start:following if following > 0 else len(text)]
    out = {}
    for name, pattern in _PATTERNS.items():
        match = re.search(pattern, section)
        out[name] = int(match.group(1)) if match else (None if name == "registers" else 0)
    if out["registers"] is None:
        raise ValueError("ptxas did not report a register count")
    note = re.search(r"adjusting per thread register count of (\d+) to lower bound of (\d+)", text)
    out["note"] = (
        f"ptxas raised max_registers={note.group(1)} to {note.group(2)}, the lowest it allows for this target"
        if note else ""
    )
    return out


# --- the cache -------------------------------------------------------------------------------

def _digest(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]


def _cache_get(kind: str, key: str):
    path = CACHE_DIR / kind / f"{key}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _cache_put(kind: str, key: str, value) -> None:
    try:
        folder = CACHE_DIR / kind
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{key}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(value))
        tmp.replace(folder / f"{key}.json")
    except OSError:
        pass  # a cache that cannot be written only costs time


# --- compiling to PTX in a child process -----------------------------------------------------

def python_function(kernel):
    """The plain Python function behind a @cuda.jit kernel (real dispatcher or simulator)."""
    for attribute in ("py_func", "fn"):
        fn = getattr(kernel, attribute, None)
        if callable(fn):
            return fn
    if inspect.isfunction(kernel):
        return kernel
    raise InvalidConfig(f"expected a @cuda.jit kernel or a Python function, got {type(kernel).__name__}")


def _job_for(kernel, signature: str) -> dict:
    fn = python_function(kernel)
    module = getattr(fn, "__module__", "__main__") or "__main__"
    name = fn.__name__
    job = {"name": name, "signature": signature}
    source_file = inspect.getsourcefile(fn) if module != "__main__" else None
    importable = (
        module != "__main__" and source_file and Path(source_file).exists()
        and getattr(sys.modules.get(module), name, None) is kernel
    )
    if importable:
        job["module"] = module
        job["fingerprint"] = hashlib.sha256(Path(source_file).read_bytes()).hexdigest()
    else:
        try:
            source = textwrap.dedent(inspect.getsource(fn))
        except (OSError, TypeError) as exc:
            raise InvalidConfig(f"cannot read the source of {name} to compile it: {exc}") from exc
        job["source"] = source
        job["fingerprint"] = hashlib.sha256(source.encode()).hexdigest()
    return job


# The child: the real CUDA target (never the simulator), then the kernel's module. Importing
# gpucourse there must not switch numba to the simulator, so the child tells gpucourse it is in
# simulator mode (which needs no GPU) after numba.cuda is already loaded for real.
_CHILD = r"""
import json, os, sys, time, math, ast
started = time.perf_counter()
request = json.loads(sys.stdin.read())
results = []
try:
    os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
    import numpy as np
    import numba
    from numba import cuda
    compile_ptx = cuda.compile_ptx
    imported = time.perf_counter() - started
except Exception as exc:
    why = f"numba-cuda cannot compile here ({type(exc).__name__}: {exc})"
    print("@@RESULT@@" + json.dumps({"fatal": why}))
    sys.exit(0)

def python_function(obj):
    for attribute in ("py_func", "fn"):
        fn = getattr(obj, attribute, None)
        if callable(fn):
            return fn
    return obj

for job in request["jobs"]:
    t0 = time.perf_counter()
    try:
        if "module" in job:
            os.environ["GPUCOURSE_MODE"] = "sim"
            os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # numba.cuda is already the real one
            import importlib
            module = importlib.import_module(job["module"])
            os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
            fn = python_function(getattr(module, job["name"]))
        else:
            tree = ast.parse(job["source"])
            for node in tree.body:
                if isinstance(node, ast.FunctionDef):
                    node.decorator_list = []
            namespace = {"cuda": cuda, "numba": numba, "np": np, "numpy": np, "math": math}
            for type_name in ("float16", "float32", "float64", "int32", "int64", "uint32"):
                if hasattr(numba, type_name):
                    namespace[type_name] = getattr(numba, type_name)
            exec(compile(tree, "<kernel>", "exec"), namespace)
            fn = namespace[job["name"]]
        ptx, _ = compile_ptx(fn, job["signature"], cc=tuple(request["cc"]))
        results.append({"ptx": ptx, "seconds": time.perf_counter() - t0})
    except Exception as exc:
        results.append({"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]})
print("@@RESULT@@" + json.dumps({"results": results, "import_seconds": imported}))
"""
_CHILD = CHILD_PRELUDE + _CHILD  # numba-cuda 0.30 on NumPy 2.5 (measure/compat.py)


def _run_child(jobs: list[dict], cc: tuple[int, int]) -> tuple[list[dict], float]:
    env = dict(os.environ)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    env["GPUCOURSE_MODE"] = "sim"
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD], input=json.dumps({"jobs": jobs, "cc": list(cc)}),
            capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, env=env,
        )
    except subprocess.TimeoutExpired:
        return [{"error": f"compiling to PTX took longer than {COMPILE_TIMEOUT_S:.0f} s"}] * len(jobs), 0.0
    elapsed = time.perf_counter() - started
    line = next((x for x in done.stdout.splitlines() if x.startswith("@@RESULT@@")), None)
    if line is None:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
        return [{"error": f"the PTX compiler process failed ({tail})"}] * len(jobs), elapsed
    answer = json.loads(line.removeprefix("@@RESULT@@"))
    if "fatal" in answer:
        return [{"error": answer["fatal"]}] * len(jobs), elapsed
    return answer["results"], elapsed


def _compiler_versions() -> str:
    """The compiler behind the PTX: numba-cuda and the libNVVM wheel (a PTX cached from another NVVM
    can carry a PTX version this machine's ptxas cannot read)."""
    from importlib import metadata

    versions = []
    for package in ("numba-cuda", "nvidia-nvvm", "nvidia-cuda-nvcc-cu12", "cuda-toolkit"):
        try:
            versions.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            pass
    return ", ".join(versions) or "unknown"


def compile_ptx(kernels: list[tuple[object, str]], cc=(9, 0)) -> list[dict]:
    """PTX for each (kernel, signature): [{"ptx": ..., "seconds": ..., "cached": bool} or {"error": ...}].

    All kernels missing from the cache are compiled in one child process (≈ 1–2 s to start).
    """
    cc = tuple(cc)
    jobs = [_job_for(kernel, signature) for kernel, signature in kernels]
    keys = [_digest("ptx", job["fingerprint"], job["name"], job["signature"], cc, _compiler_versions())
            for job in jobs]
    out: list[dict | None] = []
    for key in keys:
        hit = _cache_get("ptx", key)
        out.append(dict(hit, cached=True, seconds=0.0) if hit else None)
    missing = [i for i, hit in enumerate(out) if hit is None]
    if missing:
        child_jobs = [{k: v for k, v in jobs[i].items() if k != "fingerprint"} for i in missing]
        results, elapsed = _run_child(child_jobs, cc)
        for i, result in zip(missing, results, strict=True):
            if "ptx" in result:
                _cache_put("ptx", keys[i], {"ptx": result["ptx"]})
            # The child's start-up (importing numba) is shared: charge it to each compile evenly.
            out[i] = dict(result, cached=False, seconds=elapsed / len(missing))
    return out  # type: ignore[return-value]


# --- ptxas -----------------------------------------------------------------------------------

def ptxas(ptx: str, cc=(9, 0), max_registers: int | None = None) -> dict:
    """Run ``ptxas -arch=sm_XY -v [--maxrregcount=N]`` on PTX text; the parsed report (cached)."""
    path = find_ptxas()
    if path is None:
        raise FileNotFoundError("ptxas was not found (install cuda-toolkit[nvcc] or set GPUCOURSE_PTXAS)")
    cc = tuple(cc)
    arch = f"sm_{cc[0]}{cc[1]}"
    version = _ptxas_version(str(path))
    key = _digest("ptxas", hashlib.sha256(ptx.encode()).hexdigest(), arch, max_registers, str(path), version)
    hit = _cache_get("ptxas", key)
    if hit:
        return dict(hit, cached=True, seconds=0.0)
    with tempfile.TemporaryDirectory(prefix="gpucourse-ptxas-") as tmp:
        source = Path(tmp) / "kernel.ptx"
        source.write_text(ptx)
        command = [str(path), f"-arch={arch}", "-v", str(source), "-o", str(Path(tmp) / "kernel.cubin")]
        if max_registers:
            command.insert(3, f"--maxrregcount={int(max_registers)}")
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, timeout=PTXAS_TIMEOUT_S)
        elapsed = time.perf_counter() - started
    if done.returncode != 0:
        message = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise RuntimeError(f"ptxas {version} failed: {message[:300]}")
    report = parse_ptxas(done.stdout + done.stderr)
    cap_flag = f" --maxrregcount={max_registers}" if max_registers else ""
    report["tool"] = f"ptxas {version} -arch={arch}{cap_flag}"
    _cache_put("ptxas", key, report)
    return dict(report, cached=False, seconds=elapsed)


# --- the public entry point ------------------------------------------------------------------

def _check_cap(max_registers) -> int | None:
    if max_registers in (None, 0):
        return None
    if isinstance(max_registers, bool) or not isinstance(max_registers, int) or not 1 <= max_registers <= 255:
        raise InvalidConfig(f"max_registers must be None or an integer from 1 to 255, got {max_registers!r}")
    return max_registers


def _name(kernel) -> str:
    return getattr(python_function(kernel), "__name__", str(kernel))


def resource_usage_all(kernels: list[tuple[object, str]], cc=None, max_registers: int | None = None,
                       *, use_gpu: bool | None = None) -> list[ResourceUsage]:
    """Resource usage of several (kernel, signature) pairs at once (one compile process)."""
    cap = _check_cap(max_registers)
    on_gpu = runtime.is_gpu() if use_gpu is None else use_gpu
    if on_gpu:
        return [_gpu_usage(kernel, signature, cap) for kernel, signature in kernels]
    cc = tuple(cc) if cc else runtime.device().compute_capability
    names = [_name(k) for k, _ in kernels]

    def unknown(i: int, reason: str, seconds: float = 0.0) -> ResourceUsage:
        return ResourceUsage(names[i], kernels[i][1], cc, cap, reason=reason, seconds=seconds)

    if find_ptxas() is None:
        why = ("ptxas was not found (it comes with the cuda-toolkit[nvcc] wheel); "
               "type the kernel's register count instead")
        return [unknown(i, why) for i in range(len(kernels))]
    compiled = compile_ptx(kernels, cc)
    out = []
    for i, result in enumerate(compiled):
        if "error" in result:
            out.append(unknown(i, f"could not compile to PTX: {result['error']}", result.get("seconds", 0.0)))
            continue
        try:
            report = ptxas(result["ptx"], cc, cap)
        except (OSError, RuntimeError, ValueError, subprocess.SubprocessError) as exc:
            out.append(unknown(i, str(exc), result.get("seconds", 0.0)))
            continue
        out.append(ResourceUsage(
            names[i], kernels[i][1], cc, cap,
            registers=report["registers"], shared_bytes=report["shared_bytes"],
            stack_frame_bytes=report["stack_frame_bytes"], spill_store_bytes=report["spill_store_bytes"],
            spill_load_bytes=report["spill_load_bytes"], barriers=report["barriers"],
            source=f"{report['tool']} on numba-cuda's PTX (no GPU needed)", note=report["note"],
            seconds=result.get("seconds", 0.0) + report["seconds"],
            cached=bool(result.get("cached")) and bool(report.get("cached")),
        ))
    return out


def resource_usage(kernel, signature: str, cc=None, max_registers: int | None = None,
                   *, use_gpu: bool | None = None) -> ResourceUsage:
    """Registers, static shared memory and spills of ``kernel`` compiled for ``signature``.

    On a GPU (default when there is one) numba-cuda compiles it for the device; otherwise PTX
    for ``cc`` (default: the simulator's modelled cc 9.0) goes through ptxas. ``max_registers``
    caps registers per thread, as ``cuda.jit(max_registers=N)`` does.
    """
    return resource_usage_all([(kernel, signature)], cc, max_registers, use_gpu=use_gpu)[0]


@functools.cache
def _gpu_dispatcher(fn, signature: str, cap: int | None):
    from numba import cuda

    return cuda.jit(signature, max_registers=cap)(fn)


def gpu_kernel(kernel, signature: str, max_registers: int | None = None):
    """The compiled numba-cuda kernel object (one overload) for ``signature`` and a register cap."""
    dispatcher = _gpu_dispatcher(python_function(kernel), signature, _check_cap(max_registers))
    return dispatcher, next(iter(dispatcher.overloads.values()))


def _gpu_spills(compiled, cc: tuple[int, int], cap: int | None) -> tuple[dict | None, str]:
    """ptxas's report on the PTX numba-cuda compiled for this GPU (the driver reports no spills), or why not."""
    if find_ptxas() is None:
        return None, "spills unknown: ptxas was not found (it comes with the cuda-toolkit[nvcc] wheel)"
    try:
        ptx = compiled.inspect_asm(cc)
        return ptxas(ptx, cc, cap), ""
    except (OSError, RuntimeError, ValueError, AttributeError, subprocess.SubprocessError) as exc:
        return None, f"spills unknown: {str(exc)[:200]}"


def _gpu_usage(kernel, signature: str, cap: int | None) -> ResourceUsage:
    started = time.perf_counter()
    _, compiled = gpu_kernel(kernel, signature, cap)
    info = runtime.device()
    cc = tuple(info.compute_capability)
    report, why = _gpu_spills(compiled, cc, cap)
    source = f"numba-cuda on {info.name} (the driver's kernel attributes"
    source += f"; spills: {report['tool']} on the same PTX)" if report else ")"
    return ResourceUsage(
        _name(kernel), signature, cc, cap,
        registers=int(compiled.regs_per_thread), shared_bytes=int(compiled.shared_mem_per_block),
        stack_frame_bytes=int(compiled.local_mem_per_thread),
        spill_store_bytes=report["spill_store_bytes"] if report else None,
        spill_load_bytes=report["spill_load_bytes"] if report else None,
        source=source, note=why,
        seconds=time.perf_counter() - started,
    )


# --- SASS on the CPU: the toolkit's ptxas, then cuobjdump (lessons 03, 04, 04a show load widths and orders) ---

def find_cuobjdump() -> Path | None:
    """A cuobjdump: on PATH (the CUDA toolkit), else the one in Triton's wheel; None if neither."""
    found = shutil.which("cuobjdump")
    if found:
        return Path(found)
    import importlib.util

    spec = importlib.util.find_spec("triton")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0]) / "backends" / "nvidia" / "bin" / "cuobjdump"
    return path if path.exists() else None


def sass_of(ptx: str, arch: int = 90) -> str:
    """ptxas -arch=sm_XY on ``ptx``, then cuobjdump -sass: the SASS text (needs both tools)."""
    ptxas, cuobjdump = find_ptxas(), find_cuobjdump()
    if ptxas is None or cuobjdump is None:
        raise FileNotFoundError("needs ptxas (the CUDA toolkit wheel) and cuobjdump (the toolkit's or Triton's)")
    with tempfile.TemporaryDirectory(prefix="gpucourse-sass-") as tmp:
        (Path(tmp) / "k.ptx").write_text(ptx)
        subprocess.run([str(ptxas), f"-arch=sm_{arch}", str(Path(tmp) / "k.ptx"), "-o", str(Path(tmp) / "k.cubin")],
                       check=True, capture_output=True, timeout=120)
        return subprocess.run([str(cuobjdump), "-sass", str(Path(tmp) / "k.cubin")], check=True,
                              capture_output=True, text=True, timeout=120).stdout
