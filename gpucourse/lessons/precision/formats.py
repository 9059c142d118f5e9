"""Number formats, exactly: what a value becomes in fp32, tf32, bf16, fp16, fp8 E4M3 and fp8 E5M2.

    encode(0.1, "bf16")          # Encoding: sign/exponent/mantissa fields, bits, the value stored, error
    quantize(array, "fp16")      # the stored values of a whole array, as float64 (exact)
    decode(0x3c00, "fp16")       # 1.0
    format_table()               # range and precision side by side
    layout_figure(value=0.1)     # a picture of each format's bits (plotly shapes)

Every conversion rounds once, to nearest with ties to even (IEEE 754-2019 §4.3.1), from the
exact value of the Python float (a binary64). Overflow follows each format's rule:

* fp32, tf32, bf16, fp16 and fp8 E5M2 have infinities: a value that rounds beyond the largest
  finite number becomes ±inf (IEEE 754 §7.4). torch and NumPy do this.
* fp8 E4M3 (the "fn" variant of the OCP FP8 specification: finite, one NaN pattern S.1111.111)
  has no infinity. torch's ``float8_e4m3fn`` conversion (torch 2.13.0, the pinned version) and
  PTX's ``cvt.rn.satfinite`` saturate: anything beyond ±448, ±inf included, becomes ±448.
  ``saturate=True`` gives the satfinite rule to the other formats too (E5M2 → ±57344);
  ``saturate=False`` makes E4M3 overflow to NaN.

tf32 is fp32 with the low 13 mantissa bits rounded off (it travels in a 32-bit word). The
PTX instruction ``cvt.rna.tf32.f32`` rounds ties away from zero (sm_80) and ``cvt.rn`` to even
(sm_90+); this module rounds ties to even throughout, so one tie in 2^13 may differ from a GPU.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from gpucourse import validate
from gpucourse.errors import InvalidConfig
from gpucourse.viz.charts import PALETTE, set_source, source_caption


@dataclass(frozen=True)
class Format:
    """A binary floating-point format: 1 sign bit, ``exponent_bits``, ``mantissa_bits`` (stored)."""

    name: str
    label: str
    exponent_bits: int
    mantissa_bits: int
    has_inf: bool = True  # False: the OCP "fn" variant (no inf, NaN = all ones)
    saturate: bool = False  # the default overflow rule of torch's conversion to this format
    container_bits: int | None = None  # tf32 travels in 32 bits

    @property
    def bits(self) -> int:
        return 1 + self.exponent_bits + self.mantissa_bits

    @property
    def storage_bits(self) -> int:
        return self.container_bits or self.bits

    @property
    def bias(self) -> int:
        return 2 ** (self.exponent_bits - 1) - 1

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal number."""
        return 1 - self.bias

    @property
    def emax(self) -> int:
        """Exponent of the largest finite number."""
        top = 2**self.exponent_bits - 1
        return (top - 1 if self.has_inf else top) - self.bias

    @property
    def max(self) -> float:
        # In an "fn" format the top exponent is finite except for the all-ones mantissa (NaN).
        mantissa_units = 2 ** (self.mantissa_bits + 1) - (1 if self.has_inf else 2)
        return math.ldexp(mantissa_units, self.emax - self.mantissa_bits)

    @property
    def min_normal(self) -> float:
        return math.ldexp(1.0, self.emin)

    @property
    def min_subnormal(self) -> float:
        return math.ldexp(1.0, self.emin - self.mantissa_bits)

    @property
    def epsilon(self) -> float:
        """Machine epsilon: the gap between 1 and the next larger number, 2^-mantissa_bits."""
        return math.ldexp(1.0, -self.mantissa_bits)

    @property
    def unit_roundoff(self) -> float:
        """The largest relative error of one rounding to nearest: epsilon / 2."""
        return self.epsilon / 2

    @property
    def decimal_digits(self) -> float:
        return (self.mantissa_bits + 1) * math.log10(2)


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("fp32", "FP32 (IEEE binary32)", 8, 23),
        Format("tf32", "TF32 (tensor-core fp32)", 8, 10, container_bits=32),
        Format("bf16", "BF16 (bfloat16)", 8, 7),
        Format("fp16", "FP16 (IEEE binary16)", 5, 10),
        Format("fp8_e4m3", "FP8 E4M3 (e4m3fn)", 4, 3, has_inf=False, saturate=True),
        Format("fp8_e5m2", "FP8 E5M2", 5, 2),
    )
}
ALIASES = {
    "float32": "fp32", "float": "fp32", "tensorfloat32": "tf32", "bfloat16": "bf16", "float16": "fp16",
    "half": "fp16", "e4m3": "fp8_e4m3", "float8_e4m3fn": "fp8_e4m3", "e5m2": "fp8_e5m2",
    "float8_e5m2": "fp8_e5m2",
}
FIELD_COLOURS = {"sign": PALETTE[3], "exponent": PALETTE[0], "mantissa": PALETTE[1], "unused": "#DDDDDD"}


def get_format(name) -> Format:
    """The Format called ``name`` (a Format, 'fp16', 'bfloat16', 'e4m3', …) or InvalidConfig."""
    if isinstance(name, Format):
        return name
    key = ALIASES.get(name.lower(), name.lower()) if isinstance(name, str) else name
    return FORMATS[validate.choice("format", key, list(FORMATS))]


def _check_saturate(fmt: Format, saturate) -> bool:
    if saturate is None:
        return fmt.saturate
    if not isinstance(saturate, bool):
        raise InvalidConfig(f"saturate must be True, False or None (the format's default), got {saturate!r}")
    return saturate


def _as_float64_array(values) -> np.ndarray:
    array = np.asarray(values)
    if array.dtype.kind not in "biuf" or array.dtype.kind == "b":
        raise InvalidConfig(f"values must be real numbers (an int or float array), got dtype {array.dtype}")
    return array.astype(np.float64)


def quantize(values, fmt, *, saturate: bool | None = None) -> np.ndarray:
    """The values each format would store (float64, exact): one rounding, ties to even."""
    f = get_format(fmt)
    saturate = _check_saturate(f, saturate)
    x = _as_float64_array(values)
    magnitude = np.abs(x)
    with np.errstate(over="ignore", invalid="ignore"):
        _, e = np.frexp(magnitude)  # magnitude = m · 2^e with m in [0.5, 1): floor(log2) = e - 1
        exponent = np.maximum(e - 1, f.emin)  # below emin the spacing stays that of the subnormals
        quantum = np.ldexp(1.0, exponent - f.mantissa_bits)
        stored = np.rint(magnitude / quantum) * quantum  # exact scaling by powers of two; rint: ties to even
        overflow = np.isinf(magnitude) | (stored > f.max)
        if saturate:
            stored = np.where(overflow, f.max, stored)
        else:
            stored = np.where(overflow, np.inf if f.has_inf else np.nan, stored)
        stored = np.where(np.isnan(x), np.nan, stored)
    return np.copysign(stored, x)


def parse_value(text) -> float:
    """A number from the explorer's text box: '0.1', '-3e-8', '65504', 'inf', 'nan', '2**-24'."""
    if isinstance(text, numbers.Real) and not isinstance(text, bool):
        return float(text)
    if not isinstance(text, str):
        return validate.number("value", text)
    cleaned = text.strip().replace("−", "-").replace("_", "")
    if "**" in cleaned:  # allow powers of two/ten such as 2**-24, the way the lesson writes them
        base, _, power = cleaned.partition("**")
        try:
            return float(base) ** float(power)
        except (ValueError, OverflowError, ZeroDivisionError):
            pass
    else:
        try:
            return float(cleaned)
        except ValueError:
            pass
    raise InvalidConfig(f"value must be a number such as 0.1, -3e-8, 65504, 2**-24, inf or nan; got {text!r}")


@dataclass(frozen=True)
class Encoding:
    """One value in one format: the fields, the bits and the value actually stored."""

    format: str
    value: float
    stored: float
    bits: int
    sign: int
    exponent_field: int
    mantissa_field: int
    kind: str  # "zero", "subnormal", "normal", "inf", "nan"
    event: str  # "exact", "rounded", "underflow to zero", "overflow to inf", "saturated to max", …

    @property
    def fmt(self) -> Format:
        return FORMATS[self.format]

    @property
    def exponent_bitstring(self) -> str:
        return format(self.exponent_field, f"0{self.fmt.exponent_bits}b")

    @property
    def mantissa_bitstring(self) -> str:
        return format(self.mantissa_field, f"0{self.fmt.mantissa_bits}b")

    @property
    def bitstring(self) -> str:
        return f"{self.sign} {self.exponent_bitstring} {self.mantissa_bitstring}"

    @property
    def hex(self) -> str:
        word = self.bits << 13 if self.format == "tf32" else self.bits  # tf32 as its 32-bit word
        return f"0x{word:0{self.fmt.storage_bits // 4}X}"

    @property
    def unbiased_exponent(self) -> int | None:
        if self.kind == "normal":
            return self.exponent_field - self.fmt.bias
        if self.kind == "subnormal":
            return self.fmt.emin
        return None

    @property
    def abs_error(self) -> float:
        if not (math.isfinite(self.value) and math.isfinite(self.stored)):
            same = self.value == self.stored or (math.isnan(self.value) and self.kind == "nan")
            return 0.0 if same else math.inf
        return abs(self.stored - self.value)

    @property
    def rel_error(self) -> float:
        if self.value == 0 or not math.isfinite(self.value):
            return 0.0 if self.abs_error == 0 else math.inf
        return self.abs_error / abs(self.value)

    def as_row(self) -> dict:
        return {
            "format": self.format, "bits": self.bitstring, "hex": self.hex, "stored": self.stored,
            "kind": self.kind, "what happened": self.event, "relative error": self.rel_error,
        }


def _fields(stored: float, f: Format) -> tuple[int, int, int, str]:
    """(sign, exponent field, mantissa field, kind) of a value already representable in ``f``."""
    all_ones = 2**f.exponent_bits - 1
    if math.isnan(stored):
        if f.has_inf:  # IEEE quiet NaN: exponent all ones, top mantissa bit set
            return 0, all_ones, 1 << (f.mantissa_bits - 1), "nan"
        return 0, all_ones, 2**f.mantissa_bits - 1, "nan"
    sign = 1 if math.copysign(1.0, stored) < 0 else 0
    magnitude = abs(stored)
    if math.isinf(magnitude):
        return sign, all_ones, 0, "inf"
    if magnitude == 0:
        return sign, 0, 0, "zero"
    if magnitude < f.min_normal:
        return sign, 0, int(magnitude / f.min_subnormal), "subnormal"
    _, e = math.frexp(magnitude)
    exponent = e - 1
    mantissa = int((math.ldexp(magnitude, -exponent) - 1.0) * 2**f.mantissa_bits)
    return sign, exponent + f.bias, mantissa, "normal"


def _event(value: float, stored: float, f: Format, saturate: bool) -> str:
    if math.isnan(value):
        return "not a number"
    if math.isinf(value):
        return "saturated to max" if math.isfinite(stored) else "infinite"
    if math.isnan(stored):
        return "overflow to NaN (no infinity in this format)"
    if math.isinf(stored):
        return "overflow to inf"
    if saturate and abs(stored) == f.max and abs(value) > f.max:
        return "saturated to max"
    if stored == value:
        return "exact"
    if stored == 0:
        return "underflow to zero"
    if abs(stored) < f.min_normal:
        return "rounded (subnormal: fewer significant bits)"
    return "rounded"


def encode(value, fmt, *, saturate: bool | None = None) -> Encoding:
    """``value`` (a number, or text the explorer accepts) stored in ``fmt``: fields, bits, error."""
    f = get_format(fmt)
    saturate = _check_saturate(f, saturate)
    value = parse_value(value)
    stored = float(quantize(value, f, saturate=saturate))
    sign, exponent_field, mantissa_field, kind = _fields(stored, f)
    bits = (sign << (f.bits - 1)) | (exponent_field << f.mantissa_bits) | mantissa_field
    return Encoding(f.name, value, stored, bits, sign, exponent_field, mantissa_field, kind,
                    _event(value, stored, f, saturate))


def decode(bits, fmt) -> float:
    """The value of a bit pattern (an int of the format's width; tf32 as its 19 significant bits)."""
    f = get_format(fmt)
    bits = validate.integer("bits", bits, minimum=0, maximum=2**f.bits - 1)
    sign = -1.0 if bits >> (f.bits - 1) else 1.0
    exponent_field = (bits >> f.mantissa_bits) & (2**f.exponent_bits - 1)
    mantissa_field = bits & (2**f.mantissa_bits - 1)
    all_ones = 2**f.exponent_bits - 1
    if exponent_field == all_ones:
        if f.has_inf:
            return sign * math.inf if mantissa_field == 0 else math.nan
        if mantissa_field == 2**f.mantissa_bits - 1:
            return math.nan
    if exponent_field == 0:
        return sign * mantissa_field * f.min_subnormal
    return sign * math.ldexp(1.0 + mantissa_field / 2**f.mantissa_bits, exponent_field - f.bias)


def explore(value, formats=None) -> pd.DataFrame:
    """One row per format: the bits and the value stored for ``value`` (the explorer's table)."""
    names = [get_format(n).name for n in (formats or FORMATS)]
    return pd.DataFrame([encode(value, n).as_row() for n in names])


# --- bf16 and tf32 by bit manipulation of float32 (what a kernel does: integer add and mask) ---


def round_float32_bits(values, keep_mantissa_bits: int) -> np.ndarray:
    """float32 → float32 with only ``keep_mantissa_bits`` mantissa bits, rounded to nearest even.

    The classic integer trick: add 0x7FFF… plus the lowest kept bit, then clear the dropped bits;
    a carry out of the mantissa bumps the exponent (and the largest values round up to inf).
    """
    keep = validate.integer("keep_mantissa_bits", keep_mantissa_bits, minimum=1, maximum=23)
    x = np.asarray(values, dtype=np.float32)
    drop = 23 - keep
    if drop == 0:
        return x.copy()
    word = x.view(np.uint32).astype(np.uint64)  # room for the carry
    lowest_kept = (word >> drop) & 1
    rounded = (word + (1 << (drop - 1)) - 1 + lowest_kept) & ~np.uint64((1 << drop) - 1)
    out = rounded.astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), np.float32(np.nan), out).astype(np.float32)


def to_bf16_bits(values) -> np.ndarray:
    """The 16-bit bfloat16 words of float32 ``values`` (round to nearest even)."""
    return (round_float32_bits(values, 7).view(np.uint32) >> 16).astype(np.uint16)


def from_bf16_bits(words) -> np.ndarray:
    return (np.asarray(words, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def to_tf32(values) -> np.ndarray:
    """float32 ``values`` as tensor cores see them in TF32 mode (10 mantissa bits, ties to even)."""
    return round_float32_bits(values, 10)


# --- range and precision, side by side ---


def format_table() -> pd.DataFrame:
    """Range and precision of every format (computed from the bit counts, not typed in)."""
    rows = []
    for f in FORMATS.values():
        rows.append({
            "format": f.name, "label": f.label, "storage bits": f.storage_bits,
            "exponent bits": f.exponent_bits, "mantissa bits": f.mantissa_bits,
            "max": f.max, "smallest normal": f.min_normal, "smallest subnormal": f.min_subnormal,
            "machine epsilon": f.epsilon, "decimal digits": round(f.decimal_digits, 2),
            "infinity": "yes" if f.has_inf else "no (saturates to max)" if f.saturate else "no",
        })
    return pd.DataFrame(rows)


def layout_figure(value=None, formats=None, *, saturate: bool | None = None) -> go.Figure:
    """Each format's bits as labelled boxes (sign / exponent / mantissa), one row per format.

    With ``value`` the boxes carry that value's bits and each row says what is stored.
    Fields are told apart by colour (Okabe–Ito), by their text label and by a border style.
    """
    names = [get_format(n).name for n in (formats or FORMATS)]
    if value is not None:
        value = parse_value(value)
    fig = go.Figure()
    shapes, notes = [], []  # built as plain dicts and set once: adding hundreds one by one is slow
    row_height, box = 1.6, 0.9
    for row, name in enumerate(names):
        f = FORMATS[name]
        y = -row * row_height
        enc = encode(value, f, saturate=saturate) if value is not None else None
        digits = enc.bitstring.replace(" ", "") if enc else None
        fields = [("sign", 1), ("exponent", f.exponent_bits), ("mantissa", f.mantissa_bits)]
        if f.container_bits:
            fields.append(("unused", f.container_bits - f.bits))
        position = 0
        for field, width in fields:
            used = field != "unused"
            for bit in range(width):
                x0 = position + bit
                shapes.append({
                    "type": "rect", "x0": x0, "x1": x0 + box, "y0": y, "y1": y + box,
                    "fillcolor": FIELD_COLOURS[field], "opacity": 0.85 if used else 0.6,
                    "line": {"color": "#000" if used else "#999", "width": 1,
                             "dash": "solid" if used else "dot"},
                })
                if digits is not None and used:
                    notes.append({"x": x0 + box / 2, "y": y + box / 2, "text": digits[position + bit],
                                  "showarrow": False, "font": {"size": 12, "color": "#000"}})
            if f.bits <= 8:  # narrow rows: short labels that do not overlap (E4 M3 is the format's name)
                label = {"sign": "S", "exponent": f"E{width}", "mantissa": f"M{width}"}[field]
            else:
                label = {"sign": "S", "exponent": f"exponent ({width})", "mantissa": f"mantissa ({width})",
                         "unused": f"dropped ({width}, zero)"}[field]
            notes.append({"x": position + width / 2 - 0.05, "y": y + box + 0.12, "text": label,
                          "showarrow": False, "yanchor": "bottom", "font": {"size": 11, "color": "#000"}})
            position += width
        notes.append({"x": -0.6, "y": y + box / 2, "text": f"<b>{f.name}</b>", "showarrow": False,
                      "xanchor": "right", "font": {"size": 13}})
        right = f"{f.storage_bits} bits" if enc is None else f"stores {enc.stored:.9g}<br>{enc.event}"
        notes.append({"x": position + 0.6, "y": y + box / 2, "text": right, "showarrow": False,
                      "xanchor": "left", "align": "left", "font": {"size": 11}})
    # A key: which colour is which field (each box row is labelled in words as well).
    key_y = -(len(names) - 1) * row_height - 1.1
    for i, (field, words) in enumerate([("sign", "sign"), ("exponent", "exponent: range"),
                                        ("mantissa", "mantissa: precision"), ("unused", "dropped bits")]):
        x0 = i * 11
        shapes.append({"type": "rect", "x0": x0, "x1": x0 + box, "y0": key_y, "y1": key_y + box,
                       "fillcolor": FIELD_COLOURS[field], "line": {"color": "#000", "width": 1}})
        notes.append({"x": x0 + 1.2, "y": key_y + box / 2, "text": words, "showarrow": False,
                      "xanchor": "left", "font": {"size": 11}})
    fig.update_layout(shapes=shapes, annotations=notes)
    # The stored values as a hidden series, so the chart's data table lists them.
    if value is not None:
        fig.add_scatter(x=names, y=[encode(value, n, saturate=saturate).stored for n in names],
                        name=f"stored value of {value!r}", visible=False, xaxis="x2")
    title = "Bit layouts" + (f" of {value!r}" if value is not None else "")
    fig.update_layout(
        title={"text": title, "x": 0.02}, template="plotly_white", height=190 + 75 * len(names),
        autosize=True,  # no fixed width: at 980 px the fp32 row ran off the right of a narrow page
        margin={"l": 90, "r": 20, "t": 60, "b": 70}, showlegend=False,
        xaxis={"visible": False, "range": [-5, 47], "type": "linear"},
        xaxis2={"visible": False, "overlaying": "x", "type": "category"},
        yaxis={"visible": False, "range": [key_y - 0.3, 1.5]},
    )
    set_source(fig, source_caption("model", "IEEE 754-2019 binary32/binary16, bfloat16, TF32 and the OCP "
                                           "FP8 formats; values computed exactly by gpucourse.formats"))
    return fig


def explorer(initial: str = "0.1", *, threaded: bool = True):
    """The formats explorer: type a value, see its bits and the value stored in every format."""
    import ipywidgets as widgets

    from gpucourse.viz.widgets import LiveChart

    text = widgets.Text(value=initial, description="value", continuous_update=False,
                        placeholder="0.1, 65504, 1e-8, 2**-24, inf")
    return LiveChart({"value": text}, compute=lambda value: layout_figure(value), threaded=threaded,
                     description="Type a number and press Enter: every format's bits and stored value.")
