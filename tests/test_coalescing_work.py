"""Lesson 03 "Within reach of the ceiling": the Little's-law model against hand arithmetic (and a known-wrong
case), the coarsened kernels' results and microscope counts, the load widths ptxas emits, bad input, the chart.

Expected numbers are worked out by hand in the comments, never copied from the implementation's output.
"""

import math

import numpy as np
import pytest

from gpucourse.errors import InvalidConfig
from gpucourse.lessons import coalescing
from gpucourse.lessons.coalescing import compiled, inflight
from gpucourse.lessons.coalescing.kernels import copy_ilp4
from gpucourse.viz import charts

# --- the model: pure arithmetic -------------------------------------------------------------------------------


def test_bytes_in_flight_per_sm_by_hand():
    assert inflight.bytes_in_flight_per_sm(2048, 1, 4) == 8192  # 2,048 threads × one 4-byte load = 8 KiB
    assert inflight.bytes_in_flight_per_sm(2048, 4, 4) == 32768  # four loads each: 32 KiB
    assert inflight.bytes_in_flight_per_sm(2048, 4, 8) == 65536  # four 8-byte loads: 64 KiB
    assert inflight.bytes_in_flight_per_sm(1536, 1, 4) == 6144  # an sm_86 SM holds 1,536 threads


def test_sustained_and_predicted_bandwidth_by_hand():
    # 8,192 B × 100 SMs = 819,200 B of reads in flight; at 800 ns: 1,024 B/ns of reads = 2,048 GB/s effective.
    assert inflight.sustained_gbps(8192, 100, 800.0) == pytest.approx(2048.0)
    assert inflight.predicted_gbps(8192, 100, 800.0, 3000.0) == pytest.approx(2048.0)  # below the ceiling
    assert inflight.predicted_gbps(8192 * 4, 100, 800.0, 3000.0) == 3000.0  # four times as much: capped
    # A known-wrong model (read rate only, forgetting that effective GB/s counts the write too) is told apart.
    assert inflight.sustained_gbps(8192, 100, 800.0) != pytest.approx(8192 * 100 / 800.0)


def test_calibration_inverts_the_model():
    latency = inflight.calibrated_latency_ns(2048.0, 8192, 100)
    assert latency == pytest.approx(800.0)
    assert inflight.sustained_gbps(8192, 100, latency) == pytest.approx(2048.0)
    # needed bytes: 3,000 GB/s ÷ 2 = 1,500 B/ns of reads × 800 ns ÷ 100 SMs = 12,000 B per SM
    assert inflight.needed_bytes_in_flight_per_sm(3000.0, 100, 800.0) == pytest.approx(12000.0)


def test_the_h200_calibration_comes_from_the_recording():
    cal = inflight.h200_calibration()
    assert cal is not None and cal.device == "NVIDIA H200" and cal.sm_count == 132
    assert "data/reference/nvidia-h200" in cal.source
    # 2 × 8,192 B × 132 SMs ÷ latency = the recorded stride-1 GB/s
    assert 2 * 8192 * cal.sm_count / cal.latency_ns == pytest.approx(cal.one_element_gbps)
    assert 700 < cal.latency_ns < 950  # an HBM round trip under load plus block turnover, not a cache hit
    need = inflight.needed_bytes_in_flight_per_sm(cal.ceiling_gbps, cal.sm_count, cal.latency_ns)
    assert 8192 < need < 4 * 8192  # one 4-byte load per thread is too few; four are enough (the lesson's claim)


def test_model_rows_reach_the_ceiling_only_with_more_work_per_thread():
    cal = inflight.calibration_from("test GPU", 100, 2048.0, 3000.0, "by hand")
    rows = {(r["elements_per_thread"], r["bytes_per_load"]): r for r in inflight.model_rows(cal)}
    assert rows[(1, 4)]["model_gbps"] == pytest.approx(2048.0)
    assert rows[(4, 4)]["model_fraction"] == 1.0 and rows[(4, 8)]["model_fraction"] == 1.0


def test_waves_and_the_tail():
    assert inflight.waves(132 * 8, 132, 8) == 1.0 and inflight.tail_efficiency(132 * 8, 132, 8) == 1.0
    # 1.25 waves: the second round runs a quarter full → 1.25 ÷ 2
    assert inflight.tail_efficiency(132 * 10, 132, 8) == pytest.approx(1.25 / 2)
    assert coalescing.resident_grid(132) == 132 * 8  # 2,048 threads per SM ÷ 256 per block = 8 blocks per SM


@pytest.mark.parametrize("bad", [lambda: inflight.bytes_in_flight_per_sm(2048, 1, 3),
                                 lambda: inflight.bytes_in_flight_per_sm(0, 1, 4),
                                 lambda: inflight.sustained_gbps(8192, 100, 0.0),
                                 lambda: inflight.calibrated_latency_ns(-1.0, 8192, 100),
                                 lambda: inflight.predicted_gbps(8192, 100, 800.0, 0.0),
                                 lambda: coalescing.run_rung(2, 4),
                                 lambda: coalescing.run_rung(4, 16),
                                 lambda: coalescing.run_rung(4, 8, n_elements=1023)])
def test_bad_input_is_one_line(bad):
    with pytest.raises(InvalidConfig) as err:
        bad()
    assert "\n" not in str(err.value)


# --- the kernels in the simulator --------------------------------------------------------------------------


@pytest.mark.parametrize(("k", "width"), coalescing.RUNGS)
@pytest.mark.parametrize("n", [1024, 1000, 96])  # whole trips, a ragged last trip, fewer than one per thread
def test_every_rung_copies_every_element(k, width, n):
    if n % (width // 4):
        pytest.skip("odd float32 counts do not split into 8-byte lanes")
    out = coalescing.run_rung(k, width, n_elements=n, blocks_resident=2)
    assert not np.isnan(out).any()


@pytest.mark.parametrize(("k", "width", "sectors", "per_thread_bytes", "requests"),
                         [(1, 4, 4, 4, 16),  # 32 lanes × 4 B = 128 B: 4 sectors; 2,048 B ÷ 128 B = 16 requests
                          (4, 4, 4, 16, 16),  # the same requests, four per thread
                          (1, 8, 8, 8, 8),  # 32 lanes × 8 B = 256 B: 8 sectors; 2,048 ÷ 256 = 8 requests
                          (4, 8, 8, 32, 8)])  # four 8-byte loads per thread
def test_the_microscope_counts_each_rung(k, width, sectors, per_thread_bytes, requests):
    counts = coalescing.rung_counts(k, width)
    assert counts["bytes_copied"] == 2048  # every rung copies the same bytes under the microscope
    assert counts["sectors_per_request"] == sectors and counts["load_requests"] == requests
    assert counts["bytes_per_thread"] == per_thread_bytes
    assert counts["bytes_in_flight_per_sm"] == 2048 * per_thread_bytes
    # every rung moves its bytes in requests of 32 lanes: bytes ÷ (32 × width) requests
    assert counts["load_requests"] == counts["bytes_copied"] // (32 * width)


@pytest.mark.parametrize(("stride", "offset"), [(1, 0), (1, 1), (2, 0), (8, 0), (32, 0)])
def test_coarsening_keeps_the_sectors_the_lesson_counts(stride, offset):
    # copy_ilp4 keeps strided_copy's lane-to-element mapping in each of its four loads: same sectors per request.
    n = 256  # two warps × four trips
    src, dst = coalescing.copy_arrays(n, stride, offset, "float32")
    report = coalescing._trace(copy_ilp4, 2, 32, src, dst, n, stride, offset)
    coalescing.check_copied(src, dst, n, stride, offset)
    assert report.sectors_per_request(array="src") == coalescing.sectors_per_request(stride, offset, "float32")
    assert report.per_thread_max("load", array="src") == 4


# --- what the compiler makes of them (CPU: numba-cuda's PTX, ptxas, cuobjdump) ---------------------------------


def test_the_wide_rungs_issue_64_bit_loads_and_four_in_a_row():
    if compiled.find_cuobjdump() is None:
        pytest.skip("needs cuobjdump (the toolkit's or Triton's wheel)")
    from gpucourse.measure import ptxinfo

    if ptxinfo.find_ptxas() is None:
        pytest.skip("needs ptxas (the CUDA wheels)")
    table = compiled.loads_as_compiled().set_index("rung")
    one, ilp4, wide, best, c16, intrinsic = table.index
    assert table.loc[one, "SASS LDG.E"] >= 1 and table.loc[one, "SASS LDG.E.64"] == 0
    assert table.loc[wide, "SASS LDG.E.64"] >= 1 and table.loc[wide, "SASS LDG.E"] == 0
    assert table.loc[best, "SASS LDG.E.64"] >= 4 and table.loc[best, "SASS LDG.E"] == 0
    # four loads before a store where the source writes them first; one where each load meets its store
    assert table.loc[ilp4, "loads in a row (most)"] == 4 and table.loc[best, "loads in a row (most)"] == 4
    assert table.loc[one, "loads in a row (most)"] == 1
    # a complex128 lane is two 64-bit loads, not one LDG.E.128: numba-cuda's indexing never asks for 16 bytes
    assert table.loc[c16, "SASS LDG.E.128"] == 0 and table.loc[c16, "SASS LDG.E.64"] == 2
    # P10: an @intrinsic that loads <4 x float> aligned to 16 B is one LDG.E.128 (and its store one STG.E.128)
    assert table.loc[intrinsic, "SASS LDG.E.128"] == 1 and table.loc[intrinsic, "SASS LDG.E"] == 0
    assert table.loc[intrinsic, "PTX loads"] == "ld.global.v4.f32"
    assert "ptxas" in table.attrs["source"]


def test_the_intrinsic_copy_stores_16_bytes_at_once_too():
    from gpucourse.lessons.coalescing import wide
    from gpucourse.measure import ptxinfo

    if compiled.find_cuobjdump() is None or ptxinfo.find_ptxas() is None:
        pytest.skip("needs ptxas and cuobjdump")
    result = ptxinfo.compile_ptx([(wide.copy4, "void(float32[::1], float32[::1])")])[0]
    assert compiled.memory_ops(ptxinfo.sass_of(result["ptx"], 90)) == ["LDG.E.128", "STG.E.128"]


def test_sass_helpers_on_a_hand_written_listing():
    sass = ("/*0010*/ LDG.E R2, desc[UR4][R2.64] ;\n/*0020*/ LDG.E.64 R4, desc[UR4][R4.64] ;\n"
            "/*0030*/ STG.E desc[UR4][R6.64], R2 ;\n/*0040*/ LDG.E.128 R8, desc[UR4][R8.64] ;\n")
    ops = compiled.memory_ops(sass)
    assert ops == ["LDG.E", "LDG.E.64", "STG.E", "LDG.E.128"]
    assert compiled.longest_load_run(ops) == 2
    assert compiled.longest_load_run(["STG.E", "LDG.E"]) == 1


# --- the chart ---------------------------------------------------------------------------------------------


def test_the_work_chart_says_where_its_numbers_come_from():
    fig = coalescing.work_figure(4, 8)
    caption = charts.caption_of(fig)
    assert "data/reference/nvidia-h200" in caption and "Little" in caption
    assert "8 sectors/request" in fig.layout.title.text and "32 B per thread" in fig.layout.title.text
    star = [t for t in fig.data if t.name.startswith("your rung")][0]
    assert "64 KiB/SM" in star.name
    assert math.isclose(star.y[0], inflight.h200_calibration().ceiling_gbps)


def test_the_work_widget_redraws():
    widget = coalescing.work_widget(threaded=False)
    widget.controls["elements_per_thread"].value = 1
    widget.controls["bytes_per_load"].value = 4
    assert widget.errors == 0 and "4 sectors/request" in widget.figure.layout.title.text


# --- the GPU path, run in the simulator with numpy standing in for CuPy ---------------------------------------


class _NumpyAsCupy:
    """Just enough of CuPy for the measuring path: arrays are numpy arrays, the pool frees nothing."""

    empty_like = staticmethod(np.empty_like)

    @staticmethod
    def get_default_memory_pool():
        return type("Pool", (), {"free_all_blocks": lambda self: None})()


@pytest.mark.parametrize("how", ["best rung", "coarsened stride 2"])
def test_the_measuring_path_checks_the_timed_copy_not_the_warm_up(monkeypatch, how):
    from gpucourse.lessons.coalescing import experiments
    from gpucourse.measure import runtime

    monkeypatch.setattr(runtime, "is_gpu", lambda: True)
    monkeypatch.setattr(runtime, "device", lambda: runtime.DeviceInfo(name="sim", compute_capability=(9, 0),
                                                                        sm_count=1))
    monkeypatch.setattr(runtime, "free_memory_bytes", lambda: 1 << 30)
    monkeypatch.setattr(experiments, "_cupy", lambda: _NumpyAsCupy)
    monkeypatch.setattr(coalescing.model, "_cupy", lambda: _NumpyAsCupy)  # _free_pool's
    monkeypatch.setattr(experiments, "_device_pattern", lambda n, name: coalescing.pattern(n, name))
    monkeypatch.setattr(experiments.cuda, "as_cuda_array", lambda a: a, raising=False)  # the simulator has none
    monkeypatch.setattr(experiments, "THREADS_PER_BLOCK", 32)
    seen = {}

    def fake_measure(run, *, label, check, bytes_moved, **_):
        seen["before"] = check()  # after the warm-up launch: poisoned again, so the check must fail
        run()
        seen["after"] = check()
        seen["bytes"] = bytes_moved
        return label

    monkeypatch.setattr(experiments, "measure", fake_measure)
    if how == "best rung":
        experiments.measure_rung(4, 8, n_elements=512)
        assert seen["bytes"] == experiments.LAUNCHES_PER_SAMPLE * 2 * 512 * 4  # read + write, 4 launches
    else:
        experiments.measure_copy(2, 0, "float32", n_elements=512, coarsened=True)
    assert seen == {**seen, "before": False, "after": True}


def test_the_work_chart_measures_the_rungs_on_a_gpu(monkeypatch):
    import pandas as pd

    from gpucourse.lessons.coalescing import experiments, figures
    from gpucourse.measure import harness, runtime

    frame = pd.DataFrame({"elements_per_thread": [1, 4, 1, 4], "bytes_per_load": [4, 4, 8, 8],
                          "gbps": [2600.0, 3900.0, 3800.0, 4000.0], "copy_ceiling_gbps": [4200.0] * 4})
    asked = []
    monkeypatch.setattr(runtime, "is_gpu", lambda: True)
    monkeypatch.setattr(runtime, "device", lambda: runtime.DeviceInfo(name="NVIDIA H200", compute_capability=(9, 0)))
    monkeypatch.setattr(figures, "_measured_rungs", lambda ms: asked.append(ms) or frame)
    fig = coalescing.work_figure(4, 8)
    assert asked == [harness.LIVE_MIN_TOTAL_MS]  # a widget redraw: the live contract
    assert charts.caption_of(fig).startswith("Measured now: NVIDIA H200")
    measured = next(t for t in fig.data if t.name.startswith("measured now"))
    assert list(measured.x) == [8, 32, 16, 64] and list(measured.y) == list(frame.gbps)  # KiB per SM in flight
    monkeypatch.setattr(experiments, "_MEASURED_RUNGS", {"rungs": frame})
    assert coalescing.measured_rung_text(4, 8).startswith("0.95 of the copy ceiling (4,000 of 4,200 GB/s")


def test_the_stride_read_back_quotes_the_measured_ratio(monkeypatch):
    import pandas as pd

    from gpucourse.lessons.coalescing import figures

    monkeypatch.setattr(figures, "_MEASURED", {})
    assert coalescing.measured_stride_text("float32", 32) is None  # nothing measured yet: the chart says so
    # 2,640 ÷ 171.4 = 15.4; 4,285 ÷ 171.4 = 25
    figures._MEASURED[("coalescing.stride", "float32")] = pd.DataFrame(
        {"stride": [1, 32], "gbps": [2640.0, 171.4], "copy_ceiling_gbps": [4285.0, 4285.0]})
    assert coalescing.measured_stride_text("float32", 32).startswith("1/15.4 of stride 1 and 1/25 of the copy ceiling")
    assert coalescing.measured_stride_text("float32", 8) is None


def test_the_offset_read_back_quotes_the_measured_ratio(monkeypatch):
    import pandas as pd

    from gpucourse.lessons.coalescing import figures

    monkeypatch.setattr(figures, "_MEASURED", {})
    assert coalescing.measured_offset_text("float32", 1) is None
    figures._MEASURED[("coalescing.offset", "float32")] = pd.DataFrame({"offset": [0, 1], "gbps": [2000.0, 1920.0]})
    assert coalescing.measured_offset_text("float32", 1) == "96% of the aligned bandwidth at offset 1"  # 1920/2000


def test_sixteen_byte_loads_are_drawn_from_the_model_only():
    fig = coalescing.work_figure(4, 16)
    assert "the model only" in fig.layout.title.text and "LDG.E.128" in fig.layout.title.text
    star = [t for t in fig.data if t.name.startswith("your rung")][0]
    assert "128 KiB/SM" in star.name  # 2,048 threads × 4 × 16 B
    with pytest.raises(InvalidConfig):
        coalescing.work_figure(4, 12)
