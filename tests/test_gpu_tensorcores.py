"""GPU tier for lesson 11 (`pytest -m gpu -rP tests/test_gpu_tensorcores.py` on a machine with a GPU and Triton):
the lesson's Triton matmul against torch.matmul (cuBLAS), fp16 and bf16 (one verdict each), 4096³, both checked
against each other first."""

import importlib.util

import pytest
from gpu_expectations import expect

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton ships Linux wheels only")]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_triton_matmul_reaches_cublas_at_4096(record_property, dtype):
    from gpucourse.lessons.tensorcores import experiments

    measured = experiments.measure_against_torch(4096, dtype, (128, 128, 64), num_warps=4, num_stages=3)
    assert measured is not None, "no GPU"
    ours, theirs = measured
    assert ours.measured and theirs.measured and ours.tflops > 0, (ours.summary(), theirs.summary())
    print(ours.summary(), theirs.summary(), sep="\n")
    record_property("triton_over_torch", ours.tflops / theirs.tflops)
    assert ours.tflops >= expect("tensorcores.triton_over_torch") * theirs.tflops
