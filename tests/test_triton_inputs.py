"""Bad input to the two Triton runners (issue 49 part 8): one clear course error before any launch.

``tensorcores.experiments.run_interpreted`` (the matmul) and ``attention.experiments.flash_attention`` (the
FlashAttention forward), for every kind of bad input: unsupported dtypes, head dimensions the kernel does not
handle, wrong shapes, storage the kernel cannot read as it looks, tiles that are not allowed. Every refusal is an
``InvalidConfig`` whose words say what to change, raised with the launch replaced by a tripwire.

What the kernels handle is not refused, and is checked to be right instead: sizes that are not multiples of the
tile (masked loads and stores), non-contiguous and odd strides (the matmul walks any strides; NumPy arrays with
negative strides are copied; the attention runner makes its (batch·heads, n, d) views contiguous first).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gpucourse.errors import InvalidConfig  # noqa: E402
from gpucourse.lessons.attention import experiments as attention  # noqa: E402
from gpucourse.lessons.tensorcores import experiments as tensorcores  # noqa: E402
from gpucourse.measure import runtime, tritonmode  # noqa: E402

needs_triton = pytest.mark.skipif(not tritonmode.triton_available(), reason="Triton ships Linux wheels only")
interpreter_only = pytest.mark.skipif(runtime.is_gpu(), reason="the interpreter runs without a GPU only")


def _launched(*args, **kwargs):
    raise AssertionError("the kernel was launched")


@pytest.fixture
def no_launch(monkeypatch):
    """Any launch of either kernel fails the test: the checks must refuse before it."""
    monkeypatch.setattr(tensorcores, "_interpret", _launched)
    monkeypatch.setattr(attention, "interpreted_kernel", lambda: _launched)
    monkeypatch.setattr(attention, "compiled_kernel", lambda: _launched)


# --- the matmul: C = A @ B in the interpreter ----------------------------------------------------------------

F32 = np.ones((8, 8), np.float32)
MATMUL_BAD = [
    # dtypes
    ("int32", F32.astype(np.int32), F32.astype(np.int32), "dtype must be one of float16, float32, got int32"),
    ("float64", F32.astype(np.float64), F32.astype(np.float64), "got float64"),
    ("complex", F32.astype(np.complex64), F32.astype(np.complex64), "got complex64"),
    ("object", F32.astype(object), F32.astype(object), "got object"),
    ("bf16", torch.ones(8, 8, dtype=torch.bfloat16), torch.ones(8, 8, dtype=torch.bfloat16), "silently wrong"),
    ("mixed", F32, F32.astype(np.float16), "same dtype"),
    # shapes
    ("3-D", np.ones((2, 8, 8), np.float32), F32, "2-D matrix, got shape \\(2, 8, 8\\)"),
    ("1-D", np.ones(8, np.float32), F32, "2-D matrix"),
    ("scalar", np.float32(1), F32, "2-D matrix, got shape \\(\\)"),
    ("a list", [[1.0]], [[1.0]], "2-D matrix"),
    ("inner sizes", np.ones((8, 4), np.float32), F32, "A's columns must equal B's rows"),
    ("empty", np.ones((0, 8), np.float32), F32, "must not be empty"),
    ("too large", np.ones((300, 8), np.float16), np.ones((8, 8), np.float16), "keep M, N, K ≤ 256"),
    # storage the kernel cannot read as it looks
    ("masked", np.ma.masked_array(F32, mask=np.eye(8)), F32, "masked array"),
    ("no data", torch.ones(8, 8, device="meta"), torch.ones(8, 8, device="meta"), "device meta"),
    ("sparse", torch.eye(8).to_sparse(), torch.ones(8, 8), "dense tensor"),
]


@pytest.mark.parametrize(("case", "a", "b", "words"), MATMUL_BAD, ids=[c[0] for c in MATMUL_BAD])
def test_the_matmul_refuses_bad_matrices_before_launch(no_launch, case, a, b, words):
    with pytest.raises(InvalidConfig, match=words):
        tensorcores.run_interpreted(a, b)


MATMUL_TILES = [(8, 16, 16), (48, 16, 16), (512, 16, 16), (16, 16), (16, 16, 16, 16), (16.5, 16, 16),
                (16.0, 16, 16), (True, 16, 16), "16", 16, None]


@pytest.mark.parametrize("block", MATMUL_TILES, ids=repr)
def test_the_matmul_refuses_tiles_that_are_not_allowed(no_launch, block):
    with pytest.raises(InvalidConfig, match="block must be"):
        tensorcores.run_interpreted(F32, F32, block)


@needs_triton
@pytest.mark.parametrize("block", [(16, 16, 16), (np.int64(32), 16, 64)], ids=repr)
def test_the_matmul_takes_integer_tiles_of_any_integer_type(block):
    a = np.arange(20 * 20, dtype=np.float32).reshape(20, 20) / 400
    np.testing.assert_allclose(tensorcores.run_interpreted(a, a, block), a @ a, rtol=1e-5)


def _strided_operands():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((70, 50)).astype(np.float32)
    b = rng.standard_normal((50, 33)).astype(np.float32)
    big = np.zeros((140, 100), np.float32)
    big[::2, ::2] = a
    return {
        "numpy, every other row and column": (big[::2, ::2], b, a @ b),
        "numpy, negative strides": (a[::-1, ::-1], b[::-1], a[::-1, ::-1] @ b[::-1]),
        "numpy, Fortran order": (np.asfortranarray(a), np.asfortranarray(b), a @ b),
        "torch, transposed": (torch.from_numpy(a.T.copy()).T, torch.from_numpy(b), a @ b),
        "torch, a broadcast row (stride 0)": (torch.from_numpy(a[:1]).expand(70, 50), torch.from_numpy(b),
                                              np.broadcast_to(a[:1], (70, 50)) @ b),
        "torch, requires grad": (torch.from_numpy(a).requires_grad_(), torch.from_numpy(b), a @ b),
    }


@needs_triton
@pytest.mark.parametrize("case", list(_strided_operands()))
def test_the_matmul_reads_odd_strides_and_sizes_right(case):
    # 70×50 @ 50×33 with 32×32×32 tiles: no size a multiple of the tile, every edge masked
    a, b, expected = _strided_operands()[case]
    np.testing.assert_allclose(tensorcores.run_interpreted(a, b), expected, rtol=1e-4, atol=1e-4)


# --- the FlashAttention forward -----------------------------------------------------------------------------

def _qkv(batch=1, heads=1, n=32, d=16, dtype="float32"):
    return attention.random_qkv(batch, heads, n, d, dtype)


ATTENTION_BAD = [
    # dtypes
    ("int32", lambda: tuple(t.int() for t in _qkv()), {}, "dtype must be one of float16, float32"),
    ("float64", lambda: tuple(t.double() for t in _qkv()), {}, "got float64"),
    ("bf16", lambda: _qkv(dtype="bfloat16"), {}, "silently wrong"),
    ("mixed dtypes", lambda: (_qkv()[0].half(), *_qkv()[1:]), {}, "share a dtype"),
    # head dimensions the kernel does not handle
    *((f"d={d}", (lambda d=d: _qkv(d=d)), {}, "head dimension d must be one of 16, 32, 64, 128")
      for d in (8, 48, 96, 256)),
    # shapes
    ("3-D", lambda: tuple(t[0] for t in _qkv()), {}, "must be 4-D"),
    ("k shorter", lambda: (_qkv()[0], *_qkv(n=16)[1:]), {}, "same shape"),
    ("v's d", lambda: (*_qkv()[:2], _qkv(d=32)[2]), {}, "same shape"),
    ("n = 0", lambda: _qkv(n=0), {}, "at least 1"),
    ("too many scores", lambda: _qkv(n=1024), {}, "too many for Triton's interpreter"),
    ("numpy", lambda: (_qkv()[0].numpy(), *_qkv()[1:]), {}, "must be a torch tensor"),
    # storage and autograd
    ("no data", lambda: tuple(t.to("meta") for t in _qkv()), {}, "runs on CPU tensors"),
    ("sparse", lambda: (_qkv()[0].to_sparse(), *_qkv()[1:]), {}, "dense tensor"),
    ("requires grad", lambda: (_qkv()[0].requires_grad_(), *_qkv()[1:]), {}, "forward pass only"),
    # tiles and options
    *((f"block_m={b!r}", _qkv, {"block_m": b}, "block_m must be one of 16, 32, 64, 128")
      for b in (8, 24, 256, 32.0, "32", True, None)),
    *((f"block_n={b!r}", _qkv, {"block_n": b}, "block_n must be one of") for b in (8, 48, 256)),
    ("causal=1", _qkv, {"causal": 1}, "causal must be True or False"),
]


@needs_triton
@interpreter_only
@pytest.mark.parametrize(("case", "make", "options", "words"), ATTENTION_BAD, ids=[c[0] for c in ATTENTION_BAD])
def test_flash_attention_refuses_bad_input_before_launch(no_launch, case, make, options, words):
    with pytest.raises(InvalidConfig, match=words):
        attention.flash_attention(*make(), **options)


def test_flash_attention_refuses_tensors_its_32_bit_offsets_cannot_reach():
    # 2³³ elements each, as a GPU with 141 GB could hold: bh · stride_qh would wrap. Broadcast views: no memory.
    q = torch.zeros(1, 1, 1, 1, dtype=torch.float16).expand(2**12, 2**7, 2**8, 64)
    with pytest.raises(InvalidConfig, match="offsets are 32-bit"):
        attention.check_inputs(q, q, q, 64, 64, interpreted=False)
    small = q[:1, :1]
    assert attention.MAX_ELEMENTS == 2**31 - 1 and small.numel() < attention.MAX_ELEMENTS
    with pytest.raises(InvalidConfig, match="CUDA tensors"):  # the next check: fine but for the device
        attention.check_inputs(small, small, small, 64, 64, interpreted=False)


def test_requires_grad_is_fine_where_no_graph_is_built():
    q, k, v = _qkv()
    with torch.no_grad():
        assert attention.check_inputs(q.requires_grad_(), k, v, 32, 32, interpreted=True) == (1, 1, 32, 16)


@needs_triton
@interpreter_only
@pytest.mark.parametrize("layout", ["transposed heads", "broadcast batch", "n not a multiple of the tiles"])
def test_flash_attention_reads_odd_strides_and_sizes_right(layout):
    q, k, v = _qkv(batch=1, heads=2, n=40, d=16)
    if layout == "transposed heads":  # (batch, n, heads, d) memory seen as (batch, heads, n, d)
        q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
        assert not q.is_contiguous()
    elif layout == "broadcast batch":
        q, k, v = (t.expand(2, 2, 40, 16) for t in (q, k, v))
    o, lse = attention.flash_attention(q, k, v, causal=True, block_m=16, block_n=32)  # 40 rows: partial tiles
    ref_o, ref_lse = attention.sdpa_reference(q, k, v, causal=True)
    torch.testing.assert_close(o, ref_o, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(lse, ref_lse, atol=2e-5, rtol=1e-4)
