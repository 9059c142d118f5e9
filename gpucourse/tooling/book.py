"""`make book`: the course's static website, built with Jupyter Book from the lessons' text sources.

Every lesson (notebooks/NN_x.py) is executed here, in simulator mode, into build/book/NN_x.ipynb
with GPUCOURSE_STATIC=1: widgets render as their current chart plus a data table, and figures as
HTML that draws with one shared copy of plotly.js in _static/ (no CDN, no MathJax: the pages work
offline). No widget state is stored (each FigureWidget would embed all of plotly.js again).
Jupyter Book then renders the executed notebooks with book/_config.yml, book/intro.md and a table
of contents listing every lesson. Output: build/book/_build/html/.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from gpucourse.tooling.build import ROOT, lesson_sources, to_notebook, venv_env

BOOK_SRC = ROOT / "book"
STATIC_RENDERER = "gpucourse_static"
CELL_TIMEOUT_S = 600


def configure_static_plotly() -> None:
    """Figures as HTML that expects one shared plotly.js (served from the site's _static/)."""
    import plotly.io as pio
    from plotly.io._base_renderers import MimetypeRenderer

    class StaticSiteRenderer(MimetypeRenderer):
        def to_mimebundle(self, fig_dict):
            html = pio.to_html(fig_dict, include_plotlyjs=False, include_mathjax=False, full_html=False,
                               validate=False, config={"responsive": True, "displaylogo": False})
            return {"text/html": html}

    pio.renderers[STATIC_RENDERER] = StaticSiteRenderer()
    pio.renderers.default = STATIC_RENDERER


def kernel_env() -> dict:
    env = dict(venv_env(), GPUCOURSE_MODE="sim", GPUCOURSE_STATIC="1")
    env.pop("PLOTLY_RENDERER", None)  # the static renderer decides
    return env


def execute(source: Path, out: Path) -> tuple[Path, float]:
    """Run one lesson in a fresh simulator-mode kernel (working directory notebooks/, as in the lab)."""
    import nbformat

    from gpucourse.tooling import headless

    started = time.monotonic()
    nb = headless.execute(to_notebook(source), source.parent, env=kernel_env(), cell_timeout_s=CELL_TIMEOUT_S,
                          store_widget_state=False,
                          stderr=subprocess.DEVNULL)  # the kernel's own log, not cell output
    target = out / f"{source.stem}.ipynb"
    nbformat.write(nb, target)
    return target, time.monotonic() - started


def prepare(out: Path) -> Path:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for name in ("_config.yml", "intro.md"):
        shutil.copy(BOOK_SRC / name, out / name)
    shutil.copytree(BOOK_SRC / "_ext", out / "_ext", ignore=shutil.ignore_patterns("__pycache__"))
    import plotly

    (out / "_static").mkdir()
    shutil.copy(Path(plotly.__file__).parent / "package_data" / "plotly.min.js", out / "_static" / "plotly.min.js")
    lessons = lesson_sources()
    toc = ["format: jb-book", "root: intro", "chapters:"] + [f"  - file: {s.stem}" for s in lessons]
    (out / "_toc.yml").write_text("\n".join(toc) + "\n")
    return out


def execute_all(out: Path, workers: int | None = None) -> dict[str, float]:
    lessons = lesson_sources()
    workers = workers or max(1, min(2, os.cpu_count() or 1, len(lessons)))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        done = list(pool.map(execute, lessons, [out] * len(lessons)))
    return {path.stem: seconds for path, seconds in done}


def build(out: Path = ROOT / "build" / "book") -> Path:
    prepare(out)
    seconds = execute_all(out)
    print("executed in simulator mode: " + ", ".join(f"{k} {v:.0f} s" for k, v in seconds.items()))
    cmd = [str(Path(sys.executable).parent / "jupyter-book"), "build", str(out), "--quiet"]
    done = subprocess.run(cmd, env=venv_env(), capture_output=True, text=True)
    html_dir = out / "_build" / "html"
    if done.returncode != 0 or not (html_dir / "index.html").exists():
        raise RuntimeError(f"jupyter-book failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    print(f"built {html_dir / 'index.html'}")
    return html_dir


if __name__ == "__main__":
    os.chdir(ROOT)
    build()
