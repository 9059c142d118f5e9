"""A real JupyterLab (started the way `make lab` starts it) driven by Playwright in Debian's Chromium.

Every wait here ends on a signal of the page itself: a Run All command's promise, the kernel's
status, a chart's data revision (gpucourse.viz.widgets.LiveChart numbers each update it applies) and
its status line. The ceilings are generous so that only a real failure reaches them, however
loaded the machine is (two pytest workers on two cores); no fixed sleep decides a result.
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
import shutil
import subprocess
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import psutil

from gpucourse.measure.ranklaunch import free_port
from gpucourse.tooling.build import ROOT
from gpucourse.tooling.launch import lab_command, lab_env

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
                 "--disable-breakpad", "--disable-crash-reporter", "--disable-features=OptimizationHints"]
SCREENSHOTS = ROOT / "build" / "screenshots"
# The test server never writes the notebooks it runs: no autosave (Validate saves a scratch copy).
TEST_SETTING_OVERRIDES = {
    "@jupyterlab/docmanager-extension:plugin": {"autosave": False},
    # a saved lesson carries its widgets' state, as a learner who turns that on gets: the largest a
    # lesson is ever saved, which tests/test_browser.py weighs against tools/notebook_size.py's limit
    "@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": True},
}
# The longest any single wait may take: a lesson's Run All on a loaded 2-core machine takes well
# under a minute, a chart update under a second; three minutes is reached only when something is broken.
CEILING_S = 180
RUN_CEILING_S = 420  # a whole notebook's Run All, or nbgrader's Validate running a lab


def chromium_missing_reason() -> str | None:
    if not Path(CHROMIUM).exists():
        return "Debian's chromium is not installed (apt-get install chromium); .ci/run installs it in CI"
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "the playwright package is missing (make setup installs it)"
    return None


def _stop(process: subprocess.Popen) -> None:
    """Stop the server by its PID, then any kernel it started that outlived it (by PID too)."""
    try:
        children = psutil.Process(process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    _, alive = psutil.wait_procs(children, timeout=15)
    for child in alive:
        child.kill()
    psutil.wait_procs(alive, timeout=5)


def _start_lab(root: Path, env: dict) -> tuple[subprocess.Popen, str, str, object]:
    """Start JupyterLab on a free port and wait for its status API; another port if the one picked
    was taken in between (another worker's server or kernel may bind it first)."""
    for _attempt in range(3):
        port, token = free_port(), secrets.token_hex(16)
        cmd = lab_command(port, is_root=os.geteuid() == 0, has_display=False, root=root) + [
            f"--IdentityProvider.token={token}", "--LabApp.expose_app_in_browser=True",
            "--KernelManager.transport=ipc",  # no kernel port to lose to another process (CI stop 55)
        ]
        log_path = root / "build" / f"lab-{port}.log"
        log = open(log_path, "w")  # noqa: SIM115
        server = subprocess.Popen(cmd, cwd=root, stdout=log, stderr=subprocess.STDOUT, env=env)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + CEILING_S
        while server.poll() is None and time.monotonic() < deadline:  # until its status API answers
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=10) as reply:
                    json.load(reply)
                return server, base, token, log
            except (OSError, http.client.HTTPException):  # not up yet, or the port is another process's
                time.sleep(0.5)  # (a kernel's ZMQ socket answers HTTP with BadStatusLine); lab then exits
        _stop(server)
        log.close()
        if "already in use" not in log_path.read_text():
            break
    raise RuntimeError(f"JupyterLab did not start (exit {server.poll()}); see {log_path}")


@contextmanager
def lab_server(root: Path = ROOT):
    """JupyterLab on a free loopback port; stopped by its own PID at the end, nothing left running.

    A fresh Jupyter config and runtime folder per server: no workspace from an earlier run
    reopens old tabs, and two servers (one per pytest worker) share no state.
    """
    with tempfile.TemporaryDirectory(prefix="gpucourse-lab-") as scratch:
        env = lab_env(overrides=TEST_SETTING_OVERRIDES, config_path=Path(scratch) / "path")
        env["JUPYTER_CONFIG_DIR"] = str(Path(scratch) / "config")
        env["JUPYTER_RUNTIME_DIR"] = str(Path(scratch) / "runtime")
        env.pop("PLOTLY_RENDERER", None)  # tests/conftest.py sets "json" for the unit tests; the lab draws charts
        (root / "build").mkdir(exist_ok=True)
        server, base, token, log = _start_lab(root, env)
        try:
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
            # every Playwright action (click, fill, goto, wait_for…) gets the generous ceiling
            page.set_default_timeout(CEILING_S * 1000)
            page.set_default_navigation_timeout(CEILING_S * 1000)
            yield page
        finally:
            browser.close()


# JavaScript run in the page through the app JupyterLab exposes (--LabApp.expose_app_in_browser).
JS_NOTEBOOK_STATE = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  if (!w || !w.content || !w.sessionContext) return null;
  const cells = w.content.model.cells;
  let errors = [], pending = 0, widgets = 0;
  for (let i = 0; i < cells.length; i++) {
    const c = cells.get(i);
    if (c.type !== 'code') continue;
    const outs = c.outputs.toJSON();
    for (const o of outs) {
      if (o.output_type === 'error') errors.push(o.ename + ': ' + o.evalue);
      if (o.data && o.data['application/vnd.jupyter.widget-view+json']) widgets++;
    }
    if (c.executionCount === null) pending++;
  }
  const prompts = [...w.node.querySelectorAll('.jp-InputPrompt')].map(p => p.textContent);
  const running = prompts.filter(t => t.includes('*')).length;
  const kernel = w.sessionContext.session && w.sessionContext.session.kernel;
  return {errors, running, pending, widgets, status: kernel ? kernel.status : 'none'};
}"""

JS_RUN_ENDED = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  const running = w ? [...w.node.querySelectorAll('.jp-InputPrompt')].some(p => p.textContent.includes('*')) : true;
  return !!k && k.status === 'idle' && !running;
}"""

# Every widget output is on the page and every LiveChart in it has drawn its chart.
JS_WIDGETS_SHOWN = """(expected) => {
  const w = window.jupyterapp.shell.currentWidget;
  const shown = [...w.node.querySelectorAll('.jp-OutputArea-output')]
    .filter(o => o.querySelector('.jupyter-widgets')).length;
  const charts = [...w.node.querySelectorAll('.gpucourse-livechart')];
  return shown >= expected && charts.every(c => {
    const gd = c.querySelector('.js-plotly-plot'), status = c.querySelector('[data-runs]');
    return gd && gd.querySelector('.main-svg') && status
      && (gd.layout.datarevision || 0) === parseInt(status.dataset.runs);  // drawn from its latest run
  });
}"""

# One entry per chart inside ``root`` (a cell, or the whole page): its traces' data, its title, and
# the lines and labels drawn on it (a ceiling drawn as a shape changes no trace).
JS_PLOTS = """(root) => [...(root || document).querySelectorAll('.js-plotly-plot')].map(gd => {
  const layout = gd.layout || {};
  return JSON.stringify([(gd.data || []).map(t => [t.name, t.x, t.y, t.z, t.text]), (layout.title || {}).text || '',
    (layout.shapes || []).map(s => [s.x0, s.x1, s.y0, s.y1]), (layout.annotations || []).map(a => a.text)]);
})"""

# The text a reader must be able to read on one chart: its title, axis titles, legend, annotations
# (the source caption is one) — each as its box on the page. Tick labels are Plotly's to place.
JS_CHART_TEXT = """(gd) => {
  const box = (el, what) => {
    const r = el.getBoundingClientRect();
    return {what, text: (el.textContent || '').trim().slice(0, 50),
            left: r.left, top: r.top, right: r.right, bottom: r.bottom, w: r.width, h: r.height};
  };
  const items = [];
  gd.querySelectorAll('.infolayer text.gtitle').forEach(e => items.push(box(e, 'title')));
  gd.querySelectorAll('.infolayer text[class$="title"]:not(.gtitle)').forEach(e => items.push(box(e, 'axis title')));
  gd.querySelectorAll('.infolayer g.legend').forEach(e => items.push(box(e, 'legend')));
  gd.querySelectorAll('g.annotation-text-g').forEach(e => items.push(box(e, 'annotation')));
  // an arrow drawn as an annotation without text has nothing to read
  return {figure: box(gd.querySelector('.main-svg'), 'figure'),
          items: items.filter(i => i.w > 0 && i.h > 0 && (i.what !== 'annotation' || i.text))};
}"""

# A LiveChart's own signals (gpucourse/viz/widgets.py): its chart's layout.datarevision is the number
# of the run it shows; its status line carries data-runs/data-errors once a run has ended (no
# data attributes while one is running).
JS_CHART_STATE = """(chart) => {
  const gd = chart.querySelector('.js-plotly-plot');
  const status = chart.querySelector('[data-runs]');
  return {revision: gd && gd.layout ? (gd.layout.datarevision || 0) : 0,
          runs: status ? parseInt(status.dataset.runs) : null,
          errors: status ? parseInt(status.dataset.errors) : null,
          said: status ? status.textContent : 'running'};
}"""

# Settled: no run in flight (the status line carries its counts only once a run has ended) and
# the chart shows the last successful run; ``after`` (optional): and a run has ended since that
# state, either applied to the chart (its data revision comes in the same Plotly update as the new
# data) or failed with a message. Its value is the state it saw settled (JS_CHART_STATE's fields),
# read in the same call: a second read could land in a run that a move started next (a CI run saw
# errors: null there).
JS_CHART_SETTLED = """([chart, after]) => {
  const gd = chart.querySelector('.js-plotly-plot');
  const status = chart.querySelector('[data-runs]');
  if (!gd || !gd.layout || !status) return false;
  const revision = gd.layout.datarevision || 0;
  if (revision !== parseInt(status.dataset.runs)) return false;  // the chart is behind its status line
  const state = {revision, runs: parseInt(status.dataset.runs), errors: parseInt(status.dataset.errors),
                 said: status.textContent};
  return !after || revision > after.revision || state.errors > after.errors ? state : false;
}"""

JS_OPEN = """async (path) => {
  const app = window.jupyterapp;
  const widget = await app.commands.execute('docmanager:open', {path, factory: 'Notebook'});
  await widget.context.ready;
  await widget.sessionContext.ready;
  app.shell.activateById(widget.id);
  return widget.id;
}"""

# Run All through JupyterLab's command: its promise settles when every cell's execution has ended
# (replied to and gone idle), or the run stopped at an error.
JS_RUN_ALL = "async () => { await window.jupyterapp.commands.execute('notebook:run-all-cells'); }"

JS_KERNEL_IDLE = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  return !!k && k.status === 'idle' && k.connectionStatus === 'connected';
}"""

# Save as the learner's Ctrl+S does; the promise settles when the file is written.
JS_SAVE = """async () => {
  const w = window.jupyterapp.shell.currentWidget;
  await w.context.save();
  return w.context.path;
}"""

JS_CLOSE = """async () => {
  const w = window.jupyterapp.shell.currentWidget;
  if (!w || !w.sessionContext) return;
  await w.sessionContext.shutdown();
  w.context.model.dirty = false;  // closes without the "save changes?" dialog; nothing is written
  w.dispose();
}"""

JS_PAINTED = "() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"


def in_page(page, async_function: str, arg=None, ceiling_s: float = CEILING_S):
    """Call an async JavaScript function in the page and wait for its promise to settle: its value,
    or RuntimeError with its error. (page.evaluate alone would wait without any ceiling.)"""
    key = secrets.token_hex(6)
    page.evaluate(f"""([key, arg]) => {{
      const tasks = window.gpucourseTasks = window.gpucourseTasks || {{}};
      tasks[key] = null;
      Promise.resolve().then(() => ({async_function})(arg)).then(
        value => {{ tasks[key] = {{value: value === undefined ? null : value}}; }},
        error => {{ tasks[key] = {{error: String((error && error.stack) || error)}}; }});
    }}""", [key, arg])
    outcome = page.wait_for_function("(key) => window.gpucourseTasks[key]", arg=key, polling=100,
                                     timeout=ceiling_s * 1000).json_value()
    if "error" in outcome:
        raise RuntimeError(f"in the page: {outcome['error']}")
    return outcome["value"]


def open_lab(page, base: str, token: str) -> None:
    """Load JupyterLab once (?reset: an empty workspace); notebooks then open without reloading it."""
    page.goto(f"{base}/lab?reset&token={token}")
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell"
                           " && document.querySelector('.jp-LabShell')", polling=250)
    in_page(page, "async () => { await window.jupyterapp.restored; }")


def open_notebook(page, base: str, token: str, path: str) -> None:
    if not page.url.startswith(base) or not page.evaluate("() => !!window.jupyterapp"):
        open_lab(page, base, token)
    in_page(page, JS_OPEN, path)
    page.wait_for_function(JS_KERNEL_IDLE, polling=250)


def close_notebook(page) -> None:
    in_page(page, JS_CLOSE)


def save_notebook(page) -> Path:
    """Save the open notebook (its widgets' state included); the file's path."""
    return ROOT / in_page(page, JS_SAVE)


def run_all(page) -> dict:
    """Run All; when its promise has settled and the kernel is idle, the notebook's state."""
    in_page(page, JS_RUN_ALL, ceiling_s=RUN_CEILING_S)
    page.wait_for_function(JS_RUN_ENDED, polling=250)
    return page.evaluate(JS_NOTEBOOK_STATE)


def wait_for_widgets(page, expected: int) -> None:
    """Every widget output rendered and every LiveChart drawn (the views render after Run All)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(JS_WIDGETS_SHOWN, arg=expected, polling=250)
    except PlaywrightTimeout:
        charts = [chart_state(c) for c in page.locator(".gpucourse-livechart").all()]
        raise TimeoutError(f"{expected} widgets not all drawn within {CEILING_S} s: {charts}") from None


def wait_until_painted(page) -> None:
    page.evaluate(JS_PAINTED)


def plots(page, root=None) -> list[str]:
    """The charts' data (in ``root``, an element handle or locator, or the whole page)."""
    return root.evaluate(JS_PLOTS) if root is not None else page.evaluate(JS_PLOTS)


def chart_text_clashes(page, slack_px: float = 1.0) -> list[str]:
    """Every chart on the page, scrolled into view: the texts of it (``JS_CHART_TEXT``) that leave the
    figure or overlap one another, one line each; empty when every text can be read."""
    clashes = []
    charts = page.locator(".js-plotly-plot")
    for index in range(charts.count()):
        chart = charts.nth(index)
        chart.scroll_into_view_if_needed()
        wait_until_painted(page)
        seen = chart.evaluate(JS_CHART_TEXT)
        figure, items = seen["figure"], seen["items"]
        if figure["w"] == 0:
            continue
        name = f"chart {index + 1} ({next((i['text'] for i in items if i['what'] == 'title'), 'untitled')!r})"
        for item in items:
            out = {side: round(px) for side, px in (
                ("left", figure["left"] - item["left"]), ("top", figure["top"] - item["top"]),
                ("right", item["right"] - figure["right"]), ("bottom", item["bottom"] - figure["bottom"]))
                if px > slack_px}
            if out:
                sides = ", ".join(f"{px} px past the {side}" for side, px in out.items())
                clashes.append(f"{name}: the {item['what']} {item['text']!r} leaves the figure ({sides})")
        for a, first in enumerate(items):
            for second in items[a + 1:]:
                across = min(first["right"], second["right"]) - max(first["left"], second["left"])
                down = min(first["bottom"], second["bottom"]) - max(first["top"], second["top"])
                if across > slack_px and down > slack_px:
                    clashes.append(f"{name}: the {first['what']} {first['text']!r} overlaps the "
                                   f"{second['what']} {second['text']!r}")
    return clashes


def chart_state(chart) -> dict:
    """A LiveChart's data revision, runs and errors as its page shows them."""
    return chart.evaluate(JS_CHART_STATE)


def wait_until_settled(page, chart, after: dict | None = None) -> dict:
    """Until no run is in flight in this LiveChart (and, with ``after``, one has ended since); its state.

    Raises TimeoutError (with what the chart shows) at the ceiling: no update came at all.
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        settled = page.wait_for_function(JS_CHART_SETTLED, arg=[chart.element_handle(), after], polling=100)
    except PlaywrightTimeout:
        raise TimeoutError(f"no update ended within {CEILING_S} s (chart: {chart_state(chart)})") from None
    return settled.json_value()
