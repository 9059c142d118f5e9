"""Run a lesson as a learner would and move every widget it made: ``python -m gpucourse widget-run``.

    python -m gpucourse widget-run [--lesson 03] [--json out.json] [--timeout SECONDS]
    python -m gpucourse widget-run --count [--lesson 03]

Each lesson runs in a child Python: its code cells as plain Python (``plainrun``'s cells, from a real
file), with every ipywidgets widget it constructs collected (``Widget.on_widget_constructed``). Then
every value control is moved through its range at least once: a slider to its minimum, its maximum and a
middle value; a dropdown, toggle buttons or a selection slider to every option (a selection slider: first,
last, middle); a checkbox or toggle button both ways; a button with click handlers is clicked; text
inputs are left alone. Each control goes back to its first value at the end. A move is timed from the
value's change until every chart it started has redrawn (``LiveChart.wait``), and its error is caught: an
exception from a callback, or a chart's error line. Per lesson: wall seconds, moves, the slowest move and
every error. On a GPU a move must take ≤ 1 s (``MOVE_LIMIT_S``); in simulator mode the times are the
simulator's on the CPU, recorded only. A lesson has a time limit (``--timeout``): what it moved before the
limit is kept, and the rest is reported as out of time.

``--count``: run each lesson's cells and count the moves it would make, moving nothing, and write the counts to
``widget_moves.json`` beside this module: gpu-report's plan prices a lesson's widgets step by them (issue 48). A
lesson makes the same controls in simulator mode as on a GPU but one, the "recorded on" choice of GPU recordings
(made only without a GPU, and left out of the count), so a CPU counts them; `make test-extra` fails when a
lesson's count differs from the file (tests/test_plainrun.py).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gpucourse.tooling import plainrun

MOVE_LIMIT_S = 1.0  # a widget move on a GPU, value changed to chart redrawn
LESSON_TIMEOUT_S = 600.0
CHART_WAIT_S = 120.0  # one move's chart runs at most this long before the move is an error


@dataclass
class WidgetRun:
    lesson: str
    seconds: float = 0.0
    moves: int = 0
    slowest: str = ""  # the control and the value it moved to
    slowest_s: float | None = None
    errors: list[str] = field(default_factory=list)
    timed_out: bool = False
    planned_moves: int = 0  # the moves its controls call for, counted once its cells have run

    def within_limit(self) -> bool:
        return self.slowest_s is None or self.slowest_s <= MOVE_LIMIT_S

    def row(self, gpu: bool) -> dict:
        """One line of the table; the ≤ 1 s check only where the times are a GPU's."""
        check = ("pass" if self.within_limit() else "FAIL") if gpu else "recorded (simulator: not GPU time)"
        return {"lesson": self.lesson, "wall_s": self.seconds, "moves": self.moves,
                "slowest_move": f"{self.slowest} {self.slowest_s:.3f} s" if self.slowest_s is not None else "—",
                f"≤ {MOVE_LIMIT_S:g} s": check,
                "errors": "; ".join(self.errors) or "none"}


# --- in the lesson's own process ------------------------------------------------------------------------


def describe(control) -> str:
    label = getattr(control, "description", "") or getattr(control, "tooltip", "") or ""
    return f"{type(control).__name__} '{label}'" if label else type(control).__name__


def positions(control) -> list | None:
    """The values a control visits (its first value last), or None for a widget that is not a value control."""
    import ipywidgets as w

    if getattr(control, "disabled", False):
        return None
    if isinstance(control, w.widgets.widget_selection._Selection):  # Dropdown, ToggleButtons, SelectionSlider, ...
        indices = list(range(len(control.options)))
        if isinstance(control, w.SelectionSlider) and len(indices) > 3:
            indices = [0, len(indices) - 1, len(indices) // 2]
        return [("index", i) for i in indices] + [("index", control.index)]
    if isinstance(control, w.Checkbox | w.ToggleButton):
        return [("value", not control.value), ("value", control.value)]
    if isinstance(control, w.FloatLogSlider):
        low, high = control.base ** control.min, control.base ** control.max
        return [("value", v) for v in (low, high, control.base ** ((control.min + control.max) / 2), control.value)]
    if type(control).__name__.endswith("Slider") and hasattr(control, "min") and not isinstance(control.value, tuple):
        middle = (control.min + control.max) / 2
        if isinstance(control.value, int):
            middle = control.min + round((middle - control.min) / control.step) * control.step
        return [("value", v) for v in (control.min, control.max, middle, control.value)]
    if isinstance(control, w.Button) and control._click_handlers.callbacks:
        return [("click", None)]
    return None  # text inputs, outputs, labels, boxes: left alone


def planned_moves(made: list) -> int:
    """How many moves ``move_all`` makes of the widgets in ``made`` on a GPU: a control made only without one
    (``without_gpu_only``: the "recorded on" choice of GPU recordings) is left out of the count."""
    return sum(len(positions(control) or []) for control in made if not getattr(control, "without_gpu_only", False))


def _cell_of(program: Path, exc: BaseException) -> str:
    """Which code cell an exception came from ("cell 3"), from the program's line in its traceback."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == str(program)]
    if not frames:
        return "setup"
    lines = program.read_text(encoding="utf-8").splitlines()[: frames[-1].lineno]
    marks = [m.group(1) for line in lines if (m := re.match(r"print\('--- cell (\d+) of", line))]
    return f"cell {marks[-1]}" if marks else "before cell 1"


def _chart_errors(charts) -> list[str]:
    return [re.sub(r"<[^>]+>", "", c.status.value).strip() for c in charts]


def move_all(made: list, result: WidgetRun, save) -> None:
    """Move every value control in ``made`` (every widget constructed, in order), timing and checking each move."""
    from gpucourse.viz.widgets import LiveChart

    charts = [c for c in made if isinstance(c, LiveChart)]
    for chart in charts:  # a chart whose first run failed (on a GPU it runs in the worker: wait for it)
        chart.wait(CHART_WAIT_S)
        if chart.errors:
            result.errors.append(f"chart's first run: {_chart_errors([chart])[0]}"[:300])
    for control in list(made):
        for how, target in positions(control) or []:
            label = f"{describe(control)} -> {target if how != 'index' else control.options[target]!r}"[:120]
            before = [c.errors for c in charts]
            started = time.perf_counter()
            try:
                if how == "click":
                    control.click()
                else:
                    setattr(control, how, target)
                for chart in charts:
                    chart.wait(CHART_WAIT_S)
                error = "; ".join(line for c, n, line in zip(charts, before, _chart_errors(charts)) if c.errors > n)
                if any(c._busy for c in charts):
                    error = f"a chart still running after {CHART_WAIT_S:.0f} s"
            except Exception as exc:  # a callback's error is the finding
                error = f"{type(exc).__name__}: {exc}"
            seconds = time.perf_counter() - started
            result.moves += 1
            if result.slowest_s is None or seconds > result.slowest_s:
                result.slowest, result.slowest_s = label, round(seconds, 4)
            if error:
                result.errors.append(f"{label}: {' '.join(error.split())}"[:300])
            save()


def child(path: Path, out: Path, count_only: bool = False) -> int:
    """In the lesson's process: run its cells, then move what they made (``count_only``: count the moves and make
    none); write the result after every move."""
    import runpy

    import ipywidgets

    made: list = []
    previous = ipywidgets.Widget._widget_construction_callback
    ipywidgets.Widget.on_widget_constructed(made.append)
    result = WidgetRun(Path(path).stem)
    started = time.monotonic()

    def save() -> None:
        result.seconds = round(time.monotonic() - started, 2)
        out.write_text(json.dumps(asdict(result)), encoding="utf-8")

    with tempfile.TemporaryDirectory(prefix="widgetrun-") as folder:
        program = Path(folder) / f"{Path(path).stem}_plain.py"
        program.write_text(plainrun.script(path), encoding="utf-8")
        try:
            runpy.run_path(str(program), run_name="__main__")
        except BaseException as exc:  # the lesson stopped: what it made before is still moved
            if isinstance(exc, KeyboardInterrupt):
                raise
            result.errors.append(f"{_cell_of(program, exc)}: {type(exc).__name__}: {exc}"[:300])
        result.planned_moves = planned_moves(made)
        save()
        try:
            if not count_only:
                move_all(made, result, save)
        finally:
            ipywidgets.Widget.on_widget_constructed(previous)
            save()
    return 0


# --- the driver: one child per lesson, with its time limit ---------------------------------------------------


# A lesson's child Python can be started ahead (``prestart``, issue 48): gpu-report starts the next lesson's while the
# lesson before it runs; it imports what a child's start-up costs (PRESTART_MODULES: CPU work only, no CUDA context is
# made before a lesson's first kernel, so the running lesson's measurements still have the GPU alone), then waits for
# its go on stdin. ``run`` takes a child started ahead for its lesson and contract, else starts one and gives the go.
PRESTART_MODULES = ("numpy", "pandas", "plotly.graph_objects", "ipywidgets", "numba", "numba.cuda", "cupy", "torch")
WAITING = "imported; waiting for its go"  # what a child started ahead says once its imports are done
_STARTED: dict[tuple[str, str | None, bool], tuple[subprocess.Popen, tempfile.TemporaryDirectory]] = {}


def prestart(path: Path, contract: str | None = None) -> None:
    """Start ``path``'s child Python now, to wait for ``run``'s go with its imports done (once per lesson and
    contract)."""
    _start(path, contract, ahead=True)


def _start(path: Path, contract: str | None, ahead: bool, count_only: bool = False) -> None:
    path = Path(path).resolve()
    key = (str(path), contract, count_only)
    if key in _STARTED:
        return
    env = plainrun.child_env(path)
    if contract is not None:
        env["GPUCOURSE_MEASURE"] = contract
    folder = tempfile.TemporaryDirectory(prefix="widgetrun-out-")
    target = Path(folder.name) / "result.json"
    command = [sys.executable, "-m", "gpucourse.tooling.widgetrun", *(["--wait"] if ahead else []),
               *(["--count"] if count_only else []), "--child", str(path), str(target)]
    _STARTED[key] = (subprocess.Popen(command, cwd=path.parent, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True), folder)


def prestarted() -> list[str]:
    """The lessons whose child waits for its go."""
    return [Path(key[0]).stem for key in _STARTED]


def stop_prestarted() -> None:
    """Stop every child started ahead that no ``run`` took (a report cut by its budget, a step already done)."""
    while _STARTED:
        process, folder = _STARTED.popitem()[1]
        process.kill()
        process.communicate()
        folder.cleanup()


def run(path: Path, timeout_s: float = LESSON_TIMEOUT_S, contract: str | None = None,
        count_only: bool = False) -> WidgetRun:
    """Run one lesson in a child Python with its widgets moved; never raises. Past ``timeout_s`` (from its go) the
    child is stopped and what it recorded so far is returned, marked out of time. ``contract``: the harness's contract
    in the child (GPUCOURSE_MEASURE), else the one in force here. A child started ahead (``prestart``) is used.
    ``count_only``: its cells run and its moves are counted (``planned_moves``), none made."""
    path = Path(path)
    started = time.monotonic()
    _start(path, contract, ahead=False, count_only=count_only)  # unless one was started ahead: it imports as asked
    process, folder = _STARTED.pop((str(path.resolve()), contract, count_only))
    target = Path(folder.name) / "result.json"
    timed_out, tail = False, ""
    try:
        try:
            _out, err = process.communicate("go\n", timeout=timeout_s)
            tail = "" if process.returncode == 0 else (err.strip().splitlines() or ["(no error text)"])[-1]
        except subprocess.TimeoutExpired:
            timed_out = True
            process.kill()
            process.communicate()
        result = WidgetRun(**json.loads(target.read_text())) if target.exists() else WidgetRun(path.stem)
    finally:
        folder.cleanup()
    result.seconds = round(time.monotonic() - started, 1)
    result.timed_out = timed_out
    if timed_out:
        result.errors.append(f"stopped after {timeout_s:.0f} s (its time limit)")
    elif tail:
        result.errors.append(f"the lesson's process failed: {tail}"[:300])
    return result


def lessons(root: Path = plainrun.ROOT) -> list[Path]:
    """The lessons (not the labs: they draw no widgets), in course order."""
    return [p for p in plainrun.sources(root) if p.parent.name == "notebooks"]


MOVES_PER_CHART = 10  # the plan's model for a lesson not in MOVES_FILE: a chart's controls take about this many moves
MOVES_FILE = Path(__file__).with_name("widget_moves.json")  # each lesson's moves, counted (``--count``)


def counted_moves() -> dict[str, int]:
    """Each lesson's moves as ``--count`` last counted them ({} where never counted)."""
    return json.loads(MOVES_FILE.read_text(encoding="utf-8"))["moves"] if MOVES_FILE.exists() else {}


def count(chosen: list[Path], timeout_s: float = LESSON_TIMEOUT_S) -> int:
    """``--count``: each lesson's moves counted (its cells run, nothing moved) and written to MOVES_FILE; a lesson
    that failed keeps the count it had. 1 if any failed."""
    moves, failed = counted_moves(), []
    for path in chosen:
        result = run(path, timeout_s, count_only=True)
        if result.errors or result.timed_out:
            failed.append(path.stem)
            print(f"{path.stem}: not counted: {'; '.join(result.errors)}", file=sys.stderr, flush=True)
            continue
        moves[path.stem] = result.planned_moves
        print(f"{path.stem}: {result.planned_moves} moves ({result.seconds} s to run its cells)", flush=True)
    header = ("each lesson's widget moves (widgetrun.positions of every control its cells make), counted by "
              "`python -m gpucourse widget-run --count`; gpu-report's plan prices a lesson's widgets step by them")
    MOVES_FILE.write_text(json.dumps({"about": header, "moves": dict(sorted(moves.items()))}, indent=1) + "\n",
                          encoding="utf-8")
    print(f"written: {MOVES_FILE}")
    return 1 if failed else 0


def rule_moves(text: str) -> int:
    """A lesson's moves by the rule, for a lesson never counted: MOVES_PER_CHART a chart its source builds."""
    return len(re.findall(r"_(?:widget|explorer|chart)\(|LiveChart\(", text)) * MOVES_PER_CHART


def estimate_s(path: Path, startup_s: float, per_cell_s: float, move_s: float = MOVE_LIMIT_S) -> float:
    """A lesson's estimated seconds: its start-up, its cells, and its moves (as counted in MOVES_FILE, else
    MOVES_PER_CHART a chart it builds), ``move_s`` a move (default: the limit; gpu-report passes what a real report
    measured for one)."""
    text = Path(path).read_text(encoding="utf-8")
    moves = counted_moves().get(Path(path).stem)
    if moves is None:
        moves = rule_moves(text)
    return startup_s + len(plainrun.code_cells(text)) * per_cell_s + moves * move_s


def report_step(path: Path, out: Path, *, gpu: bool, timeout_s: float, contract: str | None = None) -> tuple[str, str]:
    """``gpu-report``'s step for one lesson: run it (under ``contract``), keep its row in ``out``/widget-run.json and
    the table in ``out``/widget-run.md; returns the step's status and detail (failed: an error, or a GPU move over
    1 s)."""
    result = run(path, timeout_s, contract=contract)
    saved = Path(out) / "widget-run.json"
    rows = {r["lesson"]: r for r in (json.loads(saved.read_text()) if saved.exists() else [])}
    rows[result.lesson] = {**asdict(result), "gpu": gpu}
    saved.write_text(json.dumps(list(rows.values()), indent=1), encoding="utf-8")
    shown = [WidgetRun(**{k: v for k, v in r.items() if k != "gpu"}).row(r["gpu"]) for r in rows.values()]
    note = ("Each control moved through its range (`python -m gpucourse widget-run`); on a GPU a move must take "
            f"≤ {MOVE_LIMIT_S:g} s. " + ("" if gpu else "Simulator mode: the times are the simulator's on the CPU, "
                                          "not GPU time, so they are recorded and not checked. "))
    (Path(out) / "widget-run.md").write_text(f"## Every lesson's widgets moved\n\n{note}\n\n{table(shown)}\n",
                                             encoding="utf-8")
    row = result.row(gpu)
    check = row[f"≤ {MOVE_LIMIT_S:g} s"]
    detail = f"{result.moves} moves, slowest {row['slowest_move']} ({check}); errors: {row['errors']}"
    if result.timed_out:
        return "not run (time)", detail
    return ("failed" if result.errors or (gpu and not result.within_limit()) else "done"), detail[:400]


def table(rows: list[dict]) -> str:
    columns = list(rows[0]) if rows else ["lesson"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return "\n".join(lines + ["| " + " | ".join(str(r[c]).replace("|", "\\|") for c in columns) + " |" for r in rows])


def _import_ahead() -> None:
    """A child started ahead imports what its start-up costs while it waits (a module missing here is the lesson's
    to report when it runs)."""
    import importlib

    for name in PRESTART_MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 (an optional stack: CuPy or torch absent, a driver missing)
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpucourse widget-run", description=__doc__.splitlines()[0])
    parser.add_argument("--lesson", default=None, help="only lessons whose file name starts with this, e.g. 03")
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--timeout", type=float, default=LESSON_TIMEOUT_S, help="seconds a lesson may take")
    parser.add_argument("--child", nargs=2, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--wait", action="store_true", help=argparse.SUPPRESS)  # a child started ahead (prestart)
    parser.add_argument("--count", action="store_true",
                        help=f"count each lesson's moves, make none, and write them to {MOVES_FILE.name}")
    args = parser.parse_args(argv)
    if args.child:
        if args.wait:
            _import_ahead()
            print(WAITING, flush=True)
            if sys.stdin.readline().strip() != "go":  # the parent stopped it (or is gone): nothing to run
                return 0
        return child(Path(args.child[0]), Path(args.child[1]), count_only=args.count)
    from gpucourse.errors import InvalidConfig
    from gpucourse.measure import runtime

    chosen = [p for p in lessons() if args.lesson is None or p.stem.startswith(args.lesson)]
    if not chosen:
        raise InvalidConfig(f"no lesson's file name starts with {args.lesson!r} (notebooks/NN_name.py)")
    if args.count:
        return count(chosen, args.timeout)
    gpu = runtime.is_gpu()
    print("GPU: each move must take ≤ 1 s." if gpu else
          "Simulator mode: the times are the simulator's on the CPU, not GPU time; recorded, not checked.")
    results = []
    for path in chosen:
        results.append(run(path, args.timeout))
        print(f"{path.stem}: {results[-1].seconds} s, {results[-1].moves} moves", flush=True)
    print(table([r.row(gpu) for r in results]))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in results], indent=1), encoding="utf-8")
    return 1 if any(r.errors or (gpu and not r.within_limit()) for r in results) else 0


if __name__ == "__main__":  # ``-m`` imports ``gpucourse`` first: it decides GPU or simulator
    sys.exit(main())
