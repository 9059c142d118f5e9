"""GPU errors from numba-cuda, CuPy and torch become one line: what happened and what to do.

Each error is an exception of the library's own type, built here the way the library builds it
(CuPy's from the CUDA runtime's error code; numba-cuda's in a child process where the real
CUDA target is loaded, as in GPU mode)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from standin_driver import PYTHON_STANDIN_DRIVER

from gpucourse.errors import RESTART, GPUError, explain_gpu_error
from gpucourse.measure import harness
from gpucourse.tooling.build import ROOT


def _one_line(exc: BaseException, what: str = "my kernel") -> str:
    with pytest.raises(GPUError) as caught:
        with harness.gpu_errors(what):
            raise exc
    text = str(caught.value)
    assert "\n" not in text and text.startswith(what)
    return text


def test_cupy_illegal_address_says_restart_the_kernel():
    from cupy_backends.cuda.api.runtime import CUDARuntimeError

    error = CUDARuntimeError(700)  # cudaErrorIllegalAddress
    assert "cudaErrorIllegalAddress" in str(error)
    text = _one_line(error)
    assert "illegal memory access" in text and RESTART in text


def test_an_address_in_no_memory_space_as_an_h100_reported_it():
    # numba-cuda's CudaAPIError, word for word as an H100 raised it for x[10**9] = 1 on a 4-element array
    CudaAPIError = type("CudaAPIError", (Exception,), {"__module__": "numba.cuda.cudadrv.driver"})
    error = CudaAPIError(717, "[<CUresult.CUDA_ERROR_INVALID_ADDRESS_SPACE: 717>] Call to cuCtxSynchronize "
                              "results in CUDA_ERROR_INVALID_ADDRESS_SPACE")
    text = _one_line(error)
    assert "illegal memory access" in text and RESTART in text


def test_cupy_insufficient_driver_says_update_the_driver():
    from cupy_backends.cuda.api.runtime import CUDARuntimeError

    text = _one_line(CUDARuntimeError(35))  # cudaErrorInsufficientDriver
    assert "newer NVIDIA driver" in text and "Update the NVIDIA driver" in text and RESTART not in text


def test_cupy_unsupported_ptx_version():
    from cupy_backends.cuda.api.runtime import CUDARuntimeError

    text = _one_line(CUDARuntimeError(222))  # cudaErrorUnsupportedPtxVersion
    assert "PTX newer than this NVIDIA driver" in text


def test_torch_illegal_memory_access_says_restart_the_kernel():
    import torch

    error = torch.AcceleratorError("CUDA error: an illegal memory access was encountered\n"
                                   "CUDA kernel errors might be asynchronously reported at some other API call")
    text = _one_line(error, "matmul")
    assert "illegal memory access" in text and RESTART in text


def test_torch_out_of_memory():
    import torch

    text = _one_line(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB"), "matmul")
    assert "more GPU memory than is free" in text


CHILD = PYTHON_STANDIN_DRIVER + textwrap.dedent("""
    import json
    from cuda.bindings.driver import CUresult
    from numba.cuda.cudadrv.driver import CudaAPIError, LinkerError
    from numba.cuda.cudadrv.error import CCSupportError
    from gpucourse.errors import explain_gpu_error

    errors = {
        "illegal": CudaAPIError(CUresult.CUDA_ERROR_ILLEGAL_ADDRESS,
                                "Call to cuMemcpyDtoH results in CUDA_ERROR_ILLEGAL_ADDRESS"),
        "ptx": CudaAPIError(CUresult.CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
                            "Call to cuLinkAddData results in CUDA_ERROR_UNSUPPORTED_PTX_VERSION"),
        "ptxas": LinkerError("ptxas fatal: Unsupported .version 9.2; current version is '9.0'"),
        "cc": CCSupportError("GPU compute capability 3.5 is not supported(requires >=7.5)"),
    }
    print("@@" + json.dumps({k: [type(e).__module__, explain_gpu_error(e, "add_2d")] for k, e in errors.items()}))
""")


def test_numba_cuda_errors_of_its_own_types():
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=300)
    line = next((x for x in done.stdout.splitlines() if x.startswith("@@")), None)
    assert line, done.stderr[-2000:]
    got = json.loads(line[2:])
    assert all(module.startswith("numba.cuda") for module, _ in got.values())
    assert "illegal memory access" in got["illegal"][1] and RESTART in got["illegal"][1]
    assert "PTX newer than this NVIDIA driver" in got["ptx"][1]
    assert "PTX newer than this NVIDIA driver" in got["ptxas"][1]
    assert got["cc"][1].startswith("add_2d cannot be compiled for this GPU (GPU compute capability 3.5")


def test_other_errors_pass_through_untouched():
    assert explain_gpu_error(KeyError("ILLEGAL_ADDRESS")) is None
    assert explain_gpu_error(ValueError("an illegal memory access")) is None
    with pytest.raises(ZeroDivisionError):
        with harness.gpu_errors("k"):
            raise ZeroDivisionError("x")
