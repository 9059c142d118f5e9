"""One answer, for the whole course, to "is Triton here?", and one line when it is not.

Triton ships Linux wheels only (it comes with Linux PyTorch): on macOS, Windows or a Linux without it, the
tensor-core and attention lessons show committed recordings (compiled output, interpreter results) instead of
running, and every runner that needs Triton raises ``TritonMissing`` with ``TRITON_MISSING``'s words before
anything launches. Lessons, labs, tests and the platform matrix all ask ``triton_available()``, so a profile
"without Triton" means the same thing everywhere.
"""

from __future__ import annotations

import importlib.util

from gpucourse.errors import CourseError

TRITON_MISSING = ("Triton is not installed (it ships Linux wheels only, as a dependency of Linux PyTorch): this "
                  "part shows recorded results instead; on Linux, `make setup` installs it with PyTorch")


class TritonMissing(CourseError, ImportError):
    """Triton is not installed here (it has Linux wheels only)."""


def triton_available() -> bool:
    """Whether ``import triton`` would find Triton (without importing it: that takes seconds)."""
    try:
        return importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):  # a broken or half-removed install counts as missing
        return False


def triton_or_raise():
    """The ``triton`` module, or ``TritonMissing`` with one line saying why there is none."""
    try:
        import triton
    except ImportError as error:
        raise TritonMissing(TRITON_MISSING) from error
    return triton


def _scalar_index(self) -> int:
    """A scalar's ``__index__`` in the interpreter (``range(0, K, BLOCK_K)`` calls it), as Triton 3.7 writes it."""
    return int(self.handle.data.squeeze())


def fix_interpreter() -> bool:
    """Make Triton's interpreter run loops over scalar arguments with the NumPy of the locks; True if it had to.

    The interpreter holds a kernel's scalar arguments as 1-element arrays and Triton 3.6.0 (the CUDA 12 lock)
    converts them with ``int(array)``, which NumPy 2.4 (both locks) refuses for arrays that are not 0-D: every
    ``for k in range(0, K, BLOCK_K)`` then fails with "only 0-dimensional arrays can be converted to Python
    scalars". Triton 3.7 squeezes first; this gives 3.6 the same ``__index__``. A probe decides (no version
    test), and the fix is installed once per process, for both lessons' interpreted runners."""
    import numpy as np
    from triton.runtime import interpreter

    original = getattr(interpreter, "_patch_lang_tensor", None)
    scope_class = getattr(interpreter, "_LangPatchScope", None)
    if original is None or scope_class is None:  # a Triton built otherwise (3.6.0 and 3.7.1 have both): nothing to fix
        return False
    if getattr(original, "gpucourse_fixed", False):
        return True

    class Probe:
        pass

    class Handle:
        data = np.array([3], dtype=np.int32)

    holder = Probe()
    holder.handle = Handle()
    scope = scope_class()
    original(Probe, scope)
    try:
        Probe.__index__(holder)
        return False  # this Triton converts scalars itself
    except TypeError:
        pass
    finally:
        scope.restore()

    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", _scalar_index)  # undone with the rest when the launch ends

    patched.gpucourse_fixed, patched.gpucourse_original = True, original
    interpreter._patch_lang_tensor = patched
    return True
