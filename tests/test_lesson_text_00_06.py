"""Lessons 00 and 06 say what the harness and the recordings do (review gpu-mode-paths G18, gpu-recordings §1.7):
each quoted constant is read back from the code, each quoted measurement from its recording."""

from __future__ import annotations

import pandas as pd
from prose import lesson_text as _text
from prose import number as _number

from gpucourse.measure import harness
from gpucourse.tooling.build import ROOT

H200 = ROOT / "data" / "reference" / "nvidia-h200" / "quick"


def test_lesson_00_states_the_harness_s_batching_and_contract():
    text = _text("00_measuring.py")
    assert "launches under ~10 µs are batched" not in text  # the old claim: the harness batches below 1 ms
    assert _number(r"kernels under ~([\d.]+) ms are timed as a batch", text) == harness.QUEUE_BELOW_MS
    assert _number(r"up to (\d+) launches between one pair of events", text) == harness.MAX_BATCH
    full = harness.CONTRACTS["full"]
    assert _number(r"warms up for ~(\d+) ms of GPU time", text) == full.warmup_ms
    assert _number(r"at least (\d+) samples and", text) == 10
    assert _number(r"samples and ([\d.]+) s of GPU time", text) * 1000 == full.min_total_ms
    assert _number(r"or (\d+) samples, whichever comes first", text) == harness.MAX_SAMPLES
    assert _number(r"a control redraws takes (\d+) ms", text) == harness.LIVE_MIN_TOTAL_MS


def test_lesson_00_s_kernel_time_is_the_recorded_one():
    text = _text("00_measuring.py")
    assert "A kernel runs for about 5 ms" not in text
    quoted_ms = _number(r"A kernel runs for about (\d+) ms", text)
    rec = pd.read_csv(H200 / "measuring.async_pitfall.csv")
    events_ms = rec[rec.method.str.startswith("device events")].ms.median()
    synced_ms = rec[rec.method == "wall clock + synchronize"].ms.median()
    assert round(events_ms) == quoted_ms and abs(synced_ms - quoted_ms) < 1


def test_lesson_06_describes_the_litmus_recording_that_exists():
    text = _text("06_races.py")
    assert "no GPU recording existed" not in text
    rec = pd.read_csv(H200 / "races.litmus_mp.csv")
    weak = rec[(rec.flag_seen == 1) & (rec.data_seen == 0)]
    assert set(weak.fences) == {"none", "producer", "consumer", "both"}
    assert (weak["count"] == 0).all()  # what the lesson says: zero in every placement
    assert "of `races.litmus_mp`: a quick one, on an NVIDIA H200" in text
    assert "It saw the weak outcome **zero** times in every placement" in text
