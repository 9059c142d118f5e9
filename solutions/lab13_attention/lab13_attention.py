# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: jupyter,nbgrader,-all
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (gpucourse)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false, "task": false}
# # Lab 13 · Attention: the online softmax and the bytes it saves
#
# *About 45 minutes. Goes with lesson 12 "Attention".*
#
# Attention computes softmax(Q·Kᵀ/√d)·V. Written the obvious way it stores the n × n score matrix in the
# GPU's memory (HBM) and reads it back, twice. FlashAttention never stores it: each program keeps one tile of
# queries on chip, walks the tiles of K and V, and keeps the softmax **online**, with a running maximum and a
# running sum that it corrects whenever a new tile raises the maximum. You will write that correction (the
# online softmax step), then one whole FlashAttention tile step (the running output too), and finally count,
# exactly, the bytes each version moves through HBM.
#
# Everything here is NumPy and arithmetic: no GPU, no Triton. The grader checks your functions on **fresh
# random data drawn when it grades** (nothing to learn by heart) and on sizes the visible tests do not show.
#
# How to work: fill in every cell that says `YOUR CODE HERE` (delete the `raise NotImplementedError()`
# line). Don't edit the test cells: they are locked and are graded again, with more hidden cases, after you
# submit. Run each test cell after your answer; a cell that runs without error has passed its visible checks.
# In JupyterLab, **Kernel → Restart Kernel and Run All Cells** before you submit, then use **Validate**.
# The course's own answers (`online.tile_step`, `online.online_softmax`, `model.naive_bytes`,
# `model.flash_bytes` and their helpers) are off limits in an answer: a call to one earns 0 for that
# exercise, however it is spelled. The tests use `online.exact_attention` and `online.attention_by_tiles`.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import numpy as np

from gpucourse.lessons.attention import model, online
from gpucourse.measure import runtime
from gpucourse.tooling.grading import check

rng = np.random.default_rng(13)
runtime.banner()

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 1 · One step of the online softmax (3 points)
#
# A row's softmax needs the row's maximum (so that `exp` cannot overflow) and the sum of e^(s − max) over
# the whole row. FlashAttention sees the row one block of columns at a time, so it keeps two running
# numbers per row: `m`, the largest score seen so far, and `l`, the sum of e^(s − m) over the scores seen
# so far. Before the first block, m = −∞ and l = 0. When a block arrives, the maximum may grow; every term
# already in `l` was computed against the old maximum, and is now too large by a factor that is the same
# for all of them.
#
# **Goal.** `online_softmax_step(m, l, s_block)`: `m` and `l` are float64 arrays of shape `(rows,)`, the
# running maximum and running sum of each row; `s_block` is the next block of scores, shape `(rows, bc)`.
# Return the tuple `(m_new, l_new)` after that block: the maximum over every score seen so far, and the sum
# of e^(s − m_new) over every score seen so far. A score of −∞ is a masked one (causal attention masks
# the scores above the diagonal): a row whose scores so far are all −∞ keeps m = −∞ and l = 0, never `nan`.
# Leave the inputs unchanged.
#
# **Evidence to reach**: folded over the blocks of a row, your step ends with the row's maximum and its
# sum Σ e^(s − max), to a relative 1e-10, for scores as large as 1000 (where e^s overflows float64) and for
# rows whose first blocks are masked; each single step agrees with the grader's own computation on random
# data it draws when it grades.
#
# *Hints: in the collapsed cell below. Try without them first.*

# %% [markdown] jupyter={"source_hidden": true} nbgrader={"grade": false, "grade_id": "ex1_hints", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Hints for exercise 1**
#
# * The new maximum: `np.maximum(m, s_block.max(axis=1))`.
# * Each old term e^(s − m) must become e^(s − m_new): multiply the old sum by `np.exp(m - m_new)`
#   (≤ 1), then add this block's `np.exp(s_block - m_new[:, None]).sum(axis=1)`.
# * A row still all −∞: `m - m_new` is −∞ − (−∞) = `nan`. Subtract 0 instead of `m_new` where `m_new` is
#   −∞ (`np.where(np.isneginf(m_new), 0.0, m_new)`): e^(−∞ − 0) is the 0 it should be.

# %% nbgrader={"grade": false, "grade_id": "ex1_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
def online_softmax_step(m, l, s_block):
    ### BEGIN SOLUTION
    m_new = np.maximum(m, s_block.max(axis=1))
    shift = np.where(np.isneginf(m_new), 0.0, m_new)
    return m_new, np.exp(m - shift) * l + np.exp(s_block - shift[:, None]).sum(axis=1)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex1_test", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
"""Check online_softmax_step: one step from the start, a growing maximum, masked rows, huge scores."""
m0, l0 = np.full(2, -np.inf), np.zeros(2)
m1, l1 = online_softmax_step(m0, l0, np.array([[0.0, 1.0], [2.0, 2.0]]))
assert np.allclose(m1, [1.0, 2.0]) and np.allclose(l1, [1 + np.exp(-1), 2.0]), "the first block alone"
m2, l2 = online_softmax_step(m1, l1, np.array([[3.0], [0.0]]))  # row 0's maximum grows, row 1's does not
assert np.allclose(m2, [3.0, 2.0]), "m is the largest score seen so far"
assert np.allclose(l2, [np.exp(-3) + np.exp(-2) + 1, 2 + np.exp(-2)]), "is the old sum rescaled?"
s = np.array([[-np.inf, -np.inf, 1000.0, 999.0], [5.0, -np.inf, 4.0, -np.inf]])
m, l = np.full(2, -np.inf), np.zeros(2)
for block in (s[:, :2], s[:, 2:]):
    m, l = online_softmax_step(m, l, block)
    assert not np.isnan(m).any() and not np.isnan(l).any(), "a masked row must not become nan"
assert np.allclose(m, [1000.0, 5.0]) and np.allclose(l, [1 + np.exp(-1), 1 + np.exp(-1)])
### BEGIN HIDDEN TESTS
FORBIDDEN = {"gpucourse.lessons.attention.online:tile_step": "the course's tile_step is the step you write here",
             "gpucourse.lessons.attention.online:online_softmax": "the course's online softmax is this exercise",
             "gpucourse.lessons.attention.online:online_attention": "the course's online softmax is this exercise"}
fresh = np.random.default_rng()  # drawn at every grading: no answer can be prepared for it


def expected(m, l, s):
    new_m, new_l, _ = online.tile_step(m, l, np.zeros((len(m), 1)), s, np.zeros((s.shape[1], 1)))
    return new_m, new_l


def close(answer, want) -> bool:
    return (isinstance(answer, tuple | list) and len(answer) == 2
            and all(type(a) is np.ndarray and a.shape == w.shape and np.allclose(a, w, rtol=1e-10, atol=0)
                    for a, w in zip(answer, want)))


cases = []
for rows, bc in [(5, 7), (1, 1), (16, 64), (3, 200)]:
    m = fresh.standard_normal(rows) * 3
    cases.append((m, fresh.random(rows) * 10 + 0.1, fresh.standard_normal((rows, bc)) * 4 + m[:, None]))
m = fresh.standard_normal(6)  # a block that raises every row's maximum far, with scores where e^s overflows
cases.append((m, fresh.random(6) + 1, m[:, None] + 500 + fresh.random((6, 9)) * 300))
masked = fresh.standard_normal((4, 12))  # rows still all −∞, and rows that get their first finite score now
masked[:2] = -np.inf
masked[2, :11] = -np.inf
cases.append((np.full(4, -np.inf), np.zeros(4), masked))
got = call_each(online_softmax_step, [(m.copy(), l.copy(), s.copy()) for m, l, s in cases])
check(all(close(answer, expected(m, l, s)) for (m, l, s), answer in zip(cases, got)))
# the step folded over a whole row, block by block: the row's maximum and Σ e^(s − max)
s = fresh.standard_normal((8, 150)) * 50
s[:3, :40] = -np.inf
s[5] += 900
m, l = np.full(8, -np.inf), np.zeros(8)
for start in range(0, 150, 32):
    answer = call(online_softmax_step, m, l, s[:, start:start + 32].copy())
    check(close(answer, expected(m, l, s[:, start:start + 32])))
    m, l = answer
check(np.allclose(m, s.max(axis=1), rtol=1e-12)
      and np.allclose(l, np.exp(s - s.max(axis=1, keepdims=True)).sum(axis=1), rtol=1e-10))
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 2 · One FlashAttention tile step (3 points)
#
# One FlashAttention program holds a tile of queries `q_tile` (shape `(rows, d)`) and, besides `m` and `l`,
# a running output `acc` (shape `(rows, dv)`): the sum of e^(s − m)·v over the keys seen so far, **not yet
# divided by** `l`. For each tile of keys `k_tile` (`(bc, d)`) and values `v_tile` (`(bc, dv)`) it computes
# the tile's scores S = q_tile·k_tileᵀ/√d, updates `m` and `l` as in exercise 1, and updates `acc` the same
# way: what it held was weighted against the old maximum. After the last tile, O = acc / l, one division per
# row, and the n × n score matrix was never stored.
#
# **Goal.** `flash_tile_step(m, l, acc, q_tile, k_tile, v_tile)`, all float64 arrays: return the tuple
# `(m_new, l_new, acc_new)` after one tile of keys and values, with d = `q_tile.shape[1]`. Leave the inputs
# unchanged.
#
# **Evidence to reach**: `online.attention_by_tiles(flash_tile_step, q, k, v, block)` (the course's loop:
# it starts from m = −∞, l = 0, acc = 0, calls your step once per tile of `block` keys, the last tile
# possibly shorter, and returns acc / l) equals exact attention `online.exact_attention(q, k, v)` to a
# relative 1e-9, for any sequence length and tile size, and for scores large enough that e^s overflows;
# each single step's `(m, l, acc)` agrees with the grader's own on random data it draws when it grades.
#
# *Hints: in the collapsed cell below. Try without them first.*

# %% [markdown] jupyter={"source_hidden": true} nbgrader={"grade": false, "grade_id": "ex2_hints", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Hints for exercise 2**
#
# * Scores of the tile: `q_tile @ k_tile.T / np.sqrt(q_tile.shape[1])`, shape `(rows, bc)`.
# * One factor per row, `alpha = np.exp(m - m_new)` (with exercise 1's care for rows still at −∞),
#   rescales both `l` and `acc`: `alpha[:, None] * acc` for the output.
# * The tile's contribution to the output: `p @ v_tile` with `p = np.exp(s - m_new[:, None])`, the same
#   `p` whose row sums go into `l`.

# %% nbgrader={"grade": false, "grade_id": "ex2_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
def flash_tile_step(m, l, acc, q_tile, k_tile, v_tile):
    ### BEGIN SOLUTION
    s = q_tile @ k_tile.T / np.sqrt(q_tile.shape[1])
    m_new = np.maximum(m, s.max(axis=1))
    shift = np.where(np.isneginf(m_new), 0.0, m_new)
    alpha = np.exp(m - shift)
    p = np.exp(s - shift[:, None])
    return m_new, alpha * l + p.sum(axis=1), alpha[:, None] * acc + p @ v_tile
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex2_test", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
"""Check flash_tile_step: folded over the tiles it gives exact attention; one step keeps acc unnormalised."""
q, k, v = rng.standard_normal((6, 8)), rng.standard_normal((40, 8)), rng.standard_normal((40, 3))
exact = online.exact_attention(q, k, v)
for block in (16, 40, 7):
    assert np.allclose(online.attention_by_tiles(flash_tile_step, q, k, v, block), exact), f"tiles of {block}"
m, l, acc = flash_tile_step(np.full(1, -np.inf), np.zeros(1), np.zeros((1, 1)), np.array([[2.0, 0.0, 0.0, 0.0]]),
                            np.array([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]), np.array([[3.0], [5.0]]))
assert np.allclose(m, [1.0]) and np.allclose(l, [1 + np.exp(-1)]), "S = q·kᵀ/√d: here [1, 0]"
assert np.allclose(acc, [[3 + 5 * np.exp(-1)]]), "acc is e^(s − m)·v summed, not yet divided by l"
big = online.attention_by_tiles(flash_tile_step, 30 * q, 30 * k, v, 16)
assert np.allclose(big, online.exact_attention(30 * q, 30 * k, v)), "scores in the thousands: is it stable?"
### BEGIN HIDDEN TESTS
FORBIDDEN = {"gpucourse.lessons.attention.online:tile_step": "the course's tile_step is the step you write here",
             "gpucourse.lessons.attention.online:online_softmax": "the course's online softmax is this exercise",
             "gpucourse.lessons.attention.online:online_attention": "the course's online softmax is this exercise"}
fresh = np.random.default_rng()  # drawn at every grading
for rows, keys, d, dv, block, scale in [(9, 77, 8, 5, 16, 1.0), (1, 3, 4, 2, 64, 1.0), (17, 128, 16, 16, 32, 1.0),
                                        (5, 50, 8, 3, 1, 1.0), (4, 60, 16, 4, 13, 40.0)]:
    q, k = fresh.standard_normal((rows, d)) * scale, fresh.standard_normal((keys, d)) * scale
    v = fresh.standard_normal((keys, dv))
    got = call(online.attention_by_tiles, flash_tile_step, q, k, v, block)
    want = online.exact_attention(q, k, v)
    check(type(got) is np.ndarray and got.shape == want.shape and np.allclose(got, want, rtol=1e-9, atol=1e-12))
# single steps against the grader's own (m, l, acc), the maximum raised or not, rows still masked
steps = []
for rows, bc, d, dv in [(6, 10, 8, 3), (2, 1, 4, 5)]:
    m = fresh.standard_normal(rows) * 2
    m[0] = -np.inf
    l = np.where(np.isneginf(m), 0.0, fresh.random(rows) + 0.5)
    acc = fresh.standard_normal((rows, dv)) * (l[:, None] > 0)
    steps.append((m, l, acc, fresh.standard_normal((rows, d)), fresh.standard_normal((bc, d)),
                  fresh.standard_normal((bc, dv))))
got = call_each(flash_tile_step, [tuple(a.copy() for a in case) for case in steps])
for (m, l, acc, q, k, v), answer in zip(steps, got):
    want = online.tile_step(m, l, acc, q @ k.T / np.sqrt(q.shape[1]), v)
    check(isinstance(answer, tuple | list) and len(answer) == 3 and all(
        type(a) is np.ndarray and a.shape == w.shape and np.allclose(a, w, rtol=1e-10, atol=1e-12)
        for a, w in zip(answer, want)))
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 3 · The bytes of naive attention (1 point)
#
# Now count what each version moves through HBM, for one (batch, head): `n` queries and `n` keys, head
# dimension `d`, and `dtype_bytes` bytes per element of Q, K, V, O (2 for fp16). The model counts every
# load a kernel issues as HBM traffic (no cache serves a re-read): the count FlashAttention's paper makes.
#
# Naive attention runs three kernels, and each reads its inputs once and writes its output once:
# `S = Q·Kᵀ/√d` (the scale fused in), `P = softmax(S)` row by row, `O = P·V`. S and P are stored in the
# inputs' dtype. A causal mask changes nothing here: the softmax kernel applies it, and both matmuls
# compute every element.
#
# **Goal.** `naive_hbm_bytes(n, d, dtype_bytes)`: the bytes the three kernels read and write, an `int`.
#
# **Evidence to reach**: for n = 4096, d = 64 and fp16, 136,314,880 bytes; the grader checks other shapes
# and sizes of element, as plain numbers.
#
# *Hints: in the collapsed cell below. Try without them first.*

# %% [markdown] jupyter={"source_hidden": true} nbgrader={"grade": false, "grade_id": "ex3_hints", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Hints for exercise 3**
#
# * Write each kernel's reads and writes in elements: Q and K are n·d each, S and P are n·n each, V and O
#   are n·d each. Then multiply by `dtype_bytes`.
# * Two matrices of n·n elements, each written once and read once: 4·n² elements in all.

# %% nbgrader={"grade": false, "grade_id": "ex3_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
def naive_hbm_bytes(n, d, dtype_bytes):
    ### BEGIN SOLUTION
    return (4 * n * d + 4 * n * n) * dtype_bytes
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex3_test", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""Check naive_hbm_bytes against the example and a small case counted by hand."""
assert naive_hbm_bytes(4096, 64, 2) == 136_314_880
assert naive_hbm_bytes(4, 2, 1) == 2 * 4 * 2 + 16 + 16 + 16 + 16 + 4 * 2 + 4 * 2, "Q, K; S; S, P; P, V; O"
### BEGIN HIDDEN TESTS
FORBIDDEN = {"gpucourse.lessons.attention.model:naive_bytes": "the course's naive_bytes is this count",
             "gpucourse.lessons.attention.model:naive_traffic": "the course's naive_traffic is this count",
             "gpucourse.lessons.attention.model:placements": "the course's placements count these bytes"}
shapes = [(1, 1, 1), (1000, 64, 2), (7, 128, 4), (16384, 128, 2), (300, 16, 1)]
got = call_each(naive_hbm_bytes, shapes)
check(got == [model.naive_bytes(*shape) for shape in shapes])
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex4_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 4 · The bytes of FlashAttention (3 points)
#
# The FlashAttention-2 forward runs one program per tile of `br` query rows: ⌈n/br⌉ programs. Each loads its
# Q tile once, then every K tile and V tile of `bc` rows it needs, and writes its O tile once, plus the
# rows' logsumexp (one fp32 number, 4 bytes, per query row, whatever `dtype_bytes` is). Not causal, every
# program needs all n rows of K and all n rows of V. Causal, the program of query rows i·br … (its last
# row r) needs only the K/V tiles that hold a column ≤ r, and it loads each of those tiles **whole**, `bc`
# rows, except the sequence's last tile, which has only the rows that exist. A last query tile may be short
# too (n need not be a multiple of `br` or `bc`).
#
# **Goal.** `flash_hbm_bytes(n, d, br, bc, dtype_bytes, causal=False)`: the bytes this forward pass reads
# and writes for one (batch, head), an `int`.
#
# **Evidence to reach**: for n = 4096, d = 64, 64 × 64 tiles and fp16, 68,173,824 bytes (about half of
# naive attention's: the table after the tests says why), and 35,143,680 causal; the grader checks other
# shapes, uneven tiles and sequence lengths that are no multiple of either tile, as plain numbers.
#
# *Hints: in the collapsed cell below. Try without them first.*

# %% [markdown] jupyter={"source_hidden": true} nbgrader={"grade": false, "grade_id": "ex4_hints", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Hints for exercise 4**
#
# * Q read once and O written once: 2·n·d elements. The logsumexp: 4·n bytes.
# * K and V: count the rows each program loads, sum over the programs, times d, times 2 (K and V). Not
#   causal: n rows per program.
# * Causal, program i's last row is `r = min((i + 1) * br, n) - 1`; the tiles it loads are 0 … r // bc,
#   that is (r // bc + 1)·bc rows, but never more than n.

# %% nbgrader={"grade": false, "grade_id": "ex4_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
def flash_hbm_bytes(n, d, br, bc, dtype_bytes, causal=False):
    ### BEGIN SOLUTION
    programs = -(-n // br)
    kv_rows = 0
    for i in range(programs):
        last_row = min((i + 1) * br, n) - 1
        kv_rows += min(n, (last_row // bc + 1) * bc) if causal else n
    return (2 * n * d + 2 * kv_rows * d) * dtype_bytes + 4 * n
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex4_test", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
"""Check flash_hbm_bytes against the examples and a small case counted by hand."""
assert flash_hbm_bytes(4096, 64, 64, 64, 2) == 68_173_824
assert flash_hbm_bytes(4096, 64, 64, 64, 2, causal=True) == 35_143_680
# n = 5, tiles of 2: 3 programs (rows 0-1, 2-3, 4). Not causal each loads all 5 K rows; causal, 2, 4, then 5.
assert flash_hbm_bytes(5, 2, 2, 2, 1) == 2 * 5 * 2 + 2 * 15 * 2 + 4 * 5
assert flash_hbm_bytes(5, 2, 2, 2, 1, causal=True) == 2 * 5 * 2 + 2 * 11 * 2 + 4 * 5, "whole tiles, cut at n"
### BEGIN HIDDEN TESTS
FORBIDDEN = {"gpucourse.lessons.attention.model:flash_bytes": "the course's flash_bytes is this count",
             "gpucourse.lessons.attention.model:flash_traffic": "the course's flash_traffic is this count",
             "gpucourse.lessons.attention.model:kv_rows_read": "the course's kv_rows_read is this count",
             "gpucourse.lessons.attention.model:visited_tiles": "the course's visited_tiles lists these tiles",
             "gpucourse.lessons.attention.model:placements": "the course's placements count these bytes"}
cases = [(1000, 64, 64, 32, 2, True), (1000, 64, 32, 64, 2, True), (4096, 128, 128, 64, 2, False),
         (77, 16, 16, 16, 4, True), (1, 16, 64, 64, 2, True), (100, 32, 128, 16, 1, True), (100, 32, 16, 128, 1, True),
         (8192, 64, 128, 128, 2, True), (333, 64, 64, 64, 4, False), (64, 64, 64, 64, 2, True)]
got = call_each(flash_hbm_bytes, cases)
check(got == [model.flash_bytes(*case) for case in cases])
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex4_show_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Your two counts side by side, fp16, d = 64, 128 × 64 tiles: naive attention's bytes grow with n², and so
# do FlashAttention's (every program re-reads K and V), but with a coefficient 2·br/d times smaller. On a
# real GPU the L2 serves part of those re-reads; lesson 12 places both on the roofline.

# %% nbgrader={"grade": false, "grade_id": "ex4_show", "locked": true, "schema_version": 3, "solution": false, "task": false}
for n in (1024, 4096, 16384):
    naive, flash = naive_hbm_bytes(n, 64, 2), flash_hbm_bytes(n, 64, 128, 64, 2)
    print(f"n = {n:>6}: naive {naive / 2**20:9.1f} MiB, FlashAttention {flash / 2**20:7.1f} MiB, "
          f"{naive / flash:4.1f}× fewer bytes")
