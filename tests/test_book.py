"""`make book`: the static website builds from the lessons' text sources and its pages load
offline in a real Chromium with their charts rendered."""

import pytest

from browser import CHROMIUM, CHROMIUM_ARGS, chromium_missing_reason
from gpucourse import book
from gpucourse.build import lesson_sources

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return book.build(tmp_path_factory.mktemp("book") / "src")


def test_every_lesson_has_a_page(site):
    assert (site / "index.html").exists()
    for source in lesson_sources():
        page = (site / f"{source.stem}.html").read_text()
        assert "gpucourse-banner" in page and "Simulator mode" in page, source.stem
        assert "cdn.jsdelivr.net" not in page and "cdnjs.cloudflare.com" not in page, "pages must work offline"


@pytest.mark.skipif(chromium_missing_reason() is not None, reason=chromium_missing_reason() or "")
def test_pages_load_offline_and_charts_render(site):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page()
        remote = []
        page.on("request", lambda r: remote.append(r.url) if r.url.startswith("http") else None)
        for source in lesson_sources():
            page.goto((site / f"{source.stem}.html").as_uri())
            page.wait_for_selector(".js-plotly-plot .main-svg", timeout=20_000)
            assert page.locator(".js-plotly-plot").count() >= 1, source.stem
            assert page.locator(".gpucourse-banner").count() == 1
        browser.close()
    assert remote == [], f"the site asked the network for {remote[:3]}"
