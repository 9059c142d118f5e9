"""What the compiler makes of lesson 04a's atomics, on the CPU (no GPU): numba-cuda's PTX and, where the CUDA
wheels' ``ptxas`` and a ``cuobjdump`` (the toolkit's, or the one Triton's wheel carries) are installed, the
SASS that ptxas writes for this GPU's sm_XY (sm_90 without a GPU), disassembled.

The microscope counts the atomics of the *source*: one per lane that runs ``cuda.atomic.add``. The
SASS shows what a GPU executes: for a same-address add, ptxas inserts a warp vote, elects a leader lane
and issues one atomic per warp (NVIDIA Developer Blog, "CUDA Pro Tip: Optimized Filtering with
Warp-Aggregated Atomics", 2017: the compiler "performs warp aggregation for atomics automatically in many
cases"). Counts here are static: instructions in the code, not executions.
"""

from __future__ import annotations

import functools
import subprocess

import pandas as pd

from gpucourse.lessons.reductions import kernels
from gpucourse.measure import ptxinfo, runtime
from gpucourse.measure.ptxinfo import find_cuobjdump, sass_of

DEFAULT_ARCH = 90  # without a GPU: Hopper, the course's recorded GPU

F1, I1 = "float32[::1]", "int32[::1]"
# (kernel name, what the source asks for, signature)
ATOMIC_KERNELS = (
    ("count_above_per_lane", "one atomic per passing lane, one address", f"void({F1}, float32, {I1})"),
    ("count_above_ballot", "ballot + popc, lane 0's atomic, one address", f"void({F1}, float32, {I1})"),
    ("compact_above_per_lane", "one atomic per passing lane, its result used", f"void({F1}, float32, {I1}, {F1})"),
    ("histogram_per_lane", "one atomic per lane, a different address per lane", f"void({F1}, {I1})"),
)
SASS_OPCODES = {"global atomics (REDG, ATOMG)": ("REDG", "ATOMG"), "votes (VOTE, VOTEU)": ("VOTE", "VOTEU"),
                "leader (UFLO, FLO)": ("UFLO", "FLO"), "popcounts (POPC)": ("POPC",), "shuffles (SHFL)": ("SHFL",)}




def _tool_version(path) -> str:
    text = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=30).stdout
    release = next((w for line in text.splitlines() for w in line.split(", ") if w.startswith("release")), "")
    return release.removeprefix("release ").strip() or "unknown version"


def _opcode(line: str) -> str | None:
    """The opcode of a cuobjdump -sass line ('/*01f0*/  @P0 REDG.E.ADD... ;' → 'REDG'), or None."""
    if not line.strip().startswith("/*") or "*/" not in line:
        return None
    words = line.split("*/", 1)[1].split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else None




def _ptx_atomics(ptx: str) -> int:
    return sum(1 for line in ptx.splitlines() if line.strip().startswith(("atom.global", "red.global")))


def target_arch() -> int:
    """The sm_XY to compile for: this GPU's compute capability, or DEFAULT_ARCH (sm_90) without a GPU."""
    if runtime.is_gpu():
        major, minor = runtime.device().compute_capability
        return 10 * int(major) + int(minor)
    return DEFAULT_ARCH


def _where(arch: int) -> str:
    """Where and for what the table was compiled, in words."""
    if runtime.is_gpu():
        return f"compiled on this machine for sm_{arch}, this GPU's compute capability ({runtime.device().name})"
    return f"compiled on this machine, no GPU, for sm_{arch}"


def atomics_as_compiled(arch: int | None = None) -> pd.DataFrame:
    """One row per kernel of ``ATOMIC_KERNELS``: the atomics in its PTX and, where the tools are here, the
    atomics, votes, leader elections, popcounts and shuffles in its SASS (static counts, in the code).
    ``arch``: sm_XY as XY; by default this GPU's, or sm_90 without one (``target_arch``).
    ``attrs["source"]`` names the tools and the arch; ``attrs["sass"]`` keeps each kernel's lines of interest."""
    return _atomics_as_compiled(target_arch() if arch is None else int(arch))


@functools.cache
def _atomics_as_compiled(arch: int) -> pd.DataFrame:
    compiled = ptxinfo.compile_ptx([(getattr(kernels, name), sig) for name, _, sig in ATOMIC_KERNELS],
                                   cc=divmod(arch, 10))
    have_sass = ptxinfo.find_ptxas() is not None and find_cuobjdump() is not None
    rows, excerpts = [], {}
    for (name, asks, _), result in zip(ATOMIC_KERNELS, compiled, strict=True):
        row = {"kernel": name, "the source asks for": asks,
               "PTX atomics (atom/red)": _ptx_atomics(result["ptx"]) if "ptx" in result else None}
        if have_sass and "ptx" in result:
            sass = sass_of(result["ptx"], arch)
            ops = [_opcode(line) for line in sass.splitlines()]
            for column, names in SASS_OPCODES.items():
                row[f"SASS {column}"] = sum(op in names for op in ops)
            wanted = {n for names in SASS_OPCODES.values() for n in names}
            excerpts[name] = [" ".join(line.split("*/", 1)[1].split(";")[0].split()) for line, op in
                              zip(sass.splitlines(), ops, strict=True) if op in wanted]
        rows.append(row)
    table = pd.DataFrame(rows)
    from importlib import metadata

    failed = [result["error"] for result in compiled if "ptx" not in result]
    try:
        ptx_tool = f"numba-cuda {metadata.version('numba-cuda')} compile_ptx for cc {arch // 10}.{arch % 10}"
    except metadata.PackageNotFoundError:
        failed = failed or ["numba-cuda is not installed"]
    if failed:  # macOS or Windows without the CUDA packages: say so, no traceback
        table.attrs["source"] = (f"numba-cuda cannot compile PTX here ({failed[0]}): the PTX and SASS counts need "
                                 "the CUDA packages; see the Nsight Compute recording below for what the GPU ran")
    elif have_sass:
        table.attrs["source"] = (f"{_where(arch)}: {ptx_tool}; ptxas "
                                 f"{_tool_version(ptxinfo.find_ptxas())} -arch=sm_{arch}; cuobjdump "
                                 f"{_tool_version(find_cuobjdump())} -sass. Static counts (in the code), "
                                 "not executions")
    else:
        table.attrs["source"] = (f"{_where(arch)}: {ptx_tool}. No SASS here (ptxas or cuobjdump "
                                 "is not installed): see the Nsight Compute recording below for what the GPU ran")
    table.attrs["sass"] = excerpts
    return table


atomics_as_compiled.cache_clear = _atomics_as_compiled.cache_clear  # the tests re-compile after changing the tools
