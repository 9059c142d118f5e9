"""Facts about the GPU's software stack and its other users, each under its true name.

* ``driver_release()``: the NVIDIA driver's release, e.g. "580.65.06" (NVML's
  ``nvmlSystemGetDriverVersion``, else ``nvidia-smi``);
* ``driver_api()``: the CUDA driver API level the driver implements, e.g. "13.0"
  (``cuDriverGetVersion``: 1000 × major + 10 × minor);
* ``cuda_runtime()``: the CUDA runtime (libcudart) CuPy runs on (``cudaRuntimeGetVersion``);
* ``nvrtc()``: the NVRTC that numba-cuda compiles kernels with;
* ``gpu_sharing()``: whether other processes have a context on this GPU (NVML's
  ``nvmlDeviceGetComputeRunningProcesses``): "alone", "shared" or "unknown";
* ``board()``: clocks, power limit, ECC, MIG and persistence mode of the same GPU.

NVML numbers GPUs in PCI order and ignores ``CUDA_VISIBLE_DEVICES``, so the GPU CUDA runs on is
found by its PCI bus id (``nvmlDeviceGetHandleByPciBusId_v2``), never by NVML's index 0.

Every function answers None (or "unknown") rather than guess when its source is missing, and
takes its source as an argument so that tests can hand it a stand-in.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import subprocess
from dataclasses import dataclass

NVML_SUCCESS = 0
NVML_ERROR_INSUFFICIENT_SIZE = 7


def _api_text(version: int) -> str:
    """1000 × major + 10 × minor (the encoding of cuDriverGetVersion and cudaRuntimeGetVersion)."""
    version = int(version)
    return f"{version // 1000}.{version % 1000 // 10}"


@functools.cache
def _load_nvml():
    """NVML, loaded and initialised once per process (provenance asks for it at every measurement)."""
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


@functools.cache
def cuda_pci_bus_id() -> str | None:
    """The PCI bus id of the GPU numba-cuda runs on, as NVML writes it ("00000000:1B:00.0")."""
    try:
        from numba import cuda

        device = cuda.get_current_device()
        return f"{device.PCI_DOMAIN_ID:08X}:{device.PCI_BUS_ID:02X}:{device.PCI_DEVICE_ID:02X}.0"
    except Exception:  # no GPU, or a numba-cuda without these attributes: NVML's index 0 then
        return None


def nvml_handle(nvml, pci_bus_id: str | None = None):
    """NVML's handle of the CUDA device (by PCI bus id; index 0 only when the id is unknown)."""
    handle = ctypes.c_void_p()
    if pci_bus_id:
        status = nvml.nvmlDeviceGetHandleByPciBusId_v2(pci_bus_id.encode(), ctypes.byref(handle))
    else:
        status = nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle))
    return handle if status == NVML_SUCCESS else None


def compute_processes(nvml=None, pci_bus_id: str | None | type = ...) -> list[int] | None:
    """PIDs with a compute context on the CUDA device; None when NVML cannot tell."""
    nvml = nvml if nvml is not None else _load_nvml()
    if nvml is None:
        return None
    handle = nvml_handle(nvml, cuda_pci_bus_id() if pci_bus_id is ... else pci_bus_id)
    if handle is None:
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


NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2  # nvmlClockType_t


def board(nvml=None, pci_bus_id: str | None | type = ...) -> dict:
    """Clocks (current and maximum, MHz), enforced power limit (W), ECC, MIG and persistence mode of
    the CUDA device, each None when NVML does not answer: what makes two recordings comparable."""
    names = ("pci_bus_id", "sm_clock_mhz", "sm_clock_max_mhz", "memory_clock_mhz", "power_limit_w", "ecc", "mig",
             "persistence")
    facts = dict.fromkeys(names)
    nvml = nvml if nvml is not None else _load_nvml()
    facts["pci_bus_id"] = cuda_pci_bus_id() if pci_bus_id is ... else pci_bus_id
    handle = nvml_handle(nvml, facts["pci_bus_id"]) if nvml is not None else None
    if handle is None:
        return facts
    value, pending = ctypes.c_uint(0), ctypes.c_uint(0)

    def ask(call, *args) -> int | None:
        return value.value if getattr(nvml, call)(handle, *args, ctypes.byref(value)) == NVML_SUCCESS else None

    facts["sm_clock_mhz"] = ask("nvmlDeviceGetClockInfo", NVML_CLOCK_SM)
    facts["sm_clock_max_mhz"] = ask("nvmlDeviceGetMaxClockInfo", NVML_CLOCK_SM)
    facts["memory_clock_mhz"] = ask("nvmlDeviceGetClockInfo", NVML_CLOCK_MEM)
    milliwatts = ask("nvmlDeviceGetEnforcedPowerLimit")
    facts["power_limit_w"] = None if milliwatts is None else milliwatts / 1000
    persistence = ask("nvmlDeviceGetPersistenceMode")
    facts["persistence"] = None if persistence is None else ("on" if persistence else "off")
    for key, call in (("ecc", "nvmlDeviceGetEccMode"), ("mig", "nvmlDeviceGetMigMode")):
        if getattr(nvml, call)(handle, ctypes.byref(value), ctypes.byref(pending)) == NVML_SUCCESS:
            facts[key] = "on" if value.value else "off"
    return facts


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


# A driver of measuring children (gpu-report) that holds a context itself names its PID here, so that
# its children do not call their own parent "another process sharing the GPU" (gpu-mode review, G12).
FAMILY_PIDS_VARIABLE = "GPUCOURSE_OWN_CONTEXT_PIDS"


def family_pids(environ=None) -> set[int]:
    """PIDs of the course's own processes that hold a context beside this one (from the environment)."""
    text = (os.environ if environ is None else environ).get(FAMILY_PIDS_VARIABLE, "")
    return {int(part) for part in text.split(",") if part.strip().isdigit()}


def gpu_sharing(processes: list[int] | None | type = ..., own_context: bool = True,
                family: set[int] | None = None) -> Sharing:
    """Is anyone else on the GPU? While we measure we hold a context ourselves, so we are one of
    the processes NVML lists (in a container under a PID we may not recognise): others = n − 1.
    ``family`` (default: ``family_pids()``): the course's own processes with a context (gpu-report's
    parent), not counted as others: by PID where NVML lists PIDs we know, else by their number."""
    if processes is ...:
        processes = compute_processes()
    if processes is None:
        return Sharing("unknown")
    family = (family_pids() if family is None else set(family)) - {os.getpid()}
    listed = [pid for pid in processes if pid in family]
    ours = len(listed) if listed or os.getpid() in processes else len(family)  # a container: host PIDs
    others = max(0, len(processes) - (1 if own_context else 0) - ours)
    return Sharing("shared", others) if others else Sharing("alone", 0)


# --- the board while it works: SM clock and power draw around a measurement ---------------------------------
# Tensor-core timings moved by 7 % between two measurements minutes apart on an H200 (review
# gpu-recordings.md §4) while the harness recorded the board only at provenance time: these samples,
# taken just before and just after a measurement, let a recording tell a lowered clock from noise.

CLOCK_POWER_KEYS = ("sm_clock_mhz_before", "sm_clock_mhz_after", "power_w_before", "power_w_after")


def clocks_and_power(nvml=None, pci_bus_id: str | None | type = ...) -> dict:
    """{"sm_clock_mhz": the SM clock now (``clocks.sm``), "power_w": the board's power draw now
    (``power.draw``, NVML's ``nvmlDeviceGetPowerUsage`` in mW)}, each None when NVML does not answer."""
    facts = {"sm_clock_mhz": None, "power_w": None}
    nvml = nvml if nvml is not None else _load_nvml()
    if nvml is None:
        return facts
    handle = nvml_handle(nvml, cuda_pci_bus_id() if pci_bus_id is ... else pci_bus_id)
    if handle is None:
        return facts
    value = ctypes.c_uint(0)
    if nvml.nvmlDeviceGetClockInfo(handle, NVML_CLOCK_SM, ctypes.byref(value)) == NVML_SUCCESS:
        facts["sm_clock_mhz"] = int(value.value)
    if nvml.nvmlDeviceGetPowerUsage(handle, ctypes.byref(value)) == NVML_SUCCESS:
        facts["power_w"] = value.value / 1000
    return facts


def around(run, sample=None):
    """``run()`` with the SM clock and power draw sampled just before and just after it: (its result,
    {"sm_clock_mhz_before", "sm_clock_mhz_after", "power_w_before", "power_w_after"}), None where NVML
    does not answer. ``sample``: a stand-in for ``clocks_and_power`` (tests)."""
    sample = sample or clocks_and_power
    before = sample()
    result = run()
    after = sample()
    return result, {"sm_clock_mhz_before": before["sm_clock_mhz"], "sm_clock_mhz_after": after["sm_clock_mhz"],
                    "power_w_before": before["power_w"], "power_w_after": after["power_w"]}


NVML_COMPUTE_MODES = {0: "default", 1: "exclusive thread", 2: "prohibited", 3: "exclusive process"}


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


def compute_mode(nvml=None, pci_bus_id: str | None = None) -> str | None:
    """The GPU's compute mode ("default", "exclusive process", …), or None when NVML cannot tell. Without a
    CUDA context: ``pci_bus_id`` None asks NVML's first GPU (what a grader that runs no kernel can know)."""
    nvml = nvml if nvml is not None else _load_nvml()
    handle = nvml_handle(nvml, pci_bus_id) if nvml is not None else None
    mode = ctypes.c_int(0)
    if handle is None or nvml.nvmlDeviceGetComputeMode(handle, ctypes.byref(mode)) != NVML_SUCCESS:
        return None
    return NVML_COMPUTE_MODES.get(mode.value, f"mode {mode.value}")


def free_memory_bytes(nvml=None, pci_bus_id: str | None = None) -> int | None:
    """Free device memory as NVML sees it (no CUDA context), or None when NVML cannot tell."""
    nvml = nvml if nvml is not None else _load_nvml()
    handle = nvml_handle(nvml, pci_bus_id) if nvml is not None else None
    memory = _Memory()
    if handle is None or nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)) != NVML_SUCCESS:
        return None
    return int(memory.free)
