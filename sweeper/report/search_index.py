"""The search index built faster: its duplicates removed in linear time (mkdocs-static-i18n),
and its Chinese words cut once per distinct text (Material; :class:`MemoJieba`, at the end).

With ``reconfigure_search: true`` the i18n plugin (1.3.1, the latest) stacks every language's
search entries into one index and drops each entry of a language folder (``zh/...``) that repeats
an entry of the default language (same title, same text, its location ending with the default
one's): a page without a translation is built into ``zh/`` from the English one and would
otherwise be found twice. It finds them by scanning all the language's entries for each default
entry, and removes each with ``list.remove``: quadratic in the number of entries. A run page
has dozens of entries (one per heading), so at 1,000 runs that scan was most of a warm build
(docs/site.md). :func:`remove_duplicates` returns the same index from one pass over it, and the
sweeper plugin puts it in the i18n plugin's place (:func:`install`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

Entry = dict[str, Any]


def remove_duplicates(entries: list[Entry], languages: Iterable[str]) -> None:
    """Drop, in place, each entry under a ``<language>/`` folder that repeats an entry of the
    default language: the same title and text, its location ending with the other's. The order
    of what is kept does not change."""
    prefixes = tuple(f"{lang}/" for lang in languages)
    by_content: defaultdict[tuple[Any, Any], list[Entry]] = defaultdict(list)
    for entry in entries:
        if entry["location"].startswith(prefixes):
            by_content[(entry["title"], entry["text"])].append(entry)
    if not by_content:
        return
    dropped: set[int] = set()
    for entry in entries:
        location = entry["location"]
        if location.startswith(prefixes):
            continue
        for other in by_content.get((entry["title"], entry["text"]), ()):
            if id(other) not in dropped and other["location"].endswith(location):
                dropped.add(id(other))
    if dropped:
        entries[:] = [entry for entry in entries if id(entry) not in dropped]


def install(plugins: Any) -> bool:
    """Put :func:`remove_duplicates` in place of the i18n plugin's own, if it is there and has
    the method this was written against; whether it did."""
    i18n = plugins.get("i18n") if hasattr(plugins, "get") else None
    if i18n is None or not callable(getattr(i18n, "reconfigure_search_duplicates", None)):
        return False

    def reconfigure_search_duplicates(search_index_entries: list[Entry]) -> None:
        remove_duplicates(search_index_entries, i18n.build_languages)

    i18n.reconfigure_search_duplicates = reconfigure_search_duplicates
    return True


# ---------------------------------------------------------------------------------------------
# Chinese word segmentation, once per distinct run of Han characters
#
# Material's search plugin (9.x) cuts every run of Han characters of every section of every page
# into words with jieba, so that a Chinese search finds words. The run pages say the same
# sentences with other numbers, and the numbers split the Han text into the same short runs over
# and over: at 1,000 runs the same few thousand runs are cut hundreds of thousands of times.
# jieba's cut of a string is a function of the string (and of the dictionaries, on whose change
# the memo is cleared), so the memo gives the plugin the same words.

SEGMENT_MEMO_LIMIT = 200_000
"""Distinct runs kept; past it the memo starts again (a site's own text holds far fewer)."""


class MemoJieba:
    """The jieba module, with ``cut(text)`` remembered per text; everything else is jieba's."""

    def __init__(self, jieba: Any) -> None:
        self.jieba = jieba
        self._cuts: dict[str | bytes, tuple[str, ...]] = {}

    def cut(self, sentence: str | bytes, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs:  # another mode than the plugin's: not remembered
            return self.jieba.cut(sentence, *args, **kwargs)
        words = self._cuts.get(sentence)
        if words is None:
            if len(self._cuts) >= SEGMENT_MEMO_LIMIT:
                self._cuts.clear()
            words = self._cuts[sentence] = tuple(self.jieba.cut(sentence))
        return words

    def set_dictionary(self, path: str) -> None:
        self._cuts.clear()
        self.jieba.set_dictionary(path)

    def load_userdict(self, f: Any) -> None:  # a path or an open file, as jieba takes
        self._cuts.clear()
        self.jieba.load_userdict(f)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.jieba, name)


def install_segment_memo() -> bool:
    """Give Material's search plugin the memoized jieba; False where the plugin segments
    nothing (jieba not installed) or is not the one this was written against."""
    try:
        from material.plugins.search import plugin as material_search
    except ImportError:
        return False
    jieba = getattr(material_search, "jieba", None)
    if jieba is None:
        return False
    if not isinstance(jieba, MemoJieba):
        material_search.jieba = MemoJieba(jieba)
    return True
