"""Lesson 04's matmul once more, in Triton: one program per BLOCK_M×BLOCK_N tile of C, ``tl.dot`` on tiles.

This is the kernel learners read (``inspect.getsource(matmul_kernel)``) and the one every runner here
uses: the interpreter (``experiments.run_interpreted``) and the compiler (``compiled.compile_for``) each
decorate it themselves, because Triton decides at decoration time whether ``@triton.jit`` means
"compile" or "interpret" (``TRITON_INTERPRET``); a module-level decorator would fix one of the two.

Triton ships Linux wheels only: without it this module still imports (the lessons then show recordings),
and running or compiling says so in one line (``TritonMissing``).
"""

from __future__ import annotations  # the constexpr annotations stay strings: Triton reads "tl.constexpr"

from gpucourse.measure import tritonmode
from gpucourse.measure.tritonmode import TRITON_MISSING, TritonMissing

try:
    import triton.language as tl
except ImportError:  # macOS, Windows: no Triton wheel
    tl = None

BLOCK_M, BLOCK_N, BLOCK_K = 32, 32, 32  # interpreter tiles: NumPy runs every program, so keep them small
COMPILE_TILE = (128, 128, 64)  # compiled tiles: what a real fp16 GEMM uses on sm_80..sm_100


def triton_or_raise():
    """The ``triton`` module, or one line saying why there is none (the course's one refusal)."""
    if tl is None:  # this module's own import failed (or a test took it away)
        raise TritonMissing(TRITON_MISSING)
    return tritonmode.triton_or_raise()


def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """C = A @ B (C in fp32): this program's BLOCK_M×BLOCK_N tile of C, K in steps of BLOCK_K.

    Lesson 04's tiled kernel staged tiles in shared memory by hand, one thread per output; here a
    program is a whole block, a tile is one value and ``tl.dot`` multiplies two tiles on the tensor
    cores (Triton chooses the layouts, the shared-memory staging and the mma instructions). Edges:
    masked loads read 0 outside A and B, a masked store writes only inside C, so any M, N, K works.
    """
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    # tl.full, not tl.zeros: tl.zeros is itself a @triton.jit function, decorated (compile or
    # interpret) once when triton.language was imported, so it would pin this kernel to one mode
    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + ks
        a = tl.load(a_ptr + rows[:, None] * stride_am + k[None, :] * stride_ak,
                    mask=(rows[:, None] < M) & (k[None, :] < K), other=0.0)
        b = tl.load(b_ptr + k[:, None] * stride_bk + cols[None, :] * stride_bn,
                    mask=(k[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)  # fp16 in, fp32 accumulate: mma.sync / wgmma / tcgen05 by generation
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc,
             mask=(rows[:, None] < M) & (cols[None, :] < N))
