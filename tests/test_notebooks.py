"""Every lesson, solution and student lab executed headless, each in a kernel started as a learner's
is: nothing course-specific in its environment, so the notebook alone decides the mode (the
simulator here, the GPU on a GPU machine).

A lesson runs as a learner's JupyterLab runs it (plotly picks its own renderer, the widgets' state
is stored) and, saved, weighs at most tools/notebook_size.py's LIMIT_BYTES (issue 18: JupyterLab
opens big notebooks slowly and their autosave can fail).
"""

import sys
from pathlib import Path

import nbformat
import pytest
from labtools import learner_env
from nbclient import NotebookClient

from gpucourse.measure import runtime
from gpucourse.tooling.build import ROOT, lab_names, lesson_sources, to_notebook

sys.path.insert(0, str(ROOT / "tools"))
import notebook_size  # noqa: E402

pytestmark = pytest.mark.slow
CELL_TIMEOUT_S = 300


def execute(nb: nbformat.NotebookNode, cwd: Path, *, allow_errors: bool = False,
            env: dict | None = None) -> nbformat.NotebookNode:
    NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3", allow_errors=allow_errors,
                   store_widget_state=True, resources={"metadata": {"path": str(cwd)}}
                   ).execute(env=env or learner_env())
    return nb


def errors(nb) -> list[str]:
    return [f"{o.ename}: {o.evalue}" for c in nb.cells if c.cell_type == "code"
            for o in c.get("outputs", []) if o.output_type == "error"]


def first_output(nb):
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.get("outputs"):
            return cell.outputs[0]
    return None


def opens_with_the_banner_of_this_machine(nb) -> bool:
    """The first output is the banner, and the kernel found the mode this machine has."""
    first = first_output(nb)
    text = first.get("data", {}).get("text/plain", "") if first is not None else ""
    banner = first is not None and "gpucourse-banner" in first.get("data", {}).get("text/html", "")
    return banner and text.startswith("GPU mode" if runtime.is_gpu() else "Simulator mode")


@pytest.mark.parametrize("source", lesson_sources(), ids=lambda p: p.stem)
def test_lesson_runs_opens_with_the_banner_and_stays_small(source):
    nb = execute(to_notebook(source), source.parent, env=notebook_size.learner_env())  # plotly's own renderer
    assert not errors(nb), errors(nb)
    assert opens_with_the_banner_of_this_machine(nb), "the first output must be the banner of this machine's mode"
    assert notebook_size.saved_bytes(nb) <= notebook_size.LIMIT_BYTES, notebook_size.report(source.stem, nb)


@pytest.mark.parametrize("lab", lab_names(), ids=str)
def test_solution_runs_without_errors(lab):
    nb = execute(to_notebook(ROOT / "solutions" / lab / f"{lab}.py"), ROOT / "solutions" / lab)
    assert not errors(nb), errors(nb)
    assert opens_with_the_banner_of_this_machine(nb)


@pytest.mark.parametrize("lab", lab_names(), ids=str)
def test_student_version_runs_up_to_the_first_exercise(lab):
    nb = execute(nbformat.read(ROOT / "labs" / lab / f"{lab}.ipynb", as_version=4), ROOT / "labs" / lab,
                 allow_errors=True)
    found = errors(nb)
    assert found, "the untouched lab should stop at its first exercise"
    assert found[0].startswith("NotImplementedError"), found[0]
    assert opens_with_the_banner_of_this_machine(nb), "banner first"
