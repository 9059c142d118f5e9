"""One place for PyTorch's float32-matmul precision switch and its scaled (FP8) matmul.

PyTorch 2.9 replaced the TF32 switches (``torch.backends.cuda.matmul.allow_tf32``,
``torch.set_float32_matmul_precision``) with ``torch.backends.cuda.matmul.fp32_precision``
("ieee" or "tf32"; https://docs.pytorch.org/docs/stable/notes/cuda.html, "TensorFloat-32 (TF32) on
Ampere (and later) devices"), and added the public ``torch.nn.functional.scaled_mm`` beside the
private ``torch._scaled_mm``. The course's torch range (pyproject.toml) reaches back to 2.4, so each
name here uses the new API when the installed torch has it and the old one otherwise. Nothing else in
the package may touch the legacy names (tests/test_torch_precision.py greps for them).
"""

from __future__ import annotations

import contextlib


def has_fp32_precision(torch) -> bool:
    """Whether this torch has the ``fp32_precision`` API (PyTorch ≥ 2.9)."""
    try:
        return isinstance(getattr(torch.backends.cuda.matmul, "fp32_precision", None), str)
    except (AttributeError, RuntimeError):
        return False


def get_matmul_tf32(torch) -> bool:
    """Whether float32 matmuls may use TF32 tensor cores now."""
    if has_fp32_precision(torch):
        return torch.backends.cuda.matmul.fp32_precision == "tf32"
    return bool(torch.backends.cuda.matmul.allow_tf32)


def set_matmul_tf32(torch, enabled: bool) -> None:
    """Allow (True) or forbid (False) TF32 for float32 matmuls, with whichever API torch has."""
    if has_fp32_precision(torch):
        torch.backends.cuda.matmul.fp32_precision = "tf32" if enabled else "ieee"
        return
    torch.backends.cuda.matmul.allow_tf32 = enabled  # legacy API: torch < 2.9
    torch.set_float32_matmul_precision("high" if enabled else "highest")


@contextlib.contextmanager
def matmul_tf32(enabled: bool):
    """Context: TF32 on or off for float32 matmuls, restored afterwards."""
    import torch

    matmul = torch.backends.cuda.matmul
    if has_fp32_precision(torch):
        old = matmul.fp32_precision  # may be "none" (inherit the global setting): restored as it was
        set_matmul_tf32(torch, enabled)
        try:
            yield
        finally:
            matmul.fp32_precision = old
        return
    old_allow, old_precision = matmul.allow_tf32, torch.get_float32_matmul_precision()  # legacy API
    set_matmul_tf32(torch, enabled)
    try:
        yield
    finally:
        matmul.allow_tf32 = old_allow
        torch.set_float32_matmul_precision(old_precision)


def has_scaled_mm(torch) -> bool:
    """Whether this torch has a scaled (FP8) matmul, public or private."""
    return _public_scaled_mm(torch) is not None or hasattr(torch, "_scaled_mm")


def _public_scaled_mm(torch):
    functional = getattr(getattr(torch, "nn", None), "functional", None)
    fn = getattr(functional, "scaled_mm", None)
    return fn if fn is not None and hasattr(functional, "ScalingType") else None


def scaled_mm_name(torch) -> str:
    """The name of the scaled matmul this torch will use (for labels)."""
    return "torch.nn.functional.scaled_mm" if _public_scaled_mm(torch) is not None else "torch._scaled_mm"


def scaled_mm(torch, a8, b8, inv_a, inv_b, out_dtype):
    """a8 @ b8 with per-tensor (tensor-wise) decoding scales inv_a, inv_b: the public
    ``torch.nn.functional.scaled_mm`` where torch has it, else the private ``torch._scaled_mm``."""
    public = _public_scaled_mm(torch)
    if public is not None:
        wise = torch.nn.functional.ScalingType.TensorWise
        return public(a8, b8, inv_a, wise, inv_b, wise, output_dtype=out_dtype)
    return torch._scaled_mm(a8, b8, inv_a, inv_b, out_dtype=out_dtype)  # fallback: older torch
