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
