"""`make book`: the course's static website, built with Jupyter Book from the lessons' text sources.

The sources are copied into build/book/ with book/_config.yml, book/intro.md and a table of
contents listing every lesson; Jupyter Book executes them in simulator mode with
PLOTLY_RENDERER=notebook (plotly.js embedded: the pages work offline) and GPUCOURSE_STATIC=1
(widgets render as their current chart plus a data table). Output: build/book/_build/html/.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from gpucourse.build import ROOT, lesson_sources, venv_env

BOOK_SRC = ROOT / "book"


def prepare(out: Path) -> Path:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for name in ("_config.yml", "intro.md"):
        shutil.copy(BOOK_SRC / name, out / name)
    lessons = lesson_sources()
    for source in lessons:
        shutil.copy(source, out / source.name)
    toc = ["format: jb-book", "root: intro", "chapters:"] + [f"  - file: {s.stem}" for s in lessons]
    (out / "_toc.yml").write_text("\n".join(toc) + "\n")
    return out


def build(out: Path = ROOT / "build" / "book") -> Path:
    prepare(out)
    env = dict(venv_env(), GPUCOURSE_MODE="sim", GPUCOURSE_STATIC="1", PLOTLY_RENDERER="notebook")
    cmd = [str(Path(sys.executable).parent / "jupyter-book"), "build", str(out), "--quiet"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    html_dir = out / "_build" / "html"
    if done.returncode != 0 or not (html_dir / "index.html").exists():
        raise RuntimeError(f"jupyter-book failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    print(f"built {html_dir / 'index.html'}")
    return html_dir


if __name__ == "__main__":
    os.chdir(ROOT)
    build()
