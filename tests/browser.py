"""A real JupyterLab (started the way `make lab` starts it) driven by Playwright in Debian's Chromium."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import psutil

from gpucourse.build import ROOT
from gpucourse.launch import lab_command, lab_env

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
                 "--disable-breakpad", "--disable-crash-reporter", "--disable-features=OptimizationHints"]
SCREENSHOTS = ROOT / "build" / "screenshots"
# The test server never writes the notebooks it runs: no autosave (Validate saves a scratch copy).
TEST_SETTING_OVERRIDES = {"@jupyterlab/docmanager-extension:plugin": {"autosave": False}}


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


def _stop(process: subprocess.Popen) -> None:
    """Stop the server by its PID, then any kernel it started that outlived it (by PID too)."""
    try:
        children = psutil.Process(process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    _, alive = psutil.wait_procs(children, timeout=10)
    for child in alive:
        child.kill()
    psutil.wait_procs(alive, timeout=5)


@contextmanager
def lab_server(root: Path = ROOT):
    """JupyterLab on a free loopback port; stopped by its own PID at the end, nothing left running.

    A fresh Jupyter config folder per run: no workspace from an earlier run reopens old tabs.
    """
    port, token = free_port(), secrets.token_hex(16)
    cmd = lab_command(port, is_root=os.geteuid() == 0, has_display=False, root=root) + [
        f"--IdentityProvider.token={token}", "--LabApp.expose_app_in_browser=True",
    ]
    with tempfile.TemporaryDirectory(prefix="gpucourse-lab-") as scratch:
        env = lab_env(overrides=TEST_SETTING_OVERRIDES, config_path=Path(scratch) / "path")
        env["JUPYTER_CONFIG_DIR"] = str(Path(scratch) / "config")
        env.pop("PLOTLY_RENDERER", None)  # tests/conftest.py sets "json" for the unit tests; the lab draws charts
        (root / "build").mkdir(exist_ok=True)
        log = open(root / "build" / f"lab-{port}.log", "w")
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
            _stop(server)
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
  let errors = [], pending = 0;
  for (let i = 0; i < cells.length; i++) {
    const c = cells.get(i);
    if (c.type !== 'code') continue;
    const outs = c.outputs.toJSON();
    for (const o of outs) if (o.output_type === 'error') errors.push(o.ename + ': ' + o.evalue);
    if (c.executionCount === null) pending++;
  }
  const prompts = [...w.node.querySelectorAll('.jp-InputPrompt')].map(p => p.textContent);
  const running = prompts.filter(t => t.includes('*')).length;
  const kernel = w.sessionContext.session && w.sessionContext.session.kernel;
  return {errors, running, pending, status: kernel ? kernel.status : 'none'};
}"""

# One entry per chart inside ``root`` (a cell, or the whole page): its traces' data, its title, and
# the lines and labels drawn on it (a ceiling drawn as a shape changes no trace).
JS_PLOTS = """(root) => [...(root || document).querySelectorAll('.js-plotly-plot')].map(gd => {
  const layout = gd.layout || {};
  return JSON.stringify([(gd.data || []).map(t => [t.name, t.x, t.y, t.z, t.text]), (layout.title || {}).text || '',
    (layout.shapes || []).map(s => [s.x0, s.x1, s.y0, s.y1]), (layout.annotations || []).map(a => a.text)]);
})"""

JS_OPEN = """async (path) => {
  const app = window.jupyterapp;
  const widget = await app.commands.execute('docmanager:open', {path, factory: 'Notebook'});
  await widget.context.ready;
  await widget.sessionContext.ready;
  app.shell.activateById(widget.id);
  return widget.id;
}"""

JS_KERNEL_IDLE = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  return !!k && k.status === 'idle' && k.connectionStatus === 'connected';
}"""

JS_CLOSE = """async () => {
  const w = window.jupyterapp.shell.currentWidget;
  if (!w || !w.sessionContext) return;
  await w.sessionContext.shutdown();
  w.context.model.dirty = false;  // closes without the "save changes?" dialog; nothing is written
  w.dispose();
}"""


def open_lab(page, base: str, token: str) -> None:
    """Load JupyterLab once (?reset: an empty workspace); notebooks then open without reloading it."""
    page.goto(f"{base}/lab?reset&token={token}")
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell"
                           " && document.querySelector('.jp-LabShell')", timeout=90_000)
    page.evaluate("async () => { await window.jupyterapp.restored; }")


def open_notebook(page, base: str, token: str, path: str) -> None:
    if not page.url.startswith(base) or not page.evaluate("() => !!window.jupyterapp"):
        open_lab(page, base, token)
    page.evaluate(JS_OPEN, path)
    page.wait_for_function(JS_KERNEL_IDLE, timeout=90_000, polling=250)


def close_notebook(page) -> None:
    page.evaluate(JS_CLOSE)


def run_all(page, timeout_s: float = 120) -> dict:
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    deadline = time.monotonic() + timeout_s
    time.sleep(0.5)
    while True:
        state = page.evaluate(JS_NOTEBOOK_STATE)
        if state and state["running"] == 0 and state["status"] == "idle":
            return state
        if time.monotonic() > deadline:
            raise TimeoutError(f"Run All did not finish in {timeout_s} s: {state}")
        time.sleep(0.25)


def plots(page, root=None) -> list[str]:
    """The charts' data (in ``root``, an element handle, or the whole page)."""
    return root.evaluate(JS_PLOTS) if root is not None else page.evaluate(JS_PLOTS)


def wait_for_change(page, before: list[str], timeout_s: float = 20, root=None) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if plots(page, root) != before:
            return True
        time.sleep(0.15)
    return False
