"""GPU or simulator: decided once, at import, before numba is imported.

``GPUCOURSE_MODE=gpu|sim`` forces a mode; otherwise a ctypes probe of ``libcuda.so.1``
(``cuInit`` + ``cuDeviceGetCount``, well under a millisecond) decides. In simulator mode
``NUMBA_ENABLE_CUDASIM=1`` is set so that ``from numba import cuda`` gives Numba's CUDA
simulator. Everything that needs the mode reads it from here.

    from gpucourse import runtime
    runtime.MODE          # "gpu" or "sim"
    runtime.device()      # DeviceInfo: name, compute capability, SMs, memory, L2, datasheet GB/s
    runtime.xp            # CuPy on a GPU, NumPy in the simulator
    runtime.cuda          # numba.cuda (the real target or the simulator)
    runtime.banner()      # the first output of every notebook
"""

from __future__ import annotations

import ctypes
import functools
import html
import os
import sys
from dataclasses import dataclass

from gpucourse.errors import InvalidConfig, NoGPU

MODES = ("gpu", "sim")

# Vendor datasheet HBM/GDDR bandwidths in GB/s (NVIDIA product pages). Matched on the device
# name that the driver reports; a device not listed has no datasheet line on the charts.
DATASHEET_BANDWIDTH_GBPS = {
    "H200": 4800.0,
    "H100 80GB HBM3": 3350.0,
    "H100 SXM": 3350.0,
    "H100 PCIe": 2000.0,
    "A100-SXM4-80GB": 2039.0,
    "A100-SXM4-40GB": 1555.0,
    "A100-PCIE-40GB": 1555.0,
    "Tesla V100-SXM2": 900.0,
    "Tesla T4": 320.0,
    "L4": 300.0,
}


# Dense datasheet TFLOP/s by format (NVIDIA H100/H200 SXM product pages; see REFERENCE.md).
DATASHEET_TFLOPS = {
    "H200": {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9},
    "H100 80GB HBM3": {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9},
    "H100 SXM": {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9},
}


def datasheet_tflops(name: str) -> dict[str, float]:
    """The datasheet's dense TFLOP/s per format for a device name ({} when not listed).

    Only the SXM parts are listed: the PCIe and NVL variants share the chip's name but not its
    clocks and power, so they get no datasheet line rather than the wrong one."""
    if any(variant in name.lower() for variant in ("pcie", "nvl")):
        return {}
    for key, rates in DATASHEET_TFLOPS.items():
        if key.lower() in name.lower():
            return dict(rates)
    return {}


def _probe_gpu() -> tuple[bool, str]:
    """(True, "") when the driver initialises and sees at least one device, else (False, why)."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False, "no NVIDIA driver found (libcuda.so.1 is not installed)"
    status = libcuda.cuInit(0)
    if status != 0:
        return False, f"the NVIDIA driver did not initialise (cuInit returned {status})"
    count = ctypes.c_int(0)
    if libcuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        return False, "the NVIDIA driver sees no GPU"
    return True, ""


def _decide() -> tuple[str, str]:
    forced = os.environ.get("GPUCOURSE_MODE", "").strip().lower()
    if forced and forced not in MODES:
        raise InvalidConfig(f"GPUCOURSE_MODE must be 'gpu', 'sim' or unset (automatic); got {forced!r}")
    if forced == "sim":
        return "sim", "GPUCOURSE_MODE=sim was set"
    has_gpu, why = _probe_gpu()
    if forced == "gpu" and not has_gpu:
        raise NoGPU(f"GPUCOURSE_MODE=gpu was set but {why}; use GPUCOURSE_MODE=sim or leave it unset")
    return ("gpu", "") if has_gpu else ("sim", why)


MODE, SIM_REASON = _decide()
if MODE == "sim":
    _cuda_loaded = "numba.cuda" in sys.modules
    _real_cuda = _cuda_loaded and "numba.cuda.simulator_init" not in sys.modules
    if _real_cuda and os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        raise NoGPU("numba.cuda was imported before gpucourse and there is no GPU: move "
                    "`from gpucourse import ...` above `from numba import cuda` and restart the kernel")
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    if "numba.core.config" in sys.modules and not _cuda_loaded:
        # numba read NUMBA_* when it was first imported (`from numba.types import float32` before
        # gpucourse): read them again so that `numba.cuda`, imported later, is the simulator.
        sys.modules["numba.core.config"].reload_config()


def is_gpu() -> bool:
    return MODE == "gpu"


@dataclass(frozen=True)
class DeviceInfo:
    name: str
    compute_capability: tuple[int, int]
    sm_count: int | None = None
    memory_bytes: int | None = None
    l2_bytes: int | None = None
    datasheet_bandwidth_gbps: float | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    simulated: bool = False

    @property
    def slug(self) -> str:
        """A folder name for recordings: 'nvidia-h200', 'simulator'."""
        if self.simulated:
            return "simulator"
        text = self.name.lower().replace("nvidia ", "")
        return "nvidia-" + "".join(c if c.isalnum() else "-" for c in text).strip("-").replace("--", "-")


def _datasheet_gbps(name: str) -> float | None:
    for key, gbps in DATASHEET_BANDWIDTH_GBPS.items():
        if key.lower() in name.lower():
            return gbps
    return None


def _version_text(version) -> str:
    major, minor = version if isinstance(version, tuple) else divmod(int(version) // 10, 100)
    return f"{major}.{minor}"


@functools.cache
def device() -> DeviceInfo:
    """Facts about the device the course runs on. In the simulator, a modelled cc 9.0 device."""
    if MODE == "sim":
        return DeviceInfo(name="Numba CUDA simulator (no GPU)", compute_capability=(9, 0), simulated=True)
    from numba import cuda as numba_cuda
    from numba.cuda.cudadrv import driver
    from numba.cuda.cudadrv import runtime as cudart

    dev = numba_cuda.get_current_device()
    free_bytes, total_bytes = numba_cuda.current_context().get_memory_info()
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    return DeviceInfo(
        name=name,
        compute_capability=tuple(dev.compute_capability),
        sm_count=int(dev.MULTIPROCESSOR_COUNT),
        memory_bytes=int(total_bytes),
        l2_bytes=int(dev.L2_CACHE_SIZE),
        datasheet_bandwidth_gbps=_datasheet_gbps(name),
        driver_version=_version_text(driver.driver.get_version()),
        cuda_version=_version_text(cudart.runtime.get_version()),
    )


def free_memory_bytes() -> int | None:
    """Free device memory now (None in the simulator: host memory is the limit there)."""
    if MODE == "sim":
        return None
    from numba import cuda as numba_cuda

    return int(numba_cuda.current_context().get_memory_info()[0])


class Banner:
    """The first output of every notebook: the mode, the device, and what the timings mean."""

    def __init__(self, info: DeviceInfo, mode: str, reason: str):
        self.info, self.mode, self.reason = info, mode, reason

    def lines(self) -> list[str]:
        info = self.info
        if self.mode == "gpu":
            facts = [f"compute capability {info.compute_capability[0]}.{info.compute_capability[1]}"]
            if info.sm_count:
                facts.append(f"{info.sm_count} SMs")
            if info.memory_bytes:
                facts.append(f"{info.memory_bytes / 2**30:.1f} GiB")
            if info.l2_bytes:
                facts.append(f"L2 {info.l2_bytes / 2**20:.0f} MiB")
            if info.datasheet_bandwidth_gbps:
                facts.append(f"datasheet {info.datasheet_bandwidth_gbps:.0f} GB/s")
            return [
                f"GPU mode · {info.name}",
                " · ".join(facts) + f" · driver {info.driver_version}, CUDA {info.cuda_version}",
                "Timings on the charts are measured live on this device.",
            ]
        return [
            "Simulator mode · no GPU timings here",
            f"Why: {self.reason}.",
            "Kernels run in Numba's CUDA simulator: their results are real, their speed is not GPU "
            "performance and is never shown as such. Charts show what the microscope counts and "
            "timings recorded on real GPUs (data/reference/), each labelled with its source.",
        ]

    def __repr__(self) -> str:
        return "\n".join(self.lines())

    def _repr_html_(self) -> str:
        first, *rest = (html.escape(line) for line in self.lines())
        colour = "#009E73" if self.mode == "gpu" else "#0072B2"
        body = "<br>".join(rest)
        return (
            f'<div class="gpucourse-banner" role="status" style="border-left:6px solid {colour};'
            f'padding:6px 12px;margin:4px 0;background:#f7f7f7;color:#000">'
            f"<strong>{first}</strong><br>{body}</div>"
        )


def banner() -> Banner:
    return Banner(device(), MODE, SIM_REASON)


def __getattr__(name: str):
    # Heavy imports only when asked for: `runtime.xp`, `runtime.cuda`.
    if name == "xp":
        if MODE == "gpu":
            import cupy

            return cupy
        import numpy

        return numpy
    if name == "cuda":
        from numba import cuda as numba_cuda

        return numba_cuda
    raise AttributeError(name)
