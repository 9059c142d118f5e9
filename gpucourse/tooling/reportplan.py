"""What gpu-report's plan uses beyond its models (issue 48): the first reservation's tests and sweeps, and the
seconds the last real report of a profile took per step (``data/reference/<gpu>/gpu-report.md``)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# The first reservation (``--targets``, issue 48): the expectations of lessons 03, 04, 04a and 05 first, in that
# order and under the full contract (they sit within 5-15 % of their thresholds), never cut by --budget; then the
# sweeps that draw those lessons' charts, with their quick plans (recordings marked quick), as the budget allows.
TARGET_TEST_FILES = ("test_gpu_coalescing.py", "test_gpu_tiling.py", "test_gpu_reductions.py",
                     "test_gpu_occupancy.py")
TARGET_SWEEPS = ("coalescing.stride", "coalescing.offset", "coalescing.layout", "tiling.matmul", "tiling.transpose",
                 "reductions.sum", "occupancy.memory_resident", "occupancy.compute_unrolled", "occupancy.memory_bound",
                 "occupancy.driver")
TARGETS_TIER = "tier targets"
TARGETS_PLAN_LIMIT_S = 480.0  # the first reservation's plan, start-up included: at most 8 minutes


_STEP_ROW = re.compile(r"^\| (?P<name>[^|]+?) \| done \| (?P<seconds>[\d.]+) \| (?P<estimate>[\d.]+) \|", re.MULTILINE)


def recorded_step_seconds(quick: bool, root: Path = ROOT / "data" / "reference") -> dict[str, tuple[float, float]]:
    """(seconds, the plan's estimate then) of each step in the last real report of this profile committed under
    ``root`` (``<gpu>/gpu-report.md``; never a rehearsal), the slowest GPU's where several have one: what the plan
    uses instead of its model for a step that ran there. The tier is left out (its tests change from run to run)."""
    seconds: dict[str, tuple[float, float]] = {}
    for path in sorted(root.glob("*/gpu-report.md")):
        text = path.read_text(encoding="utf-8")
        title = text.splitlines()[0] if text else ""
        if "REHEARSAL" in title or ("(QUICK)" in title or "(TARGETS)" in title) != quick:  # targets: quick sweeps
            continue
        for row in _STEP_ROW.finditer(text):
            name = row["name"].strip()
            if name not in ("tier", TARGETS_TIER) and float(row["seconds"]) >= seconds.get(name, (0.0, 0.0))[0]:
                seconds[name] = (float(row["seconds"]), float(row["estimate"]))
    return seconds


def scaled_estimate(name: str, model_s: float, recorded: dict[str, tuple[float, float]]) -> float:
    """A step's estimate: the model's, or the seconds it took in the last real run scaled by how the model's
    estimate moved since (a plan with more points, a changed model): an unchanged step gets what it took."""
    took, then = recorded.get(name, (None, None))
    estimate = model_s if took is None or not then else took * model_s / then
    return round(max(estimate, 0.1), 1)
