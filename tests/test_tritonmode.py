"""The one probe the course asks "is Triton here?", and its one line when it is not."""

import builtins

import pytest

from gpucourse.lessons import attention, tensorcores
from gpucourse.measure import tritonmode


def test_the_lessons_share_one_refusal():
    assert tensorcores.TritonMissing is tritonmode.TritonMissing
    assert attention.experiments.TRITON_MISSING is tritonmode.TRITON_MISSING
    assert "Linux wheels only" in tritonmode.TRITON_MISSING


def test_a_missing_triton_is_one_course_error(monkeypatch):
    real_import = builtins.__import__

    def no_triton(name, *args, **kwargs):
        if name == "triton" or name.startswith("triton."):
            raise ImportError("No module named 'triton'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_triton)
    with pytest.raises(tritonmode.TritonMissing, match="Linux wheels only"):
        tritonmode.triton_or_raise()


def test_available_asks_without_importing(monkeypatch):
    monkeypatch.setattr(tritonmode.importlib.util, "find_spec", lambda name: None)
    assert tritonmode.triton_available() is False

    def broken(name):
        raise ValueError("triton.__spec__ is None")

    monkeypatch.setattr(tritonmode.importlib.util, "find_spec", broken)
    assert tritonmode.triton_available() is False


def test_attention_refuses_with_the_same_words(monkeypatch):
    from gpucourse.errors import InvalidConfig

    monkeypatch.setattr(attention.kernels, "triton", None)
    with pytest.raises(InvalidConfig, match="Linux wheels only"):
        attention.flash_attention(None, None, None)
