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
in or estimated: where no recording exists, ``load`` returns None and the chart says so.

A quick recording (``gpu-report --quick``: the validation contract, fewer points) lives in
``<gpu-slug>/quick/`` and is drawn too, always labelled with its contract (``Recording.caption``:
"measured by this course on an NVIDIA H200, quick contract, 0.1 s of GPU time a point, <date>")
and its spread (``Recording.spread``: the IQR of the timings). A GPU's full recording of a sweep is
preferred to its quick one. Where several GPUs recorded a sweep, ``load`` takes the one chosen
(``chosen(gpu)``, which the lessons' widgets set from a dropdown), else the newest. A recording is
never the learner's GPU: in GPU mode the lessons draw the live measurement.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from gpucourse.errors import CourseError

REFERENCE_ROOT = Path(__file__).resolve().parents[2] / "data" / "reference"
PROVENANCE_FILE = "provenance.json"
QUICK_FOLDER = "quick"  # <gpu>/quick/: a quick validation recording, kept apart, drawn with its contract named
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
        date = self.provenance.get("sweeps", {}).get(self.name, {}).get("date")
        return date[:10] if date else "unknown date"

    @property
    def contract(self) -> str:
        """The measurement contract it was recorded under (harness.CONTRACTS): "full" or "quick"."""
        entry = self.provenance.get("sweeps", {}).get(self.name, {})
        return entry.get("contract") or self.provenance.get("device", {}).get("contract") or "full"

    @property
    def quick(self) -> bool:
        return self.contract == "quick"

    def contract_text(self) -> str:
        """"quick contract, 0.1 s of GPU time a point": the contract's name and its GPU time per point."""
        from gpucourse.measure.harness import CONTRACTS

        terms = CONTRACTS.get(self.contract)
        if terms is None:
            return f"{self.contract} contract"
        return f"{self.contract} contract, {terms.min_total_ms / 1000:g} s of GPU time a point"

    def caption(self, *, bars: bool = False) -> str:
        """Who measured, on what, under which contract, when, and the file (never the learner's GPU);
        ``bars``: the chart draws ``spread``'s error bars, and the caption says what they are."""
        try:
            where = self.path.relative_to(REFERENCE_ROOT.parent.parent)
        except ValueError:
            where = self.path
        article = "an" if self.device[:1].upper() in "AEFHILMNORSX" else "a"  # an NVIDIA, an H100, a Tesla
        bars = "; error bars: the IQR of the timings" if bars and "iqr_ms" in self.data else ""
        return (f"measured by this course on {article} {self.device} (not your GPU), {self.contract_text()}, "
                f"{self.date} ({where}){bars}")

    def spread(self, y: str, rows: pd.DataFrame | None = None, *, scale: float = 1.0) -> dict | None:
        """``spread(rows, y)`` of this recording's data (default: all of it)."""
        return spread(self.data if rows is None else rows, y, scale=scale)


def spread(rows: pd.DataFrame, y: str, *, scale: float = 1.0) -> dict | None:
    """Plotly ``error_y`` for column ``y`` of timed ``rows``: the IQR of the timings (``iqr_ms``) in ``y``'s
    units (times ``scale``), half above and half below the median; None without the columns: y · iqr_ms ÷
    median_ms, for a time and for a rate (GB/s, TFLOP/s, which goes as 1/time) alike."""
    if rows is None or y not in rows or "iqr_ms" not in rows or "median_ms" not in rows:
        return None
    # y ∝ time (median_ms, ms per step) or ∝ 1/time (GB/s): either way the relative spread is iqr ÷ median
    half = (pd.to_numeric(rows[y], errors="coerce") * pd.to_numeric(rows["iqr_ms"], errors="coerce")
            / pd.to_numeric(rows["median_ms"], errors="coerce") / 2)
    if half.isna().all():
        return None
    return {"type": "data", "array": [float(v) * scale if v == v else 0.0 for v in half], "visible": True,
            "thickness": 1.5, "width": 5}


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


def _read_quick_provenance(folder: Path) -> dict:
    path = folder / PROVENANCE_FILE
    if not path.exists():
        raise CourseError(f"{folder} has CSV files but no {PROVENANCE_FILE}: its numbers are not used")
    meta = json.loads(path.read_text())
    if is_rehearsal(meta):
        raise CourseError(f"{folder} holds a rehearsal (simulator numbers standing in for a GPU, not GPU "
                          "timings): its numbers are never drawn; remove the folder")
    if not is_quick(meta):
        raise CourseError(f"{folder} is a {QUICK_FOLDER}/ folder whose provenance does not say contract "
                          "'quick': its numbers are not used")
    return meta


def recordings(name: str, root: Path | None = None, *, allow_rehearsal: bool = False) -> list[Recording]:
    """Every GPU's recording of sweep ``name``, full (``<gpu>/``) and quick (``<gpu>/quick/``); an empty
    list when none exists. A rehearsal's folder is refused unless ``allow_rehearsal`` (the rehearsal
    tests and its report)."""
    found = []
    root = Path(REFERENCE_ROOT if root is None else root)  # looked up now: a test may point it elsewhere
    csvs = [(csv, csv.parent.name, False) for csv in sorted(root.glob(f"*/{name}.csv"))]
    csvs += [(csv, csv.parent.parent.name, True) for csv in sorted(root.glob(f"*/{QUICK_FOLDER}/{name}.csv"))]
    for csv, gpu, quick in csvs:
        provenance = _read_quick_provenance(csv.parent) if quick else _read_provenance(csv.parent, allow_rehearsal)
        if name not in provenance.get("sweeps", {}):
            raise CourseError(f"{csv} is not listed in {csv.parent / PROVENANCE_FILE}: its numbers are not used")
        found.append(Recording(name, gpu, pd.read_csv(csv), provenance, csv))
    return found


_CHOSEN: contextvars.ContextVar[str | None] = contextvars.ContextVar("recorded_gpu", default=None)


@contextlib.contextmanager
def chosen(gpu: str | None):
    """Within the block, ``load`` prefers ``gpu``'s recording (a folder name under data/reference/; None:
    the default) wherever that GPU recorded the sweep. The lessons' widgets set it from a dropdown."""
    token = _CHOSEN.set(gpu)
    try:
        yield
    finally:
        _CHOSEN.reset(token)


def gpus(root: Path | None = None) -> list[str]:
    """The GPUs (folder names, sorted) with a full or quick recording of at least one sweep."""
    root = Path(REFERENCE_ROOT if root is None else root)
    names = set()
    for folder in [*root.glob("*/"), *root.glob(f"*/{QUICK_FOLDER}/")]:
        path = folder / PROVENANCE_FILE
        listed = json.loads(path.read_text()).get("sweeps", {}) if path.exists() else {}
        if any((folder / f"{name}.csv").exists() for name in listed):
            names.add(folder.parent.name if folder.name == QUICK_FOLDER else folder.name)
    return sorted(names)


def device_name(gpu: str, root: Path | None = None) -> str:
    """The device a GPU folder's provenance names ("NVIDIA H200"), else the folder's name."""
    folder = Path(REFERENCE_ROOT if root is None else root) / gpu
    for path in (folder / PROVENANCE_FILE, folder / QUICK_FOLDER / PROVENANCE_FILE):
        if path.exists():
            return json.loads(path.read_text()).get("device", {}).get("device") or gpu
    return gpu


def _best(found: list[Recording]) -> Recording:
    """A full recording before a quick one, then the newest."""
    return max(found, key=lambda r: (not r.quick, r.date))


def load(name: str, gpu: str | None = None, root: Path | None = None, *,
         allow_rehearsal: bool = False) -> Recording | None:
    """The recording of ``name`` on ``gpu`` (default: the GPU ``chosen``, where it recorded the sweep,
    else the newest of any GPU; a GPU's full recording before its quick one), or None."""
    found = recordings(name, root, allow_rehearsal=allow_rehearsal)
    if gpu is not None:
        found = [r for r in found if r.gpu == gpu]
    if not found:
        return None
    preferred = _CHOSEN.get() if gpu is None else gpu
    if not any(r.gpu == preferred for r in found):
        preferred = max(found, key=lambda r: r.date).gpu  # the GPU that recorded it last
    return _best([r for r in found if r.gpu == preferred])


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
