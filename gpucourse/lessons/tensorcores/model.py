"""What the tensor-core lesson checks and knows: its inputs, the dtypes each path accepts, and what each
GPU generation's tensor-core instructions are called in PTX and in SASS.

Generations (the generation is named on every claim; the compiled facts come from ``compiled.compile_for``):

* sm_80 (Ampere; also sm_86/89/120 consumer parts): ``mma.sync`` — a *warp* multiplies register fragments
  (``gpucourse.microscope.fragments`` says which lane holds what), fed from shared memory by ``ldmatrix``;
  SASS ``HMMA``.
* sm_90a (Hopper): ``wgmma.mma_async`` — a *warpgroup* (4 warps) multiplies, B (and optionally A) read
  straight from shared memory through descriptors, asynchronously; SASS ``HGMMA``.
* sm_100a (datacenter Blackwell): ``tcgen05.mma`` — *one thread* issues for the CTA, the accumulator lives
  in tensor memory (TMEM, ``tcgen05.ld`` brings it back), completion through ``mbarrier``; SASS ``UTCHMMA``.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import numpy as np

from gpucourse.errors import InvalidConfig

INTERPRETED_DTYPES = ("float16", "float32")
COMPILED_DTYPES = ("float16", "bfloat16", "float32")
TRITON_TYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}
BF16_REFUSAL = ("bfloat16 is refused in Triton's interpreter: it computes bf16 tl.dot silently wrong "
                "(Triton 3.7.1: errors of ~1e10 where fp16 is exact); use float16 or float32 here, or "
                "compile_for(cc, dtype='bfloat16') to read what a GPU would run")
INTERPRET_MAX_DIM = 256  # the interpreter runs each program in NumPy: 256³ takes seconds, 512³ about a minute


@dataclass(frozen=True)
class Generation:
    cc: int
    name: str
    issued_by: str
    ptx: tuple[str, ...]  # the tensor-core PTX instructions Triton emits for tl.dot here
    sass: tuple[str, ...]  # and their SASS opcodes


GENERATIONS = {
    80: Generation(80, "Ampere (sm_80)", "a warp (32 lanes, register fragments)", ("mma.sync", "ldmatrix"),
                   ("HMMA",)),
    90: Generation(90, "Hopper (sm_90a)", "a warpgroup (4 warps, operands in shared memory)",
                   ("wgmma.mma_async",), ("HGMMA",)),
    100: Generation(100, "Blackwell (sm_100a)", "one thread for the CTA (accumulator in tensor memory)",
                    ("tcgen05.mma",), ("UTCHMMA",)),
}

# What compile_for counts: each PTX instruction goes to the longest of these its opcode starts with
# (so cp.async.bulk.tensor, TMA, is not also counted as cp.async, Ampere's async copy).
PTX_OF_INTEREST = ("mma.sync", "ldmatrix", "wgmma.mma_async", "wgmma.wait_group", "tcgen05.mma", "tcgen05.ld",
                   "tcgen05.alloc", "cp.async", "cp.async.commit_group", "cp.async.wait_group",
                   "cp.async.bulk.tensor", "mbarrier")
# SASS opcode families: HMMA (mma.sync), HGMMA (wgmma), UTCHMMA (tcgen05.mma), LDSM (ldmatrix),
# LDGSTS (cp.async), UTMALDG (TMA load), SYNCS (mbarrier), LDTM (tensor memory -> registers)
SASS_OF_INTEREST = ("HMMA", "HGMMA", "UTCHMMA", "LDSM", "LDGSTS", "UTMALDG", "SYNCS", "LDTM")


def dtype_name(x) -> str:
    """'float16', 'bfloat16', 'float32'...: the element type of a NumPy array or a torch tensor."""
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        raise InvalidConfig(f"expected a NumPy array or a torch tensor, got {type(x).__name__}")
    return str(dtype).removeprefix("torch.")


def check_operands(a, b) -> tuple[str, tuple[int, int, int]]:
    """(dtype, (M, N, K)) of C = A @ B for the interpreter, or one line saying what is wrong, before any launch."""
    for name, x in (("A", a), ("B", b)):
        if len(getattr(x, "shape", ())) != 2:
            raise InvalidConfig(f"{name} must be a 2-D matrix, got shape {tuple(getattr(x, 'shape', ()))}")
        check_storage(name, x)
    (m, k), (k2, n) = tuple(a.shape), tuple(b.shape)
    if k != k2:
        raise InvalidConfig(f"A is {m}×{k} and B is {k2}×{n}: A's columns must equal B's rows")
    if min(m, n, k) < 1:
        raise InvalidConfig(f"A and B must not be empty, got {m}×{k} and {k2}×{n}")
    if max(m, n, k) > INTERPRET_MAX_DIM:
        raise InvalidConfig(f"the interpreter runs in NumPy: keep M, N, K ≤ {INTERPRET_MAX_DIM}, got {m}, {n}, {k}")
    dtypes = {dtype_name(a), dtype_name(b)}
    if len(dtypes) != 1:
        raise InvalidConfig(f"A and B must have the same dtype, got {' and '.join(sorted(dtypes))}")
    dtype = dtypes.pop()
    if dtype == "bfloat16":
        raise InvalidConfig(BF16_REFUSAL)
    if dtype not in INTERPRETED_DTYPES:
        raise InvalidConfig(f"dtype must be one of {', '.join(INTERPRETED_DTYPES)}, got {dtype}")
    return dtype, (m, n, k)


def check_storage(name: str, x) -> None:
    """Refuse, before launch, matrices whose elements the kernel cannot read as they look: a NumPy masked array
    (the kernel would read the masked values too), a torch tensor without data (``meta``) or not strided (sparse)."""
    if isinstance(x, np.ma.MaskedArray):
        raise InvalidConfig(f"{name} is a masked array: the kernel would read its masked values too; pass "
                            f"{name}.filled(0) (or another fill) instead")
    layout = str(getattr(x, "layout", "torch.strided"))
    if layout != "torch.strided":
        raise InvalidConfig(f"{name} must be a dense tensor (the kernel walks strides), got layout {layout}; "
                            f"use {name}.to_dense()")
    device = getattr(x, "device", None)
    if getattr(device, "type", "cpu") not in ("cpu", "cuda"):
        raise InvalidConfig(f"{name} must hold its data on the CPU (or a GPU, copied back), got device {device}")


def _integer(x) -> int:
    if isinstance(x, bool):  # True is an int to Python, never a tile
        raise TypeError("a bool is not a tile size")
    return operator.index(x)  # ints and NumPy integers; floats raise


def check_block(block) -> tuple[int, int, int]:
    """BLOCK_M, BLOCK_N, BLOCK_K: powers of two from 16 (tl.dot's smallest tile) to 256, as integers (16.5 is
    refused, not rounded)."""
    try:
        parts = tuple(_integer(x) for x in block)
    except (TypeError, ValueError) as error:
        raise InvalidConfig(f"block must be (BLOCK_M, BLOCK_N, BLOCK_K), three integers, got {block!r}") from error
    if len(parts) != 3 or any(p < 16 or p > 256 or p & (p - 1) for p in parts):
        raise InvalidConfig(f"block must be three powers of two from 16 to 256 (tl.dot's tiles), got {block!r}")
    return parts
