"""`make lab`: JupyterLab on 127.0.0.1 with lesson 00 open."""

from __future__ import annotations

import os
import sys

from gpucourse.build import ROOT

FIRST_LESSON = "notebooks/00_measuring.ipynb"


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


def main(port: int) -> None:
    has_display = bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")) or sys.platform == "darwin"
    cmd = lab_command(port, is_root=hasattr(os, "geteuid") and os.geteuid() == 0, has_display=has_display)
    print(f"Starting JupyterLab on http://127.0.0.1:{port}/lab/tree/{FIRST_LESSON}")
    print("Open the URL with the token that JupyterLab prints below. Stop it with Ctrl+C.", flush=True)
    os.execv(cmd[0], cmd)
