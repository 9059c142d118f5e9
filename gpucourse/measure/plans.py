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


