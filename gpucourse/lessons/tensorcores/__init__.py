"""Lesson "Tensor cores from Python" (library part): lesson 04's matmul written in Triton with ``tl.dot``.

* ``kernels.matmul_kernel``: the kernel (masked loads, any M, N, K), undecorated: each runner decorates it;
* ``run_interpreted(a, b)``: run it without a GPU in Triton's interpreter (float16/float32; bfloat16 refused:
  the interpreter computes it wrong);
* ``compile_for(cc)``: compile it without a GPU for sm_80 (``mma.sync``/``HMMA``), sm_90 (``wgmma``/``HGMMA``)
  or sm_100 (``tcgen05.mma``/``UTCHMMA``) and read the facts; ``generations_table()`` puts the three side by side;
  ``facts_in_fresh_process([...])``: the same facts from a child process no notebook reaches (lab 12's grader);
* which lane holds which element of an ``mma.sync``: ``gpucourse.microscope.fragments``.
"""

from __future__ import annotations

from gpucourse.lessons.tensorcores.compiled import CompiledFacts, check_cc, compile_for, ptx_counts, sass_opcodes
from gpucourse.lessons.tensorcores.experiments import interpreted_kernel, run_interpreted
from gpucourse.lessons.tensorcores.figures import generations_table
from gpucourse.lessons.tensorcores.fresh import facts_in_fresh_process
from gpucourse.lessons.tensorcores.kernels import (
    BLOCK_K,
    BLOCK_M,
    BLOCK_N,
    COMPILE_TILE,
    TritonMissing,
    matmul_kernel,
    triton_or_raise,
)
from gpucourse.lessons.tensorcores.model import (
    BF16_REFUSAL,
    COMPILED_DTYPES,
    GENERATIONS,
    INTERPRET_MAX_DIM,
    INTERPRETED_DTYPES,
    Generation,
    check_block,
    check_operands,
    dtype_name,
)

__all__ = [
    "BF16_REFUSAL", "BLOCK_K", "BLOCK_M", "BLOCK_N", "COMPILED_DTYPES", "COMPILE_TILE", "GENERATIONS",
    "INTERPRETED_DTYPES", "INTERPRET_MAX_DIM", "CompiledFacts", "Generation", "TritonMissing", "check_block",
    "check_cc", "check_operands", "compile_for", "dtype_name", "generations_table", "interpreted_kernel",
    "matmul_kernel", "ptx_counts", "run_interpreted", "sass_opcodes", "triton_or_raise",
]
