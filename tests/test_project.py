"""The project's shape: pins agree everywhere, the top level is fixed, commands are documented."""

import json
import re
import subprocess
import tomllib

import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from gpucourse.tooling.build import ROOT


def pins_from_lines(lines) -> dict[str, str]:
    pins = {}
    for line in lines:
        line = line.split("#")[0].strip()
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+(?:\[[^\]]+\])?)==([^\s;]+)", line)
        if match:
            pins[match.group(1).lower()] = match.group(2)
    return pins


def lock(stack: str) -> dict[str, str]:
    pins = pins_from_lines((ROOT / "locks" / f"{stack}.txt").read_text().splitlines())
    return {canonicalize_name(name): version for name, version in pins.items()}


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_each_conda_environment_installs_exactly_its_lock():
    for env_file, stack in (("environment.yml", "cu13"), ("environment-cu12.yml", "cu12")):
        env = yaml.safe_load((ROOT / env_file).read_text())
        pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
        assert pip_section == [f"-r locks/{stack}.txt"], env_file
        assert "python=3.11" in env["dependencies"], env_file
    assert yaml.safe_load((ROOT / "environment-cu12.yml").read_text())["name"] == "gpucourse-cu12"


def test_the_package_declares_ranges_and_no_gpu_library_or_tool_at_run_time():
    deps = [Requirement(d) for d in project()["dependencies"]]
    for dep in deps:
        assert "==" not in str(dep.specifier) and dep.specifier, f"{dep}: a range, not a pin"
    names = {d.name for d in deps}
    for tool in ("pytest", "ruff", "playwright", "jupyterhub", "jupyter-book", "torch", "numba-cuda", "nbgrader"):
        assert tool not in names, tool
    assert not [n for n in names if n.startswith(("cupy", "cuda", "nvidia"))]
    extras = project()["optional-dependencies"]
    assert {"cu12", "cu13", "sim", "lab", "test", "site", "hub"} <= set(extras)
    python = SpecifierSet(project()["requires-python"])
    assert all(v in python for v in ("3.11", "3.12", "3.13")) and "3.10" not in python


def test_every_lock_pins_every_package_within_the_declared_ranges():
    extras = project()["optional-dependencies"]
    for stack in ("cu13", "cu12"):
        pins = lock(stack)
        for text in project()["dependencies"] + [d for e in ("lab", "test", "site", "hub", stack) for d in extras[e]]:
            dep = Requirement(text)
            dep.name = canonicalize_name(dep.name)
            assert dep.name in pins, f"locks/{stack}.txt lacks {dep.name}"
            assert dep.specifier.contains(pins[dep.name], prereleases=True), f"{stack}: {dep.name}=={pins[dep.name]}"


def test_the_two_locks_hold_one_cuda_major_each():
    cu12, cu13 = lock("cu12"), lock("cu13")
    assert not [n for n in cu12 if n.endswith("-cu13") or "cuda13" in n]
    assert not [n for n in cu13 if n.endswith("-cu12") or "cuda12" in n]
    assert cu12["cuda-toolkit"].startswith("12.") and cu12["cuda-bindings"].startswith("12.")
    assert cu13["cuda-toolkit"].startswith("13.") and cu13["cuda-bindings"].startswith("13.")
    assert "cupy-cuda12x" in cu12 and "cupy-cuda13x" in cu13
    # CuPy's [ctk] extra: cuBLAS and cuRAND come as wheels (cupy.random, the cuBLAS matmul)
    assert {"nvidia-cublas-cu12", "nvidia-curand-cu12"} <= set(cu12)
    assert {"nvidia-cublas", "nvidia-curand"} <= set(cu13)
    header = (ROOT / "locks" / "cu12.txt").read_text().split("\n\n")[0]
    assert f"torch {cu12['torch']}" in header and "CUDA 12" in header
    # everything that is not CUDA-specific is pinned the same in both
    cuda_specific = ("torch", "triton", "cuda-bindings", "cuda-toolkit")  # triton: the one torch requires
    common = set(cu12) & set(cu13) - set(cuda_specific)
    assert {n: cu12[n] for n in common} == {n: cu13[n] for n in common}


def test_licence_files_and_the_readme_says_which_is_which():
    assert "MIT License" in (ROOT / "LICENSE").read_text()
    assert "CC BY 4.0" in (ROOT / "LICENSE-CONTENT.md").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "LICENSE" in readme and "LICENSE-CONTENT.md" in readme and "CC BY 4.0" in readme
    assert project()["license"] == {"text": "MIT"}


def test_top_level_layout():
    for name in ("notebooks", "labs", "solutions", "data", "gpucourse", "tests"):
        assert (ROOT / name).is_dir(), name
    for name in ("environment.yml", "environment-cu12.yml", "Makefile", "pyproject.toml", "README.md", ".ci/run",
                 "nbgrader_config.py", "locks/cu13.txt", "locks/cu12.txt", "LICENSE", "LICENSE-CONTENT.md"):
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
    for source in sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.py")):
        assert (ROOT / "instructor" / f"{source.stem}.md").exists(), f"instructor notes for {source.stem}"
