"""GPU or simulator: decided once, at import, before numba is imported.

``GPUCOURSE_MODE=gpu|sim`` forces a mode; otherwise a ctypes probe of ``libcuda.so.1`` decides
(well under a millisecond): the driver's CUDA version (``cuDriverGetVersion``) and each device's
name and compute capability, checked against what the installed CUDA stack can use (read from
package metadata, without importing numba). In simulator mode ``NUMBA_ENABLE_CUDASIM=1`` is set
so that ``from numba import cuda`` gives Numba's CUDA simulator. Everything that needs the mode
reads it from here.

    from gpucourse.measure import runtime
    runtime.MODE          # "gpu" or "sim"
    runtime.SIM_REASON    # one line: why simulator mode, and what to do about it
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
from importlib import metadata

from gpucourse.errors import CourseError, InvalidConfig, NoGPU
from gpucourse.measure.compat import restore_numpy_aliases

MODES = ("gpu", "sim")


@dataclass(frozen=True)
class Datasheet:
    """A vendor figure for one device name, with where it was published."""

    bandwidth_gbps: float
    source: str


# Memory bandwidth in GB/s, keyed by the exact name the driver reports (cuDeviceGetName). Exact,
# because names share prefixes across very different cards ("NVIDIA L4" / "NVIDIA L40S"), a GH200
# is not an H200, and a MIG slice ("NVIDIA A100-SXM4-40GB MIG 1g.5gb") has only a share of its
# GPU's bandwidth; a name not listed gets no datasheet line.
#
# Re-checked in November 2026 (issue 15): NVIDIA's own pages could not be fetched from the machine
# this was written on, so each figure was compared with independent copies of the datasheets
# instead, and every row agrees with them: T4 320, A10 600, L4 300, L40S 864, A100 40GB 1,555,
# A100 80GB PCIe 1,935 and SXM 2,039, H100 PCIe 2,000, SXM 3,350, NVL 3,900, H200 and H200 NVL 4,800,
# B200 8,000, RTX 4090 1,008 and RTX 5090 1,792 GB/s. On the B200, a PyTorch contributor computed
# 7.67 TB/s from the driver's reported 7,680-bit bus and 3,996 MHz memory clock (pytorch/ao pull
# request 4002); the row keeps NVIDIA's published 8 TB/s, which is what this table records.
DATASHEETS = {
    "Tesla T4": Datasheet(320.0, "NVIDIA T4 Tensor Core GPU datasheet: 320+ GB/s GDDR6"),
    "Tesla V100-SXM2-16GB": Datasheet(900.0, "NVIDIA V100 Tensor Core GPU datasheet: 900 GB/s (SXM2)"),
    "Tesla V100-SXM2-32GB": Datasheet(900.0, "NVIDIA V100 Tensor Core GPU datasheet: 900 GB/s (SXM2)"),
    "NVIDIA A10": Datasheet(600.0, "NVIDIA A10 Tensor Core GPU datasheet: 600 GB/s GDDR6"),
    "NVIDIA L4": Datasheet(300.0, "NVIDIA L4 Tensor Core GPU datasheet: 300 GB/s GDDR6"),
    "NVIDIA L40S": Datasheet(864.0, "NVIDIA L40S GPU datasheet: 864 GB/s GDDR6"),
    "NVIDIA A100-PCIE-40GB": Datasheet(1555.0, "NVIDIA A100 Tensor Core GPU datasheet: 1,555 GB/s (40GB PCIe)"),
    "NVIDIA A100 80GB PCIe": Datasheet(1935.0, "NVIDIA A100 Tensor Core GPU datasheet: 1,935 GB/s (80GB PCIe)"),
    "NVIDIA A100-SXM4-40GB": Datasheet(1555.0, "NVIDIA A100 Tensor Core GPU datasheet: 1,555 GB/s (40GB SXM)"),
    "NVIDIA A100-SXM4-80GB": Datasheet(2039.0, "NVIDIA A100 Tensor Core GPU datasheet: 2,039 GB/s (80GB SXM)"),
    "NVIDIA H100 PCIe": Datasheet(2000.0, "NVIDIA H100 Tensor Core GPU datasheet: 2 TB/s (H100 PCIe)"),
    "NVIDIA H100 80GB HBM3": Datasheet(3350.0, "NVIDIA H100 Tensor Core GPU datasheet: 3.35 TB/s (H100 SXM)"),
    "NVIDIA H100 NVL": Datasheet(3900.0, "NVIDIA H100 Tensor Core GPU datasheet: 3.9 TB/s (H100 NVL)"),
    "NVIDIA H200": Datasheet(4800.0, "NVIDIA H200 Tensor Core GPU product page: 4.8 TB/s (H200 SXM)"),
    "NVIDIA H200 NVL": Datasheet(4800.0, "NVIDIA H200 Tensor Core GPU product page: 4.8 TB/s (H200 NVL)"),
    "NVIDIA B200": Datasheet(8000.0, "NVIDIA HGX B200 product page: 8 TB/s per GPU"),
    "NVIDIA GeForce RTX 4090": Datasheet(1008.0, "NVIDIA Ada GPU Architecture whitepaper, appendix: 1,008 GB/s"),
    "NVIDIA GeForce RTX 5090": Datasheet(1792.0, "NVIDIA RTX Blackwell GPU Architecture whitepaper: 1,792 GB/s"),
}
DATASHEET_BANDWIDTH_GBPS = {name: sheet.bandwidth_gbps for name, sheet in DATASHEETS.items()}

# Dense datasheet TFLOP/s by format (NVIDIA H100 and H200 Tensor Core GPU datasheets, SXM columns).
# Only the SXM parts are listed: PCIe and NVL variants share the chip but not its clocks and power.
_HOPPER_SXM_TFLOPS = {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9}
DATASHEET_TFLOPS = {"NVIDIA H200": _HOPPER_SXM_TFLOPS, "NVIDIA H100 80GB HBM3": _HOPPER_SXM_TFLOPS}
# Turing, Ampere and Ada rows (review gpu-mode-paths.md G21), dense figures: where a datasheet gives only the
# "with sparsity" figure, half of it. Not re-fetched from NVIDIA (no access from here): the figures agree with
# independent copies of each datasheet (Glenn Lockwood's A100 page, which cites the A100 datasheet; spec
# aggregators for T4 and L4).
# * T4: https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf
#   — single precision 8.1, mixed precision (fp16 inputs, fp32 accumulate) 65 TFLOPS; no tf32 or bf16 (Turing).
# * L4: https://www.nvidia.com/en-us/data-center/l4/ (datasheet) — FP32 30.3; TF32 120, BF16/FP16 242, FP8 485
#   TFLOPS with sparsity: dense 60, 121, 242.5.
# * A100 (SXM and PCIe alike): https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/
#   nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf — FP32 19.5, TF32 156, BF16 312, FP16 312 TFLOPS (dense).
_A100_TFLOPS = {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}
DATASHEET_TFLOPS.update({
    "Tesla T4": {"fp32": 8.1, "fp16": 65.0},
    "NVIDIA L4": {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0, "fp8": 242.5},
    **dict.fromkeys(("NVIDIA A100-PCIE-40GB", "NVIDIA A100 80GB PCIe", "NVIDIA A100-SXM4-40GB",
                     "NVIDIA A100-SXM4-80GB"), _A100_TFLOPS),
})


def datasheet_bandwidth_gbps(name: str) -> float | None:
    """The datasheet's memory bandwidth for a device name as the driver reports it (None: not listed)."""
    sheet = DATASHEETS.get(name.strip())
    return sheet.bandwidth_gbps if sheet else None


def datasheet_tflops(name: str) -> dict[str, float]:
    """The datasheet's dense TFLOP/s per format for a device name ({} when not listed)."""
    return dict(DATASHEET_TFLOPS.get(name.strip(), {}))


_datasheet_gbps = datasheet_bandwidth_gbps  # the name older callers use


# --- What the installed CUDA stack can use (from package metadata: numba is not imported yet) ---

# The oldest compute capability each CUDA major's compiler targets (CUDA 13.0 release notes:
# Maxwell, Pascal and Volta removed; CUDA 12.0 release notes: Kepler removed), and the oldest
# driver branch for it (CUDA Toolkit release notes, "CUDA Toolkit and Corresponding Driver Versions").
MIN_CC_BY_CUDA_MAJOR = {12: (5, 0), 13: (7, 5)}
DRIVER_BRANCH_BY_CUDA_MAJOR = {12: "R525", 13: "R580"}


@dataclass(frozen=True)
class Stack:
    """The CUDA major version the installed GPU packages were built for."""

    cuda_major: int
    evidence: str  # the package that says so, e.g. "cuda-bindings 13.5.0"

    @property
    def min_cc(self) -> tuple[int, int]:
        return MIN_CC_BY_CUDA_MAJOR.get(self.cuda_major, (5, 0))


def _installed_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def installed_stack() -> Stack | None:
    """The CUDA major of the installed stack, or None when no CUDA package is installed.

    numba-cuda compiles through cuda-bindings (its [cu12]/[cu13] extras pull 12.x or 13.x), so
    that decides; otherwise CuPy's wheel name (cupy-cuda12x / cupy-cuda13x) does."""
    bindings = _installed_version("cuda-bindings")
    if bindings and bindings.split(".")[0].isdigit():
        return Stack(int(bindings.split(".")[0]), f"cuda-bindings {bindings}")
    for major in (13, 12):
        cupy = _installed_version(f"cupy-cuda{major}x")
        if cupy:
            return Stack(major, f"cupy-cuda{major}x {cupy}")
    return None


# --- What the driver reports (ctypes, CUDA Driver API) ---

CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76


@dataclass(frozen=True)
class ProbedDevice:
    name: str
    cc: tuple[int, int]


@dataclass(frozen=True)
class Driver:
    """What libcuda reports: the newest CUDA version the driver supports, and its devices."""

    cuda_version: tuple[int, int]
    devices: tuple[ProbedDevice, ...]

    @property
    def cuda_text(self) -> str:
        return f"{self.cuda_version[0]}.{self.cuda_version[1]}"


def _probe_device(libcuda, ordinal: int) -> ProbedDevice:
    handle, major, minor = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)
    name = ctypes.create_string_buffer(256)
    libcuda.cuDeviceGet(ctypes.byref(handle), ordinal)
    libcuda.cuDeviceGetName(name, len(name), handle)
    libcuda.cuDeviceGetAttribute(ctypes.byref(major), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, handle)
    libcuda.cuDeviceGetAttribute(ctypes.byref(minor), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, handle)
    return ProbedDevice(name.value.decode(errors="replace").strip(), (major.value, minor.value))


def probe_driver(library: str = "libcuda.so.1") -> tuple[Driver | None, str]:
    """(Driver, "") when the driver initialises and sees at least one device, else (None, why)."""
    try:
        libcuda = ctypes.CDLL(library)
    except OSError:
        return None, "no NVIDIA driver found (libcuda.so.1 is not installed)"
    status = libcuda.cuInit(0)
    if status != 0:
        return None, f"the NVIDIA driver did not initialise (cuInit returned {status})"
    count, version = ctypes.c_int(0), ctypes.c_int(0)
    if libcuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        return None, "the NVIDIA driver sees no GPU"
    libcuda.cuDriverGetVersion(ctypes.byref(version))  # 12040 means CUDA 12.4
    devices = tuple(_probe_device(libcuda, i) for i in range(count.value))
    return Driver((version.value // 1000, version.value % 1000 // 10), devices), ""


# --- The decision ---


def _stack_for(driver: Driver) -> int | None:
    """The newest course stack (CUDA major) that this driver and device 0 can both use."""
    major, cc = driver.cuda_version[0], driver.devices[0].cc
    fits = [m for m, low in MIN_CC_BY_CUDA_MAJOR.items() if m <= major and cc >= low]
    return max(fits, default=None)


def _driver_update_hint(cc: tuple[int, int], stack: Stack) -> str:
    """The driver update that lets a stack run on this GPU: the installed one if it can, else the newest."""
    if cc >= stack.min_cc:
        branch = DRIVER_BRANCH_BY_CUDA_MAJOR.get(stack.cuda_major, f"CUDA {stack.cuda_major}")
        return f"update the NVIDIA driver to the {branch} branch or newer"
    newest = max((m for m, low in MIN_CC_BY_CUDA_MAJOR.items() if cc >= low), default=None)
    if newest is None:
        return "no CUDA stack of the course supports this GPU, so simulator mode is the way here"
    return (f"update the NVIDIA driver to the {DRIVER_BRANCH_BY_CUDA_MAJOR[newest]} branch or newer and run "
            f"`make setup CUDA={newest}`")


def stack_problem(driver: Driver, stack: Stack | None) -> str:
    """Why the installed stack cannot use device 0, and what to do ("" when it can).

    The course runs on device 0 (CUDA_VISIBLE_DEVICES picks which GPU that is)."""
    if stack is None:
        return ""  # no CUDA package to judge by; `make doctor` reports what is missing
    device0 = driver.devices[0]
    if driver.cuda_version[0] < stack.cuda_major:
        branch = DRIVER_BRANCH_BY_CUDA_MAJOR.get(stack.cuda_major, "a newer")
        why = (f"the NVIDIA driver supports CUDA {driver.cuda_text}, older than the CUDA {stack.cuda_major} "
               f"the installed stack needs ({stack.evidence}; driver {branch} or newer)")
    elif device0.cc < stack.min_cc:
        why = (f"the GPU ({device0.name}) has compute capability {device0.cc[0]}.{device0.cc[1]}, below the "
               f"{stack.min_cc[0]}.{stack.min_cc[1]} that the installed CUDA {stack.cuda_major} stack compiles for "
               f"({stack.evidence})")
    else:
        return ""
    usable = [i for i, d in enumerate(driver.devices) if d.cc >= stack.min_cc]
    if usable and driver.cuda_version[0] >= stack.cuda_major:  # another GPU here can: point at it
        other_device = driver.devices[usable[0]]
        return (f"{why}: GPU {usable[0]} ({other_device.name}) can run it: set CUDA_VISIBLE_DEVICES={usable[0]} "
                "before starting Python")
    other = _stack_for(driver)
    if other is not None and other != stack.cuda_major:
        return f"{why}: run `make setup CUDA={other}` for the CUDA {other} stack, which this driver and GPU support"
    return f"{why}: {_driver_update_hint(device0.cc, stack)}"


# --- PTX newer than the driver reads (gpu-mode review, G6) ---
# numba-cuda's NVVM writes PTX of its own CUDA version (NVVM 12.5 writes `.version 8.5`); the driver's PTX JIT reads
# PTX up to its own CUDA version (driver 550.54.15 on Colab's T4: CUDA 12.4, PTX 8.4), and refuses newer PTX with
# CUDA_ERROR_UNSUPPORTED_PTX_VERSION (numba-cuda#120, colabtools#5081 and #5667). The same-major check above cannot
# see it. numba-cuda 0.30 links through nvJitLink when one of 12.3 or newer is installed (cuda.core's Linker; its
# docs: "when the installed nvJitLink is too old (<12.3), or not installed, the driver APIs (cuLink) will be used
# instead"): nvJitLink turns the PTX into a cubin on the host, and a cubin of the same CUDA major loads on an older
# driver, so only the driver's own linking is at risk. Read from package metadata (numba is not imported yet).
NVVM_DISTRIBUTIONS = {13: ("nvidia-nvvm", "nvidia-cuda-nvcc"), 12: ("nvidia-cuda-nvcc-cu12",)}
NVJITLINK_DISTRIBUTIONS = {13: ("nvidia-nvjitlink",), 12: ("nvidia-nvjitlink-cu12",)}
NVJITLINK_MIN = (12, 3)
NUMBA_CUDA_NVJITLINK_DEFAULT = (0, 30)  # the release whose linker was read (0.30.4): nvJitLink when installed


def _major_minor(version: str | None) -> tuple[int, int] | None:
    parts = (version or "").split(".")
    return (int(parts[0]), int(parts[1])) if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit() else None


@dataclass(frozen=True)
class Compiler:
    """The NVVM that writes the kernels' PTX and the nvJitLink that links it (None: the driver links the PTX)."""

    nvvm: tuple[int, int] | None
    nvvm_evidence: str = ""
    nvjitlink: tuple[int, int] | None = None
    nvjitlink_evidence: str = ""


def installed_compiler(stack: Stack | None) -> Compiler | None:
    """The NVVM and nvJitLink wheels of the installed stack's CUDA major (None: no NVVM wheel, e.g. a system
    toolkit, whose version is not judged here; `make doctor` then runs a kernel)."""
    if stack is None:
        return None
    nvvm = next(((d, v) for d in NVVM_DISTRIBUTIONS.get(stack.cuda_major, ())
                 if _major_minor(v := _installed_version(d))), None)
    if nvvm is None:
        return None
    link = next(((d, v) for d in NVJITLINK_DISTRIBUTIONS.get(stack.cuda_major, ())
                 if _major_minor(v := _installed_version(d))), None)
    numba_cuda = _major_minor(_installed_version("numba-cuda")) or (0, 0)
    if link and (_major_minor(link[1]) < NVJITLINK_MIN or numba_cuda < NUMBA_CUDA_NVJITLINK_DEFAULT):
        link = None
    return Compiler(_major_minor(nvvm[1]), f"{nvvm[0]} {nvvm[1]}", _major_minor(link[1]) if link else None,
                    f"{link[0]} {link[1]}" if link else "")


def _text(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def ptx_problem(driver: Driver, compiler: Compiler | None) -> str:
    """Why the driver would refuse the PTX that numba-cuda's NVVM writes, and what to do ("" when it will not)."""
    if compiler is None or compiler.nvvm is None:
        return ""
    nvvm = compiler.nvvm
    if compiler.nvjitlink is not None:
        if compiler.nvjitlink >= nvvm:
            return ""
        return (f"nvJitLink {_text(compiler.nvjitlink)} ({compiler.nvjitlink_evidence}) cannot link the PTX of NVVM "
                f"{_text(nvvm)} ({compiler.nvvm_evidence}): install an nvJitLink of CUDA {_text(nvvm)} or newer")
    if driver.cuda_version >= nvvm:
        return ""
    major = nvvm[0]
    suffix = "-cu12" if major == 12 else ""
    return (f"the NVIDIA driver supports CUDA {driver.cuda_text}, so it cannot read the PTX that NVVM {_text(nvvm)} "
            f"writes ({compiler.nvvm_evidence}; CUDA_ERROR_UNSUPPORTED_PTX_VERSION at the first kernel): install "
            f"`nvidia-nvjitlink{suffix}>={_text(nvvm)}` with numba-cuda 0.30 or newer (it links on the host), or "
            f"`nvidia-cuda-nvcc{suffix}=={driver.cuda_text}.*`, or update the NVIDIA driver")


WINDOWS_REASON = ("native Windows runs the simulator only: for GPU mode, run the course inside WSL2 "
                  "(Ubuntu in WSL2 uses the NVIDIA Windows driver)")


def decide(forced: str = "", platform: str = sys.platform, probe=probe_driver,
           stack=installed_stack, compiler=installed_compiler) -> tuple[str, str]:
    """("gpu", "") or ("sim", one-line reason). Raises when ``forced == "gpu"`` cannot be honoured.

    ``probe``, ``stack`` and ``compiler`` (callables; ``compiler`` takes the stack) are the seams the tests use:
    a stand-in driver, another stack, e.g. ``decide(stack=lambda: Stack(12, "cuda-bindings 12.9.0"))``. PTX
    newer than the driver reads (``ptx_problem``) sends an automatic start to the simulator; ``forced == "gpu"``
    is honoured then (the judgement reads package versions only, and a site may link otherwise)."""
    forced = forced.strip().lower()
    if forced and forced not in MODES:
        raise InvalidConfig(f"GPUCOURSE_MODE must be 'gpu', 'sim' or unset (automatic); got {forced!r}")
    if forced == "sim":
        return "sim", "GPUCOURSE_MODE=sim was set"
    if platform == "win32":
        why = WINDOWS_REASON
    else:
        driver, why = probe()
        if driver is not None:
            installed = stack()
            why = stack_problem(driver, installed)
            if not why and forced != "gpu":
                why = ptx_problem(driver, compiler(installed))
    if not why:
        return "gpu", ""
    if forced == "gpu":
        raise NoGPU(f"GPUCOURSE_MODE=gpu was set but {why}; otherwise use GPUCOURSE_MODE=sim or leave it unset")
    return "sim", why


def _fail_at_import(error: CourseError):
    """Raise ``error``; an uncaught CourseError then prints as one line in plain Python too.

    (IPython already shows one line: CourseError._render_traceback_.)"""
    previous = sys.excepthook

    def one_line(kind, value, traceback):
        if isinstance(value, CourseError):
            print(f"{type(value).__name__}: {value}", file=sys.stderr)
        else:
            previous(kind, value, traceback)

    sys.excepthook = one_line
    raise error


def _decide() -> tuple[str, str]:
    try:
        return decide(os.environ.get("GPUCOURSE_MODE", ""))
    except CourseError as error:
        _fail_at_import(error)


MODE, SIM_REASON = _decide()
# Before numba-cuda is imported (either mode: the same stack may later see a GPU): it names a
# NumPy alias that NumPy 2.5 removed.
RESTORED_NUMPY_ALIASES = restore_numpy_aliases()
# numba-cuda's performance warnings (a grid under 128 blocks, a host array copied implicitly)
# go to stderr, and nbgrader scores a graded cell that writes to stderr 0; the course launches
# small grids on host arrays on purpose. numba reads this when it loads or reloads its config.
os.environ["NUMBA_DISABLE_PERFORMANCE_WARNINGS"] = "1"
if "numba.core.config" in sys.modules:  # numba came first: change this one setting, leave the rest as loaded
    sys.modules["numba.core.config"].DISABLE_PERFORMANCE_WARNINGS = 1
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
    from gpucourse.measure import simblocks

    simblocks.install_when_imported()  # the simulator's blocks without its busy polling (issue 50)


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
        datasheet_bandwidth_gbps=datasheet_bandwidth_gbps(name),
        driver_version=_version_text(driver.driver.get_version()),
        cuda_version=_version_text(cudart.runtime.get_version()),  # NVRTC's, in numba-cuda 0.30 (see banner)
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
                # numba-cuda 0.30's runtime.get_version() is NVRTC's version: say so (gpu-path review, C16)
                " · ".join(facts) + f" · driver API {info.driver_version}, NVRTC {info.cuda_version}",
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
