"""``mkdocs build --strict`` from trace sets: the built HTML, its assets, offline, escaped."""

from __future__ import annotations

import html
import re
from pathlib import Path

import nbformat
import pytest
from nbconvert.preprocessors import ExecutePreprocessor

from sweeper.report.pagecheck import page_defects
from sweeper.testing.factories import SyntheticLevel, write_synthetic_run
from tests.report.site_helpers import (
    BROKEN,
    RUN_A,
    RUN_B,
    RUN_XSS,
    XSS,
    copy_project_site,
    mkdocs_build,
    write_broken_trace_set,
)

pytestmark = pytest.mark.slow

NOTEBOOK = Path(__file__).resolve().parents[2] / "docs" / "notebooks" / "explore.ipynb"


def test_every_run_page_is_built_in_both_languages(built_site) -> None:
    for run in (RUN_A, RUN_B, RUN_XSS):
        assert (built_site.site_dir / "runs" / run / "index.html").exists()
        assert (built_site.site_dir / "zh" / "runs" / run / "index.html").exists()
    zh = (built_site.site_dir / "zh" / "runs" / RUN_A / "index.html").read_text()
    assert '<html lang="zh"' in zh and "结论" in zh


def test_charts_and_their_script_are_served_by_the_site(built_site) -> None:
    page = (built_site.site_dir / "runs" / RUN_A / "index.html").read_text()
    assert page.count('class="sweeper-chart"') == 7
    for asset in ("vega-bundle.js", "sweeper-charts.js", "sweeper.css"):
        assert (built_site.site_dir / "assets" / "sweeper" / asset).exists()
        assert f"assets/sweeper/{asset}" in page
    bundle = (built_site.site_dir / "assets" / "sweeper" / "vega-bundle.js").read_text()
    assert bundle.startswith("(function () {") and "window.vegaEmbed=" in bundle


def test_nothing_is_loaded_from_another_host(built_site) -> None:
    for path in built_site.site_dir.rglob("*.html"):
        text = path.read_text()
        for url in re.findall(
            r'<(?:script|link|img|iframe)[^>]+(?:src|href)="(https?://[^"]+)"', text
        ):
            assert url.startswith(built_site.base_url), f"{path}: loads {url}"
        assert "fonts.googleapis.com" not in text, path


def test_trace_set_text_is_shown_never_run(built_site) -> None:
    for path in (
        built_site.site_dir / "runs" / RUN_XSS / "index.html",
        built_site.site_dir / "zh" / "runs" / RUN_XSS / "index.html",
    ):
        text = path.read_text()
        assert XSS not in text
        assert (
            "&#60;script&#62;alert&#40;1&#41;&#60;/script&#62;" in text
            or "&lt;script&gt;alert(1)&lt;/script&gt;" in text
        )
        assert 'href="javascript' not in text


def test_build_log_has_no_warnings(built_site) -> None:
    assert not re.findall(r"^WARNING +-.*$", built_site.log, flags=re.MULTILINE)
    assert "could not be computed" not in built_site.log


def test_notebook_runs_from_top_to_bottom(tmp_path: Path) -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    ExecutePreprocessor(timeout=300, kernel_name="python3").preprocess(
        notebook, {"metadata": {"path": str(tmp_path)}}
    )
    outputs = [
        o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])
    ]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("image/svg+xml" in o.get("data", {}) for o in outputs), (
        "the chart was not drawn as SVG"
    )


def test_notebook_page_is_a_rendered_page_in_both_languages(built_site) -> None:
    for prefix in ("", "zh/"):
        page = built_site.site_dir / prefix / "notebooks" / "explore" / "index.html"
        text = page.read_text()
        assert "<svg" in text and "require.js" not in text


def test_a_strict_build_fails_on_a_trace_set_left_out_and_names_it(tmp_path: Path) -> None:
    traces = tmp_path / "runs-here"  # not traces/ beside mkdocs.yml: the notebook reads that one
    write_synthetic_run(traces, "fine", [SyntheticLevel(1, 30, 10)], output_len=16)
    write_broken_trace_set(traces)
    config = copy_project_site(tmp_path)
    strict = mkdocs_build(config, tmp_path / "strict", traces, "http://127.0.0.1/")
    assert strict.returncode != 0
    assert f"{BROKEN}: left out of the site" in strict.stdout + strict.stderr
    # Without --strict the other runs publish and the index names the folder left out.
    site_dir = tmp_path / "site"
    loose = mkdocs_build(config, site_dir, traces, "http://127.0.0.1/", strict=False)
    assert loose.returncode == 0, loose.stderr
    assert (site_dir / "runs" / "fine" / "index.html").exists()
    assert BROKEN in html.unescape((site_dir / "runs" / "index.html").read_text())


def test_a_missing_traces_folder_fails_a_strict_build(tmp_path: Path) -> None:
    config = copy_project_site(tmp_path)
    result = mkdocs_build(config, tmp_path / "site", tmp_path / "tarces", "http://127.0.0.1/")
    assert result.returncode != 0
    assert "does not exist" in result.stdout + result.stderr


def test_every_generated_page_passes_the_page_check(built_site) -> None:
    """The synthetic runs (a label holding <script>, a model name holding Markdown) and the
    samples, in both languages."""
    defects = {}
    for lang_root in (built_site.site_dir, built_site.site_dir / "zh"):
        for top in ("runs", "compare"):
            for path in sorted((lang_root / top).rglob("*.html")):
                found = page_defects(path.read_text(encoding="utf-8"))
                if found:
                    defects[str(path.relative_to(built_site.site_dir))] = found
    assert defects == {}


def test_a_study_is_a_page_in_both_languages_listed_and_linked(built_site) -> None:
    from tests.report.site_helpers import STUDY, STUDY_RUNS

    for prefix, heading in (("", "Study study-demo"), ("zh/", "对比实验 study-demo")):
        page = (built_site.site_dir / prefix / "runs" / STUDY / "index.html").read_text()
        assert heading in page and page.count('class="sweeper-chart"') == 2
        assert page_defects(page) == [], prefix
        index = (built_site.site_dir / prefix / "runs" / "index.html").read_text()
        assert f'href="{STUDY}/"' in index
        for run_id in STUDY_RUNS.values():
            assert f'href="../{run_id}/"' in page
            member = (built_site.site_dir / prefix / "runs" / run_id / "index.html").read_text()
            assert f'href="../{STUDY}/"' in member


def _article_links(page: Path) -> list[str]:
    """The relative links of a built page's article (the theme's own links left out)."""
    article = page.read_text().split('<article class="md-content__inner', 1)[1]
    return re.findall(r'href="([^"#:]+)"', article.split("</article>")[0])


def test_a_site_without_directory_urls_links_every_generated_page_as_a_file(
    tmp_path: Path, readable_traces: Path
) -> None:
    """``use_directory_urls: false`` (a site opened from disk, or served without directory
    indexes): the runs tables' links, which are HTML, must name ``index.html`` as MkDocs'
    own links do."""
    config = copy_project_site(tmp_path)
    config.write_text(config.read_text() + "\nuse_directory_urls: false\n")
    site_dir = tmp_path / "site"
    result = mkdocs_build(config, site_dir, readable_traces, "http://127.0.0.1:8000/")
    assert result.returncode == 0, result.stderr[-3000:]
    pages = [site_dir / prefix / "runs" / "index.html" for prefix in ("", "zh/")] + sorted(
        site_dir.glob("**/runs/groups/*/index.html")
    )
    assert len(pages) > 2  # both indexes and a group page per language at least
    run_pages = {p.parent.name for p in site_dir.glob("runs/*/index.html")} - {"groups"}
    for page in pages:
        links = _article_links(page)
        linked = {link.split("/")[0] for link in links if link.endswith("/index.html")}
        if page.parent.name == "runs":
            assert run_pages <= linked, page  # every run, from the index of each language
        for link in links:
            assert not link.endswith("/"), f"{page} links {link}: a folder, not a page"
            assert (page.parent / link).resolve().is_file(), f"{page} links {link}"


def test_every_link_on_the_runs_index_leads_to_a_built_page(built_site) -> None:
    for prefix in ("", "zh/"):
        folder = built_site.site_dir / prefix / "runs"
        index = (folder / "index.html").read_text()
        article = index.split('<article class="md-content__inner', 1)[1].split("</article>")[0]
        # A Markdown link inside a raw HTML block is shown as text: none may be left.
        assert not re.search(r"\]\([^)]*\.md\)", article), prefix
        group_links = re.findall(r'href="(groups/[^"#]+/)"', article)
        assert group_links, prefix  # each group's "this group alone"
        links = re.findall(r'href="([^"#:]+)"', article)
        assert len(links) > len(group_links)
        for link in links:
            target = (folder / link).resolve()
            target = target / "index.html" if link.endswith("/") else target
            assert target.is_file(), f"{prefix}runs/index.html links {link}"
