"""The search index's duplicates: sweeper's linear removal against mkdocs-static-i18n's own, and
the built site's index without them."""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace
from typing import Any

from mkdocs_static_i18n.reconfigure import ExtendedPlugin

from sweeper.report.search_index import install, remove_duplicates
from sweeper.testing.factories import synthetic_search_entries

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
