"""Run a lesson's or a lab solution's code cells top to bottom as plain Python (no Jupyter needed).

The jupytext percent sources (``notebooks/*.py``, ``solutions/*/*.py``) are Python already; a
validation host without the Jupyter stack runs their code cells in a child process, so the GPU
code paths of every lesson run where JupyterLab cannot (``gpu-report``'s full profile). Markdown
cells are skipped; IPython's ``display`` prints; charts render as JSON, never in a browser.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRELUDE = ("import builtins\n"
           "builtins.display = lambda *objects, **kwargs: print(*objects)  # IPython's, in a plain process\n"
           # a lab's hidden blocks read answers through the names the autograder binds for them (hidden.py)
           "from gpucourse.tooling.grading import frozen as _frozen\n"
           "from gpucourse.tooling.grading.traced import trace_launch as _trace_launch\n"
           "for _name in ('freeze', 'call', 'call_each', 'launch', 'observe'):\n"
           "    setattr(builtins, _name, getattr(_frozen, _name))\n"
           "builtins.trace_launch = _trace_launch\n")


def code_cells(source: str) -> list[str]:
    """The code cells of a percent-format source, in order (markdown and raw cells left out)."""
    cells, current, keep = [], [], False
    for line in source.splitlines():
        if line.startswith("# %%"):
            if keep and any(s.strip() for s in current):
                cells.append("\n".join(current))
            keep, current = "[markdown]" not in line and "[raw]" not in line, []
            continue
        if keep:
            current.append(f"# (IPython only) {line}" if line.lstrip().startswith(("%", "!")) else line)
    if keep and any(s.strip() for s in current):
        cells.append("\n".join(current))
    return cells


def script(path: Path) -> str:
    """One program: the prelude, then every code cell, each announced (its number shows where it failed)."""
    cells = code_cells(Path(path).read_text(encoding="utf-8"))
    parts = [PRELUDE] + [f"print('--- cell {i} of {len(cells)}', flush=True)\n{cell}" for i, cell in
                         enumerate(cells, 1)]
    return "\n\n".join(parts) + "\n"


@dataclass
class PlainRun:
    path: Path
    ok: bool
    seconds: float
    detail: str  # the last line of output, or why it stopped
    timed_out: bool = False  # stopped by its time limit: out of time, not broken


def child_env(path: Path) -> dict:
    """The environment a lesson's child Python runs in: charts as JSON, its folder and this checkout first."""
    return {**os.environ, "PLOTLY_RENDERER": "json", "MPLBACKEND": "Agg",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(path).resolve().parent), str(ROOT),
                                                        os.environ.get("PYTHONPATH")]))}


def run(path: Path, timeout_s: float = 600.0) -> PlainRun:
    """Run ``path``'s code cells in a child Python (this checkout first on its path); never raises.

    The program is written to a real file and run from it (not ``python -c``): a function defined in a
    cell keeps its source, so ``inspect.getsource``, ``linecache`` and the microscope's source column work
    as they do in Jupyter."""
    import tempfile
    import time

    env = child_env(path)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="plainrun-") as folder:
        program = Path(folder) / f"{Path(path).stem}_plain.py"
        program.write_text(script(path), encoding="utf-8")
        try:
            done = subprocess.run([sys.executable, str(program)], cwd=Path(path).parent, env=env,
                                  capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return PlainRun(Path(path), False, round(time.monotonic() - started, 1),
                            f"stopped after {timeout_s:.0f} s", timed_out=True)
    seconds = round(time.monotonic() - started, 1)
    if done.returncode == 0:
        return PlainRun(Path(path), True, seconds, f"{len(code_cells(Path(path).read_text(encoding='utf-8')))} cells")
    cell = [line for line in done.stdout.splitlines() if line.startswith("--- cell")][-1:] or ["before cell 1"]
    error = (done.stderr.strip().splitlines() or ["(no error text)"])[-1]
    return PlainRun(Path(path), False, seconds, f"{cell[0].removeprefix('--- ')}: {error}"[:400])


def sources(root: Path = ROOT) -> list[Path]:
    """Every lesson and lab solution, in course order."""
    return sorted((root / "notebooks").glob("[0-9]*.py")) + sorted((root / "solutions").glob("lab*/lab*.py"))
