"""The register rule "a block's warps, rounded up to a multiple of 4, must fit the per-block
register limit" (NVIDIA's cuda_occupancy.h) is implied by the per-sub-partition rule wherever a
block may use the SM's whole register file, so the calculator leaves it out. These tests hold the
proof: exhaustively over everything the register rules read, and on the calculator itself."""

from __future__ import annotations

import itertools

import pytest

from gpucourse.lessons.occupancy.calculator import (
    ARCHITECTURES,
    MAX_REGISTERS_PER_THREAD,
    MAX_THREADS_PER_BLOCK,
    SUB_PARTITIONS,
    WARP_SIZE,
    occupancy,
    registers_per_warp,
)


def _blocks_with_the_rounding_rule(per_warp: int, warps: int, per_sm: int, per_block: int) -> int:
    """The register limit as cuda_occupancy.h computes it, multiple-of-4 check included."""
    rounded_warps = -(-warps // SUB_PARTITIONS) * SUB_PARTITIONS
    if per_warp * rounded_warps > per_block or per_warp * warps > per_block:
        return 0
    return (per_sm // SUB_PARTITIONS) // per_warp * SUB_PARTITIONS // warps


def _blocks_without(per_warp: int, warps: int, per_sm: int, per_block: int) -> int:
    if per_warp * warps > per_block:
        return 0
    return (per_sm // SUB_PARTITIONS) // per_warp * SUB_PARTITIONS // warps


def test_every_modelled_cc_lets_a_block_use_the_whole_register_file():
    """The premise of leaving the check out: a new cc with fewer registers per block than per SM
    (as the 32 K-per-block Jetson parts, cc 5.3 and 6.2) needs the rounding check back."""
    for arch in ARCHITECTURES.values():
        assert arch.registers_per_block == arch.registers_per_sm, arch.name


def test_the_rounding_rule_never_changes_a_register_limit_when_per_block_equals_per_sm():
    per_warps = sorted({registers_per_warp(r) for r in range(1, MAX_REGISTERS_PER_THREAD + 1)})
    warps = range(1, MAX_THREADS_PER_BLOCK // WARP_SIZE + 1)
    for per_sm in {a.registers_per_sm for a in ARCHITECTURES.values()}:
        for per_warp, w in itertools.product(per_warps, warps):
            assert _blocks_with_the_rounding_rule(per_warp, w, per_sm, per_sm) == _blocks_without(
                per_warp, w, per_sm, per_sm), (per_warp, w)


def test_the_rounding_rule_does_matter_when_a_block_may_have_less_than_the_sm():
    """So the two helpers above can tell the rules apart: with 32 K registers per block and 64 K
    per SM, 9 warps × 3584 = 32,256 fit, but counted as 12 warps they need 43,008."""
    assert _blocks_with_the_rounding_rule(3584, 9, 65536, 32768) == 0
    assert _blocks_without(3584, 9, 65536, 32768) == 1


@pytest.mark.parametrize("cc", list(ARCHITECTURES))
def test_the_calculator_agrees_with_the_rule_for_every_block_size_and_register_count(cc):
    """Every (threads, registers) of this cc, through the calculator: its register limit is the
    one the rounding rule gives."""
    per_sm = ARCHITECTURES[cc].registers_per_sm
    per_block = ARCHITECTURES[cc].registers_per_block
    for threads in range(WARP_SIZE, MAX_THREADS_PER_BLOCK + 1, WARP_SIZE):
        w = threads // WARP_SIZE
        for regs in range(1, MAX_REGISTERS_PER_THREAD + 1, 2):
            expected = _blocks_with_the_rounding_rule(registers_per_warp(regs), w, per_sm, per_block)
            assert occupancy(threads, regs, 0, cc).limits["registers"] == expected, (threads, regs)
