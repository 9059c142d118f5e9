"""The Triton matmul compiled without a GPU for three tensor-core generations, read as plain facts.

``compile_for(90)`` runs ``triton.compile(ASTSource(matmul_kernel, ...), target=GPUTarget("cuda", 90, 32))``
(Triton's own LLVM and ptxas, no driver), then ``cuobjdump`` (the toolkit's or the one in Triton's wheel,
``measure.ptxinfo.find_cuobjdump``) on the cubin for the SASS and its resource usage. It returns counts of
the PTX instructions and SASS opcodes of interest (``model.PTX_OF_INTEREST``, ``model.SASS_OF_INTEREST``),
registers per thread, spill stack, and the shared memory the launch needs. Results are cached per
process: one compile takes a few seconds.
"""

from __future__ import annotations

import functools
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from gpucourse.errors import InvalidConfig
from gpucourse.hardware import WARP_SIZE
from gpucourse.lessons.tensorcores import kernels
from gpucourse.lessons.tensorcores.model import (
    COMPILED_DTYPES,
    GENERATIONS,
    PTX_OF_INTEREST,
    SASS_OF_INTEREST,
    TRITON_TYPES,
    check_block,
)
from gpucourse.measure import ptxinfo

CUOBJDUMP_TIMEOUT_S = 120
UNIT_STRIDES = ("stride_ak", "stride_bn", "stride_cn")  # row-major A, B, C
_PTX_INSTRUCTION = re.compile(r"^\s*(?:@!?%\w+\s+)?([a-z][\w.:]*)", re.MULTILINE)
_SASS_INSTRUCTION = re.compile(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P[T\d]+\s+)?([A-Z][A-Z0-9_]*(?:\.[\w]+)*)")
_RESOURCES = re.compile(r"REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)\s+LOCAL:(\d+)")


@dataclass(frozen=True)
class CompiledFacts:
    """What ``matmul_kernel`` becomes on one compute capability, with one tile and dtype."""

    cc: int
    generation: str
    dtype: str
    tile: tuple[int, int, int]
    num_warps: int
    num_stages: int
    ptx: dict = field(default_factory=dict)  # instruction of interest -> how many in the PTX
    sass: dict = field(default_factory=dict)  # opcode family of interest -> how many in the SASS
    mma_opcodes: tuple[str, ...] = ()  # the full tensor-core SASS opcodes, e.g. HMMA.16816.F32
    registers: int | None = None  # per thread (cuobjdump -res-usage)
    stack_bytes: int | None = None  # local memory per thread: spills live here
    shared_bytes: int = 0  # what the launch needs (Triton's metadata: all stages' tiles)
    tmem_columns: int = 0  # tensor memory Triton allocates (sm_100 only)
    triton_version: str = ""
    seconds: float = 0.0  # wall time of the compile and disassembly (first call; cached after)

    def summary(self) -> str:
        parts = [f"{k} ×{v}" for k, v in {**self.ptx, **self.sass}.items()]
        return (f"sm_{self.cc} {self.dtype} tile {'×'.join(map(str, self.tile))}: {', '.join(parts)}; "
                f"{self.registers} registers, {self.shared_bytes} B shared")


def check_cc(cc) -> int:
    """80, 90 or 100 (also accepted: "sm_90", (9, 0))."""
    value = cc
    if isinstance(cc, str):
        value = cc.removeprefix("sm_").rstrip("a")
    elif isinstance(cc, tuple) and len(cc) == 2:
        value = cc[0] * 10 + cc[1]
    try:
        value = int(value)
    except (TypeError, ValueError):
        value = None
    if value not in GENERATIONS:
        raise InvalidConfig(f"cc must be one of {', '.join(map(str, GENERATIONS))} (sm_80, sm_90, sm_100), got {cc!r}")
    return value


def _classify(opcodes, of_interest) -> dict:
    counts = {}
    for opcode in opcodes:
        matches = [m for m in of_interest if opcode == m or opcode.startswith(m + ".")]
        if matches:
            best = max(matches, key=len)
            counts[best] = counts.get(best, 0) + 1
    return {name: counts[name] for name in of_interest if name in counts}


def ptx_counts(ptx: str) -> dict:
    """Instruction of interest -> count in PTX text (each instruction counted once, by its longest match)."""
    return _classify(_PTX_INSTRUCTION.findall(ptx), PTX_OF_INTEREST)


def sass_opcodes(sass: str) -> list[str]:
    """Every instruction's opcode in ``cuobjdump -sass`` text, in order."""
    return _SASS_INSTRUCTION.findall(sass)


def _cuobjdump(cubin: bytes) -> tuple[str, str]:
    tool = ptxinfo.find_cuobjdump()
    if tool is None:
        raise kernels.TritonMissing("no cuobjdump (neither the CUDA toolkit's nor Triton's): no SASS to read")
    with tempfile.TemporaryDirectory(prefix="gpucourse-triton-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        sass, usage = (subprocess.run([str(tool), flag, str(path)], check=True, capture_output=True, text=True,
                                      timeout=CUOBJDUMP_TIMEOUT_S).stdout for flag in ("-sass", "-res-usage"))
    return sass, usage


def _compiled(cc: int, dtype: str, tile: tuple[int, int, int], num_warps: int, num_stages: int):
    triton = kernels.triton_or_raise()
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    with knobs.runtime.scope():  # a compiled kernel, even in a process started with TRITON_INTERPRET=1
        knobs.runtime.interpret = False
        jitted = triton.jit(kernels.matmul_kernel)
    element = "*" + TRITON_TYPES[dtype]
    signature = {"a_ptr": element, "b_ptr": element, "c_ptr": "*fp32",
                 **{name: "i32" for name in ("M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn",
                                             "stride_cm", "stride_cn")},
                 "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "BLOCK_K": "constexpr"}
    constexprs = dict(zip(("BLOCK_M", "BLOCK_N", "BLOCK_K"), tile, strict=True))
    # As Triton specializes a launch on contiguous, 16-byte-aligned matrices with sizes that are multiples
    # of 16 (e.g. 4096³): unit strides become the constant 1, the rest are known multiples of 16. Without
    # this the compiler cannot vectorise or pipeline the loads (2-byte LDGs, one stage, spills).
    for name in UNIT_STRIDES:
        signature[name], constexprs[name] = "constexpr", 1
    attrs = {(jitted.arg_names.index(name),): [["tt.divisibility", 16]]
             for name, kind in signature.items() if kind != "constexpr"}
    source = ASTSource(fn=jitted, signature=signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(source, target=GPUTarget("cuda", cc, WARP_SIZE),
                          options={"num_warps": num_warps, "num_stages": num_stages})


def compile_for(cc, dtype: str = "float16", tile=kernels.COMPILE_TILE, num_warps: int = 4,
                num_stages: int = 3) -> CompiledFacts:
    """Compile ``kernels.matmul_kernel`` for compute capability ``cc`` (80, 90, 100) without a GPU and
    return what it became: tensor-core PTX and SASS, registers, shared memory (see ``CompiledFacts``).
    Cached per process (the same request twice compiles once)."""
    return _facts(*check_config(cc, dtype, tile, num_warps, num_stages))


def check_config(cc, dtype: str = "float16", tile=kernels.COMPILE_TILE, num_warps: int = 4,
                 num_stages: int = 3) -> tuple[int, str, tuple[int, int, int], int, int]:
    """``compile_for``'s checks, for every path (compiled now, recorded, in a fresh process): (cc, dtype, tile,
    warps, stages) or one clear error before anything compiles."""
    cc = check_cc(cc)
    if dtype not in COMPILED_DTYPES:
        raise InvalidConfig(f"dtype must be one of {', '.join(COMPILED_DTYPES)}, got {dtype!r}")
    tile = check_block(tile)
    if num_warps not in (1, 2, 4, 8, 16) or num_stages not in range(1, 8):
        raise InvalidConfig(f"num_warps must be 1, 2, 4, 8 or 16 and num_stages 1 to 7, got {num_warps}, {num_stages}")
    return cc, dtype, tile, num_warps, num_stages


@functools.cache
def _facts(cc: int, dtype: str, tile: tuple[int, int, int], num_warps: int, num_stages: int) -> CompiledFacts:
    start = time.perf_counter()
    compiled = _compiled(cc, dtype, tile, num_warps, num_stages)
    sass, usage = _cuobjdump(compiled.asm["cubin"])
    opcodes = sass_opcodes(sass)
    resources = _RESOURCES.search(usage)
    mma_families = GENERATIONS[cc].sass + ("HMMA", "HGMMA", "UTCHMMA")
    import triton

    return CompiledFacts(
        cc=cc, generation=GENERATIONS[cc].name, dtype=dtype, tile=tile, num_warps=num_warps, num_stages=num_stages,
        ptx=ptx_counts(compiled.asm["ptx"]), sass=_classify(opcodes, SASS_OF_INTEREST),
        mma_opcodes=tuple(sorted({op for op in opcodes if op.split(".")[0] in mma_families})),
        registers=int(resources.group(1)) if resources else None,
        stack_bytes=int(resources.group(2)) if resources else None,
        shared_bytes=int(compiled.metadata.shared), tmem_columns=int(getattr(compiled.metadata, "tmem_size", 0) or 0),
        triton_version=triton.__version__, seconds=round(time.perf_counter() - start, 2))
