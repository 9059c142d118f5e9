"""Lesson 06 on a real GPU (`pytest -m gpu`): lost updates are real, atomics are exact, privatisation
pays at high contention, and the litmus harness always finishes and accounts for every run.

Performance expectations are ratios measured in one run, never absolute times."""

import numpy as np
import pytest

from gpucourse.lessons import races
from gpucourse.measure import runtime
from gpucourse.viz import charts

pytestmark = pytest.mark.gpu


def test_histogram_16_bins_1e7_items_lost_exact_and_privatised_3x_faster():
    data = races.measure_histogram([16], 10**7).set_index("variant")
    assert data.loc["racy", "lost"] > 0, "a non-atomic histogram over 10^7 items into 16 bins loses counts"
    assert data.loc["atomic", "lost"] == 0 and data.loc["privatised", "lost"] == 0
    ratio = data.loc["atomic", "median_ms"] / data.loc["privatised", "median_ms"]
    assert ratio >= 3, f"privatised only {ratio:.2f}x faster than global atomics at 16 bins"


def test_lost_updates_table_on_the_gpu():
    table = races.lost_updates(bins=16, items=10**6, seed=0)
    gpu = table[table["where"].str.startswith("GPU")].set_index("variant")
    assert gpu.loc["racy", "lost"] > 0 and gpu.loc["racy", "wrong_bins"] > 0
    assert gpu.loc["atomic", "lost"] == 0 and gpu.loc["privatised", "wrong_bins"] == 0
    scheduler = table[table["where"].str.startswith("race scheduler")]
    assert len(scheduler) == 3  # the race scheduler's copy of the experiment runs in GPU mode too


def test_racing_counter_on_the_gpu():
    row = races.counter_demo(threads=2048, blocks=8).iloc[0]
    assert row.run.startswith("GPU") and row.counter < 2048  # 32 lanes of a warp store over each other at least


@pytest.mark.parametrize("fences", races.LITMUS_FENCES)
def test_litmus_harness_finishes_and_counts_every_run(fences):
    pairs = runtime.device().sm_count
    counts = races.run_litmus(fences, rounds=300, spin_cap=10_000)
    assert list(counts.outcome) == list(races.OUTCOMES.values())
    assert counts["count"].sum() == 300 * pairs == counts.runs.iloc[0]
    if fences == "both":  # the model forbids it; seeing it would mean the harness (or the chip) is wrong
        weak = counts[(counts.flag_seen == 1) & (counts.data_seen == 0)]["count"].sum()
        assert weak == 0


def test_litmus_harness_without_waiting_still_accounts_for_every_run():
    counts = races.run_litmus("none", rounds=100, spin_cap=0)  # read the flag once: "not yet" is an outcome too
    assert counts["count"].sum() == 100 * runtime.device().sm_count


def test_last_block_reduction_on_the_gpu():
    values = np.random.default_rng(0).random(1 << 20)
    blocks = 4 * runtime.device().sm_count
    d_values = runtime.cuda.to_device(values)
    d_partial = runtime.cuda.device_array(blocks, dtype=np.float64)
    d_ticket = runtime.cuda.to_device(np.zeros(1, np.uint32))
    d_out = runtime.cuda.to_device(np.zeros(1))
    for _ in range(3):  # the ticket wraps to 0, so the kernel can be launched again
        races.reduce_last_block[blocks, races.REDUCE_THREADS](d_values, d_partial, d_ticket, d_out, 1)
        np.testing.assert_allclose(d_out.copy_to_host()[0], values.sum(), rtol=1e-12)
    assert d_ticket.copy_to_host()[0] == 0


def test_training_with_atomic_merges_matches_numpy():
    correct = races.train(steps=5, racy=False, examples=1 << 14, block=256)
    x, y = races.training_data(1 << 14, 4, 0)
    w, exact = np.zeros(4), []
    for _ in range(5):
        exact.append(np.mean((x @ w - y) ** 2) / 2)
        w = w - 0.3 * (x.T @ (x @ w - y)) / (1 << 14)
    np.testing.assert_allclose(correct, exact, rtol=1e-3)
    assert np.isfinite(races.train(steps=5, racy=True, examples=1 << 14, block=256)).all()


def test_figures_say_they_were_measured():
    fig = races.histogram_figure(bins=16, items=10**5)
    assert "measured on" in charts.caption_of(fig) and "measured now on" in charts.caption_of(fig)
    assert len(fig.data) == 3  # lost: GPU, lost: race scheduler, time
    assert races.training_figure(steps=3).layout.yaxis.type == "log"
