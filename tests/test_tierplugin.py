"""gpu-report's tier plugin keeps every property a GPU test records (gpu-recordings review §4), JSON-safe, and
gpu-report's children do not call their parent a process sharing the GPU (gpu-mode review G12)."""

from __future__ import annotations

import json
import os

import numpy as np

from gpucourse.measure import gpuinfo
from gpucourse.tooling import gpureport, tierplugin

DEMO = '''"""Lesson 99 on a real GPU: demo."""
import math

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


def test_ladder(record_property):
    """the best rung is reported against cuBLAS"""
    record_property("matmul_ladder", {"naive": np.float64(812.5), "tiled 32": 2400.0, "cuBLAS": 51270})
    record_property("best_rung_fraction_of_cublas", np.float32(0.25))
    record_property("sizes", np.array([1024, 4096]))
    record_property("bf16_over_fp32", math.nan)
    record_property("ratio", 3.5)
    record_property("threshold", 3.0)
    assert 3.5 >= 3.0


def test_transpose(record_property):
    record_property("transpose_ladder", ("copy", 4271.0, object))
    assert False
'''


def test_every_recorded_property_is_kept_json_safe(tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_gpu_demo.py").write_text(DEMO)
    out = tmp_path / "out"
    rows = {r["claim"]: r for r in gpureport.run_gpu_tier(out, practice=False, tests=tests)}
    ladder = rows["the best rung is reported against cuBLAS"]
    assert ladder["outcome"] == "passed" and (ladder["ratio"], ladder["threshold"]) == (3.5, 3.0)
    kept = json.loads((out / "expectations.json").read_text())  # what the report's folder keeps
    properties = {row["claim"]: row["properties"] for row in kept}
    assert properties["the best rung is reported against cuBLAS"] == {
        "matmul_ladder": {"naive": 812.5, "tiled 32": 2400.0, "cuBLAS": 51270},
        "best_rung_fraction_of_cublas": 0.25, "sizes": [1024, 4096], "bf16_over_fp32": "nan",
        "ratio": 3.5, "threshold": 3.0}
    transpose = properties["transpose"]["transpose_ladder"]
    assert transpose[:2] == ["copy", 4271.0] and transpose[2].startswith("<class")  # a failed test keeps them too
    assert ladder["properties"]["matmul_ladder"]["naive"] == 812.5  # and so do the report's rows


def test_json_safe_turns_what_json_cannot_hold_into_numbers_lists_or_text():
    assert tierplugin.json_safe(np.int64(7)) == 7 and isinstance(tierplugin.json_safe(np.int64(7)), int)
    assert tierplugin.json_safe(float("inf")) == "inf"
    assert tierplugin.json_safe({1: {2, 3}}) in ({"1": [2, 3]}, {"1": [3, 2]})
    assert json.dumps(tierplugin.json_safe({"a": np.arange(3), "b": (np.float32(1.5), None)}))
    assert tierplugin.json_safe(object()).startswith("<object")


# --- G12: gpu-report's parent holds a context; its children must not call that "shared" ---------------------


def test_the_parent_named_in_the_environment_is_not_another_user():
    parent = 4242
    # the child (this process) and gpu-report's parent: alone
    assert gpuinfo.gpu_sharing([os.getpid(), parent], family={parent}).state == "alone"
    # a third process is another user
    assert gpuinfo.gpu_sharing([os.getpid(), parent, 77], family={parent}).others == 1
    # in a container NVML lists host PIDs: the parent is still one of the processes, counted by number
    assert gpuinfo.gpu_sharing([91001, 91002], family={parent}).state == "alone"
    assert gpuinfo.gpu_sharing([91001, 91002, 91003], family={parent}).others == 1
    # without the parent's PID (before the fix): the parent counts as another user
    assert gpuinfo.gpu_sharing([os.getpid(), parent], family=set()).state == "shared"
    # the parent itself, named in its own environment, still counts itself once, not twice
    assert gpuinfo.gpu_sharing([os.getpid(), 77], family={os.getpid()}).others == 1


def test_family_pids_are_read_from_the_environment():
    assert gpuinfo.family_pids({gpuinfo.FAMILY_PIDS_VARIABLE: "12,34, x"}) == {12, 34}
    assert gpuinfo.family_pids({}) == set()


def test_gpu_report_names_itself_to_its_children(tmp_path, monkeypatch):
    seen = {}

    def steps(*args, **kwargs):
        seen["family"] = os.environ.get(gpuinfo.FAMILY_PIDS_VARIABLE)

    monkeypatch.setattr(gpureport, "_run_steps", steps)
    monkeypatch.setattr(gpureport, "pack", lambda out: out / gpureport.ARCHIVE)
    monkeypatch.delenv(gpuinfo.FAMILY_PIDS_VARIABLE, raising=False)
    gpureport.build(tmp_path / "out", practice=True, run_tier=False)
    assert seen["family"] == str(os.getpid())
    assert gpuinfo.FAMILY_PIDS_VARIABLE not in os.environ  # put back afterwards
