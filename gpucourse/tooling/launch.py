"""`make lab`: JupyterLab on 127.0.0.1 with lesson 00 open."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from gpucourse.tooling.build import ROOT

FIRST_LESSON = "notebooks/00_measuring.ipynb"

# Defaults for JupyterLab's settings (a learner's own settings still win): never ask "Would you
# like to get notified about official Jupyter news?" and never fetch news or check for updates
# (the course works offline, and the toast covers the charts).
SETTING_OVERRIDES = {
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False},
}


def lab_command(port: int, *, is_root: bool, has_display: bool, root=ROOT) -> list[str]:
    cmd = [
        sys.executable, "-m", "jupyter", "lab",
        "--ip=127.0.0.1", f"--port={port}", "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={root}", f"--LabApp.default_url=/lab/tree/{FIRST_LESSON}",
        "--LabApp.news_url=None",
    ]
    if not has_display:
        cmd.append("--no-browser")
    if is_root:
        cmd.append("--allow-root")
    return cmd


def lab_env(env: dict | None = None, *, overrides: dict | None = None, config_path: Path | None = None) -> dict:
    """The environment for JupyterLab: SETTING_OVERRIDES (plus ``overrides``) as default settings.

    JupyterLab reads ``labconfig/default_setting_overrides.json`` from every Jupyter config path
    (jupyterlab_server's settings overrides), so the course adds one folder to JUPYTER_CONFIG_PATH
    instead of writing into the environment or the learner's ~/.jupyter.
    """
    env = dict(os.environ if env is None else env)
    config_path = config_path or ROOT / "build" / "jupyter-path"
    settings = {plugin: dict(values) for plugin, values in SETTING_OVERRIDES.items()}
    for plugin, values in (overrides or {}).items():
        settings.setdefault(plugin, {}).update(values)
    target = config_path / "labconfig" / "default_setting_overrides.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(settings, indent=2) + "\n"
    if not target.exists() or target.read_text() != text:
        target.write_text(text)
    env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(p for p in (str(config_path), env.get("JUPYTER_CONFIG_PATH")) if p)
    return env


def reexec_in_course_venv(args: list[str], root: Path = ROOT) -> None:
    """Run ``python <args>`` with .venv's Python instead when this one lacks JupyterLab.

    So that `python -m gpucourse lab` works from the system's Python after `python -m gpucourse
    setup` (Windows and macOS without make); returns when this Python is the right one.
    """
    from importlib.util import find_spec

    from gpucourse.tooling.install import venv_python

    python = venv_python(root / ".venv")
    if find_spec("jupyterlab") is not None or not python.exists():
        return
    if os.name == "nt":  # os.execv on Windows does not replace the process: wait for the child
        import subprocess

        sys.exit(subprocess.run([str(python), *args]).returncode)
    os.execv(str(python), [str(python), *args])


def main(port: int) -> None:
    has_display = bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")) or sys.platform == "darwin"
    cmd = lab_command(port, is_root=hasattr(os, "geteuid") and os.geteuid() == 0, has_display=has_display)
    print(f"Starting JupyterLab on http://127.0.0.1:{port}/lab/tree/{FIRST_LESSON}")
    print("Open the URL with the token that JupyterLab prints below. Stop it with Ctrl+C.", flush=True)
    os.execve(cmd[0], cmd, lab_env())
