"""Each page's HTML kept between builds (sweeper.report.html_cache): a real ``mkdocs build
--strict`` of a small Material project, run again with the HTML kept, and after changes that
must show (mkdocs.yml, an override template, a neighbouring page's title)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from mkdocs.theme import Theme

from sweeper.report import html_cache
from sweeper.report.mkdocs_plugin import HTML_CACHE

CONFIG = """\
site_name: {name}
theme:
  name: material
  custom_dir: overrides
plugins:
  - sweeper:
      enabled: false
"""
OVERRIDE = (
    '{% extends "base.html" %}\n{% block footer %}<p class="mark">{{ mark }}</p>{% endblock %}\n'
)
COUNTS = re.compile(r"sweeper: HTML of (\d+) pages from the cache, (\d+) rendered by the theme")


def _project(root: Path, name: str = "html cache") -> Path:
    docs = root / "docs"
    docs.mkdir(parents=True)
    (root / "overrides").mkdir()
    (root / "overrides" / "main.html").write_text(OVERRIDE.replace("{{ mark }}", "first"))
    (root / "mkdocs.yml").write_text(CONFIG.format(name=name))
    (docs / "index.md").write_text("# Home\n\nSee [the other page](other.md).\n")
    (docs / "other.md").write_text("# Other\n\n## Part\n\nText.\n")
    (docs / "third.md").write_text("# Third\n\nMore text.\n")
    return root


def _build(root: Path, snapshot: str = "site") -> tuple[str, Path]:
    """One build into ``site/`` (the site folder is in the config, so in every key), copied to
    ``snapshot/`` to be compared with later builds."""
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(root / "mkdocs.yml"),
         "-d", str(root / "site")],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "SOURCE_DATE_EPOCH": "1800000000", "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    if snapshot == "site":
        return result.stderr, root / "site"
    shutil.copytree(root / "site", root / snapshot)
    return result.stderr, root / snapshot


def _counts(log: str) -> tuple[int, int]:
    found = COUNTS.findall(log)
    assert found, log[-2000:]
    hits, rendered = found[-1]
    return int(hits), int(rendered)


def _html(site: Path) -> dict[str, bytes]:
    return {str(p.relative_to(site)): p.read_bytes() for p in sorted(site.rglob("*.html"))}


def test_a_rebuild_takes_every_page_from_the_cache_and_writes_the_same_site(
    tmp_path: Path,
) -> None:
    root = _project(tmp_path)
    log, site = _build(root, "cold")
    assert _counts(log) == (0, 3)
    assert len(list((root / HTML_CACHE).glob("*.html"))) == 3
    log, warm = _build(root, "warm")
    assert _counts(log) == (3, 0)
    shutil.rmtree(root / HTML_CACHE)
    log, fresh = _build(root, "fresh")
    assert _counts(log) == (0, 3)
    assert _html(site) == _html(warm) == _html(fresh)
    assert len(_html(site)) == 4  # the three pages and 404.html (never kept)


def test_what_every_page_shows_changed_renders_every_page_again(tmp_path: Path) -> None:
    root = _project(tmp_path)
    _build(root)
    (root / "mkdocs.yml").write_text(CONFIG.format(name="renamed site"))
    log, site = _build(root)
    assert _counts(log) == (0, 3)
    assert "renamed site" in (site / "other" / "index.html").read_text()
    (root / "overrides" / "main.html").write_text(OVERRIDE.replace("{{ mark }}", "second"))
    log, site = _build(root)
    assert _counts(log) == (0, 3)
    assert '<p class="mark">second</p>' in (site / "third" / "index.html").read_text()


def test_a_page_retitled_renders_the_pages_that_show_its_title(tmp_path: Path) -> None:
    root = _project(tmp_path)
    _build(root)
    (root / "docs" / "third.md").write_text("# Renamed third\n\nMore text.\n")
    log, site = _build(root)
    # Every page's navigation names it: all three are rendered again, and show the new title.
    assert _counts(log) == (0, 3)
    assert "Renamed third" in (site / "index.html").read_text()
    (root / "docs" / "third.md").write_text("# Renamed third\n\nOther text.\n")
    log, site = _build(root)
    assert _counts(log) == (2, 1)  # the content of one page: that page alone
    assert "Other text." in (site / "third" / "index.html").read_text()
    shutil.rmtree(root / HTML_CACHE)
    _, fresh = _build(root, "fresh")
    assert _html(site) == _html(fresh)


def test_a_torn_or_foreign_file_is_rendered_again(tmp_path: Path) -> None:
    root = _project(tmp_path)
    _build(root)
    kept = sorted((root / HTML_CACHE).glob("*.html"))
    kept[0].write_bytes(kept[0].read_bytes()[:40])
    kept[1].write_text("<p>not sweeper's</p>")
    log, site = _build(root)
    assert _counts(log) == (1, 2)
    shutil.rmtree(root / HTML_CACHE)
    _, fresh = _build(root, "fresh")
    assert _html(site) == _html(fresh)


def test_the_sitemap_only_names_are_left_out_for_material_and_kept_when_a_page_template_reads_them(
    tmp_path: Path,
) -> None:
    _, left_out = html_cache.theme_signature(Theme(name="material"))
    assert left_out == {"pages", "build_date_utc", "update_date"}
    overrides = tmp_path / "overrides"
    overrides.mkdir()
    (overrides / "main.html").write_text(
        '{% extends "base.html" %}{% block footer %}{{ build_date_utc }}{% endblock %}'
    )
    salt, left_out = html_cache.theme_signature(Theme(name="material", custom_dir=str(overrides)))
    assert left_out == {"pages", "update_date"}
    (overrides / "main.html").write_text("{{ page.title }}")
    assert html_cache.theme_signature(Theme(name="material", custom_dir=str(overrides)))[0] != salt


# A build with a plugin of the test's own (none is installed under an entry point): it adds
# what mark.txt holds to every page's HTML after the render.
MARKED_BUILD = """
import logging, sys
from pathlib import Path
from mkdocs.commands.build import build
from mkdocs.config import load_config
from mkdocs.plugins import BasePlugin

class Marker(BasePlugin):
    def on_page_content(self, html, page, config, files):
        return html + Path(sys.argv[1]).with_name("mark.txt").read_text()

logging.basicConfig(level=logging.INFO)
config = load_config(sys.argv[1], site_dir=sys.argv[2])
config.plugins["marker"] = Marker()
config.plugins.on_startup(command="build", dirty=False)
build(config)
"""


def _marked_build(root: Path) -> tuple[str, Path]:
    result = subprocess.run(
        [sys.executable, "-c", MARKED_BUILD, str(root / "mkdocs.yml"), str(root / "site")],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "SOURCE_DATE_EPOCH": "1800000000", "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stderr, root / "site"


def test_html_changed_after_its_render_is_not_answered_from_the_cache(tmp_path: Path) -> None:
    """A page is keyed by the name of its render while it holds that render's HTML; a plugin
    that adds to the HTML afterwards (the render itself from the render cache) makes the page
    keyed by its HTML again, and what the plugin added shows."""
    root = _project(tmp_path)
    (root / "mark.txt").write_text('<p class="marked">one</p>')
    log, site = _marked_build(root)
    assert _counts(log) == (0, 3)
    (root / "mark.txt").write_text('<p class="marked">two</p>')
    log, site = _marked_build(root)
    assert "3 pages from the render cache, 0 rendered" in log
    assert _counts(log) == (0, 3)
    assert '<p class="marked">two</p>' in (site / "other" / "index.html").read_text()
    log, _ = _marked_build(root)
    assert _counts(log) == (3, 0)


def test_a_page_is_named_by_its_render_while_it_holds_what_the_render_made() -> None:
    from types import SimpleNamespace

    from sweeper.report import render_cache

    page = SimpleNamespace(markdown="# A\n", content="<h1>A</h1>")
    render_cache._name_render(page, "key", [["b.md", "b/"]])
    name = render_cache.rendered_as(page)
    assert name is not None and len(name) == 64
    other = SimpleNamespace(markdown=page.markdown, content=page.content)
    render_cache._name_render(other, "key", [["b.md", "../b/"]])
    assert render_cache.rendered_as(other) not in (None, name)  # its links resolved otherwise
    page.content = "<h1>A</h1><p>added</p>"
    assert render_cache.rendered_as(page) is None
