"""Lesson 00's memory-hierarchy picture: the L2 size comes from a device query or a cited source."""

from gpucourse.measure import runtime
from gpucourse.viz import diagrams


def _l2_box(fig) -> str:
    return next(a.text for a in fig.layout.annotations if a.text.startswith("<b>L2 cache"))


def test_without_a_gpu_the_l2_is_the_whitepapers_h100_figure():
    if runtime.is_gpu():
        return  # covered by the next test's device query
    text = _l2_box(diagrams.memory_hierarchy())
    assert "50 MB on an H100 SXM5 (Hopper whitepaper)" in text
    assert "60 MB" not in text and "PyTorch" not in text


def test_on_a_gpu_the_l2_is_queried_from_the_device(monkeypatch):
    info = runtime.DeviceInfo(name="NVIDIA H200", compute_capability=(9, 0), sm_count=132,
                              l2_bytes=50 * 2**20)
    monkeypatch.setattr(runtime, "is_gpu", lambda: True)
    monkeypatch.setattr(runtime, "device", lambda: info)
    text = _l2_box(diagrams.memory_hierarchy())
    assert "50 MiB on this NVIDIA H200 (device query)" in text
    assert "Hopper whitepaper" not in text
    assert "custom" in _l2_box(diagrams.memory_hierarchy(l2="custom"))
