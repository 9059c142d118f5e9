"""The loads that lessons 04 and 04a hoist by hand, read in the PTX numba-cuda writes (compiled on the CPU).

numba-cuda has no ``noalias``: in ``dst[y] = src[y]`` written as one loop, a store may change what the next
load reads, so the compiler keeps each load after the previous store and a thread has one load in flight.
The kernels load into registers first; these tests read the PTX and check that every global load comes
before the first global (or shared) store, and that the registers stayed registers (no local memory).
"""

from __future__ import annotations

import functools
import re

import pytest

from gpucourse.tooling import compilecheck

F1, F2 = "float32[::1]", "float32[:, ::1]"
TILING, REDUCTIONS = "gpucourse.lessons.tiling.kernels", "gpucourse.lessons.reductions.kernels"
KERNELS = {
    "copy": compilecheck.CheckedKernel("04", TILING, "copy_kernel()", f"void({F2}, {F2})"),
    "shared": compilecheck.CheckedKernel("04", TILING, "shared_transpose_kernel(pad=0)", f"void({F2}, {F2})"),
    "shared+pad": compilecheck.CheckedKernel("04", TILING, "shared_transpose_kernel(pad=1)", f"void({F2}, {F2})"),
    "grid stride": compilecheck.CheckedKernel("04a", REDUCTIONS, "grid_stride_kernel(256)", f"void({F1}, {F1})"),
}
MEMORY_OP = re.compile(r"^\s*(?:@!?%p\d+\s+)?((?:ld|st|atom|red)\.(?:global|shared|local)|bar\.sync)")


@functools.cache
def _ptx() -> dict[str, str]:
    rows = compilecheck._compile(list(KERNELS.values()), [90])
    out = {}
    for name, row in zip(KERNELS, rows, strict=True):
        entry = row.get("90", {})
        if "ptx" not in entry:
            pytest.skip(f"numba-cuda cannot compile PTX here: {entry.get('error') or row.get('error')}")
        out[name] = entry["ptx"]
    return out


def memory_ops(ptx: str) -> list[str]:
    """The PTX's memory operations and barriers in program order: 'ld.global', 'st.shared', 'bar.sync', …"""
    return [m.group(1) for line in ptx.splitlines() if (m := MEMORY_OP.match(line))]


def loads_before_stores(ops: list[str]) -> bool:
    """Every global load comes before the first store of any kind (the hoisted shape)."""
    stores = [i for i, op in enumerate(ops) if op.startswith("st.")]
    loads = [i for i, op in enumerate(ops) if op == "ld.global"]
    return bool(loads) and (not stores or max(loads) < min(stores))


def test_the_checker_rejects_the_one_load_in_flight_shape():
    interleaved = ["ld.global", "st.global", "ld.global", "st.global", "ld.global", "st.global"]
    assert not loads_before_stores(interleaved)
    assert loads_before_stores(["ld.global"] * 4 + ["st.global"] * 4)
    sample = "\t@%p1 ld.global.f32 \t%f1, [%rd4];\n\tst.shared.f32 \t[%r3], %f1;\n\tbar.sync \t0;"
    assert memory_ops(sample) == ["ld.global", "st.shared", "bar.sync"]


def test_the_tile_copy_issues_its_four_loads_before_its_four_stores():
    ops = memory_ops(_ptx()["copy"])
    assert ops == ["ld.global"] * 4 + ["st.global"] * 4, ops


@pytest.mark.parametrize("variant", ["shared", "shared+pad"])
def test_the_shared_transposes_load_four_then_store_four_on_each_side_of_the_barrier(variant):
    ops = memory_ops(_ptx()[variant])
    assert ops == (["ld.global"] * 4 + ["st.shared"] * 4 + ["bar.sync"] + ["ld.shared"] * 4
                   + ["st.global"] * 4), ops
    assert loads_before_stores(ops)


def test_the_grid_stride_loop_has_four_loads_in_a_row_and_no_local_memory():
    ptx = _ptx()["grid stride"]
    ops = memory_ops(ptx)
    assert ops[:4] == ["ld.global"] * 4, ops  # the main loop's four partial sums
    assert ops.count("atom.global") + ops.count("red.global") == 1  # one atomic per block
    for name, text in _ptx().items():
        assert "ld.local" not in text and "st.local" not in text, f"{name}: its registers spilled to local memory"
