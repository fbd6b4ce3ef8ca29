"""Report pages, the index and comparisons, as Markdown: content, languages, escaping, layout."""

from __future__ import annotations

import dataclasses
import html
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from sweeper.cli import cli
from sweeper.errors import SweeperError
from sweeper.report import site
from sweeper.report.markup import chart_html, esc
from sweeper.report.pages import RunReport, render_run_page
from sweeper.report.run_report import collect_run
from sweeper.store import TraceSet, discover_trace_sets, load_trace_set
from tests.report.site_helpers import (
    BROKEN,
    MARKDOWN_MODEL,
    RUN_A,
    RUN_B,
    RUN_XSS,
    XSS,
    page_specs,
)


@pytest.fixture(scope="module")
def run_a(site_traces: Path) -> RunReport:
    return collect_run(load_trace_set(site_traces / RUN_A))


@pytest.fixture(scope="module")
def pages(site_traces: Path) -> dict[str, str]:
    return site.generate_pages(site_traces)


def _specs(markdown: str) -> list[dict]:
    return page_specs(markdown)


def test_layout_has_each_run_index_and_comparison_in_both_languages(pages) -> None:
    for lang_suffix in ("", ".zh"):
        for run in (RUN_A, RUN_B, RUN_XSS):
            assert f"runs/{run}/index{lang_suffix}.md" in pages
        assert f"runs/index{lang_suffix}.md" in pages
    # synthetic-a and -b share the model "tiny" (en + zh); sample runs in traces/ may add others.
    compare = [p for p in pages if p.startswith("compare/tiny-")]
    assert len(compare) == 2
    assert site.generated_nav(pages)[0] == "runs/index.md"
    assert not any(p.endswith(".zh.md") for p in site.generated_nav(pages))


def test_run_page_has_every_chart_with_a_complete_spec(run_a) -> None:
    page = render_run_page(run_a, "en")
    specs = _specs(page)
    # throughput-latency, scaling, marginal gain, ITL split, E2EL, KV occupancy (capacity known), timeline
    assert len(specs) == 7
    assert all(s["$schema"].startswith("https://vega.github.io/schema/vega-lite/v6") for s in specs)
    assert "Figure 7" in page and "Measured results" in page and "How it was recorded" in page


def test_sections_resting_on_findings_are_left_out_when_findings_are_missing(run_a) -> None:
    bare = RunReport(ts=run_a.ts, levels=run_a.levels, requests=run_a.requests, findings={})
    page = render_run_page(bare, "en")
    for heading in (
        "Cause of the tail",
        "Memory headroom",
        "Choosing a level by service level",
        "What to change next",
    ):
        assert heading not in page
    assert "Recommended operating point" not in page
    assert "sweeper-finding" not in page
    # what the measurements show is still there
    assert len(_specs(page)) == 7 and "Measured results" in page


def test_findings_are_written_in_the_page_language(run_a) -> None:
    assert run_a.findings, run_a.findings_errors
    knee = run_a.findings["knee"]
    assert esc(knee.text["en"]) in render_run_page(run_a, "en")
    assert esc(knee.text["zh"]) in render_run_page(run_a, "zh")


def test_chinese_page_uses_the_catalog_and_chinese_dates(run_a) -> None:
    page = render_run_page(run_a, "zh")
    assert "## 结论" in page and "完整测量结果" in page
    assert "2026年11月29日" in page
    assert "Measured results" not in page
    labels = json.dumps(_specs(page), ensure_ascii=False)
    assert "输出吞吐" in labels


def test_everything_from_a_trace_set_is_escaped(pages) -> None:
    for path in (f"runs/{RUN_XSS}/index.md", f"runs/{RUN_XSS}/index.zh.md", "runs/index.md"):
        text = pages[path]
        assert XSS not in text
        assert "javascript:" not in text and "](javascript" not in text
    assert esc(MARKDOWN_MODEL + XSS) in pages[f"runs/{RUN_XSS}/index.md"]
    # The front-matter title (used unescaped by MkDocs' templates) is HTML-escaped too.
    front = pages[f"runs/{RUN_XSS}/index.md"].split("---")[1]
    assert "<" not in front


def test_esc_neutralises_html_and_markdown() -> None:
    assert esc("<b>[x](y)</b> *a* `c` |") == (
        "&#60;b&#62;&#91;x&#93;&#40;y&#41;&#60;/b&#62; &#42;a&#42; &#96;c&#96; &#124;"
    )


def test_chart_html_keeps_the_spec_in_an_escaped_attribute() -> None:
    spec = {"$schema": "x", "title": "\"quoted\" <tag> & 'single'"}
    div = chart_html(spec)
    assert div.startswith('<div class="sweeper-chart" data-spec="') and "<tag>" not in div
    assert json.loads(html.unescape(re.search(r'data-spec="([^"]*)"', div).group(1))) == spec


def test_broken_trace_set_gets_an_error_entry_and_the_others_publish(pages) -> None:
    index = pages["runs/index.md"]
    assert "Trace sets that could not be read" in index
    assert (
        esc(BROKEN) in index
        and esc(f"{BROKEN}/manifest.json") in index
        and "not valid JSON" in index
    )
    for run in (RUN_A, RUN_B, RUN_XSS):
        assert f'<a data-sweeper-run href="{run}/">' in index
    assert "无法读取的 trace set" in pages["runs/index.zh.md"]


def test_comparison_page_overlays_the_runs_of_one_model(pages) -> None:
    path = next(p for p in pages if p.startswith("compare/tiny-") and not p.endswith(".zh.md"))
    text = pages[path]
    assert RUN_A in text and RUN_B in text
    specs = _specs(text)
    assert len(specs) == 2
    runs = {row["run"] for s in specs for rows in s["datasets"].values() for row in rows}
    assert {RUN_A, RUN_B} <= runs and RUN_XSS not in runs  # the XSS run has a model of its own


def test_write_pages_touches_only_changed_files_and_removes_stale_ones(
    tmp_path: Path, pages
) -> None:
    docs = tmp_path / "docs"
    assert site.write_pages(pages, docs) == len(pages)
    before = {p: p.stat().st_mtime_ns for p in docs.rglob("*") if p.is_file()}
    assert site.write_pages(pages, docs) == 0
    # Nothing at all is rewritten (the sentinel included): `mkdocs serve` would rebuild forever.
    assert {p: p.stat().st_mtime_ns for p in docs.rglob("*") if p.is_file()} == before
    stale = docs / "runs" / "gone" / "index.md"
    stale.parent.mkdir()
    stale.write_text("old")
    assert site.write_pages(pages, docs) == 1
    assert not stale.parent.exists()


def test_write_pages_refuses_a_folder_sweeper_did_not_create(tmp_path: Path, pages) -> None:
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "mine.md").write_text("hand-written")
    with pytest.raises(SweeperError, match="was not generated by sweeper"):
        site.write_pages(pages, tmp_path)
    assert (tmp_path / "runs" / "mine.md").read_text() == "hand-written"


def test_sweeper_build_writes_the_same_markdown(tmp_path: Path, site_traces: Path, pages) -> None:
    result = CliRunner().invoke(
        cli, ["build", "--traces", str(site_traces), "--out", str(tmp_path)]
    )
    # The broken folder is left out: the pages are written (the index names it), exit 1.
    assert result.exit_code == 1, result.output
    assert f"wrote {len(pages)} pages" in result.output
    assert f"{BROKEN}: left out of the site" in result.output
    for relative, text in pages.items():
        assert (tmp_path / relative).read_text(encoding="utf-8") == text


_LINK = re.compile(r'href="([^"#:]+)"|\]\(([^)\s:#]+\.md)')


def test_sweeper_build_links_files_lead_to_the_markdown_files_of_each_language(
    tmp_path: Path, site_traces: Path, pages
) -> None:
    (tmp_path / "index.md").write_text("# Home\n")  # the docs folder's own page, English only
    result = CliRunner().invoke(
        cli, ["build", "--traces", str(site_traces), "--out", str(tmp_path), "--links", "files"]
    )
    assert f"wrote {len(pages)} pages" in result.output, result.output
    checked = 0
    for relative in pages:
        page = tmp_path / relative
        for match in _LINK.finditer(page.read_text(encoding="utf-8")):
            link = match.group(1) or match.group(2)
            target = (page.parent / site.unquote(link)).resolve()
            assert target.is_file(), f"{relative} links {link}"
            translated = relative.endswith(".zh.md")
            stem = target.name.removesuffix(".md").removesuffix(".zh")
            zh_exists = (target.parent / f"{stem}.zh.md").is_file()
            assert target.name.endswith(".zh.md") == (translated and zh_exists), (relative, link)
            checked += 1
    assert checked
    # Each language's runs index links every run page of that language.
    runs = {p.split("/")[1] for p in pages if p.count("/") == 2 and p.startswith("runs/")}
    for name in ("index.md", "index.zh.md"):
        index = (tmp_path / "runs" / name).read_text(encoding="utf-8")
        for run in runs - {"groups"}:
            if (tmp_path / "runs" / run / "index.md").is_file():
                assert f'href="{site.quote(run)}/{name}"' in index or f"({run}/{name})" in index


def test_markdown_file_links_translate_only_to_pages_that_exist() -> None:
    pages = {
        "runs/index.md": '<a data-sweeper-run href="a%20b/">a b</a> [home](../index.md)',
        "runs/index.zh.md": '<a data-sweeper-run href="a%20b/">a b</a> [home](../index.md#top)'
        " [guide](../guide.md)",
        "runs/a b/index.md": "",
        "runs/a b/index.zh.md": "",
    }
    out = site.markdown_file_links(pages, ["index.md", "index.zh.md", "guide.md"])
    assert out["runs/index.md"] == (
        '<a data-sweeper-run href="a%20b/index.md">a b</a> [home](../index.md)'
    )
    assert out["runs/index.zh.md"] == (
        '<a data-sweeper-run href="a%20b/index.zh.md">a b</a> [home](../index.zh.md#top)'
        " [guide](../guide.md)"
    )


def test_sweeper_build_refuses_an_unknown_link_style(tmp_path: Path, site_traces: Path) -> None:
    result = CliRunner().invoke(
        cli, ["build", "--traces", str(site_traces), "--out", str(tmp_path), "--links", "md"]
    )
    assert result.exit_code == 2 and "'md' is not one of 'site', 'files'" in result.output
    assert not (tmp_path / "runs").exists()


def test_sweeper_build_error_is_one_line(tmp_path: Path, site_traces: Path) -> None:
    (tmp_path / "compare").mkdir()
    (tmp_path / "compare" / "x.md").write_text("mine")
    result = CliRunner().invoke(
        cli, ["build", "--traces", str(site_traces), "--out", str(tmp_path)]
    )
    assert result.exit_code == 1
    assert "Error:" in result.output and "Traceback" not in result.output


def test_every_page_word_has_a_chinese_translation() -> None:
    from babel.messages.extract import extract_from_file
    from babel.messages.pofile import read_po

    import sweeper

    package = Path(sweeper.__file__).parent
    keywords = {"tr": (2,), "N_": None, "trn": (2, 3), "tl": (1,)}
    found = set()
    for source in sorted((package / "report").glob("*.py")):
        for _, message, _, _ in extract_from_file("python", source, keywords=keywords):
            found.add(message)
    with (package / "locale" / "zh" / "LC_MESSAGES" / "pages.po").open("rb") as fh:
        catalog = read_po(fh)
    translated = {m.id for m in catalog if m.id and m.string}
    assert found, "no message extracted"
    assert found - translated == set(), "untranslated: run pybabel extract/update (sweeper/i18n.py)"


def test_pages_are_cached_on_disk_between_processes(tmp_path: Path, site_traces: Path) -> None:
    cache = tmp_path / "cache"
    site._CACHE.clear()  # earlier tests filled the in-process cache
    site._LAST.clear()
    first = site.generate_pages(site_traces, cache)
    readable = [p for p in discover_trace_sets(site_traces) if p.name != BROKEN]
    assert len(list(cache.glob("*.pickle"))) == len(readable)
    site._CACHE.clear()  # what a new process starts with
    site._LAST.clear()
    rendered = []
    original = site._render_entry
    site._render_entry = lambda folder: rendered.append(folder) or original(folder)  # type: ignore[assignment]
    try:
        second = site.generate_pages(site_traces, cache)
    finally:
        site._render_entry = original  # type: ignore[assignment]
    assert second == first
    assert [f.name for f in rendered] == [BROKEN]  # only the unreadable one is tried again


def test_recorded_warnings_say_on_a_chinese_page_that_they_are_english(run_a) -> None:
    """The manifest's warnings are the recorder's own English words: quoted as they are, and
    the Chinese page says so."""
    manifest = run_a.ts.manifest.model_copy(
        update={"warnings": ["the recorder read late at concurrency 4"]}
    )
    ts = run_a.ts
    warned = dataclasses.replace(
        run_a,
        ts=TraceSet(path=ts.path, manifest=manifest, requests=ts.requests, problems=ts.problems),
        chart_specs={},
    )
    zh, en = render_run_page(warned, "zh"), render_run_page(warned, "en")
    assert "### 警告" in zh and "- the recorder read late at concurrency 4" in zh
    assert "以下是录制端或导入工具记下的原文（英文）" in zh
    assert "### Warnings" in en and "in English" not in en


def test_sweeper_build_of_a_missing_traces_folder_is_an_error_and_keeps_the_pages(
    tmp_path: Path, readable_traces: Path
) -> None:
    out = tmp_path / "md"
    first = CliRunner().invoke(cli, ["build", "--traces", str(readable_traces), "--out", str(out)])
    assert first.exit_code == 0, first.output
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    result = CliRunner().invoke(
        cli, ["build", "--traces", str(tmp_path / "tarces"), "--out", str(out)]
    )
    assert result.exit_code == 1
    assert result.output.startswith("Error: traces folder") and "does not exist" in result.output
    assert "wrote" not in result.output and "Traceback" not in result.output
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    a_file = tmp_path / "file"
    a_file.write_text("x")
    result = CliRunner().invoke(cli, ["build", "--traces", str(a_file), "--out", str(out)])
    assert result.exit_code != 0 and "Traceback" not in result.output


def test_every_folder_left_out_is_a_problem_of_the_build(site_traces: Path) -> None:
    problems = [p for e in site.load_entries(site_traces) for p in e.problems()]
    assert len(problems) == 1 and f"{BROKEN}: left out of the site" in problems[0]
