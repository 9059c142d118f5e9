"""Does the microscope agree with Nsight Compute? One rule per metric, from the metric's exactness claim.

A metric declared exact must be equal (counts compared per block when the two launches differ in
size, ratios as they are). A count on source lines is held to what both can tell: whether any warp
diverged. Where a kernel is known to differ (ptxas vectorised its loads, aggregated its atomics,
predicated its branches), the difference is declared as a ``Relation`` with its reason and checked
as declared: the catalogue of agreement (``gpucourse.tooling.ncu_catalogue``) lists them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from gpucourse.hardware import WARP_SIZE
from gpucourse.microscope.ncu_metrics import (
    CALCULATOR,
    EXACT,
    LAUNCH,
    METRICS,
    PER_ACCESS,
    RATIO,
    Metric,
)

EQUAL = "equal"
SCALED = "scaled"  # ncu = factor × microscope (a known compiler transformation), within an allowance
BOTH_FULL = "both full or both below"  # 32 threads per instruction, 100 % uniform branches
NO_SASS_BRANCH = "no SASS branch"  # ptxas predicated every branch: ncu's branch percentages say nothing
PREDICATED = "ncu's branches uniform, the source's divergent ifs predicated"  # ncu full, the microscope below
SHOWN = "shown, not compared"
RATIO_DIGITS_TOLERANCE = 0.005  # ncu's CSV prints ratios and percentages with 2 decimals

THREADS_PER_INSTRUCTION = "smsp__thread_inst_executed_per_inst_executed.ratio"
BRANCH_UNIFORM = "smsp__sass_average_branch_targets_threads_uniform.pct"
BRANCH_TARGETS = "smsp__sass_branch_targets.sum"
SHARED_LOAD_WAVEFRONTS = "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"


@dataclass(frozen=True)
class Relation:
    """How ncu's value must relate to the microscope's, and why."""

    kind: str
    reason: str = ""
    factor: Fraction = Fraction(1)
    # SCALED: |ncu − factor × microscope| ≤ allowance × ncu's shared-load wavefronts (counts) or × ncu (ratios)
    allowance: float = 0.0

    def describe(self) -> str:
        if self.kind == SCALED:
            extra = f" ± {self.allowance:g} × shared-load wavefronts" if self.allowance else ""
            return f"ncu = {self.factor} × microscope{extra}"
        return self.kind


def is_count(metric: Metric) -> bool:
    """A count over the launch (it grows with the grid), as opposed to a ratio or a launch property."""
    if metric.section == LAUNCH:
        return metric.name == "launch__thread_count"
    return metric.combine != RATIO and metric.unit not in ("%", "thread", "")


def default_relation(metric: Metric, raw: dict) -> Relation:
    """The rule a metric's exactness claim sets, given ncu's raw values for the kernel."""
    if metric.microscope_only:
        return Relation(SHOWN, "no ncu counter measures it")
    if metric.exactness in (EXACT, PER_ACCESS, CALCULATOR):
        return Relation(EQUAL, f"declared {metric.exactness}")
    if metric.name in (BRANCH_UNIFORM, BRANCH_TARGETS) and raw.get(BRANCH_TARGETS) == 0:
        return Relation(NO_SASS_BRANCH, "ncu executed no SASS branch (smsp__sass_branch_targets.sum = 0): ptxas "
                        "predicated every if; its branch percentage is 0 of 0")
    if metric.name in (THREADS_PER_INSTRUCTION, BRANCH_UNIFORM):
        return Relation(BOTH_FULL, "source lines vs SASS: only whether some warp diverged is comparable")
    return Relation(SHOWN, "source lines vs SASS instructions: different units")


def _full(metric: Metric, value, raw: dict | None) -> bool:
    if metric.name == THREADS_PER_INSTRUCTION:
        if raw is not None and raw.get("smsp__thread_inst_executed.sum") is not None and raw.get(
                "smsp__inst_executed.sum"):
            # The sums are exact where the printed ratio is rounded to 2 decimals.
            return raw["smsp__thread_inst_executed.sum"] == WARP_SIZE * raw["smsp__inst_executed.sum"]
        return value == WARP_SIZE
    return value == 100


def holds(relation: Relation, metric: Metric, microscope, ncu, raw: dict, wavefronts: float = 0.0) -> bool | None:
    """True/False: the relation holds or not; None: nothing to compare (not measured, or not comparable).
    ``wavefronts``: ncu's shared-load wavefronts at the scale of ``ncu`` (a SCALED relation's allowance)."""
    if relation.kind == SHOWN or ncu is None:
        return None
    if relation.kind == NO_SASS_BRANCH:
        return bool(raw.get(BRANCH_TARGETS) == 0)  # the stated reason must hold
    if relation.kind in (BOTH_FULL, PREDICATED):
        # No line the lanes could split at (None) counts as full: nothing diverged.
        mine, theirs = microscope is None or _full(metric, microscope, None), _full(metric, ncu, raw)
        return bool(mine == theirs if relation.kind == BOTH_FULL else theirs and not mine)
    if microscope is None:
        return None  # e.g. the register limit when no registers were given
    if relation.kind == EQUAL:
        if isinstance(microscope, str) or isinstance(ncu, str):
            return bool(microscope == ncu)
        if is_count(metric) or metric.combine == RATIO:  # from ncu's integer sums: exact
            return math.isclose(microscope, ncu, rel_tol=1e-9, abs_tol=1e-9)
        return bool(abs(microscope - ncu) <= RATIO_DIGITS_TOLERANCE)
    if relation.kind == SCALED:
        return bool(abs(ncu - float(relation.factor) * microscope) <= relation.allowance * wavefronts + 1e-9)
    raise ValueError(f"unknown relation {relation.kind!r}")


def compare(profile, raw: dict, ncu_blocks: int, overrides: dict | None = None, kernel: str = "") -> list[dict]:
    """One row per metric: the microscope's value and ncu's (counts per block when the launches differ),
    the relation that must hold, and whether it does. ``overrides``: metric name -> Relation."""
    overrides = overrides or {}
    rows = []
    for metric in METRICS:
        micro, ncu = profile.value(metric.name), metric.ncu_value(raw)
        per_block = is_count(metric)
        if per_block:
            micro = None if micro is None else micro / profile.blocks
            ncu = None if ncu is None else ncu / ncu_blocks
        relation = overrides.get(metric.name) or default_relation(metric, raw)
        # A SCALED relation's allowance: a fraction of ncu's shared-load wavefronts (counts), of ncu's value (ratios).
        wavefronts = (raw.get(SHARED_LOAD_WAVEFRONTS) or 0) / ncu_blocks if per_block else abs(ncu or 0)
        rows.append({
            "kernel": kernel,
            "metric": metric.name,
            "label": metric.label,
            "exactness": metric.exactness,
            "scale": "per block" if per_block else "as is",
            "microscope": micro,
            "ncu": ncu,
            "relation": relation.describe(),
            "agrees": holds(relation, metric, micro, ncu, raw, wavefronts),
            "reason": relation.reason,
        })
    return rows
