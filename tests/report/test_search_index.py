"""The search index: its duplicates (sweeper's linear removal against mkdocs-static-i18n's own,
and the built site's index without them) and its Chinese words (the memo against jieba itself,
through Material's own segmentation)."""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace
from typing import Any

from mkdocs_static_i18n.reconfigure import ExtendedPlugin

from sweeper.report.search_index import (
    MemoJieba,
    install,
    install_segment_memo,
    remove_duplicates,
)
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


# Sentences of a zh run page, with the numbers that split them into the same Han runs.
ZH_TEXTS = [
    "C=8 的尾部来自单个请求独自在跑：没有别的请求在途。",
    "ITL 尾部在 C=16 裂开：p99 ITL 从 C=8 的 41 ms 跳到 182 ms（一步 4.4 倍），而 p50 ITL 是 23 ms。",
    "ITL 尾部在 C=32 裂开：p99 ITL 从 C=16 的 52 ms 跳到 230 ms（一步 4.4 倍），而 p50 ITL 是 25 ms。",
    "Throughput 吞吐 1,234 tok/s，没有抢占。",
    "no Chinese here at all",
]


class _Counting:
    """A jieba tokenizer that counts its cuts."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.cuts = 0

    def cut(self, sentence: Any, *args: Any, **kwargs: Any) -> Any:
        self.cuts += 1
        return self.tokenizer.cut(sentence, *args, **kwargs)

    def load_userdict(self, f: Any) -> None:
        self.tokenizer.load_userdict(f)


def _segmented(cut_with: Any, texts: list[str]) -> list[str]:
    from material.plugins.search import plugin as material_search

    saved = material_search.jieba
    material_search.jieba = cut_with
    try:
        index = material_search.SearchIndex()
        return [index._segment_chinese(t) for t in texts]
    finally:
        material_search.jieba = saved


def test_the_memo_gives_materials_segmentation_the_same_words_cutting_each_run_once(
    tmp_path: Any,
) -> None:
    import jieba

    plain = _segmented(jieba.Tokenizer(), ZH_TEXTS * 3)
    counting = _Counting(jieba.Tokenizer())
    memo = MemoJieba(counting)
    assert _segmented(memo, ZH_TEXTS * 3) == plain
    assert any("\u200b" in t for t in plain)  # words were cut
    once = counting.cuts
    assert 0 < once < 3 * len(ZH_TEXTS) * 3  # the repeated runs were not cut again
    _segmented(memo, ZH_TEXTS)
    assert counting.cuts == once  # every run already known
    # A user dictionary changes the words: what was remembered goes.
    words = tmp_path / "user.txt"
    words.write_text("独自在跑 100 n\n", encoding="utf-8")
    with words.open("rb") as fh:  # jieba leaves a file it opened from a path open
        memo.load_userdict(fh)
    assert "独自在跑" in _segmented(memo, ZH_TEXTS[:1])[0].split("\u200b")
    assert counting.cuts > once


def test_the_memo_is_installed_in_materials_search_once() -> None:
    from material.plugins.search import plugin as material_search

    saved = material_search.jieba
    try:
        assert install_segment_memo() is True
        installed = material_search.jieba
        assert isinstance(installed, MemoJieba) and installed.jieba is saved
        assert install_segment_memo() is True
        assert material_search.jieba is installed  # not wrapped twice
        material_search.jieba = None  # jieba not installed: nothing to remember
        assert install_segment_memo() is False
    finally:
        material_search.jieba = saved
