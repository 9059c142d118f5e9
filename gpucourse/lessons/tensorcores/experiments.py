"""Run the Triton matmul without a GPU: Triton's interpreter executes every program in NumPy.

``run_interpreted(a, b)`` checks its inputs first (2-D, matching K, float16 or float32, not too large),
then decorates ``kernels.matmul_kernel`` with ``triton.jit`` while the ``TRITON_INTERPRET`` knob is on,
which gives Triton's ``InterpretedFunction``: the same thing ``TRITON_INTERPRET=1`` gives at import,
in this process, without changing how later compiles behave (the knob is restored at once).

bfloat16 is refused before launch: the interpreter computes bf16 ``tl.dot`` silently wrong (see
``tests/test_tensorcores.py``, which keeps reproducing it so that a Triton that fixes it is noticed).
The interpreter also computes fp32 ``tl.dot`` in full fp32, whereas a GPU's default is TF32
(``input_precision="tf32"``): the compiled sm_80 kernel uses ``mma ... .tf32``.
"""

from __future__ import annotations

import functools

import numpy as np

from gpucourse.lessons.tensorcores import kernels
from gpucourse.lessons.tensorcores.model import check_block, check_operands
from gpucourse.measure import tritonmode


@functools.cache
def interpreted_kernel():
    """``kernels.matmul_kernel`` as Triton's interpreter runs it (decorated once per process)."""
    triton = kernels.triton_or_raise()
    from triton import knobs

    tritonmode.fix_interpreter()  # Triton 3.6 (CUDA 12 lock) with NumPy 2.4: loops over K fail without it
    with knobs.runtime.scope():  # restores the knob (and TRITON_INTERPRET) on leaving
        knobs.runtime.interpret = True
        return triton.jit(kernels.matmul_kernel)


def _torch():
    try:
        import torch
    except ImportError as error:  # Triton's interpreter takes torch tensors
        raise kernels.TritonMissing("Triton's interpreter needs PyTorch, which is not installed") from error
    return torch


def _interpret(a, b, block) -> np.ndarray:
    """Launch the interpreted kernel on torch tensors a (M×K) and b (K×N); C in fp32. No checks: the
    callers check (the bf16 test calls this directly to show what the interpreter computes)."""
    torch = _torch()
    triton = kernels.triton_or_raise()
    (m, k), n = a.shape, b.shape[1]
    c = torch.empty((m, n), dtype=torch.float32)
    block_m, block_n, block_k = block
    grid = (triton.cdiv(m, block_m), triton.cdiv(n, block_n))
    interpreted_kernel()[grid](a, b, c, m, n, k, *a.stride(), *b.stride(), *c.stride(),
                               BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k)
    return c.numpy()


def run_interpreted(a, b, block=(kernels.BLOCK_M, kernels.BLOCK_N, kernels.BLOCK_K)) -> np.ndarray:
    """C = A @ B (float32) computed by the Triton kernel in Triton's interpreter. ``a``, ``b``: NumPy arrays
    or torch tensors, float16 or float32, any M, N, K up to ``INTERPRET_MAX_DIM`` (masks handle the edges)."""
    check_operands(a, b)
    block = check_block(block)
    kernels.triton_or_raise()  # no Triton is the refusal to give first (torch missing too: macOS without it)
    torch = _torch()
    a_t, b_t = (x if isinstance(x, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(x)) for x in (a, b))
    return _interpret(a_t.cpu(), b_t.cpu(), block)
