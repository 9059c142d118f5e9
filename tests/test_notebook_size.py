"""tools/notebook_size.py weighs what a saved notebook carries (the lessons themselves are weighed
by tests/test_notebooks.py, which executes them anyway)."""

import sys

import nbformat

from gpucourse.tooling.build import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import notebook_size  # noqa: E402


def _notebook(widget_bytes: int) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("chart")
    cell.outputs = [nbformat.v4.new_output("display_data", data={"application/vnd.plotly.v1+json": {"data": []},
                                                                  "text/plain": "<chart>"})]
    nb.cells = [cell]
    nb.metadata["widgets"] = {notebook_size.WIDGET_STATE: {"state": {"m1": {
        "model_name": "FigureModel", "state": {"_js": "x" * widget_bytes}}}, "version_major": 2, "version_minor": 0}}
    return nb


def test_weigh_names_the_widget_state_and_each_mimetype():
    parts = notebook_size.weigh(_notebook(5_000))
    assert parts["widget state: FigureModel"] > 5_000
    assert parts["application/vnd.plotly.v1+json"] > 0 and parts["text/plain"] == len("<chart>")
    assert parts.most_common(1)[0][0] == "widget state: FigureModel"


def test_a_notebook_over_the_limit_is_reported_as_such():
    small, big = _notebook(10), _notebook(notebook_size.LIMIT_BYTES)
    assert notebook_size.saved_bytes(small) < notebook_size.LIMIT_BYTES < notebook_size.saved_bytes(big)
    assert "ok" in notebook_size.report("small", small)
    assert "OVER 2.0 MB" in notebook_size.report("big", big) and "FigureModel" in notebook_size.report("big", big)


def test_the_learner_env_has_none_of_the_course_variables(monkeypatch):
    monkeypatch.setenv("PLOTLY_RENDERER", "json")
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    env = notebook_size.learner_env()
    assert "PLOTLY_RENDERER" not in env and "NUMBA_ENABLE_CUDASIM" not in env
    assert notebook_size.learner_env("plotly_mimetype+notebook")["PLOTLY_RENDERER"] == "plotly_mimetype+notebook"
