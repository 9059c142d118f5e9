"""Sweep plans: a registered sweep run at other sizes, by patching module constants and defaults.

Two sets use them: the rehearsal's (``rehearsal.SWEEP_PLANS``: simulator sizes, seconds on a CPU)
and the quick GPU report's (``QUICK_PLANS``: the points a validation run keeps, minutes on a GPU).

    with patched(plan_patches(QUICK_PLANS["divergence.fraction"])):
        frame = reference.load_all_sweeps()["divergence.fraction"].run()
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass
class SweepPlan:
    """How one registered sweep is rehearsed: module attributes and function defaults to shrink."""

    attributes: dict[str, object] = field(default_factory=dict)  # "module.NAME": value
    defaults: dict[str, dict[str, object]] = field(default_factory=dict)  # "module.function": {arg: value}
    not_rehearsable: str = ""  # why it cannot run on the simulator
    stand_in: str = ""  # what answers for the GPU where the simulator alone cannot (recorded in the provenance)
    measurements: int = 0  # quick plans: how many harness measurements the plan makes (its time estimate)



def _resolve(dotted: str):
    module, _, name = dotted.rpartition(".")
    return importlib.import_module(module), name


@contextlib.contextmanager
def patched(patches: list[tuple[object, str, object]]) -> Iterator[None]:
    missing = object()
    saved = [(obj, name, getattr(obj, name, missing)) for obj, name, _ in patches]
    try:
        for obj, name, value in patches:
            setattr(obj, name, value)
        yield
    finally:
        for obj, name, value in reversed(saved):
            if value is missing:
                delattr(obj, name)
            else:
                setattr(obj, name, value)


def _default_patches(fn, new: dict[str, object]) -> list[tuple[object, str, object]]:
    """Replace some default arguments of ``fn`` (positional-or-keyword and keyword-only)."""
    params = inspect.signature(fn).parameters
    unknown = set(new) - set(params)
    if unknown:
        raise TypeError(f"{fn.__qualname__} has no argument(s) {sorted(unknown)}")
    positional = [p for p in params.values() if p.kind is p.POSITIONAL_OR_KEYWORD and p.default is not p.empty]
    defaults = tuple(new.get(p.name, p.default) for p in positional)
    kwdefaults = {p.name: new.get(p.name, p.default) for p in params.values()
                  if p.kind is p.KEYWORD_ONLY and p.default is not p.empty}
    return [(fn, "__defaults__", defaults or None), (fn, "__kwdefaults__", kwdefaults or None)]


def plan_patches(plan: SweepPlan) -> list[tuple[object, str, object]]:
    patches = []
    for dotted, value in plan.attributes.items():
        module, name = _resolve(dotted)
        patches.append((module, name, value))
    for dotted, new in plan.defaults.items():
        module, name = _resolve(dotted)
        patches += _default_patches(getattr(module, name), new)
    return patches




# --- the quick GPU report's plans (``gpu-report --quick``) ----------------------------------------------
# Each keeps the points its lesson's claim rests on (the ends of a curve and the step in it) at the
# lesson's own sizes, and says how many harness measurements it makes: with the quick contract that
# count is the plan's time estimate (``gpureport.estimate_s``). A sweep's full set of points is what
# `make record` takes; a quick recording is kept apart (``<gpu>/quick/``) and drawn labelled as quick
# (``reference.Recording.caption``), a full recording of the same sweep taking precedence.
_LESSONS = "gpucourse.lessons"
QUICK_PLANS: dict[str, SweepPlan] = {
    "warps.staircase": SweepPlan(measurements=5, defaults={
        f"{_LESSONS}.warps.measure_staircase": {"threads": (1, 32, 33, 64, 65)}}),
    "divergence.fraction": SweepPlan(measurements=8,
                                     attributes={f"{_LESSONS}.divergence.experiments.BODY_COSTS": (128,)},
                                     defaults={f"{_LESSONS}.divergence.measure_fraction_curve": {
                                         "placements": ("interleaved", "clustered"), "fractions": (0.0, 0.5, 1.0)}}),
    "divergence.sort_pays": SweepPlan(measurements=8, attributes={
        f"{_LESSONS}.divergence.experiments.SPARSE_DENSITIES": (0.25,)},
        defaults={f"{_LESSONS}.divergence.measure_sort_pays": {"bodies": (16, 256)}}),
    "coalescing.stride": SweepPlan(measurements=4, defaults={
        f"{_LESSONS}.coalescing.stride_sweep": {"dtypes": ("float32",), "strides": (1, 2, 8, 32)}}),
    "coalescing.offset": SweepPlan(measurements=4, defaults={
        f"{_LESSONS}.coalescing.offset_sweep": {"dtypes": ("float32",), "offsets": (0, 1, 16, 32)}}),
    "coalescing.layout": SweepPlan(measurements=4),
    "coalescing.work": SweepPlan(measurements=4),  # the four rungs: the chart's every point
    "occupancy.driver": SweepPlan(measurements=0, defaults={f"{_LESSONS}.occupancy.experiments.driver_comparison": {
        "threads": (64, 256, 1024), "dynamic_bytes": (0, 40960), "caps": (None, 32)}}),
    # lesson 05 (occupancy): the resident-grid copies, the first attempt (one element per thread), the FMAs
    "occupancy.memory_resident": SweepPlan(measurements=2, defaults={
        f"{_LESSONS}.occupancy.experiments.measure_speed": {"targets": (0.25, 1.0)}}),
    "occupancy.memory_bound": SweepPlan(measurements=2, defaults={
        f"{_LESSONS}.occupancy.experiments.measure_speed": {"targets": (0.25, 1.0)}}),
    "occupancy.compute_unrolled": SweepPlan(measurements=2, defaults={
        f"{_LESSONS}.occupancy.experiments.measure_speed": {"targets": (0.25, 1.0)}}),
    "precision.matmul": SweepPlan(measurements=5, defaults={
        f"{_LESSONS}.precision.experiments.matmul_sweep": {"sizes": (4096,)}}),
    "precision.vocab_shape": SweepPlan(measurements=4),
    "races.histogram": SweepPlan(measurements=6, defaults={
        f"{_LESSONS}.races.measure_histogram": {"bins_list": (1, 256)}}),
    "races.litmus_mp": SweepPlan(measurements=0, defaults={
        f"{_LESSONS}.races.experiments.run_litmus": {"rounds": 1000}}),
    "reductions.sum": SweepPlan(measurements=9, attributes={
        f"{_LESSONS}.reductions.experiments.SWEEP_SIZES": (1 << 24,)}),
    # N = 4096 (review gpu-recordings.md §4): at 1024 the 128-tile rungs have 64 blocks for an H200's 132 SMs
    "tiling.matmul": SweepPlan(measurements=11, attributes={f"{_LESSONS}.tiling.experiments._MEASURED": {}},
                               defaults={f"{_LESSONS}.tiling.experiments.measure_matmul_ladder": {"sizes": (4096,)}}),
    "tiling.transpose": SweepPlan(measurements=4, attributes={f"{_LESSONS}.tiling.experiments.TRANSPOSE_SIZES": (4096,),
                                                              f"{_LESSONS}.tiling.experiments._MEASURED": {}}),
    "feeding.copy": SweepPlan(measurements=6),
    "feeding.overlap": SweepPlan(measurements=0),
    "feeding.launch": SweepPlan(measurements=4),
    "feeding.sync": SweepPlan(measurements=2),
    "feeding.fusion": SweepPlan(measurements=4, defaults={
        f"{_LESSONS}.feeding.experiments.fusion_sweep": {"sizes": (1 << 16, 1 << 24)}}),
    "feeding.l2": SweepPlan(measurements=9, defaults={
        f"{_LESSONS}.feeding.experiments.l2_sweep": {"points_per_octave": 1}}),
    "measuring.async_pitfall": SweepPlan(measurements=2),
    "measuring.ceilings": SweepPlan(measurements=3),
}


# The full report's sweeps at the lessons' own sizes: how many harness measurements each makes (its time
# estimate, gpu-report's plan). Counted from each sweep's parameters (review gpu-mode-paths.md, section 5);
# a sweep not counted there is estimated from its quick plan's count, at least one measurement.
FULL_MEASUREMENTS = {
    # divergence.fraction: 3 path-A costs × 2 path-B kinds × 4 placements × 9 fractions, less 6 fractions of each
    # clustered curve with equal bodies, and the predicated kernel's 2 placements × 3 fractions (those curves flat
    # within their recorded spread: divergence.experiments.flat_within_spread, FLAT_TWO_PATHS): 204 points, of
    # which 166 launches differ (measure_fraction_curve measures each distinct flags array once: at fraction 0 and
    # 1 every placement's flags are the same)
    "coalescing.offset": 99, "coalescing.stride": 36, "divergence.fraction": 166, "divergence.sort_pays": 36,
    "occupancy.memory_resident": 14, "occupancy.memory_bound": 14, "occupancy.compute_unrolled": 14,
    "precision.matmul": 20,
    "precision.vocab_shape": 8, "races.histogram": 18, "reductions.sum": 36, "tiling.matmul": 55,
    "tiling.transpose": 16, "warps.staircase": 13,
}


def full_measurements(name: str) -> int:
    """How many harness measurements sweep ``name`` makes at the lesson's sizes (never 0: an estimate)."""
    quick = QUICK_PLANS.get(name)
    return FULL_MEASUREMENTS.get(name, max(quick.measurements if quick else 0, 1))
