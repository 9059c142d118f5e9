"""Lesson 08 against the recordings (review gpu-recordings §1.6, §6 item 6): the L2 at 2× its size,
launch costs by who launches, DMA latency vs a Python-issued copy. The numbers the lesson quotes are
read back from the recordings they cite, and the model's comparison is tested on known cases."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from gpucourse.errors import InvalidConfig
from gpucourse.lessons.feeding import model
from gpucourse.tooling.build import ROOT

H200 = ROOT / "data" / "reference" / "nvidia-h200" / "quick"
PROBE = ROOT / "data" / "reference" / "nvidia-h100-80gb-hbm3" / "first-contact" / "probe.jsonl"
L2 = 60 * 2**20


def _lesson() -> str:
    return " ".join(line.lstrip("# ") for line in (ROOT / "notebooks" / "08_feeding.py").read_text().splitlines())


def _sweep(rates: dict[float, float]) -> pd.DataFrame:
    return pd.DataFrame([{"working_set_bytes": int(k * L2), "l2_bytes": L2, "gbps": v} for k, v in rates.items()])


def test_a_sweep_that_follows_the_model_matches_it_everywhere():
    sizes = [0.25, 1, 2, 4, 16]
    rows = _sweep({k: model.l2_gbps(int(k * L2), L2, 3000.0) for k in sizes})
    vs = model.l2_model_vs(rows)
    assert list(vs["working set / L2"]) == sizes
    assert vs["data / model"].to_numpy() == pytest.approx([1.0] * len(sizes))


def test_a_strict_lru_that_keeps_nothing_past_the_l2_is_below_the_model_at_twice_its_size():
    # the known-wrong picture the lesson used to draw ("past the L2's size the rate falls to HBM's")
    vs = model.l2_model_vs(_sweep({0.5: 7500.0, 1: 7500.0, 2: 3000.0, 4: 3000.0, 16: 3000.0}))
    assert vs.loc[vs["working set / L2"] == 2, "data / model"].item() < 0.75


def test_the_h200_keeps_more_than_the_model_at_twice_the_l2_and_less_at_four_times():
    vs = model.l2_model_vs(pd.read_csv(H200 / "feeding.l2.csv"))
    at = dict(zip(vs["working set / L2"].round(3), vs["data / model"]))
    assert at[2.0] > 1.5 and at[4.0] < 1.0 and at[1.0] == pytest.approx(1.0)


@pytest.mark.parametrize("rates", [{2: 5000.0, 4: 3000.0}, {0.5: 7000.0, 2: 5000.0}])
def test_a_sweep_without_both_plateaus_is_refused_in_one_line(rates):
    with pytest.raises(InvalidConfig, match="within the L2 and one past twice"):
        model.l2_model_vs(_sweep(rates))
    with pytest.raises(InvalidConfig, match="column 'gbps'"):
        model.l2_model_vs(pd.DataFrame({"working_set_bytes": [1], "l2_bytes": [1]}))


def _gbps_in(text: str, phrase: str) -> int:
    found = re.search(r"([\d,]+) GB/s" + re.escape(phrase), text)
    assert found, phrase
    return int(found.group(1).replace(",", ""))


def test_the_lesson_quotes_the_l2_recording_and_the_model_as_they_are():
    text = _lesson()
    assert "past the L2's size the rate falls to HBM's" not in text
    rec = pd.read_csv(H200 / "feeding.l2.csv").set_index("working_set_bytes").gbps
    vs = model.l2_model_vs(pd.read_csv(H200 / "feeding.l2.csv"))
    assert _gbps_in(text, ", nearly its") == round(rec[2 * 62914560])
    assert _gbps_in(text, " at the L2's size") == round(rec[62914560])
    assert _gbps_in(text, ", near HBM's") == round(rec[4 * 62914560])
    assert int(re.search(r"HBM's ([\d,]+) and below the model", text).group(1).replace(",", "")) == round(rec.iloc[-1])
    expected = int(re.search(r"the model expects about ([\d,]+)", text).group(1).replace(",", ""))
    assert expected == round(vs.loc[vs["working set / L2"] == 2, "model GB/s"].item(), -2)
    assert "hypothesis" in text.split("keeps *more*")[1][:700]


def test_the_lesson_quotes_launch_costs_by_who_launches():
    text = _lesson()
    assert "Each launch costs the host a few microseconds" not in text
    costs = next(json.loads(line) for line in PROBE.read_text().splitlines() if '"launch_costs"' in line)["us_per_call"]
    for name, before, after in (("torch add_", "torch `add_` cost ", " µs"), ("cupy add", "CuPy add ", " µs"),
                                ("numba, empty kernel", "Numba launch ", " µs"),
                                ("numba, 3 CuPy arrays", "and ", " µs with three")):
        quoted = re.search(re.escape(before) + r"([\d.]+)" + re.escape(after), text)
        assert quoted and abs(float(quoted.group(1)) - costs[name]) <= 0.051, (name, costs[name])
    low, high = round(costs["numba, empty kernel"]), round(costs["numba, 3 CuPy arrays"])
    assert f"Numba's {low}–{high} µs" in text
    assert "Numba" in model.PARAM_SOURCES["launch_us"] and f"{costs['numba, 3 CuPy arrays']:.1f}" in (
        model.PARAM_SOURCES["launch_us"])


def test_the_lesson_separates_dma_latency_from_a_python_issued_copy():
    text = _lesson()
    copies = pd.read_csv(H200 / "feeding.copy.csv")
    small_us = copies[copies.bytes == 4096].median_ms * 1e3
    quoted = int(re.search(r"about (\d+) µs for 4 KiB", text).group(1))
    assert all(abs(quoted - us) <= 5 for us in small_us)  # "about 70": both memories' 4 KiB copies
    assert f"model's {model.DEFAULTS.copy_latency_us:.0f} µs is the device side" in text
    assert quoted > 5 * model.DEFAULTS.copy_latency_us  # two different latencies, not one
