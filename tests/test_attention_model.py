"""The attention lesson's counted quantities (bytes, FLOPs, tiles) and its NumPy online softmax: hand-worked
cases, a brute-force enumeration of the tiles, exact growth ratios, and the recurrence against softmax(S)·V."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from gpucourse.errors import InvalidConfig
from gpucourse.lessons.attention import model, online

# --- hand-worked: n = 4, d = 2, fp16 (2 bytes), br = bc = 2 -------------------------------------------------------


def test_naive_bytes_hand_worked():
    # S = QKᵀ: read Q 4·2 = 8 and K 8 elements, write S 4·4 = 16; softmax: read S 16, write P 16;
    # O = PV: read P 16, read V 8, write O 8.  8+8+16+16+16+16+8+8 = 96 elements · 2 bytes = 192
    assert model.naive_bytes(4, 2, 2) == 192
    assert model.naive_bytes(4, 2, "fp16") == 192
    assert sum(model.naive_traffic(4, 2, 2).values()) == 192
    assert model.naive_flops(4, 2) == 128  # QKᵀ 2·16·2 = 64, PV 64


def test_flash_bytes_hand_worked_not_causal():
    # Tr = ⌈4/2⌉ = 2 Q tiles, each reads all 4 rows of K and of V: K 2·4·2 = 16, V 16 elements;
    # Q once 8, O once 8: 48 elements · 2 bytes = 96, plus the logsumexp 4 rows · 4 bytes = 16 → 112
    assert model.flash_bytes(4, 2, 2, 2, 2) == 112
    assert model.flash_traffic(4, 2, 2, 2, 2) == {"read Q (once)": 16, "read K (per Q tile)": 32,
                                                  "read V (per Q tile)": 32, "write O (once)": 16,
                                                  "write logsumexp (fp32)": 16}
    assert model.flash_flops(4, 2, 2, 2) == 128  # all four 2×2 tiles: 4 · (4·d·2·2) = 4·32


def test_flash_bytes_hand_worked_causal():
    # Q tile 0 (rows 0-1) visits K/V tile 0 only (tile 1 starts at column 2 > row 1): 2 rows of K;
    # Q tile 1 (rows 2-3) visits tiles 0 and 1: 4 rows. K 6·2 = 12, V 12, Q 8, O 8 = 40 elements · 2 = 80, + 16
    assert model.visited_tiles(4, 2, 2, causal=True) == [(0, 0), (1, 0), (1, 1)]
    assert model.kv_rows_read(4, 2, 2, causal=True) == 6
    assert model.flash_bytes(4, 2, 2, 2, 2, causal=True) == 96
    assert model.flash_flops(4, 2, 2, 2, causal=True) == 96  # 3 tiles · 4·d·2·2 = 3·32
    assert model.useful_flops(4, 2, causal=True) == 80  # 10 (row, column) pairs at or below the diagonal · 4·d
    assert model.naive_bytes(4, 2, 2) == 192 and model.naive_flops(4, 2) == 128  # naive skips nothing


def test_partial_and_unequal_tiles_hand_worked():
    # n = 5, br = bc = 2, causal: Q tiles rows 0-1, 2-3, 4 (partial). Tile 0 reads K tile 0 (2 rows); tile 1 reads
    # tiles 0, 1 (4 rows); tile 2 (row 4) reads tiles 0, 1, 2 = rows 0-1, 2-3, 4 (5 rows: the last tile is partial)
    assert model.kv_rows_read(5, 2, 2, causal=True) == 11
    # visited (rows × columns): 2·2, 2·2, 2·2, 1·2, 1·2, 1·1 = 17 scores computed, each 4·d FLOPs
    assert model.flash_flops(5, 3, 2, 2, causal=True) == 17 * 4 * 3
    # n = 8, br = 4, bc = 2, causal: tile 0 (rows 0-3) reads columns < 4 = 4 rows, tile 1 all 8: 12
    assert model.kv_rows_read(8, 4, 2, causal=True) == 12
    # n = 8, br = 2, bc = 4, causal: the first K tile is loaded whole (4 rows) even by Q tile 0 (rows 0-1):
    # tiles 0 and 1 read 4 rows each, tiles 2 and 3 read 8 each: 24
    assert model.kv_rows_read(8, 2, 4, causal=True) == 24
    assert model.kv_rows_read(5, 2, 2) == 5 * 3  # not causal: n rows per Q tile, ⌈5/2⌉ = 3 tiles


def brute_force(n: int, br: int, bc: int, causal: bool) -> tuple[list, int, int]:
    """Every tile that holds an element at or below the diagonal (or any, not causal): its K rows and its scores."""
    visited, rows_read, computed = [], 0, 0
    for i in range(-(-n // br)):
        for j in range(-(-n // bc)):
            rows = range(i * br, min((i + 1) * br, n))
            cols = range(j * bc, min((j + 1) * bc, n))
            if not causal or any(c <= r for r in rows for c in cols):
                visited.append((i, j))
                rows_read += len(cols)
                computed += len(rows) * len(cols)
    return visited, rows_read, computed


@pytest.mark.parametrize("causal", [False, True])
def test_tiles_against_brute_force_enumeration(causal):
    for n in (1, 2, 3, 5, 16, 17, 31, 64, 100):
        for br in (1, 2, 3, 4, 16, 32):
            for bc in (1, 2, 4, 5, 16, 64):
                visited, rows_read, computed = brute_force(n, br, bc, causal)
                assert model.visited_tiles(n, br, bc, causal) == visited, (n, br, bc)
                assert model.kv_rows_read(n, br, bc, causal) == rows_read, (n, br, bc)
                assert model.flash_flops(n, 8, br, bc, causal) == 4 * 8 * computed, (n, br, bc)
                d, b = 8, 2
                assert model.flash_bytes(n, d, br, bc, b, causal) == (2 * n * d + 2 * rows_read * d) * b + 4 * n


def test_worked_example_n4096_d64_fp16_tiles64():
    n, d, b, t = 4096, 64, 2, 64
    assert model.naive_bytes(n, d, b) == (4 * n * d + 4 * n * n) * b == 136_314_880
    assert model.flash_bytes(n, d, t, t, b) == (2 * n * d + 2 * n * d * (n // t)) * b + 4 * n == 68_173_824
    assert model.naive_flops(n, d) == model.flash_flops(n, d, t, t) == 4_294_967_296
    assert model.flash_bytes(n, d, t, t, b, causal=True) == 35_143_680  # K/V rows 64·(1+…+64) = 133,120
    assert model.flash_flops(n, d, t, t, causal=True) == 2080 * 4 * d * t * t  # 64·65/2 tiles
    naive, flash, floor = model.placements(n, d, t, t, "fp16")
    assert naive.intensity_flop_per_byte == pytest.approx(31.508, abs=1e-3)
    assert flash.intensity_flop_per_byte == pytest.approx(63.000, abs=1e-3)
    assert floor.bytes == 4 * n * d * b + 4 * n and floor.intensity_flop_per_byte == pytest.approx(2032.12, abs=0.01)
    assert naive.ridge_flop_per_byte == pytest.approx(989.4e12 / 4.8e12)  # H200 SXM datasheet, fp16 dense
    assert (naive.bound, flash.bound, floor.bound) == ("memory-bound", "memory-bound", "compute-bound")


def test_naive_grows_quadratically_flash_by_br_over_d():
    d, b, br = 64, 2, 64
    for n in (256, 1024, 4096):
        # exact: doubling n multiplies naive bytes by (8nd + 16n²) / (4nd + 4n²), → 4
        assert Fraction(model.naive_bytes(2 * n, d, b), model.naive_bytes(n, d, b)) == \
            Fraction(8 * n * d + 16 * n * n, 4 * n * d + 4 * n * n)
    # FlashAttention-2 without an L2 re-reads K and V once per Q tile: 2·d·n²/br elements, quadratic too, with a
    # coefficient 2·br/d times smaller than naive's 4·n²
    assert model.flash_bytes(2 * 4096, d, br, br, b) > 2 * model.flash_bytes(4096, d, br, br, b)
    n = 1 << 20
    ratio = model.naive_bytes(n, d, b) / model.flash_bytes(n, d, br, br, b)
    assert ratio == pytest.approx(model.quadratic_coefficient_ratio(d, br), rel=1e-3)
    assert model.quadratic_coefficient_ratio(64, 128) == 4.0


def test_what_grows_linearly():
    # the memory beyond Q, K, V, O (naive S and P against FlashAttention's logsumexp) and the compulsory traffic
    for n in (100, 4096):
        assert model.extra_memory_bytes(2 * n, 2, flash=True) == 2 * model.extra_memory_bytes(n, 2, flash=True)
        assert model.extra_memory_bytes(2 * n, 2, flash=False) == 4 * model.extra_memory_bytes(n, 2, flash=False)
        assert model.compulsory_bytes(2 * n, 64, 2) == 2 * model.compulsory_bytes(n, 64, 2)


def test_bigger_query_tiles_read_less():
    reads = [model.flash_bytes(4096, 64, br, 64, 2) for br in (16, 32, 64, 128)]
    assert reads == sorted(reads, reverse=True) and len(set(reads)) == 4


def test_ridge_point_and_bad_input():
    assert model.ridge_point("NVIDIA H200", "fp16") == pytest.approx(206.125)
    with pytest.raises(InvalidConfig, match="no datasheet"):
        model.ridge_point("NVIDIA GeForce GT 710", "fp16")
    with pytest.raises(InvalidConfig, match="n must be a positive integer"):
        model.naive_bytes(0, 64)
    with pytest.raises(InvalidConfig, match="dtype must be one of"):
        model.flash_bytes(64, 64, 16, 16, "fp8")
    with pytest.raises(InvalidConfig, match="br must be a positive integer"):
        model.flash_bytes(64, 64, 16.0, 16)


# --- online softmax ---------------------------------------------------------------------------------------------

def test_online_softmax_equals_softmax_times_v():
    rng = np.random.default_rng(1)
    s, v = rng.normal(size=(7, 23)), rng.normal(size=(23, 5))
    want = online.softmax(s) @ v
    for block in (1, 3, 7, 23, 64):
        out, lse = online.online_softmax(s, v, block, return_lse=True)
        np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(lse, np.log(np.exp(s).sum(axis=1)), rtol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
def test_online_attention_equals_attention(causal):
    rng = np.random.default_rng(2)
    q, k, v = (rng.normal(size=(33, 16)) for _ in range(3))
    np.testing.assert_allclose(online.online_attention(q, k, v, 8, causal), online.exact_attention(q, k, v, causal),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_online_softmax_is_stable_where_a_naive_exp_overflows(dtype):
    rng = np.random.default_rng(3)
    small = rng.normal(size=(4, 40))
    s, v = (1e4 + small).astype(dtype), rng.normal(size=(40, 3)).astype(dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        assert np.isnan(online.naive_softmax(s)).all()  # e^10000 = inf, inf/inf = nan
    out = online.online_softmax(s, v, block=16)
    assert out.dtype == dtype and np.isfinite(out).all()
    # softmax does not change when every score of a row moves by the same amount
    tol = 1e-2 if dtype == np.float32 else 1e-9  # float32 holds 1e4 + x to ~1e-3 of x
    np.testing.assert_allclose(out, online.softmax(small) @ v, rtol=tol, atol=tol)


def test_tile_step_hand_worked():
    # so far one score 0 with value 2: m = 0, l = e^0 = 1, acc = 2. Next block: one score ln 4 with value 3.
    # m_new = ln 4, alpha = e^(0 − ln 4) = 1/4, p = 1: l = 1/4 + 1 = 5/4, acc = 2/4 + 3 = 7/2; O = 14/5 = (2 + 4·3)/5
    m, total, acc = online.tile_step(np.array([0.0]), np.array([1.0]), np.array([[2.0]]),
                                     np.array([[np.log(4)]]), np.array([[3.0]]))
    assert m == pytest.approx(np.log(4)) and total == pytest.approx(1.25) and acc == pytest.approx(3.5)
    assert (acc / total[:, None])[0, 0] == pytest.approx(2.8)


def test_tile_step_from_the_start_is_exact():
    rng = np.random.default_rng(4)
    s, v = rng.normal(size=(5, 8)), rng.normal(size=(8, 3))
    m, total, acc = online.tile_step(np.full(5, -np.inf), np.zeros(5), np.zeros((5, 3)), s, v)
    e = np.exp(s - s.max(axis=1, keepdims=True))
    np.testing.assert_array_equal(m, s.max(axis=1))
    np.testing.assert_array_equal(total, e.sum(axis=1))
    np.testing.assert_array_equal(acc, e @ v)


def test_tile_step_keeps_a_fully_masked_row_empty():
    s = np.array([[-np.inf, -np.inf], [0.0, 1.0]])
    m, total, acc = online.tile_step(np.full(2, -np.inf), np.zeros(2), np.zeros((2, 1)), s, np.ones((2, 1)))
    assert m[0] == -np.inf and total[0] == 0 and acc[0, 0] == 0 and np.isfinite(total[1])
    m, total, acc = online.tile_step(m, total, acc, np.array([[5.0], [-np.inf]]), np.array([[7.0]]))
    assert (m[0], total[0], acc[0, 0]) == (5.0, 1.0, 7.0)


def test_online_bad_input():
    with pytest.raises(InvalidConfig, match="shapes do not match"):
        online.tile_step(np.zeros(2), np.zeros(2), np.zeros((2, 3)), np.zeros((2, 4)), np.zeros((5, 3)))
    with pytest.raises(InvalidConfig, match="one row per column"):
        online.online_softmax(np.zeros((2, 4)), np.zeros((3, 1)))
    with pytest.raises(InvalidConfig, match="block must be a positive integer"):
        online.online_softmax(np.zeros((2, 4)), np.zeros((4, 1)), block=0)
    with pytest.raises(InvalidConfig, match="2-D array of numbers"):
        online.softmax(np.zeros(3))


def test_attention_by_tiles_folds_a_step_over_every_tile():
    """The fold lab 13 grades a learner's step with: the course's tile_step, given the tile's scores, gives
    exact attention for any sequence length (a partial last tile) and a single tile; bad shapes are one line."""
    rng = np.random.default_rng(5)
    q, k, v = rng.standard_normal((7, 8)), rng.standard_normal((45, 8)), rng.standard_normal((45, 3))

    def step(m, l, acc, q_tile, k_tile, v_tile):  # noqa: E741
        return online.tile_step(m, l, acc, q_tile @ k_tile.T / np.sqrt(q_tile.shape[1]), v_tile)

    seen = []

    def counting(m, l, acc, q_tile, k_tile, v_tile):  # noqa: E741
        seen.append(k_tile.shape[0])
        return step(m, l, acc, q_tile, k_tile, v_tile)

    for block in (1, 16, 45, 64):
        assert np.allclose(online.attention_by_tiles(step, q, k, v, block), online.exact_attention(q, k, v))
    online.attention_by_tiles(counting, q, k, v, 16)
    assert seen == [16, 16, 13]
    with pytest.raises(InvalidConfig, match="k must be"):
        online.attention_by_tiles(step, q, k[:, :4], v)
    with pytest.raises(InvalidConfig, match="block"):
        online.attention_by_tiles(step, q, k, v, 0)
