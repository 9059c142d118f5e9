"""What gpu-report's plan uses beyond its models (issue 48): the first reservation's tests and sweeps, and the
seconds the last real report of a profile took per step (``data/reference/<gpu>/gpu-report.md``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]

# The first reservation (``--targets``, issue 48): the expectations of lessons 03, 04, 04a and 05 first, in that
# order and under the full contract (they sit within 5-15 % of their thresholds), never cut by --budget; then the
# sweeps that draw those lessons' charts, with their quick plans (recordings marked quick), as the budget allows.
TARGET_TEST_FILES = ("test_gpu_coalescing.py", "test_gpu_tiling.py", "test_gpu_reductions.py",
                     "test_gpu_occupancy.py")
TARGET_SWEEPS = ("coalescing.stride", "coalescing.offset", "coalescing.layout", "coalescing.work", "tiling.matmul",
                 "tiling.transpose",
                 "reductions.sum", "occupancy.memory_resident", "occupancy.compute_unrolled", "occupancy.memory_bound",
                 "occupancy.driver")
TARGETS_TIER = "tier targets"
TARGETS_PLAN_LIMIT_S = 480.0  # the first reservation's plan, start-up included: at most 8 minutes


FULL_PLAN_LIMIT_S = 1200.0  # the full profile's plan, start-up included: at most 20 minutes of GPU time (issue 48)

# Steps whose work is the same in every profile, so the seconds a real report of any profile took stand for them:
# the ncu catalogue (a fixed list of launches under Nsight Compute) and the widget step (one move of lesson 01's
# chart, which a LiveChart measures under the live contract, harness.LIVE, whatever the report's contract).
PROFILE_FREE_STEPS = ("ncu catalogue", "widget")

_STEP_ROW = re.compile(r"^\| (?P<name>[^|]+?) \| done \| (?P<seconds>[\d.]+) \| (?P<estimate>[\d.]+) \|", re.MULTILINE)
_DEVICE = re.compile(r"^# GPU report[^:]*: (?P<device>.+)$", re.MULTILINE)
_DATE = re.compile(r'^  "date": "(?P<date>\d{4}-\d\d-\d\d)', re.MULTILINE)
_MOVE = re.compile(r"control moved to redrawn chart: (?P<seconds>[\d.]+) s\.")


class Recorded(NamedTuple):
    """A step of a real report: the seconds it took, the plan's estimate then, where and when it ran."""

    seconds: float
    estimate_s: float
    device: str = ""
    date: str = ""

    @property
    def where(self) -> str:
        return f"measured on {self.device or 'a GPU'} {self.date or '(no date)'}".strip()


def _real_reports(root: Path):
    """(text, profile) of every real report committed under ``root``: profile "quick" (a quick or targets
    report: quick sweeps) or "full"; a rehearsal is never one."""
    for path in sorted(root.glob("*/gpu-report.md")):
        text = path.read_text(encoding="utf-8")
        title = text.splitlines()[0] if text else ""
        if "REHEARSAL" not in title:
            yield text, ("quick" if ("(QUICK)" in title or "(TARGETS)" in title) else "full")


def _where(text: str) -> tuple[str, str]:
    device, date = _DEVICE.search(text), _DATE.search(text)
    return (device["device"].strip() if device else ""), (date["date"] if date else "")


def recorded_step_seconds(quick: bool, root: Path = ROOT / "data" / "reference") -> dict[str, Recorded]:
    """The seconds each step took in the last real report of this profile committed under ``root``
    (``<gpu>/gpu-report.md``; never a rehearsal), the slowest GPU's where several have one: what the plan uses
    instead of its model for a step that ran there. A step of ``PROFILE_FREE_STEPS`` is taken from a report of any
    profile. The tier is left out (its tests change from run to run)."""
    seconds: dict[str, Recorded] = {}
    for text, profile in _real_reports(root):
        device, date = _where(text)
        for row in _STEP_ROW.finditer(text):
            name = row["name"].strip()
            if name in ("tier", TARGETS_TIER) or (profile != ("quick" if quick else "full")
                                                   and name not in PROFILE_FREE_STEPS):
                continue
            if name not in seconds or float(row["seconds"]) >= seconds[name].seconds:
                seconds[name] = Recorded(float(row["seconds"]), float(row["estimate"]), device, date)
    return seconds


def recorded_move_s(root: Path = ROOT / "data" / "reference") -> Recorded | None:
    """The slowest widget move a real report measured on a GPU (its "Widget response" line: lesson 01's chart,
    control moved to redrawn chart), or None. A move is measured under the live contract in every profile."""
    found = None
    for text, _profile in _real_reports(root):
        move = _MOVE.search(text)
        if move and (found is None or float(move["seconds"]) > found.seconds):
            found = Recorded(float(move["seconds"]), 0.0, *_where(text))
    return found


def scaled_estimate(name: str, model_s: float, recorded: dict[str, Recorded]) -> tuple[float, str]:
    """A step's estimate and where it comes from: the model's ("estimate"), or the seconds it took in the last
    real run ("measured on <gpu> <date>"), scaled by how the model's estimate moved since (a plan with more
    points, a changed model; the label then says by how much): an unchanged step gets what it took."""
    found = recorded.get(name)
    if found is None or not found.estimate_s:
        return round(max(model_s, 0.1), 1), "estimate"
    factor = 1.0 if name in PROFILE_FREE_STEPS else model_s / found.estimate_s  # the same work in every profile
    label = found.where + ("" if abs(factor - 1) < 0.005 else f", × {factor:.2f} for the plan's change since")
    return round(max(found.seconds * factor, 0.1), 1), label
