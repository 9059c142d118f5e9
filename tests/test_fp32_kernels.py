"""Kernels meant to compute in fp32 compile to no float64 arithmetic (read from their PTX, no GPU).

A bare literal (``1.0``, ``0.999``) or a Python float argument is a float64 in Numba, and one
float64 operand turns the whole expression into ``.f64`` instructions: 1/32 to 1/64 of the fp32
rate on T4, L4 and GeForce cards (CUDA C++ Programming Guide, "Arithmetic Instructions" table).
numba-cuda's ``compile_ptx`` runs the real CUDA target on the CPU (gpucourse.measure.ptxinfo, in a child
process), so the PTX shows the instructions a GPU would run.
"""

from __future__ import annotations

import re

import pytest

from gpucourse.lessons import coalescing, measuring, races, warps
from gpucourse.measure import ptxinfo

# A Python float passed as ``dt`` arrives as float64: its one conversion to fp32 is allowed.
ALLOWED_F64 = re.compile(r"^(ld\.param\.f64|cvt\.rn\.f32\.f64)\b")
F64_OPERATION = re.compile(r"^\s*(@%p\d+\s+)?([a-z][\w.]*\.f64)\b", re.MULTILINE)

VEC = "float32[::1]"
KERNELS = {
    "lesson 00 spin": (measuring._spin_kernel(), f"void({VEC}, int64)"),
    "lesson 01 FMA staircase": (warps._fma_kernel(), f"void({VEC}, int64)"),
    "particle drift, AoS": (coalescing.drift_aos, "void(float32[:, ::1], float64)"),
    "particle drift, SoA": (coalescing.drift_soa, f"void({', '.join([VEC] * 6)}, float64)"),
    "histogram, racy": (races.histogram_racy, f"void({VEC}, int32[::1])"),
    "histogram, atomic": (races.histogram_atomic, f"void({VEC}, int32[::1])"),
    "histogram, privatised": (races.histogram_privatised, f"void({VEC}, int32[::1])"),
}


def f64_operations(ptx: str) -> list[str]:
    """Every instruction with a float64 operand type, except reading and narrowing a parameter."""
    return [op for _, op in F64_OPERATION.findall(ptx) if not ALLOWED_F64.match(op)]


def _accidental_f64():
    # the old spin kernel: 1.0 and 0.9999 are float64 literals (compiled from its source)
    def spin(out, iterations):
        i = cuda.grid(1)  # noqa: F821 (the child compiles this source where cuda is defined)
        x = 1.0 * i
        for _ in range(iterations):
            x = x * 0.9999 + 0.0001
        if i < out.size:
            out[i] = x

    return spin


@pytest.fixture(scope="module")
def ptx():
    names = list(KERNELS)
    jobs = [KERNELS[name] for name in names] + [(_accidental_f64(), f"void({VEC}, int64)")]
    results = ptxinfo.compile_ptx(jobs, cc=(8, 9))  # cc 8.9 (L4): fp64 at 1/64 of fp32
    errors = [r["error"] for r in results if "ptx" not in r]
    if errors and all("cannot compile here" in e for e in errors):
        pytest.skip(errors[0])
    assert not errors, errors
    return dict(zip([*names, "control"], (r["ptx"] for r in results), strict=True))


def test_the_check_finds_float64_in_the_old_kernel(ptx):
    found = f64_operations(ptx["control"])
    assert any(op.startswith(("fma.rn.f64", "mul", "add")) for op in found), found


@pytest.mark.parametrize("name", list(KERNELS))
def test_fp32_kernels_have_no_float64_arithmetic(ptx, name):
    assert ".f32" in ptx[name] or "histogram" in name
    assert f64_operations(ptx[name]) == [], f"{name} computes in float64"


def test_the_harness_blocking_kernel_compiles_to_nanosleep():
    from gpucourse.measure import harness

    (result,) = ptxinfo.compile_ptx([(harness.block_for, "void(int64)")], cc=(7, 5))  # nanosleep: cc ≥ 7.0
    if "error" in result and "cannot compile here" in result["error"]:
        pytest.skip(result["error"])
    assert "nanosleep.u32" in result["ptx"]
