"""Lesson 02 (warp divergence): placements, the model, the kernels, the PTX check, the microscope's
counts, figures and widgets — all in simulator mode."""

import numpy as np
import pandas as pd
import pytest

from gpucourse.errors import InvalidConfig, NoGPU
from gpucourse.lessons import divergence
from gpucourse.measure import reference
from gpucourse.viz import charts

WARP = 32


# --- placements and the model -------------------------------------------------------------------


def per_warp_counts(flags):
    return flags.reshape(-1, WARP).sum(axis=1)


def test_interleaved_puts_the_same_share_in_every_warp_spread_across_it():
    flags = divergence.lane_flags(256, 0.5, "interleaved")
    assert flags.dtype == np.uint8 and flags.size == 256
    assert list(per_warp_counts(flags)) == [16] * 8
    assert list(flags[:8]) == [0, 1, 0, 1, 0, 1, 0, 1]  # spread, not lanes 0–15
    assert list(per_warp_counts(divergence.lane_flags(128, 1 / 32, "interleaved"))) == [1] * 4


def test_clustered_and_sorted_keep_warps_uniform():
    clustered = per_warp_counts(divergence.lane_flags(256, 0.25, "clustered"))
    assert sorted(clustered) == [0] * 6 + [32] * 2 and clustered[0] == 0  # spread through the array
    flags = divergence.lane_flags(256, 0.3, "sorted")
    assert flags.sum() == round(0.3 * 256) and np.all(np.diff(flags.astype(int)) <= 0)  # all A first
    assert sum(1 for c in per_warp_counts(flags) if 0 < c < WARP) == 1  # one mixed warp at the boundary


def test_random_is_seeded_and_near_the_fraction():
    a = divergence.lane_flags(8192, 0.25, "random", seed=3)
    assert np.array_equal(a, divergence.lane_flags(8192, 0.25, "random", seed=3))
    assert abs(a.mean() - 0.25) < 0.03


@pytest.mark.parametrize("placement", divergence.PLACEMENTS)
def test_fractions_zero_and_one_are_uniform(placement):
    assert divergence.lane_flags(128, 0.0, placement).sum() == 0
    assert divergence.lane_flags(128, 1.0, placement).sum() == 128


def test_model_a_warp_pays_for_every_path_any_lane_takes():
    half = divergence.lane_flags(1024, 0.5, "interleaved")
    assert divergence.model_relative_time(half, 100, 100) == 2.0
    assert divergence.model_simt_efficiency(half, 100, 100) == 0.5
    assert divergence.model_relative_time(divergence.lane_flags(1024, 0.5, "clustered"), 100, 100) == 1.0
    # 1 lane in 32 on A with a cheap B: every warp still pays all of A (the GPU-tier test checks ≥ 0.8×)
    one_lane = divergence.lane_flags(1024, 1 / 32, "interleaved")
    assert divergence.model_relative_time(one_lane, 128, 8) == pytest.approx(1 + 8 / 128)
    # "28 of 32 lanes on one path still costs 2×": only when the other path costs as much
    lanes_28 = (np.arange(64) % WARP < 28).astype(np.uint8)
    assert divergence.model_relative_time(lanes_28, 64, 64) == 2.0
    assert divergence.model_relative_time(lanes_28, 64, 0) == 1.0
    assert list(divergence.warp_costs(lanes_28, 10, 3)) == [13, 13]
    assert np.isnan(divergence.model_simt_efficiency(np.zeros(32, np.uint8), 5, 0))


def test_warp_table_and_model_curves():
    table = divergence.warp_table(divergence.lane_flags(96, 0.5, "sorted"))
    assert list(table.lanes_a) == [32, 16, 0] and list(table.paths) == [1, 2, 1]
    curves = divergence.model_curves(64, 64, n_threads=1024, fractions=(0.0, 0.5, 1.0))
    assert set(curves.placement) == set(divergence.PLACEMENTS) and len(curves) == 12
    inter = curves[curves.placement == "interleaved"].set_index("fraction").relative_time
    assert list(inter) == [1.0, 2.0, 1.0]


# --- bad input: one line, before any launch ---------------------------------------------------


class NoLaunch:
    def __getitem__(self, config):
        raise AssertionError("a kernel was launched despite bad input")


@pytest.mark.parametrize("kwargs, words", [
    ({"fraction": -0.1}, "from 0.0 to 1.0"), ({"fraction": 1.5}, "from 0.0 to 1.0"),
    ({"fraction": float("nan")}, "fraction"), ({"fraction": "half"}, "fraction"),
    ({"placement": "diagonal"}, "'interleaved', 'clustered', 'sorted', 'random'"),
    ({"n_threads": 33}, "multiple of 32"), ({"n_threads": 0}, "number of threads"),
])
def test_bad_placement_input_is_refused_in_one_line(kwargs, words):
    args = {"n_threads": 64, "fraction": 0.5, "placement": "interleaved", **kwargs}
    with pytest.raises(InvalidConfig, match=None) as info:
        divergence.lane_flags(**args)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_bad_input_is_refused_before_any_launch(monkeypatch):
    for part in (divergence.model, divergence.experiments):  # where the kernels are looked up
        monkeypatch.setattr(part, "two_paths", NoLaunch())
        monkeypatch.setattr(part, "two_paths_remapped", NoLaunch())
    with pytest.raises(InvalidConfig, match="multiple of 32"):
        divergence.run_two_paths(np.zeros(40, np.uint8))
    with pytest.raises(InvalidConfig, match="at most 8192"):
        divergence.run_two_paths(np.zeros(8224, np.uint8))
    with pytest.raises(InvalidConfig, match="path A cost"):
        divergence.run_two_paths(np.zeros(64, np.uint8), body_a=-1)
    with pytest.raises(InvalidConfig, match="one value per flag"):
        divergence.run_sorted(np.zeros(64, np.uint8), np.zeros(32, np.float32))
    with pytest.raises(InvalidConfig, match="block"):
        divergence.run_two_paths(np.zeros(64, np.uint8), block=2048)
    with pytest.raises(InvalidConfig, match="at most 1024 threads"):
        divergence.trace_flags(np.zeros(2048, np.uint8))
    bad_calls = [
        (divergence.fraction_figure, {"fraction": 2}), (divergence.fraction_figure, {"placement": "x"}),
        (divergence.fraction_figure, {"path_b": "free"}), (divergence.fraction_figure, {"body_cost": 100}),
        (divergence.simt_figure, {"fraction": -1}), (divergence.warp_timeline_figure, {"body_a": 70}),
        (divergence.sort_pays_figure, {"density": 0.3}), (divergence.claims, {"body_a": 100}),
    ]
    for fn, kwargs in bad_calls:
        with pytest.raises(InvalidConfig):
            fn(**kwargs)


def test_gpu_sweeps_say_they_need_a_gpu_after_checking_their_input():
    with pytest.raises(InvalidConfig, match="from 0.0 to 1.0"):
        divergence.measure_fraction_curve(8, 8, fractions=(0.5, 1.5))
    with pytest.raises(InvalidConfig, match="include 1.0"):
        divergence.measure_fraction_curve(8, 8, fractions=(0.5,))
    with pytest.raises(NoGPU, match="needs a GPU"):
        divergence.measure_fraction_curve(8, 8)
    with pytest.raises(NoGPU, match="needs a GPU"):
        divergence.measure_sort_pays(1 / 32)


def test_sweeps_are_registered_for_make_record():
    for name in ("divergence.fraction", "divergence.sort_pays"):
        sweep = reference.SWEEPS[name]
        assert sweep.lesson == "02_divergence" and "body_a" in sweep.columns
    assert "gpucourse.lessons.divergence" in reference.SWEEP_MODULES


# --- kernels (simulator) ------------------------------------------------------------------------


@pytest.mark.parametrize("placement", divergence.PLACEMENTS)
def test_two_paths_and_the_sorted_version_match_the_reference(placement):
    flags = divergence.lane_flags(128, 0.375, placement, seed=5)
    x = np.random.default_rng(0).random(128, dtype=np.float32)
    want = divergence.reference_two_paths(flags, x, 3, 5)
    assert np.allclose(divergence.run_two_paths(flags, x, 3, 5), want, rtol=1e-5)
    assert np.allclose(divergence.run_sorted(flags, x, 3, 5), want, rtol=1e-5)
    assert not np.allclose(want, divergence.reference_two_paths(flags, x, 5, 3))  # the test can fail


def test_sorted_order_is_a_stable_partition():
    flags = np.array([0, 1, 0, 1, 1, 0], np.uint8)
    assert list(divergence.sorted_order(flags)) == [1, 3, 4, 0, 2, 5]
    assert divergence.sorted_order(flags).dtype == np.int64


def test_predicated_kernel_runs_in_the_simulator():
    flags = divergence.lane_flags(64, 0.5, "interleaved")
    x = np.arange(64, dtype=np.float32)
    out = np.full(64, np.nan, np.float32)
    divergence.predicated[1, 64](flags, x, out)
    assert np.array_equal(out, np.where(flags == 1, x * 0.5, x + 1).astype(np.float32))


# --- PTX: the compiler keeps the real branch, predicates the trivial one ------------------------


def test_real_work_branch_stays_a_branch_and_the_trivial_one_becomes_a_select():
    divergence.prefetch_ptx()  # the notebook starts the compile early; the calls below wait for it
    evidence = divergence.ptx_evidence().set_index("kernel")
    assert evidence.available.all(), evidence["flag test compiles to"].tolist()
    assert evidence.loc["two_paths", "flag test compiles to"] == "branch"
    assert evidence.loc["predicated", "flag test compiles to"] == "select"
    assert evidence.loc["predicated", "conditional branches (all)"] == 1  # only the bounds check is left
    view = divergence.show_ptx("two_paths")
    marked = [line for _, line, mark in view.excerpt() if mark]
    assert marked[0].startswith("ld.global.u8") and any(" bra" in line for line in marked)
    assert "real branch" in view.text() and "<pre>" in view._repr_html_()
    trivial = divergence.show_ptx("predicated").excerpt()
    assert any(line.startswith("selp") for _, line, mark in trivial if mark)


SYNTHETIC_PTX = """
	ld.global.u8 	%rs1, [%rd9];
	cvt.u32.u16 	%r1, %rs1;
	and.b32 	%r2, %r1, 255;
	setp.eq.s32 	%p3, %r2, 0;
	@%p3 add.f32 	%f2, %f1, 0f3F800000;
	@!%p3 mul.f32 	%f2, %f1, 0f3F000000;
	@%p1 bra 	$L__BB0_2;
"""


def test_flag_test_follows_the_flag_through_registers():
    test = divergence.flag_test(SYNTHETIC_PTX)
    assert (test.kind, test.predicate, test.conditional_branches) == ("predicated", "%p3", 1)
    assert divergence.flag_test("\tret;\n").kind == "not found"


def a_kernel_nobody_compiled_yet(out):
    out[0] = 1.0


def test_ptx_unavailable_is_said_not_raised(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUCOURSE_PTX_PYTHON", "/nonexistent/python")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    result = divergence.ptx_of(a_kernel_nobody_compiled_yet, "void(float32[::1])")
    assert not result.available and "could not run" in result.reason
    assert "not available here" in divergence.PtxView(result).text()
    with pytest.raises(InvalidConfig, match="signature"):
        divergence.ptx_of(a_kernel_nobody_compiled_yet, "float32")
    with pytest.raises(InvalidConfig, match="kernel"):
        divergence.ptx_of(42, "void()")


# --- the microscope's exact counts ---------------------------------------------------------------


def test_microscope_counts_match_the_model_per_placement():
    table = divergence.simt_table(0.5).set_index("placement")
    assert table.loc["interleaved", "counted_bodies"] == 0.5
    assert table.loc["clustered", "counted_bodies"] == 1.0 and table.loc["sorted", "counted_bodies"] == 1.0
    assert list(table.max_paths_per_warp) == [2, 1, 1, 2]
    assert np.allclose(table.counted_bodies, table.model_bodies)
    assert table.loc["interleaved", "counted_kernel"] < table.loc["clustered", "counted_kernel"] == 1.0
    sparse = divergence.simt_table(1 / 32, 4, 1).set_index("placement")
    assert np.allclose(sparse.counted_bodies, sparse.model_bodies)
    assert sparse.loc["interleaved", "counted_bodies"] == pytest.approx((4 + 31) / (32 * 5))


def test_sorting_random_flags_makes_warps_agree_under_the_microscope():
    flags = divergence.lane_flags(256, 0.3, "random", seed=1)
    before = divergence.trace_flags(flags)
    after = divergence.trace_flags(flags, remapped=True)
    assert divergence.body_efficiency(before) < 0.7 < 0.85 < divergence.body_efficiency(after)
    assert before.paths() == 2 and after.warps().paths.tolist().count(2) <= 1


def test_sparse_table_counts_the_sort_paying_off_in_warp_instructions():
    table = divergence.sparse_table(n_threads=1024, density=1 / 32, body=8, seed=10).set_index("version")
    before, after = table.loc["as written"], table.loc["sorted first"]
    assert before["non-zeros"] == after["non-zeros"] == 32
    # Expected from the flags themselves (a second count): the warps holding a non-zero as written;
    # sorted, the 32 non-zeros fill exactly one warp. Each such warp issues the 8-step body once.
    flags = divergence.lane_flags(1024, 1 / 32, "random", seed=10)
    warps_with_a = len(set(np.flatnonzero(flags) // WARP))
    assert 1 < warps_with_a <= 32
    assert (before["warps issuing path A"], after["warps issuing path A"]) == (warps_with_a, 1)
    assert (before["body issues (counted)"], after["body issues (counted)"]) == (warps_with_a * 8, 8)
    assert after["SIMT efficiency of the bodies (counted)"] == 1.0
    empty = divergence.simt_figure(1 / 32, "none")
    assert any(a.text == "no lane ran a body" for a in empty.layout.annotations)


def test_claims_table_tests_the_folklore(no_recordings):
    table = divergence.claims(128).set_index("claim")
    half = table.loc["`if (threadIdx.x < 16)` halves throughput"]
    assert half["model: time (×)"] == 2.0 and half["microscope: SIMT efficiency of the bodies"] == 0.5
    empty_else = table.loc["(the same, with an empty else)"]
    assert empty_else["model: time (×)"] == 1.0
    assert empty_else["microscope: SIMT efficiency of the bodies"] == 0.5
    assert table.loc["28 of 32 lanes on one path still costs 2×", "model: time (×)"] == 2.0
    cheap = table.loc["(the same, the 4 lanes' path cheap)"]
    assert cheap["model: time (×)"] == pytest.approx(1 + 8 / 128, abs=1e-3)
    counted = cheap["microscope: SIMT efficiency of the bodies"]
    assert counted == pytest.approx((28 * 16 + 4) / (32 * 17), abs=1e-3)
    assert set(table["GPU: recorded time (×)"]) <= {"no recording yet", "—"}


# --- figures ---------------------------------------------------------------------------------------


def test_fraction_figure_without_a_recording_shows_the_model_and_says_so(no_recordings):
    fig = divergence.fraction_figure(0.5, "interleaved", 128, "same")
    assert [t.name for t in fig.data] == [f"model: {p}" for p in divergence.PLACEMENTS]
    assert fig.layout.xaxis.title.text == "fraction of lanes on path A"
    assert "(×)" in fig.layout.yaxis.title.text and "128 FMAs" in fig.layout.title.text
    caption = charts.caption_of(fig)
    assert caption.startswith("No data") and "make record" in caption
    assert "interleaved, f = 0.5: model 2.00×" in fig.layout.title.text
    table = charts.data_table(fig)
    assert table[table.series == "model: clustered"].y.max() == 1.0


def fake_recording(monkeypatch):
    rows = []
    for kernel, placements, body_a, body_b in [("two_paths", divergence.PLACEMENTS, 128, 128),
                                               ("predicated", ("interleaved", "clustered"), 1, 1)]:
        for p in placements:
            for f in divergence.SWEEP_FRACTIONS:
                gap = 1.9 if (kernel == "two_paths" and p in ("interleaved", "random") and 0 < f < 1) else 1.0
                rows.append({"kernel": kernel, "placement": p, "fraction": f, "body_a": body_a,
                             "body_b": body_b, "n_threads": 1 << 24, "median_ms": gap, "relative_time": gap})
    provenance = {"device": {"device": "Test GPU"}, "sweeps": {"divergence.fraction": {"date": "2026-10-01"}}}
    rec = reference.Recording("divergence.fraction", "nvidia-test", pd.DataFrame(rows), provenance,
                              reference.REFERENCE_ROOT / "nvidia-test" / "divergence.fraction.csv")
    monkeypatch.setattr(reference, "load", lambda name, *_, **__: rec if name == rec.name else None)


def test_fraction_figure_draws_a_recording_beside_the_model(monkeypatch):
    fake_recording(monkeypatch)
    fig = divergence.fraction_figure(0.5, "interleaved", 128, "same")
    names = [t.name for t in fig.data]
    assert "recorded: interleaved" in names and "model: interleaved" in names and len(names) == 8
    assert charts.caption_of(fig).startswith(
        "Recorded on a real GPU: measured by this course on a Test GPU (not your GPU), full contract")
    assert "2026-10-01" in charts.caption_of(fig)
    assert "recorded at f = 0.5: 1.90×" in fig.layout.title.text
    assert divergence.claims(128).iloc[0]["GPU: recorded time (×)"] == "1.90× (Test GPU)"
    predicated = divergence.predicated_figure()
    assert [t.name for t in predicated.data] == ["model: no branch, so no gap", "interleaved", "clustered"]


def test_other_figures_have_titles_axes_and_captions():
    timeline = divergence.warp_timeline_figure(0.5, "interleaved", 4, 4, warps=2)
    assert "8 issue slots per warp, 50 % of lanes busy" in timeline.layout.title.text
    assert charts.caption_of(timeline).startswith("Model")
    clustered = divergence.warp_timeline_figure(0.5, "clustered", 4, 4, warps=2)
    assert "4 issue slots per warp, 100 % of lanes busy" in clustered.layout.title.text
    sort = divergence.sort_pays_figure(1 / 32)
    assert sort.layout.xaxis.type == "log" and "path A cost" in sort.layout.xaxis.title.text
    assert charts.caption_of(sort).startswith("No data") and sort.data[0].y[0] > 10  # ≈ 20 warps pay before
    simt = divergence.simt_figure(0.5)
    assert charts.caption_of(simt).startswith("Counted by the microscope")
    assert list(simt.data[0].y) == [0.5, 1.0, 1.0, 0.5]
    lanes = divergence.lanes_picture(0.5, "interleaved")
    assert "SIMT efficiency" in lanes.layout.title.text and "2 distinct path(s)" in lanes.layout.title.text


def test_widgets_rerun_and_report_errors_in_one_line():
    chart = divergence.fraction_chart(threaded=False)
    assert chart.runs == 1 and chart.errors == 0
    chart.controls["placement"].value = "clustered"
    chart.controls["body_cost"].value = 1024
    assert chart.runs == 3 and "1024 FMAs" in chart.figure.layout.title.text
    timeline = divergence.timeline_chart(threaded=False)
    timeline.controls["fraction"].value = 1 / 32
    assert timeline.runs == 2 and timeline.errors == 0
    lanes = divergence.lanes_chart(threaded=False)
    lanes.controls["warp"].value = 3
    assert lanes.runs == 2 and lanes.errors == 0
    simt = divergence.simt_chart(threaded=False)
    simt.controls["path_b"].value = "none"
    assert simt.runs == 2 and simt.errors == 0


@pytest.mark.parametrize("placement", ["interleaved", "clustered", "sorted", "random"])
def test_the_fraction_chart_draws_every_placement(placement):
    """widget-run found "sorted" and "random" raising IndexError where the recording has no points for them."""
    fig = divergence.fraction_figure(placement=placement)
    assert placement.capitalize() in fig.layout.title.text or placement in fig.layout.title.text
