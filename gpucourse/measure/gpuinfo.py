"""Facts about the GPU's software stack and its other users, each under its true name.

* ``driver_release()``: the NVIDIA driver's release, e.g. "580.65.06" (NVML's
  ``nvmlSystemGetDriverVersion``, else ``nvidia-smi``);
* ``driver_api()``: the CUDA driver API level the driver implements, e.g. "13.0"
  (``cuDriverGetVersion``: 1000 × major + 10 × minor);
* ``cuda_runtime()``: the CUDA runtime (libcudart) CuPy runs on (``cudaRuntimeGetVersion``);
* ``nvrtc()``: the NVRTC that numba-cuda compiles kernels with;
* ``gpu_sharing()``: whether other processes have a context on this GPU (NVML's
  ``nvmlDeviceGetComputeRunningProcesses``): "alone", "shared" or "unknown".

Every function answers None (or "unknown") rather than guess when its source is missing, and
takes its source as an argument so that tests can hand it a stand-in.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from dataclasses import dataclass

NVML_SUCCESS = 0
NVML_ERROR_INSUFFICIENT_SIZE = 7


def _api_text(version: int) -> str:
    """1000 × major + 10 × minor (the encoding of cuDriverGetVersion and cudaRuntimeGetVersion)."""
    version = int(version)
    return f"{version // 1000}.{version % 1000 // 10}"


def _load_nvml():
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    if nvml.nvmlInit_v2() != NVML_SUCCESS:
        return None
    return nvml


def driver_release(nvml=None, smi=None) -> str | None:
    """"580.65.06": NVML first, then ``nvidia-smi``; None when neither answers."""
    nvml = nvml if nvml is not None else _load_nvml()
    if nvml is not None:
        text = ctypes.create_string_buffer(96)
        if nvml.nvmlSystemGetDriverVersion(text, 96) == NVML_SUCCESS and text.value:
            return text.value.decode()
    return _smi_driver(smi)


def _smi_driver(smi=None) -> str | None:
    if smi is None:
        path = shutil.which("nvidia-smi")
        if path is None:
            return None

        def smi(args):
            return subprocess.run([path, *args], capture_output=True, text=True, timeout=20).stdout

    try:
        out = smi(["--query-gpu=driver_version", "--format=csv,noheader"])
    except (OSError, subprocess.SubprocessError):
        return None
    first = out.strip().splitlines()[0].strip() if out.strip() else ""
    return first or None


def driver_api(get_version=None) -> str | None:
    """The driver API level, "13.0" (numba-cuda's cuDriverGetVersion, as (major, minor))."""
    try:
        if get_version is None:
            from numba.cuda.cudadrv import driver

            get_version = driver.driver.get_version
        major, minor = get_version()
    except Exception:  # no driver: not an error for a provenance record, just unknown
        return None
    return f"{major}.{minor}"


def cuda_runtime(get_version=None) -> str | None:
    """The libcudart CuPy loads, "13.0" (cudaRuntimeGetVersion)."""
    try:
        if get_version is None:
            import cupy

            get_version = cupy.cuda.runtime.runtimeGetVersion
        return _api_text(get_version())
    except Exception:
        return None


def nvrtc(get_version=None) -> str | None:
    """The NVRTC numba-cuda compiles with, "13.1" (it is what numba-cuda calls its runtime version)."""
    try:
        if get_version is None:
            from numba.cuda.cudadrv.nvrtc import _get_nvrtc_version as get_version
        major, minor = get_version()
    except Exception:
        return None
    return f"{major}.{minor}"


# --- other users of the GPU ---------------------------------------------------------------------


class _ProcessInfo(ctypes.Structure):
    # nvmlProcessInfo_t (v2/v3 layout): pid, used GPU memory, GPU and compute instance ids
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


def compute_processes(nvml=None, index: int = 0) -> list[int] | None:
    """PIDs with a compute context on GPU ``index``; None when NVML cannot tell."""
    nvml = nvml if nvml is not None else _load_nvml()
    if nvml is None:
        return None
    handle = ctypes.c_void_p()
    if nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != NVML_SUCCESS:
        return None
    count = ctypes.c_uint(0)
    status = nvml.nvmlDeviceGetComputeRunningProcesses_v3(handle, ctypes.byref(count), None)
    if status == NVML_SUCCESS:
        return []
    if status != NVML_ERROR_INSUFFICIENT_SIZE:
        return None
    count = ctypes.c_uint(count.value + 8)  # room for processes that start meanwhile
    infos = (_ProcessInfo * count.value)()
    if nvml.nvmlDeviceGetComputeRunningProcesses_v3(handle, ctypes.byref(count), infos) != NVML_SUCCESS:
        return None
    return [infos[i].pid for i in range(count.value)]


@dataclass(frozen=True)
class Sharing:
    state: str  # "alone", "shared" or "unknown"
    others: int | None = None

    def note(self) -> str:
        """The words a measured chart's caption adds ("" when the GPU is ours alone)."""
        if self.state == "shared":
            return (f"shared GPU: {self.others} other process(es) were using it, so these timings "
                    "may be slower than on a GPU of one's own")
        if self.state == "unknown":
            return "whether other processes share this GPU is unknown (NVML did not answer)"
        return ""


def gpu_sharing(processes: list[int] | None | type = ..., own_context: bool = True) -> Sharing:
    """Is anyone else on the GPU? While we measure we hold a context ourselves, so we are one of
    the processes NVML lists (in a container under a PID we may not recognise): others = n − 1."""
    if processes is ...:
        processes = compute_processes()
    if processes is None:
        return Sharing("unknown")
    others = max(0, len(processes) - (1 if own_context else 0))
    return Sharing("shared", others) if others else Sharing("alone", 0)
