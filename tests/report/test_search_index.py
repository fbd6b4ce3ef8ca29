"""The search index: its duplicates (sweeper's linear removal against mkdocs-static-i18n's own,
and the built site's index without them), and Material's entries of each page kept between
builds (the same index from the cache as from Material's own parsing)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from mkdocs_static_i18n.reconfigure import ExtendedPlugin

from sweeper.report import search_index
from sweeper.report.mkdocs_plugin import SEARCH_CACHE
from sweeper.report.search_index import install, remove_duplicates, use_entry_cache
from sweeper.testing.factories import synthetic_search_entries
from tests.report.site_helpers import mkdocs_build

LANGUAGES = ["en", "zh"]


def _entries(pages: int, seed: int) -> list[dict[str, Any]]:
    return synthetic_search_entries(pages, seed=seed)


def _theirs(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    plugin = SimpleNamespace(build_languages=LANGUAGES)
    ExtendedPlugin.reconfigure_search_duplicates(plugin, entries)
    return entries


def test_the_same_entries_are_kept_as_the_i18n_plugin_keeps() -> None:
    for seed in range(5):
        entries = _entries(60, seed)
        theirs = _theirs(copy.deepcopy(entries))
        ours = copy.deepcopy(entries)
        remove_duplicates(ours, LANGUAGES)
        assert ours == theirs, seed
        dropped = len(entries) - len(ours)
        assert dropped > 20, dropped  # there were duplicates to remove
        zh = [e for e in ours if e["location"].startswith("zh/")]
        assert any(e["text"].endswith("(其他)") for e in zh)  # same title, other text: kept


def test_an_index_without_duplicates_is_left_as_it_is() -> None:
    entries = [e for e in _entries(10, 1) if not e["location"].startswith("zh/")]
    before = copy.deepcopy(entries)
    remove_duplicates(entries, LANGUAGES)
    assert entries == before


def test_install_replaces_the_i18n_plugins_method_only_where_it_has_one() -> None:
    i18n = SimpleNamespace(build_languages=LANGUAGES, reconfigure_search_duplicates=lambda e: None)
    assert install({"i18n": i18n}) is True
    entries = _entries(5, 2)
    want = _theirs(copy.deepcopy(entries))
    i18n.reconfigure_search_duplicates(entries)
    assert entries == want
    assert install({}) is False
    assert install({"i18n": SimpleNamespace()}) is False


def test_the_built_sites_index_holds_no_entry_twice(built_site) -> None:
    index = json.loads((built_site.site_dir / "search" / "search_index.json").read_text())
    docs = index["docs"]
    default = {
        (d["title"], d["text"], d["location"]) for d in docs if not d["location"].startswith("zh/")
    }
    repeated = [
        d for d in docs
        if d["location"].startswith("zh/") and (d["title"], d["text"], d["location"][3:]) in default
    ]  # fmt: skip
    assert repeated == []
    assert any(d["location"].startswith("zh/") for d in docs)  # the Chinese pages are indexed
    # There was something to remove: the notebook has no Chinese source, so the i18n plugin
    # builds its zh page from the English one and indexes the same entries under zh/ first.
    assert (built_site.site_dir / "zh" / "notebooks" / "explore" / "index.html").is_file()
    notebook = [d for d in docs if d["location"].startswith("notebooks/explore/")]
    assert notebook, "the notebook's English entries are indexed"
    assert not [d for d in docs if d["location"].startswith("zh/notebooks/explore/")]


RENDER_COUNTS = re.compile(r"sweeper: (\d+) pages from the render cache, (\d+) rendered")
CACHE_LINE = re.compile(r"search entries of (\d+) pages from the cache, (\d+) pages indexed")


def _cache_counts(log: str) -> tuple[int, int]:
    found = CACHE_LINE.findall(log)
    assert found, log[-2000:]
    hits, misses = found[-1]  # the last line counts both languages' builds
    return int(hits), int(misses)


def test_a_rebuild_takes_every_pages_search_entries_from_the_cache_for_the_same_index(
    built_site, readable_traces: Path, tmp_path: Path
) -> None:
    config = built_site.site_dir.parent.parent / "mkdocs.yml"
    assert (config.parent / SEARCH_CACHE).is_file()
    hits, misses = _cache_counts(built_site.log)
    assert hits == 0 and misses > 50  # the first build parsed every page
    again = tmp_path / "site"
    result = mkdocs_build(config, again, readable_traces, built_site.base_url)
    assert result.returncode == 0, result.stderr[-3000:]
    assert _cache_counts(result.stderr) == (misses, 0)  # no page parsed again
    index = "search/search_index.json"
    assert (again / index).read_text() == (built_site.site_dir / index).read_text()
    # Every Markdown page's render came from the render cache too, and the site is the same
    # to the byte (the sitemaps carry the build's date).
    renders = RENDER_COUNTS.findall(result.stderr)
    assert renders and int(renders[-1][1]) == 0 and int(renders[-1][0]) > 50, renders
    first_renders = RENDER_COUNTS.findall(built_site.log)
    assert first_renders and int(first_renders[-1][0]) == 0, first_renders
    built = {p.relative_to(built_site.site_dir): p for p in built_site.site_dir.rglob("*.html")}
    rebuilt = {p.relative_to(again): p for p in again.rglob("*.html")}
    assert built.keys() == rebuilt.keys() and len(built) > 50
    differ = [str(k) for k, p in built.items() if p.read_bytes() != rebuilt[k].read_bytes()]
    assert differ == []


WORD_COUNTS = re.compile(r"sweeper: (\d+) Chinese phrases cut as before, (\d+) cut by jieba")


def test_chinese_pages_indexed_again_are_cut_from_the_kept_cuts_into_the_same_index(
    built_site, readable_traces: Path, tmp_path: Path
) -> None:
    """With the search entries gone, every page is parsed again, and every phrase of the
    Chinese pages was cut before: jieba is not asked, and the index is the same to the byte."""
    config = built_site.site_dir.parent.parent / "mkdocs.yml"
    first = WORD_COUNTS.findall(built_site.log)
    assert first and int(first[-1][0]) == 0 and int(first[-1][1]) > 100, first
    (config.parent / SEARCH_CACHE).unlink()
    again = tmp_path / "site"
    result = mkdocs_build(config, again, readable_traces, built_site.base_url)
    assert result.returncode == 0, result.stderr[-3000:]
    assert _cache_counts(result.stderr)[1] > 50  # parsed again
    counts = WORD_COUNTS.findall(result.stderr)
    assert counts and int(counts[-1][1]) == 0 and int(counts[-1][0]) > 100, counts
    assert "Loading model" not in result.stderr  # jieba's dictionary was never needed
    index = "search/search_index.json"
    assert (again / index).read_text() == (built_site.site_dir / index).read_text()


def _page(content: str) -> SimpleNamespace:
    return SimpleNamespace(url="runs/a/", title="Run A", meta={}, toc=[], content=content)


@pytest.fixture
def fresh_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search_index, "_ACTIVE", None)


def _indexed(page: SimpleNamespace) -> list[dict[str, Any]]:
    from material.plugins.search.plugin import SearchIndex

    index = SearchIndex()
    index.add_entry_from_context(page)
    return index.entries


def test_a_page_is_parsed_once_and_again_when_it_changes(tmp_path: Path, fresh_cache) -> None:
    path = tmp_path / "entries.json"
    assert use_entry_cache(path)
    page = _page('<h2 id="tail">Tail</h2><p>ITL 尾部 opens at C=16</p>')
    first = _indexed(page)
    assert first[-1]["location"] == "runs/a/#tail" and "C=16" in first[-1]["text"]
    cache = search_index.active_entry_cache()
    assert cache is not None and (cache.hits, cache.misses) == (0, 1)
    cache.save()
    # A later build (a new process): the same page comes from the file, unparsed.
    search_index._ACTIVE = None
    use_entry_cache(path)
    cache = search_index.active_entry_cache()
    assert cache is not None
    assert _indexed(page) == first
    assert (cache.hits, cache.misses) == (1, 0)
    changed = _page('<h2 id="tail">Tail</h2><p>ITL 尾部 opens at C=32</p>')
    assert "C=32" in _indexed(changed)[-1]["text"]
    assert (cache.hits, cache.misses) == (1, 1)


def test_a_torn_cache_file_is_indexed_afresh(tmp_path: Path, fresh_cache) -> None:
    path = tmp_path / "entries.json"
    path.write_text('{"format": 1, "pages": {"ab', encoding="utf-8")
    use_entry_cache(path)
    page = _page('<h2 id="x">X</h2><p>text</p>')
    assert _indexed(page)[-1]["text"] == "<p>text</p>"
    cache = search_index.active_entry_cache()
    assert cache is not None and cache.misses == 1
    cache.save()
    assert json.loads(path.read_text())["format"] == 1  # written whole again


def test_a_cache_that_cannot_be_written_leaves_the_build_alone(tmp_path: Path, fresh_cache) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the cache's folder would be")
    use_entry_cache(blocked / "entries.json")
    assert _indexed(_page('<h2 id="x">X</h2><p>text</p>'))[-1]["text"] == "<p>text</p>"
    cache = search_index.active_entry_cache()
    assert cache is not None
    cache.save()  # no error: the build goes on without a cache
    assert not (blocked / "entries.json").exists()


def test_the_scrub_runs_only_on_pages_that_hold_a_data_search_attribute(
    tmp_path: Path, fresh_cache: None
) -> None:
    from mkdocs.config import load_config

    (tmp_path / "docs").mkdir()
    (tmp_path / "mkdocs.yml").write_text(
        "site_name: t\ntheme:\n  name: material\nplugins:\n  - search\n", encoding="utf-8"
    )
    config = load_config(str(tmp_path / "mkdocs.yml"))
    plugin = config.plugins["material/search"]
    plugin.on_config(config)
    handlers = config.plugins.events["page_context"]
    assert search_index.skip_idle_scrub(config.plugins) is True
    assert search_index.skip_idle_scrub(config.plugins) is True  # once, however often asked
    assert sum(getattr(h, "_sweeper_idle_scrub", False) for h in handlers) == 1
    assert not any(getattr(h, "__self__", None) is plugin for h in handlers)
    plain = "<h1 id='a'>Run A</h1><p>tok/s 1,234</p>" * 50
    marked = '<h1 id="a">Run A</h1><p data-search-exclude="x">hidden</p><p>shown</p>'
    for content, scrubbed in (
        (plain, plain),
        (marked, '<h1 id="a">Run A</h1><p>hidden</p><p>shown</p>'),
    ):
        plugin.search_index.entries.clear()
        page = _page(content)
        config.plugins.run_event("page_context", {}, page=page, config=config, nav=None)
        assert page.content == scrubbed
        ours = copy.deepcopy(plugin.search_index.entries)
        plugin.search_index.entries.clear()
        theirs = _page(content)
        type(plugin).on_page_context(plugin, {}, page=theirs, config=config, nav=None)
        assert ours == plugin.search_index.entries and ours  # indexed as Material indexes it
        assert theirs.content == page.content


_CUT_IN_A_NEW_PROCESS = """
import json, sys
from pathlib import Path
from material.plugins.search import plugin
from sweeper.report.search_index import remember_cuts
words = remember_cuts(Path(sys.argv[1]))
cut = list(words.cut(sys.argv[2].encode("utf-8")))
words.save()
print(json.dumps([cut, words.hits, words.misses, plugin.jieba.jieba.dt.initialized]))
"""


def _cut_in_a_new_process(path: Path, text: str) -> tuple[list[str], int, int, bool]:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _CUT_IN_A_NEW_PROCESS, str(path), text],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    cut, hits, misses, loaded = json.loads(done.stdout.splitlines()[-1])
    return cut, hits, misses, loaded


def test_a_phrase_cut_once_is_cut_again_without_loading_jiebas_dictionary(tmp_path: Path) -> None:
    import jieba

    path = tmp_path / "words.json"
    phrase = "吞吐与延迟的兑换率"
    expected = list(jieba.cut(phrase.encode("utf-8")))
    assert len(expected) > 1
    assert _cut_in_a_new_process(path, phrase) == (expected, 0, 1, True)
    assert _cut_in_a_new_process(path, phrase) == (expected, 1, 0, False)
    # A torn file: cut by jieba again, and written whole.
    path.write_text(path.read_text(encoding="utf-8")[:20], encoding="utf-8")
    assert _cut_in_a_new_process(path, phrase) == (expected, 0, 1, True)
    assert phrase in json.loads(path.read_text(encoding="utf-8"))["cuts"]


def test_other_dictionaries_are_not_answered_with_the_cuts_of_the_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import jieba
    from material.plugins.search import plugin as material_search

    monkeypatch.setattr(material_search, "jieba", jieba)
    monkeypatch.setattr(search_index, "_WORDS", None)
    words = search_index.remember_cuts(tmp_path / "words.json")
    assert words is not None and material_search.jieba is words
    phrase = "预填充吞吐"
    plain = list(words.cut(phrase.encode("utf-8")))
    words.save()
    assert list(words.cut(phrase.encode("utf-8"))) == plain and words.hits == 1
    user = tmp_path / "user.txt"
    user.write_text("预填充吞吐 100000 n\n", encoding="utf-8")
    salt = words.salt
    tokenizer = jieba.Tokenizer()  # the user words go into a tokenizer of this test's own

    def load_userdict(name: str) -> None:
        with open(name, "rb") as fh:  # jieba leaves a file it opens itself open
            tokenizer.load_userdict(fh)

    monkeypatch.setattr(words, "jieba", SimpleNamespace(
        __version__=jieba.__version__, dt=tokenizer, load_userdict=load_userdict,
        cut=tokenizer.cut,
    ))  # fmt: skip
    words.load_userdict(str(user))
    assert words.salt != salt
    assert list(words.cut(phrase.encode("utf-8"))) == ["预填充吞吐"] != plain
    assert words.misses == 2
