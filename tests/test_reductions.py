"""Lesson 04a: the reduction ladder and the scans give the right answers on ragged sizes (in the
simulator), the model's counts match numbers worked by hand, and the microscope counts the same."""

import re
from pathlib import Path

import numpy as np
import pytest

from gpucourse.errors import InvalidConfig
from gpucourse.lessons import reductions
from gpucourse.lessons.reductions import kernels, model
from gpucourse.measure import runtime
from gpucourse.microscope import trace
from gpucourse.viz import charts

sim_only = pytest.mark.skipif(runtime.is_gpu(), reason="counts and sizes here are those of simulator mode")


# --- the model, against hand-worked numbers -----------------------------------------------------------------


def test_tree_steps_and_adds():
    assert [model.tree_steps(b) for b in (32, 256, 1024)] == [5, 8, 10]
    assert model.tree_adds(256) == 255


def test_warp_issues_of_the_add_worked_by_hand():
    # B = 256, 8 warps. Interleaved: s = 1..16 keep one adder in every warp (8 issues each), then the
    # adders 0, 64, 128, 192 (4 warps), 0, 128 (2), 0 (1): 5·8 + 4 + 2 + 1 = 47.
    assert model.add_warp_issues_per_step(256, "interleaved") == [8, 8, 8, 8, 8, 4, 2, 1]
    assert model.add_warp_issues(256, "interleaved") == 47
    # Sequential: 128 adders = 4 warps, 64 = 2, then one warp for 32, 16, 8, 4, 2, 1: 12.
    assert model.add_warp_issues_per_step(256, "sequential") == [4, 2, 1, 1, 1, 1, 1, 1]
    assert model.add_warp_issues(256, "sequential") == 12
    assert model.add_warp_issues(256, "strided index") == 12
    assert model.idle_lanes(256, "interleaved") == 32 * 47 - 255 == 1249
    assert model.idle_lanes(256, "sequential") == 32 * 12 - 255 == 129
    assert model.add_warp_issues(64, "interleaved") == 11  # 2, 2, 2, 2, 2, 1


def test_strided_index_bank_ways_worked_by_hand():
    # B = 64, s = 1: lanes 0..31 touch words 0, 2, …, 62: banks 0, 2, …, 30, two words each.
    assert model.strided_index_max_ways(64) == 2
    assert model.strided_index_max_ways(256) == 8
    assert model.strided_index_max_ways(1024) == 32
    assert model.strided_index_max_ways(32) == 1


def test_scan_work_and_steps_worked_by_hand():
    # B = 8: Hillis–Steele adds 7 + 6 + 4 = 17 in 3 steps; Blelloch 7 up + 7 down = 14 in 6 steps.
    assert model.hillis_steele_adds(32) == 32 * 5 - 31
    assert (model.hillis_steele_steps(64), model.blelloch_steps(64)) == (6, 12)
    assert model.hillis_steele_adds(64) == 63 + 62 + 60 + 56 + 48 + 32 == 321
    assert model.blelloch_adds(64) == 126
    assert model.serial_scan_adds(64) == 63


def test_passes_until_one_value_is_left():
    assert model.reduction_passes(1000, 256) == 2  # 1000 → 4 → 1
    assert model.reduction_passes(1 << 20, 256, 2) == 3  # 2²⁰ → 2048 → 4 → 1
    assert model.reduction_passes(1, 32) == 1
    assert model.blocks_needed(513, 256, 2) == 2


@pytest.mark.parametrize("bad", [0, 16, 48, 2048, True, 256.0, "256"])
def test_bad_block_sizes_are_refused(bad):
    with pytest.raises(InvalidConfig, match="power of two"):
        model.check_block(bad)


# --- the kernels, on ragged sizes, in the simulator -------------------------------------------------------------


@pytest.mark.parametrize("variant", kernels.REDUCTIONS)
@pytest.mark.parametrize("n, block", [(1, 32), (37, 32), (300, 64)])
def test_every_rung_sums_ragged_sizes(variant, n, block):
    x = reductions.random_input(n, seed=n)
    assert reductions.reduce_sum(x, variant, block) == pytest.approx(float(np.sum(x, dtype=np.float64)), rel=1e-5)


@pytest.mark.parametrize("variant", kernels.SCANS)
@pytest.mark.parametrize("n, block", [(1, 32), (45, 32), (130, 64)])
def test_block_scans_on_ragged_sizes(variant, n, block):
    x = reductions.random_input(n, seed=n + 1)
    out = np.asarray(reductions.block_scan(x, variant, block))
    np.testing.assert_allclose(out, reductions.reference_block_scan(np.asarray(x), block), rtol=1e-5, atol=1e-5)


def test_reference_block_scan_restarts_at_each_block():
    assert reductions.reference_block_scan(np.ones(5, dtype=np.float32), 2).tolist() == [1, 2, 1, 2, 1]


@pytest.mark.parametrize("version", ["per lane", "ballot"])
def test_count_above_on_a_ragged_size(version):
    x = reductions.random_input(300, seed=4)
    assert reductions.count_above(x, 0.5, version) == int((np.asarray(x) > 0.5).sum())


def test_bad_input_is_refused_before_any_launch():
    with pytest.raises(InvalidConfig, match="1-D float32"):
        reductions.reduce_sum(np.ones((4, 4), dtype=np.float32))
    with pytest.raises(InvalidConfig, match="1-D float32"):
        reductions.reduce_sum(np.ones(4, dtype=np.float64))
    with pytest.raises(InvalidConfig, match="variant must be one of"):
        reductions.reduce_sum(np.ones(4, dtype=np.float32), "fastest")
    with pytest.raises(InvalidConfig, match="power of two"):
        reductions.block_scan(np.ones(4, dtype=np.float32), "Blelloch", 100)
    with pytest.raises(InvalidConfig, match="n must be"):
        reductions.counts_table(0)


@sim_only
def test_the_simulator_refuses_sizes_the_microscope_cannot_trace():
    with pytest.raises(InvalidConfig, match="too large for the simulator"):
        reductions.random_input(5000)


# --- the microscope's counts, against the same hand-worked numbers ------------------------------------------


@pytest.fixture(scope="module")
def counts():
    return reductions.counts_table(n=128, block=64).set_index("variant")


def test_counts_of_the_tree_variants(counts):
    # n = 128, B = 64: two blocks for one element per thread. Interleaved: 11 add issues per block,
    # 63 adds each; sequential and strided index: 6 issues per block (one warp from s = 32 down).
    assert counts.loc["interleaved", "add issues"] == 22
    assert counts.loc["interleaved", "idle lanes in adds"] == 32 * 22 - 126
    assert counts.loc["sequential", "add issues"] == 12
    assert counts.loc["sequential", "idle lanes in adds"] == 32 * 12 - 126
    assert counts.loc["strided index", "max bank ways"] == 2
    assert counts.loc["interleaved", "max bank ways"] == 1
    assert counts.loc["sequential", "max bank ways"] == 1
    # 128 float32 = 512 bytes = 16 sectors, read in 4 warp requests of 4 sectors.
    assert counts.loc["sequential", "load sectors"] == 16
    assert counts.loc["sequential", "load sectors/request"] == 4.0
    # first add during load: one block of 64 does the work of two.
    assert counts.loc["first add", "blocks"] == 1 and counts.loc["first add", "add issues"] == 6
    assert counts["correct"].all()


def test_counts_of_the_shuffle_variants(counts):
    # One block of 64 = 2 warps: 5 shuffles each, then warp 0 shuffles 5 more times; all 32 lanes every time.
    assert counts.loc["warp shuffle", "add issues"] == 15
    assert counts.loc["warp shuffle", "idle lanes in adds"] == 0
    assert counts.loc["warp shuffle", "barriers per warp"] == 1.0
    assert counts.loc["sequential", "barriers per warp"] == 7.0  # after the load, then one per step
    assert counts.loc["atomic", "launches to finish"] == 1
    assert counts.loc["warp shuffle", "launches to finish"] == 1  # n = 128 fits one block's 2 × 64
    assert counts.loc["warp shuffle", "warp line issues"] < counts.loc["sequential", "warp line issues"]


def test_scan_counts_match_the_hand_worked_model():
    table = reductions.scan_counts(64).set_index("scan")
    assert table.loc["Hillis-Steele", "adds per block (counted)"] == 321
    assert table.loc["Blelloch", "adds per block (counted)"] == 126
    assert table.loc["Hillis-Steele", "barriers per warp"] == 7  # after the load + 6 steps
    assert table.loc["Blelloch", "barriers per warp"] == 13  # 6 up + 6 down + 1 before the write
    # Blelloch's up-sweep, offset 1: lanes touch words 1, 3, …, 63, two in each odd bank.
    assert table.loc["Blelloch", "max bank ways"] == 2
    assert table.loc["Hillis-Steele", "max bank ways"] == 1
    assert table["correct"].all()


def test_ballot_takes_one_atomic_per_warp():
    # Every 4th element passes: 16 of 64, spread over both warps. One atomic per passing lane, or per warp.
    x = np.where(np.arange(64) % 4 == 0, 1.0, 0.0).astype(np.float32)
    for kernel, atomics in ((kernels.count_above_per_lane, 16), (kernels.count_above_ballot, 2)):
        count = np.zeros(1, dtype=np.int32)
        report = trace(kernel, 1, 64, x, np.float32(0.5), count)
        requests = report.requests()
        assert count[0] == 16
        assert int(requests[requests.op == "atomic"].lanes.sum()) == atomics


def test_ballot_skips_a_warp_with_nothing_to_count():
    # Only warp 1 has passing elements: any_sync is false in warp 0, so it never votes or adds.
    x = np.zeros(64, dtype=np.float32)
    x[40] = 1.0
    count = np.zeros(1, dtype=np.int32)
    report = trace(kernels.count_above_ballot, 1, 64, x, np.float32(0.5), count)
    branches = report.branches()
    assert count[0] == 1
    assert int(branches[branches.source.str.contains("ballot_sync", regex=False)].issues.sum()) == 1


# --- figures say where their numbers came from ------------------------------------------------------------------


def test_figures_name_their_source():
    assert "Model" in charts.caption_of(reductions.model_figure())
    assert "microscope" in charts.caption_of(reductions.counts_figure(128, 64))
    assert "microscope" in charts.caption_of(reductions.scan_figure(32))
    assert "microscope" in charts.caption_of(reductions.variant_figure("sequential", 100, 64))
    assert "Model" in charts.caption_of(reductions.tree_picture())


@sim_only
def test_the_ladder_without_a_gpu_says_so(no_recordings):
    fig = reductions.ladder_figure()
    assert "No GPU" in fig.layout.title.text
    assert "only on a GPU" in charts.caption_of(fig)


@sim_only
def test_measuring_needs_a_gpu():
    from gpucourse.errors import NoGPU

    with pytest.raises(NoGPU):
        reductions.measure_reductions(1024)


# --- the explorer: one simulator launch per new setting, none for one it has seen ----------------------------


@sim_only
def test_an_explorer_move_traces_one_launch_and_a_repeated_one_none():
    from gpucourse.lessons.reductions import experiments, figures

    experiments._traced.cache_clear()
    experiments._counts.cache_clear()
    before = experiments.TRACED_LAUNCHES["count"]
    figures.variant_figure("interleaved", 200, 64)  # the chart and its title's counts: one launch
    assert experiments.TRACED_LAUNCHES["count"] == before + 1
    figures.variant_figure("interleaved", 200, 64)
    experiments.reduction_counts("interleaved", 200, 64)
    assert experiments.TRACED_LAUNCHES["count"] == before + 1
    figures.variant_figure("sequential", 200, 64)
    assert experiments.TRACED_LAUNCHES["count"] == before + 2
    # what the explorer shows is still the exact count: 200 elements, 64-thread blocks = 4 blocks of 11 add issues
    assert experiments.reduction_counts("interleaved", 200, 64)["add issues"] == 4 * 11


# --- atomics: what the source asks for, and what the compiler makes of it -------------------------------------


def test_the_compiler_aggregates_the_per_lane_atomic_but_not_the_histogram():
    from gpucourse.lessons.reductions import compiled

    table = compiled.atomics_as_compiled().set_index("kernel")
    assert (table["PTX atomics (atom/red)"] == 1).all()  # the PTX keeps the source's one atomic per lane
    if "SASS global atomics (REDG, ATOMG)" not in table:
        pytest.skip(f"no SASS here: {table.attrs['source']}")
    assert "ptxas" in table.attrs["source"] and "sm_90" in table.attrs["source"]
    per_lane, ballot = table.loc["count_above_per_lane"], table.loc["count_above_ballot"]
    # ptxas wrote the vote itself: a vote, a leader, a popcount, one atomic (issued by the leader only)
    assert per_lane["SASS votes (VOTE, VOTEU)"] >= 1 and per_lane["SASS leader (UFLO, FLO)"] >= 1
    assert per_lane["SASS popcounts (POPC)"] >= 1 and per_lane["SASS global atomics (REDG, ATOMG)"] == 1
    assert any(line.startswith("@P") and "REDG" in line for line in table.attrs["sass"]["count_above_per_lane"])
    assert ballot["SASS global atomics (REDG, ATOMG)"] == 1 and ballot["SASS votes (VOTE, VOTEU)"] >= 1
    # compaction, the returned slot used: aggregated too, the slot broadcast with a shuffle
    compact = table.loc["compact_above_per_lane"]
    assert compact["SASS votes (VOTE, VOTEU)"] >= 1 and compact["SASS shuffles (SHFL)"] >= 1
    # different addresses: no vote, every lane's update goes out
    assert table.loc["histogram_per_lane", "SASS votes (VOTE, VOTEU)"] == 0


def test_the_recordings_show_one_atomic_instruction_per_warp_for_the_per_lane_kernel():
    from gpucourse.measure import ncu

    metric = "smsp__sass_inst_executed_op_global_atom.sum + smsp__sass_inst_executed_op_global_red.sum"
    found = ncu.recordings("count_above_per_lane")
    assert {r.gpu for r in found} >= {"nvidia-h100-80gb-hbm3", "nvidia-h200"}
    for recording in found:
        assert recording.per_warp(metric) == 1.0, recording.caption()


LESSON = Path(__file__).resolve().parents[1] / "notebooks" / "04a_reductions.py"
INSTRUCTOR = Path(__file__).resolve().parents[1] / "instructor" / "04a_reductions.md"
LAB = Path(__file__).resolve().parents[1] / "solutions" / "lab04a_reductions" / "lab04a_reductions.py"


def _prose(path: Path) -> str:
    """The text with comment marks and line breaks gone: a phrase split over two lines is found whole."""
    return " ".join(re.sub(r"^# ?", "", path.read_text(), flags=re.MULTILINE).split())


@pytest.mark.parametrize("path", [LESSON, INSTRUCTOR, LAB], ids=lambda p: p.name)
def test_no_text_says_the_per_lane_atomics_reach_the_l2_one_per_lane(path):
    text = _prose(path)
    for wrong in ("which the L2 performs one after another", "counts what a GPU would do",
                  "up to 32 atomics per warp, all on one address"):
        assert wrong not in text, f"{path.name}: {wrong!r}"
    assert not re.search(r"~\s*50 atomics", text), path.name


def test_the_lesson_says_the_microscope_counts_source_atomics_and_shows_the_sass():
    text = _prose(LESSON)
    assert "counts what the **source** asks for" in text
    assert "compiled.atomics_as_compiled()" in text and "VOTEU.ANY" in text and "REDG" in text
    assert 'ncu.beside_recorded(trace(kernels.count_above_per_lane' in text


def test_the_lesson_words_fixed_by_the_review_stay_fixed():
    text = _prose(LESSON)
    assert "warp instructions" not in text  # source lines are "warp line issues" (not SASS instructions)
    assert "generates and tunes" not in text and "does not autotune" in text
    assert "about as many threads as values" in text and "2-way at B = 64" in text
    # the strided-index kernel is printed before its prediction
    assert text.index("getsource(kernels.strided_index_kernel)") < text.index("prediction_strided_index_max_ways")
    assert "optional, 12 min" in text and "optional, 8 min" in text  # tests/test_minutes.py: the rule


def test_blelloch_bank_conflict_grows_with_the_block():
    ways = {b: reductions.scan_counts(b).set_index("scan").loc["Blelloch", "max bank ways"] for b in (64, 128)}
    assert ways == {64: 2, 128: 4}


def test_counts_chart_stacks_legend_plots_ticks_and_caption():
    fig = reductions.counts_figure(128, 64)
    assert fig.layout.legend.yref == "container" and fig.layout.legend.y > 0.85  # above the plots
    caption = next(a for a in fig.layout.annotations if a.name == "source")
    assert caption.y == 0 and caption.yshift <= -80  # below the rotated tick labels
    lines = caption.text.count("<br>") + 1
    assert fig.layout.margin.b >= -caption.yshift + 16 * lines  # and inside the figure
    assert "warp line issues" in fig.layout.annotations[2].text


def test_atomics_as_compiled_says_so_without_the_cuda_packages(monkeypatch):
    """macOS or Windows (test-platforms' "nocuda"): numba-cuda's PTX compiler is not there, and its package
    metadata neither; the lesson's cell prints one line that says so, not a PackageNotFoundError."""
    from importlib import metadata

    from gpucourse.lessons.reductions import compiled

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    monkeypatch.setattr(compiled.ptxinfo, "compile_ptx",
                        lambda pairs, cc: [{"error": "No module named 'numba.cuda'"} for _ in pairs])
    compiled.atomics_as_compiled.cache_clear()
    try:
        table = compiled.atomics_as_compiled()
    finally:
        compiled.atomics_as_compiled.cache_clear()
    assert "cannot compile PTX here" in table.attrs["source"] and "numba.cuda" in table.attrs["source"]
    assert table["PTX atomics (atom/red)"].isna().all() and table.attrs["sass"] == {}
