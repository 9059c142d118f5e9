"""The microscope's tensor-core fragments: the PTX ISA's mma.sync tables (m16n8k16 f16/bf16, m16n8k8 tf32),
ldmatrix, and ldmatrix's bank conflicts with and without the 128-byte swizzle (the lesson-04 bank model).

What pins the tables: (1) spot checks read off the ISA's figures; (2) ldmatrix, whose own short table
(row = laneid >> 2, columns (laneid % 4)*2 and +1 of matrix j in register j) is documented separately,
must hand every lane exactly its mma fragment; (3) the fragment-level mma (each product read from the
registers of the lane that holds it) equals A @ B + C. (3) alone cannot catch a table that is wrong but
still one-to-one (gather and the mma use the same table), which is why (1) and (2) exist:
``test_a_wrong_but_one_to_one_table_is_caught_by_ldmatrix`` shows it.
"""

from dataclasses import dataclass

import numpy as np
import pytest

from gpucourse.errors import InvalidConfig
from gpucourse.microscope import fragments
from gpucourse.microscope.fragments import MmaShape

SHAPES = [("m16n8k16", "f16"), ("m16n8k16", "bf16"), ("m16n8k8", "tf32")]


@pytest.mark.parametrize(("name", "dtype"), SHAPES)
def test_every_element_is_held_exactly_once(name, dtype):
    shape = fragments.mma_shape(name, dtype)
    for operand in ("a", "b", "c"):
        owner = shape.owners(operand)  # raises if an element is held twice or not at all
        rows, cols = shape.operand_shape(operand)
        assert owner.shape == (rows, cols, 2)
        assert len({tuple(o) for o in owner.reshape(-1, 2)}) == rows * cols == 32 * shape.slots(operand)
    assert [shape.slots(o) for o in "abc"] == ([8, 4, 4] if name == "m16n8k16" else [4, 2, 4])


# Read off the ISA's figures (m16n8k16 A/B/C: Figures "MMA .m16n8k16 fragment layout for matrix A/B/C";
# m16n8k8 .tf32: "MMA .m16n8k8 fragment layout for matrix A/B with .tf32 type"): T0 holds A's
# {a0, a1} at row 0, columns 0-1, {a2, a3} at row 8, {a4..a7} 8 columns right; T31 (group 7, thread 3)
# holds the bottom-right corner.
SPOT = [
    ("m16n8k16", "f16", "a", 0, [(0, 0), (0, 1), (8, 0), (8, 1), (0, 8), (0, 9), (8, 8), (8, 9)]),
    ("m16n8k16", "f16", "a", 5, [(1, 2), (1, 3), (9, 2), (9, 3), (1, 10), (1, 11), (9, 10), (9, 11)]),
    ("m16n8k16", "f16", "a", 31, [(7, 6), (7, 7), (15, 6), (15, 7), (7, 14), (7, 15), (15, 14), (15, 15)]),
    ("m16n8k16", "f16", "b", 0, [(0, 0), (1, 0), (8, 0), (9, 0)]),
    ("m16n8k16", "f16", "b", 6, [(4, 1), (5, 1), (12, 1), (13, 1)]),
    ("m16n8k16", "f16", "b", 31, [(6, 7), (7, 7), (14, 7), (15, 7)]),
    ("m16n8k16", "f16", "c", 0, [(0, 0), (0, 1), (8, 0), (8, 1)]),
    ("m16n8k16", "f16", "c", 31, [(7, 6), (7, 7), (15, 6), (15, 7)]),
    ("m16n8k8", "tf32", "a", 0, [(0, 0), (8, 0), (0, 4), (8, 4)]),
    ("m16n8k8", "tf32", "a", 31, [(7, 3), (15, 3), (7, 7), (15, 7)]),
    ("m16n8k8", "tf32", "b", 0, [(0, 0), (4, 0)]),
    ("m16n8k8", "tf32", "b", 31, [(3, 7), (7, 7)]),
    ("m16n8k8", "tf32", "c", 9, [(2, 2), (2, 3), (10, 2), (10, 3)]),
]


@pytest.mark.parametrize(("name", "dtype", "operand", "lane", "expected"), SPOT)
def test_known_entries_of_the_isa_figures(name, dtype, operand, lane, expected):
    shape = fragments.mma_shape(name, dtype)
    assert [shape.position(operand, lane, s) for s in range(shape.slots(operand))] == expected


def test_owner_labels_read_like_the_isa_figure():
    labels = fragments.owner_labels(fragments.mma_shape(), "a")
    assert labels.shape == (16, 16)
    assert list(labels[0, :4]) == ["T0 a0", "T0 a1", "T1 a0", "T1 a1"]  # four lanes share a row, two each
    assert labels[8, 0] == "T0 a2" and labels[0, 8] == "T0 a4" and labels[15, 15] == "T31 a7"
    assert fragments.owner_labels(fragments.mma_shape("m16n8k8", "tf32"), "b")[4, 0] == "T0 b1"


def _random_operands(shape: MmaShape, seed: int):
    rng = np.random.default_rng(seed)
    # small integers: exact in fp16, bf16 and tf32, so the comparison is exact
    a = rng.integers(-8, 9, shape.operand_shape("a")).astype(np.float64)
    b = rng.integers(-8, 9, shape.operand_shape("b")).astype(np.float64)
    c = rng.integers(-64, 65, shape.operand_shape("c")).astype(np.float64)
    return a, b, c


@pytest.mark.parametrize(("name", "dtype"), SHAPES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_fragment_level_mma_equals_numpy(name, dtype, seed):
    shape = fragments.mma_shape(name, dtype)
    a, b, c = _random_operands(shape, seed)
    d_frag = fragments.mma_fragments(shape, fragments.gather(shape, "a", a), fragments.gather(shape, "b", b),
                                     fragments.gather(shape, "c", c))
    assert np.array_equal(fragments.scatter(shape, "d", d_frag), a @ b + c)
    rng = np.random.default_rng(seed)  # and with real fp16 values, to rounding
    a16, b16 = (rng.standard_normal(shape.operand_shape(o)).astype(np.float16) for o in "ab")
    d = fragments.scatter(shape, "c", fragments.mma_fragments(
        shape, fragments.gather(shape, "a", a16), fragments.gather(shape, "b", b16), np.zeros((32, 4))))
    np.testing.assert_allclose(d, a16.astype(np.float64) @ b16.astype(np.float64), rtol=1e-12, atol=1e-12)


def test_gather_and_scatter_are_inverse():
    shape = fragments.mma_shape()
    a = np.arange(256, dtype=np.float64).reshape(16, 16)
    frag = fragments.gather(shape, "a", a)
    assert frag.shape == (32, 8)
    assert list(frag[0]) == [0, 1, 128, 129, 8, 9, 136, 137]  # A[0,0], A[0,1], A[8,0], A[8,1], A[0,8]...
    assert np.array_equal(fragments.scatter(shape, "a", frag), a)


# --- ldmatrix hands each lane its mma fragment (an independent ISA table) -------------------------------

def test_ldmatrix_x4_of_a_16x16_fp16_block_gives_every_lane_its_a_fragment():
    shape = fragments.mma_shape("m16n8k16", "f16")
    a = np.arange(256).reshape(16, 16).astype(np.float16)
    shared = a.reshape(-1)  # row-major 16×16: row r at byte 32·r
    addresses = fragments.a_tile_addresses(16)
    regs = fragments.ldmatrix(shared, addresses, num=4)  # lane × register j × 2 elements
    assert np.array_equal(regs.reshape(32, 8), fragments.gather(shape, "a", a))


def test_ldmatrix_x2_trans_of_a_row_major_b_gives_every_lane_its_b_fragment():
    shape = fragments.mma_shape("m16n8k16", "f16")
    b = (np.arange(128).reshape(16, 8) * 3).astype(np.float16)  # K×N row-major: rows of 16 bytes
    # matrix 0 = B rows 0-7 (k 0-7), matrix 1 = rows 8-15; .trans hands lane (g, t) B[2t, g], B[2t+1, g]
    addresses = [16 * (lane % 16) for lane in range(32)]
    regs = fragments.ldmatrix(b.reshape(-1), addresses, num=2, trans=True)
    assert np.array_equal(regs.reshape(32, 4), fragments.gather(shape, "b", b))
    plain = fragments.ldmatrix(b.reshape(-1), addresses, num=2, trans=False)
    assert not np.array_equal(plain.reshape(32, 4), fragments.gather(shape, "b", b))


def test_ldmatrix_on_fp32_pairs_gives_the_tf32_a_and_b_fragments():
    shape = fragments.mma_shape("m16n8k8", "tf32")
    a = np.arange(128, dtype=np.float32).reshape(16, 8) + 0.5
    # a tf32 row of 4 elements is 16 bytes = 8 b16 halves; matrices (rows 0-7, k 0-3), (rows 8-15, k 0-3),
    # (rows 0-7, k 4-7), (rows 8-15, k 4-7): lane (g, t) gets a0 = A[g, t], a1 = A[g+8, t], a2 = A[g, t+4]...
    addresses = [32 * (lane % 8 + 8 * ((lane // 8) % 2)) + 16 * (lane // 16) for lane in range(32)]
    regs = fragments.ldmatrix(a.view(np.uint16).reshape(-1), addresses, num=4)
    assert np.array_equal(regs.reshape(32, 8).view(np.float32), fragments.gather(shape, "a", a))
    b = np.arange(64, dtype=np.float32).reshape(8, 8) - 0.25
    bt = np.ascontiguousarray(b.T)  # .col B = row-major Bᵀ (n×k); matrices (n 0-7, k 0-3), (n 0-7, k 4-7)
    addresses = [32 * (lane % 8) + 16 * (lane // 8 % 2) for lane in range(32)]
    regs = fragments.ldmatrix(bt.view(np.uint16).reshape(-1), addresses, num=2)
    assert np.array_equal(regs.reshape(32, 4).view(np.float32), fragments.gather(shape, "b", b))


@dataclass(frozen=True)
class _SwappedA(MmaShape):
    """A planted error: a2/a3 and a4/a5 swapped (A rows 8-15 and columns 8-15 mixed up)."""

    def position(self, operand, lane, slot):
        if operand == "a":
            slot = {2: 4, 3: 5, 4: 2, 5: 3}.get(slot, slot)
        return MmaShape.position(self, operand, lane, slot)


def test_a_wrong_but_one_to_one_table_is_caught_by_ldmatrix():
    wrong = _SwappedA("m16n8k16", "f16", 16, 8, 16)
    a, b, c = _random_operands(wrong, 0)
    d = fragments.mma_fragments(wrong, fragments.gather(wrong, "a", a), fragments.gather(wrong, "b", b),
                                fragments.gather(wrong, "c", c))
    assert np.array_equal(fragments.scatter(wrong, "c", d), a @ b + c)  # self-consistent: the mma cannot tell
    a16 = np.arange(256).reshape(16, 16).astype(np.float16)
    regs = fragments.ldmatrix(a16.reshape(-1), fragments.a_tile_addresses(16), num=4)
    assert not np.array_equal(regs.reshape(32, 8), fragments.gather(wrong, "a", a16))  # ldmatrix can


# --- ldmatrix bank conflicts: the lesson-04 bank model, 16-byte rows, one 8-lane phase per matrix -------

def test_ldmatrix_on_a_64_wide_fp16_tile_is_an_8_way_conflict():
    # Rows are 64 × 2 = 128 bytes = 32 banks, so every row starts in bank 0. One phase = one 8×8 matrix =
    # rows r..r+7 at the same 16-byte chunk: all eight rows hit the same 4 banks with 8 distinct words each
    # -> 8-way. ldmatrix.x4 = 4 phases × 8 wavefronts = 32 wavefronts where 4 would do.
    addresses = fragments.a_tile_addresses(64)
    assert fragments.ldmatrix_bank_ways(addresses, num=4) == 8
    assert fragments.ldmatrix_wavefronts(addresses, num=4) == (32, 4)
    assert fragments.ldmatrix_wavefronts(addresses, num=1) == (8, 1)  # x1: lanes 0-7 only


def test_the_128_byte_swizzle_makes_it_conflict_free():
    # chunk c of row r is stored at chunk c ^ (r % 8): rows r..r+7 of one column chunk land in the 8
    # different chunks of their rows, i.e. 8 × 4 = 32 different banks -> 1-way, 4 wavefronts for x4.
    addresses = fragments.a_tile_addresses(64, swizzle=True)
    assert fragments.ldmatrix_bank_ways(addresses, num=4) == 1
    assert fragments.ldmatrix_wavefronts(addresses, num=4) == (4, 4)
    for col0 in (16, 32, 48):  # any k-block of the tile, and the rows below
        assert fragments.ldmatrix_bank_ways(fragments.a_tile_addresses(64, 16, col0, swizzle=True)) == 1
        assert fragments.ldmatrix_bank_ways(fragments.a_tile_addresses(64, 16, col0)) == 8


def test_narrower_and_padded_tiles():
    # 32 fp16 = 64-byte rows: rows r and r+2 start in the same bank, so 4 of a phase's 8 rows share
    # banks -> 4-way. Padding to 72 fp16 = 144 bytes = 36 words shifts row r by 4r banks: rows 0-7 start
    # in banks 0, 4, ..., 28 -> conflict-free (the padding fix of lesson 04, at 16-byte granularity).
    assert fragments.ldmatrix_bank_ways(fragments.a_tile_addresses(32)) == 4
    assert fragments.ldmatrix_bank_ways(fragments.a_tile_addresses(72)) == 1


def test_the_swizzled_tile_still_loads_the_right_fragment():
    shape = fragments.mma_shape()
    a = (np.arange(64 * 64) % 2039).reshape(64, 64).astype(np.float16)
    tile = fragments.swizzled_tile(a)
    for row0, col0 in ((0, 0), (16, 48), (48, 16)):
        regs = fragments.ldmatrix(tile, fragments.a_tile_addresses(64, row0, col0, swizzle=True), num=4)
        assert np.array_equal(regs.reshape(32, 8), fragments.gather(shape, "a", a[row0:row0 + 16, col0:col0 + 16]))
    unswizzled = fragments.ldmatrix(tile, fragments.a_tile_addresses(64, 16, 48), num=4)  # reading it unswizzled
    assert not np.array_equal(unswizzled.reshape(32, 8), fragments.gather(shape, "a", a[16:32, 48:64]))


def test_bad_input_is_refused_in_one_line():
    with pytest.raises(InvalidConfig, match="m16n8k16 f16"):
        fragments.mma_shape("m16n8k32", "f16")
    shape = fragments.mma_shape()
    with pytest.raises(InvalidConfig, match="lane must be an integer from 0 to 31"):
        shape.position("a", 32, 0)
    with pytest.raises(InvalidConfig, match="slot must be an integer from 0 to 3"):
        shape.position("c", 0, 4)
    with pytest.raises(InvalidConfig, match="operand"):
        shape.layout("x")
    with pytest.raises(InvalidConfig, match="A must be 16×16"):
        fragments.gather(shape, "a", np.zeros((16, 8)))
    with pytest.raises(InvalidConfig, match="1, 2 or 4"):
        fragments.ldmatrix_bank_ways([0] * 32, num=3)
    with pytest.raises(InvalidConfig, match="multiples of 16"):
        fragments.ldmatrix_bank_ways([8] * 32)
    with pytest.raises(InvalidConfig, match="lanes 0–15"):
        fragments.ldmatrix_wavefronts([0] * 8, num=2)
    with pytest.raises(InvalidConfig, match="128 bytes"):
        fragments.a_tile_addresses(32, swizzle=True)
    with pytest.raises(InvalidConfig, match="runs past"):
        fragments.ldmatrix(np.zeros(64, np.float16), [128] * 32)
