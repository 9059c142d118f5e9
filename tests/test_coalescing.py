"""Lesson 03 "Memory coalescing": the sector model against hand-derived counts and against the
microscope, the kernels' results, bad input, figures and widgets.

Expected sector counts are worked out by hand in the comments (32 lanes; a sector is 32 bytes;
an allocation starts 256-byte aligned), never copied from the implementation's output.
"""

import ipywidgets as w
import numpy as np
import pandas as pd
import pytest

from gpucourse.errors import InvalidConfig
from gpucourse.lessons import coalescing
from gpucourse.measure import reference, runtime
from gpucourse.viz import charts

# (dtype, stride, offset, sectors per request)
HAND_COUNTS = [
    ("float32", 1, 0, 4),  # bytes 0…127: sectors 0–3
    ("float32", 1, 1, 5),  # bytes 4…131: sectors 0–4
    ("float32", 1, 8, 4),  # bytes 32…159: sectors 1–4 (8 floats = one whole sector late)
    ("float32", 2, 0, 8),  # bytes 0, 8, …, 248: 256 bytes span, 8 sectors
    ("float32", 4, 0, 16),  # 16-byte steps: two lanes per sector
    ("float32", 8, 0, 32),  # 32-byte steps: one lane per sector
    ("float32", 64, 0, 32),  # further apart changes nothing: still one sector per lane
    ("float32", 3, 0, 12),  # 12-byte steps over 384 bytes: 12 sectors, each touched
    ("float16", 1, 0, 2),  # 64 bytes
    ("float16", 1, 1, 3),  # bytes 2…65
    ("float16", 16, 0, 32),  # 32-byte steps
    ("float64", 1, 0, 8),  # 256 bytes
    ("float64", 1, 1, 9),  # bytes 8…263
    ("float64", 4, 0, 32),  # 32-byte steps
    ("float64", 2, 0, 16),  # 16-byte steps over 512 bytes
]


@pytest.mark.parametrize(("dtype", "stride", "offset", "expected"), HAND_COUNTS)
def test_sector_model_matches_hand_counts(dtype, stride, offset, expected):
    assert coalescing.sectors_per_request(stride, offset, dtype) == expected


def test_sector_rule_is_the_microscopes(monkeypatch):
    from gpucourse.microscope import analysis

    assert coalescing.SECTOR_BYTES == analysis.SECTOR_BYTES
    monkeypatch.setattr(analysis, "sectors", lambda addresses, size: [len(addresses), size])
    assert list(coalescing.sectors_touched(1, 0, "float16")) == [32, 2]


def test_every_full_warp_costs_the_same_as_warp_zero():
    for dtype in coalescing.DTYPES:
        for stride in (1, 3, 8, 64):
            for offset in (0, 1, 5):
                counts = {len(coalescing.sectors_touched(stride, offset, dtype, warp=k)) for k in range(6)}
                assert len(counts) == 1


def test_useful_fraction_and_the_folklore():
    # float32: 128 useful bytes per request; stride 8 fetches 32 × 32 = 1024 → 1/8.
    assert coalescing.useful_fraction(8, 0, "float32") == pytest.approx(1 / 8)
    assert coalescing.useful_fraction(1, 1, "float32") == pytest.approx(4 / 5)
    # The loss saturates: 8× for 4-byte elements (not the folklore 32×), 16× for fp16, 4× for fp64.
    for dtype, worst in (("float16", 16), ("float32", 8), ("float64", 4)):
        slowdowns = [coalescing.slowdown(s, 0, dtype) for s in range(1, 1025)]
        assert max(slowdowns) == pytest.approx(worst)
    assert coalescing.model_gbps(2, 0, "float32", 4000.0) == pytest.approx(2000.0)
    assert coalescing.ideal_sectors_per_request("float32") == 4
    table = coalescing.model_table("float32")
    assert list(table.columns) == ["dtype", "stride", "offset", "sectors_per_request", "useful_fraction",
                                   "slowdown"]
    assert table.set_index("stride").loc[8, "sectors_per_request"] == 32


def test_lane_addresses_follow_the_kernel_index():
    # Lane l of warp 1 copies element (32 + l)·stride + offset.
    elements = coalescing.lane_elements(stride=3, offset=2, warp=1)
    assert elements[0] == 98 and elements[31] == 191
    assert list(coalescing.lane_addresses(2, 0, "float64")[:3]) == [0, 16, 32]


# --- the microscope on the same kernels: it must agree with the model exactly ------------------------


@pytest.mark.parametrize("dtype", list(coalescing.DTYPES))
def test_microscope_counts_equal_the_model(dtype):
    for offset in (0, 1, 3, 17, 32):
        table = coalescing.counted_sectors_table(dtype, offset)
        assert (table.counted_src == table.model).all(), table
        assert (table.counted_dst == table.model).all(), table


def test_microscope_counts_of_the_layout_kernels():
    expected = {"array of structs": 32, "struct of arrays": 4, "row traversal": 4, "column traversal": 32}
    for layout, sectors in expected.items():
        table = coalescing.layout_counts(layout)
        assert len(table) >= 2 and (table.sectors_per_request == sectors).all(), (layout, table)
        assert coalescing.layout_model(layout) == sectors
    aos = coalescing.layout_counts("array of structs")
    assert (aos.op == "load").sum() == 3 and (aos.op == "store").sum() == 3  # one row per line and op on p
    soa = coalescing.layout_counts("struct of arrays")
    assert set(soa.array) == set(coalescing.DRIFT_FIELDS)


def test_layout_model_bounds():
    bounds = coalescing.layout_model_fractions().set_index("layout")
    # AoS: 9 requests × 32 sectors × 32 B for 32 particles = 288 B fetched per 36 useful B → 1/8.
    assert bounds.loc["array of structs", "no_reuse"] == pytest.approx(36 / 288)
    # With perfect reuse each 32-byte particle is read once and written once: 36 / 64.
    assert bounds.loc["array of structs", "full_reuse"] == pytest.approx(36 / 64)
    assert bounds.loc["column traversal", "no_reuse"] == pytest.approx(1 / 8)
    assert bounds.loc["struct of arrays", "no_reuse"] == 1.0


# --- the kernels give the right results ---------------------------------------------------------------


@pytest.mark.parametrize(("stride", "offset", "dtype"),
                         [(1, 0, "float32"), (3, 5, "float16"), (8, 1, "float64")])
def test_strided_copy_copies_exactly_the_chosen_elements(stride, offset, dtype):
    src, dst = coalescing.run_copy(100, stride, offset, dtype, threads_per_block=64)
    picked = np.arange(100) * stride + offset
    assert np.array_equal(dst[picked], src[picked])
    untouched = np.setdiff1d(np.arange(dst.size), picked)
    assert np.isnan(dst[untouched]).all()
    assert src.dtype == np.dtype(dtype)


def test_both_layouts_give_the_same_positions():
    aos = coalescing.run_drift("array of structs", 100)
    soa = coalescing.run_drift("struct of arrays", 100)
    assert np.array_equal(aos, soa)
    np.testing.assert_allclose(aos, coalescing.drift_reference(coalescing.make_particles(100)), rtol=1e-6)


def test_to_soa_gives_contiguous_copies():
    particles = coalescing.make_particles(10)
    soa = coalescing.to_soa(particles)
    assert set(soa) == set(coalescing.DRIFT_FIELDS)
    assert all(v.flags.c_contiguous and not np.shares_memory(v, particles) for v in soa.values())
    assert np.array_equal(soa["vz"], particles[:, 5])


def test_both_traversals_copy_the_matrix():
    for traversal in ("row traversal", "column traversal"):
        out = coalescing.run_matrix_copy(traversal, 20, 45)
        assert np.array_equal(out, coalescing.pattern(20 * 45).reshape(20, 45))


# --- bad input: one line, before any launch --------------------------------------------------------


class NoLaunch:
    """Stands in for a kernel: indexing it (a launch) fails the test."""

    def __getitem__(self, config):
        raise AssertionError("a kernel was launched despite bad input")


@pytest.fixture
def no_launch(monkeypatch):
    for name in ("strided_copy", "drift_aos", "drift_soa", "copy_rows", "copy_columns"):
        for part in (coalescing.model, coalescing.experiments):  # where the kernels are looked up
            monkeypatch.setattr(part, name, NoLaunch())


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"stride": 0}, "stride"), ({"stride": -2}, "stride"), ({"stride": 1.5}, "stride"),
    ({"stride": True}, "stride"),
    ({"offset": -1}, "offset"), ({"offset": "1"}, "offset"),
    ({"dtype": "int32"}, "dtype"), ({"dtype": np.int8}, "dtype"), ({"dtype": None}, "dtype"),
    ({"dtype": "bfloat16"}, "dtype"),
])
def test_bad_copy_input_is_refused_before_any_launch(no_launch, kwargs, words):
    args = {"n_elements": 64, "stride": 1, "offset": 0, "dtype": "float32", **kwargs}
    with pytest.raises(InvalidConfig, match=words) as info:
        coalescing.run_copy(**args)
    assert "\n" not in str(info.value)
    for fn in (coalescing.sectors_per_request, coalescing.warp_figure):
        with pytest.raises(InvalidConfig):
            fn(args["stride"], args["offset"], args["dtype"])
    with pytest.raises(InvalidConfig):
        coalescing.measure_copy(args["stride"], args["offset"], args["dtype"])


def test_numpy_dtypes_are_accepted():
    assert coalescing.dtype_name(np.float16) == "float16"
    assert coalescing.dtype_name(np.dtype("float64")) == "float64"


def test_an_array_that_does_not_fit_is_refused_before_any_launch(no_launch, monkeypatch):
    monkeypatch.setattr(runtime, "free_memory_bytes", lambda: 2**30)
    # 2^24 elements at stride 64, float32: two arrays of (2^24 − 1)·64 + 1 floats ≈ 8 GiB > 1 GiB free.
    with pytest.raises(InvalidConfig, match="GiB"):
        coalescing.run_copy(2**24, stride=64)
    with pytest.raises(InvalidConfig, match="GiB"):
        coalescing.measure_copy(64, 0, "float32", n_elements=2**24)
    with pytest.raises(InvalidConfig, match="GiB"):
        coalescing.run_drift("array of structs", 2**26)
    with pytest.raises(InvalidConfig, match="GiB"):
        coalescing.run_matrix_copy("row traversal", 2**15, 2**15)


def test_sweep_size_shrinks_to_fit_and_refuses_when_nothing_fits():
    n = coalescing.sweep_elements(64, 0, "float32", free_bytes=4 * 2**30)
    assert n % coalescing.THREADS_PER_BLOCK == 0
    assert coalescing.copy_bytes_allocated(n, 64, 0, "float32") <= 4 * 2**30 * coalescing.MEMORY_HEADROOM
    assert coalescing.sweep_elements(1, 0, "float32", free_bytes=None) == coalescing.SWEEP_USEFUL_BYTES // 4
    with pytest.raises(InvalidConfig, match="not enough free device memory"):
        coalescing.sweep_elements(64, 0, "float64", free_bytes=1000)


def test_layout_and_simulator_limits(no_launch, monkeypatch):
    with pytest.raises(InvalidConfig, match="layout"):
        coalescing.layout_figure("linked list")
    with pytest.raises(InvalidConfig, match="array of structs"):
        coalescing.run_drift("row traversal")
    monkeypatch.setattr(runtime, "is_gpu", lambda: False)
    with pytest.raises(InvalidConfig, match="simulator mode"):
        coalescing.run_copy(coalescing.SIM_MAX_ELEMENTS + 1)


def test_no_timing_in_simulator_mode(monkeypatch):
    monkeypatch.setattr(runtime, "is_gpu", lambda: False)
    m = coalescing.measure_copy(8, 0, "float32")
    assert not m.measured and m.median_ms is None and "not measured" in m.reason


def test_sweeps_are_registered():
    for name, column in (("coalescing.stride", "stride"), ("coalescing.offset", "offset"),
                         ("coalescing.layout", "layout")):
        sweep = reference.SWEEPS[name]
        assert sweep.lesson == "03_coalescing" and column in sweep.columns and "gbps" in sweep.columns


# --- figures ------------------------------------------------------------------------------------------


@pytest.fixture
def simulator_without_recordings(monkeypatch):
    monkeypatch.setattr(runtime, "is_gpu", lambda: False)
    monkeypatch.setattr(reference, "load", lambda name, gpu=None: None)


def fake_recording(name, frame):
    prov = {"device": {"device": "NVIDIA H200"}, "sweeps": {name: {"date": "2026-10-01T00:00:00"}}}
    path = reference.REFERENCE_ROOT / "nvidia-h200" / f"{name}.csv"
    return reference.Recording(name, "nvidia-h200", frame, prov, path)


def test_warp_picture_titles_and_counts():
    fig = coalescing.warp_figure(8, 1, "float32")
    title = fig.layout.title.text
    assert "32 sectors" in title and "1024 bytes fetched for 128 useful" in title
    assert charts.caption_of(fig).startswith("Model")
    fetched = next(t for t in fig.data if t.name.startswith("sector fetched"))
    assert len(fetched.x) == 32
    lanes = next(t for t in fig.data if t.name.startswith("lanes"))
    assert list(lanes.text) == [str(i) for i in range(32)]
    fig = coalescing.warp_figure(1, 0, "float32")
    assert "4 sectors" in fig.layout.title.text and "100.0 %" in fig.layout.title.text
    assert not any(t.name == "sector not fetched" for t in fig.data)
    assert len(charts.data_table(fig)) > 0


def test_stride_figure_without_data_shows_the_model_and_says_so(simulator_without_recordings):
    fig = coalescing.stride_figure("float32", stride=8)
    assert charts.caption_of(fig).startswith("No data")
    assert fig.layout.yaxis.title.text == "effective bandwidth (fraction of the copy ceiling)"
    assert fig.layout.xaxis.title.text.startswith("stride (elements, log scale)")
    assert "the same bytes" in fig.layout.xaxis.title.text  # no data: no sizes to name
    model = next(t for t in fig.data if t.name.startswith("sector model"))
    assert list(model.y) == pytest.approx([coalescing.useful_fraction(s) for s in coalescing.STRIDES])
    assert not any(t.name.startswith("measured") for t in fig.data)
    star = next(t for t in fig.data if t.name.startswith("your stride"))
    assert list(star.y) == pytest.approx([1 / 8])
    assert any("No GPU timing" in (a.text or "") for a in fig.layout.annotations)


def test_stride_figure_from_a_recording(monkeypatch):
    frame = pd.DataFrame({"dtype": ["float32"] * 2 + ["float64"], "stride": [1, 8, 1],
                          "gbps": [3900.0, 500.0, 3800.0], "copy_ceiling_gbps": [4000.0] * 3,
                          "datasheet_gbps": [4800.0] * 3})
    monkeypatch.setattr(runtime, "is_gpu", lambda: False)
    monkeypatch.setattr(reference, "load", lambda name, gpu=None: fake_recording(name, frame))
    fig = coalescing.stride_figure("float32")
    assert charts.caption_of(fig).startswith("Recorded on a real GPU: measured by this course on an NVIDIA H200 (not "
                                             "your GPU), full contract, 0.5 s of GPU time a point, 2026-10-01")
    assert fig.layout.yaxis.title.text == "effective bandwidth (GB/s)"
    measured = next(t for t in fig.data if t.name.startswith("recorded on the course's"))
    assert list(measured.x) == [1, 8] and list(measured.y) == [3900.0, 500.0]
    model = next(t for t in fig.data if t.name.startswith("sector model"))
    assert model.y[0] == pytest.approx(4000.0) and model.y[5] == pytest.approx(500.0)
    lines = [s.y0 for s in fig.layout.shapes]
    assert 4000.0 in lines and 4800.0 in lines and 4000.0 / 32 in lines  # ceiling, datasheet, folklore


def test_the_stride_chart_names_both_axes_bytes_copied_and_array_span(monkeypatch):
    # 2^26 float32 = 256 MiB copied each way at every stride; the arrays reach 8 × 256 MiB = 2 GiB at stride 8.
    frame = pd.DataFrame({"dtype": ["float32"] * 2, "stride": [1, 8], "gbps": [3900.0, 500.0],
                          "copy_ceiling_gbps": [4000.0] * 2, "n_elements": [1 << 26] * 2})
    monkeypatch.setattr(runtime, "is_gpu", lambda: False)
    monkeypatch.setattr(reference, "load", lambda name, gpu=None: fake_recording(name, frame))
    fig = coalescing.stride_figure("float32")
    assert "256 MiB of useful data each way" in fig.layout.xaxis.title.text
    ticks = dict(zip(fig.layout.xaxis.tickvals, fig.layout.xaxis.ticktext, strict=True))
    assert ticks[1] == "1<br>256 MiB" and ticks[8] == "8<br>2 GiB" and ticks[32] == "32<br>8 GiB"


def test_the_stride_axis_says_where_a_small_gpu_copied_fewer_bytes(monkeypatch):
    """W8: sweep_elements shrinks n where stride × the bytes do not fit (stride 64: two 16 GiB arrays on a 24 GB
    GPU); the axis must not then say that every point copies the same bytes."""
    frame = pd.DataFrame({"dtype": ["float32"] * 3, "stride": [1, 32, 64], "gbps": [3900.0, 300.0, 290.0],
                          "copy_ceiling_gbps": [4000.0] * 3, "n_elements": [1 << 26, 1 << 26, 1 << 25]})
    monkeypatch.setattr(runtime, "is_gpu", lambda: False)
    monkeypatch.setattr(reference, "load", lambda name, gpu=None: fake_recording(name, frame))
    title = coalescing.stride_figure("float32").layout.xaxis.title.text
    assert "256 MiB of useful data each way, fewer at strides ≥ 64 on this GPU" in title
    assert "the same" not in title
    ticks = dict(zip(coalescing.stride_figure("float32").layout.xaxis.tickvals,
                     coalescing.stride_figure("float32").layout.xaxis.ticktext, strict=True))
    assert ticks[64] == "64<br>8 GiB" and ticks[32] == "32<br>8 GiB" and ticks[8] == "8"  # spans measured only


def test_stride_figure_measures_on_a_gpu(monkeypatch):
    frame = pd.DataFrame({"dtype": ["float16"], "stride": [1], "gbps": [3000.0],
                          "copy_ceiling_gbps": [4000.0], "datasheet_gbps": [np.nan]})
    calls = []
    monkeypatch.setattr(runtime, "is_gpu", lambda: True)
    h200 = runtime.DeviceInfo(name="NVIDIA H200", compute_capability=(9, 0))
    monkeypatch.setattr(runtime, "device", lambda: h200)
    monkeypatch.setattr(coalescing.figures, "stride_sweep",
                        lambda dtypes, progress=None: calls.append(dtypes) or frame)
    monkeypatch.setattr(coalescing.figures, "_MEASURED", {})
    fig = coalescing.stride_figure("float16", stride=4)
    coalescing.stride_figure("float16", stride=16)  # moving the stride does not measure again
    assert calls == [("float16",)]
    assert charts.caption_of(fig).startswith("Measured now: NVIDIA H200")
    datasheet_lines = [s.y0 for s in fig.layout.shapes if s.line.dash == "dot" and s.y0 > 1000]
    assert datasheet_lines == []  # the device has no datasheet figure: no line


def test_sectors_figure_counts_equal_the_model():
    fig = coalescing.sectors_figure("float64", 1)
    assert charts.caption_of(fig).startswith("Counted by the microscope")
    counted = next(t for t in fig.data if t.name.startswith("counted"))
    model = next(t for t in fig.data if t.name == "sector model")
    assert list(counted.y) == list(model.y) and counted.y[0] == 9
    assert fig.layout.yaxis.title.text == "sectors per warp request (32 bytes each)"


def test_offset_figure_model_steps(simulator_without_recordings):
    fig = coalescing.offset_figure("float32", offset=1)
    model = next(t for t in fig.data if t.name.startswith("sector model"))
    # Offsets 0, 8, 16, 24, 32 keep a warp on 4 sectors; the others need 5.
    assert [o for o, y in enumerate(model.y) if y == 1.0] == [0, 8, 16, 24, 32]
    assert set(model.y) == {1.0, 0.8}
    assert fig.layout.xaxis.title.text == "offset (elements)"


def test_layout_figures(simulator_without_recordings):
    fig = coalescing.layout_figure("column traversal")
    assert "column traversal" in fig.layout.title.text
    assert charts.caption_of(fig).startswith("Counted by the microscope")
    bars = fig.data[0]
    assert list(bars.y) == [32.0, 32.0] and bars.x[0].startswith("line ")
    fig = coalescing.layout_bandwidth_figure()
    assert charts.caption_of(fig).startswith("No data")
    assert not any(t.type == "bar" for t in fig.data)  # no invented bars
    names = {t.name for t in fig.data}
    assert {"sector model, no cache reuse", "sector model, perfect reuse"} <= names


# --- widgets ------------------------------------------------------------------------------------------


def test_picture_widget_follows_the_controls():
    chart = coalescing.picture_widget(stride=1, threaded=False)
    assert "4 sectors" in chart.figure.layout.title.text
    chart.controls["stride"].value = 8
    assert "32 sectors" in chart.figure.layout.title.text
    chart.controls["dtype"].value = "float64"
    chart.controls["offset"].value = 1
    assert "float64" in chart.figure.layout.title.text and chart.errors == 0
    assert isinstance(chart.controls["dtype"], w.Dropdown)


def test_other_widgets_build_without_errors(simulator_without_recordings):
    for chart in (coalescing.stride_widget(threaded=False), coalescing.offset_widget(threaded=False),
                  coalescing.sectors_widget(threaded=False), coalescing.layout_widget(threaded=False)):
        assert chart.errors == 0 and chart.runs == 1 and len(chart.figure.data) > 0
    chart = coalescing.layout_widget(threaded=False)
    chart.controls["layout"].value = "struct of arrays"
    assert chart.errors == 0 and set(chart.figure.data[0].y) == {4.0}


def test_kernel_source_is_shown():
    assert "dst[j] = src[j]" in coalescing.kernel_source(coalescing.strided_copy)
    with pytest.raises(InvalidConfig):
        coalescing.kernel_source(len)


def test_strided_copy_sizes_by_hand():
    """The arrays of a strided copy are exactly as long as the last element a thread touches: element
    (n − 1)·stride + offset, so (n − 1)·stride + offset + 1 elements (the review tried one stride more and
    every other test passed). Hand-worked: 32 threads, stride 2 → elements 0, 2, …, 62 → 63 elements."""
    from gpucourse.lessons.coalescing import model as cm

    assert cm.span_elements(1, 1, 0) == 1 and cm.span_elements(32, 1, 0) == 32
    assert cm.span_elements(32, 2, 0) == 63 and cm.span_elements(32, 8, 3) == 252
    assert cm.copy_bytes_allocated(32, 2, 0) == 2 * 63 * 4
    assert cm.copy_bytes_allocated(256, 1, 1, "float64") == 2 * 257 * 8
    src, dst = cm.copy_arrays(32, stride=8, offset=3)
    assert src.size == dst.size == 252 and src[-1] == cm.pattern(252)[251]
    assert cm.useful_bytes(32) == 256  # 32 float32 read once and written once
