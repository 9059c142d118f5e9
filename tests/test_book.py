"""`make book`: the static website builds from the lessons' text sources and its pages load
offline in a real Chromium with every chart rendered by the one shared plotly.js."""

import pytest
from browser import CEILING_S, CHROMIUM, CHROMIUM_ARGS, SCREENSHOTS, chromium_missing_reason

from gpucourse.tooling import book
from gpucourse.tooling.build import lesson_sources

# one worker builds the site once for both tests (pytest -n 2 --dist loadgroup)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("book")]

JS_CHARTS = """() => {
  const divs = [...document.querySelectorAll('.plotly-graph-div')];
  return {
    divs: divs.length,
    drawn: divs.filter(d => d._fullLayout && d.querySelector('.main-svg')).length,
    interactive: divs.filter(d => d.querySelector('.modebar-container') || d.querySelector('.modebar')).length,
    plotly: typeof window.Plotly === 'object' ? window.Plotly.version : null,
  };
}"""
# Plotly draws every chart of a static page from its own script: done when each has its SVG.
JS_ALL_DRAWN = """() => [...document.querySelectorAll('.plotly-graph-div')].every(d => d.querySelector('.main-svg'))"""


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return book.build(tmp_path_factory.mktemp("book") / "src")


def test_every_lesson_has_a_page(site):
    assert (site / "index.html").exists()
    for source in lesson_sources():
        page = (site / f"{source.stem}.html").read_text()
        assert "gpucourse-banner" in page and "Simulator mode" in page, source.stem
        assert '<script src="http' not in page, "pages must work offline (no remote scripts)"
        assert "widget-state+json" not in page, "no widget state: each FigureWidget would embed plotly.js again"
        assert len(page) < 3_000_000, "plotly.js must be shared from _static/, not embedded per chart"
    assert (site / "_static" / "plotly.min.js").exists()


@pytest.mark.skipif(chromium_missing_reason() is not None, reason=chromium_missing_reason() or "")
def test_pages_load_offline_and_charts_render(site):
    from playwright.sync_api import sync_playwright

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(CEILING_S * 1000)  # a ceiling only a broken page reaches
            remote, errors = [], []
            page.on("request", lambda r: remote.append(r.url) if r.url.startswith("http") else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            for name in ["intro"] + [s.stem for s in lesson_sources()]:
                page.goto((site / f"{name}.html").as_uri())
                page.wait_for_load_state("load")
                if name == "intro":
                    page.screenshot(path=str(SCREENSHOTS / "book_intro.png"))
                    continue
                page.wait_for_selector(".js-plotly-plot .main-svg")
                page.wait_for_function(JS_ALL_DRAWN)
                charts = page.evaluate(JS_CHARTS)
                assert charts["plotly"], f"{name}: plotly.js did not load from _static/"
                assert charts["divs"] >= 1 and charts["drawn"] == charts["divs"], (name, charts)
                assert charts["interactive"] == charts["divs"], (name, charts)  # the modebar: zoom, pan, hover
                notes = page.locator(".gpucourse-static-note").count()
                assert page.locator("details > summary", has_text="Show data table").count() == notes, name
                assert page.locator(".gpucourse-banner").count() == 1
                assert errors == [], (name, errors)
                first_widget = page.locator(".gpucourse-static-note")
                target = first_widget.first if first_widget.count() else page.locator(".js-plotly-plot").first
                target.scroll_into_view_if_needed()
                page.screenshot(path=str(SCREENSHOTS / f"book_{name}.png"))
        finally:
            browser.close()
    assert remote == [], f"the site asked the network for {remote[:3]}"
