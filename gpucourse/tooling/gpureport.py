"""``make gpu-report``: one command for whoever has a GPU, one self-contained report.

    python -m gpucourse gpu-report [--out build/gpu-report] [--rehearsal]

1. runs the GPU tier (``pytest -m gpu``) and tabulates every GPU expectation of every lesson:
   lesson, claim, measured ratio, threshold (where the test records them with pytest's
   ``record_property("ratio", …)`` and ``record_property("threshold", …)``), pass or fail;
2. records every registered sweep (``make record``) into ``<out>/data/reference/<gpu>/``;
3. measures the harness's run-to-run spread: the same sweep twice, the relative difference of
   each point's median (target ≤ 2 % for kernels of ≥ 100 µs);
4. times a widget's response: a lesson chart's control changed, until the chart is redrawn;
5. writes ``<out>/gpu-report.md`` with all of it, the device and the provenance.

``--rehearsal`` runs the same on a machine without a GPU (gpucourse.measure.rehearsal): the GPU tier
is collected but not run, sweeps run on the simulator at small sizes, and every number and the
report itself are marked rehearsal.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from gpucourse.errors import NoGPU
from gpucourse.measure import harness, reference, rehearsal, runtime

ROOT = Path(__file__).resolve().parents[2]
SPREAD_SWEEP = "warps.staircase"
SPREAD_TARGET = 0.02  # relative difference between two runs of the same point
SPREAD_MIN_MS = 0.1  # the target holds for kernels of at least 100 µs


# --- 1. the GPU tier, through a pytest plugin (``-p gpucourse.tooling.gpureport``) ----------------------------


def pytest_addoption(parser):
    parser.addoption("--gpureport-json", default=None, help="write the GPU tier's expectations here")


_ROWS: dict[str, dict] = {}  # the plugin's expectations, by test id (one pytest run per process)


def pytest_configure(config):
    _ROWS.clear()


def _claim(item) -> tuple[str, str]:
    module_doc = (getattr(item.module, "__doc__", None) or "").strip()
    lesson = module_doc.split(":", 1)[0].splitlines()[0] if module_doc else item.module.__name__
    doc = (getattr(item.function, "__doc__", None) or "").strip()
    claim = doc.splitlines()[0] if doc else item.name.removeprefix("test_").replace("_", " ")
    return lesson, claim


def pytest_collection_modifyitems(session, config, items):
    for item in items:
        if "gpu" in item.keywords:
            lesson, claim = _claim(item)
            _ROWS[item.nodeid] = {"test": item.nodeid, "lesson": lesson, "claim": claim,
                                              "outcome": "not run", "ratio": None, "threshold": None,
                                              "checked": [], "message": ""}


def pytest_assertion_pass(item, lineno, orig, expl):
    """Each passing assert of a GPU test with its values, e.g. "1234 <= (0.35 * 3500)": the measured
    side and the threshold (pytest calls this with ``-o enable_assertion_pass_hook=true``)."""
    row = _ROWS.get(item.nodeid)
    if row is not None:
        row["checked"].append(" ".join(expl.splitlines()[0].split())[:200])


def pytest_runtest_logreport(report):
    row = _ROWS.get(report.nodeid)
    if row is None:
        return
    properties = dict(report.user_properties)
    row["ratio"] = properties.get("ratio", row["ratio"])
    row["threshold"] = properties.get("threshold", row["threshold"])
    if report.when == "call" or report.outcome != "passed":
        row["outcome"] = report.outcome
        if report.outcome != "passed" and report.longrepr is not None:
            text = str(getattr(report.longrepr, "reprcrash", None) and report.longrepr.reprcrash.message
                       or report.longrepr)
            row["message"] = " ".join(text.split())[:300]


def pytest_sessionfinish(session):
    path = session.config.getoption("--gpureport-json")
    if path:
        Path(path).write_text(json.dumps(list(_ROWS.values()), indent=1))


GPU_MARK = "mark.gpu"  # tests/conftest.py stops a run with a GPU test in a file without it


def gpu_test_files(tests: Path) -> list[Path]:
    """The test files that can hold GPU tests: those that say ``mark.gpu``. Collecting only these is
    about 20 s less than collecting the whole suite (every module imported, its asserts rewritten)."""
    return sorted(p for p in tests.glob("test_*.py") if GPU_MARK in p.read_text(encoding="utf-8"))


def run_gpu_tier(out: Path, *, practice: bool, tests: Path = ROOT / "tests") -> list[dict]:
    """Every GPU expectation with its outcome and the values its asserts compared (collected only,
    in a rehearsal)."""
    out.mkdir(parents=True, exist_ok=True)
    target = out / "expectations.json"
    env = dict(os.environ)
    if practice:
        env["GPUCOURSE_MODE"] = "sim"
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    command = [sys.executable, "-m", "pytest", "-m", "gpu", "-p", "gpucourse.tooling.gpureport",
               "-p", "no:cacheprovider", "-o", "enable_assertion_pass_hook=true", "-q",
               f"--gpureport-json={target}", *map(str, gpu_test_files(tests))]
    if practice:
        command.insert(-1, "--collect-only")
    # a fresh bytecode cache: test modules' asserts are rewritten again, now with the pass hook
    env["PYTHONPYCACHEPREFIX"] = str(out / "pycache")
    done = subprocess.run(command, cwd=tests.parent, env=env, capture_output=True, text=True)
    if not target.exists():
        raise RuntimeError(f"the GPU tier did not run: {(done.stdout + done.stderr)[-2000:]}")
    rows = json.loads(target.read_text())
    for row in rows:
        row["checked"] = "; ".join(row.get("checked", [])) or None
    if practice:
        for row in rows:
            row["outcome"] = "not run (rehearsal: no GPU)"
    return rows


# --- 3. run-to-run spread, 4. widget response ------------------------------------------------------


def _run_sweep(name: str, practice: bool) -> pd.DataFrame:
    return rehearsal.run_sweep(name) if practice else reference.load_all_sweeps()[name].run()


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


# --- 5. the report ------------------------------------------------------------------------------------


@dataclass
class Report:
    path: Path
    data_folder: Path
    expectations: list[dict]
    spread: pd.DataFrame
    widget_s: float
    provenance: dict
    written: list[Path]  # the files `make record` wrote, one per recorded sweep


def _table(rows: list[dict], columns: list[str]) -> str:
    def cell(value) -> str:
        if value is None or (isinstance(value, float) and pd.isna(value)):
            return "—"
        if isinstance(value, float):
            return f"{value:.4g}"
        return str(value).replace("|", "\\|")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(c)) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def write_report(out: Path, *, practice: bool, expectations: list[dict], spread_table: pd.DataFrame,
                 widget_s: float, meta: dict, data_folder: Path) -> Path:
    mark = ("**REHEARSAL** — made on a machine without a GPU: sweeps ran on Numba's simulator at small "
            "sizes and every time is a counted placeholder, not GPU performance. The GPU tier was "
            "collected, not run.\n\n" if practice else "")
    passed = sum(r["outcome"] == "passed" for r in expectations)
    counted = spread_table[spread_table.counts]
    spread_line = (f"{len(counted)} of {len(spread_table)} points are ≥ 100 µs; "
                   f"{int(counted.meets_target.sum())} of them within {SPREAD_TARGET:.0%}"
                   + (f" (largest {counted.relative_spread.max():.2%})" if len(counted) else ""))
    sections = [
        f"# GPU report{' (REHEARSAL)' if practice else ''}: {meta['device']}\n",
        mark,
        "## Device and provenance\n",
        "```json\n" + json.dumps(meta, indent=2, sort_keys=True) + "\n```\n",
        f"## GPU expectations ({passed} of {len(expectations)} passed)\n",
        "Where a test records them (`record_property`), the ratio and threshold have their own columns; "
        "\"checked\" lists every passing assert with the values it compared (measured side, threshold).\n",
        _table(expectations, ["lesson", "claim", "ratio", "threshold", "checked", "outcome", "message"]) + "\n",
        f"## Harness run-to-run spread: {SPREAD_SWEEP} twice\n",
        f"Target: ≤ {SPREAD_TARGET:.0%} for kernels of ≥ {SPREAD_MIN_MS * 1000:.0f} µs. {spread_line}.\n",
        _table(spread_table.to_dict("records"), list(spread_table.columns)) + "\n",
        "## Widget response\n",
        f"Lesson 01's staircase chart, control moved to redrawn chart: {widget_s:.2f} s"
        + (" (rehearsal: simulator time on the CPU)" if practice else "") + ".\n",
        "## Recorded data\n",
        f"`{data_folder.relative_to(out)}/`: every registered sweep's CSV and `provenance.json`. To "
        "contribute it, copy the folder to `data/reference/` and open a pull request (README, "
        "\"Contribute a recording\")." + (" A rehearsal folder is refused there." if practice else "") + "\n",
    ]
    recorded = json.loads((data_folder / reference.PROVENANCE_FILE).read_text())
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


def build(out: Path, *, practice: bool = False, run_tier: bool = True) -> Report:
    """Run everything and write the report (inside a rehearsal when ``practice``)."""
    out = Path(out)
    if not practice and not runtime.is_gpu():
        raise NoGPU("make gpu-report needs a GPU and there is none here; "
                    "`make gpu-report REHEARSAL=1` rehearses it on the CPU")
    out.mkdir(parents=True, exist_ok=True)
    expectations = run_gpu_tier(out, practice=practice) if run_tier else []
    command = "make gpu-report" + (" REHEARSAL=1" if practice else "")
    data_root = out / "data" / "reference"

    def body():
        written = reference.record(root=data_root, command=command)
        folder = written[0].parent if written else data_root / (rehearsal.SLUG if practice else runtime.device().slug)
        table = spread(_run_sweep(SPREAD_SWEEP, practice), _run_sweep(SPREAD_SWEEP, practice))
        if practice:  # the chart's own sweep at rehearsal sizes
            with rehearsal._patched(rehearsal.plan_patches(rehearsal.SWEEP_PLANS["warps.staircase"])):
                widget_s = widget_response_s(practice)
        else:
            widget_s = widget_response_s(practice)
        meta = harness.provenance(command, rehearsal=practice)
        return folder, table, widget_s, meta, written

    if practice:
        with rehearsal.rehearse():
            folder, table, widget_s, meta, written = body()
    else:
        folder, table, widget_s, meta, written = body()
    path = write_report(out, practice=practice, expectations=expectations, spread_table=table,
                        widget_s=widget_s, meta=meta, data_folder=folder)
    return Report(path, folder, expectations, table, widget_s, meta, written)
