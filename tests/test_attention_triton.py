"""The attention lesson's Triton FlashAttention forward, run by Triton's interpreter (no GPU) and checked against
torch's scaled_dot_product_attention; bad input refused before launch. Small sizes: the whole file takes seconds."""

from __future__ import annotations

import pytest

pytest.importorskip("triton", reason="Triton ships Linux wheels only: the lesson uses recordings without it")
torch = pytest.importorskip("torch")

from gpucourse.errors import InvalidConfig  # noqa: E402
from gpucourse.lessons import attention  # noqa: E402
from gpucourse.lessons.attention import experiments, kernels, model  # noqa: E402
from gpucourse.measure import runtime  # noqa: E402

interpreter_only = pytest.mark.skipif(runtime.is_gpu(), reason="the interpreter runs without a GPU only")

# (batch, heads, n, d, dtype, causal, block_m, block_n): every head dimension, both dtypes, causal and not,
# square and unequal tiles, n a multiple of the tiles and not (masked partial tiles), one query row.
CASES = [
    (1, 1, 64, 16, "float32", False, 16, 16),
    (1, 1, 100, 32, "float16", True, 32, 16),
    (1, 1, 256, 64, "float16", False, 64, 64),
    (1, 1, 256, 64, "float32", True, 32, 64),
    (1, 1, 77, 64, "float16", True, 64, 32),
    (2, 3, 48, 32, "float32", False, 16, 32),
    (1, 2, 40, 16, "float16", False, 32, 32),
    (1, 1, 1, 16, "float32", True, 16, 16),
    (1, 1, 64, 128, "float16", True, 32, 32),
]


@interpreter_only
@pytest.mark.parametrize(("batch", "heads", "n", "d", "dtype", "causal", "block_m", "block_n"), CASES)
def test_forward_matches_sdpa(batch, heads, n, d, dtype, causal, block_m, block_n):
    result = experiments.compare_with_sdpa(batch, heads, n, d, dtype, causal, block_m, block_n, seed=n + d)
    assert result["close"], result
    assert result["mode"] == "interpreted"


@interpreter_only
def test_causal_differs_from_full_and_output_keeps_dtype():
    q, k, v = experiments.random_qkv(1, 1, 40, 16, "float16", seed=5)
    full, _ = attention.flash_attention(q, k, v, causal=False, block_m=16, block_n=16)
    causal, lse = attention.flash_attention(q, k, v, causal=True, block_m=16, block_n=16)
    assert full.dtype == torch.float16 and lse.dtype == torch.float32 and lse.shape == (1, 1, 40)
    # the last row sees every key either way; the first sees only itself, so its output is v[0]
    torch.testing.assert_close(full[0, 0, -1], causal[0, 0, -1], atol=2e-3, rtol=1e-2)
    torch.testing.assert_close(causal[0, 0, 0], v[0, 0, 0], atol=1e-3, rtol=1e-3)
    assert (full[0, 0, 0] - causal[0, 0, 0]).abs().max() > 0.1


class _NoLaunch:
    def __getitem__(self, grid):
        raise AssertionError("the kernel was launched: bad input must be refused before launch")


def no_launch(monkeypatch):
    for runner in ("interpreted_kernel", "compiled_kernel"):
        monkeypatch.setattr(experiments, runner, _NoLaunch)


BAD = [
    (dict(dtype="bfloat16"), {}, "silently wrong"),
    (dict(dtype="float64"), {}, "dtype must be one of float16, float32"),
    (dict(d=48), {}, "head dimension d must be one of 16, 32, 64, 128"),
    (dict(d=8), {}, "head dimension d must be one of"),
    (dict(), dict(block_m=24), "block_m must be one of 16, 32, 64, 128"),
    (dict(), dict(block_n=8), "block_n must be one of"),
    (dict(), dict(causal=1), "causal must be True or False"),
    (dict(n=1024), {}, "too many for Triton's interpreter"),
]


@interpreter_only
@pytest.mark.parametrize(("shape", "options", "words"), BAD)
def test_bad_input_is_refused_before_launch(monkeypatch, shape, options, words):
    spec = dict(batch=1, heads=1, n=32, d=16, dtype="float32") | shape
    q, k, v = experiments.random_qkv(**spec)
    no_launch(monkeypatch)
    with pytest.raises(InvalidConfig, match=words):
        attention.flash_attention(q, k, v, **options)


@interpreter_only
def test_mismatched_tensors_are_refused_before_launch(monkeypatch):
    q, k, v = experiments.random_qkv(1, 1, 32, 16)
    no_launch(monkeypatch)
    for args, words in [((q, k[:, :, :16], v), "same shape"), ((q, k.half(), v), "share a dtype"),
                        ((q[0], k[0], v[0]), "must be 4-D"), ((q, k.numpy(), v), "must be a torch tensor")]:
        with pytest.raises(InvalidConfig, match=words):
            attention.flash_attention(*args)


@interpreter_only
def test_the_same_process_interprets_then_compiles_for_a_gpu():
    # Triton was imported (at the top of this file) before the lesson, without TRITON_INTERPRET: the launch wraps
    # tl.max / tl.sum / tl.zeros for the interpreter and puts them back, so the kernel still compiles afterwards
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    q, k, v = experiments.random_qkv(1, 1, 16, 16)
    attention.flash_attention(q, k, v, causal=True, block_m=16, block_n=16)
    assert all(isinstance(getattr(kernels.tl, name), JITFunction) for name in ("max", "sum", "zeros"))
    signature = {**dict.fromkeys(("q_ptr", "k_ptr", "v_ptr", "o_ptr"), "*fp16"), "lse_ptr": "*fp32", "n_ctx": "i32",
                 "scale_log2e": "fp32", **{f"stride_{t}{a}": "i32" for t in "qkvo" for a in "hn"},
                 **dict.fromkeys(("HEAD_DIM", "BLOCK_M", "BLOCK_N", "CAUSAL"), "constexpr")}
    source = ASTSource(fn=experiments.compiled_kernel(), signature=signature,
                       constexprs={"HEAD_DIM": 64, "BLOCK_M": 64, "BLOCK_N": 64, "CAUSAL": True})
    compiled = kernels.triton.compile(source, target=GPUTarget("cuda", 80, 32), options={"num_warps": 4})
    assert "mma.sync" in compiled.asm["ptx"]  # sm_80: the two tl.dot become tensor-core mma.sync


@interpreter_only
@pytest.mark.parametrize(("batch", "heads", "n", "d", "dtype", "causal", "block_m", "block_n"), [
    (1, 1, 64, 16, "float16", False, 16, 32),
    (1, 1, 64, 16, "float16", True, 16, 16),
    (1, 2, 77, 32, "float32", True, 32, 16),  # partial tiles at the end
    (2, 1, 50, 16, "float16", True, 16, 64),  # K/V tiles taller than Q tiles: whole tiles up to the diagonal
])
def test_model_predicts_the_bytes_the_kernel_moves(batch, heads, n, d, dtype, causal, block_m, block_n):
    counted = experiments.traffic_in_interpreter(batch, heads, n, d, dtype, causal, block_m, block_n)
    predicted = model.flash_traffic(n, d, block_m, block_n, 2 if dtype == "float16" else 4, causal)
    reads = predicted["read Q (once)"] + predicted["read K (per Q tile)"] + predicted["read V (per Q tile)"]
    writes = predicted["write O (once)"] + predicted["write logsumexp (fp32)"]
    assert counted == {"bytes read": batch * heads * reads, "bytes written": batch * heads * writes}
    assert sum(counted.values()) == batch * heads * model.flash_bytes(n, d, block_m, block_n,
                                                                       2 if dtype == "float16" else 4, causal)
