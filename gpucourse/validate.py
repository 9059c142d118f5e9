"""Checks for public functions: each raises InvalidConfig saying what is allowed, before any launch."""

from __future__ import annotations

import numbers
from collections.abc import Iterable

from gpucourse.errors import InvalidConfig
from gpucourse.hardware import MAX_BLOCK_DIM, MAX_GRID_DIM, MAX_THREADS_PER_BLOCK  # noqa: F401  (re-exported)


def integer(name: str, value, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """Return ``value`` as an int, or raise saying which integers are allowed."""
    allowed = _range_text(minimum, maximum)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidConfig(f"{name} must be an integer {allowed}, got {value!r}")
    value = int(value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise InvalidConfig(f"{name} must be an integer {allowed}, got {value}")
    return value


def number(name: str, value, *, minimum: float | None = None, maximum: float | None = None) -> float:
    """Return ``value`` as a float, or raise saying which numbers are allowed."""
    allowed = _range_text(minimum, maximum)
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or value != value:
        raise InvalidConfig(f"{name} must be a number {allowed}, got {value!r}")
    value = float(value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise InvalidConfig(f"{name} must be a number {allowed}, got {value}")
    return value


def choice(name: str, value, allowed: Iterable):
    allowed = list(allowed)
    if value not in allowed:
        raise InvalidConfig(f"{name} must be one of {', '.join(map(repr, allowed))}; got {value!r}")
    return value


def dims(name: str, value, limits: tuple[int, int, int]) -> tuple[int, int, int]:
    """Normalise an int or a 1–3 tuple to (x, y, z), checking each against the hardware limit."""
    if isinstance(value, (tuple, list)):
        parts = tuple(value)
    else:
        parts = (value,)
    if not 1 <= len(parts) <= 3:
        raise InvalidConfig(f"{name} must be an integer or a tuple of 1 to 3 integers, got {value!r}")
    out = [integer(f"{name}[{axis}]", v, minimum=1, maximum=lim) for axis, v, lim in zip("xyz", parts, limits)]
    return tuple(out + [1] * (3 - len(out)))


def block(value) -> tuple[int, int, int]:
    """A block shape: each dimension within (1024, 1024, 64) and at most 1024 threads in all."""
    shape = dims("block size", value, MAX_BLOCK_DIM)
    threads = shape[0] * shape[1] * shape[2]
    if threads > MAX_THREADS_PER_BLOCK:
        raise InvalidConfig(
            f"a block may hold at most {MAX_THREADS_PER_BLOCK} threads; {shape[0]}×{shape[1]}×{shape[2]} = {threads}"
        )
    return shape


def grid(value) -> tuple[int, int, int]:
    return dims("grid size", value, MAX_GRID_DIM)


def fits_in_memory(nbytes: int, free_bytes: int | None, what: str = "the arrays") -> None:
    """Refuse a size that cannot fit, with the numbers, before allocating anything."""
    if free_bytes is not None and nbytes > free_bytes:
        raise InvalidConfig(
            f"{what} need {nbytes / 2**30:.2f} GiB but the device has {free_bytes / 2**30:.2f} GiB free; "
            "choose a smaller size"
        )


def _range_text(minimum, maximum) -> str:
    if minimum is not None and maximum is not None:
        return f"from {minimum} to {maximum}"
    if minimum is not None:
        return f"≥ {minimum}"
    if maximum is not None:
        return f"≤ {maximum}"
    return ""
