"""measure/recording.py: how each recorded row says it was timed, and quick recordings kept apart."""

from __future__ import annotations

import pandas as pd

from gpucourse.measure import harness, recording


def _measurement(method: str, launches: int) -> harness.Measurement:
    return harness.Measurement(label="x", measured=True, method=method, launches_per_sample=launches)


def test_one_measurement_per_row_gives_each_row_its_method():
    frame = pd.DataFrame({"stride": [1, 2], "method": ["the sweep's own column", "kept"]})
    out, how = recording.with_methods(frame, [_measurement("queued", 256), _measurement("events", 1)])
    assert how == "per row"
    assert list(out.timing_method) == ["queued", "events"] and list(out.launches_per_sample) == [256, 1]
    assert list(out.method) == ["the sweep's own column", "kept"]  # a sweep's column is never overwritten


def test_other_shapes_carry_the_sweeps_methods_and_say_so():
    frame = pd.DataFrame({"n": [1, 2, 3]})
    out, how = recording.with_methods(frame, [_measurement("b", 2), _measurement("a", 1)])
    assert how == "per sweep (2 measurements for 3 rows)" and set(out.timing_method) == {"a; b"}
    assert "launches_per_sample" not in out
    same, how = recording.with_methods(frame, [])
    assert same is frame and how.startswith("no harness measurement")
