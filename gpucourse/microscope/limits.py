"""Launch limits of real GPUs, which Numba's simulator does not check.

Figures from the CUDA C++ Programming Guide, "Technical Specifications per Compute Capability":
1024 threads per block, block dimensions up to 1024 × 1024 × 64, grid dimensions up to
(2^31 − 1) × 65535 × 65535, 48 KiB of static shared memory per block, and a larger per-block
maximum that a kernel reaches only by opting in (``cudaFuncAttributeMaxDynamicSharedMemorySize``).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

from gpucourse import hardware
from gpucourse.microscope.errors import LaunchConfigError

KIB = hardware.KIB


@dataclass(frozen=True)
class Arch:
    cc: tuple[int, int]
    max_shared_bytes_opt_in: int
    max_threads_per_block: int = hardware.MAX_THREADS_PER_BLOCK
    max_block_dim: tuple[int, int, int] = hardware.MAX_BLOCK_DIM
    max_grid_dim: tuple[int, int, int] = hardware.MAX_GRID_DIM
    max_static_shared_bytes: int = hardware.MAX_STATIC_SHARED_PER_BLOCK_BYTES

    @property
    def name(self) -> str:
        return f"cc {self.cc[0]}.{self.cc[1]}"


# Every compute capability the course models, with its opt-in shared-memory maximum per block.
ARCHS = {cc: Arch(cc, facts.shared_per_block_optin_bytes) for cc, facts in hardware.COMPUTE_CAPABILITIES.items()}
DEFAULT_CC = (9, 0)


def arch(cc=DEFAULT_CC) -> Arch:
    """The limits of compute capability ``cc`` (a ``(major, minor)`` tuple, e.g. ``(9, 0)``)."""
    try:
        return ARCHS[tuple(cc)]
    except (KeyError, TypeError):
        known = ", ".join(f"({a}, {b})" for a, b in ARCHS)
        raise LaunchConfigError(f"cc must be one of {known}; got {cc!r}") from None


def _dims(what: str, value, limits: tuple[int, int, int]) -> tuple[int, int, int]:
    parts = (value,) if isinstance(value, numbers.Integral) else value
    try:
        parts = tuple(parts)
    except TypeError:
        parts = ()
    ok = 1 <= len(parts) <= 3 and all(isinstance(p, numbers.Integral) and not isinstance(p, bool) for p in parts)
    if not ok:
        raise LaunchConfigError(f"{what} must be a positive integer or a tuple of 1 to 3 of them; got {value!r}")
    dims = tuple(int(p) for p in parts) + (1,) * (3 - len(parts))
    for axis, size, limit in zip("xyz", dims, limits, strict=True):
        if not 1 <= size <= limit:
            allowed = " × ".join(str(n) for n in limits)
            raise LaunchConfigError(
                f"{what}.{axis} = {size} is out of range: each {what} dimension must be between 1 and its limit "
                f"({allowed})"
            )
    return dims


def validate_launch(griddim, blockdim, cc=DEFAULT_CC) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """Normalise ``griddim`` and ``blockdim`` to 3-tuples, or raise ``LaunchConfigError`` saying the limit."""
    limits = arch(cc)
    block = _dims("blockdim", blockdim, (2**31 - 1,) * 3)
    threads = block[0] * block[1] * block[2]
    if threads > limits.max_threads_per_block:
        raise LaunchConfigError(
            f"a block of {block[0]}×{block[1]}×{block[2]} = {threads} threads is too large: at most "
            f"{limits.max_threads_per_block} threads per block are allowed"
        )
    block = _dims("blockdim", blockdim, limits.max_block_dim)
    grid = _dims("griddim", griddim, limits.max_grid_dim)
    return grid, block


def check_shared_memory(static_bytes: int, dynamic_bytes: int, cc=DEFAULT_CC, opt_in: bool = False) -> None:
    """Raise ``LaunchConfigError`` when a block asks for more shared memory than ``cc`` allows."""
    limits = arch(cc)
    static_max, opt_in_max = limits.max_static_shared_bytes, limits.max_shared_bytes_opt_in
    if static_bytes > static_max:
        raise LaunchConfigError(
            f"the kernel declares {static_bytes} bytes of static shared memory per block; at most {static_max} "
            f"bytes ({static_max // KIB} KiB) are allowed on {limits.name} (use dynamic shared memory and the "
            "opt-in for more)"
        )
    total = static_bytes + dynamic_bytes
    if total > opt_in_max:
        raise LaunchConfigError(
            f"a block uses {total} bytes of shared memory ({static_bytes} static + {dynamic_bytes} dynamic); at "
            f"most {opt_in_max} bytes ({opt_in_max // KIB} KiB) per block are allowed on {limits.name}"
        )
    if total > static_max and not opt_in:
        raise LaunchConfigError(
            f"a block uses {total} bytes of shared memory; more than {static_max // KIB} KiB per block needs the "
            f"opt-in (cudaFuncAttributeMaxDynamicSharedMemorySize, up to {opt_in_max // KIB} KiB on {limits.name}): "
            "pass shared_opt_in=True"
        )
