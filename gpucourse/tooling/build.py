"""Generated files: notebooks from their jupytext text sources, and labs/ from solutions/.

* ``notebooks/NN_x.py`` → ``notebooks/NN_x.ipynb`` and ``solutions/labNN_x/labNN_x.py`` →
  ``solutions/labNN_x/labNN_x.ipynb`` (cell ids derived from position or grade id, so the output is
  identical on every machine; no outputs).
* ``labs/`` is nbgrader's release of ``solutions/`` (``nbgrader generate_assignment``); ``check``
  regenerates it in a scratch copy and fails on any difference or on leaked solution code.
"""

from __future__ import annotations

import filecmp
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import jupytext
import nbformat

ROOT = Path(__file__).resolve().parents[2]

# The course's public home: the ONE setting for Colab/Kaggle. Every notebook's first cells (the
# "Open in Colab" badge and the install cell) and the README's links are made from it. Until the
# course has a public home it is a placeholder; then set it (an https git address) and publish the
# generated notebooks (`make notebooks`) on COLAB_BRANCH, which the badges open.
COURSE_REPO = "https://github.com/OWNER/gpucourse"
COLAB_BRANCH = "main"

LEAK_MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
KERNELSPEC = {"display_name": "Python 3 (gpucourse)", "language": "python", "name": "python3"}


def lesson_sources(root: Path = ROOT) -> list[Path]:
    return sorted((root / "notebooks").glob("[0-9][0-9]*_*.py"))


def lab_names(root: Path = ROOT) -> list[str]:
    return sorted(p.name for p in (root / "solutions").glob("lab*") if (p / f"{p.name}.py").exists())


def colab_url(path: str, repo: str = COURSE_REPO, branch: str = COLAB_BRANCH) -> str:
    """Colab's address for a notebook of the repository (``path`` relative to its root)."""
    return f"https://colab.research.google.com/github/{repo.removeprefix('https://github.com/')}/blob/{branch}/{path}"


def colab_badge(path: str) -> str:
    # A text link, not Colab's badge image: that image is fetched from the network, and the course
    # (JupyterLab offline, the static website) must open without one.
    return f"**[Open in Colab]({colab_url(path)})**"


# The first code cell of every notebook. Where the course is missing (Colab, Kaggle, any Jupyter)
# it fetches the repository (lessons read data/ beside the package) and installs it with
# tooling/colabsetup.py: its run-time ranges only, no GPU extra, so the preinstalled torch, CuPy and
# numba-cuda stay; on Colab with --no-deps plus only what is missing, so Colab's ipykernel and
# ipywidgets stay too. On Colab, widgets are drawn through Colab's custom widget manager (gpu-mode review, G7).
INSTALL_CELL = """\
# On Colab or Kaggle: fetch the course and install it next to the packages already here.
import importlib, os, subprocess, sys
try:
    import gpucourse
except ImportError:
    subprocess.run(["git", "clone", "-q", "--depth=1", "{repo}", "gpucourse-src"], check=True)
    subprocess.run([sys.executable, "gpucourse-src/gpucourse/tooling/colabsetup.py", "gpucourse-src"], check=True)
    sys.path.insert(0, os.path.abspath("gpucourse-src"))
if "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ:  # Colab draws the charts' controls
    importlib.import_module("google.colab.output").enable_custom_widget_manager()  # through this manager only"""


def colab_cells(path: str, lab: bool) -> list[nbformat.NotebookNode]:
    """The badge and the install cell; in a lab both are locked nbgrader cells (graded as trusted)."""
    badge = nbformat.v4.new_markdown_cell(f"{colab_badge(path)} · on Colab: run the cell below first"
                                          + (", run the checks, then *File → Download → .ipynb* and hand "
                                             "that file in" if lab else ""))
    install = nbformat.v4.new_code_cell(INSTALL_CELL.format(repo=COURSE_REPO))
    for cell, grade_id in ((badge, "colab-badge"), (install, "colab-install")):
        cell.id = grade_id
        if lab:
            cell.metadata["nbgrader"] = {"grade": False, "grade_id": grade_id, "locked": True,
                                         "schema_version": 3, "solution": False, "task": False}
    return [badge, install]


def to_notebook(source: Path) -> nbformat.NotebookNode:
    nb = jupytext.read(source)
    nb.metadata = {"kernelspec": KERNELSPEC, "language_info": {"name": "python"}}
    for index, cell in enumerate(nb.cells):
        cell.metadata.pop("lines_to_next_cell", None)
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        cell.id = grade_id or f"cell-{index:03d}"
    lab = source.parent.parent.name == "solutions"
    # a lab opens on Colab as the student version (labs/), a lesson as notebooks/NN_x.ipynb
    path = f"labs/{source.stem}/{source.stem}.ipynb" if lab else f"notebooks/{source.stem}.ipynb"
    nb.cells[:0] = colab_cells(path, lab)
    return nb


def write_notebook(source: Path, target: Path | None = None) -> Path:
    target = target or source.with_suffix(".ipynb")
    text = nbformat.writes(to_notebook(source)) + "\n"
    if not target.exists() or target.read_text() != text:
        target.write_text(text)
    return target


def build_notebooks(root: Path = ROOT) -> list[Path]:
    out = [write_notebook(s) for s in lesson_sources(root)]
    out += [write_notebook(root / "solutions" / lab / f"{lab}.py") for lab in lab_names(root)]
    return out


def venv_env() -> dict:
    """The environment with this Python's bin folder first on PATH (nbgrader runs `alembic` by name)."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def nbgrader(args: list[str], root: Path, **kwargs) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "gpucourse.tooling.nbgradercli", *args]  # nbgrader's command line, 0.7 s sooner
    return subprocess.run(cmd, cwd=root, capture_output=True, text=True, env=venv_env(), **kwargs)


# Every lab in one nbgrader process: nbgrader takes about 4 s to start, and a lab about 1 s to generate.
_GENERATE = r"""
import sys
from gpucourse.tooling.grading import nbgrader_api
api = nbgrader_api(sys.argv[1])
for lab in sys.argv[2:]:
    result = api.generate_assignment(lab, force=True, create=True)
    if not result["success"]:
        sys.exit(f"nbgrader generate_assignment {lab} failed:\n{result.get('error') or ''}\n{result.get('log') or ''}")
"""


def generate_labs(root: Path = ROOT) -> list[str]:
    """Regenerate labs/<lab>/ from solutions/<lab>/ for every lab (nbgrader generate_assignment)."""
    labs = lab_names(root)
    for lab in labs:
        write_notebook(root / "solutions" / lab / f"{lab}.py")
    done = subprocess.run([sys.executable, "-c", _GENERATE, str(root), *labs], cwd=root, capture_output=True,
                          text=True, env=venv_env())
    if done.returncode != 0:
        raise SystemExit(f"{done.stdout}\n{done.stderr}".strip())
    return labs


def check_labs(root: Path = ROOT) -> list[str]:
    """Problems with labs/: differences from a fresh generation, leaked solutions, strays."""
    problems = []
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch)
        shutil.copy(root / "nbgrader_config.py", copy)
        shutil.copytree(root / "solutions", copy / "solutions", ignore=shutil.ignore_patterns("*.ipynb"))
        generate_labs(copy)
        fresh, committed = copy / "labs", root / "labs"
        problems += _compare(fresh, committed)
    for path in sorted(committed.rglob("*")):
        if path.is_file() and any(m in path.read_text(errors="ignore") for m in LEAK_MARKERS):
            problems.append(f"{path.relative_to(root)} contains solution or hidden-test markers")
    return problems


def _compare(fresh: Path, committed: Path, prefix: str = "labs") -> list[str]:
    if not committed.exists():
        return [f"{prefix}/ is missing: run `make labs`"]
    cmp = filecmp.dircmp(fresh, committed, ignore=[".ipynb_checkpoints", "__pycache__"])
    problems = [f"{prefix}/{name} should exist (run `make labs`)" for name in cmp.left_only]
    problems += [f"{prefix}/{name} is not generated from solutions/ (remove it)" for name in cmp.right_only]
    for name in cmp.common_files:
        if (fresh / name).read_bytes() != (committed / name).read_bytes():
            problems.append(f"{prefix}/{name} differs from what solutions/ generates (run `make labs`)")
    for name in cmp.common_dirs:
        problems += _compare(fresh / name, committed / name, f"{prefix}/{name}")
    return problems
