"""Block-scaled formats, exactly and in NumPy: FP4 E2M1 elements, E8M0 scales, MXFP8/MXFP4 and NVFP4.

    E2M1_VALUES                        # the 16 FP4 E2M1 codes' values (OCP MX v1.0, §5.3.3)
    decode_e2m1(0b0111)                # 6.0
    decode_e8m0(127)                   # 1.0 (2^(code - 127); 0xFF is NaN)
    quantize_e2m1(values)              # round to nearest, ties to even, saturating at ±6
    mx_quantize(values, "e2m1")        # MXFP4: blocks of 32, one E8M0 (power-of-two) scale each
    nvfp4_quantize(values)             # NVFP4: blocks of 16, an E4M3 scale each, one FP32 scale a tensor
    block_scaled_errors()              # their error beside plain per-tensor FP8 and FP4 on the same data
    mxfp8_against_per_tensor()         # why MXFP8's RMS error is above per-tensor FP8's on that data

Sources: the OCP Microscaling Formats (MX) Specification v1.0 (September 2023): a block of k = 32
elements shares one scale X; the scale is E8M0 (an 8-bit exponent, bias 127, no sign or mantissa,
0xFF = NaN); elements are FP8 (E4M3, E5M2), FP6 or FP4 E2M1 (bias 1, no inf or NaN, largest 6);
the scale the spec suggests is X = 2^(⌊log2 max|V|⌋ − emax of the element). NVIDIA's NVFP4 (NVIDIA
technical blog "Introducing NVFP4 for efficient and accurate low-precision inference", 2025): E2M1
elements in blocks of 16, each block with an FP8 E4M3 scale, and a second, per-tensor FP32 scale.
Blackwell's fifth-generation tensor cores read the block scales with the elements and apply them
inside the matrix multiply (the same blog; CUTLASS's block-scaled GEMM documentation). No timing here.

The spec's scale puts a block's largest magnitude at amax ÷ X in [2^emax, 2^(emax+1)): for E4M3
that is [256, 512), so a block maximum whose mantissa is above 1.75 saturates at 448 (and for
E2M1, above 1.5 at 6). NVIDIA's software rounds the scale *up* instead: TransformerEngine's MXFP8
"e = float_to_e8m0(amax_block / 448)", "rounding up if the mantissa is non-zero … the largest value in
each block fits within the FP8 representable range without overflow" (TransformerEngine docs,
low_precision_training/mxfp8), the rule of Mishra, Stosic & Layton, "Recipes for Pre-training LLMs with
MXFP8" (arXiv:2506.08027, 2025): ``scale_rule="ceil"``, X = 2^⌈log2(amax ÷ largest element)⌉, never
saturates. Only E4M3 (MXFP8) and E2M1 (MXFP4) elements are modelled; MXFP8's E5M2 and MXFP6's E3M2/E2M3
are not.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpucourse import validate
from gpucourse.errors import InvalidConfig
from gpucourse.lessons.precision import formats

MX_BLOCK = 32  # OCP MX v1.0: elements per shared scale
NVFP4_BLOCK = 16  # NVIDIA NVFP4: elements per E4M3 scale
E2M1_MAX = 6.0
E2M1_EMAX = 2  # exponent of E2M1's largest normal (6 = 1.5 × 2^2)
E8M0_BIAS = 127
E8M0_NAN = 0xFF
E4M3_MAX = 448.0
E4M3_EMAX = 8  # 448 = 1.75 × 2^8
_E2M1_GRID = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])  # codes 0..7, non-negative


def decode_e2m1(code: int) -> float:
    """The value of a 4-bit E2M1 code (sign, 2 exponent bits with bias 1, 1 mantissa bit)."""
    code = validate.integer("code", code, minimum=0, maximum=15)
    sign = -1.0 if code & 0b1000 else 1.0
    exponent, mantissa = (code >> 1) & 0b11, code & 1
    if exponent == 0:  # subnormal: 0 or 0.5
        return sign * mantissa * 0.5
    return sign * (1 + mantissa / 2) * 2.0 ** (exponent - 1)


E2M1_VALUES = tuple(decode_e2m1(c) for c in range(16))


def decode_e8m0(code: int) -> float:
    """The value of an 8-bit E8M0 scale: 2^(code − 127); code 0xFF is NaN."""
    code = validate.integer("code", code, minimum=0, maximum=255)
    return float("nan") if code == E8M0_NAN else float(np.ldexp(1.0, code - E8M0_BIAS))


def quantize_e2m1(values) -> np.ndarray:
    """Each value rounded to the nearest E2M1 value (ties to the even code), saturating at ±6."""
    v = np.asarray(values, dtype=np.float64)
    if np.isnan(v).any():
        raise InvalidConfig("E2M1 has no NaN: quantize finite values")
    mag = np.minimum(np.abs(v), E2M1_MAX)
    upper = np.clip(np.searchsorted(_E2M1_GRID, mag, side="left"), 1, len(_E2M1_GRID) - 1)
    lower = upper - 1
    below, above = mag - _E2M1_GRID[lower], _E2M1_GRID[upper] - mag
    pick = np.where(below < above, lower, np.where(above < below, upper, np.where(lower % 2 == 0, lower, upper)))
    return np.copysign(_E2M1_GRID[pick], v)


def _elements(scaled: np.ndarray, element: str) -> np.ndarray:
    if element == "e2m1":
        return quantize_e2m1(scaled)
    return formats.quantize(scaled, "fp8_e4m3", saturate=True)


def _blocks(values, block: int) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size == 0 or v.size % block:
        raise InvalidConfig(f"block-scaled quantisation needs a multiple of {block} values; got {v.size}")
    if not np.isfinite(v).all():
        raise InvalidConfig("block-scaled quantisation needs finite values")
    return v.reshape(-1, block)


SCALE_RULES = ("floor", "ceil")  # the OCP spec's suggestion; NVIDIA TransformerEngine's (round up)


def mx_quantize(values, element: str = "e2m1", block: int = MX_BLOCK,
                scale_rule: str = "floor") -> tuple[np.ndarray, np.ndarray]:
    """(dequantised values, E8M0 scale codes per block) of MXFP4 (``element="e2m1"``) or MXFP8
    (``"fp8_e4m3"``), elements = round(V / X), saturating. ``scale_rule="floor"`` (the spec's):
    X = 2^(⌊log2 max|V|⌋ − emax_element); ``"ceil"`` (TransformerEngine's): X = 2^⌈log2(max|V| ÷ largest
    element)⌉, so that no element saturates."""
    element = validate.choice("element", element, ("e2m1", "fp8_e4m3"))
    scale_rule = validate.choice("scale_rule", scale_rule, SCALE_RULES)
    b = _blocks(values, block)
    emax = E2M1_EMAX if element == "e2m1" else E4M3_EMAX
    largest = E2M1_MAX if element == "e2m1" else E4M3_MAX
    amax = np.abs(b).max(axis=1)
    safe = np.where(amax > 0, amax, 1.0)
    exponent = np.floor(np.log2(safe)) - emax if scale_rule == "floor" else np.ceil(np.log2(safe / largest))
    shared = np.where(amax > 0, exponent, -E8M0_BIAS)
    shared = np.clip(shared, -E8M0_BIAS, E8M0_BIAS).astype(int)
    scale = np.ldexp(1.0, shared)[:, None]
    return (_elements(b / scale, element) * scale).reshape(np.shape(values)), shared + E8M0_BIAS


def nvfp4_quantize(values, block: int = NVFP4_BLOCK) -> tuple[np.ndarray, np.ndarray, float]:
    """(dequantised values, E4M3 block scales, FP32 tensor scale) of NVFP4: the tensor scale maps the
    largest block scale onto E4M3's range (amax ÷ (448 × 6)); each block's scale is its amax ÷ 6 in
    those units, rounded to E4M3; elements are E2M1 of V ÷ (block scale × tensor scale)."""
    b = _blocks(values, block)
    amax = float(np.abs(b).max())
    tensor_scale = float(np.float32(amax / (E4M3_MAX * E2M1_MAX))) if amax > 0 else 1.0
    block_scale = formats.quantize(np.abs(b).max(axis=1) / E2M1_MAX / tensor_scale, "fp8_e4m3", saturate=True)
    total = (block_scale * tensor_scale)[:, None]
    safe = np.where(total > 0, total, 1.0)
    return (quantize_e2m1(b / safe) * total).reshape(np.shape(values)), block_scale, tensor_scale


def per_tensor_quantize(values, element: str) -> np.ndarray:
    """One scale for the whole tensor (amax onto the element's largest value), as plain FP8/FP4 do."""
    element = validate.choice("element", element, ("e2m1", "fp8_e4m3"))
    v = np.asarray(values, dtype=np.float64)
    amax = float(np.abs(v).max()) if v.size else 0.0
    scale = amax / (E2M1_MAX if element == "e2m1" else E4M3_MAX) if amax > 0 else 1.0
    return _elements(v / scale, element) * scale


def sample_data(n: int = 4096, seed: int = 0) -> np.ndarray:
    """Activation-like data: normal values whose size varies from block to block, plus a few outliers."""
    n = validate.integer("n", n, minimum=NVFP4_BLOCK * 2, maximum=1 << 22)
    if n % MX_BLOCK:
        raise InvalidConfig(f"n must be a multiple of {MX_BLOCK}; got {n}")
    rng = np.random.default_rng(seed)
    v = rng.standard_normal(n) * np.repeat(np.exp(rng.normal(0, 1.5, n // NVFP4_BLOCK)), NVFP4_BLOCK)
    v[rng.choice(n, max(1, n // 512), replace=False)] *= 50.0
    return v


def _relative_errors(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    nonzero = v != 0
    return np.abs(q[nonzero] - v[nonzero]) / np.abs(v[nonzero])


def block_scaled_errors(values=None) -> pd.DataFrame:
    """Relative RMS error (normalised by the whole tensor's RMS), mean relative error per element, bits per
    value and values flushed to zero of each scheme on the same data (``sample_data`` by default)."""
    v = sample_data() if values is None else np.asarray(values, dtype=np.float64)
    schemes = {
        "FP8 E4M3, one scale per tensor": (per_tensor_quantize(v, "fp8_e4m3"), 8.0),
        "MXFP8 (E4M3, E8M0 scale per 32)": (mx_quantize(v, "fp8_e4m3")[0], 8 + 8 / MX_BLOCK),
        "MXFP8, scale rounded up (TransformerEngine)": (mx_quantize(v, "fp8_e4m3", scale_rule="ceil")[0],
                                                        8 + 8 / MX_BLOCK),
        "FP4 E2M1, one scale per tensor": (per_tensor_quantize(v, "e2m1"), 4.0),
        "MXFP4 (E2M1, E8M0 scale per 32)": (mx_quantize(v, "e2m1")[0], 4 + 8 / MX_BLOCK),
        "NVFP4 (E2M1, E4M3 scale per 16, FP32 per tensor)": (nvfp4_quantize(v)[0], 4 + 8 / NVFP4_BLOCK),
    }
    norm = float(np.sqrt(np.mean(v**2))) or 1.0
    rows = [{"scheme": name, "bits_per_value": bits,
             "relative_rms_error": float(np.sqrt(np.mean((q - v) ** 2))) / norm,
             "mean_relative_error_per_element": float(np.mean(_relative_errors(q, v))),
             "values_flushed_to_zero_pct": 100.0 * float(np.mean((q == 0) & (v != 0)))}
            for name, (q, bits) in schemes.items()]
    return pd.DataFrame(rows)


def mxfp8_against_per_tensor(values=None) -> dict[str, float]:
    """Why MXFP8 (the spec's floor scale) can show a larger relative RMS error than per-tensor FP8 on the same
    data: the shares of MXFP8's squared error that saturation and the tensor's largest value explain, that
    value's share of the tensor's energy (Σv²), and the errors with TransformerEngine's round-up scale."""
    v = (sample_data() if values is None else np.asarray(values, dtype=np.float64)).ravel()
    mx, codes = mx_quantize(v, "fp8_e4m3")
    scale = np.repeat(np.ldexp(1.0, codes.astype(int) - E8M0_BIAS), MX_BLOCK)
    saturated = np.abs(v) / scale > E4M3_MAX
    squared = (mx - v) ** 2
    top = int(np.argmax(np.abs(v)))
    tensor = per_tensor_quantize(v, "fp8_e4m3")
    ceil = mx_quantize(v, "fp8_e4m3", scale_rule="ceil")[0]
    norm = float(np.sqrt(np.mean(v**2))) or 1.0

    def rms(q):
        return float(np.sqrt(np.mean((q - v) ** 2))) / norm

    return {"per-tensor FP8 relative RMS": rms(tensor), "MXFP8 relative RMS": rms(mx),
            "MXFP8 rounded-up scale relative RMS": rms(ceil),
            "saturated elements": int(saturated.sum()),
            "saturation's share of MXFP8's squared error": float(squared[saturated].sum() / squared.sum()),
            "largest value": float(v[top]), "largest value's share of the energy": float(v[top] ** 2 / np.sum(v**2)),
            "largest value's error, per-tensor": float(abs(tensor[top] - v[top])),
            "largest value's error, MXFP8": float(abs(mx[top] - v[top])),
            "largest value's share of MXFP8's squared error": float(squared[top] / squared.sum()),
            "per-tensor FP8 mean relative error per element": float(np.mean(_relative_errors(tensor, v))),
            "MXFP8 mean relative error per element": float(np.mean(_relative_errors(mx, v)))}
