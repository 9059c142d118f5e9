"""The occupancy calculator against hand-derived answers (CUDA C Best Practices Guide, cuda_occupancy.h).

Every expected value below was worked out by hand from the rules in the docstring of
gpucourse/lessons/occupancy/calculator.py
(the derivation is the comment beside it), never copied from the implementation's output.
Notation: rpw = registers per warp after rounding up to 256; SP = SM sub-partition (4 per SM,
16,384 registers each); alloc = shared bytes per block + reservation, rounded up to granularity.
"""

import pytest

from gpucourse.errors import InvalidConfig
from gpucourse.lessons.occupancy.calculator import (
    ARCHITECTURES,
    SUPPORTED_CCS,
    architecture,
    best_block_size,
    carveout_bytes,
    occupancy,
    register_budget,
    registers_per_warp,
    shared_bytes_allocated,
    table,
)

KB = 1024

# (cc, threads, regs, shared bytes, carveout %, blocks, warps, occupancy %, limiter)
CASES = [
    # --- cc 7.0 (V100): 64 warp slots, 32 blocks, 96 KB, no reservation, 256 B granularity ---
    # NVIDIA's example: rpw = 37×32 = 1184 → 1280; ⌊16384/1280⌋ = 12/SP → 48 warps; 4 warps/block → 12;
    # warps 64/4 = 16; blocks 32 → 12 blocks, 48 warps, 75 %.
    ((7, 0), 128, 37, 0, None, 12, 48, 75.0, "registers"),
    # NVIDIA's example: 10 warps/block; registers 48/10 = 4; warps 64/10 = 6 → 4 blocks, 40 warps, 62.5 %.
    ((7, 0), 320, 37, 0, None, 4, 40, 62.5, "registers"),
    # rpw 1024 → 16/SP → 64 warps / 8 = 8; warps 64/8 = 8 → tie, 100 %.
    ((7, 0), 256, 32, 0, None, 8, 64, 100.0, "registers + warps"),
    # 2 warps; rpw 512 → 32/SP → 128/2 = 64; warps 32; blocks 32; alloc 12288 → 98304/12288 = 8 → 16 warps.
    ((7, 0), 64, 16, 12 * KB, None, 8, 16, 25.0, "shared memory"),
    # No registers and no shared memory: warps 64/1 = 64; the 32-block cap binds: 32 warps = 50 %.
    ((7, 0), 32, 0, 0, None, 32, 32, 50.0, "blocks"),
    # --- cc 7.5 (Turing): 32 warp slots, 16 blocks, 64 KB, no reservation, 256 B granularity ---
    # rpw 1280 → 48 warps / 4 = 12; warps 32/4 = 8; blocks 16 → 8 blocks = 32 warps = 100 %.
    ((7, 5), 128, 37, 0, None, 8, 32, 100.0, "warps"),
    # rpw 2048 → 8/SP → 32 warps / 8 = 4; warps 32/8 = 4 → tie.
    ((7, 5), 256, 64, 0, None, 4, 32, 100.0, "registers + warps"),
    # 3 warps; rpw 72×32 = 2304 (already a multiple of 256) → ⌊16384/2304⌋ = 7/SP → 28/3 = 9; warps 32/3 = 10;
    # alloc 5000 → 5120, 65536/5120 = 12 → 9 blocks, 27 warps, 84.375 %.
    ((7, 5), 96, 72, 5000, None, 9, 27, 84.375, "registers"),
    # 32 warps per block; registers 64/32 = 2; warps 32/32 = 1 → 1 block.
    ((7, 5), 1024, 32, 0, None, 1, 32, 100.0, "warps"),
    # rpw 640 → 25/SP → 100/2 = 50; alloc 40000 → 40192 (157 × 256); 65536/40192 = 1 → 2 warps = 6.25 %.
    ((7, 5), 64, 20, 40000, None, 1, 2, 6.25, "shared memory"),
    # Carve-out 0 % on Turing rounds up to its smallest size, 32 KB: alloc 10240; 32768/10240 = 3 → 6 warps.
    ((7, 5), 64, 20, 10000, 0, 3, 6, 18.75, "shared memory"),
    # --- cc 8.0 (A100): 64 warp slots, 32 blocks, 164 KB, 1 KB reserved per block, 128 B granularity ---
    # Registers as on cc 7.0: 12 blocks; shared: alloc 0 + 1024 → 167936/1024 = 164 (no bind).
    ((8, 0), 128, 37, 0, None, 12, 48, 75.0, "registers"),
    # rpw 1280 → 48/8 = 6; warps 8; alloc 32768 + 1024 = 33792 → 167936/33792 = 4.97 → 4 (5 without the
    # reservation) → 32 warps = 50 %.
    ((8, 0), 256, 40, 32 * KB, None, 4, 32, 50.0, "shared memory"),
    # Per sub-partition: ⌊16384/1280⌋ = 12 → 48 warps / 2 = 24 blocks
    # (a whole-SM count, ⌊65536/1280⌋ = 51 → 25, would be wrong).
    ((8, 0), 64, 40, 0, None, 24, 48, 75.0, "registers"),
    # 32 warps × rpw 2048 = 65536 fits exactly; 8/SP → 32 warps → 1 block; warps 64/32 = 2 → 50 %.
    ((8, 0), 1024, 64, 0, None, 1, 32, 50.0, "registers"),
    # rpw 256 → 64/SP; warps 64; the 32-block cap binds → 32 warps = 50 %.
    ((8, 0), 32, 8, 0, None, 32, 32, 50.0, "blocks"),
    # --- cc 8.6: 48 warp slots, 16 blocks, 100 KB, 1 KB reserved, 128 B ---
    # registers 48 warps / 4 = 12; warps 48/4 = 12 → tie, 48 warps = 100 %.
    ((8, 6), 128, 37, 0, None, 12, 48, 100.0, "registers + warps"),
    # rpw 1024 → 64 warps / 8 = 8; warps 48/8 = 6 → 6 blocks = 48 warps.
    ((8, 6), 256, 32, 0, None, 6, 48, 100.0, "warps"),
    # 1 warp per block: registers 64, warps 48, the 16-block cap binds → 16 of 48 warps.
    ((8, 6), 32, 32, 0, None, 16, 16, 100 * 16 / 48, "blocks"),
    # alloc 20000 + 1024 = 21024 → 21120 (165 × 128); 102400/21120 = 4.85 → 4 → 16 of 48 warps.
    ((8, 6), 128, 32, 20000, None, 4, 16, 100 * 16 / 48, "shared memory"),
    # The largest block allowed: 99 KB + 1 KB = 100 KB → exactly 1 block.
    ((8, 6), 128, 32, 99 * KB, None, 1, 4, 100 * 4 / 48, "shared memory"),
    # --- cc 8.9: 48 warp slots, 24 blocks, 100 KB, 1 KB reserved, 128 B ---
    # 1 warp per block: warps 48, registers 64 → the 24-block cap: 24 warps = 50 %.
    ((8, 9), 32, 32, 0, None, 24, 24, 50.0, "blocks"),
    # 2 warps: registers 64/2 = 32; warps 48/2 = 24; blocks 24 → tie of warps and blocks.
    ((8, 9), 64, 32, 0, None, 24, 48, 100.0, "warps + blocks"),
    # 6 warps; rpw 1536 → ⌊16384/1536⌋ = 10/SP → 40/6 = 6; warps 8; alloc 3072 → 33 → 36 warps = 75 %.
    ((8, 9), 192, 48, 2048, None, 6, 36, 75.0, "registers"),
    # --- cc 9.0 (H100/H200): 64 warp slots, 32 blocks, 228 KB, 1 KB reserved, 128 B ---
    ((9, 0), 128, 37, 0, None, 12, 48, 75.0, "registers"),
    # alloc 32768 + 1024 = 33792 → 233472/33792 = 6.9 → 6 (7 without the reservation); registers 8, warps 8.
    ((9, 0), 256, 32, 32 * KB, None, 6, 48, 75.0, "shared memory"),
    # rpw 4096 → 4/SP → 16 warps / 4 = 4 blocks = 25 %.
    ((9, 0), 128, 128, 0, None, 4, 16, 25.0, "registers"),
    # registers 64/32 = 2; warps 64/32 = 2 → tie.
    ((9, 0), 1024, 32, 0, None, 2, 64, 100.0, "registers + warps"),
    # 48 KB (no opt-in needed): alloc 49152 + 1024 = 50176 → 233472/50176 = 4.65 → 4; 4 warps each.
    ((9, 0), 128, 32, 48 * KB, None, 4, 16, 25.0, "shared memory"),
    # 227 KB (opt-in): alloc 232448 + 1024 = 233472 → exactly 1 block.
    ((9, 0), 128, 32, 227 * KB, None, 1, 4, 6.25, "shared memory"),
    # 100 threads → 4 warps (rounded up); rpw 2048 → 8/SP → 32/4 = 8; warps 16 → 32 warps = 50 %.
    ((9, 0), 100, 64, 0, None, 8, 32, 50.0, "registers"),
    # Per sub-partition: rpw 3072 → ⌊16384/3072⌋ = 5/SP → 20 warps → 20 blocks (a whole SM would say 21).
    ((9, 0), 32, 96, 0, None, 20, 20, 31.25, "registers"),
    # Carve-out 50 %: 50 × 233472 / 100 = 116736 → next size 132 KB = 135168; alloc 9216 → 14 blocks;
    # registers 32 and warps 32 do not bind → 28 warps = 43.75 %.
    ((9, 0), 64, 32, 8 * KB, 50, 14, 28, 43.75, "shared memory"),
    # Same block with the default (largest) carve-out: 233472/9216 = 25.3 → 25 blocks = 50 warps.
    ((9, 0), 64, 32, 8 * KB, None, 25, 50, 78.125, "shared memory"),
    # Carve-out 0 %: smaller than one block, so the driver takes one block's 9216 B rounded up to 16 KB → 1.
    ((9, 0), 64, 32, 8 * KB, 0, 1, 2, 3.125, "shared memory"),
    # cc 8.7: 32 warps of 48 slots → 1 block; registers allow 64 warps = 2 blocks → 32/48 warps.
    ((8, 7), 1024, 32, 0, None, 1, 32, 200 / 3, "warps"),
    # cc 10.0: rpw 2048 → 8 warps/SP = 32 warps = 4 blocks of 8 warps; warps allow 8, blocks 32 → 50 %.
    ((10, 0), 256, 64, 0, None, 4, 32, 50.0, "registers"),
    # cc 10.3: 40 KB + 1 KB reserved = 41984 B; 233472 / 41984 = 5.6 → 5 blocks × 4 warps = 20 of 64.
    ((10, 3), 128, 32, 40 * KB, None, 5, 20, 31.25, "shared memory"),
    # cc 12.0: 48 warp slots and 24 blocks: 2-warp blocks reach both at 24 blocks = 48 warps.
    ((12, 0), 64, 32, 0, None, 24, 48, 100.0, "warps + blocks"),
    # cc 12.0: 1-warp blocks stop at the 24-block limit: 24 of 48 warps.
    ((12, 0), 32, 16, 0, None, 24, 24, 50.0, "blocks"),
]


@pytest.mark.parametrize("cc,threads,regs,shared,carveout,blocks,warps,pct,limiter", CASES)
def test_hand_derived_table(cc, threads, regs, shared, carveout, blocks, warps, pct, limiter):
    r = occupancy(threads, regs, shared, cc, carveout_percent=carveout)
    assert (r.active_blocks, r.active_warps) == (blocks, warps), r.explain()
    assert r.occupancy == pytest.approx(pct / 100)
    assert r.limiter == limiter
    assert r.launches and r.reason == ""


def test_table_covers_every_compute_capability_and_every_limiter():
    assert {case[0] for case in CASES} == set(SUPPORTED_CCS)
    named = {part for case in CASES for part in case[-1].split(" + ")}
    assert named == {"registers", "shared memory", "warps", "blocks"}


def test_nvidia_documented_examples():
    # CUDA C Best Practices Guide §11.1.1 (cc 7.0, 37 registers per thread).
    assert occupancy(128, 37, cc=(7, 0)).occupancy == pytest.approx(0.75)
    assert occupancy(128, 37, cc=(7, 0)).active_blocks == 12
    assert occupancy(320, 37, cc=(7, 0)).occupancy == pytest.approx(0.625)
    assert occupancy(320, 37, cc=(7, 0)).active_blocks == 4


# (cc, threads, regs, shared bytes, the resource named as the reason)
CANNOT_LAUNCH = [
    # rpw 65 × 32 = 2080 → 2304; 32 warps × 2304 = 73728 > 65536 registers per block.
    ((7, 0), 1024, 65, 0, "registers"),
    ((9, 0), 1024, 65, 0, "registers"),
    # rpw 8160 → 8192; 16 warps × 8192 = 131072 > 65536.
    ((8, 0), 512, 255, 0, "registers"),
    # 25 warps × 2560 = 64000 fit the block limit, but a sub-partition holds ⌊16384 / 2560⌋ = 6 warps:
    # 24 in all, fewer than 25 (NVIDIA's header: counted as 28 warps, 71680 > 65536).
    ((9, 0), 800, 80, 0, "registers"),
    # 100 KB > the 99 KB a block may have on cc 8.6; 200 KB > 163 KB on cc 8.0; 227 KB + 1 B on cc 9.0.
    ((8, 6), 128, 32, 100 * KB, "shared memory"),
    ((8, 0), 128, 32, 200 * KB, "shared memory"),
    ((9, 0), 128, 32, 227 * KB + 1, "shared memory"),
    # 96 KB + 1 B on cc 7.0 (no reservation there: 96 KB itself fits, below).
    ((7, 0), 128, 32, 96 * KB + 1, "shared memory"),
]


@pytest.mark.parametrize("cc,threads,regs,shared,resource", CANNOT_LAUNCH)
def test_configurations_that_cannot_launch_say_why(cc, threads, regs, shared, resource):
    r = occupancy(threads, regs, shared, cc)
    assert r.active_blocks == 0 and r.active_warps == 0 and r.occupancy == 0
    assert not r.launches
    assert resource in r.limiters
    assert r.reason and ("register" in r.reason if resource == "registers" else "shared memory" in r.reason)
    assert r.summary().startswith("cannot launch")


def test_96_kb_fits_exactly_on_volta():
    # alloc 98304 (no reservation on cc 7.x) → 98304/98304 = 1 block.
    assert occupancy(128, 32, 96 * KB, (7, 0)).active_blocks == 1


def test_opt_in_above_48_kb_is_noted():
    assert any("opt in" in n for n in occupancy(128, 32, 48 * KB + 128).notes)
    assert not occupancy(128, 32, 48 * KB).notes


@pytest.mark.parametrize("bad", [0, 1025, -1, 3.5, "128", True, None, (33, 33), (0, 4)])
def test_bad_threads_raise(bad):
    with pytest.raises(InvalidConfig, match="thread|block"):
        occupancy(bad, 32)


@pytest.mark.parametrize("bad", [256, -1, 2.0, "32"])
def test_bad_registers_raise(bad):
    with pytest.raises(InvalidConfig, match="registers_per_thread"):
        occupancy(128, bad)


def test_bad_shared_memory_raises():
    with pytest.raises(InvalidConfig, match="shared_bytes_per_block"):
        occupancy(128, 32, -1)


@pytest.mark.parametrize("bad", [(6, 1), (11, 0), "8.8", (9,), "hopper", 12])
def test_unknown_compute_capability_raises(bad):
    with pytest.raises(InvalidConfig, match="compute capability"):
        occupancy(128, 32, 0, bad)


@pytest.mark.parametrize("bad", [101, -2, 50.5])
def test_bad_carveout_raises(bad):
    with pytest.raises(InvalidConfig, match="carveout"):
        occupancy(128, 32, 0, (9, 0), carveout_percent=bad)


def test_errors_are_value_errors_with_allowed_values():
    with pytest.raises(ValueError, match="1 to 1024"):
        occupancy(0, 32)
    with pytest.raises(ValueError, match="7.0, 7.5, 8.0, 8.6, 8.7, 8.9, 9.0, 10.0, 10.3, 12.0"):
        occupancy(128, 32, 0, (6, 0))


@pytest.mark.parametrize("spelling", [(9, 0), [9, 0], "9.0", "sm_90", "90", 9.0])
def test_cc_spellings(spelling):
    assert architecture(spelling).cc == (9, 0)


@pytest.mark.parametrize(("spelling", "cc"),
                         [("sm_100", (10, 0)), ("10.3", (10, 3)), ("sm_120", (12, 0)), (12.0, (12, 0))])
def test_blackwell_cc_spellings(spelling, cc):
    assert architecture(spelling).cc == cc


def test_block_shape_tuple_counts_threads():
    assert occupancy((16, 16), 32).threads_per_block == 256
    assert occupancy((16, 16), 32).active_blocks == occupancy(256, 32).active_blocks


def test_architecture_table_matches_reference():
    # threads/SM, blocks/SM, smem/SM, reserved/block: CUDA C++ Programming Guide ("Technical Specifications
    # per Compute Capability") and cuda_occupancy.h (blocks per SM, carve-outs, reservation from cc 8.0).
    expected = {
        (7, 0): (2048, 32, 96, 0), (7, 5): (1024, 16, 64, 0), (8, 0): (2048, 32, 164, 1),
        (8, 6): (1536, 16, 100, 1), (8, 7): (1536, 16, 164, 1), (8, 9): (1536, 24, 100, 1),
        (9, 0): (2048, 32, 228, 1), (10, 0): (2048, 32, 228, 1), (10, 3): (2048, 32, 228, 1),
        (12, 0): (1536, 24, 100, 1),
    }
    for cc, (threads, blocks, smem_kb, reserved_kb) in expected.items():
        a = ARCHITECTURES[cc]
        assert (a.max_threads_per_sm, a.max_blocks_per_sm) == (threads, blocks)
        assert (a.shared_per_sm_bytes, a.reserved_shared_per_block_bytes) == (smem_kb * KB, reserved_kb * KB)
    assert ARCHITECTURES[(9, 0)].carveouts_kb == (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)
    assert ARCHITECTURES[(10, 0)].carveouts_kb == ARCHITECTURES[(9, 0)].carveouts_kb
    assert ARCHITECTURES[(12, 0)].carveouts_kb == (0, 8, 16, 32, 64, 100)
    assert set(expected) == set(ARCHITECTURES)


def test_helpers():
    assert registers_per_warp(37) == 1280 and registers_per_warp(32) == 1024 and registers_per_warp(1) == 256
    assert shared_bytes_allocated(0, (9, 0)) == 1024 and shared_bytes_allocated(0, (7, 0)) == 0
    assert shared_bytes_allocated(1, (7, 0)) == 256 and shared_bytes_allocated(1, (8, 6)) == 1152
    assert carveout_bytes(None, (9, 0)) == 228 * KB
    assert carveout_bytes(50, (9, 0)) == 132 * KB and carveout_bytes(0, (9, 0)) == 0
    assert carveout_bytes(0, (7, 5)) == 32 * KB and carveout_bytes(60, (8, 6)) == 64 * KB


def test_ties_and_limits_dictionary():
    r = occupancy(64, 32, 0, (8, 9))
    assert r.limiters == ("warps", "blocks")
    assert r.limits == {"registers": 32, "shared memory": 100, "warps": 24, "blocks": 24}
    # No shared memory and no reservation on cc 7.x: no shared-memory limit at all.
    assert occupancy(128, 32, 0, (7, 0)).limits["shared memory"] is None
    assert occupancy(128, 0, 0, (9, 0)).limits["registers"] is None


def test_monotone_in_registers_and_shared_memory():
    for cc in SUPPORTED_CCS:
        for threads in (32, 96, 128, 256, 640, 1024):
            blocks = [occupancy(threads, r, 0, cc).active_blocks for r in range(0, 256, 3)]
            assert blocks == sorted(blocks, reverse=True)
            blocks = [occupancy(threads, 32, s, cc).active_blocks for s in range(0, 96 * KB, 1000)]
            assert blocks == sorted(blocks, reverse=True)


def test_explain_shows_the_arithmetic():
    text = occupancy(128, 37, 0, (7, 0)).explain()
    assert "37 × 32 = 1184" in text and "1280" in text and "12 blocks" in text and "75.0 %" in text
    text = occupancy(256, 32, 32 * KB, (9, 0)).explain()
    assert "1,024 B reserved" in text and "33,792" in text


def test_table_and_block_size_and_register_budget():
    frame = table([(128, 37), (320, 37)], cc=(7, 0))
    assert list(frame.active_blocks) == [12, 4] and list(frame.occupancy_pct) == [75.0, 62.5]
    # 64 registers on cc 9.0: rpw 2048 → 32 warps of 64 → 50 % at best for every block size that
    # divides 32 warps; the smallest block reaching it: 32 threads → min(32, 32 blocks) = 32 warps.
    assert best_block_size(64, cc=(9, 0)) == 32
    # 1 warp per block caps cc 8.6 at 16 of 48 warps; 3 warps per block: registers (32 regs) 64/3 = 21,
    # warps 48/3 = 16 → 48 warps = 100 %; 2 warps: 16 blocks × 2 = 32 warps → not full. So 96.
    assert best_block_size(32, cc=(8, 6)) == 96
    # 100 % with 256-thread blocks on cc 9.0 needs 8 blocks × 8 warps: rpw ≤ 16384/16 = 1024 → 32 registers.
    assert register_budget(256, 1.0, 0, (9, 0)) == 32
    # 50 % (32 warps): rpw ≤ 16384/8 = 2048 → 64 registers.
    assert register_budget(256, 0.5, 0, (9, 0)) == 64
    with pytest.raises(InvalidConfig):
        register_budget(256, 0.0)
