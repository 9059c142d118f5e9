"""Lesson 04's bank explorer for 8-byte elements: half-warp phases, worked by hand.

Shared memory has 32 banks of 4 bytes; a warp's request wider than 128 bytes is served in phases of
128 bytes (16 lanes of float64), and its conflict ways are those of the worst phase. So "bank = word
mod 32, count distinct words per bank over the whole warp" would call a contiguous float64 row 2-way;
it is conflict-free.
"""

import pytest

from gpucourse.errors import InvalidConfig
from gpucourse.lessons import tiling


def test_a_contiguous_float64_warp_read_is_conflict_free():
    lanes = range(32)
    # by hand: lanes 0-15 read bytes 0-127 = words 0-31, one per bank; lanes 16-31 likewise
    assert tiling.warp_bank_ways(lanes, [8 * lane for lane in lanes], 8) == 1
    # the float32 rule applied to the same 64 words over the whole warp would say 2
    assert tiling.bank_ways(range(64)) == 2
    # 16-byte elements: quarter-warp phases of 8 lanes, 128 bytes each: conflict-free too
    assert tiling.warp_bank_ways(lanes, [16 * lane for lane in lanes], 16) == 1


@pytest.mark.parametrize("tile, pad, expected", [
    # row write: 16 lanes × 8 bytes per phase = words 0-31 → 1 way
    # column of a 32-wide tile: element 32k = words 64k, 64k+1 → banks 0 and 1 hold 16 words each → 16 ways
    (32, 0, {"row": 1, "column": 16}),
    # padded: element 33k = word 66k → bank 2k mod 32, k = 0..15: all different → 1 way
    (32, 1, {"row": 1, "column": 1}),
    # 16-wide tile, 16 × 8 threads: a phase is one row of threads; element 16k = word 32k → bank 0 → 16 ways
    (16, 0, {"row": 1, "column": 16}),
    # padded to 17: element 17k = word 34k → bank 2k: 1 way (float32 has 2 ways here)
    (16, 1, {"row": 1, "column": 1}),
])
def test_transpose_bank_ways_for_float64(tile, pad, expected):
    assert tiling.transpose_bank_ways(tile, pad, dtype="float64") == expected


def test_the_float64_picture_draws_both_phases_and_both_banks_of_each_lane():
    fig = tiling.bank_picture(32, 0, "row", dtype="float64")
    assert "float64" in fig.layout.title.text and "no conflict" in fig.layout.title.text
    assert len(fig.data) == 2  # two phases of 16 lanes
    assert all(len(trace.x) == 32 for trace in fig.data)  # 16 lanes × 2 banks each
    assert max(max(trace.y) for trace in fig.data) == 1
    column = tiling.bank_picture(32, 0, "column", dtype="float64")
    assert "16-way" in column.layout.title.text


def test_bank_explorer_switches_to_float64():
    chart = tiling.bank_explorer(threaded=False)
    assert "32-way" in chart.figure.layout.title.text
    chart.controls["dtype"].value = "float64"
    assert "float64" in chart.figure.layout.title.text and "16-way" in chart.figure.layout.title.text
    chart.controls["access"].value = "row"
    assert "no conflict" in chart.figure.layout.title.text
    assert chart.errors == 0


def test_unknown_element_type_is_one_clear_error():
    with pytest.raises(InvalidConfig, match="dtype"):
        tiling.transpose_bank_ways(32, 0, dtype="float16")
