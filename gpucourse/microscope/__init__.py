"""The microscope: run one kernel launch in Numba's CUDA simulator and count what a GPU would do.

Numba's simulator runs kernels but hides what this course teaches: it has no warps, runs threads
one at a time (so races never show), and its timings mean nothing. ``trace()`` runs a launch under
instrumentation and reports, exactly and deterministically:

* global memory: each warp request (the 32 lanes' k-th execution of one line on one array), the
  32-byte sectors it touches, bytes requested vs fetched;
* shared memory: the bank-conflict degree of each warp access (32 banks × 4 bytes, broadcast);
* control flow: the active-lane mask of every line each warp executes, SIMT efficiency, paths;
* races: conflicting accesses no barrier or atomic orders, and — with ``schedule="random"`` or
  ``"round-robin"`` — the lost updates they cause;
* launches the hardware rejects (threads per block, dimensions, shared memory, partial syncthreads).

It works the same with or without a GPU (on a GPU machine the traced launch still runs in the
simulator, in this process). Warp intrinsics (``cuda.shfl_sync``, ``ballot_sync``, ``activemask``…)
work inside traced kernels; ``install_warp_intrinsics()`` adds them to plain simulator launches.

How to trace your own kernel::

    import numpy as np
    import gpucourse                      # decides GPU or simulator before numba is imported
    from numba import cuda
    from gpucourse import microscope

    @cuda.jit
    def copy_strided(out, a, stride):     # reach cuda through the module-level name `cuda`
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a[i * stride]

    a = np.arange(4096, dtype=np.float32)
    out = np.zeros(128, dtype=np.float32)
    report = microscope.trace(copy_strided, 2, 64, out, a, 2)  # griddim, blockdim, then the arguments
    report.sectors_per_request(array="a")         # 8.0: stride 2 touches twice the ideal 4 sectors
    report.memory()                               # a DataFrame per source line, array and op
    report.picture_sectors(array="a", warp=0)     # a plotly Figure: lanes × sectors
    p = microscope.profile(copy_strided, 2, 64, out, a, 2)   # the same, in Nsight Compute's words
    p.value("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum")  # 32: 4 warps × 8 sectors
    p.lines()                                     # per source line; p.notes(): how exact, and why

    @cuda.jit
    def histogram(values, bins):
        i = cuda.grid(1)
        if i < values.size:
            bins[values[i]] += 1                  # not atomic: updates get lost

    values = np.arange(512) % 4
    bins = np.zeros(4, dtype=np.int64)
    racy = microscope.trace(histogram, 2, 256, values, bins, schedule="random", seed=1)
    bins.sum()                                    # < 512: the race scheduler interleaved the += 1
    racy.races()                                  # line_a, line_b, array, kind... of each conflict

Keep launches small (at most ``MAX_THREADS`` = 4096 threads are traced; more is refused before
running): the counts per warp request do not depend on the grid size.

Model notes: lanes are aligned by the k-th execution of each source line, i.e. a warp reconverges
at every line; ``activemask()`` returns the lanes that reach the same call together. Uninitialised
shared and local arrays read NaN (floats) or 0, the same every run.
"""

from gpucourse.microscope.errors import (
    BarrierError,
    KernelArgumentError,
    LaunchConfigError,
    MicroscopeError,
    TraceTooLarge,
    WarpSyncError,
)
from gpucourse.microscope.launch import MAX_LINES, MAX_THREADS, profile, trace
from gpucourse.microscope.limits import ARCHS, check_shared_memory, validate_launch
from gpucourse.microscope.memory import MemorySystem
from gpucourse.microscope.nsight import Profile
from gpucourse.microscope.pictures import OKABE_ITO
from gpucourse.microscope.report import Report
from gpucourse.microscope.warp import FULL_MASK, install_warp_intrinsics

__all__ = [
    "ARCHS",
    "FULL_MASK",
    "MAX_LINES",
    "MAX_THREADS",
    "OKABE_ITO",
    "Profile",
    "BarrierError",
    "KernelArgumentError",
    "LaunchConfigError",
    "MemorySystem",
    "MicroscopeError",
    "Report",
    "TraceTooLarge",
    "WarpSyncError",
    "check_shared_memory",
    "install_warp_intrinsics",
    "profile",
    "trace",
    "validate_launch",
]
