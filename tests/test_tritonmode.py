"""The one probe the course asks "is Triton here?", and its one line when it is not."""

import builtins
import importlib.util

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


needs_triton = pytest.mark.skipif(not tritonmode.triton_available(), reason="needs Triton (Linux wheels only)")
needs_interpreter = pytest.mark.skipif(not tritonmode.triton_available() or importlib.util.find_spec("torch") is None,
                                       reason="Triton's interpreter needs Triton (Linux wheels only) and PyTorch")


def _triton_36_patch(tensor, scope):
    """What Triton 3.6.0's interpreter gives a scalar (the CUDA 12 lock's Triton): ``int`` of a 1-element array."""
    scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data))


@needs_interpreter
def test_the_interpreter_loops_over_scalars_with_triton_36_and_numpy_24(monkeypatch):
    # Triton 3.6.0 + NumPy 2.4 (locks/cu12.txt): `for k0 in range(0, K, BLOCK_K)` failed in both lessons' kernels
    # ("only 0-dimensional arrays can be converted to Python scalars"). Here 3.6's conversion is put back in the
    # installed interpreter: without the fix the matmul fails, with it it computes A @ B.
    import numpy as np
    from triton.runtime import interpreter

    from gpucourse.lessons.tensorcores import experiments

    experiments.interpreted_kernel()  # decorated (and the probe run) before 3.6's conversion comes back
    original = interpreter._patch_lang_tensor
    original = getattr(original, "gpucourse_original", original)  # under Triton 3.6 the fix is already in

    def as_in_36(tensor, scope):
        original(tensor, scope)
        _triton_36_patch(tensor, scope)

    monkeypatch.setattr(interpreter, "_patch_lang_tensor", as_in_36)
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.ones((4, 2), dtype=np.float32)
    with pytest.raises(Exception, match="0-dimensional"):
        experiments._interpret(*(experiments._torch().from_numpy(x) for x in (a, b)), (16, 16, 16))
    assert tritonmode.fix_interpreter() is True  # the probe saw the bug and installed the fix
    assert tritonmode.fix_interpreter() is True  # once per process
    np.testing.assert_array_equal(experiments.run_interpreted(a, b), a @ b)


@needs_triton
def test_the_fix_is_installed_where_triton_needs_it_and_only_there():
    # Triton 3.6 converts a scalar with int() of a 1-element array (refused by NumPy 2.4); 3.7 squeezes it first
    import triton
    from triton.runtime import interpreter

    before = interpreter._patch_lang_tensor
    older = tuple(int(x) for x in triton.__version__.split(".")[:2]) < (3, 7)
    assert tritonmode.fix_interpreter() is older, triton.__version__
    if not older:
        assert interpreter._patch_lang_tensor is before  # nothing installed

    class Tensor:
        pass

    class Handle:
        data = __import__("numpy").array([7], dtype="int32")

    scope = interpreter._LangPatchScope()
    interpreter._patch_lang_tensor(Tensor, scope)
    scalar = Tensor()
    scalar.handle = Handle()
    try:
        assert list(range(0, scalar, 3)) == [0, 3, 6]  # what `for k0 in range(0, K, BLOCK_K)` does
    finally:
        scope.restore()


@needs_triton
def test_a_triton_without_these_internals_is_left_alone(monkeypatch):
    from triton.runtime import interpreter

    monkeypatch.delattr(interpreter, "_patch_lang_tensor")
    assert tritonmode.fix_interpreter() is False  # the runners still run; nothing patched


def test_the_platform_lanes_ask_the_course_s_probe_and_run_tests_that_exist(capsys):
    # make test-platforms: nocuda asserts Triton is absent, cu12 that the lock's Triton is there, both by this probe
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("platforms", root / "tests" / "platforms.py")
    platforms = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(platforms)
    exec(platforms.TRITON_PROBE, {})
    assert capsys.readouterr().out.strip() == str(tritonmode.triton_available())
    for test in platforms.TRITON_TESTS:
        path, _, name = test.partition("::")
        assert (root / path).exists() and (not name or f"def {name}(" in (root / path).read_text()), test
    assert "triton==3.6.0" in (root / "locks" / "cu12.txt").read_text().splitlines()
