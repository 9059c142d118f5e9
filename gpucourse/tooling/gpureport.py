"""``make gpu-report``: one command for whoever has a GPU, one self-contained report.

    python -m gpucourse gpu-report [--out build/gpu-report] [--quick] [--budget SECONDS] [--resume]
                                   [--retry-failed] [--rehearsal] [--plan]

1. runs the GPU tier (``pytest -m gpu``) and tabulates every GPU expectation of every lesson:
   lesson, claim, measured ratio, threshold (where the test records them with pytest's
   ``record_property("ratio", …)`` and ``record_property("threshold", …)``; every other property a test
   records is kept in ``expectations.json``: ``tierplugin``), pass or fail; a
   collection error, a per-test timeout or the tier's own time limit is reported, never hidden;
2. records every registered sweep into ``<out>/data/reference/<gpu>/`` (``quick/`` inside it for a
   quick report), each sweep on its own: a failure is reported and the run goes on; after a
   sticky CUDA error (the context is unusable) the remaining GPU steps are listed as not run;
3. measures the harness's run-to-run spread: the same sweep twice (the sweep step's own recording of it and one
   more run), the relative difference of each point's median (target ≤ 2 % for kernels of ≥ 100 µs);
4. times a widget's response: a lesson chart's control changed, until the chart is redrawn; the full report
   also runs every lesson once, its widgets step (``widgetrun``: its cells as plain Python under the quick contract,
   then every widget moved, ≤ 1 s a move), and grades each lab's solution on the GPU, several labs in one autograde
   call (``grading.known``; the known-wrong submissions are the CPU suite's);
5. rewrites ``<out>/gpu-report.md`` after every step, and packs everything into
   ``<out>/gpu-report.tgz`` (one file to copy off a node) at the end, or when the run is stopped.

``--quick``: the harness's quick contract (``GPUCOURSE_MEASURE=quick``) and the sweeps' quick
plans (``plans.QUICK_PLANS``); its recordings are marked quick, kept under ``quick/``, and a lesson
draws them labelled as quick (``reference.Recording.caption``), a full recording of a sweep taking precedence.
``--budget S``: steps whose estimate no longer fits in what is left are skipped and listed.
``--resume``: continues a cut-off report in the same folder, with the same device and stack: steps done
or failed are kept (``--retry-failed`` runs the failed ones again); a tier cut by its time limit
(``partial``) and a plain run out of time (``not run (time)``) run again.
``--plan``: prints the steps and their estimated seconds, each labelled with where it comes from (the seconds the
step took in the last real report of the profile, ``reportplan.recorded_step_seconds``: "measured on <gpu> <date>";
else "estimate", from its plan and the harness's contract), the seconds per kind of step and how many ~10-minute
reservations they take; runs nothing (works without a GPU).
``--rehearsal`` runs the same on a machine without a GPU (gpucourse.measure.rehearsal): the GPU tier
is collected but not run, sweeps run on the simulator at small sizes, and every number and the
report itself are marked rehearsal.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from importlib import util
from pathlib import Path

import pandas as pd

from gpucourse.errors import RESTART, CourseError, NoGPU, explain_gpu_error
from gpucourse.measure import gpuinfo, harness, plans, recording, reference, rehearsal, runtime
from gpucourse.tooling import plainrun, widgetrun
from gpucourse.tooling.grading import known
from gpucourse.tooling.reportplan import (  # the plan's time model and its steps, re-exported here
    FULL_S_PER_MEASUREMENT,
    GRADE_GROUP_LIMIT_S,  # noqa: F401 (re-exported: tests, __main__)
    GRADE_JOBS,
    GRADED,
    NCU_CATALOGUE_S,
    QUICK_S_PER_MEASUREMENT,
    RESERVATION_S,
    RESERVATION_STARTUP_S,
    STARTUP_S,
    SWEEP_FIXED_S,
    TARGET_SWEEPS,
    TARGET_TEST_FILES,
    TARGETS_TIER,
    TIER_S_PER_TEST,
    WIDGETS_CONTRACT,
    Step,
    count_gpu_tests,
    gpu_test_files,
    grade_estimate_s,
    grade_groups,
    lab_stems,  # noqa: F401 (re-exported: tests, __main__)
    marks_gpu_in_code,  # noqa: F401 (re-exported: tests)
    plan_groups,  # noqa: F401 (re-exported: tests, __main__)
    recorded_step_seconds,
    scaled_estimate,
    started_ahead,
    widgets_estimate,
)

ROOT = Path(__file__).resolve().parents[2]
SPREAD_SWEEP = "warps.staircase"
SPREAD_TARGET = 0.02  # relative difference between two runs of the same point
SPREAD_MIN_MS = 0.1  # the target holds for kernels of at least 100 µs
STATE_FILE = "report-state.json"
ARCHIVE = "gpu-report.tgz"
PER_TEST_TIMEOUT_S = {"quick": 60, "full": 300}
RESERVE_S = 10.0  # kept back for the report and the archive


# --- 1. the GPU tier, through a pytest plugin (``-p gpucourse.tooling.tierplugin``) ---------------------------


GPU_MARK = "mark.gpu"  # tests/conftest.py stops a run with a GPU test in a file without it


@dataclass
class TierRun:
    """How the tier's pytest process ended: what a report must show when it did not run cleanly."""

    returncode: int | None = None
    timed_out: bool = False
    seconds: float = 0.0
    stderr_tail: str = ""
    command: str = ""


def target_test_files(tests: Path = ROOT / "tests") -> list[Path]:
    """The GPU tests of lessons 03, 04, 04a and 05, in lesson order (the first reservation's tier)."""
    return [tests / name for name in TARGET_TEST_FILES]


def run_gpu_tier(out: Path, *, practice: bool, tests: Path = ROOT / "tests", quick: bool = False,
                 timeout_s: float | None = None, run: TierRun | None = None, env_extra: dict | None = None,
                 files: list[Path] | None = None) -> list[dict]:
    """Every GPU expectation with its outcome and the values its asserts compared (collected only,
    in a rehearsal). ``run`` receives the pytest process's exit status, time and stderr tail."""
    run = run if run is not None else TierRun()
    out.mkdir(parents=True, exist_ok=True)
    target = out / "expectations.json"
    target.unlink(missing_ok=True)
    env = dict(os.environ)
    if practice:
        env["GPUCOURSE_MODE"] = "sim"
    if quick:
        env["GPUCOURSE_MEASURE"] = "quick"
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(env_extra or {})
    command = [sys.executable, "-m", "pytest", "-m", "gpu and not slow" if quick else "gpu",
               "-p", "gpucourse.tooling.tierplugin", "-p", "no:cacheprovider", "-o", "enable_assertion_pass_hook=true",
               "-q", "--continue-on-collection-errors", f"--gpureport-json={target}"]
    if util.find_spec("pytest_timeout") is not None and not practice:
        command.append(f"--timeout={PER_TEST_TIMEOUT_S['quick' if quick else 'full']}")
    if practice:
        command.append("--collect-only")
    shown = [a for a in command[1:] if not a.startswith("--gpureport-json")]
    run.command = "python " + " ".join(shown) + " <GPU test files>"
    command += [str(p) for p in (gpu_test_files(tests) if files is None else files)]
    # a fresh bytecode cache: test modules' asserts are rewritten again, now with the pass hook
    # (outside --out: a resumed report's folder is carried between machines and must stay small)
    env["PYTHONPYCACHEPREFIX"] = pycache = tempfile.mkdtemp(prefix="gpureport-pycache-")
    started = time.monotonic()
    try:
        done = subprocess.run(command, cwd=tests.parent, env=env, capture_output=True, text=True, timeout=timeout_s)
        run.returncode, tail = done.returncode, done.stdout[-1500:] + done.stderr[-1500:]
    except subprocess.TimeoutExpired as stopped:
        run.timed_out = True
        tail = _text(stopped.stdout)[-1500:] + _text(stopped.stderr)[-1500:]
    finally:
        shutil.rmtree(pycache, ignore_errors=True)
    run.seconds = round(time.monotonic() - started, 1)
    run.stderr_tail = tail.strip()
    if not target.exists():
        raise RuntimeError(f"the GPU tier did not run (exit status {run.returncode}): {tail[-2000:]}")
    rows = json.loads(target.read_text())
    for row in rows:
        row["checked"] = "; ".join(row.get("checked", [])) or None
        if run.timed_out and row["outcome"] == "not run":
            row["message"] = row["message"] or f"the tier's time limit ({timeout_s:.0f} s) came first"
    if practice:
        for row in rows:
            if row["outcome"] != "collection error":
                row["outcome"] = "not run (rehearsal: no GPU)"
    return rows


def _text(data) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


# --- 3. run-to-run spread, 4. widget response ------------------------------------------------------


def _run_sweep(name: str, practice: bool, quick: bool = False) -> pd.DataFrame:
    if practice:
        return rehearsal.run_sweep(name)
    plan = plans.QUICK_PLANS.get(name) if quick else None
    with plans.patched(plans.plan_patches(plan) if plan else []):
        return reference.load_all_sweeps()[name].run()


def spread(first: pd.DataFrame, second: pd.DataFrame, time_column: str = "median_ms") -> pd.DataFrame:
    """Each point's two medians and their relative difference |a − b| / mean(a, b)."""
    keys = [c for c in first.columns if c not in (time_column, "iqr_ms", "min_ms", "n_samples", "rehearsal")
            and first[c].dtype != float]
    both = first[keys + [time_column]].merge(second[keys + [time_column]], on=keys, suffixes=("_1", "_2"))
    a, b = both[f"{time_column}_1"], both[f"{time_column}_2"]
    both["relative_spread"] = (a - b).abs() / ((a + b) / 2)
    both["counts"] = a >= SPREAD_MIN_MS  # the 2 % target is for kernels of ≥ 100 µs
    both["meets_target"] = ~both.counts | (both.relative_spread <= SPREAD_TARGET)
    return both


def _recorded_frame(folder: Path, name: str) -> pd.DataFrame | None:
    """The sweep this report recorded (``folder``/<name>.csv) without the recording's timing-method columns: the
    spread's first run, so the spread step measures the sweep once more, not twice (issue 48); None if absent."""
    path = folder / f"{name}.csv"
    if not path.exists():
        return None
    return pd.read_csv(path).drop(columns=[recording.METHOD_COLUMN, recording.LAUNCHES_COLUMN], errors="ignore")


def widget_response_s(practice: bool) -> float:
    """Seconds from moving a lesson chart's control to the redrawn chart (lesson 01's staircase)."""
    import ipywidgets as widgets

    from gpucourse.lessons import warps
    from gpucourse.viz.widgets import LiveChart

    slider = widgets.IntSlider(value=32, min=1, max=128)
    chart = LiveChart({"max_threads": slider}, warps.staircase_figure, threaded=False)
    started = time.perf_counter()
    slider.value = 33
    elapsed = time.perf_counter() - started
    if chart.errors:
        raise RuntimeError(f"the widget failed: {chart.status.value}")
    return elapsed


# --- the plan: steps, estimates, budget -------------------------------------------------------------


def _with_recorded(steps: list[Step], quick: bool) -> list[Step]:
    """The steps with the last real run's seconds in place of the model (reportplan.scaled_estimate), each
    labelled with where its estimate comes from ("estimate", or "measured on <gpu> <date>")."""
    recorded = recorded_step_seconds(quick)
    out = []
    for s in steps:
        estimate, source = scaled_estimate(s.name, s.estimate_s, recorded)
        out.append(Step(s.name, estimate, source=source if source != "estimate" else s.source))
    return out


def plan_steps(quick: bool, tests: Path = ROOT / "tests", targets: bool = False) -> list[Step]:
    """Every step of a report with its estimated seconds on the GPU, from its plan and the harness's
    contract (the models above), or the seconds the last real run took: no step is estimated at 0 s.
    ``targets``: the first reservation's steps."""
    if targets:
        steps = [Step(TARGETS_TIER, count_gpu_tests(files=target_test_files(tests)) * TIER_S_PER_TEST)]
        for name in TARGET_SWEEPS:
            plan = plans.QUICK_PLANS.get(name)
            steps.append(Step(f"sweep {name}", SWEEP_FIXED_S + (plan.measurements if plan else 10)
                              * QUICK_S_PER_MEASUREMENT))
        return _with_recorded([Step(s.name, round(s.estimate_s, 1)) for s in steps], quick=True)  # quick sweeps
    sweeps = sorted(reference.load_all_sweeps())
    per_measurement_s = QUICK_S_PER_MEASUREMENT if quick else FULL_S_PER_MEASUREMENT
    steps = [Step("tier", count_gpu_tests(tests) * TIER_S_PER_TEST)]
    for name in sweeps:
        plan = plans.QUICK_PLANS.get(name)
        measurements = (plan.measurements if plan else 10) if quick else plans.full_measurements(name)
        steps.append(Step(f"sweep {name}", SWEEP_FIXED_S + measurements * per_measurement_s))
    spread_points = plans.QUICK_PLANS[SPREAD_SWEEP].measurements if quick else plans.full_measurements(SPREAD_SWEEP)
    # once more, beside the sweep step's own recording of it (_spread_pair): not twice
    steps.append(Step("spread", spread_points * per_measurement_s))
    steps.append(Step("widget", 6 * per_measurement_s))
    steps.append(Step("ncu catalogue", NCU_CATALOGUE_S))  # only where ncu and a GPU are (else skipped at once)
    if not quick:  # the full report also runs every lesson and lab solution once, in GPU mode (issue 48): a
        # lesson's widgets step runs its cells as plain Python and then moves its controls (no separate plain step);
        # the labs' solutions are graded in groups, one autograde call each (the known-wrong submissions are
        # graded by the CPU suite: tests/test_lab*.py); without nbgrader each solution runs as plain Python
        for path in widgetrun.lessons():  # every control moved, each move timed (≤ 1 s)
            estimate, source = widgets_estimate(path)
            steps.append(Step(f"widgets {path.stem}", estimate, source=source))
        steps += [Step("grade " + " ".join(group), grade_estimate_s(group)) for group in grade_groups()]
    return started_ahead(_with_recorded([Step(s.name, round(s.estimate_s, 1), source=s.source) for s in steps],
                                         quick))


def estimate_s(quick: bool = True, targets: bool = False) -> float:
    """The report's estimated GPU-machine seconds, from its own plan (start-up included)."""
    return STARTUP_S + sum(step.estimate_s for step in plan_steps(quick, targets=targets))


def reservations(quick: bool = False, targets: bool = False) -> int:
    """How many ~10-minute reservations the report takes by its plan with ``--resume``: each gives
    ``RESERVATION_S - RESERVATION_STARTUP_S`` seconds to steps (the report's start-up included), steps
    are whole (``--budget`` stops before one that does not fit), in the plan's order."""
    usable_s = RESERVATION_S - RESERVATION_STARTUP_S - STARTUP_S - RESERVE_S
    count, left = 1, usable_s
    for step in (plan_steps(quick, targets=True) if targets else plan_steps(quick)):
        if step.estimate_s > usable_s:
            raise CourseError(f"step {step.name} ({step.estimate_s:.0f} s) cannot fit in one reservation")
        if step.estimate_s > left:
            count, left = count + 1, usable_s
        left -= step.estimate_s
    return count


# --- 5. the report ------------------------------------------------------------------------------------


@dataclass
class Report:
    path: Path
    data_folder: Path
    expectations: list[dict]
    spread: pd.DataFrame
    widget_s: float | None
    provenance: dict
    written: list[Path]  # the files the recording wrote, one per recorded sweep
    steps: list[Step] = field(default_factory=list)
    tier: TierRun = field(default_factory=TierRun)
    archive: Path | None = None


def _table(rows: list[dict], columns: list[str]) -> str:
    def cell(value) -> str:
        if value is None or (isinstance(value, float) and pd.isna(value)):
            return "—"
        if isinstance(value, float):
            return f"{value:.4g}"
        return str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(c)) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def write_report(out: Path, *, practice: bool, expectations: list[dict], spread_table: pd.DataFrame | None,
                 widget_s: float | None, meta: dict, data_folder: Path, steps: list[Step] | None = None,
                 tier: TierRun | None = None, quick: bool = False, budget_s: float | None = None,
                 wall_s: float | None = None, targets: bool = False) -> Path:
    mark = ("**REHEARSAL** — made on a machine without a GPU: sweeps ran on Numba's simulator at small "
            "sizes and every time is a counted placeholder, not GPU performance. The GPU tier was "
            "collected, not run.\n\n" if practice else "")
    if targets:
        mark += ("**TARGETS** — the first reservation (`gpu-report --targets`): the GPU expectations of lessons "
                 "03, 04, 04a and 05 under the full contract, one verdict each, never cut by the budget; then the "
                 "sweeps behind those lessons' charts with their quick plans (recordings under `quick/`, marked "
                 "quick).\n\n")
    elif quick:
        mark += ("**QUICK** — the validation profile: the harness's quick contract (≥ 0.1 s of GPU time a point) "
                 "and fewer points per sweep (plans.QUICK_PLANS). Its recordings are kept under `quick/`; "
                 "a lesson draws them labelled as quick (contract and date in the caption), never as a full "
                 "recording, and a full recording of a sweep takes precedence.\n\n")
    steps = steps or []
    passed = sum(r["outcome"] == "passed" for r in expectations)
    profile = " (TARGETS)" if targets else " (QUICK)" if quick else ""
    sections = [f"# GPU report{' (REHEARSAL)' if practice else ''}{profile}: {meta['device']}\n",
                mark]
    if steps:
        done = sum(s.status == "done" for s in steps)
        clock = (f"Wall time so far: {wall_s:.0f} s" if wall_s is not None else "") + (
            f" of a {budget_s:.0f} s budget" if budget_s else "")
        sections += [f"## Steps ({done} of {len(steps)} done)\n",
                     (clock + ". " if clock else "")
                     + f"Estimated from the plan: {STARTUP_S + sum(s.estimate_s for s in steps):.0f} s "
                     "(`python -m gpucourse gpu-report --plan`).\n",
                     _table([s.__dict__ for s in steps], ["name", "status", "seconds", "estimate_s", "detail"]) + "\n"]
    sections += ["## Device and provenance\n", "```json\n" + json.dumps(meta, indent=2, sort_keys=True) + "\n```\n",
                 f"## GPU expectations ({passed} of {len(expectations)} passed)\n",
                 "Where a test records them (`record_property`), the ratio and threshold have their own columns; "
                 "\"checked\" lists every passing assert with the values it compared (measured side, threshold); "
                 "`expectations.json` keeps every property each test recorded (ladders, fractions, ratios).\n",
                 _table(expectations, ["lesson", "claim", "ratio", "threshold", "checked", "outcome", "seconds",
                                       "message"]) + "\n"]
    if tier is not None and tier.command:
        status = "stopped at its time limit" if tier.timed_out else f"exit status {tier.returncode}"
        errors = [r for r in expectations if r["outcome"] == "collection error"]
        sections += [f"### The tier's run: {status}, {tier.seconds:.0f} s, {len(errors)} collection error(s)\n",
                     f"`{tier.command}`\n", "```text\n" + (tier.stderr_tail or "(no output)")[-2500:] + "\n```\n"]
    if spread_table is not None:
        counted = spread_table[spread_table.counts]
        spread_line = (f"{len(counted)} of {len(spread_table)} points are ≥ 100 µs; "
                       f"{int(counted.meets_target.sum())} of them within {SPREAD_TARGET:.0%}"
                       + (f" (largest {counted.relative_spread.max():.2%})" if len(counted) else ""))
        sections += [f"## Harness run-to-run spread: {SPREAD_SWEEP} twice\n",
                     f"Target: ≤ {SPREAD_TARGET:.0%} for kernels of ≥ {SPREAD_MIN_MS * 1000:.0f} µs. {spread_line}.\n",
                     _table(spread_table.to_dict("records"), list(spread_table.columns)) + "\n"]
    if widget_s is not None:
        sections += ["## Widget response\n",
                     f"Lesson 01's staircase chart, control moved to redrawn chart: {widget_s:.2f} s"
                     + (" (rehearsal: simulator time on the CPU)" if practice else "") + ".\n"]
    sections += [(out / extra).read_text() for extra in ("widget-run.md", "grading.md") if (out / extra).exists()]
    sections += ["## Recorded data\n",
                 f"`{data_folder.relative_to(out)}/`: each recorded sweep's CSV and `provenance.json`. To "
                 "contribute it, copy the folder to `data/reference/` and open a pull request (README, "
                 "\"Contribute a recording\")." + (" A rehearsal folder is refused there." if practice else "") + "\n"]
    meta_path = data_folder / reference.PROVENANCE_FILE
    recorded = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    stand_ins = [{"sweep": k, "what stands in for the GPU": v["stand_in"]}
                 for k, v in sorted(recorded.get("sweeps", {}).items()) if v.get("stand_in")]
    if stand_ins:
        sections += ["### What stood in for the GPU beyond the simulator\n",
                     _table(stand_ins, ["sweep", "what stands in for the GPU"]) + "\n"]
    skipped = recorded.get("not_rehearsed", {})
    if skipped:
        sections += [f"### Sweeps the rehearsal could not run ({len(skipped)} of "
                     f"{len(skipped) + len(recorded.get('sweeps', {}))})\n",
                     _table([{"sweep": k, "why": v} for k, v in sorted(skipped.items())], ["sweep", "why"]) + "\n"]
    path = out / "gpu-report.md"
    path.write_text("\n".join(sections))
    return path


def pack(out: Path) -> Path:
    """Everything the report wrote, in one archive (the bytecode cache left out)."""
    target = out / ARCHIVE
    with tarfile.open(target, "w:gz") as tar:
        for path in sorted(out.rglob("*")):
            if path.is_file() and path != target and "pycache" not in path.relative_to(out).parts:
                tar.add(path, arcname=str(Path(out.name) / path.relative_to(out)))
    return target


# --- running it: steps, state, resume --------------------------------------------------------------------


def _signature(quick: bool, practice: bool) -> dict:
    """What a resumed report must share with the one it continues: device, driver, stack, profile."""
    meta = harness.provenance(rehearsal=practice)
    keep = ("device", "compute_capability", "driver_release", "cuda_runtime", "nvrtc", "libraries")
    return {"quick": quick, "rehearsal": practice, **{k: meta.get(k) for k in keep}}


class _Stopped(Exception):
    """SIGTERM (a scheduler's or `timeout`'s): write the report and the archive, then stop."""


def _on_sigterm(signum, frame):
    raise _Stopped(f"stopped by signal {signum}")


def build(out: Path, *, practice: bool = False, run_tier: bool = True, quick: bool = False,
          budget_s: float | None = None, resume: bool = False, retry_failed: bool = False,
          targets: bool = False) -> Report:
    """Run every step and write the report after each one (inside a rehearsal when ``practice``).
    ``targets``: the first reservation (TARGET_TEST_FILES under the full contract, then TARGET_SWEEPS quick)."""
    quick = quick or targets  # the targets' sweeps use their quick plans; their tier runs the full contract
    out = Path(out)
    if not practice and not runtime.is_gpu():
        raise NoGPU("make gpu-report needs a GPU and there is none here; "
                    "`make gpu-report REHEARSAL=1` rehearses it on the CPU")
    started = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    command = "make gpu-report" + (" TARGETS=1" if targets else " QUICK=1" if quick else "") + (
        " REHEARSAL=1" if practice else "")
    context = rehearsal.rehearse if practice else contextlib.nullcontext
    with context():
        signature = dict(_signature(quick, practice), targets=targets)
    state_path = out / STATE_FILE
    state = json.loads(state_path.read_text()) if resume and state_path.exists() else {}
    if state and state.get("signature") != signature:
        raise CourseError(f"{out} holds a report of another device, stack or profile: run without --resume "
                          "(or give another --out)")
    state = state or {"signature": signature, "steps": {}, "expectations": [], "tier": {}, "spread": None,
                      "widget_s": None}
    planned = plan_steps(quick, targets=True) if targets else plan_steps(quick)
    steps = [s for s in planned if run_tier or s.name not in ("tier", TARGETS_TIER)]
    for step in steps:
        kept = state["steps"].get(step.name)
        if kept and (kept["status"] == "done" or (kept["status"] == "failed" and not retry_failed)):
            step.status, step.seconds, step.commit = kept["status"], kept["seconds"], kept.get("commit", "")
            step.detail = kept["detail"].removesuffix(" (resumed)") + " (resumed)"
    data_root = out / "data" / "reference"
    folder = recording.folder_for(data_root, practice=practice, quick=quick)
    tier = TierRun(**state["tier"]) if state["tier"] else TierRun()
    results = {"written": [], "spread": None}
    if state["spread"]:
        results["spread"] = pd.DataFrame(state["spread"])
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if _main_thread() else None
    contract_before = os.environ.get("GPUCOURSE_MEASURE")
    family_before = os.environ.get(gpuinfo.FAMILY_PIDS_VARIABLE)
    # this process holds a context (provenance, the sweeps): its children must not count it as a sharer (G12)
    os.environ[gpuinfo.FAMILY_PIDS_VARIABLE] = ",".join(filter(None, [family_before, str(os.getpid())]))
    if quick:
        os.environ["GPUCOURSE_MEASURE"] = "quick"  # this process's measurements; the tier's get it too

    def save(meta: dict) -> Path:
        state["steps"] = {s.name: s.__dict__ for s in steps}
        state["tier"] = tier.__dict__
        state_path.write_text(json.dumps(state, indent=1, default=str))
        return write_report(out, practice=practice, expectations=state["expectations"], spread_table=results["spread"],
                            widget_s=state["widget_s"], meta=meta, data_folder=folder, steps=steps, tier=tier,
                            quick=quick, budget_s=budget_s, wall_s=time.monotonic() - started, targets=targets)

    with context():
        meta = harness.provenance(command, rehearsal=practice)
    save(meta)
    try:
        with ceilings_fresh(practice):
            _run_steps(steps, budget_s, started, out, data_root, command, practice, quick, state, tier, results,
                       context, save, meta)
    except (_Stopped, KeyboardInterrupt) as stopped:
        for step in steps:
            if step.status == "pending":
                step.status, step.detail = "not run", str(stopped) or "interrupted"
        save(meta)
    finally:
        widgetrun.stop_prestarted()  # a lesson started ahead that the budget or a stop left waiting
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        for name, before in (("GPUCOURSE_MEASURE", contract_before), (gpuinfo.FAMILY_PIDS_VARIABLE, family_before)):
            if before is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = before
    with context():
        meta = harness.provenance(command, rehearsal=practice)
    path = save(meta)
    archive = pack(out)
    return Report(path, folder, state["expectations"], results["spread"], state["widget_s"], meta, results["written"],
                  steps, tier, archive)


def ceilings_fresh(practice: bool):
    """Every ceiling measured once for this report, never taken from another day's cache."""
    if practice:
        return contextlib.nullcontext()
    from gpucourse.measure import ceilings

    return ceilings.fresh()


def ceilings_handed_on() -> dict[str, str]:
    """The environment that gives the tier's pytest the report's own fresh copy ceiling (ceilings.HANDED_ON_ENV)."""
    from gpucourse.measure import ceilings

    return ceilings.hand_on() if runtime.is_gpu() else {}


def _run_steps(steps, budget_s, started, out, data_root, command, practice, quick, state, tier, results, context,
               save, meta) -> None:
    sticky = ""
    for index, step in enumerate(steps):
        if step.status in ("done", "failed"):  # kept from the report resumed (failed: unless --retry-failed)
            continue
        step.commit = (meta.get("course") or {}).get("commit") or ""
        left = None if budget_s is None else budget_s - (time.monotonic() - started) - RESERVE_S
        if sticky:
            step.status, step.detail = "not run", sticky
        elif left is not None and step.name != TARGETS_TIER and (left <= 0 or step.estimate_s > left):
            step.status = "skipped"
            step.detail = f"the budget: {max(left, 0):.0f} s left, estimate {step.estimate_s:.0f} s"
        else:
            if not practice:  # a rehearsal skips the lessons (_run_step): nothing to start ahead
                _prestart_next(steps[index + 1:])
            sticky = _run_step(step, out, data_root, command, practice, quick, left, state, tier, results, context)
        save(meta)


def _prestart_next(later: list[Step]) -> None:
    """Start the next lesson's child Python (widgetrun.prestart) while this step runs, where the next step to run
    is a lesson: its start-up (STARTUP_S, imports only) overlaps this step (plan_steps: started_ahead)."""
    following = next((s for s in later if s.status not in ("done", "failed")), None)
    if following is not None and following.name.startswith("widgets "):
        stem = following.name.split(" ", 1)[1]
        widgetrun.prestart(next(p for p in widgetrun.lessons() if p.stem == stem), WIDGETS_CONTRACT)


def _ncu_catalogue(out: Path, data_root: Path, practice: bool, left: float | None) -> str:
    """The course kernels under Nsight Compute, recorded beside the sweeps (``<gpu>/ncu/``), and the microscope's
    agreement with them written to ``<out>/ncu-agreement.csv``: what the step's detail says."""
    from gpucourse.measure import ncu
    from gpucourse.tooling import ncu_catalogue

    why = "a rehearsal has no GPU for ncu" if practice else ncu.availability()
    if why:
        return f"skipped: {why}"
    folder = recording.folder_for(data_root, practice=False, quick=False) / "ncu"
    ncu_catalogue.record(folder, timeout_s=90.0 if left is None else max(min(90.0, left), 10.0))
    table = ncu_catalogue.agreement(folder)
    table.to_csv(out / "ncu-agreement.csv", index=False)
    broken = ncu_catalogue.disagreements(table)
    return (ncu_catalogue.summary(table)  # the non-trivial rows first (review gpu-recordings.md §5)
            + (f"; disagreements: {'; '.join(broken[:5])}" if broken else ""))


def _lesson_step(step: Step, out: Path, left: float | None) -> tuple[str, str]:
    """A lesson's widgets moved, or a group of labs' solutions graded in one autograde call, within a time limit
    (three times the step's estimate, at most what the budget leaves): the status and detail of the step."""
    kind, rest = step.name.split(" ", 1)
    limit = max(3 * step.estimate_s, 60.0) if left is None else max(min(3 * step.estimate_s, left), 1.0)
    if kind == "widgets":
        path = next(p for p in widgetrun.lessons() if p.stem == rest)
        return widgetrun.report_step(path, out, gpu=True, timeout_s=limit, contract=WIDGETS_CONTRACT)
    labs = rest.split()
    if util.find_spec("nbgrader") is None or util.find_spec("jupytext") is None:  # a bare GPU node's stack
        # each lab is still run once on the GPU: its solution as plain Python
        why = "nbgrader and jupytext are not installed here: grading needs the lab extra (.[lab])"
        runs = [plainrun.run(next(p for p in plainrun.sources() if p.stem == lab), timeout_s=limit / len(labs))
                for lab in labs]
        status = ("done" if all(r.ok for r in runs) else "not run (time)" if any(r.timed_out for r in runs)
                  else "failed")
        return status, f"{why}; the solution ran as plain Python instead: {'; '.join(r.detail for r in runs)}"[:400]
    with tempfile.TemporaryDirectory(prefix="gpureport-grade-") as folder:
        # on a GPU through `make grade GPU=1` (the path no CPU test runs); `make grade` itself grades in simulator
        # mode. The solution only: the known-wrong submissions are graded by the CPU suite (tests/test_lab*.py)
        table = known.grade_known(labs, Path(folder), timeout_s=limit, gpu=runtime.is_gpu(), students=GRADED,
                                  jobs=GRADE_JOBS)
    saved = out / "grading.json"
    rows = [r for r in (json.loads(saved.read_text()) if saved.exists() else []) if r["lab"] not in labs] + table
    saved.write_text(json.dumps(rows, indent=1))
    where = "on the GPU, `make grade GPU=1`" if runtime.is_gpu() else "in simulator mode, `make grade`"
    (out / "grading.md").write_text(f"## Every lab's solution graded ({where}; full marks expected)\n\n"
                                    "The known-wrong submissions (the untouched lab, the course patched) score 0 in "
                                    "the CPU suite (tests/test_lab*.py); here each lab's solution is graded on the "
                                    "GPU, several labs in one autograde call.\n\n"
                                    + _table(rows, list(rows[0]) if rows else ["lab"]) + "\n")
    ok, line = known.summary(table)
    return ("done" if ok else "failed"), line[:400]


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _run_step(step: Step, out: Path, data_root: Path, command: str, practice: bool, quick: bool,
              left: float | None, state: dict, tier: TierRun, results: dict, context) -> str:
    """Run one step, record its outcome on ``step``; returns why later GPU steps cannot run ("" if they can)."""
    began = time.monotonic()
    try:
        if step.name in ("tier", TARGETS_TIER):
            handed = {} if practice else ceilings_handed_on()  # the report's copy ceiling, measured now (P4)
            if step.name == TARGETS_TIER:  # the full contract, no time limit of the budget's: never cut (P11)
                state["expectations"] = run_gpu_tier(out, practice=practice, run=tier, files=target_test_files(),
                                                     env_extra={**handed, "GPUCOURSE_MEASURE": "full"})
            else:
                state["expectations"] = run_gpu_tier(out, practice=practice, quick=quick, run=tier, env_extra=handed,
                                                     timeout_s=None if left is None else max(left * 0.6, 30.0))
            counts = pd.Series([r["outcome"] for r in state["expectations"]]).value_counts().to_dict()
            step.detail = ", ".join(f"{n} {k}" for k, n in counts.items()) + (
                "; stopped at its time limit" if tier.timed_out else f"; pytest exit status {tier.returncode}")
            if tier.timed_out:  # tests never ran: rerun on --resume, never kept as done
                step.status = "partial"
                return ""
        elif step.name.startswith("sweep "):
            name = step.name.removeprefix("sweep ")
            with context():
                written = recording.record([name], root=data_root, command=command, quick=quick)
            results["written"] += written
            step.detail = f"{len(pd.read_csv(written[0]))} rows" if written else "not rehearsable on the simulator"
        elif step.name == "spread":
            recorded = _recorded_frame(recording.folder_for(data_root, practice=practice, quick=quick), SPREAD_SWEEP)
            with context(), plans.patched(plans.plan_patches(rehearsal.SWEEP_PLANS[SPREAD_SWEEP]) if practice else []):
                first = recorded if recorded is not None else _run_sweep(SPREAD_SWEEP, practice, quick)
                table = spread(first, _run_sweep(SPREAD_SWEEP, practice, quick))
            results["spread"], state["spread"] = table, table.to_dict("records")
            step.detail = f"{int(table.meets_target.sum())} of {len(table)} points meet the target"
        elif step.name.startswith("plain "):
            if practice:
                step.status = "skipped"
                step.detail = "a rehearsal: tests/test_notebooks.py runs every lesson on the CPU"
                return ""
            stem = step.name.removeprefix("plain ")
            done = plainrun.run(next(p for p in plainrun.sources() if p.stem == stem),
                                timeout_s=600.0 if left is None else max(left, 1.0))
            step.detail = done.detail
            if not done.ok:
                step.status = "not run (time)" if done.timed_out else "failed"
                return ""
        elif step.name.startswith(("widgets ", "grade ")):
            if practice:
                step.status, step.detail = "skipped", ("a rehearsal: `python -m gpucourse widget-run` moves every "
                                                       "widget and tests/test_lab*.py grade every lab on the CPU")
                return ""
            step.status, step.detail = _lesson_step(step, out, left)
            return ""
        elif step.name == "ncu catalogue":
            step.detail = _ncu_catalogue(out, data_root, practice, left)
            if step.detail.startswith("skipped: "):
                step.status, step.detail = "skipped", step.detail.removeprefix("skipped: ")
                return ""
        elif step.name == "widget":
            if util.find_spec("ipywidgets") is None:
                step.status = "skipped"
                step.detail = "ipywidgets is not installed here (the validation wheelhouse has it)"
                return ""
            with context(), plans.patched(plans.plan_patches(rehearsal.SWEEP_PLANS[SPREAD_SWEEP]) if practice else []):
                state["widget_s"] = widget_response_s(practice)
            step.detail = f"{state['widget_s']:.2f} s"
        step.status = "done"
        return ""
    except (_Stopped, KeyboardInterrupt):
        step.status, step.detail = "not run", "interrupted"
        raise
    except Exception as exc:  # one step's failure is a finding: report it and go on
        line = explain_gpu_error(exc, step.name) or f"{type(exc).__name__}: {exc}"
        step.status, step.detail = "failed", " ".join(line.split())[:400]
        return (f"not run: after {step.name}'s error the GPU context is unusable" if RESTART in line else "")
    finally:
        step.seconds = round(time.monotonic() - began, 1)
