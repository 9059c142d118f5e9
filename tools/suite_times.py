"""How long the test suite took, and where the time went (issue 50: `make test` within 10 minutes).

A pytest plugin (tests/conftest.py loads it): every run writes ``build/test-times.json`` (the run's wall
time, each test's seconds with its set-up and teardown, per file and per xdist worker) and ends its
report with the wall time and the slowest tests, so a run that got slower says so, and says where.
``build/test-durations.json`` keeps each test's latest seconds across runs: the next run's order.

    python tools/suite_times.py                          # the summary of the last run
    python tools/suite_times.py --budget-s 900           # the same, and exit 1 if that run took longer

The budget check (``.ci/run`` runs it after ``make test``) fails only past a wide margin: times
measure the machine's load as well as the suite, so the budget is half as much again as the
README's 10 minutes, and the run's own numbers are printed either way.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIMES_PATH = ROOT / "build" / "test-times.json"
SLOWEST_SHOWN = 15
DURATIONS_NAME = "test-durations.json"  # in build/, beside test-times.json: each test's latest seconds
# `.ci/run`'s limit for `make test`'s pytest run: the README's 10 minutes (met on 2 cores, issue 50: pytest 555-590 s
# on fresh clones) and half as much again, so that a loaded machine does not fail it but a regression of minutes does
CI_BUDGET_S = 900


class SuiteTimes:
    """Collects each test's durations (on xdist's controller, the reports its workers send back)."""

    def __init__(self, config, path: Path | None = None):
        self.config = config
        self.path = path or Path(config.rootpath) / "build" / "test-times.json"  # this run's own checkout
        self.started = time.time()
        self.tests: dict[str, dict] = {}

    def pytest_runtest_logreport(self, report) -> None:
        entry = self.tests.setdefault(report.nodeid, {"seconds": 0.0, "outcome": "passed"})
        entry["seconds"] += report.duration
        entry[f"{report.when}_s"] = round(report.duration, 3)
        if getattr(report, "start", None) is not None:  # epoch seconds: when each worker was busy with what
            entry["start"] = round(min(entry.get("start", report.start), report.start), 1)
            entry["stop"] = round(max(entry.get("stop", report.stop), report.stop), 1)
        if report.failed or (report.skipped and entry["outcome"] == "passed"):
            entry["outcome"] = "failed" if report.failed else "skipped"
        node = getattr(report, "node", None)  # xdist's worker, on the controller
        worker = getattr(getattr(node, "gateway", None), "id", None) or os.environ.get("PYTEST_XDIST_WORKER")
        if worker:
            entry["worker"] = worker

    def summary(self) -> dict:
        return summarise(self.tests, round(time.time() - self.started, 1), list(self.config.invocation_params.args))

    def pytest_sessionfinish(self, session) -> None:
        if not self.tests:  # --collect-only, or nothing selected: keep the last run's record
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.summary(), indent=1) + "\n", encoding="utf-8")
        # every test's latest seconds, kept across runs (a narrow run updates its tests, forgets no other):
        # what tests/conftest.py orders the next run by
        durations = self.path.parent / DURATIONS_NAME
        known = recorded_seconds(self.path.parent.parent)
        known.update({plain_id(nodeid): round(entry["seconds"], 2) for nodeid, entry in self.tests.items()})
        durations.write_text(json.dumps(dict(sorted(known.items())), indent=0) + "\n", encoding="utf-8")

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.tests:
            return
        for line in report_lines(self.summary(), where=self.path):
            terminalreporter.write_line(line)


def plain_id(nodeid: str) -> str:
    """A test's id without the ``@group`` xdist's loadgroup appends (tests/conftest.py)."""
    return re.sub(r"@[\w.-]+$", "", nodeid)


def recorded_seconds(root: Path) -> dict[str, float]:
    """Each test's seconds the last time it ran under ``root`` (build/test-durations.json; tests/conftest.py
    orders the next run by them); empty where there was none or the file cannot be read."""
    try:
        known = json.loads((Path(root) / "build" / DURATIONS_NAME).read_text(encoding="utf-8"))
        return {plain_id(nodeid): float(seconds) for nodeid, seconds in known.items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def summarise(tests: dict[str, dict], wall_s: float, args: list[str]) -> dict:
    """The record written to build/test-times.json: wall time, per test, per file, per worker."""
    per_file: dict[str, float] = defaultdict(float)
    per_worker: dict[str, float] = defaultdict(float)
    for nodeid, entry in tests.items():
        entry["seconds"] = round(entry["seconds"], 3)
        per_file[nodeid.split("::")[0]] += entry["seconds"]
        per_worker[entry.get("worker", "main")] += entry["seconds"]
    return {"wall_s": wall_s, "args": args, "tests_run": len(tests),
            "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "per_worker_s": {k: round(v, 1) for k, v in sorted(per_worker.items())},
            "per_file_s": {k: round(v, 1) for k, v in sorted(per_file.items(), key=lambda kv: -kv[1])},
            "tests": dict(sorted(tests.items(), key=lambda kv: -kv[1]["seconds"]))}


def report_lines(record: dict, *, where: Path | None = None, budget_s: float | None = None) -> list[str]:
    """The summary a run ends with: wall time, the workers' busy time, the slowest files and tests."""
    wall = record["wall_s"]
    lines = [f"suite time: {wall:.0f} s wall ({wall / 60:.1f} min) for {record['tests_run']} tests"
             + ("; busy per worker: " + ", ".join(f"{w} {s:.0f} s" for w, s in record["per_worker_s"].items())
                if record["per_worker_s"] else "")]
    if budget_s is not None:
        verdict = "within" if wall <= budget_s else "OVER"
        lines.append(f"budget: {budget_s:.0f} s: {verdict} ({wall:.0f} s)")
    lines.append("slowest files (s, set-up and teardown included):")
    lines += [f"  {s:8.1f}  {name}" for name, s in list(record["per_file_s"].items())[:SLOWEST_SHOWN]]
    lines.append("slowest tests (s):")
    lines += [f"  {e['seconds']:8.1f}  {nodeid}" + (f"  [{e['worker']}]" if "worker" in e else "")
              for nodeid, e in list(record["tests"].items())[:SLOWEST_SHOWN]]
    if where is not None:
        lines.append(f"every test's time: {where}")
    return lines


def check(record: dict, budget_s: float) -> tuple[bool, list[str]]:
    """Whether the run kept to ``budget_s`` of wall time, and the summary that says where its time went."""
    return record["wall_s"] <= budget_s, report_lines(record, budget_s=budget_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--times", type=Path, default=TIMES_PATH, help="a test-times.json (default: the last run's)")
    parser.add_argument("--budget-s", type=float, help="exit 1 if that run's wall time was longer")
    args = parser.parse_args(argv)
    if not args.times.exists():
        print(f"no {args.times}: run pytest first", file=sys.stderr)
        return 2
    record = json.loads(args.times.read_text(encoding="utf-8"))
    if args.budget_s is None:
        print("\n".join(report_lines(record)))
        return 0
    ok, lines = check(record, args.budget_s)
    print("\n".join(lines))
    if not ok:
        print(f"error: the suite took {record['wall_s']:.0f} s, over its budget of {args.budget_s:.0f} s; "
              "the slowest files and tests are above (build/test-times.json has every test)", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
