"""Every lesson executed headless, in a kernel started as a learner's is: nothing course-specific in
its environment, so the notebook alone decides the mode (the simulator here, the GPU on a GPU machine).

The labs' solutions and untouched student versions are executed the same way by nbgrader in their
round trips (tests/test_lab*.py, tests/labtools.py: check_runs_as_released): no error in the
solution, the untouched lab stops at its first exercise, both open with the banner.

Where tests/test_browser.py runs a lesson in the same session, it makes these checks on the
notebook JupyterLab saved, and the headless run of that lesson is skipped. A lesson runs as a
learner's JupyterLab runs it (plotly picks its own renderer, the widgets' state
is stored) and, saved, weighs at most tools/notebook_size.py's LIMIT_BYTES (issue 18: JupyterLab
opens big notebooks slowly and their autosave can fail).
"""

import sys
from pathlib import Path

import nbformat
import pytest
from browser import chromium_missing_reason
from labtools import errors, learner_env, opens_with_the_banner_of_this_machine

from gpucourse.tooling import headless
from gpucourse.tooling.build import ROOT, lesson_sources, to_notebook

sys.path.insert(0, str(ROOT / "tools"))
import notebook_size  # noqa: E402

pytestmark = pytest.mark.slow
CELL_TIMEOUT_S = 300


def execute(nb: nbformat.NotebookNode, cwd: Path, *, allow_errors: bool = False,
            env: dict | None = None) -> nbformat.NotebookNode:
    return headless.execute(nb, cwd, env=env or learner_env(), cell_timeout_s=CELL_TIMEOUT_S,
                            store_widget_state=True, allow_errors=allow_errors)


def the_browser_runs_it(session, source) -> bool:
    """tests/test_browser.py runs this lesson in this session (Chromium is here and its test was
    collected): it makes the same checks on the notebook JupyterLab saves, so a headless run of the
    same lesson would add nothing but minutes. Headless runs where there is no browser (a laptop
    without Chromium, `make test-gpu`, the no-CUDA platform)."""
    if chromium_missing_reason() is not None:
        return False
    return any(item.name == f"test_lesson_in_the_browser[{source.stem}]" for item in session.items)


@pytest.mark.parametrize("source", lesson_sources(), ids=lambda p: p.stem)
def test_lesson_runs_opens_with_the_banner_and_stays_small(source, request):
    if the_browser_runs_it(request.session, source):
        pytest.skip("run in JupyterLab by tests/test_browser.py in this session, with the same checks")
    nb = execute(to_notebook(source), source.parent, env=notebook_size.learner_env())  # plotly's own renderer
    assert not errors(nb), errors(nb)
    assert opens_with_the_banner_of_this_machine(nb), "the first output must be the banner of this machine's mode"
    assert notebook_size.saved_bytes(nb) <= notebook_size.LIMIT_BYTES, notebook_size.report(source.stem, nb)
