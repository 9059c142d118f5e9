"""gpucourse.lessons.precision.formats: exact encode/decode against NumPy's float16 and torch's bf16/fp16/fp8
conversions, the range/precision table against torch.finfo, the bit-layout picture and the explorer widget."""

import math

import numpy as np
import pytest
import torch

from gpucourse.errors import InvalidConfig
from gpucourse.lessons.precision import formats
from gpucourse.lessons.precision.formats import FORMATS, decode, encode, quantize
from gpucourse.viz import charts

TORCH_DTYPES = {
    "fp16": torch.float16, "bf16": torch.bfloat16,
    "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2,
}


def _every_pattern(fmt):
    """Every finite value of a ≤16-bit format, decoded from its bits."""
    f = FORMATS[fmt]
    values = [decode(bits, fmt) for bits in range(2**f.bits)]
    return np.array([v for v in values if math.isfinite(v)])


def _probes(fmt, rng):
    """Values that stress rounding: every representable value, the midpoints between neighbours
    (exact ties), points just either side of them, overflow and underflow boundaries, random values."""
    grid = np.unique(_every_pattern(fmt)) if FORMATS[fmt].bits <= 16 else np.array([1.0])
    mids = (grid[:-1] + grid[1:]) / 2
    f = FORMATS[fmt]
    edges = np.array([f.max, f.max * (1 + f.epsilon / 4), f.max * (1 + f.epsilon / 2), f.max * 1.5,
                      f.min_subnormal / 2, f.min_subnormal * 0.75, f.min_subnormal * 0.25, 1e30, 1e-30])
    random = np.exp(rng.uniform(math.log(f.min_subnormal / 4), math.log(f.max * 2), 20000))
    core = np.concatenate([grid, mids, mids * (1 + 2**-20), mids * (1 - 2**-20), edges, random])
    return np.concatenate([core, -core, [0.0, -0.0, np.inf, -np.inf, np.nan]])


def _same(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    both = ~(np.isnan(a) & np.isnan(b))  # NaN's sign bit carries no meaning
    return np.array_equal(a, b, equal_nan=True) and np.array_equal(np.signbit(a)[both], np.signbit(b)[both])


# --- the range/precision table, as printed in the sources --------------------------------------

# Rounded as such tables print them. The formats: IEEE 754-2019 (fp32, fp16), NVIDIA's A100 whitepaper
# (tf32), bfloat16 as fp32's top 16 bits, the OCP 8-bit Floating Point Specification (E4M3, E5M2).
# format: (exp bits, mantissa bits, max, smallest normal, eps)
REFERENCE_TABLE = {
    "fp32": (8, 23, 3.4e38, 1.18e-38, 1.19e-7),
    "tf32": (8, 10, 3.4e38, 1.18e-38, 9.77e-4),
    "fp16": (5, 10, 65504, 6.10e-5, 9.77e-4),
    "bf16": (8, 7, 3.39e38, 1.18e-38, 7.81e-3),
    "fp8_e4m3": (4, 3, 448, 2**-6, 0.125),
    "fp8_e5m2": (5, 2, 57344, 2**-14, 0.25),
}


def _agrees(printed, exact):
    """``printed`` is ``exact`` rounded to the digits it shows (so 3.4e38 matches 3.40282e38)."""
    mantissa = repr(float(printed)).split("e")[0].replace("-", "").replace(".", "")
    digits = len(mantissa.lstrip("0").rstrip("0")) or 1
    return float(f"{exact:.{max(digits - 1, 0)}e}") == float(printed)


@pytest.mark.parametrize("name", list(REFERENCE_TABLE))
def test_number_formats_table(name):
    exp_bits, man_bits, top, normal, eps = REFERENCE_TABLE[name]
    f = FORMATS[name]
    assert (f.exponent_bits, f.mantissa_bits) == (exp_bits, man_bits)
    assert _agrees(top, f.max), (name, "max", top, f.max)
    assert _agrees(normal, f.min_normal), (name, "smallest normal", normal, f.min_normal)
    assert _agrees(eps, f.epsilon), (name, "machine epsilon", eps, f.epsilon)


def test_fp16_subnormal_and_torch_finfo():
    assert _agrees(5.96e-8, FORMATS["fp16"].min_subnormal)
    for name, dtype in (("fp32", torch.float32), *TORCH_DTYPES.items()):
        info = torch.finfo(dtype)
        f = FORMATS[name]
        assert (info.max, info.smallest_normal, info.eps) == (f.max, f.min_normal, f.epsilon), name
    info16 = np.finfo(np.float16)
    assert (float(info16.max), float(info16.smallest_subnormal)) == (65504.0, 2.0**-24)


def test_format_table_is_computed_and_complete():
    table = formats.format_table()
    assert list(table.format) == list(FORMATS)
    assert table.set_index("format").loc["tf32", "storage bits"] == 32
    assert table.set_index("format").loc["fp8_e4m3", "infinity"].startswith("no")


# --- encode/decode against NumPy and torch ---------------------------------------------------------


def test_fp16_matches_numpy_from_float64():
    rng = np.random.default_rng(0)
    x = _probes("fp16", rng)
    with np.errstate(over="ignore"):
        expected = x.astype(np.float16).astype(np.float64)
    assert _same(quantize(x, "fp16"), expected)


@pytest.mark.parametrize("name", list(TORCH_DTYPES))
def test_matches_torch_conversion_from_float32(name):
    rng = np.random.default_rng(1)
    with np.errstate(over="ignore"):  # bf16's probes beyond fp32's range become inf, as intended
        x = _probes(name, rng).astype(np.float32)  # torch converts from float32: give both the same input
    expected = torch.from_numpy(x).to(TORCH_DTYPES[name]).to(torch.float64).numpy()
    assert _same(quantize(x.astype(np.float64), name), expected), name


def test_fp32_matches_numpy_from_float64():
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.standard_normal(5000) * 10.0 ** rng.integers(-40, 39, 5000),
                        [3.4028235677973366e38, 3.4028235e38 * (1 + 2**-25), 1e-45, 7e-46, 7.1e-46]])
    with np.errstate(over="ignore"):
        assert _same(quantize(x, "fp32"), x.astype(np.float32).astype(np.float64))


def test_bf16_and_tf32_bit_tricks_agree_with_the_exact_codec_and_torch():
    rng = np.random.default_rng(3)
    with np.errstate(over="ignore"):  # some products overflow to inf: probes of the overflow rule
        x32 = np.concatenate([
            rng.standard_normal(20000).astype(np.float32) * np.float32(2.0) ** rng.integers(-130, 128, 20000),
            np.float32([3.3895314e38, 3.3961776e38, 3.4028235e38, np.inf, -np.inf, 0.0, -0.0, 1.0 + 2**-8]),
        ]).astype(np.float32)
    with np.errstate(over="ignore"):
        bf16 = formats.from_bf16_bits(formats.to_bf16_bits(x32))
        assert _same(bf16, quantize(x32.astype(np.float64), "bf16"))
        assert _same(bf16, torch.from_numpy(x32).to(torch.bfloat16).to(torch.float32).numpy())
        tf32 = formats.to_tf32(x32)
        assert _same(tf32, quantize(x32.astype(np.float64), "tf32"))
    finite = np.isfinite(tf32)
    assert not (tf32[finite].view(np.uint32) & 0x1FFF).any(), "tf32 keeps the low 13 bits zero"
    assert np.isnan(formats.to_tf32(np.float32([np.nan]))[0]), "a NaN stays NaN (payload in low bits or not)"
    assert np.isnan(formats.to_tf32(np.array([0x7F800001], dtype=np.uint32).view(np.float32))[0])


@pytest.mark.parametrize("name", ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2"])
def test_bit_patterns_round_trip(name):
    """decode agrees with torch's reading of the same bits; encode gives the bits back.
    Every pattern of the fp8 formats; for the 16-bit ones the extremes of the exponent and a sample."""
    f = FORMATS[name]
    if f.bits == 8:
        words = np.arange(256)
    else:
        exponent_ends = [e << f.mantissa_bits for e in (0, 1, 2**f.exponent_bits - 2, 2**f.exponent_bits - 1)]
        words = np.unique(np.concatenate([
            [w + m for w in exponent_ends for m in range(2**f.mantissa_bits)],
            np.random.default_rng(4).integers(0, 2**f.bits, 3000)]))
        words = np.concatenate([words, words | (1 << (f.bits - 1))])
    container = torch.from_numpy(words.astype(np.uint16 if f.bits == 16 else np.uint8).view(
        np.int16 if f.bits == 16 else np.uint8))
    torch_values = container.view(TORCH_DTYPES[name]).to(torch.float64).numpy()
    for word, value in zip(words, torch_values, strict=True):
        mine = decode(int(word), name)
        assert _same(mine, value), (name, hex(int(word)), mine, value)
        if math.isfinite(value):
            enc = encode(value, name)
            assert enc.bits == int(word) and enc.stored == value and enc.event == "exact"


@pytest.mark.parametrize("value, name, hex_word, bitstring", [
    (1.0, "fp16", "0x3C00", "0 01111 0000000000"),
    (0.1, "fp32", "0x3DCCCCCD", "0 01111011 10011001100110011001101"),
    (0.1, "tf32", "0x3DCCC000", "0 01111011 1001100110"),
    (-2.0, "bf16", "0xC000", "1 10000000 0000000"),
    (65504, "fp16", "0x7BFF", "0 11110 1111111111"),
    (2**-24, "fp16", "0x0001", "0 00000 0000000001"),
    (448, "fp8_e4m3", "0x7E", "0 1111 110"),
    (57344, "fp8_e5m2", "0x7B", "0 11110 11"),
    (math.inf, "fp8_e5m2", "0x7C", "0 11111 00"),
    (math.nan, "fp8_e4m3", "0x7F", "0 1111 111"),
    (-0.0, "fp8_e5m2", "0x80", "1 00000 00"),
])
def test_known_encodings(value, name, hex_word, bitstring):
    enc = encode(value, name)
    assert (enc.hex, enc.bitstring) == (hex_word, bitstring)
    assert _same(decode(enc.bits, name), enc.stored)


def _numpy_words(values, dtype, uint):
    return [int(w) for w in np.array(values, dtype=np.float64).astype(dtype).view(uint)]


SPECIALS = [math.nan, math.inf, -math.inf, -0.0]


def _special_words(name):
    """The bit patterns NumPy (or torch) stores for NaN, +inf, -inf and -0, found without gpucourse:
    bf16 and tf32 are the top 16 and 19 bits of an fp32 word, E5M2 the top byte of an fp16 word
    (same exponent field); E4M3 has no NumPy type, so torch's float8_e4m3fn (no inf: ±inf → ±448)."""
    with np.errstate(over="ignore", invalid="ignore"):
        w32 = _numpy_words(SPECIALS, np.float32, np.uint32)
        w16 = _numpy_words(SPECIALS, np.float16, np.uint16)
    if name == "fp8_e4m3":
        return [int(w) for w in torch.tensor(SPECIALS).to(torch.float8_e4m3fn).view(torch.uint8).tolist()]
    return {"fp32": w32, "tf32": [w >> 13 for w in w32], "bf16": [w >> 16 for w in w32],
            "fp16": w16, "fp8_e5m2": [w >> 8 for w in w16]}[name]


@pytest.mark.parametrize("name", list(FORMATS))
def test_nan_inf_and_negative_zero_have_the_reference_bit_patterns(name):
    # IEEE 754-2008 §6.2.1: a quiet NaN has the first bit of the trailing significand set (fp16 0x7E00,
    # never a signalling 0x7C01); the OCP FP8 specification's E4M3 has one NaN, S.1111.111.
    expected = _special_words(name)
    got = [encode(v, name).bits for v in SPECIALS]
    assert got == expected, (name, [hex(w) for w in got], [hex(w) for w in expected])
    assert math.isnan(decode(got[0], name)) and decode(got[3], name) == 0.0
    assert math.copysign(1.0, decode(got[3], name)) == -1.0
    if FORMATS[name].has_inf:
        assert (decode(got[1], name), decode(got[2], name)) == (math.inf, -math.inf)


def test_the_special_words_by_hand():
    # Worked by hand from the field layouts, so the test above cannot share a mistake with NumPy.
    assert _special_words("fp16") == [0x7E00, 0x7C00, 0xFC00, 0x8000]
    assert _special_words("bf16") == [0x7FC0, 0x7F80, 0xFF80, 0x8000]
    assert _special_words("fp8_e5m2") == [0x7E, 0x7C, 0xFC, 0x80]
    assert _special_words("fp8_e4m3") == [0x7F, 0x7E, 0xFE, 0x80]


def test_events_and_overflow_rules():
    assert encode(300 * 300, "fp16").event == "overflow to inf"
    assert encode(65519.99, "fp16").stored == 65504 and encode(65520, "fp16").stored == math.inf  # the tie
    assert encode(1e-8, "fp16").event == "underflow to zero"
    assert encode(3e-8, "fp16").stored == 2**-24
    assert encode(2**-25, "fp16").stored == 0  # a tie: to the even neighbour, 0
    assert encode(1e-5, "fp16").event.startswith("rounded (subnormal")
    assert encode(1e6, "fp8_e4m3").stored == 448 and encode(1e6, "fp8_e4m3").event == "saturated to max"
    assert encode(-math.inf, "fp8_e4m3").stored == -448  # as torch's float8_e4m3fn and PTX satfinite do
    assert math.isnan(encode(1e6, "fp8_e4m3", saturate=False).stored)
    assert encode(1e6, "fp8_e5m2").stored == math.inf
    assert encode(1e6, "fp8_e5m2", saturate=True).stored == 57344
    assert encode(61440, "fp8_e5m2").stored == math.inf  # halfway to 2^16 rounds to even: inf
    assert encode(464, "fp8_e4m3").stored == 448  # halfway to 480 (which would be NaN): to even, 448
    assert encode(1e-30, "bf16").stored != 0 and encode(1e-30, "bf16").kind == "normal"
    assert encode(0.1, "fp32").event == "rounded" and encode(0.5, "fp8_e5m2").event == "exact"
    assert encode(1 / 3, "bf16").rel_error <= FORMATS["bf16"].unit_roundoff


def test_rounding_is_single_from_float64():
    # 1 + 2^-8 + 2^-30: rounding to fp32 first would make it a tie and round down to 1 in bf16;
    # one correct rounding of the exact value goes up.
    assert quantize(1 + 2**-8 + 2**-30, "bf16") == 1 + 2**-7
    assert quantize(1 + 2**-8, "bf16") == 1.0  # an exact tie goes to even


@pytest.mark.parametrize("text, expected", [("0.1", 0.1), (" -3e-8 ", -3e-8), ("2**-24", 2**-24),
                                            ("inf", math.inf), ("65_504", 65504.0), ("−1", -1.0)])
def test_parse_value(text, expected):
    assert formats.parse_value(text) == expected


@pytest.mark.parametrize("call", [
    lambda: formats.get_format("fp12"),
    lambda: encode("abc", "fp16"),
    lambda: encode(True, "fp16"),
    lambda: encode(None, "fp16"),
    lambda: quantize(["a", "b"], "fp16"),
    lambda: quantize([1.0], "int8"),
    lambda: decode(70000, "fp16"),
    lambda: decode(-1, "fp8_e4m3"),
    lambda: encode(1.0, "fp16", saturate="yes"),
    lambda: formats.round_float32_bits([1.0], 0),
])
def test_bad_input_is_a_clear_error(call):
    with pytest.raises(InvalidConfig):
        call()


def test_aliases():
    assert formats.get_format("bfloat16").name == "bf16"
    assert formats.get_format("float8_e4m3fn").name == "fp8_e4m3"
    assert formats.get_format("E5M2").name == "fp8_e5m2"


# --- the picture and the widget --------------------------------------------------------------------


def test_layout_figure_draws_every_bit_with_labels():
    fig = formats.layout_figure()
    rects = [s for s in fig.layout.shapes if s.type == "rect"]
    assert len(rects) == 32 + 32 + 16 + 16 + 8 + 8 + 4  # tf32 drawn in its 32-bit word; + the 4-box key
    texts = [a.text for a in fig.layout.annotations]
    for label in ("exponent (8)", "mantissa (23)", "exponent (5)", "mantissa (10)", "mantissa (7)", "E4", "M3",
                  "E5", "M2", "dropped (13, zero)", "S"):
        assert label in texts
    assert set(charts.PALETTE) >= {formats.FIELD_COLOURS[k] for k in ("sign", "exponent", "mantissa")}
    assert "IEEE 754" in charts.caption_of(fig)


def test_layout_figure_with_a_value_shows_bits_and_stored_values():
    fig = formats.layout_figure(300 * 300)
    texts = [a.text for a in fig.layout.annotations]
    assert any("overflow to inf" in t for t in texts)
    assert any("saturated to max" in t for t in texts)
    table = charts.data_table(fig)
    assert list(table.x) == list(FORMATS)
    assert table.set_index("x").loc["fp16", "y"] == math.inf
    digits = [t for t in texts if t in ("0", "1")]
    assert len(digits) == 32 + 19 + 16 + 16 + 8 + 8


def test_explorer_widget_updates_and_reports_bad_input():
    widget = formats.explorer("0.1", threaded=False)
    assert widget.runs == 1 and widget.errors == 0
    widget.controls["value"].value = "65520"
    assert widget.runs == 2
    assert any("overflow to inf" in (a.text or "") for a in widget.figure.layout.annotations)
    widget.controls["value"].value = "not a number"
    assert widget.errors == 1 and "value must be a number" in widget.status.value
