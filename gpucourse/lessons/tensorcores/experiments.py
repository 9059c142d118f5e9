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


# --- on a GPU: the compiled kernel timed against torch.matmul (cuBLAS) --------------------------------------

LIVE_N = 4096  # the widget's size: large enough for the tensor cores to be the limit (lesson 00's roofline)


@functools.cache
def compiled_kernel():
    """``kernels.matmul_kernel`` compiled for this GPU (``triton.jit`` with the interpreter knob off)."""
    triton = kernels.triton_or_raise()
    from triton import knobs

    with knobs.runtime.scope():
        knobs.runtime.interpret = False
        return triton.jit(kernels.matmul_kernel)


def measure_against_torch(n: int = LIVE_N, dtype: str = "float16", tile=(128, 128, 64), num_warps: int = 4,
                          num_stages: int = 3):
    """(Triton's measurement, torch.matmul's) of an n³ matmul on this GPU with the course's harness (under
    a LiveChart: the live contract), both checked against each other first; None without a GPU."""
    from gpucourse.errors import InvalidConfig
    from gpucourse.measure import runtime
    from gpucourse.measure.harness import measure

    block = check_block(tile)  # bad input says so first, with or without a GPU
    if dtype not in ("float16", "bfloat16"):
        raise InvalidConfig(f"the GPU comparison takes float16 or bfloat16, got {dtype!r}")
    if not isinstance(n, int) or n < 1 or n % max(block) or n > 16384:
        raise InvalidConfig(f"n must be a multiple of the largest tile side ({max(block)}) up to 16384, got {n}")
    if num_warps not in (4, 8) or num_stages not in range(1, 8):
        raise InvalidConfig(f"num_warps must be 4 or 8 and num_stages 1 to 7, got {num_warps}, {num_stages}")
    if not runtime.is_gpu():
        return None
    torch = _torch()
    triton = kernels.triton_or_raise()
    gen = torch.Generator(device="cuda").manual_seed(0)
    work = getattr(torch, dtype)
    a = torch.randn(n, n, device="cuda", generator=gen).to(work)
    b = torch.randn(n, n, device="cuda", generator=gen).to(work)
    c = torch.empty(n, n, device="cuda", dtype=torch.float32)
    grid = (triton.cdiv(n, block[0]), triton.cdiv(n, block[1]))
    kernel = compiled_kernel()
    out = {}

    def run_triton():
        kernel[grid](a, b, c, n, n, n, *a.stride(), *b.stride(), *c.stride(), BLOCK_M=block[0], BLOCK_N=block[1],
                     BLOCK_K=block[2], num_warps=num_warps, num_stages=num_stages)

    def run_torch():
        out["c"] = torch.matmul(a, b)

    def agree():
        return bool(torch.allclose(c[:256, :256], out["c"][:256, :256].float(), rtol=2e-2, atol=1e-1))

    run_triton()
    run_torch()
    flops = 2 * n**3
    label = f"{dtype} {n}³ tile {'×'.join(map(str, block))} s{num_stages} w{num_warps}"
    theirs = measure(run_torch, label=f"torch.matmul {dtype} {n}³", flops=flops)
    ours = measure(run_triton, label=f"Triton {label}", check=agree, flops=flops)
    return ours, theirs
