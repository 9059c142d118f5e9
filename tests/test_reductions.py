"""Lesson 04a: the reduction ladder and the scans give the right answers on ragged sizes (in the
simulator), the model's counts match numbers worked by hand, and the microscope counts the same."""

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
    assert counts.loc["warp shuffle", "warp instructions"] < counts.loc["sequential", "warp instructions"]


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
def test_the_ladder_without_a_gpu_says_so():
    fig = reductions.ladder_figure()
    assert "No GPU" in fig.layout.title.text
    assert "only on a GPU" in charts.caption_of(fig)


@sim_only
def test_measuring_needs_a_gpu():
    from gpucourse.errors import NoGPU

    with pytest.raises(NoGPU):
        reductions.measure_reductions(1024)
