"""What gpu-report's plan uses beyond its models (issue 48): the first reservation's tests and sweeps, and the
seconds the last real report of a profile took per step (``data/reference/<gpu>/gpu-report.md``)."""

from __future__ import annotations

import ast
import heapq
import re
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from gpucourse.measure import harness
from gpucourse.tooling import plainrun, widgetrun
from gpucourse.tooling.grading.batch import GPU_JOBS_MAX

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


# --- the plan's time model (gpureport.plan_steps) ------------------------------------------------------------

# The quick report's time model, from the first contact with an H100 (data/reference/
# nvidia-h100-80gb-hbm3/first-contact): 19 GPU tests ran in 71 s after start-up with the old
# harness's full contract (3.7 s a test); a quick measurement takes its 0.1 s of GPU time plus host
# work and a check; a sweep compiles its kernels and allocates once.
TIER_S_PER_TEST = 3.7
QUICK_S_PER_MEASUREMENT = 0.4
SWEEP_FIXED_S = 2.0
STARTUP_S = 15.0  # imports of numba-cuda, CuPy, torch, pandas, plotly in the report's process
NCU_CATALOGUE_S = 60.0  # issue 33's budget is 90 s: 25 launches under ncu, then the microscope's agreement
# The full report's model: a full-contract measurement takes the contract's GPU time and warm-up plus the
# same host work and check as a quick one; a plain run starts its own Python (the report's start-up) and
# runs each code cell (a cell's widget or sweep takes about a full measurement).
QUICK_HOST_S = QUICK_S_PER_MEASUREMENT - harness.CONTRACTS["quick"].min_total_ms / 1000
_FULL = harness.CONTRACTS["full"]
FULL_S_PER_MEASUREMENT = (_FULL.min_total_ms + _FULL.warmup_ms) / 1000 + QUICK_HOST_S
PLAIN_S_PER_CELL = FULL_S_PER_MEASUREMENT
GRADE_FIXED_S = 30.0  # a scratch course: the lab generated by nbgrader, the grader's worker started
# One autograde call grades a group of labs' solutions (issue 48): a group is at most this long by the plan, so a
# reservation's end cuts at most this much (--resume grades the group again).
GRADE_GROUP_LIMIT_S = 240.0
# The call grades its labs with GRADE_JOBS workers (`grade --gpu --jobs`; grading.batch caps them on the GPU: at
# most GPU_JOBS_MAX, one per GiB free, one where the compute mode admits one context). Labs grade no timing
# (grading.batch.grading_environment: they grade on the microscope), so labs graded side by side on one GPU give
# the verdicts one at a time gives; a worker takes the next lab when it is free (grading.workers.WorkerPool).
GRADE_JOBS = GPU_JOBS_MAX
# A lesson's widgets step runs its cells under the quick contract: each lesson's kernels are measured under the full
# contract once, by its sweeps; this step checks that the lesson runs on a GPU and that every move takes ≤ 1 s (a
# move is measured under the live contract, harness.LIVE, whatever the contract in force).
WIDGETS_CONTRACT = "quick"
GRADED = ("solution",)  # the submissions a grade step grades on the GPU (grading.known.EXPECTED: the CPU suite's)
RESERVATION_S = 600.0  # a ~10-minute device reservation
RESERVATION_STARTUP_S = 120.0  # of which the machine's start and the course's set-up from the wheelhouse take this


def lab_stems() -> list[str]:  # not tooling.build: it imports jupytext, which a GPU node lacks
    return [path.stem for path in plainrun.sources() if path.parent.parent.name == "solutions"]


@dataclass
class Step:
    name: str  # "tier", "sweep <name>", "spread", "widget"
    estimate_s: float
    status: str = "pending"  # done, partial (cut by its time limit), failed, skipped, not run, not run (time)
    commit: str = ""  # the course's commit the step ran on (a resumed report may span commits)
    seconds: float | None = None
    detail: str = ""
    source: str = "estimate"  # where estimate_s comes from: the model, or "measured on <gpu> <date>" (a real run)


def grade_groups(labs: list[str] | None = None) -> list[list[str]]:
    """The labs in course order, packed into groups graded by one autograde call each (one scratch course, one
    worker): each group's estimate at most ``GRADE_GROUP_LIMIT_S``, so a reservation's end costs at most that."""
    groups: list[list[str]] = []
    for lab in lab_stems() if labs is None else labs:
        if groups and grade_estimate_s(groups[-1] + [lab]) <= GRADE_GROUP_LIMIT_S:
            groups[-1].append(lab)
        else:
            groups.append([lab])
    return groups


def lab_grade_s(lab: str) -> float:
    """One submission of ``lab`` autograded: its notebook's kernel started and its code cells run (a cell about a
    full measurement)."""
    return STARTUP_S + PLAIN_S_PER_CELL * len(plainrun.code_cells(
        (ROOT / "solutions" / lab / f"{lab}.py").read_text(encoding="utf-8")))


def grade_estimate_s(labs: list[str], jobs: int = GRADE_JOBS) -> float:
    """One autograde call grading each lab's ``GRADED`` submissions with ``jobs`` workers: the scratch course once,
    then the submissions in order, each to the first worker free (the pool's queue); the last one done ends it."""
    free_at = [0.0] * max(1, jobs)
    for lab in labs:
        for _student in GRADED:
            heapq.heapreplace(free_at, free_at[0] + lab_grade_s(lab))
    return GRADE_FIXED_S + max(free_at)


def widgets_estimate(path: Path) -> tuple[float, str]:
    """A lesson's widgets step: its child Python started, its cells run under the quick contract (WIDGETS_CONTRACT)
    and each chart's controls moved; a move costs what the last real report measured for one
    (recorded_move_s), else the limit. (``started_ahead``, in gpureport.plan_steps, takes off the start-up that
    overlaps the step before.)"""
    move = recorded_move_s()
    move_s = move.seconds if move is not None else widgetrun.MOVE_LIMIT_S
    source = (f"estimate; a move {move.seconds:g} s, {move.where}" if move is not None
              else f"estimate; a move at its limit, {widgetrun.MOVE_LIMIT_S:g} s")
    return widgetrun.estimate_s(path, STARTUP_S, QUICK_S_PER_MEASUREMENT, move_s), source


def plan_groups(steps: list[Step]) -> dict[str, float]:
    """The plan's seconds per kind of step (tier, sweeps, spread, widget, ncu catalogue, widgets, grading)."""
    groups: dict[str, float] = {}
    for step in steps:
        grouped = step.name.startswith(("sweep ", "widgets ", "grade ", "tier"))
        kind = step.name.split(" ", 1)[0] if grouped else step.name
        kind = {"sweep": "sweeps", "grade": "grading", "widgets": "lessons' widgets"}.get(kind, kind)
        groups[kind] = round(groups.get(kind, 0.0) + step.estimate_s, 1)
    return groups


# --- the tier's tests (the tier's estimate: count_gpu_tests × TIER_S_PER_TEST) and lessons started ahead ----------


def _names_gpu_mark(node: ast.AST) -> bool:
    """``node`` holds ``<...>.mark.gpu`` (``pytest.mark.gpu``, a list of marks holding it)."""
    return any(isinstance(n, ast.Attribute) and n.attr == "gpu" and isinstance(n.value, ast.Attribute)
               and n.value.attr == "mark" for n in ast.walk(node))


def marks_gpu_in_code(text: str) -> bool:
    """Whether a test module marks GPU tests in its code, read by its syntax tree: a module-level ``pytestmark``
    holding ``mark.gpu``, or a top-level test or class decorated with it. Text inside a string never counts (a test
    file that writes a GPU test module for a check, tests/test_tierplugin.py, runs on the CPU)."""
    for node in ast.parse(text).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in targets) and node.value is not None \
                    and _names_gpu_mark(node.value):
                return True
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if any(_names_gpu_mark(d) for d in node.decorator_list):
                return True
    return False


def gpu_test_files(tests: Path) -> list[Path]:
    """The test files that mark GPU tests in code (``marks_gpu_in_code``). Collecting only these is about 20 s
    less than collecting the whole suite (every module imported, its asserts rewritten); the tier's estimate
    counts only their tests."""
    return sorted(p for p in tests.glob("test_*.py") if marks_gpu_in_code(p.read_text(encoding="utf-8")))


_MODULE_FIXTURE = re.compile(r"^@pytest\.fixture\(scope=\"module\"\)\ndef (\w+)\(", re.MULTILINE)
_TEST_DEF = re.compile(r"^def test_\w+\(([^)]*)\)", re.MULTILINE)


def count_gpu_tests(tests: Path = ROOT / "tests", files: list[Path] | None = None) -> int:
    """GPU tests, counted from the source (``def test_``; a parametrised one counts once): the estimate's input.
    Tests that share a module fixture (its measurements made once, one verdict per test) count as one."""
    count = 0
    for path in (gpu_test_files(tests) if files is None else files):
        text = path.read_text(encoding="utf-8")
        shared = set(_MODULE_FIXTURE.findall(text))
        used = [shared & {a.strip().split(":")[0] for a in m.group(1).split(",")} for m in _TEST_DEF.finditer(text)]
        count += sum(not names for names in used) + len(set().union(*used))
    return count



def started_ahead(steps: list[Step]) -> list[Step]:
    """A lesson's child Python is started when the step before it starts (_prestart_next): its start-up overlaps
    that step, so the plan takes off as much of STARTUP_S as the step before lasts. A lesson's recorded seconds
    (widgetrun.run counts from its go) already leave its start-up out."""
    for before, step in zip(steps, steps[1:]):
        if step.name.startswith("widgets ") and step.source.startswith("estimate"):
            ahead = round(min(STARTUP_S, before.estimate_s), 1)
            step.estimate_s = round(step.estimate_s - ahead, 1)
            step.source += f"; started ahead, {ahead:g} s of its start-up during {before.name}"
    return steps
