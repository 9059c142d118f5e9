"""The course as a learner sees it: JupyterLab in a real Chromium (Playwright), one server for all.

For every lesson: open it, Run All, no error output, the banner is there, every slider and
dropdown is moved (keyboard and pointer) and the chart it drives changes, a screenshot is
saved under build/screenshots/. For lab 01: open, run, and press nbgrader's Validate button.
"""

import time

import pytest
from browser import (
    SCREENSHOTS,
    browser_page,
    chromium_missing_reason,
    lab_server,
    open_notebook,
    plots,
    run_all,
    wait_for_change,
)

from gpucourse.build import ROOT, build_notebooks, lesson_sources

pytestmark = [pytest.mark.slow, pytest.mark.skipif(chromium_missing_reason() is not None,
                                                   reason=chromium_missing_reason() or "")]
LESSON_BUDGET_S = 60


@pytest.fixture(scope="module")
def lab():
    build_notebooks()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with lab_server() as (base, token), browser_page() as page:
        yield page, base, token


def exercise_widgets(page) -> list[str]:
    """Move every slider and dropdown; return the controls whose chart did not change."""
    unchanged = []
    sliders = page.locator(".widget-slider .noUi-handle")
    for i in range(sliders.count()):
        handle = sliders.nth(i)
        handle.scroll_into_view_if_needed()
        before = plots(page)
        handle.focus()
        page.keyboard.press("ArrowRight")  # keyboard
        changed = wait_for_change(page, before)
        before = plots(page)
        box = handle.bounding_box()
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        page.mouse.down()
        page.mouse.move(box["x"] + box["width"] / 2 + 40, box["y"] + box["height"] / 2, steps=5)  # pointer
        page.mouse.up()
        changed = wait_for_change(page, before) and changed
        if not changed:
            unchanged.append(f"slider {i}")
    selects = page.locator(".widget-dropdown select")
    for i in range(selects.count()):
        select = selects.nth(i)
        select.scroll_into_view_if_needed()
        options = select.locator("option").all_text_contents()
        current = select.input_value()
        other = next((o for o in options if o != current), None)
        if other is None:
            continue
        before = plots(page)
        select.focus()
        select.select_option(label=other)
        if not wait_for_change(page, before):
            unchanged.append(f"dropdown {i} ({other})")
    return unchanged


@pytest.mark.parametrize("source", lesson_sources(), ids=lambda p: p.stem)
def test_lesson_in_the_browser(lab, source):
    page, base, token = lab
    started = time.monotonic()
    open_notebook(page, base, token, f"notebooks/{source.stem}.ipynb")
    state = run_all(page, timeout_s=LESSON_BUDGET_S)
    assert state["errors"] == [], state["errors"]
    assert state["pending"] == 0, "some cells did not run"
    assert page.locator(".gpucourse-banner").count() >= 1, "the banner is missing"
    assert plots(page), "no chart rendered"
    unchanged = exercise_widgets(page)
    page.screenshot(path=str(SCREENSHOTS / f"{source.stem}.png"), full_page=False)
    assert unchanged == [], f"these controls did not change their chart: {unchanged}"
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:close-and-shutdown')")
    assert time.monotonic() - started < LESSON_BUDGET_S + 30


def test_lab01_runs_and_validates_in_the_browser(lab):
    page, base, token = lab
    lab_path = "labs/lab01_warps/lab01_warps.ipynb"
    assert (ROOT / lab_path).exists()
    open_notebook(page, base, token, lab_path)
    state = run_all(page)
    assert state["errors"] and state["errors"][0].startswith("NotImplementedError")  # stops at exercise 1
    page.get_by_role("button", name="Validate").first.click()
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for(timeout=90_000)
    text = dialog.inner_text()
    page.screenshot(path=str(SCREENSHOTS / "lab01_validate.png"))
    assert "Validat" in text and ("failed" in text.lower() or "error" in text.lower()), text[:500]
