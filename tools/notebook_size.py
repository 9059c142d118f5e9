"""How big is a lesson once a learner has run it and JupyterLab saved it?

Executes each lesson headless the way a learner's JupyterLab runs and saves it: a fresh kernel
with none of the course's variables preset (so the notebook alone decides the mode), plotly's own
renderer choice for a Jupyter kernel (no PLOTLY_RENDERER), and the widgets' state stored in the
notebook's metadata (nbclient's ``store_widget_state``, what JupyterLab saves). Prints the saved
size and what weighs most, per output mimetype and for the widget state.

    python tools/notebook_size.py                      # every lesson
    python tools/notebook_size.py notebooks/03_coalescing.py --renderer plotly_mimetype+notebook
    python tools/notebook_size.py --saved build/executed   # weigh notebooks already executed

The test (tests/test_notebooks.py) weighs the notebooks it executes anyway with ``weigh`` and
holds every lesson to LIMIT_BYTES.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
LIMIT_BYTES = 2_000_000  # issue 18: an executed lesson saved with its widget state stays under 2 MB
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
COURSE_VARIABLES = ("NUMBA_ENABLE_CUDASIM", "GPUCOURSE_MODE", "GPUCOURSE_STATIC", "PLOTLY_RENDERER")


def learner_env(renderer: str | None = None) -> dict[str, str]:
    """This environment without the course's variables (a learner's kernel starts without them)."""
    env = {k: v for k, v in os.environ.items() if k not in COURSE_VARIABLES}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    if renderer:
        env["PLOTLY_RENDERER"] = renderer
    return env


def saved_bytes(nb: nbformat.NotebookNode) -> int:
    """The size of the file JupyterLab would write (nbformat's JSON, UTF-8)."""
    return len(nbformat.writes(nb).encode("utf-8"))


def _size(value) -> int:
    text = value if isinstance(value, str) else json.dumps(value)
    return len(text.encode("utf-8"))


def weigh(nb: nbformat.NotebookNode) -> Counter:
    """Bytes per kind: each output mimetype (and 'stream'/'error' text), the stored widget state
    (as a whole and per widget model), and the notebook's sources."""
    parts: Counter = Counter()
    for cell in nb.cells:
        parts["source"] += _size(cell.source)
        for out in cell.get("outputs", []):
            if out.output_type == "stream":
                parts["stream"] += _size(out.text)
            elif out.output_type == "error":
                parts["error"] += _size(out.get("traceback", []))
            else:
                for mimetype, data in out.get("data", {}).items():
                    parts[mimetype] += _size(data)
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    for model in state.values():
        name = model.get("model_name", "?")
        parts[f"widget state: {name}"] += _size(model)
    return parts


def execute(source: Path, renderer: str | None = None, timeout_s: int = 600) -> nbformat.NotebookNode:
    """Run one lesson as a learner's JupyterLab would (see the module's docstring)."""
    sys.path.insert(0, str(ROOT))
    from gpucourse.tooling import headless
    from gpucourse.tooling.build import to_notebook

    return headless.execute(to_notebook(source), source.parent, env=learner_env(renderer), cell_timeout_s=timeout_s,
                            store_widget_state=True)


def report(name: str, nb: nbformat.NotebookNode, top: int = 6) -> str:
    size = saved_bytes(nb)
    verdict = "ok" if size <= LIMIT_BYTES else f"OVER {LIMIT_BYTES / 1e6:.1f} MB"
    heaviest = ", ".join(f"{kind} {n / 1e3:.0f} kB" for kind, n in weigh(nb).most_common(top))
    return f"{name}: {size:,} bytes ({size / 1e6:.2f} MB, {verdict}); heaviest: {heaviest}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lessons", nargs="*", type=Path, help="notebooks/NN_x.py (default: every lesson)")
    parser.add_argument("--renderer", help="PLOTLY_RENDERER for the kernel (default: plotly's own choice, as "
                                           "in a learner's JupyterLab); the course's hub sets one")
    parser.add_argument("--save", type=Path, help="also write each executed notebook into this folder")
    parser.add_argument("--saved", type=Path, help="weigh the .ipynb files in this folder instead of executing")
    args = parser.parse_args(argv)
    over = 0
    if args.saved:
        for path in sorted(args.saved.glob("*.ipynb")):
            nb = nbformat.read(path, as_version=4)
            print(report(path.stem, nb), flush=True)
            over += saved_bytes(nb) > LIMIT_BYTES
        return 1 if over else 0
    lessons = args.lessons or sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.py"))
    for source in lessons:
        started = time.monotonic()
        nb = execute(source.resolve(), args.renderer)
        print(report(source.stem, nb) + f" [executed in {time.monotonic() - started:.0f} s]", flush=True)
        over += saved_bytes(nb) > LIMIT_BYTES
        if args.save:
            args.save.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, args.save / f"{source.stem}.ipynb")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
