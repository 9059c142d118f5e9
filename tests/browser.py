"""A real JupyterLab (started the way `make lab` starts it) driven by Playwright in Debian's Chromium."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from gpucourse.build import ROOT
from gpucourse.launch import lab_command

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
SCREENSHOTS = ROOT / "build" / "screenshots"


def chromium_missing_reason() -> str | None:
    if not Path(CHROMIUM).exists():
        return "Debian's chromium is not installed (apt-get install chromium); .ci/run installs it in CI"
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "the playwright package is missing (make setup installs it)"
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def lab_server(root: Path = ROOT):
    """JupyterLab on a free loopback port; stopped by its own PID at the end, nothing left running."""
    port, token = free_port(), secrets.token_hex(16)
    cmd = lab_command(port, is_root=os.geteuid() == 0, has_display=False, root=root) + [
        f"--IdentityProvider.token={token}", "--LabApp.expose_app_in_browser=True",
    ]
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(root / "build" / "jupyter-config"))
    log = open(root / "build" / f"lab-{port}.log", "w") if (root / "build").is_dir() else subprocess.DEVNULL
    server = subprocess.Popen(cmd, cwd=root, stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as reply:
                    json.load(reply)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"JupyterLab did not start (exit {server.poll()})") from None
                time.sleep(0.5)
        yield base, token
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        if log is not subprocess.DEVNULL:
            log.close()


@contextmanager
def browser_page():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            yield page
        finally:
            browser.close()


# JavaScript run in the page through the app JupyterLab exposes (--LabApp.expose_app_in_browser).
JS_NOTEBOOK_STATE = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  if (!w || !w.content || !w.sessionContext) return null;
  const cells = w.content.model.cells;
  let errors = [], running = 0, pending = 0;
  for (let i = 0; i < cells.length; i++) {
    const c = cells.get(i);
    if (c.type !== 'code') continue;
    const outs = c.outputs.toJSON();
    for (const o of outs) if (o.output_type === 'error') errors.push(o.ename + ': ' + o.evalue);
    if (c.executionCount === null) pending++;
  }
  const prompts = [...document.querySelectorAll('.jp-InputPrompt')].map(p => p.textContent);
  running = prompts.filter(t => t.includes('*')).length;
  const kernel = w.sessionContext.session && w.sessionContext.session.kernel;
  return {errors, running, pending, status: kernel ? kernel.status : 'none'};
}"""

JS_PLOTS = """() => [...document.querySelectorAll('.js-plotly-plot')].map(
  gd => JSON.stringify((gd.data || []).map(t => [t.name, t.x, t.y, t.z])) + JSON.stringify(
    ((gd.layout || {}).title || {}).text || ''))"""


def open_notebook(page, base: str, token: str, path: str) -> None:
    page.goto(f"{base}/lab/tree/{path}?token={token}")
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget "
                           "&& window.jupyterapp.shell.currentWidget.sessionContext "
                           "&& window.jupyterapp.shell.currentWidget.sessionContext.session "
                           "&& window.jupyterapp.shell.currentWidget.sessionContext.session.kernel", timeout=60_000)
    page.wait_for_function("() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status"
                           " === 'idle'", timeout=60_000)


def run_all(page, timeout_s: float = 120) -> dict:
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    deadline = time.monotonic() + timeout_s
    time.sleep(1.0)
    while True:
        state = page.evaluate(JS_NOTEBOOK_STATE)
        if state and state["running"] == 0 and state["status"] == "idle":
            return state
        if time.monotonic() > deadline:
            raise TimeoutError(f"Run All did not finish in {timeout_s} s: {state}")
        time.sleep(0.3)


def plots(page) -> list[str]:
    return page.evaluate(JS_PLOTS)


def wait_for_change(page, before: list[str], timeout_s: float = 20) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if plots(page) != before:
            return True
        time.sleep(0.2)
    return False
