"""GPU tier for lesson 12 (`pytest -m gpu -rP tests/test_gpu_attention.py` on a machine with a GPU): the lesson's
Triton FlashAttention forward, compiled, against SDPA's FlashAttention backend at n = 4096, fp16 (each checked
against SDPA's output before it is timed, in ``timing.against_sdpa``)."""

import pytest
from gpu_expectations import expect

from gpucourse.lessons.attention import timing
from gpucourse.measure import tritonmode

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not tritonmode.triton_available(), reason=tritonmode.TRITON_MISSING)]


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_the_triton_forward_keeps_up_with_sdpas_flash_backend(d, causal, record_property):
    result = timing.against_sdpa(4096, d, causal)
    print(result)
    record_property("kernel_share_of_sdpa", result["kernel_share_of_sdpa"])
    assert result["kernel_share_of_sdpa"] >= expect("attention.flash_over_sdpa")
