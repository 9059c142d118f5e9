"""The attention lesson's kernel, exactly as learners read it: a FlashAttention-2 forward in Triton.

One program computes one tile of ``BLOCK_M`` query rows of one (batch, head): it loads its Q tile once, walks
the K and V tiles of ``BLOCK_N`` rows (all of them, or, causal, only those at or left of the diagonal), keeps the
online softmax's running maximum ``m``, running sum ``l`` and unnormalised output ``acc`` in registers, and
writes O and the rows' logsumexp once. Scores are kept in base 2 (``exp2``, the scale times log2(e)), as
FlashAttention-2 and Triton's tutorial do: the same softmax, one multiply fewer per element.

Rows and columns past the sequence's end are masked (loads give 0, scores −inf), so any sequence length works;
the head dimension is a power of two from 16 to 128 (``tl.dot`` needs ≥ 16 along every side and
``tl.arange`` a power of two). The runner (``experiments.flash_attention``) checks all of this before launch.

The kernel is a plain function here, decorated by its runners (``experiments.interpreted_kernel`` and
``compiled_kernel``), as lesson "Tensor cores from Python" does with its matmul: Triton decides at decoration time
whether ``@triton.jit`` means "compile" or "interpret" (``TRITON_INTERPRET``), and one process may need both (run
in the interpreter, compile for sm_80/90/100 to read the SASS).

Triton ships Linux wheels only: without it ``triton`` is None here and the runner says so in one line.
"""

from __future__ import annotations  # the constexpr annotations stay strings: Triton reads "tl.constexpr"

try:  # Linux only (Triton has no macOS or Windows wheels); the runner refuses in one line without it
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised on platforms without Triton
    triton = tl = None

HEAD_DIMS = (16, 32, 64, 128)  # tl.dot needs ≥ 16 on every side; tl.arange a power of two
TILE_SIZES = (16, 32, 64, 128)  # BLOCK_M and BLOCK_N: powers of two, ≥ 16 for tl.dot
LSE_BYTES = 4  # the logsumexp is written in fp32 whatever the inputs' dtype (FlashAttention-2 does the same)


def flash_forward_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, n_ctx, scale_log2e,
                         stride_qh, stride_qn, stride_kh, stride_kn, stride_vh, stride_vn, stride_oh, stride_on,
                         HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """O and the logsumexp of one BLOCK_M-row tile of queries of one (batch, head): softmax(Q·Kᵀ/√d)·V, online."""
    tile = tl.program_id(0)  # which BLOCK_M rows of queries
    bh = tl.program_id(1)  # which (batch, head): the arrays are (batch·heads, n_ctx, HEAD_DIM), last stride 1
    rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, HEAD_DIM)
    row_ok = rows < n_ctx
    q = tl.load(q_ptr + bh * stride_qh + rows[:, None] * stride_qn + dims[None, :], mask=row_ok[:, None],
                other=0.0)  # read once, kept in registers for the whole walk over K and V
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running maximum of each row's scores (base-2 units)
    l = tl.zeros([BLOCK_M], tl.float32)  # noqa: E741 — running sum of exp2(score − m)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)  # running Σ exp2(score − m) · V, not yet divided by l
    end = n_ctx
    if CAUSAL:  # tiles wholly above the diagonal are skipped: row r sees columns 0..r only
        end = tl.minimum((tile + 1) * BLOCK_M, n_ctx)
    for start in range(0, end, BLOCK_N):
        kv_rows = start + cols
        kv_ok = kv_rows < n_ctx
        k = tl.load(k_ptr + bh * stride_kh + kv_rows[:, None] * stride_kn + dims[None, :], mask=kv_ok[:, None],
                    other=0.0)
        v = tl.load(v_ptr + bh * stride_vh + kv_rows[:, None] * stride_vn + dims[None, :], mask=kv_ok[:, None],
                    other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale_log2e  # (BLOCK_M, BLOCK_N) scores, fp32 accumulate
        valid = (rows[:, None] >= 0) & kv_ok[None, :]
        if CAUSAL:
            valid = valid & (kv_rows[None, :] <= rows[:, None])
        s = tl.where(valid, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))  # finite from the first tile on: column 0 is valid for every row
        alpha = tl.exp2(m - m_new)  # rescales what was summed under the old maximum
        p = tl.exp2(s - m_new[:, None])
        l = l * alpha + tl.sum(p, 1)  # noqa: E741
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)  # P in the inputs' dtype, as FlashAttention does
        m = m_new
    o = acc / l[:, None]
    tl.store(o_ptr + bh * stride_oh + rows[:, None] * stride_on + dims[None, :], o.to(o_ptr.dtype.element_ty),
             mask=row_ok[:, None])
    # logsumexp in natural-log units: ln Σ e^(s/√d) = m·ln 2 + ln l (the backward pass recomputes P from it)
    tl.store(lse_ptr + bh * n_ctx + rows, m * 0.6931471805599453 + tl.log(l), mask=row_ok)

