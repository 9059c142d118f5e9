"""`make doctor`: the pre-flight check for a learner's laptop or a workshop server.

Prints Python and package versions, the mode, the GPU, driver and CUDA, whether numba-cuda,
CuPy and torch each see the GPU, and on a GPU a ≤ 10 s sanity benchmark (copy bandwidth vs
the datasheet, flagged below 50 %). Exit 0 when the course can run — simulator mode is a valid
mode — and 1 when something a lesson needs is broken, with the fix in words.

``--headless`` is the profile of a validation host (an HPC node on the system stack, `make setup
CUDA=system`): no JupyterLab, nbgrader or jupytext there, everything else checked as usual.
"""

from __future__ import annotations

import importlib
import platform
import sys
from dataclasses import dataclass
from importlib import metadata

from gpucourse.measure import runtime
from gpucourse.tooling import install, sitestack

try:  # module level: the simulator swaps this name while a kernel runs
    from numba import cuda
except Exception:  # a broken numba is reported by check_packages, not by a traceback here
    cuda = None

REQUIRED = ("numpy", "pandas", "numba", "plotly", "ipywidgets", "jupyterlab", "nbgrader", "jupytext")
JUPYTER = ("jupyterlab", "nbgrader", "jupytext")  # for notebooks and labs; a validation host has none (--headless)
HEADLESS_HINT = ("a validation host without JupyterLab? `make doctor HEADLESS=1` (python -m gpucourse doctor "
                 "--headless) checks everything else, the GPU and a kernel included")
OPTIONAL_GPU = ("cupy", "torch")
FIX = "run `make setup` (or `python -m gpucourse setup`) in the course folder"


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def check_packages(headless: bool = False) -> list[Check]:
    checks = [Check("python", sys.version_info[:2] in [(3, 11), (3, 12), (3, 13)], platform.python_version(),
                    "use Python 3.11, 3.12 or 3.13")]
    for module in (m for m in REQUIRED if not (headless and m in JUPYTER)):
        try:
            importlib.import_module(module)
            checks.append(Check(module, True, _version({"numba": "numba"}.get(module, module))))
        except Exception as exc:  # a broken install shows up as any exception
            checks.append(Check(module, False, f"cannot import ({type(exc).__name__}: {exc})", FIX))
    cuda_target = _version("numba-cuda")
    if cuda_target == "not installed" and not runtime.is_gpu():  # the simulator stack (macOS, Windows)
        cuda_target = "not installed: kernels run in the CUDA simulator that ships with numba"
    checks.append(Check("numba-cuda", cuda_target != "not installed", cuda_target, FIX))
    return checks


def course_range(name: str, major: int) -> str:
    """pyproject's range of ``name`` for the CUDA ``major`` stack (``torch>=2.11,<3``), or the bare name."""
    try:
        return name + sitestack.course_ranges(install.ROOT, major).get(name, "")
    except (OSError, KeyError):  # installed from a wheel, not a checkout: no pyproject.toml to read
        return name


def check_stack_versions() -> list[Check]:
    """Versions outside the course's ranges, or outside what numba, numba-cuda and CuPy need (a preinstalled
    stack is kept as it is): a warning each, since the course may still run."""
    found = sitestack.facts()
    try:
        ranges = sitestack.course_ranges(install.ROOT, sitestack.cuda_major(found["versions"]))
    except (OSError, KeyError):
        ranges = {}
    fix = "the course is tested inside these ranges; a site's stack is kept as it is: look here first if a lesson fails"
    return [Check("versions", False, line, fix, False)
            for line in sitestack.stack_problems(found, ranges, missing=False)]


def check_gpu_libraries() -> list[Check]:
    """Does each library see the GPU? Only meaningful in GPU mode."""
    checks = []
    stack = runtime.installed_stack()
    major = stack.cuda_major if stack else 13
    torch_range = course_range("torch", major)
    try:
        from numba import cuda

        checks.append(Check("numba-cuda sees the GPU", bool(cuda.is_available()), str(cuda.is_available()),
                            f"check the NVIDIA driver and that numba-cuda[cu{major}] matches its CUDA version"))
    except Exception as exc:
        checks.append(Check("numba-cuda sees the GPU", False, str(exc),
                            f"reinstall numba-cuda[cu{major}] (`make setup CUDA={major}`)"))
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
        checks.append(Check("CuPy sees the GPU", count > 0, f"{count} device(s)",
                            "install the cupy wheel for your CUDA"))
    except Exception as exc:
        checks.append(Check("CuPy sees the GPU", False, f"{type(exc).__name__}: {exc}",
                            f"install cupy-cuda{major}x matching the driver's CUDA (lessons 00, 03, 04 need it)"))
    try:
        import torch

        checks.append(Check("torch sees the GPU", torch.cuda.is_available(), torch.__version__,
                            f"install a CUDA {major} build of {torch_range} (lesson 07 needs it)"))
    except Exception as exc:
        checks.append(Check("torch sees the GPU", False, str(exc),
                            f"install a CUDA {major} build of {torch_range} (lesson 07 needs it)"))
    return checks


def _add_one():
    @cuda.jit
    def add_one(x):
        i = cuda.grid(1)
        if i < x.size:
            x[i] += 1

    return add_one


def check_kernel_runs() -> Check:
    """A tiny kernel through numba-cuda, on the GPU or in the simulator, gives the right answer."""
    import numpy as np

    try:
        x = np.arange(64, dtype=np.float32)
        _add_one()[2, 32](x)
        ok = bool((x == np.arange(64) + 1).all())
        return Check("a kernel runs", ok, "64 threads added 1" if ok else "wrong result", FIX)
    except Exception as exc:
        return Check("a kernel runs", False, f"{type(exc).__name__}: {exc}", FIX)


SANDBOX_PROBE = """
import numpy as np
from gpucourse.measure import runtime
from numba import cuda

@cuda.jit
def add_one(x):
    x[0] += 1

x = np.zeros(1, dtype=np.float32)
add_one[1, 1](x)
print(runtime.MODE, float(x[0]))
"""


def check_sandbox_kernel(timeout_s: float = 60.0) -> Check:
    """A 1-thread kernel in a grading kernel's sandbox and environment (``make grade --gpu``): can it find the
    CUDA installation there (gpu-mode review, G10)? A warning, since the lessons do not need it."""
    import subprocess
    import tempfile
    from pathlib import Path

    from gpucourse.tooling import sandbox

    if not sandbox.landlock_abi():
        return Check("a kernel in the grading sandbox", True, "not checked: no Landlock here", required=False)
    with tempfile.TemporaryDirectory(prefix="gpucourse-doctor-") as folder:
        notebook, private = Path(folder) / "notebook", Path(folder) / "private"
        notebook.mkdir()
        spec = sandbox.sandbox_paths(notebook, private, mode="required")
        command = sandbox.sandbox_command([sys.executable, "-c", SANDBOX_PROBE], spec)
        try:
            done = subprocess.run(command, cwd=notebook, env=sandbox.kernel_environment(private),
                                  capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return Check("a kernel in the grading sandbox", False, f"no answer in {timeout_s:.0f} s",
                         "see instructor/README.md, the sandbox", required=False)
    answer = done.stdout.strip().splitlines()[-1:] or [""]
    mode = answer[0].split()[0] if answer[0] else ""
    ok = done.returncode == 0 and answer[0].endswith(" 1.0") and mode == runtime.MODE
    detail = (f"a 1-thread kernel ran in {mode} mode" if ok else
              f"{answer[0] or 'no output'} (exit {done.returncode}): {' '.join(done.stderr.split())[-300:]}")
    return Check("a kernel in the grading sandbox", ok, detail,
                 "the sandbox may not read the CUDA installation: set CUDA_HOME or LD_LIBRARY_PATH to it, or add it "
                 "to c.GuardedExecute.extra_read_paths (instructor/README.md)", required=False)


def sanity_benchmark() -> Check:
    """≤ 10 s: a 256 MiB device-to-device copy against the datasheet; below 50 % is flagged."""
    from gpucourse.measure.ceilings import measure_copy_gbps

    gbps = measure_copy_gbps(256 * 2**20, min_total_ms=200.0)
    sheet = runtime.device().datasheet_bandwidth_gbps
    if sheet is None:
        return Check("copy bandwidth", True, f"{gbps:.0f} GB/s (no datasheet figure for this device)")
    pct = 100 * gbps / sheet
    return Check("copy bandwidth", pct >= 50, f"{gbps:.0f} GB/s = {pct:.0f} % of the datasheet's {sheet:.0f} GB/s",
                 "below 50 %: is another job using the GPU, or is it throttled? check `nvidia-smi`")


def stack_line() -> str:
    """Which CUDA stack is installed and what it needs from the driver and the GPU."""
    stack = runtime.installed_stack()
    if stack is None:
        return "CUDA stack: none installed (no cuda-bindings or CuPy): simulator mode only"
    branch = runtime.DRIVER_BRANCH_BY_CUDA_MAJOR.get(stack.cuda_major, "a matching")
    return (f"CUDA stack: CUDA {stack.cuda_major} ({stack.evidence}): needs a driver of the {branch} branch or "
            f"newer and compute capability {stack.min_cc[0]}.{stack.min_cc[1]} or newer")


def compiler_line(driver_cuda: tuple[int, int] | None = None, compiler=...) -> str:
    """Which NVVM writes the kernels' PTX and who links it: nvJitLink on the host, or the driver, which reads PTX
    only up to its own CUDA version (gpu-mode review, G6: Colab's T4 driver, CUDA 12.4, against NVVM 12.5+)."""
    compiler = runtime.installed_compiler(runtime.installed_stack()) if compiler is ... else compiler
    if compiler is None or compiler.nvvm is None:
        return "PTX: no NVVM wheel installed (a system toolkit, or simulator only): the kernel check below tells"
    nvvm = f"{compiler.nvvm[0]}.{compiler.nvvm[1]}"
    if compiler.nvjitlink is not None:
        linked = f"linked on the host by nvJitLink ({compiler.nvjitlink_evidence})"
    else:
        linked = "linked by the driver (no nvJitLink 12.3+ with numba-cuda 0.30+)"
    line = f"PTX: written by NVVM {nvvm} ({compiler.nvvm_evidence}), {linked}"
    if driver_cuda is not None:
        driver = runtime.Driver(driver_cuda, (runtime.ProbedDevice("", (0, 0)),))
        problem = runtime.ptx_problem(driver, compiler)
        line += f": PROBLEM: {problem}" if problem else f": the driver (CUDA {driver.cuda_text}) loads it"
    return line


def _driver_cuda() -> tuple[int, int] | None:
    driver, _ = runtime.probe_driver()
    return driver.cuda_version if driver is not None else None


def run_doctor(out=print, headless: bool = False) -> int:
    out("gpucourse doctor — pre-flight check" + (" (headless: a validation host, JupyterLab not checked)"
                                                 if headless else ""))
    out(stack_line())
    out(compiler_line(_driver_cuda()))
    checks = check_packages(headless) + check_stack_versions()
    info = runtime.device()
    if runtime.is_gpu():
        out(f"mode: GPU · {info.name} · cc {info.compute_capability[0]}.{info.compute_capability[1]} · "
            f"driver API {info.driver_version} · NVRTC {info.cuda_version}")
        checks += check_gpu_libraries() + [check_sandbox_kernel()]
        if all(c.ok or not c.required for c in checks):  # a warning stops nothing
            try:
                checks.append(sanity_benchmark())
            except Exception as exc:
                checks.append(Check("copy bandwidth", False, f"{type(exc).__name__}: {exc}", "see the error above"))
    else:
        out(f"mode: simulator ({runtime.SIM_REASON}). This is a valid mode: every lesson and lab runs; "
            "charts show counted and recorded data instead of live timings.")
    if all(c.ok or not c.required for c in checks):
        checks.append(check_kernel_runs())
    for check in checks:
        mark = "ok  " if check.ok else ("FAIL" if check.required else "warn")
        out(f"  [{mark}] {check.name}: {check.detail}" + ("" if check.ok else f"  → fix: {check.fix}"))
    broken = [c for c in checks if c.required and not c.ok]
    out("result: the course can run here." if not broken else f"result: {len(broken)} problem(s) to fix first.")
    if broken and all(c.name in JUPYTER for c in broken):
        out(HEADLESS_HINT)
    return 1 if broken else 0
