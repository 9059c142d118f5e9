"""The attention lesson's runners: the Triton FlashAttention forward (interpreted without a GPU), checked against
``torch.nn.functional.scaled_dot_product_attention``, and its interpreter's run times.

``flash_attention(q, k, v, causal=..., block_m=..., block_n=...)`` takes torch tensors of shape (batch, heads, n,
d) and returns (O, logsumexp). Every check happens before launch, each with one clear line: Triton present and
able to interpret; same shape, dtype and device for q, k, v; a head dimension and tiles from the kernel's lists;
fp16 or fp32 in the interpreter (bf16 is refused there: Triton's interpreter computes a bf16 ``tl.dot`` silently
wrong, max error ~5e10 in Triton 3.7.1 and 3.9.0, review tensor-cores-from-python.md §3); and, in the interpreter,
a size it finishes in seconds. Any sequence length is allowed: the kernel masks the last partial tiles.
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
import time

from gpucourse.errors import InvalidConfig
from gpucourse.lessons.attention import kernels
from gpucourse.lessons.attention.kernels import HEAD_DIMS, TILE_SIZES
from gpucourse.lessons.attention.model import check_tile
from gpucourse.measure import runtime, tritonmode
from gpucourse.measure.tritonmode import TRITON_MISSING

LOG2E = 1.4426950408889634
# The interpreter runs every program one after another in NumPy: about a second for n = 256, d = 64 (65,536
# scores) on one CPU core, and ~20 s for n = 1024. Beyond this many scores per launch (batch·heads·n²): refused.
MAX_INTERPRETED_SCORES = 4 * 256 * 256
# The kernel's offsets (bh · stride_qh + row · stride_qn + dim) are 32-bit: from 2³¹ elements per tensor they wrap.
MAX_ELEMENTS = 2**31 - 1
INTERPRETED_DTYPES = ("float16", "float32")
WARP_COUNTS = (1, 2, 4, 8, 16)  # warps per program on a GPU: a power of two (Triton), at most 512 threads here
MAX_STAGES = 6
COMPILED_DTYPES = ("float16", "bfloat16", "float32")
BF16_REFUSED = ("bf16 is refused in Triton's interpreter: it computes a bf16 tl.dot silently wrong (errors of "
                "~5e10 in Triton 3.7.1 and 3.9.0). Use float16 or float32 here; bf16 runs on a GPU")


def _torch():
    import torch  # the lesson's tensors; imported on first use so the model imports without it

    return torch


@functools.cache
def interpreted_kernel():
    """``kernels.flash_forward_kernel`` as Triton's interpreter runs it (decorated once per process), as lesson
    "Tensor cores from Python" decorates its matmul: the knob on for the decoration only, restored at once."""
    from triton import knobs

    tritonmode.fix_interpreter()  # Triton 3.6 (CUDA 12 lock) with NumPy 2.4: the loop over K and V fails without it
    with knobs.runtime.scope():
        knobs.runtime.interpret = True
        return kernels.triton.jit(kernels.flash_forward_kernel)


@functools.cache
def compiled_kernel():
    """The same kernel for a GPU, even in a process started with TRITON_INTERPRET=1."""
    from triton import knobs

    with knobs.runtime.scope():
        knobs.runtime.interpret = False
        return kernels.triton.jit(kernels.flash_forward_kernel)


_LANGUAGE_LOCK = threading.Lock()


def _restoring_interpreted(fn):
    """``fn`` (one of Triton's helpers) as the interpreter calls it from a kernel, leaving the language as it found
    it. Triton 3.7's ``InterpretedFunction.__call__`` patches ``triton.language.core`` for the call and never puts
    it back, so a later compile in the same process fails (``'ir.value' object has no attribute 'dtype'``)."""
    from triton.runtime import interpreter

    class Restoring(interpreter.InterpretedFunction):
        def __call__(self, *args, **kwargs):
            scope = interpreter._patch_lang(self.fn)
            try:
                return self.rewrite()(*args, **kwargs)
            except Exception as error:
                raise interpreter.InterpreterError(repr(error)) from error
            finally:
                scope.restore()

    return Restoring(fn)


@contextlib.contextmanager
def interpretable_language():
    """During an interpreted launch, Triton's own @triton.jit helpers that a kernel calls (``tl.max``, ``tl.sum``,
    ``tl.zeros``, …) as the interpreter can call them; put back on leaving.

    Triton builds those helpers once, when ``triton.language`` is imported, compiled or interpreted by
    ``TRITON_INTERPRET`` at that moment; the interpreter cannot call a compiled one ("Cannot call @triton.jit'd
    outside of the scope of a kernel"). The matmul of "Tensor cores from Python" avoids them (``tl.full`` for
    ``tl.zeros``); a softmax needs a row maximum and a row sum, so here they are wrapped for the launch instead,
    and the process can still compile the same kernel afterwards (tests/test_attention_triton.py)."""
    from triton.runtime.jit import JITFunction

    # The first launch imports Gluon, which checks that Triton's helpers are compiled ones: import it first.
    with contextlib.suppress(ImportError):
        import triton.experimental.gluon  # noqa: F401
    tl = kernels.tl  # the names a kernel calls; the helpers' own modules (tl.standard) stay as built
    with _LANGUAGE_LOCK:
        saved = {name: value for name, value in vars(tl).items() if isinstance(value, JITFunction)}
        try:
            for name, value in saved.items():
                setattr(tl, name, _restoring_interpreted(value.fn))
            yield
        finally:
            for name, value in saved.items():
                setattr(tl, name, value)


def check_inputs(q, k, v, block_m: int, block_n: int, interpreted: bool) -> tuple[int, int, int, int]:
    """(batch, heads, n, d) of valid inputs, or InvalidConfig with one line saying what to change."""
    torch = _torch()
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise InvalidConfig(f"{name} must be a torch tensor of shape (batch, heads, n, d); got {type(t).__name__}")
        if t.layout != torch.strided:
            raise InvalidConfig(f"{name} must be a dense tensor (the kernel walks strides); got layout {t.layout}")
        if t.requires_grad and torch.is_grad_enabled():
            raise InvalidConfig(f"{name} requires grad, but this kernel is the forward pass only (no backward): "
                                f"call it under torch.no_grad() or pass {name}.detach()")
    if q.dim() != 4:
        raise InvalidConfig(f"q, k and v must be 4-D, (batch, heads, n, d); got q of shape {tuple(q.shape)}")
    if k.shape != q.shape or v.shape != q.shape:
        raise InvalidConfig(f"q, k and v must have the same shape (self-attention, one head dimension); got "
                            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if k.dtype != q.dtype or v.dtype != q.dtype or k.device != q.device or v.device != q.device:
        raise InvalidConfig(f"q, k and v must share a dtype and a device; got {q.dtype}/{k.dtype}/{v.dtype} on "
                            f"{q.device}/{k.device}/{v.device}")
    dtype = str(q.dtype).removeprefix("torch.")
    if interpreted and dtype == "bfloat16":
        raise InvalidConfig(BF16_REFUSED)
    allowed = INTERPRETED_DTYPES if interpreted else COMPILED_DTYPES
    if dtype not in allowed:
        raise InvalidConfig(f"dtype must be one of {', '.join(allowed)}{' in the interpreter' if interpreted else ''};"
                            f" got {dtype}")
    batch, heads, n, d = q.shape
    if n < 1 or batch < 1 or heads < 1:
        raise InvalidConfig(f"batch, heads and n must be at least 1; got shape {tuple(q.shape)}")
    if d not in HEAD_DIMS:
        raise InvalidConfig(f"head dimension d must be one of {', '.join(map(str, HEAD_DIMS))} (tl.dot needs ≥ 16, "
                            f"tl.arange a power of two); got {d}")
    check_tile("block_m", block_m, TILE_SIZES)
    check_tile("block_n", block_n, TILE_SIZES)
    if q.numel() > MAX_ELEMENTS:
        raise InvalidConfig(f"q, k and v have {q.numel():,} elements each: the kernel's offsets are 32-bit, so keep "
                            f"batch·heads·n·d ≤ {MAX_ELEMENTS:,} (split the batch into several calls)")
    if interpreted and batch * heads * n * n > MAX_INTERPRETED_SCORES:
        raise InvalidConfig(f"batch·heads·n² = {batch * heads * n * n:,} scores is too many for Triton's "
                            f"interpreter (tens of seconds or more on a CPU); keep it ≤ {MAX_INTERPRETED_SCORES:,}, "
                            f"e.g. n ≤ 512 for one head")
    if interpreted and q.device.type != "cpu":
        raise InvalidConfig(f"the interpreter runs on CPU tensors; got {q.device}")
    if not interpreted and q.device.type != "cuda":
        raise InvalidConfig(f"on a GPU the kernel takes CUDA tensors; got {q.device} (move them with .cuda())")
    return batch, heads, n, d


def flash_attention(q, k, v, causal: bool = False, block_m: int = 32, block_n: int = 32, num_warps: int = 4,
                    num_stages: int | None = None):
    """(O, logsumexp) of softmax(Q·Kᵀ/√d)·V from the Triton kernel: O like q, logsumexp (batch, heads, n) fp32.
    Without a GPU Triton's interpreter runs it (fp16/fp32, small sizes); on a GPU it is compiled, with
    ``num_warps`` warps per program and ``num_stages`` pipelined K/V loads (None: Triton's default)."""
    if kernels.triton is None:
        raise InvalidConfig(TRITON_MISSING)
    if not isinstance(causal, bool):
        raise InvalidConfig(f"causal must be True or False; got {causal!r}")
    interpreted = not runtime.is_gpu()
    batch, heads, n, d = check_inputs(q, k, v, block_m, block_n, interpreted)
    check_tile("num_warps", num_warps, WARP_COUNTS)
    if num_stages is not None and (isinstance(num_stages, bool) or not isinstance(num_stages, int)
                                   or not 1 <= num_stages <= MAX_STAGES):
        raise InvalidConfig(f"num_stages must be None or an integer from 1 to {MAX_STAGES}; got {num_stages!r}")
    torch = _torch()
    # (batch·heads, n, d), last stride 1: one pointer walk per (batch, head)
    q3, k3, v3 = (t.reshape(batch * heads, n, d).contiguous() for t in (q, k, v))
    o = torch.empty_like(q3)
    lse = torch.empty((batch * heads, n), dtype=torch.float32, device=q.device)
    grid = (-(-n // block_m), batch * heads)
    args = (q3, k3, v3, o, lse, n, LOG2E / math.sqrt(d), q3.stride(0), q3.stride(1), k3.stride(0), k3.stride(1),
            v3.stride(0), v3.stride(1), o.stride(0), o.stride(1))
    constants = dict(HEAD_DIM=d, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=causal)
    if interpreted:
        with interpretable_language():
            interpreted_kernel()[grid](*args, **constants)
    else:
        launch = {"num_warps": num_warps} | ({} if num_stages is None else {"num_stages": num_stages})
        compiled_kernel()[grid](*args, **constants, **launch)
    return o.reshape(batch, heads, n, d), lse.reshape(batch, heads, n)


def sdpa_reference(q, k, v, causal: bool = False):
    """(O, logsumexp) from torch: ``scaled_dot_product_attention`` on the inputs upcast to fp32 (CPU SDPA's own
    fp16 path rounds differently), and the logsumexp of the scaled, masked scores."""
    torch = _torch()
    qf, kf, vf = q.float(), k.float(), v.float()
    o = torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, is_causal=causal)
    s = qf @ kf.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        n = q.shape[-2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return o, torch.logsumexp(s, dim=-1)


# Tolerances against the fp32 reference, (atol, rtol): fp16 rounds Q, K, V and P to 11 significant bits (P·V in
# fp16 inputs, fp32 accumulate), errors ~1e-3 at unit-scale inputs; bf16 to 8 bits. fp32 in the interpreter only
# reorders sums (NumPy computes tl.dot in fp32); compiled, tl.dot's default input precision is TF32 (11 bits, like
# fp16), so the compiled fp32 tolerance is fp16's. Not yet checked on a GPU.
TOLERANCE = {("float16", "interpreted"): (2e-3, 2e-2), ("float32", "interpreted"): (2e-5, 1e-4),
             ("float16", "compiled"): (2e-3, 2e-2), ("float32", "compiled"): (2e-3, 2e-2),
             ("bfloat16", "compiled"): (1e-2, 5e-2)}


def random_qkv(batch: int, heads: int, n: int, d: int, dtype="float32", seed: int = 0, device: str = "cpu"):
    """Reproducible standard-normal q, k, v of shape (batch, heads, n, d)."""
    torch = _torch()
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(batch, heads, n, d, generator=g).to(getattr(torch, dtype)).to(device) for _ in range(3))


def compare_with_sdpa(batch: int, heads: int, n: int, d: int, dtype: str = "float32", causal: bool = False,
                      block_m: int = 32, block_n: int = 32, seed: int = 0) -> dict:
    """One case: the kernel against SDPA — max absolute errors of O and logsumexp, whether within tolerance, and
    the kernel's wall-clock seconds (in the interpreter: the interpreter's speed, not a GPU's)."""
    torch = _torch()
    interpreted = not runtime.is_gpu()
    device = "cpu" if interpreted else "cuda"
    q, k, v = random_qkv(batch, heads, n, d, dtype, seed, device)
    start = time.perf_counter()
    o, lse = flash_attention(q, k, v, causal=causal, block_m=block_m, block_n=block_n)
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    ref_o, ref_lse = sdpa_reference(q, k, v, causal)
    atol, rtol = TOLERANCE[dtype, "interpreted" if interpreted else "compiled"]
    return {"batch": batch, "heads": heads, "n": n, "d": d, "dtype": dtype, "causal": causal, "block_m": block_m,
            "block_n": block_n, "max_abs_error_o": float((o.float() - ref_o).abs().max()),
            "max_abs_error_lse": float((lse - ref_lse).abs().max()),
            "close": bool(torch.allclose(o.float(), ref_o, atol=atol, rtol=rtol)
                          and torch.allclose(lse, ref_lse, atol=atol, rtol=rtol)),
            "seconds": seconds, "mode": "interpreted" if interpreted else "compiled"}


def traffic_in_interpreter(batch: int, heads: int, n: int, d: int, dtype: str = "float16", causal: bool = False,
                           block_m: int = 32, block_n: int = 32) -> dict[str, int]:
    """The bytes the kernel's loads and stores really move, counted in Triton's interpreter: every masked load and
    store, its true lanes times the element size (a masked-off lane moves nothing). ``model.flash_traffic`` predicts
    them: reads = Q + K + V, writes = O + logsumexp, times batch·heads."""
    if runtime.is_gpu():
        raise InvalidConfig("the interpreter counts traffic without a GPU; on a GPU, Nsight Compute does")
    import numpy as np
    from triton.runtime.interpreter import interpreter_builder

    counted = {"bytes read": 0, "bytes written": 0}
    load, store = interpreter_builder.create_masked_load, interpreter_builder.create_masked_store

    def counting_load(ptrs, mask, *args):
        result = load(ptrs, mask, *args)
        counted["bytes read"] += int(np.count_nonzero(mask.data)) * result.data.dtype.itemsize
        return result

    def counting_store(ptrs, value, mask, *args):
        counted["bytes written"] += int(np.count_nonzero(mask.data)) * value.data.dtype.itemsize
        return store(ptrs, value, mask, *args)

    q, k, v = random_qkv(batch, heads, n, d, dtype)
    interpreter_builder.create_masked_load, interpreter_builder.create_masked_store = counting_load, counting_store
    try:
        flash_attention(q, k, v, causal=causal, block_m=block_m, block_n=block_n)
    finally:
        del interpreter_builder.create_masked_load, interpreter_builder.create_masked_store  # the class's again
    return counted
