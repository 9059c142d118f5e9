"""Online softmax, in NumPy: softmax(S)·V one block of columns at a time, as FlashAttention computes it.

Softmax needs each row's maximum (to keep ``exp`` from overflowing) and its sum before any output can be
written, and both depend on the whole row. The online form keeps three running quantities per row and corrects
them when a new block raises the maximum:

    m_new = max(m, rowmax(S_j))
    l_new = e^(m − m_new) · l + rowsum(e^(S_j − m_new))
    acc_new = e^(m − m_new) · acc + e^(S_j − m_new) · V_j

and, after the last block, O = acc / l and logsumexp = m + ln l. ``tile_step`` is one step of it; ``online_softmax``
runs it over the blocks; ``attention_by_tiles`` folds any tile step (lab 13's, a learner's) over the K/V tiles.
Natural exponentials here; the Triton kernel does the same in base 2 (``exp2`` of scores scaled by log2 e), which
changes no result. A row whose scores so far are all −inf
(masked) keeps m = −inf, l = 0, acc = 0 until a block gives it a finite score.
"""

from __future__ import annotations

import numpy as np

from gpucourse.errors import InvalidConfig


def _matrix(name: str, value, ndim: int) -> np.ndarray:
    array = np.asarray(value)
    if array.ndim != ndim or not np.issubdtype(array.dtype, np.number):
        raise InvalidConfig(f"{name} must be a {ndim}-D array of numbers; got shape {array.shape}, "
                            f"dtype {array.dtype}")
    return array.astype(np.result_type(array.dtype, np.float32), copy=False)


def naive_softmax(s) -> np.ndarray:
    """Softmax without subtracting the maximum: e^S / rowsum(e^S). Overflows to inf (and then nan) once a score
    passes ~88 in float32 or ~709 in float64: why every real softmax subtracts the row's maximum first."""
    e = np.exp(_matrix("s", s, 2))
    return e / e.sum(axis=1, keepdims=True)


def softmax(s) -> np.ndarray:
    """The stable softmax of each row: e^(S − rowmax) / rowsum(e^(S − rowmax))."""
    s = _matrix("s", s, 2)
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def tile_step(m, l, acc, s_block, v_block) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # noqa: E741
    """One step of the FlashAttention recurrence over a block of columns: (m, l, acc) after S_j and V_j.

    ``m``, ``l``: (rows,) running maximum and running sum (the paper's names, hence the noqa for ``l``);
    ``acc``: (rows, dv) running e^(S − m)·V, not yet divided by l; ``s_block``: (rows, bc) scores of this block
    (already scaled; masked ones −inf); ``v_block``: (bc, dv). Returns the new (m, l, acc)."""
    m, l = _matrix("m", m, 1), _matrix("l", l, 1)  # noqa: E741
    acc, s_block, v_block = _matrix("acc", acc, 2), _matrix("s_block", s_block, 2), _matrix("v_block", v_block, 2)
    rows, bc = s_block.shape
    if m.shape != (rows,) or l.shape != (rows,) or acc.shape[0] != rows or v_block.shape != (bc, acc.shape[1]):
        raise InvalidConfig(f"shapes do not match: m {m.shape} and l {l.shape} must be ({rows},), acc (rows, dv) "
                            f"= {acc.shape}, s_block (rows, bc) = {s_block.shape}, v_block (bc, dv) = "
                            f"{v_block.shape}")
    m_new = np.maximum(m, s_block.max(axis=1))
    # a row still all −inf shifts by 0 instead: e^(−inf − (−inf)) would be nan, e^(−inf − 0) is the 0 it should be
    shift = np.where(np.isneginf(m_new), 0.0, m_new)
    alpha = np.exp(m - shift)  # how much the old maximum overstated: rescales l and acc
    p = np.exp(s_block - shift[:, None])
    return m_new, alpha * l + p.sum(axis=1), alpha[:, None] * acc + p @ v_block


def online_softmax(s, v, block: int = 64, return_lse: bool = False):
    """softmax(S)·V computed ``block`` columns at a time with ``tile_step`` (and the rows' logsumexp)."""
    s, v = _matrix("s", s, 2), _matrix("v", v, 2)
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise InvalidConfig(f"block must be a positive integer; got {block!r}")
    if v.shape[0] != s.shape[1]:
        raise InvalidConfig(f"v must have one row per column of s: s is {s.shape}, v is {v.shape}")
    dtype = np.result_type(s, v)
    m = np.full(s.shape[0], -np.inf, dtype)
    l = np.zeros(s.shape[0], dtype)  # noqa: E741
    acc = np.zeros((s.shape[0], v.shape[1]), dtype)
    for start in range(0, s.shape[1], block):
        m, l, acc = tile_step(m, l, acc, s[:, start:start + block], v[start:start + block])  # noqa: E741
    out = acc / l[:, None]
    return (out, m + np.log(l)) if return_lse else out


def scores(q, k, causal: bool = False) -> np.ndarray:
    """S = Q·Kᵀ / √d, with −inf above the diagonal when causal (row r sees keys 0..r)."""
    q, k = _matrix("q", q, 2), _matrix("k", k, 2)
    if q.shape[1] != k.shape[1]:
        raise InvalidConfig(f"q and k need the same head dimension: q is {q.shape}, k is {k.shape}")
    s = q @ k.T / np.sqrt(q.shape[1])
    if causal:
        s = np.where(np.tri(*s.shape, dtype=bool), s, -np.inf)
    return s


def exact_attention(q, k, v, causal: bool = False) -> np.ndarray:
    """The reference: softmax(Q·Kᵀ / √d)·V, the whole score matrix at once (stable softmax)."""
    return softmax(scores(q, k, causal)) @ _matrix("v", v, 2)


def online_attention(q, k, v, block: int = 64, causal: bool = False, return_lse: bool = False):
    """Attention through the online softmax: the same result as ``exact_attention``, ``block`` keys at a time."""
    return online_softmax(scores(q, k, causal), v, block, return_lse)


def attention_by_tiles(step, q, k, v, block: int = 64) -> np.ndarray:
    """softmax(Q·Kᵀ/√d)·V computed by folding ``step`` over the K/V tiles of ``block`` rows, as one FlashAttention
    program does for its Q tile: ``(m, l, acc) = step(m, l, acc, q, k_tile, v_tile)`` from m = −inf, l = 0,
    acc = 0 (float64), then O = acc / l. Lab 13's grader hands it the learner's tile step (through ``call``: the
    step runs on the grader's fresh thread); any sequence length works (the last tile is partial)."""
    q, k, v = _matrix("q", q, 2), _matrix("k", k, 2), _matrix("v", v, 2)
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise InvalidConfig(f"block must be a positive integer; got {block!r}")
    if k.shape != (v.shape[0], q.shape[1]):
        raise InvalidConfig(f"k must be (keys, d) with d = q's {q.shape[1]} and as many rows as v: q is {q.shape}, "
                            f"k is {k.shape}, v is {v.shape}")
    m = np.full(q.shape[0], -np.inf)
    l = np.zeros(q.shape[0])  # noqa: E741
    acc = np.zeros((q.shape[0], v.shape[1]))
    for start in range(0, k.shape[0], block):
        m, l, acc = step(m, l, acc, q.copy(), k[start:start + block].copy(), v[start:start + block].copy())  # noqa: E741
    return acc / l[:, None]
