"""On a GPU: the lesson's Triton FlashAttention forward timed against PyTorch's own, under the course's harness.

``against_sdpa(n, d, causal)`` times ``experiments.flash_attention`` (compiled) and
``torch.nn.functional.scaled_dot_product_attention`` restricted to its FlashAttention backend on the same fp16
inputs, each checked before it is timed (the kernel against SDPA's output), and returns both times, the share of
SDPA's speed the kernel reaches, and the TFLOP/s of each on the scores attention needs (``model.useful_flops``).
A chart a widget redraws measures under the live contract (``harness.live()``, which the LiveChart enters); the GPU
tier (tests/test_gpu_attention.py) under the full one. Without a GPU: ``NoGPU``, in one line, before anything runs.
"""

from __future__ import annotations

from gpucourse.errors import InvalidConfig, NoGPU
from gpucourse.lessons.attention import experiments, model
from gpucourse.lessons.attention.kernels import HEAD_DIMS, TILE_SIZES
from gpucourse.measure import harness, runtime

BATCH, HEADS = 4, 16  # 64 (batch, head) pairs: at n = 4096 and 128-row tiles, 2,048 programs for 132 SMs
# (block_m, block_n, num_warps, num_stages) per head dimension: the Hopper settings of Triton's fused-attention
# tutorial (128-row Q tiles, 64-row K/V tiles, 3 stages; 8 warps once the 128×128 fp32 accumulator needs them)
GPU_SETTINGS = {16: (128, 64, 4, 3), 32: (128, 64, 4, 3), 64: (128, 64, 4, 3), 128: (128, 64, 8, 3)}
NO_GPU = "timing the kernel against SDPA needs a GPU; without one the lesson shows the model and the interpreter"


def settings(d: int, block_m: int | None = None, block_n: int | None = None) -> tuple[int, int, int, int]:
    """(block_m, block_n, num_warps, num_stages) for head dimension ``d``; tiles given override the defaults."""
    model.check_tile("d", d, HEAD_DIMS)
    bm, bn, _, stages = GPU_SETTINGS[d]
    bm = bm if block_m is None else model.check_tile("block_m", block_m, TILE_SIZES)
    bn = bn if block_n is None else model.check_tile("block_n", block_n, TILE_SIZES)
    return bm, bn, (8 if bm * d >= 128 * 128 else 4), stages  # 8 warps once acc is 128×128 fp32 (64 KiB)


def against_sdpa(n: int, d: int, causal: bool = False, block_m: int | None = None, block_n: int | None = None,
                 batch: int = BATCH, heads: int = HEADS) -> dict:
    """Median ms of the kernel and of SDPA's flash backend (fp16), the kernel's share of SDPA's speed
    (sdpa_ms / kernel_ms: 1 = as fast), and both TFLOP/s on the useful FLOPs."""
    if not runtime.is_gpu():
        raise NoGPU(NO_GPU)
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise InvalidConfig(f"n must be a positive integer; got {n!r}")
    bm, bn, warps, stages = settings(d, block_m, block_n)
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = experiments.random_qkv(batch, heads, n, d, "float16", device="cuda")
    flops = batch * heads * model.useful_flops(n, d, causal)
    nbytes = batch * heads * model.flash_bytes(n, d, bm, bn, 2, causal)

    def kernel():
        return experiments.flash_attention(q, k, v, causal=causal, block_m=bm, block_n=bn, num_warps=warps,
                                           num_stages=stages)[0]

    def sdpa():
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        reference = sdpa()
        mine = harness.measure(kernel, label=f"Triton FlashAttention n={n} d={d}", flops=flops, bytes_moved=nbytes,
                               check=lambda: torch.allclose(kernel().float(), reference.float(), atol=2e-3,
                                                            rtol=2e-2))
        theirs = harness.measure(sdpa, label=f"SDPA flash backend n={n} d={d}", flops=flops)
    return {"n": n, "d": d, "causal": causal, "block_m": bm, "block_n": bn, "num_warps": warps,
            "num_stages": stages, "kernel_ms": mine.median_ms, "sdpa_ms": theirs.median_ms,
            "kernel_share_of_sdpa": theirs.median_ms / mine.median_ms, "kernel_tflops": mine.tflops,
            "sdpa_tflops": theirs.tflops, "contract": mine.contract}
