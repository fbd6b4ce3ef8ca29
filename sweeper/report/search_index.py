"""The search index's duplicates removed in linear time, for mkdocs-static-i18n.

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
