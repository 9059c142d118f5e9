"""PTX newer than the driver reads (gpu-mode review G6): Colab's T4 driver 550.54.15 supports CUDA 12.4 (PTX 8.4)
while NVVM 12.5+ writes PTX 8.5+, so the driver's linker refuses every kernel (CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
numba-cuda#120). Decided at start-up from package metadata, with a stand-in driver and stand-in versions."""

from __future__ import annotations

import pytest

from gpucourse.errors import explain_gpu_error
from gpucourse.measure import runtime
from gpucourse.tooling import doctor

T4_ON_COLAB = runtime.Driver((12, 4), (runtime.ProbedDevice("Tesla T4", (7, 5)),))
STACK12 = runtime.Stack(12, "cuda-bindings 12.9.0")
NVVM_125 = runtime.Compiler((12, 5), "nvidia-cuda-nvcc-cu12 12.5.82")


@pytest.mark.parametrize(("driver", "compiler", "problem"), [
    ((12, 4), NVVM_125, True),  # Colab's T4: the driver links PTX 8.5 it cannot read
    ((12, 4), runtime.Compiler((12, 4), "nvidia-cuda-nvcc-cu12 12.4.131"), False),
    ((12, 8), NVVM_125, False),  # a newer driver reads it
    ((12, 4), runtime.Compiler((12, 5), "nvvm 12.5", (12, 6), "nvidia-nvjitlink-cu12 12.6.85"), False),  # host link
    ((12, 4), runtime.Compiler((12, 5), "nvvm 12.5", (12, 4), "nvidia-nvjitlink-cu12 12.4.127"), True),  # too old
    ((13, 0), runtime.Compiler((13, 0), "nvidia-nvvm 13.0.88"), False),
    ((13, 0), runtime.Compiler((13, 2), "nvidia-nvvm 13.2.51"), True),
    ((12, 4), None, False),  # a system toolkit: not judged here
])
def test_ptx_problem(driver, compiler, problem):
    found = runtime.ptx_problem(runtime.Driver(driver, T4_ON_COLAB.devices), compiler)
    assert bool(found) == problem, found
    assert "\n" not in found


def test_colabs_t4_starts_in_simulator_mode_with_the_reason_in_one_line():
    mode, why = runtime.decide(probe=lambda: (T4_ON_COLAB, ""), stack=lambda: STACK12, compiler=lambda stack: NVVM_125)
    assert mode == "sim"
    for words in ("CUDA 12.4", "NVVM 12.5", "nvidia-cuda-nvcc-cu12 12.5.82", "UNSUPPORTED_PTX_VERSION",
                  "nvidia-nvjitlink-cu12>=12.5", "nvidia-cuda-nvcc-cu12==12.4.*"):
        assert words in why, (words, why)
    # forced GPU mode is honoured: the judgement reads versions only
    assert runtime.decide("gpu", probe=lambda: (T4_ON_COLAB, ""), stack=lambda: STACK12,
                          compiler=lambda stack: NVVM_125) == ("gpu", "")
    # the same machine with a host-side linker runs on the GPU
    linked = runtime.Compiler((12, 5), "nvvm", (12, 6), "nvidia-nvjitlink-cu12 12.6.85")
    assert runtime.decide(probe=lambda: (T4_ON_COLAB, ""), stack=lambda: STACK12,
                          compiler=lambda stack: linked) == ("gpu", "")


@pytest.mark.parametrize(("versions", "expected"), [
    ({"nvidia-cuda-nvcc-cu12": "12.5.82", "numba-cuda": "0.30.4"}, ((12, 5), None)),
    ({"nvidia-cuda-nvcc-cu12": "12.5.82", "nvidia-nvjitlink-cu12": "12.6.85", "numba-cuda": "0.30.4"},
     ((12, 5), (12, 6))),
    ({"nvidia-cuda-nvcc-cu12": "12.5.82", "nvidia-nvjitlink-cu12": "12.6.85", "numba-cuda": "0.2.0"},
     ((12, 5), None)),  # an older numba-cuda links through the driver
    ({"nvidia-cuda-nvcc-cu12": "12.5.82", "nvidia-nvjitlink-cu12": "12.2.140", "numba-cuda": "0.30.4"},
     ((12, 5), None)),  # nvJitLink under 12.3 is not used
    ({"numba-cuda": "0.30.4"}, None),  # no NVVM wheel
])
def test_the_compiler_is_read_from_package_metadata(monkeypatch, versions, expected):
    monkeypatch.setattr(runtime, "_installed_version", versions.get)
    compiler = runtime.installed_compiler(STACK12)
    assert (compiler if compiler is None else (compiler.nvvm, compiler.nvjitlink)) == expected


def test_the_compiler_here():
    compiler = runtime.installed_compiler(runtime.installed_stack())
    assert compiler is not None and compiler.nvvm[0] == 13 and compiler.nvvm_evidence.startswith("nvidia-nvvm 13.")


def test_doctor_says_who_writes_and_links_the_ptx():
    line = doctor.compiler_line((12, 4), NVVM_125)
    assert line.startswith("PTX: written by NVVM 12.5") and "linked by the driver" in line and "PROBLEM" in line
    ok = doctor.compiler_line((12, 4), runtime.Compiler((12, 5), "nvvm", (12, 6), "nvidia-nvjitlink-cu12 12.6.85"))
    assert "linked on the host by nvJitLink" in ok and "loads it" in ok
    assert "kernel check below" in doctor.compiler_line(None, None)


def test_the_gpu_error_says_what_can_be_done_on_colab():
    line = explain_gpu_error(RuntimeError("Call to cuLinkAddData results in CUDA_ERROR_UNSUPPORTED_PTX_VERSION"))
    assert "nvJitLink" in line and "driver" in line
