"""``make record``: run registered sweeps on this GPU and write their CSVs and provenance.

    python -m gpucourse record [SWEEP ...]        # into data/reference/<gpu>/
    recording.record(names, root=..., quick=True)  # gpu-report --quick: into <root>/<gpu>/quick/

One direction: this module uses the format and registry (reference) and the rehearsal; neither
imports it. Each row carries how it was timed (``method``, ``launches_per_sample``, from the
harness's ledger), every ceiling is measured afresh for the recording, and a quick recording (the
validation contract and ``plans.QUICK_PLANS``) is marked so and kept apart in ``<gpu>/quick/``; the
lessons draw it labelled with its contract (``reference.Recording.caption``), never as a full one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from gpucourse.errors import CourseError, InvalidConfig, NoGPU
from gpucourse.measure import ceilings, harness, rehearsal, runtime
from gpucourse.measure.plans import QUICK_PLANS, patched, plan_patches
from gpucourse.measure.reference import PROVENANCE_FILE, QUICK_FOLDER, REFERENCE_ROOT, load_all_sweeps


def folder_for(root: Path, *, practice: bool, quick: bool) -> Path:
    """Where a recording goes: ``<root>/<gpu slug>/`` (``quick/`` inside it for a quick one)."""
    folder = Path(root) / (rehearsal.SLUG if practice else runtime.device().slug)
    return folder / QUICK_FOLDER if quick else folder


METHOD_COLUMN, LAUNCHES_COLUMN = "timing_method", "launches_per_sample"


def with_methods(frame: pd.DataFrame, measured: list[harness.Measurement]) -> tuple[pd.DataFrame, str]:
    """The frame with ``timing_method`` and ``launches_per_sample`` columns: per row where the sweep
    made one measurement per row, in order; otherwise the sweep's methods on every row (no launch count)."""
    if not measured:
        return frame, "no harness measurement (timed another way)"
    if len(measured) == len(frame):
        return frame.assign(**{METHOD_COLUMN: [m.method for m in measured],
                               LAUNCHES_COLUMN: [m.launches_per_sample for m in measured]}), "per row"
    methods = "; ".join(sorted({m.method for m in measured}))
    return (frame.assign(**{METHOD_COLUMN: methods}),
            f"per sweep ({len(measured)} measurements for {len(frame)} rows)")


def record(names: list[str] | None = None, root: Path = REFERENCE_ROOT, command: str = "make record",
           *, quick: bool = False) -> list[Path]:
    """Run registered sweeps on this GPU and write their CSVs and provenance.

    Inside ``rehearsal.rehearse()`` the same code runs every sweep that has rehearsal sizes on the
    simulator, into ``<root>/rehearsal/`` (never into the course's data/reference/), every file
    marked rehearsal; the sweeps that cannot run there are listed under "not_rehearsed"."""
    if not runtime.is_gpu():
        raise NoGPU("make record runs the sweeps on a real GPU and there is none here; nothing was written")
    practice = rehearsal.active()
    if practice and Path(root).resolve() == REFERENCE_ROOT.resolve():
        raise CourseError("a rehearsal never writes into the course's data/reference/; give it another root")
    sweeps = load_all_sweeps()
    unknown = sorted(set(names or []) - set(sweeps))
    if unknown:
        raise InvalidConfig(f"unknown sweep(s) {unknown}; registered: {sorted(sweeps)}")
    folder = folder_for(root, practice=practice, quick=quick)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / PROVENANCE_FILE
    meta = json.loads(path.read_text()) if path.exists() else {"sweeps": {}}
    contract = "quick" if quick else harness.contract().name
    meta["device"] = {**harness.provenance(command, rehearsal=practice), "contract": contract}
    if practice:
        meta.setdefault("not_rehearsed", {})
    written = []
    with ceilings.fresh():
        for name in names or sorted(sweeps):
            out = _record_one(name, sweeps[name], folder, meta, command, practice, quick, contract)
            path.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
            if out is not None:
                written.append(out)
    return written


def _record_one(name, sweep, folder: Path, meta: dict, command: str, practice: bool, quick: bool,
                contract: str) -> Path | None:
    print(f"recording {name} ({sweep.description}) …", flush=True)
    plan = QUICK_PLANS.get(name) if quick and not practice else None
    with harness.ledger() as measured:
        if practice:
            frame = rehearsal.run_sweep(name)
        elif plan is not None:
            with patched(plan_patches(plan)):
                frame = sweep.run()
        else:
            frame = sweep.run()
    if frame is None:
        plan = rehearsal.SWEEP_PLANS.get(name)
        meta["not_rehearsed"][name] = plan.not_rehearsable if plan else "no rehearsal sizes for it yet"
        return None
    missing = [c for c in sweep.columns if c not in frame.columns]
    if missing:
        raise CourseError(f"sweep {name} returned no column(s) {missing}")
    frame, methods = with_methods(frame, measured)
    if practice:
        frame = frame.assign(rehearsal=True)
    out = folder / f"{name}.csv"
    frame.to_csv(out, index=False)
    stamp = harness.provenance(command, rehearsal=practice)
    entry = {"lesson": sweep.lesson, "description": sweep.description, "rows": len(frame), "date": stamp["date"],
             "command": stamp["command"], "contract": contract, "methods": methods}
    if quick:
        entry["quick_plan"] = "plans.QUICK_PLANS" if plan is not None else "the sweep's own points"
    if practice:
        entry["rehearsal"] = True
        rehearsal_plan = rehearsal.SWEEP_PLANS.get(name)
        if rehearsal_plan is not None and rehearsal_plan.stand_in:
            entry["stand_in"] = rehearsal_plan.stand_in
    meta["sweeps"][name] = entry
    return out
