"""The deployment files parse and agree with the project's pins (no cluster needed)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "locks" / "cu13.txt").read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)(?:\[[^]]*\])?==([^\s;#]+)", line.strip())
        if match:
            pins[match.group(1).lower()] = match.group(2)
    return pins


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _values() -> dict:
    return yaml.safe_load((DEPLOY / "helm" / "values.yaml").read_text())


def _chart_version() -> str:
    commands = re.findall(r"jupyterhub/jupyterhub --version (\S+)", (DEPLOY / "README.md").read_text())
    commands += re.findall(r"jupyterhub/jupyterhub --version (\S+)", (DEPLOY / "helm" / "values.yaml").read_text())
    assert commands and len(set(commands)) == 1, f"one chart version everywhere, got {set(commands)}"
    return commands[0]


def test_course_image_runs_setup_and_doctor_on_the_projects_python():
    dockerfile = (DEPLOY / "image" / "Dockerfile").read_text()
    base = re.search(r"^FROM python:(\d+\.\d+)-", dockerfile, re.M)
    assert base, "the course image starts from an official python image"
    python = base.group(1)
    low, high = re.match(r">=(\d+\.\d+),<(\d+\.\d+)", _project()["requires-python"]).groups()
    assert tuple(map(int, low.split("."))) <= tuple(map(int, python.split("."))) < tuple(map(int, high.split(".")))
    environment = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert f"python={python}" in environment["dependencies"], "environment.yml and the image use one Python"
    run = " ".join(re.findall(r"^RUN (.*(?:\n(?:\s+.*))*)", dockerfile, re.M))
    for step in ("make setup", "make doctor", "make notebooks"):
        assert step in run, step
    assert "pip install" not in run, "the image installs only through `make setup` (the pinned files)"
    assert re.search(r'^CMD \["jupyterhub-singleuser"\]', dockerfile, re.M)
    assert "COPY deploy/nbgrader_config.py /etc/jupyter/nbgrader_config.py" in dockerfile


def test_course_image_contains_no_solutions():
    lines = (DEPLOY / "image" / "Dockerfile.dockerignore").read_text().splitlines()
    ignored = [line.strip() for line in lines if not line.startswith("#")]
    for secret in ("solutions", "tests", "instructor", "submitted", "autograded", "gradebook.db", ".venv"):
        assert secret in ignored, secret


def _image_context() -> list[str]:
    """The repository's files that `COPY . /opt/gpucourse` puts into the course image: those that
    deploy/image/Dockerfile.dockerignore does not exclude (its patterns are root-relative; `**/x`
    matches x anywhere)."""
    import fnmatch
    import subprocess

    lines = (DEPLOY / "image" / "Dockerfile.dockerignore").read_text().splitlines()
    patterns = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    assert not any(p.startswith("!") for p in patterns), "re-inclusion is not modelled here"

    def excluded(path: str) -> bool:
        parts = path.split("/")
        for n in range(1, len(parts) + 1):
            for pattern in patterns:
                if pattern.startswith("**/"):
                    if fnmatch.fnmatchcase(parts[n - 1], pattern[3:]):
                        return True
                elif len(pattern.split("/")) == n and all(
                        fnmatch.fnmatchcase(a, b) for a, b in zip(parts[:n], pattern.split("/"), strict=True)):
                    return True
        return False

    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.splitlines()
    return [f for f in files if not excluded(f)]


def _solution_blocks() -> list[list[str]]:
    """Each exercise's solution (the lines between BEGIN and END SOLUTION that say something)."""
    blocks = []
    for path in sorted((ROOT / "solutions").glob("lab*/lab*.py")):
        block = None
        for line in path.read_text().splitlines():
            if "### BEGIN SOLUTION" in line:
                block = []
            elif "### END SOLUTION" in line:
                blocks.append(block)
                block = None
            elif block is not None and len(line.strip()) >= 12 and not line.strip().startswith("#"):
                block.append(line.strip())
    return [b for b in blocks if len(b) >= 2]


def test_no_file_in_the_course_image_holds_a_whole_solution():
    """By content, not by name: a lesson may share a line with a solution, never a whole one."""
    context = _image_context()
    assert "gpucourse/tooling/grading/hidden.py" in context and "labs/lab01_warps/lab01_warps.ipynb" in context
    assert not [f for f in context if f.startswith(("tests/", "solutions/"))]
    blocks = _solution_blocks()
    assert len(blocks) >= 10
    leaks = []
    for name in context:
        try:
            text = (ROOT / name).read_text()
        except (UnicodeDecodeError, OSError):
            continue
        leaks += [(name, block[0]) for block in blocks if all(line in text for line in block)]
    assert sorted(set(leaks)) == sorted(LESSON_KERNELS_THAT_ARE_LAB_ANSWERS), leaks


# No lesson kernel is a whole lab answer: the labs vary the lessons' worked examples (lab 04 takes
# B transposed, lab 06 sums weights). A kernel listed here would be a known, reported exception.
LESSON_KERNELS_THAT_ARE_LAB_ANSWERS = []


def test_hub_and_single_user_servers_run_the_pinned_jupyterhub():
    hub = (DEPLOY / "hub" / "Dockerfile").read_text()
    assert re.search(r'jupyterhub==([\d.]+)"', hub).group(1) == _pins()["jupyterhub"]
    base = re.search(r"^FROM quay.io/jupyterhub/k8s-hub:(\S+)", hub, re.M).group(1)
    assert base == _chart_version(), "the hub image extends the chart version that is installed"


def test_helm_values_have_a_gpu_profile_and_the_course_image():
    values = _values()
    version = _project()["version"]
    assert values["singleuser"]["image"]["tag"] == version and values["hub"]["image"]["tag"] == version
    assert values["singleuser"]["image"]["name"].endswith("/gpucourse")
    assert values["hub"]["image"]["name"].endswith("/gpucourse-hub")
    profiles = values["singleuser"]["profileList"]
    modes = {p["kubespawner_override"]["environment"]["GPUCOURSE_MODE"]: p for p in profiles}
    assert set(modes) == {"sim", "gpu"}
    assert [p for p in profiles if p.get("default")] == [modes["sim"]]
    gpu = modes["gpu"]["kubespawner_override"]
    assert gpu["extra_resource_limits"] == {"nvidia.com/gpu": "1"}
    assert any(t["key"] == "nvidia.com/gpu" for t in gpu["tolerations"])
    assert values["cull"]["enabled"] and values["prePuller"]["hook"]["enabled"]
    hub_config = values["hub"]["config"]
    assert "password" not in yaml.safe_dump(hub_config["SharedPasswordAuthenticator"]).replace("allow_all", "")


def test_the_exchange_is_the_same_everywhere():
    exchange = re.search(r'c.Exchange.root = "([^"]+)"', (DEPLOY / "nbgrader_config.py").read_text()).group(1)
    mounts = _values()["singleuser"]["storage"]["extraVolumeMounts"]
    assert [m["mountPath"] for m in mounts if m["name"] == "nbgrader-exchange"] == [exchange]
    assert exchange in (DEPLOY / "image" / "Dockerfile").read_text()
    assert exchange in (DEPLOY / "README.md").read_text()


def test_single_server_hub_config_loads():
    from traitlets.config import Config

    config = Config()
    namespace = {"get_config": lambda: config, "__file__": str(DEPLOY / "jupyterhub_config.py")}
    exec(compile((DEPLOY / "jupyterhub_config.py").read_text(), "jupyterhub_config.py", "exec"), namespace)
    assert config.JupyterHub.authenticator_class == "pam"
    assert config.JupyterHub.spawner_class == "localprocess"
    assert config.JupyterHub.bind_url.startswith("http://127.0.0.1:")
    assert config.Spawner.cmd[-1].endswith("/.venv/bin/jupyterhub-singleuser")
    assert config.Spawner.environment["PATH"].startswith(config.Spawner.cmd[-1].rsplit("/", 1)[0])
    # the memory limit that tests/test_hub_faults.py checks, and servers that outlive a restart of the hub
    assert config.Spawner.cmd[:3] == ["prlimit", f"--data={4 * 2**30}", "--"]
    assert config.JupyterHub.cleanup_servers is False
    assert "--MappingKernelManager.cull_idle_timeout=2700" in config.Spawner.args
    assert callable(config.Spawner.pre_spawn_hook)


def test_proxy_pin_is_stated_once():
    pins = set(re.findall(r"configurable-http-proxy@([\d.]+)", (DEPLOY / "README.md").read_text()))
    pins |= set(re.findall(r"configurable-http-proxy@([\d.]+)", (DEPLOY / "jupyterhub_config.py").read_text()))
    pins |= set(re.findall(r"configurable-http-proxy@([\d.]+)",
                           (ROOT / "gpucourse" / "tooling" / "hubrig.py").read_text()))
    assert len(pins) == 1, pins


def test_learners_servers_draw_charts_with_jupyterlab_s_plotly_not_a_copy_per_notebook():
    """"plotly_mimetype+notebook" embeds all of plotly.js (4.9 MB) in every notebook's first chart, which
    took a saved lesson from 0.2 to 5.2 MB (tools/notebook_size.py); JupyterLab's extension draws the mimetype."""
    found = re.findall(r"PLOTLY_RENDERER[\"']?\s*[:=]\s*[\"']?([\w+]+)", (DEPLOY / "image" / "Dockerfile").read_text()
                       + (DEPLOY / "jupyterhub_config.py").read_text())
    assert found == ["plotly_mimetype", "plotly_mimetype"], found
