"""The notebooks' install cell on Colab (gpu-mode review G7): the course installed with --no-deps plus only what is
missing, so Colab's ipykernel and ipywidgets stay; widgets drawn through Colab's custom widget manager. Checked on
the generated text and with a stand-in google.colab module."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from gpucourse.tooling import build, colabsetup

PY = "/usr/bin/python3"


def test_on_colab_the_course_goes_in_without_its_dependencies_then_only_what_is_missing():
    assert colabsetup.commands("gpucourse-src", True, ["anywidget>=0.9,<1"], PY) == [
        [PY, "-m", "pip", "install", "-q", "--no-deps", "gpucourse-src"],
        [PY, "-m", "pip", "install", "-q", "anywidget>=0.9,<1"]]
    assert colabsetup.commands("gpucourse-src", True, [], PY) == [
        [PY, "-m", "pip", "install", "-q", "--no-deps", "gpucourse-src"]]
    # elsewhere (Kaggle, a laptop's Jupyter) as before: the course's ranges, with dependencies
    assert colabsetup.commands("gpucourse-src", False, ["anywidget>=0.9,<1"], PY) == [
        [PY, "-m", "pip", "install", "-q", "gpucourse-src"]]


def test_what_is_missing_and_what_colab_keeps_in_another_version():
    reqs = colabsetup.requirements(build.ROOT)
    assert any(r.startswith("ipywidgets") for r in reqs) and any(r.startswith("anywidget") for r in reqs)
    colab = {"numpy": "2.0.2", "pandas": "2.2.2", "numba": "0.60.0", "plotly": "5.24.1", "ipywidgets": "7.7.1",
             "greenlet": "3.1.1", "ipykernel": "6.17.1"}  # an image like Colab's: no anywidget
    missing, kept = colabsetup.missing_and_kept(reqs, colab.get)
    assert [colabsetup._name(r) for r in missing] == ["anywidget"]
    assert any(line.startswith("ipywidgets 7.7.1 (the course is tested with >=8.1") for line in kept), kept
    assert not any(line.startswith("numpy") for line in kept)  # inside its range


def test_colab_is_recognised_by_its_environment():
    assert colabsetup.on_colab({"COLAB_RELEASE_TAG": "release-colab_20260101"})
    assert not colabsetup.on_colab({})  # no google.colab here


def test_the_cell_runs_the_setup_script_and_enables_colabs_widget_manager():
    cell = build.INSTALL_CELL.format(repo="https://example.org/course")
    assert "gpucourse/tooling/colabsetup.py" in cell and "enable_custom_widget_manager()" in cell
    assert '"pip", "install"' not in cell  # the script decides how (Colab or not)
    assert (build.ROOT / "gpucourse" / "tooling" / "colabsetup.py").exists()
    compile(cell, "install-cell", "exec")


@pytest.fixture
def fake_colab(monkeypatch):
    calls = []
    google, colab, output = (types.ModuleType(n) for n in ("google", "google.colab", "google.colab.output"))
    output.enable_custom_widget_manager = lambda: calls.append("enabled")
    colab.output, google.colab = output, colab
    for module in (google, colab, output):
        monkeypatch.setitem(sys.modules, module.__name__, module)
    return calls


def test_on_colab_the_cell_enables_the_custom_widget_manager(fake_colab):
    exec(build.INSTALL_CELL.format(repo="unused: gpucourse is importable here"), {})
    assert fake_colab == ["enabled"]


def test_elsewhere_the_cell_does_nothing_more(monkeypatch):
    monkeypatch.delenv("COLAB_RELEASE_TAG", raising=False)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    exec(build.INSTALL_CELL.format(repo="unused"), {})  # google.colab is not installed here: not imported


def test_the_cell_binds_no_name_a_grader_would_have_to_import():
    # the grader's header imports every name a locked cell imports (tests/test_grading.py): only the standard library
    import ast

    tree = ast.parse(build.INSTALL_CELL.format(repo="unused"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                for alias in node.names}
    assert imported == {"importlib", "os", "subprocess", "sys", "gpucourse"}


def test_the_script_on_colab_runs_both_commands(monkeypatch, capsys):
    ran = []
    monkeypatch.setattr(colabsetup, "on_colab", lambda: True)
    monkeypatch.setattr(colabsetup, "missing_and_kept",
                        lambda reqs: (["anywidget>=0.9,<1"], ["ipywidgets 7.7.1 (the course is tested with >=8.1,<9)"]))
    monkeypatch.setattr(colabsetup.subprocess, "run", lambda command, check: ran.append(command[3:]))
    assert colabsetup.main([str(build.ROOT)]) == 0
    assert ran == [["install", "-q", "--no-deps", str(build.ROOT)], ["install", "-q", "anywidget>=0.9,<1"]]
    assert "kept Colab's own: ipywidgets 7.7.1" in capsys.readouterr().out


def test_the_cell_s_relative_folder_reaches_pip_as_a_path(monkeypatch, tmp_path):
    # the install cell passes "gpucourse-src"; `pip install gpucourse-src` looks for a package of that name
    # (test-platforms' Colab-like profile failed so: "No matching distribution found for gpucourse-src")
    ran = []
    (tmp_path / "gpucourse-src").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(colabsetup, "on_colab", lambda: False)
    monkeypatch.setattr(colabsetup.subprocess, "run", lambda command, check: ran.append(command))
    assert colabsetup.main(["gpucourse-src"]) == 0
    assert ran[0][-1] == str(tmp_path / "gpucourse-src") and Path(ran[0][-1]).is_absolute()
