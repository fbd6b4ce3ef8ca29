"""The site built with Zensical (``sweeper.report.zensical``), in headless Chromium: both
languages' run pages open and draw every chart, the language switch lands on the same page,
nothing leaves localhost, no console error, and each language's search finds an English and a
Chinese word. Built once for the module from the same trace sets as the MkDocs site."""

from __future__ import annotations

import contextlib
import functools
import http.server
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sweeper.store import discover_trace_sets
from tests.report.site_helpers import BROKEN, RUN_A, RUN_B, RUN_XSS, STUDY, VERSION
from tests.report.test_site_browser import DRAW_TIMEOUT_MS, Browser, _clean, chromium

pytestmark = [pytest.mark.browser, pytest.mark.slow]

__all__ = ["chromium"]  # the Chromium fixture of the MkDocs site's browser test, reused


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@dataclass
class ZensicalSite:
    site_dir: Path
    base_url: str
    seconds: dict[str, float]


@pytest.fixture(scope="module")
def zensical_site(
    tmp_path_factory: pytest.TempPathFactory, readable_traces: Path
) -> Iterator[ZensicalSite]:
    pytest.importorskip("zensical", reason="Zensical is not installed: make site-zensical")
    from sweeper.report.zensical import build_site

    work = tmp_path_factory.mktemp("zensical")
    serve_root = work / "public"
    serve_root.mkdir()
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(serve_root))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base_url = f"http://127.0.0.1:{server.server_port}/{VERSION}/"
    try:
        result = build_site(
            serve_root / VERSION,
            traces_dir=readable_traces,
            work_dir=work / "work",
            site_url=base_url,
            strict=True,
        )
        yield ZensicalSite(result.site_dir, base_url, result.seconds)
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def browser(chromium, zensical_site: ZensicalSite) -> Iterator[Browser]:
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    yield Browser(page, zensical_site.base_url)
    context.close()


@pytest.mark.parametrize("prefix", ["", "zh/"])
def test_every_chart_draws_on_a_run_page(browser: Browser, prefix: str) -> None:
    browser.open(f"{prefix}runs/{RUN_A}/")
    charts, drawn = browser.chart_count()
    assert charts == 7 and drawn == 7
    assert browser.page.evaluate("document.documentElement.lang") == (prefix.strip("/") or "en")
    heading = browser.page.locator("article h1").first.inner_text()
    assert heading and "None" not in heading
    _clean(browser)


def test_every_run_of_the_site_draws(browser: Browser, readable_traces: Path) -> None:
    """Every trace set (the synthetic ones and the samples of traces/), its charts drawn as SVG
    by vega-embed."""
    runs = [p.name for p in discover_trace_sets(readable_traces) if p.name != BROKEN]
    assert len(runs) >= 3
    # Both languages, each run in one of them (in turn): a page is a second of the test's time,
    # and RUN_A is opened in both above.
    for number, run in enumerate(runs):
        prefix = ("", "zh/")[number % 2]
        browser.open(f"{prefix}runs/{run}/")
        charts, drawn = browser.chart_count()
        assert charts >= 6 and drawn == charts, f"{prefix}{run}"
    _clean(browser)


@pytest.mark.parametrize("prefix", ["", "zh/"])
def test_index_comparison_and_study_pages_draw(browser: Browser, prefix: str) -> None:
    browser.open(f"{prefix}runs/")
    assert browser.page.locator("article table tbody tr").count() >= 4
    browser.page.locator("article a[href*='compare/']").first.click()
    browser.page.wait_for_url(f"**/{prefix}compare/**")
    browser.wait_for_charts(at_least=2)
    assert list(browser.chart_count()) == [2, 2]
    browser.open(f"{prefix}runs/{STUDY}/")
    assert list(browser.chart_count()) == [2, 2]
    _clean(browser)


def test_language_switch_lands_on_the_same_page(browser: Browser) -> None:
    browser.open(f"runs/{RUN_A}/")
    browser.page.locator("a[hreflang='zh']").first.dispatch_event("click")
    browser.page.wait_for_url(f"**/zh/runs/{RUN_A}/")
    assert browser.page.evaluate("document.documentElement.lang") == "zh"
    browser.wait_for_charts()
    browser.page.locator("a[hreflang='en']").first.dispatch_event("click")
    browser.page.wait_for_url(f"{browser.base_url}runs/{RUN_A}/")
    assert browser.page.evaluate("document.documentElement.lang") == "en"
    _clean(browser)


def test_charts_and_language_switch_survive_instant_navigation(browser: Browser) -> None:
    """From the Chinese runs index to a run page by Material's instant navigation (no full
    load): its charts draw, and the language link still lands on the same page in English."""
    browser.open("zh/runs/")
    browser.page.evaluate("window.__sweeperMarker = 1")  # gone if the next page is a full load
    browser.page.locator(f"article a[href*='{RUN_B}/']").first.click()
    browser.page.wait_for_url(f"**/zh/runs/{RUN_B}/")
    browser.wait_for_charts(at_least=6)
    assert browser.page.evaluate("window.__sweeperMarker") == 1, "the navigation was not instant"
    browser.page.locator("a[hreflang='en']").first.dispatch_event("click")
    browser.page.wait_for_url(f"{browser.base_url}runs/{RUN_B}/")
    assert browser.page.evaluate("document.documentElement.lang") == "en"
    browser.wait_for_charts()
    _clean(browser)


def test_a_script_in_a_trace_set_shows_as_text(browser: Browser) -> None:
    from tests.report.site_helpers import XSS

    for prefix in ("", "zh/"):
        browser.open(f"{prefix}runs/{RUN_XSS}/")
        assert XSS in browser.page.locator("article").inner_text()
        assert browser.page.evaluate("document.querySelectorAll('article script').length") == 0
    _clean(browser)


@pytest.mark.parametrize("prefix", ["", "zh/"])
def test_the_notebook_page_shows_its_outputs(browser: Browser, prefix: str) -> None:
    """Executed beforehand (Zensical has no mkdocs-jupyter): its table and its chart (an SVG
    file) show, and the home page links to it."""
    browser.open(prefix)
    browser.page.locator("article a[href*='notebooks/explore/']").first.click()
    browser.page.wait_for_url(f"**/{prefix}notebooks/explore/")
    chart = browser.page.locator("article img[src$='.svg']").first
    chart.wait_for()
    assert browser.page.wait_for_function(
        "img => img.complete && img.naturalWidth > 0", arg=chart.element_handle()
    )
    assert browser.page.locator("article table td").count() > 0
    _clean(browser)


def zensical_search(browser: Browser, query: str, where: str) -> list[str]:
    """Zensical's search dialog (in a shadow root, which playwright's locators enter): types
    ``query`` and waits for a result whose address starts with ``where`` (the index loads in a
    worker: an early "No results" is not its answer); returns the addresses listed, relative to
    the site, without the query."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    browser.page.locator(".md-search__button").first.click()
    browser.page.locator("dialog input[role='combobox']").fill(query)
    links = browser.page.locator("dialog ol[role='listbox'] a[role='option']")
    expected = links.and_(browser.page.locator(f"[href^='{browser.base_url}{where}']"))
    with contextlib.suppress(PlaywrightTimeout):  # the caller's assertion names what was listed
        expected.first.wait_for(timeout=DRAW_TIMEOUT_MS)
    hrefs = links.evaluate_all("links => links.map(a => a.href)")
    return [href.split("?")[0].split("#")[0].removeprefix(browser.base_url) for href in hrefs]


# Per language: (query, where a page it finds must be). 兑换率 ends the heading
# 吞吐与延迟的兑换率 of every Chinese report page (a word inside a sentence: found only if
# Chinese is segmented); 预填充 is in the English page about the site (docs/site.md, on Chinese
# search); the English words are in every report page of both languages.
SEARCHES = {
    "": [("throughput", "runs/"), ("预填充", "site/")],
    "zh/": [("TTFT", "zh/runs/"), ("兑换率", "zh/runs/")],
}


@pytest.mark.parametrize(
    ("prefix", "query", "page"),
    [(prefix, query, page) for prefix, cases in SEARCHES.items() for query, page in cases],
)
def test_search_finds_english_and_chinese_words_in_each_language(
    browser: Browser, prefix: str, query: str, page: str
) -> None:
    """Each language has its own index: a query finds pages of that language only."""
    browser.open(prefix)
    found = zensical_search(browser, query, page)
    assert any(href.startswith(page) for href in found), found
    if prefix:
        assert all(href.startswith(prefix) for href in found), found
    else:
        assert not any(href.startswith("zh/") for href in found), found
    _clean(browser)
