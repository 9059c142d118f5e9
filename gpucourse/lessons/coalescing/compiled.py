"""What the compiler makes of lesson 03's copies, on the CPU (no GPU): numba-cuda's PTX and, where the CUDA
wheels' ``ptxas`` and a ``cuobjdump`` (the toolkit's, or the one Triton's wheel carries) are installed, the
SASS ptxas writes for sm_90: how wide each global load is, and whether the four loads come before the stores.

    LDG.E      a 32-bit global load (one float32)
    LDG.E.64   a 64-bit global load (a float64 lane: two float32)
    LDG.E.128  a 128-bit global load (CUDA C's float4): numba-cuda's array indexing never emits one (an
               ``@intrinsic`` loading ``<4 x float>`` with 16-byte alignment does; no lesson kernel uses one)

Counts are static: instructions in the code, not executions.
"""

from __future__ import annotations

import functools
import re

import pandas as pd

from gpucourse.lessons.coalescing import kernels, wide
from gpucourse.measure import ptxinfo
from gpucourse.measure.ptxinfo import find_cuobjdump, sass_of

F4, F8, C16 = "float32[::1]", "float64[::1]", "complex128[::1]"
# (rung label, kernel name, signature)
COPY_KERNELS = (
    ("1 × 4 B: strided_copy", "strided_copy", f"void({F4}, {F4}, int64, int64, int64)"),
    ("4 × 4 B: copy_ilp4", "copy_ilp4", f"void({F4}, {F4}, int64, int64, int64)"),
    ("1 × 8 B: strided_copy on a float64 view", "strided_copy", f"void({F8}, {F8}, int64, int64, int64)"),
    ("4 × 8 B: best_copy on a float64 view", "best_copy", f"void({F8}, {F8}, int64)"),
    ("1 × 16 B? strided_copy on a complex128 view", "strided_copy", f"void({C16}, {C16}, int64, int64, int64)"),
    ("1 × 16 B: copy4 through an @intrinsic (wide.py, not a lesson kernel)", "copy4", f"void({F4}, {F4})"),
)
_LDG = re.compile(r"\bLDG\.E(\.64|\.128)?\b")
_STG = re.compile(r"\bSTG\.E(\.64|\.128)?\b")






def memory_ops(sass: str) -> list[str]:
    """The global loads and stores of a SASS listing, in code order: 'LDG.E.64', 'STG.E', …"""
    ops = []
    for line in sass.splitlines():
        if "*/" not in line:
            continue
        text = line.split("*/", 1)[1]
        found = _LDG.search(text) or _STG.search(text)
        if found:
            ops.append(found.group(0))
    return ops


def longest_load_run(ops: list[str]) -> int:
    """The most global loads the code issues in a row with no store between them: how many a thread can have
    in flight at once (4 for the hand-hoisted copies; 1 where each load is followed by its store)."""
    best = run = 0
    for op in ops:
        run = run + 1 if op.startswith("LDG") else 0
        best = max(best, run)
    return best


@functools.cache
def loads_as_compiled(arch: int = 90) -> pd.DataFrame:
    """One row per rung of ``COPY_KERNELS``: PTX global loads by width and, where the tools are here, the SASS
    loads by width and how many loads precede the first store. ``attrs["source"]`` names the tools."""
    compiled = ptxinfo.compile_ptx([(getattr(kernels, name, None) or getattr(wide, name), sig)
                                    for _, name, sig in COPY_KERNELS],
                                   cc=divmod(arch, 10))
    have_sass = ptxinfo.find_ptxas() is not None and find_cuobjdump() is not None
    rows = []
    for (label, _, _), result in zip(COPY_KERNELS, compiled, strict=True):
        row = {"rung": label}
        if "ptx" in result:
            ptx_loads = [line.split()[0] for line in result["ptx"].splitlines() if line.strip().startswith("ld.global")]
            row["PTX loads"] = ", ".join(sorted(set(ptx_loads)))
        if have_sass and "ptx" in result:
            ops = memory_ops(sass_of(result["ptx"], arch))
            for width in ("LDG.E", "LDG.E.64", "LDG.E.128"):
                row[f"SASS {width}"] = ops.count(width)
            row["loads in a row (most)"] = longest_load_run(ops)
        rows.append(row)
    table = pd.DataFrame(rows)
    failed = [result["error"] for result in compiled if "ptx" not in result]
    if failed:
        table.attrs["source"] = f"numba-cuda cannot compile PTX here ({failed[0]}): the counts need the CUDA packages"
    elif have_sass:
        table.attrs["source"] = (f"compiled on this machine, no GPU: numba-cuda compile_ptx for cc {arch // 10}."
                                 f"{arch % 10}; ptxas -arch=sm_{arch}; cuobjdump -sass. Static counts (in the code)")
    else:
        table.attrs["source"] = (f"compiled on this machine, no GPU: numba-cuda compile_ptx for cc {arch // 10}."
                                 f"{arch % 10}. No SASS here (ptxas or cuobjdump is not installed)")
    return table
