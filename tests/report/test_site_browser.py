"""The built site in headless Chromium (Debian's, driven by playwright; no browser download):
every chart draws, the language switch lands on the same page, nothing leaves localhost, no
console errors, also after Material's instant navigation."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from sweeper.store import discover_trace_sets
from tests.report.site_helpers import BROKEN, RUN_A, RUN_B, RUN_XSS, STUDY, STUDY_RUNS, XSS

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = Path(os.environ.get("SWEEPER_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
DRAW_TIMEOUT_MS = 30_000
SCREENSHOTS = (
    Path(os.environ.get("SWEEPER_SCREENSHOTS", ""))
    if os.environ.get("SWEEPER_SCREENSHOTS")
    else None
)


class Browser:
    """One page with every request routed (anything not on the test server is aborted and
    recorded) and every console error and page error recorded."""

    def __init__(self, page, base_url: str):
        self.page = page
        self.base_url = base_url
        self.host = urlsplit(base_url).netloc
        self.foreign: list[str] = []
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        page.route("**/*", self._route)
        page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("dialog", self._dialog)

    def _route(self, route) -> None:
        url = urlsplit(route.request.url)
        if url.scheme in ("data", "blob") or url.netloc == self.host:
            route.continue_()
        else:
            self.foreign.append(route.request.url)
            route.abort()

    def _dialog(self, dialog) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def open(self, path: str) -> None:
        self.page.goto(self.base_url + path)
        self.wait_for_charts()

    def wait_for_charts(self, at_least: int = 0) -> None:
        """Wait until every chart on the page has drawn. After an instant navigation the address
        can change before the new content is in place, when there are no charts yet and "every
        chart has drawn" is vacuously true: ``at_least`` waits for the new page's charts."""
        self.page.wait_for_function(
            """(atLeast) => {
              const charts = [...document.querySelectorAll('div.sweeper-chart')];
              return charts.length >= atLeast &&
                charts.every(c => c.dataset.sweeperDrawn === 'done' && c.querySelector('svg'));
            }""",
            arg=at_least,
            timeout=DRAW_TIMEOUT_MS,
        )

    def chart_count(self) -> tuple[int, int]:
        return self.page.evaluate(
            """() => [document.querySelectorAll('div.sweeper-chart').length,
                      document.querySelectorAll('div.sweeper-chart svg.marks').length]"""
        )


@pytest.fixture(scope="module")
def chromium() -> Iterator[object]:
    if not CHROMIUM.exists():
        pytest.skip(
            f"no Chromium at {CHROMIUM}: apt-get install chromium (or set SWEEPER_CHROMIUM)"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


@pytest.fixture
def browser(chromium, built_site) -> Iterator[Browser]:
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    yield Browser(page, built_site.base_url)
    context.close()


def _clean(browser: Browser) -> None:
    assert browser.foreign == [], f"requests left localhost: {browser.foreign}"
    assert browser.errors == [], f"console errors: {browser.errors}"
    assert browser.dialogs == [], f"a script from a trace set ran: {browser.dialogs}"


@pytest.mark.parametrize("prefix", ["", "zh/"])
def test_every_chart_draws_on_a_run_page(browser: Browser, prefix: str) -> None:
    browser.open(f"{prefix}runs/{RUN_A}/")
    charts, drawn = browser.chart_count()
    assert charts == 7 and drawn == 7
    if SCREENSHOTS is not None:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        browser.page.screenshot(
            path=str(SCREENSHOTS / f"run-{prefix.strip('/') or 'en'}.png"), full_page=True
        )
    _clean(browser)


def test_every_run_of_the_site_draws(browser: Browser, site_traces: Path) -> None:
    """Every readable trace set (the synthetic ones and the samples in traces/) as a page."""
    runs = [p.name for p in discover_trace_sets(site_traces) if p.name != BROKEN]
    assert len(runs) >= 3
    for run in runs:
        browser.open(f"runs/{run}/")
        charts, drawn = browser.chart_count()
        assert charts >= 6 and drawn == charts, run
    _clean(browser)


def test_comparison_and_index_pages_draw(browser: Browser) -> None:
    browser.open("runs/")
    link = browser.page.locator("a[href*='compare/']").first
    link.click()
    browser.page.wait_for_url("**/compare/**")
    browser.wait_for_charts(at_least=2)
    charts, drawn = browser.chart_count()
    assert charts == 2 and drawn == 2
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
    browser.open("runs/")
    # The navigation lists the (model, GPU) groups, not every run: the runs are in the tables.
    assert browser.page.locator("nav a[href*='groups/']").count() >= 1
    assert browser.page.locator(f"nav a[href*='{RUN_B}']").count() == 0
    browser.page.evaluate("window.__sweeperMarker = 1")  # gone if the next page is a full load
    browser.page.locator(f"article a[href*='{RUN_B}/']").first.click()
    browser.page.wait_for_url(f"**/runs/{RUN_B}/")
    browser.wait_for_charts(at_least=6)
    assert browser.page.evaluate("window.__sweeperMarker") == 1, "the navigation was not instant"
    charts, drawn = browser.chart_count()
    assert charts == drawn and drawn >= 6
    # The header still holds the first page's language link; the switch must follow this page.
    browser.page.locator("a[hreflang='zh']").first.dispatch_event("click")
    browser.page.wait_for_url(f"**/zh/runs/{RUN_B}/")
    assert browser.page.evaluate("document.documentElement.lang") == "zh"
    browser.wait_for_charts()
    _clean(browser)


def test_a_script_in_a_trace_set_shows_as_text(browser: Browser) -> None:
    for prefix in ("", "zh/"):
        browser.open(f"{prefix}runs/{RUN_XSS}/")
        assert XSS in browser.page.locator("article").inner_text()
        assert browser.page.evaluate("document.querySelectorAll('article script').length") == 0
    _clean(browser)


def test_notebook_page_renders_offline(browser: Browser) -> None:
    browser.open("notebooks/explore/")
    assert browser.page.locator("svg").count() > 0
    _clean(browser)


RETYPE_WAIT_MS = 3000


def search(browser: Browser, query: str) -> list[str]:
    """Material's search box: the addresses of the results it lists for ``query``."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    browser.page.keyboard.press("s")  # Material's shortcut opens the search box
    box = browser.page.locator("input.md-search__input")
    items = browser.page.locator(".md-search-result__item a")
    # Material reads the box on keyup, on focus and when its index worker is ready, not on
    # `input`: a value set by fill() alone is seen only if one of those comes after it (on a
    # loaded CI machine none did, and the box stayed "type to start searching"). A key released
    # in the box, as a typist's last key is, makes it read the value. A query answered before the
    # index is in can be "no match": an empty answer is asked once more, after a wait.
    for attempt in range(2):
        if attempt:
            browser.page.wait_for_timeout(RETYPE_WAIT_MS)
        box.fill(query)
        box.press("End")
        try:
            browser.page.wait_for_function(
                r"""() => document.querySelectorAll('.md-search-result__item').length > 0 ||
                         /\d|没有|No matching/.test(
                           document.querySelector('.md-search-result__meta').innerText)""",
                timeout=DRAW_TIMEOUT_MS,
            )
        except PlaywrightTimeout:
            meta = browser.page.locator(".md-search-result__meta").inner_text()
            pytest.fail(f"search for {query!r} did not answer: {meta!r}")
        if items.count():
            break
    return items.evaluate_all("links => links.map(a => a.getAttribute('href'))")


def test_chinese_words_inside_a_sentence_are_found(browser: Browser) -> None:
    """Chinese has no spaces: without a segmenter (jieba, at build time) the index holds whole
    runs of characters and a word inside one is never found. 兑换率 ends the heading
    吞吐与延迟的兑换率 of every report page."""
    browser.open("zh/")
    found = search(browser, "兑换率")
    assert any("/zh/runs/" in href for href in found), found
    _clean(browser)


@pytest.mark.parametrize("prefix", ["", "zh/"])
def test_the_runs_index_filters_by_label(browser: Browser, prefix: str) -> None:
    """Typing keeps the rows holding every word; a click on a label chip filters by it."""
    browser.open(f"{prefix}runs/")
    rows = browser.page.locator("article table tbody tr")
    total = rows.count()
    assert total >= 4

    def shown() -> list[str]:
        return browser.page.evaluate(
            """() => [...document.querySelectorAll('article table tbody tr')]
                 .filter(r => r.style.display !== 'none')
                 .map(r => r.querySelector('td').innerText.trim())"""
        )

    browser.page.fill("input[data-sweeper-filter]", "config=chunked-prefill")
    assert shown() == ["small-vllm-cpu-chunked-prefill"]
    browser.page.fill("input[data-sweeper-filter]", "")
    assert len(shown()) == total
    browser.page.locator("td .sweeper-label[data-label='config=preemption']").first.click()
    assert browser.page.input_value("input[data-sweeper-filter]") == "config=preemption"
    assert shown() == ["small-vllm-cpu-preemption"]
    _clean(browser)


@pytest.mark.parametrize("prefix", ["", "zh/"])
def test_a_study_page_draws_its_charts_and_links_its_runs(browser: Browser, prefix: str) -> None:
    """A study (``<traces>/<id>/study.json``) is a page of the site in both languages: its two
    charts draw, it shows no None or nan, it links each member run and is linked from them."""
    from sweeper.report.pagecheck import page_defects

    browser.open(f"{prefix}runs/{STUDY}/")
    charts, drawn = browser.chart_count()
    assert charts == 2 and drawn == 2
    text = browser.page.locator("article").inner_text()
    assert "None" not in text and "nan" not in text.lower().replace("nanoseconds", "")
    assert ("核对建议" if prefix else "The advice checked") in text
    assert page_defects(browser.page.content()) == []
    for run_id in STUDY_RUNS.values():
        assert browser.page.locator(f"article a[href*='{run_id}']").count() >= 1
    browser.open(f"{prefix}runs/{STUDY_RUNS['--max-num-seqs 8']}/")
    browser.page.locator(f"article a[href*='{STUDY}/']").first.click()
    browser.page.wait_for_url(f"**/{prefix}runs/{STUDY}/")
    browser.wait_for_charts(at_least=2)
    _clean(browser)


@pytest.mark.parametrize("prefix", ["", "zh/"])
def test_the_runs_index_sorts_and_filters_by_column(browser: Browser, prefix: str) -> None:
    """A menu keeps the rows of one model (a group left with none is hidden with its heading);
    a click on Peak tok/s sorts every group's rows by it, a second click the other way."""
    browser.open(f"{prefix}runs/")
    rows = browser.page.locator("article table tbody tr")
    total = rows.count()

    def visible(column: int) -> list[str]:
        return browser.page.evaluate(
            """(column) => [...document.querySelectorAll('article table tbody tr')]
                 .filter(r => r.style.display !== 'none')
                 .map(r => r.children[column].innerText.trim())""",
            column,
        )

    browser.page.select_option("select[data-sweeper-facet='model']", "tiny")
    assert visible(1) and set(visible(1)) == {"tiny"} and len(visible(1)) < total
    hidden_groups = browser.page.evaluate(
        "[...document.querySelectorAll('h2.sweeper-group')].filter(h => h.style.display === 'none').length"
    )
    assert hidden_groups >= 1
    browser.page.select_option("select[data-sweeper-facet='model']", "")
    assert len(visible(0)) == total

    def peaks() -> list[list[float]]:
        return browser.page.evaluate(
            """() => [...document.querySelectorAll('article table')]
                 .filter(t => t.querySelector('[data-sweeper-sort]'))
                 .map(t => [...t.querySelectorAll('tbody tr')].map(r =>
                      parseFloat(r.children[5].querySelector('[data-sort]').dataset.sort)))"""
        )

    browser.page.locator("[data-sweeper-sort='peak']").first.click()
    assert all(group == sorted(group, reverse=True) for group in peaks())
    browser.page.locator("[data-sweeper-sort='peak']").first.click()
    assert all(group == sorted(group) for group in peaks())

    def dates() -> list[list[float]]:  # seconds since the epoch (an ISO date sorted as its year)
        return browser.page.evaluate(
            """() => [...document.querySelectorAll('article table')]
                 .filter(t => t.querySelector('[data-sweeper-sort]'))
                 .map(t => [...t.querySelectorAll('tbody tr')].map(r =>
                      Number(r.children[4].querySelector('[data-sort]').dataset.sort)))"""
        )

    assert any(len(set(group)) > 1 for group in dates())
    for _ in range(2):  # both directions, whichever the first click chooses
        browser.page.locator("[data-sweeper-sort='date']").first.click()
        groups = dates()
        assert all(not any(map(math.isnan, g)) for g in groups)
        assert all(g == sorted(g) for g in groups) or all(
            g == sorted(g, reverse=True) for g in groups
        )
    _clean(browser)
