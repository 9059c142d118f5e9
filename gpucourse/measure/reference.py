"""Timings recorded on real GPUs: the format, the loader, the sweep registry and ``make record``.

Layout (one folder per GPU, one CSV per sweep, one provenance file per folder):

    data/reference/<gpu-slug>/<sweep>.csv
    data/reference/<gpu-slug>/provenance.json   {"device": {...}, "sweeps": {<sweep>: {...}}}

A lesson module registers each GPU sweep it charts:

    @register_sweep("coalescing.stride", lesson="03_coalescing", columns=("stride", "gbps"),
                    description="effective GB/s of a float32 strided copy")
    def stride_sweep() -> pandas.DataFrame: ...

``make record`` (``python -m gpucourse record``, gpucourse.measure.recording) runs every
registered sweep on the current GPU and writes the files with provenance. Nothing is ever typed
in or estimated: where no recording exists, ``load`` returns None and the chart says so. A quick
recording (``gpu-report --quick``: the validation contract, fewer points) is never drawn.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from gpucourse.errors import CourseError

REFERENCE_ROOT = Path(__file__).resolve().parents[2] / "data" / "reference"
PROVENANCE_FILE = "provenance.json"
QUICK_FOLDER = "quick"  # <gpu>/quick/: a quick validation recording, kept apart and never drawn
# Modules that register sweeps; imported by load_all_sweeps() (a missing one is skipped).
# Strings, not imports: measure/ never imports a lesson (tests/test_layers.py); the lessons register here.
SWEEP_MODULES = tuple(f"gpucourse.lessons.{name}" for name in (
    "measuring", "warps", "divergence", "coalescing", "tiling", "reductions", "occupancy", "races", "precision",
    "feeding",
))


@dataclass(frozen=True)
class Sweep:
    name: str
    lesson: str
    description: str
    columns: tuple[str, ...]
    run: Callable[[], pd.DataFrame]


SWEEPS: dict[str, Sweep] = {}


def register_sweep(name: str, *, lesson: str, description: str, columns: tuple[str, ...]):
    def decorate(fn: Callable[[], pd.DataFrame]):
        SWEEPS[name] = Sweep(name, lesson, description, tuple(columns), fn)
        return fn

    return decorate


def load_all_sweeps() -> dict[str, Sweep]:
    for module in SWEEP_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
    return SWEEPS


@dataclass
class Recording:
    name: str
    gpu: str
    data: pd.DataFrame
    provenance: dict
    path: Path

    @property
    def device(self) -> str:
        return self.provenance.get("device", {}).get("device", self.gpu)

    @property
    def date(self) -> str:
        return self.provenance.get("sweeps", {}).get(self.name, {}).get("date", "unknown date")[:10]

    def caption(self) -> str:
        try:
            where = self.path.relative_to(REFERENCE_ROOT.parent.parent)
        except ValueError:
            where = self.path
        return f"recorded on {self.device}, {self.date} ({where})"


def is_rehearsal(provenance: dict) -> bool:
    """A folder written by a rehearsal (simulator numbers standing in for a GPU)."""
    return bool(provenance.get("device", {}).get("rehearsal")) or any(
        entry.get("rehearsal") for entry in provenance.get("sweeps", {}).values())


def is_quick(provenance: dict) -> bool:
    """A folder written by ``gpu-report --quick``."""
    return provenance.get("device", {}).get("contract") == "quick" or any(
        entry.get("contract") == "quick" for entry in provenance.get("sweeps", {}).values())


def _read_provenance(folder: Path, allow_rehearsal: bool = False) -> dict:
    path = folder / PROVENANCE_FILE
    if not path.exists():
        raise CourseError(f"{folder} has CSV files but no {PROVENANCE_FILE}: its numbers are not used")
    meta = json.loads(path.read_text())
    if is_rehearsal(meta) and not allow_rehearsal:
        raise CourseError(f"{folder} holds a rehearsal (simulator numbers standing in for a GPU, not GPU "
                          "timings): its numbers are never drawn; remove the folder")
    if is_quick(meta):
        raise CourseError(f"{folder} holds a quick validation recording (fewer points, a shorter contract): "
                          f"lessons draw only full recordings; keep it under <gpu>/{QUICK_FOLDER}/")
    return meta


def recordings(name: str, root: Path = REFERENCE_ROOT, *, allow_rehearsal: bool = False) -> list[Recording]:
    """Every GPU's recording of sweep ``name`` (an empty list when none exists). A rehearsal's
    folder is refused unless ``allow_rehearsal`` (the rehearsal tests and its report)."""
    found = []
    for csv in sorted(Path(root).glob(f"*/{name}.csv")):
        provenance = _read_provenance(csv.parent, allow_rehearsal)
        if name not in provenance.get("sweeps", {}):
            raise CourseError(f"{csv} is not listed in {csv.parent / PROVENANCE_FILE}: its numbers are not used")
        found.append(Recording(name, csv.parent.name, pd.read_csv(csv), provenance, csv))
    return found


def load(name: str, gpu: str | None = None, root: Path = REFERENCE_ROOT, *,
         allow_rehearsal: bool = False) -> Recording | None:
    """The recording of ``name`` on ``gpu`` (default: the newest of any GPU), or None."""
    found = [r for r in recordings(name, root, allow_rehearsal=allow_rehearsal) if gpu is None or r.gpu == gpu]
    return max(found, key=lambda r: r.date) if found else None


def missing_provenance(folder: Path) -> list[str]:
    """What a recording folder lacks before it may join data/reference/ (empty when complete)."""
    from gpucourse.measure.harness import REQUIRED_PROVENANCE

    folder = Path(folder)
    path = folder / PROVENANCE_FILE
    if not path.exists():
        return [f"no {PROVENANCE_FILE}"]
    meta = json.loads(path.read_text())
    problems = []
    if is_rehearsal(meta):
        problems.append("it is a rehearsal (simulator numbers), not a GPU recording")
    device = meta.get("device", {})
    problems += [f"device.{key} is missing or empty" for key in REQUIRED_PROVENANCE
                 if device.get(key) in (None, "", {})]
    problems += [f"device.libraries.{name} is missing" for name in ("numba-cuda", "numpy")
                 if not device.get("libraries", {}).get(name)]
    if device.get("mode") != "gpu":
        problems.append("device.mode is not 'gpu'")
    csvs = sorted(folder.glob("*.csv"))
    if not csvs:
        problems.append("no CSV files")
    for csv in csvs:
        entry = meta.get("sweeps", {}).get(csv.stem)
        if entry is None:
            problems.append(f"{csv.name} has no entry in {PROVENANCE_FILE}")
            continue
        problems += [f"sweeps.{csv.stem}.{key} is missing" for key in ("lesson", "description", "rows", "date",
                                                                         "command") if entry.get(key) in (None, "")]
        rows = len(pd.read_csv(csv))
        if entry.get("rows") not in (None, rows):
            problems.append(f"{csv.name} has {rows} rows, its provenance says {entry['rows']}")
    return problems
