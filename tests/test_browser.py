"""The course as a learner sees it: JupyterLab in a real Chromium (Playwright), one server per pytest worker.

For every lesson: open a scratch copy (build/browser/), Run All, no error output, the banner is
there, every control of every LiveChart is moved with the keyboard (sliders: arrow keys; dropdowns,
toggle buttons and check boxes: reached with Tab) and with the pointer, and its chart changes;
every "Show data table" button shows a table; a screenshot is saved under build/screenshots/; then
it is saved as a learner saves it, widget state included, and the file opens with the banner of this
machine's mode and weighs at most tools/notebook_size.py's limit. (These are the checks of
tests/test_notebooks.py's headless run, which therefore skips a lesson the browser runs.)
For lab 01: open a scratch copy, run it, and press nbgrader's Validate button.
Timings go to build/screenshots/timings-*.json.

After each move the test waits for the chart's own signal (tests/browser.py): a run has ended
since the move, and the chart shows it. Nothing here waits a fixed time or races the clock.
"""

import json
import os
import re
import shutil
import sys
import time

import nbformat
import pytest
from browser import (
    RUN_CEILING_S,
    SCREENSHOTS,
    browser_page,
    chart_text_clashes,
    chromium_missing_reason,
    close_notebook,
    lab_server,
    open_notebook,
    plots,
    run_all,
    save_notebook,
    wait_for_widgets,
    wait_until_painted,
    wait_until_settled,
)
from labtools import errors, opens_with_the_banner_of_this_machine

from gpucourse.tooling.build import ROOT, lesson_sources, to_notebook

sys.path.insert(0, str(ROOT / "tools"))
import notebook_size  # noqa: E402

# One group: one JupyterLab and one Chromium for the run. Spread over every worker, each started its own (about 8 s
# of start-up and a slower first page, three times over on three workers; issue 50); on one worker the lessons
# still end well within the others' share of the run.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("browser"),
              pytest.mark.skipif(chromium_missing_reason() is not None, reason=chromium_missing_reason() or "")]
TIMINGS: dict[str, dict[str, float]] = {}

CHARTS = ".gpucourse-livechart"  # every LiveChart (gpucourse/viz/widgets.py) on the page
JS_IS_FOCUSED = "(el) => document.activeElement === el"
JS_CELL_NUMBER = """(c) => { const cell = c.closest('.jp-Cell');
  return [...cell.closest('.jp-Notebook').querySelectorAll('.jp-Cell')].indexOf(cell); }"""
# SELECT_KEYS: in JupyterLab 4.6 a focused <select> does not get ArrowUp/ArrowDown: the notebook's
# command mode takes them (move to the cell above/below), since a <select> is not "read-write".
# The keys that do work, and that a keyboard user of a drop-down list uses: Space or Alt+ArrowDown
# opens the list (then arrows and Enter), Home/End pick the first/last option.
JS_SLIDER = """(h) => ({now: parseFloat(h.getAttribute('aria-valuenow')),
                       min: parseFloat(h.getAttribute('aria-valuemin')),
                       max: parseFloat(h.getAttribute('aria-valuemax'))})"""


@pytest.fixture(scope="session")
def lab():
    """One JupyterLab and one browser for the browser tests, on its own port and config folder (the tests are one
    xdist group: one worker runs them all)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with lab_server() as (base, token), browser_page() as page:
        TIMINGS["server and browser start"] = {"total_s": round(time.monotonic() - started, 1)}
        yield page, base, token
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    (SCREENSHOTS / f"timings-{worker}.json").write_text(json.dumps(TIMINGS, indent=2) + "\n")


def _tab_to(page, element, attempts: int = 4) -> bool:
    """Reach ``element`` with the keyboard: from it, Shift+Tab leaves and Tab comes back.

    JupyterLab moves the focus itself while it settles (it activates the cell a focus lands in,
    after a scroll or a run, in its own time), and on a loaded machine that can come between the two
    keys. So a miss is tried again once the page has painted; a control Tab cannot reach misses
    every time."""
    for _attempt in range(attempts):
        wait_until_painted(page)
        element.focus()
        page.keyboard.press("Shift+Tab")
        page.keyboard.press("Tab")
        if element.evaluate(JS_IS_FOCUSED):
            return True
    return False


def _reach(page, element, what: str) -> None:
    """Fail with where the focus went when ``element`` cannot be reached with Tab."""
    assert _tab_to(page, element), f"{what} cannot be reached with Tab (the focus is on {_focused(page)})"


def _focused(page) -> str:
    """Where the keyboard focus is (for a failure message)."""
    return page.evaluate("""() => { const e = document.activeElement; if (!e) return 'nothing';
      const cell = e.closest('.jp-Cell'); return e.tagName.toLowerCase() + (e.className ? '.' + e.className : '')
        + (cell ? ' in cell ' + [...document.querySelectorAll('.jp-Cell')].indexOf(cell) : ''); }""")


class Controls:
    def __init__(self, page, chart, name):
        self.page, self.chart, self.name = page, chart, name
        self.unchanged: list[str] = []
        self.moved = 0
        self.run_s: list[float] = []  # the kernel's own time per move ("✓ updated in 0.42 s"), recorded

    def _changed(self, what: str, act, *args) -> None:
        """Do ``act(*args)``, wait until a run of the chart has ended since, and note it when that
        run failed or left the chart as it was."""
        before_state = wait_until_settled(self.page, self.chart)
        before = plots(self.page, self.chart)
        act(*args)
        self.moved += 1
        try:
            after = wait_until_settled(self.page, self.chart, after=before_state)
        except TimeoutError as exc:  # the move started no run at all
            raise AssertionError(f"{self.name}: {what}: {exc}") from None
        took = re.search(r"updated in ([0-9.]+) s", after["said"])
        if took:
            self.run_s.append(float(took.group(1)))
        if after["errors"] > before_state["errors"]:
            self.unchanged.append(f"{self.name}: {what} (widget says: {after['said']})")
        elif plots(self.page, self.chart) == before:
            self.unchanged.append(f"{self.name}: {what}")

    def _keys(self, *keys: str) -> None:
        for key in keys:
            self.page.keyboard.press(key)

    def _drag(self, handle, track: dict) -> None:
        """Drag the handle a quarter of the track towards the roomier side (to the end if that moves
        nothing): far enough to change the value, not so far that other controls stop mattering."""
        start = handle.evaluate(JS_SLIDER)
        fraction = (start["now"] - start["min"]) / ((start["max"] - start["min"]) or 1)
        step = -0.25 if fraction > 0.5 else 0.25
        for to_fraction in (fraction + step, 0.0 if step < 0 else 1.0):
            box = handle.bounding_box()
            y = box["y"] + box["height"] / 2
            self.page.mouse.move(box["x"] + box["width"] / 2, y)
            self.page.mouse.down()
            # one pointer move: one new value, so one run answers this move (a run per step of a
            # many-step drag could end after the next move has begun)
            self.page.mouse.move(track["x"] + to_fraction * track["width"], y)
            self.page.mouse.up()
            if handle.evaluate(JS_SLIDER)["now"] != start["now"]:
                return

    def sliders(self) -> None:
        for i, handle in enumerate(self.chart.locator(".widget-slider .noUi-handle").element_handles()):
            handle.scroll_into_view_if_needed()
            value = handle.evaluate(JS_SLIDER)
            handle.focus()
            self._changed(f"slider {i} by keyboard", self._keys,
                          "ArrowRight" if value["now"] < value["max"] else "ArrowLeft")
            track = handle.evaluate_handle("h => h.closest('.noUi-target')").as_element().bounding_box()
            self._changed(f"slider {i} by pointer", self._drag, handle, track)

    def dropdowns(self) -> None:
        for i, select in enumerate(self.chart.locator(".widget-dropdown select").element_handles()):
            select.scroll_into_view_if_needed()
            options = select.evaluate("s => [...s.options].map(o => o.value)")
            if len(options) < 2:
                continue
            _reach(self.page, select, f"{self.name}: dropdown {i}")
            last = select.evaluate("s => s.selectedIndex") == len(options) - 1
            # Space opens the list, an arrow picks, Enter confirms (see SELECT_KEYS)
            self._changed(f"dropdown {i} by keyboard", self._keys, "Space", "ArrowUp" if last else "ArrowDown",
                          "Enter")
            current = select.evaluate("s => s.value")
            other = next(o for o in options if o != current)
            self._changed(f"dropdown {i} by pointer ({other})", select.select_option, other)

    def toggle_buttons(self) -> None:
        for i, group in enumerate(self.chart.locator(".widget-toggle-buttons").element_handles()):
            buttons = group.query_selector_all("button")
            if len(buttons) < 2:
                continue
            idle = [b for b in buttons if "mod-active" not in (b.get_attribute("class") or "")]
            _reach(self.page, idle[0], f"{self.name}: toggle buttons {i}")
            self._changed(f"toggle buttons {i} by keyboard", self._keys, "Space")
            idle = [b for b in buttons if "mod-active" not in (b.get_attribute("class") or "")]
            self._changed(f"toggle buttons {i} by pointer", idle[0].click)

    def checkboxes(self) -> None:
        for i, box in enumerate(self.chart.locator(".widget-checkbox input[type=checkbox]").element_handles()):
            _reach(self.page, box, f"{self.name}: check box {i}")
            self._changed(f"check box {i} by keyboard", self._keys, "Space")
            self._changed(f"check box {i} by pointer", box.click)

    def multiselects(self) -> None:
        for i, select in enumerate(self.chart.locator(".widget-select-multiple select").element_handles()):
            options = select.evaluate("s => [...s.options].map(o => o.value)")
            if len(options) < 2:
                continue
            _reach(self.page, select, f"{self.name}: multiple select {i}")
            self._changed(f"multiple select {i} by keyboard", self._keys, "End")  # the last option alone
            self._changed(f"multiple select {i} by pointer", select.select_option, options[:2])

    def text_boxes(self) -> None:
        """Typed values must be accepted; they need not change a chart (see module docstring)."""
        for i, box in enumerate(self.chart.locator(".widget-text input, .widget-inline-hbox input[type=number]")
                                .element_handles()):
            _reach(self.page, box, f"{self.name}: text box {i}")
            before = box.input_value()
            self.page.keyboard.press("ArrowUp" if box.get_attribute("type") == "number" else "End")
            self.page.keyboard.press("Enter")
            box.fill(before)
            self.page.keyboard.press("Enter")
            self.moved += 1

    def data_table(self) -> None:
        for button in self.chart.get_by_role("button", name="Show data table").element_handles():
            _reach(self.page, button, f"{self.name}: 'Show data table'")
            tables = self.chart.locator("table").count()
            self.page.keyboard.press("Space")
            self.page.wait_for_function("([c, n]) => c.querySelectorAll('table').length > n",
                                        arg=[self.chart.element_handle(), tables])
            self.page.keyboard.press("Space")  # hide it again


def exercise_widgets(page) -> tuple[list[str], int, list[float]]:
    """Move every control of every LiveChart; return the moves whose chart did not change, the count, and
    each move's run time as the widget reported it."""
    unchanged, moved, run_s = [], 0, []
    charts = page.locator(CHARTS)
    for index in range(charts.count()):
        chart = charts.nth(index)
        number = chart.evaluate(JS_CELL_NUMBER)
        controls = Controls(page, chart, f"cell {number}")  # as in the lesson's source, counting from 0
        controls.sliders()
        controls.dropdowns()
        controls.toggle_buttons()
        controls.checkboxes()
        controls.multiselects()
        controls.text_boxes()
        controls.data_table()
        wait_until_settled(page, chart)  # quiet before the next chart (a typed value may have started a run)
        unchanged += controls.unchanged
        moved += controls.moved
        run_s += controls.run_s
    return unchanged, moved, run_s


@pytest.mark.parametrize("source", lesson_sources(), ids=lambda p: p.stem)
def test_lesson_in_the_browser(lab, source):
    page, base, token = lab
    started = time.monotonic()
    scratch = ROOT / "build" / "browser" / f"{source.stem}.ipynb"  # saved below: not the generated notebook
    scratch.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(to_notebook(source), scratch)
    open_notebook(page, base, token, scratch.relative_to(ROOT).as_posix())
    opened = time.monotonic()
    try:
        state = run_all(page)
        ran = time.monotonic()
        assert state["errors"] == [], state["errors"]
        assert state["pending"] == 0, "some cells did not run"
        assert page.locator(".gpucourse-banner").count() >= 1, "the banner is missing"
        wait_for_widgets(page, state["widgets"])
        page.wait_for_selector(".js-plotly-plot .main-svg")
        assert page.locator(CHARTS).count() == state["widgets"], "every widget output should be a LiveChart"
        clashes = chart_text_clashes(page)  # every chart of the lesson, as drawn by its first run
        unchanged, moved, run_s = exercise_widgets(page)
        shown = page.locator(CHARTS)
        (shown.first if shown.count() else page.locator(".jp-Notebook .jp-Cell").first).scroll_into_view_if_needed()
        wait_until_painted(page)  # the notebook paints cells that scroll into view in the next frames
        page.screenshot(path=str(SCREENSHOTS / f"{source.stem}.png"))
        # wall-clock times are recorded, never asserted: they measure the machine's load
        TIMINGS[source.stem] = {"open_s": round(opened - started, 1), "run_all_s": round(ran - opened, 1),
                                "widgets_s": round(time.monotonic() - ran, 1), "controls_moved": moved,
                                "slowest_move_s": max(run_s, default=0.0),
                                "moves_over_1_s": sum(t > 1.0 for t in run_s),
                                "total_s": round(time.monotonic() - started, 1)}
        assert unchanged == [], f"these moves did not change their chart: {unchanged}"
        assert clashes == [], "texts of a chart that cannot be read:\n" + "\n".join(clashes)
        saved = nbformat.read(save_notebook(page), as_version=4)
        assert not errors(saved), errors(saved)
        assert opens_with_the_banner_of_this_machine(saved), "the first output must be this machine's banner"
        assert saved.metadata.get("widgets") or not state["widgets"], "the widgets' state was not saved"
        assert scratch.stat().st_size <= notebook_size.LIMIT_BYTES, notebook_size.report(source.stem, saved)
    finally:
        close_notebook(page)


def test_lab01_runs_and_validates_in_the_browser(lab):
    page, base, token = lab
    started = time.monotonic()
    source = ROOT / "labs" / "lab01_warps" / "lab01_warps.ipynb"
    scratch = ROOT / "build" / "browser" / "lab01_warps.ipynb"  # Validate saves the notebook first
    scratch.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(source, scratch)
    open_notebook(page, base, token, scratch.relative_to(ROOT).as_posix())
    try:
        state = run_all(page)
        assert state["errors"] and state["errors"][0].startswith("NotImplementedError")  # stops at exercise 1
        page.get_by_role("button", name="Validate").first.click()
        dialog = page.locator(".jp-Dialog")
        dialog.wait_for(timeout=RUN_CEILING_S * 1000)  # nbgrader runs the whole lab first
        text = dialog.inner_text()
        page.screenshot(path=str(SCREENSHOTS / "lab01_validate.png"))
        assert "Validat" in text and ("failed" in text.lower() or "error" in text.lower()), text[:500]
        page.keyboard.press("Escape")
    finally:
        close_notebook(page)
        TIMINGS["lab01_validate"] = {"total_s": round(time.monotonic() - started, 1)}


CLASHING_CHARTS = '''import plotly.graph_objects as go
from gpucourse.viz import charts

clean = charts.figure("A clean chart", "x (units)", "y (units)", charts.source_caption("model", "nothing clashes"))
clean.add_scatter(x=[1, 2], y=[3, 4], name="a series")
clean.show()
clashing = go.Figure(go.Scatter(x=[1, 2], y=[3, 4], name="a series"))
clashing.update_layout(title={"text": "A clashing chart"}, height=300, width=500)
for text in ("a label drawn here", "another label on it"):
    clashing.add_annotation(text=text, xref="paper", yref="paper", x=0.5, y=0.5, showarrow=False)
clashing.add_annotation(text="a caption pushed off the figure", xref="paper", yref="paper", x=1.6, y=0,
                        showarrow=False)
clashing.show()
'''


def test_the_chart_text_check_can_fail(lab):
    """The readability check on two charts drawn by JupyterLab: the course's layout passes; two labels on
    one spot and a caption off the figure are both found."""
    page, base, token = lab
    scratch = ROOT / "build" / "browser" / "clashing_charts.ipynb"
    scratch.parent.mkdir(parents=True, exist_ok=True)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(CLASHING_CHARTS)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, scratch)
    open_notebook(page, base, token, scratch.relative_to(ROOT).as_posix())
    try:
        state = run_all(page)
        assert state["errors"] == [], state["errors"]
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot .main-svg').length >= 2",
                               polling=250)
        clashes = chart_text_clashes(page)
        assert not [c for c in clashes if c.startswith("chart 1 ")], clashes
        assert any("'a label drawn here' overlaps" in c and "another label" in c for c in clashes), clashes
        assert any("caption pushed off" in c and "leaves the figure" in c for c in clashes), clashes
    finally:
        close_notebook(page)


# A chart that settles, and whose next run starts the moment the settled check has read it (its data revision's
# first read removes the status line's counts, as a run in flight does, once that check's script is done)
NEXT_RUN_STARTS_AT_ONCE = """() => {
  const gd = document.querySelector('.js-plotly-plot');
  let reads = 0;
  gd.layout = {get datarevision() {
    if (++reads === 1) queueMicrotask(() => document.querySelector('[data-runs]').removeAttribute('data-runs'));
    return 1;
  }};
}"""


def test_the_settled_state_is_the_one_seen_settled(lab):
    """wait_until_settled returns the state its check saw, not a second read that a run started by the move can
    already have changed (a CI run once read errors: null there). In a tab of its own beside the worker's
    JupyterLab (one Playwright a process)."""
    page = lab[0].context.browser.new_page()
    try:
        page.set_content('<div class="gpucourse-livechart"><div class="js-plotly-plot"></div>'
                         '<div data-runs="1" data-errors="0">✓ updated in 0.1 s</div></div>')
        page.evaluate(NEXT_RUN_STARTS_AT_ONCE)
        state = wait_until_settled(page, page.locator(CHARTS))
        assert state == {"revision": 1, "runs": 1, "errors": 0, "said": "✓ updated in 0.1 s"}
        assert page.locator("[data-runs]").count() == 0  # the next run did start
    finally:
        page.close()
