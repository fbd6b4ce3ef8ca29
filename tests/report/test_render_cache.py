"""Each page's Markdown render kept between builds (sweeper.report.render_cache): a real
``mkdocs build --strict`` of a small project, run again with the renders kept, and after
changes that must show (a page edited, an anchor renamed, a page removed)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from sweeper.report.mkdocs_plugin import RENDER_CACHE

CONFIG = """\
site_name: render cache
plugins:
  - sweeper:
      enabled: false
validation:
  links:
    not_found: warn
    anchors: warn
markdown_extensions:
  - toc:
      permalink: true
  - footnotes
"""
COUNTS = re.compile(r"sweeper: (\d+) pages from the render cache, (\d+) rendered")


def _project(root: Path) -> Path:
    docs = root / "docs"
    docs.mkdir(parents=True)
    (root / "mkdocs.yml").write_text(CONFIG)
    (docs / "index.md").write_text(
        "# Home\n\nSee [the part](other.md#part), [itself](#home) and a note[^1].\n\n"
        "[^1]: A footnote.\n\n![chart](chart.svg)\n"
    )
    (docs / "other.md").write_text("# Other\n\n## Part\n\nText of the part.\n")
    (docs / "chart.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg"/>')
    return root


def _build(root: Path, site: str = "site") -> tuple[subprocess.CompletedProcess[str], Path]:
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(root / "mkdocs.yml"),
         "-d", str(root / site)],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "SOURCE_DATE_EPOCH": "1800000000"},  # the pages' build date
    )  # fmt: skip
    return result, root / site


def _counts(log: str) -> tuple[int, int]:
    found = COUNTS.findall(log)
    assert found, log[-2000:]
    hits, rendered = found[-1]
    return int(hits), int(rendered)


def _pages(site: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(site)): p.read_bytes()
        for p in sorted(site.rglob("*"))
        if p.is_file() and p.suffix in {".html", ".json"} and "sitemap" not in p.name
    }


def test_a_rebuild_takes_every_page_from_the_cache_and_writes_the_same_site(
    tmp_path: Path,
) -> None:
    root = _project(tmp_path)
    first, site = _build(root)
    assert first.returncode == 0, first.stderr
    assert _counts(first.stderr) == (0, 2)
    assert len(list((root / RENDER_CACHE).glob("*.render"))) == 2
    first_format = root / RENDER_CACHE / f"{'0' * 64}.json"  # a page of the first format
    first_format.write_text('{"format": 1, "content": "<p>old</p>"}')
    again, warm = _build(root, "site-warm")
    assert again.returncode == 0, again.stderr
    assert _counts(again.stderr) == (2, 0)
    assert _pages(warm) == _pages(site) and len(_pages(site)) >= 3
    assert not first_format.exists()
    # A page edited is rendered again; the other is not, and the old render is removed.
    other = root / "docs" / "other.md"
    other.write_text(other.read_text() + "\nMore text.\n")
    edited, site = _build(root)
    assert edited.returncode == 0, edited.stderr
    assert _counts(edited.stderr) == (1, 1)
    assert "More text." in (site / "other" / "index.html").read_text()
    assert len(list((root / RENDER_CACHE).glob("*.render"))) == 2


def test_an_anchor_renamed_under_a_kept_page_still_fails_the_strict_build(
    tmp_path: Path,
) -> None:
    root = _project(tmp_path)
    assert _build(root)[0].returncode == 0
    (root / "docs" / "other.md").write_text("# Other\n\n## Renamed\n\nText.\n")
    result, _ = _build(root)
    assert _counts(result.stderr) == (1, 1)  # index.md came from the cache
    assert result.returncode == 1
    assert "does not contain an anchor '#part'" in result.stderr


def test_a_link_to_a_page_that_is_gone_renders_the_page_again_and_warns_once(
    tmp_path: Path,
) -> None:
    root = _project(tmp_path)
    assert _build(root)[0].returncode == 0
    (root / "docs" / "other.md").unlink()
    result, _ = _build(root)
    assert _counts(result.stderr) == (0, 1)  # its link resolves otherwise: rendered again
    assert result.returncode == 1
    assert result.stderr.count("'other.md#part'") == 1, result.stderr


def test_a_page_that_warned_is_rendered_on_every_build(tmp_path: Path) -> None:
    root = _project(tmp_path)
    index = root / "docs" / "index.md"
    index.write_text(index.read_text() + "\nAnd [a lost page](lost.md).\n")
    result, _site = _build(root)
    assert result.returncode == 1
    assert result.stderr.count("'lost.md'") == 1, result.stderr
    assert _counts(result.stderr) == (0, 2)
    result, _site = _build(root)
    assert result.returncode == 1 and result.stderr.count("'lost.md'") == 1
    assert _counts(result.stderr) == (1, 1)  # other.md kept, index.md rendered again


def test_a_torn_render_is_rendered_again(tmp_path: Path) -> None:
    root = _project(tmp_path)
    first, site = _build(root)
    assert first.returncode == 0
    kept = sorted((root / RENDER_CACHE).glob("*.render"))
    assert len(kept) == 2
    # One cut inside its line of JSON, one cut inside its HTML (the line says how long it is).
    kept[0].write_bytes(kept[0].read_bytes()[:20])
    kept[1].write_bytes(kept[1].read_bytes()[:-5])
    again, rebuilt = _build(root, "site-again")
    assert again.returncode == 0, again.stderr
    assert _counts(again.stderr) == (0, 2)
    assert _pages(rebuilt) == _pages(site)


def test_a_page_key_tells_apart_parts_that_run_together() -> None:
    from types import SimpleNamespace

    from sweeper.report.render_cache import page_key

    def page(src: str, dest: str, markdown: str) -> SimpleNamespace:
        return SimpleNamespace(
            file=SimpleNamespace(src_uri=src, dest_uri=dest), url="x/", markdown=markdown
        )

    keys = {
        page_key(page("ab.md", "c.html", "# T"), "salt"),
        page_key(page("a", "b.mdc.html", "# T"), "salt"),
        page_key(page("ab.md", "c.html", "# T "), "salt"),
        page_key(page("ab.md", "c.html", "# T"), "salt2"),
    }
    assert len(keys) == 4
    assert page_key(page("ab.md", "c.html", "# 标题"), "s") == page_key(
        page("ab.md", "c.html", "# 标题"), "s"
    )
