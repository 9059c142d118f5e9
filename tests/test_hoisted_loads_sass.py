"""The kernels the lessons say load first, read in the SASS the GPU runs (ptxas + cuobjdump on the CPU).

The PTX is not enough: ptxas schedules the machine code itself. For sm_90 it moved the padded transpose's
first (guarded) shared store above loads 2-4, so a block waited for two DRAM round trips while its PTX kept
the four loads first (tests/test_hoisted_loads_ptx.py passed). Here every kernel that lessons 03, 04, 04a and
05 say "loads first" is assembled for sm_90 and sm_80 through the course's one path
(``gpucourse.measure.ptxinfo.sass_of``), and its SASS must issue K global loads back to back: no store
(global or shared), no barrier and no instruction that uses an earlier load's value between them (a GPU
issues in order, so a use stalls the next load until the data is back).
"""

from __future__ import annotations

import functools
import re

import pytest

from gpucourse.measure import ptxinfo
from gpucourse.tooling import compilecheck

F1, F2, F8 = "float32[::1]", "float32[:, ::1]", "float64[::1]"
TILING, REDUCTIONS = "gpucourse.lessons.tiling.kernels", "gpucourse.lessons.reductions.kernels"
COALESCING, OCCUPANCY = "gpucourse.lessons.coalescing.kernels", "gpucourse.lessons.occupancy.kernels"
ARCHS = (90, 80)  # Hopper, where the padded transpose went wrong, and Ampere's family (sm_80/86/89)
# name: (kernel, loads in flight per thread, straight-line: every global load before the first store)
KERNELS = {
    "04 tile copy": (compilecheck.CheckedKernel("04", TILING, "copy_kernel()", f"void({F2}, {F2})"), 4, True),
    "04 transpose": (compilecheck.CheckedKernel("04", TILING, "shared_transpose_kernel(pad=0)", f"void({F2}, {F2})"),
                     4, True),
    "04 padded transpose": (compilecheck.CheckedKernel("04", TILING, "shared_transpose_kernel(pad=1)",
                                                       f"void({F2}, {F2})"), 4, True),
    "04a grid-stride rung": (compilecheck.CheckedKernel("04a", REDUCTIONS, "grid_stride_kernel(256)",
                                                        f"void({F1}, {F1})"), 4, False),
    "03 best_copy": (compilecheck.CheckedKernel("03", COALESCING, "best_copy", f"void({F8}, {F8}, int64)"), 4, False),
    "03 copy_ilp4": (compilecheck.CheckedKernel("03", COALESCING, "copy_ilp4",
                                                f"void({F1}, {F1}, int64, int64, int64)"), 4, False),
    "05 copy_ilp4_kernel": (compilecheck.CheckedKernel("05", OCCUPANCY, "copy_ilp4_kernel", f"void({F1}, {F1})"),
                            4, False),
    "05 copy_resident_ilp4_kernel": (compilecheck.CheckedKernel("05", OCCUPANCY, "copy_resident_ilp4_kernel",
                                                                f"void({F1}, {F1})"), 4, False),
}

_LINE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P(?:\d|T)\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);")
_REG = re.compile(r"\bR(\d+)(?:\.64)?\b")
STORES = ("STG", "STS", "STL", "ST", "RED", "REDG", "ATOM", "ATOMG", "ATOMS")
WIDTH_REGS = {"64": 2, "128": 4}  # registers an LDG.E.64 / .128 writes


def instructions(sass: str) -> list[tuple[str, list[str]]]:
    """(mnemonic, operands) for each instruction of a cuobjdump -sass listing, in code order."""
    out = []
    for match in _LINE.finditer(sass):
        operands = [part.strip() for part in match.group(2).split(",")] if match.group(2).strip() else []
        out.append((match.group(1), operands))
    return out


def _registers(operands: list[str]) -> set[int]:
    return {int(r) for part in operands for r in _REG.findall(part)}


def longest_independent_load_run(sass: str) -> int:
    """The most global loads (LDG) the code issues in a row with nothing between them that must wait for one:
    a store of any kind, a barrier, or an instruction that reads a register an earlier load of the run writes."""
    best, pending, run = 0, set(), 0
    for mnemonic, operands in instructions(sass):
        base = mnemonic.split(".")[0]
        writes_first = base not in STORES and not base.startswith("BAR") and operands
        sources = _registers(operands[1:] if writes_first else operands)
        if base in STORES or base.startswith("BAR") or sources & pending:
            pending, run = set(), 0
        if base == "LDG":
            first = int(_REG.match(operands[0]).group(1))
            width = WIDTH_REGS.get(mnemonic.rsplit(".", 1)[-1], 1)
            pending |= set(range(first, first + width))
            run += 1
            best = max(best, run)
        elif writes_first:
            pending -= _registers(operands[:1])  # a register written again no longer holds a load's value
    return best


def loads_before_first_store(sass: str) -> tuple[int, int]:
    """(global loads before the first store of any kind, global loads in all)."""
    ops = [m.split(".")[0] for m, _ in instructions(sass)]
    first_store = next((i for i, op in enumerate(ops) if op in STORES), len(ops))
    return ops[:first_store].count("LDG"), ops.count("LDG")


@functools.cache
def _sass() -> dict[tuple[str, int], str]:
    if ptxinfo.find_ptxas() is None or ptxinfo.find_cuobjdump() is None:
        pytest.skip("needs ptxas (the CUDA wheels) and cuobjdump (the toolkit's or Triton's wheel)")
    rows = compilecheck._compile([k for k, _, _ in KERNELS.values()], list(ARCHS))
    out = {}
    for name, row in zip(KERNELS, rows, strict=True):
        for arch in ARCHS:
            entry = row.get(str(arch), {})
            if "ptx" not in entry:
                pytest.skip(f"numba-cuda cannot compile PTX here: {entry.get('error') or row.get('error')}")
            out[name, arch] = ptxinfo.sass_of(entry["ptx"], arch)
    return out


# The padded transpose before the fix, sm_90 (gpu-predictions review, P1): the guarded first shared store,
# if-converted, sits before loads 2-4 and reads load 1's register.
OLD_PADDED = """
        /*0250*/  @P2 LDG.E R21, desc[UR6][R8.64] ;
        /*0700*/  @P2 STS [R24], R21 ;
        /*07e0*/  @P0 LDG.E R24, desc[UR6][R10.64] ;
        /*0860*/  @P1 LDG.E R22, desc[UR6][R14.64] ;
        /*0870*/  @P5 LDG.E R25, desc[UR6][R8.64] ;
        /*0880*/  STS [R26], R24 ;
"""


def test_the_checker_on_hand_written_listings():
    assert longest_independent_load_run(OLD_PADDED) == 3
    assert loads_before_first_store(OLD_PADDED) == (1, 4)
    four = "".join(f"/*00{i}0*/ LDG.E.64 R{2 * i + 10}, desc[UR4][R{2 * i}.64] ;\n" for i in range(4))
    assert longest_independent_load_run(four + "/*0090*/ STG.E.64 desc[UR4][R2.64], R10 ;\n") == 4
    # an add that reads load 1 before load 2 is issued: the thread waits, one load in flight
    serial = ("/*0010*/ LDG.E R4, desc[UR4][R2.64] ;\n/*0020*/ FADD R0, R0, R4 ;\n"
              "/*0030*/ LDG.E R5, desc[UR4][R6.64] ;\n")
    assert longest_independent_load_run(serial) == 1
    # address arithmetic between the loads is no use of their values; a rewritten register is no longer pending
    hoisted = ("/*0010*/ LDG.E R4, desc[UR4][R2.64] ;\n/*0020*/ IADD3 R2, R2, 0x4, RZ ;\n"
               "/*0030*/ MOV R4, RZ ;\n/*0040*/ LDG.E R5, desc[UR4][R4.64] ;\n")
    assert longest_independent_load_run(hoisted) == 2
    assert instructions("/*0010*/ BAR.SYNC.DEFER_BLOCKING 0x0 ;") == [("BAR.SYNC.DEFER_BLOCKING", ["0x0"])]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", list(KERNELS))
def test_every_loads_first_kernel_issues_its_loads_back_to_back_in_sass(name, arch):
    sass = _sass()[name, arch]
    _, loads, straight = KERNELS[name]
    assert longest_independent_load_run(sass) >= loads, (
        f"{name}, sm_{arch}: fewer than {loads} global loads in a row before a store or a use\n"
        + "\n".join(f"{m} {', '.join(o)}" for m, o in instructions(sass) if m[:3] in ("LDG", "STG", "STS", "BAR")))
    if straight:  # one trip per thread: every global load before the first store (shared or global)
        assert loads_before_first_store(sass) == (loads, loads), (name, arch)
