"""The project's shape: pins agree everywhere, the top level is fixed, commands are documented."""

import json
import re
import subprocess
import tomllib

import yaml

from gpucourse.build import ROOT


def pins_from_lines(lines) -> dict[str, str]:
    pins = {}
    for line in lines:
        line = line.split("#")[0].strip()
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+(?:\[[^\]]+\])?)==([^\s;]+)", line)
        if match:
            pins[match.group(1).lower()] = match.group(2)
    return pins


def test_environment_yml_requirements_and_pyproject_carry_identical_pins():
    project = pins_from_lines(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"])
    requirements = pins_from_lines((ROOT / "requirements.txt").read_text().splitlines())
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    conda_pins = pins_from_lines(pip_section)
    assert project == requirements == conda_pins
    for needed in ("jupyterlab", "ipywidgets", "numba", "numba-cuda[cu13]", "cupy-cuda13x", "torch", "plotly"):
        assert needed in project
    assert "python=3.11" in env["dependencies"]


def test_constraints_agree_with_the_direct_pins():
    project = pins_from_lines(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"])
    locked = pins_from_lines((ROOT / "constraints.txt").read_text().splitlines())
    for name, version in project.items():
        assert locked.get(name.split("[")[0]) == version, name


def test_top_level_layout():
    for name in ("notebooks", "labs", "solutions", "data", "gpucourse", "tests"):
        assert (ROOT / name).is_dir(), name
    for name in ("environment.yml", "Makefile", "pyproject.toml", "README.md", ".ci/run", "nbgrader_config.py"):
        assert (ROOT / name).is_file(), name


def test_readme_gives_the_two_commands_and_the_three_audiences():
    readme = (ROOT / "README.md").read_text()
    assert "make lab" in readme and "make test" in readme
    for audience in ("learner", "instructor", "grader"):
        assert audience in readme.lower()


def test_ci_runs_the_readme_test_command():
    assert "make test" in (ROOT / ".ci/run").read_text()


def test_make_help_lists_every_target():
    out = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True).stdout
    for target in ("setup", "lab", "test", "labs", "grade", "feedback", "doctor", "record", "notebooks"):
        assert f"make {target} " in out, target


def test_committed_notebooks_have_no_outputs():
    tracked = subprocess.run(["git", "ls-files", "*.ipynb"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    for name in tracked:
        nb = json.loads((ROOT / name).read_text())
        for cell in nb["cells"]:
            assert not cell.get("outputs") and not cell.get("execution_count"), name


def test_every_lesson_has_instructor_notes():
    for source in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py")):
        assert (ROOT / "instructor" / f"{source.stem}.md").exists(), f"instructor notes for {source.stem}"
