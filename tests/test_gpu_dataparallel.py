"""GPU tier for lesson 10 (`pytest -m gpu -rP tests/test_gpu_dataparallel.py` on a machine with a GPU): one GPU's
backward overlapping its gradient copies (a stand-in for a link) on a side stream. The several-GPU NCCL run is
tools/ddp_ranks.py, for an instructor's node; it is not part of this tier."""

import pytest
from gpu_expectations import expect

from gpucourse.lessons import dataparallel

pytestmark = pytest.mark.gpu


def test_copies_from_hooks_on_a_side_stream_overlap_backward(record_property):
    table = dataparallel.stream_overlap()
    print(table.to_string())
    print("the model's prediction:", dataparallel.predicted_overlap())
    ms = table.set_index("mode").median_ms
    ratio = ms["copies overlapped (side stream)"] / ms["copies after backward"]
    record_property("overlapped_over_after", ratio)
    assert ms["backward alone"] <= ms["copies after backward"]
    assert ratio <= expect("dataparallel.overlapped_over_after")
