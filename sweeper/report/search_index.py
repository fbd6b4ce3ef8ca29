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

import copy
import hashlib
import json
import logging
import os
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sweeper.report.render_cache import keep_file

Entry = dict[str, Any]

log = logging.getLogger("mkdocs.plugins.sweeper")


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
# Material's scrub of data-search-* attributes, where a page has one
#
# After indexing a page, Material's search plugin (on_page_context) removes the data-search-*
# attributes from its HTML with a regular expression that scans the whole HTML: about 0.5 ms for
# a 100 KB page, a second of a build at 2,000 pages, on pages that hold no such attribute (no
# generated page does). :func:`skip_idle_scrub` registers in its place a handler that indexes
# the page the same way and leaves the scan to Material's own handler where the HTML holds one.


def skip_idle_scrub(plugins: Any) -> bool:
    """Put the handler described above in the place of Material's search ``on_page_context``
    among the plugins' registered events; whether one is in place."""
    try:
        from material.plugins.search.plugin import SearchPlugin
    except ImportError:
        return False
    events = getattr(plugins, "events", None)
    handlers = events.get("page_context") if isinstance(events, dict) else None
    if not isinstance(handlers, list):
        return False
    placed = False
    for position, method in enumerate(handlers):
        if getattr(method, "_sweeper_idle_scrub", False):
            placed = True
            continue
        plugin = getattr(method, "__self__", None)
        if isinstance(plugin, SearchPlugin) and (
            getattr(method, "__func__", None) is SearchPlugin.on_page_context
        ):
            handler = _scrub_when_needed(plugin, method)
            handlers[position] = handler  # the same place: the same priority order
            origins = getattr(plugins, "_event_origins", None)
            if isinstance(origins, dict) and method in origins:  # only named in debug logs
                origins[handler] = origins[method]
            placed = True
    return placed


def _scrub_when_needed(plugin: Any, original: Any) -> Any:
    def on_page_context(context: Any, *, page: Any, config: Any, nav: Any) -> Any:
        content = page.content
        if plugin.config.enabled and isinstance(content, str) and "data-search-" not in content:
            plugin.search_index.add_entry_from_context(page)
            return None  # as Material's: the context is kept
        return original(context, page=page, config=config, nav=nav)

    on_page_context._sweeper_idle_scrub = True  # type: ignore[attr-defined]
    on_page_context.mkdocs_priority = getattr(original, "mkdocs_priority", 0)  # type: ignore[attr-defined]
    return on_page_context


# ---------------------------------------------------------------------------------------------
# Material's search entries of each page, kept between builds
#
# Material's search plugin (9.x) parses every page's HTML again on every build to cut it into
# one entry per section (SearchIndex.add_entry_from_context): about a quarter of a warm build of
# many runs, for pages that did not change. The entries are a function of what the plugin reads
# of the page (its URL, title, meta, table of contents and HTML), so they are kept under a hash
# of exactly that, with Material's version, and a page whose hash is known gets them back
# without being parsed. The file holds the pages of the last build only.

ENTRY_CACHE_FORMAT = 1


def _toc(items: Any) -> list[Any]:
    return [[i.id, i.url, i.title, _toc(i.children)] for i in items or []]


def page_key(page: Any, salt: str) -> str | None:
    """The hash of what Material's search reads of a page, with ``salt`` (what else decides
    its entries: see :func:`use_entry_cache`); None where it cannot be hashed."""
    what = [
        salt,
        page.url,
        str(page.title),
        page.meta,
        _toc(page.toc),
        # The HTML by its hash: cheaper than escaping a large page into the JSON hashed below.
        hashlib.sha256(page.content.encode("utf-8", errors="surrogatepass")).hexdigest()
        if isinstance(page.content, str)
        else page.content,
    ]
    try:
        text = json.dumps(what, default=str, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):  # meta keys of mixed types: the page is indexed afresh
        return None
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class EntryCache:
    """The search entries per page key, read from ``path`` when first asked and written back
    (the pages of this build only) by :meth:`save`."""

    def __init__(self, path: Path, salt: str) -> None:
        self.path = path
        self.salt = salt
        self._known: dict[str, list[Entry]] | None = None
        self._used: dict[str, list[Entry]] = {}
        self._indexed = False  # a page parsed since the file was last read or written
        self.hits = 0
        self.misses = 0

    def _load(self) -> dict[str, list[Entry]]:
        if self._known is None:
            self._known = {}
            data = _read_json(self.path)
            if isinstance(data, dict) and data.get("format") == ENTRY_CACHE_FORMAT:
                pages = data.get("pages")
                if isinstance(pages, dict):
                    self._known = pages
        return self._known

    def get(self, key: str) -> list[Entry] | None:
        found = self._used.get(key)
        if found is None:
            found = self._load().get(key)
        if found is None:
            self.misses += 1
            return None
        self.hits += 1
        self._used[key] = found
        return copy.deepcopy(found)

    def put(self, key: str, entries: list[Entry]) -> None:
        self._used[key] = copy.deepcopy(entries)
        self._indexed = True

    def save(self) -> None:
        """Write the entries of the pages this build indexed, when they differ from the file's:
        a page parsed, or one the file holds that this build did not index (atomically: a build
        killed while writing leaves the old file)."""
        known = self._known
        if known is not None and not self._indexed and self._used.keys() == known.keys():
            return
        data = {"format": ENTRY_CACHE_FORMAT, "pages": self._used}
        if not _write_json(self.path, data, "search entries"):
            return
        self._known = dict(self._used)
        self._indexed = False


_ACTIVE: EntryCache | None = None


def use_entry_cache(path: Path) -> bool:
    """Keep Material's search entries in ``path`` from now on (the same cache again when the
    path is the same: mkdocs-static-i18n configures each language's build anew). False where
    Material's search index is not the one this was written against."""
    global _ACTIVE
    try:
        from material.plugins.search import plugin as material_search
    except ImportError:
        return False
    index = getattr(material_search, "SearchIndex", None)
    original = getattr(index, "add_entry_from_context", None)
    if index is None or original is None:
        return False
    if not getattr(original, "_sweeper_cached", False):

        def add_entry_from_context(self: Any, page: Any) -> None:
            cache = _ACTIVE
            if cache is None:
                original(self, page)
                return
            words = _WORDS
            key = page_key(page, cache.salt if words is None else f"{cache.salt}:{words.salt}")
            if key is None:
                original(self, page)
                return
            found = cache.get(key)
            if found is not None:
                self.entries.extend(found)
                return
            before = len(self.entries)
            original(self, page)
            cache.put(key, self.entries[before:])

        add_entry_from_context._sweeper_cached = True  # type: ignore[attr-defined]
        index.add_entry_from_context = add_entry_from_context
    if _ACTIVE is None or _ACTIVE.path != path:
        from material import __version__ as material_version

        # The entries depend on Material's code, and on whether it cuts Chinese into words
        # (jieba installed or not), as much as on the page.
        segments = getattr(material_search, "jieba", None) is not None
        salt = f"{ENTRY_CACHE_FORMAT}:{material_version}:{segments}"
        _ACTIVE = EntryCache(path, salt)
    return True


def active_entry_cache() -> EntryCache | None:
    return _ACTIVE


# ---------------------------------------------------------------------------------------------
# jieba's cuts of the Chinese text, kept between builds
#
# Material cuts every run of Han characters of a page it indexes into words with jieba, and the
# first cut of a process loads jieba's dictionary: 0.6 s of the 12 s it takes to add one run to
# a thousand, for a new Chinese page whose phrases (sweeper's catalog) were all cut before. A cut
# is a function of the run's text and of the dictionaries jieba was given, so the cuts are kept
# in ``search-words.json`` beside the entries under a salt naming jieba's version and those
# dictionaries (by path, size and modification time), and jieba's dictionary is loaded only when
# a run was never cut. In 2026-12-03's 100-run build the cutting itself was 0.5 s of 35 s of
# CPU (docs/site.md); the dictionary's loading is what this saves.

WORDS_FORMAT = 1
# The file starts again from one build's cuts once it holds this many (labels and notes are
# text too: it must not grow with every run ever added).
WORDS_MAX = 200_000


class WordCuts:
    """jieba in Material's search plugin, its cuts remembered in ``path``: ``cut`` answers from
    the file where it can and asks jieba otherwise; everything else is jieba's own (Material
    calls ``set_dictionary`` and ``load_userdict`` with its ``jieba_dict`` settings)."""

    def __init__(self, jieba: Any, path: Path) -> None:
        self.jieba = jieba
        self.path = path
        self.dictionaries: dict[str, str] = {}
        self._known: dict[str, list[str]] | None = None
        self._salt: str | None = None
        self._new: dict[str, list[str]] = {}
        self.hits = 0
        self.misses = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.jieba, name)

    def set_dictionary(self, path: str) -> None:
        self._given("main", path)
        self.jieba.set_dictionary(path)

    def load_userdict(self, path: str) -> None:
        self._given(f"user:{path}", path)
        self.jieba.load_userdict(path)

    def _given(self, kind: str, path: str) -> None:
        try:
            stat = os.stat(path)
            self.dictionaries[kind] = f"{path}:{stat.st_size}:{stat.st_mtime_ns}"
        except OSError:
            self.dictionaries[kind] = f"{path}:missing"

    @property
    def salt(self) -> str:
        """What a cut depends on besides its text."""
        version = getattr(self.jieba, "__version__", "?")
        main = getattr(getattr(self.jieba, "dt", None), "dictionary", None)  # set_dictionary's
        return json.dumps([WORDS_FORMAT, version, str(main), sorted(self.dictionaries.items())])

    def cut(self, text: bytes | str, *args: Any, **kwargs: Any) -> Iterable[str]:
        if args or kwargs:  # another mode than Material's (cut_all, HMM): jieba's own
            return self.jieba.cut(text, *args, **kwargs)
        key = text.decode("utf-8") if isinstance(text, bytes) else text
        found = self._load().get(key)
        if found is None:
            self.misses += 1
            found = list(self.jieba.cut(text))
            self._new[key] = found
        else:
            self.hits += 1
        return iter(found)

    def _load(self) -> dict[str, list[str]]:
        salt = self.salt
        if self._known is None or self._salt != salt:
            if self._salt is not None:  # other dictionaries since: the new cuts are not theirs
                self._new = {}
            self._known, self._salt = {}, salt
            data = _read_json(self.path)
            if isinstance(data, dict) and data.get("salt") == salt:
                cuts = data.get("cuts")
                if isinstance(cuts, dict):
                    self._known = cuts
        return self._known

    def save(self) -> None:
        """Add this build's new cuts to the file (atomically), when there are any."""
        if not self._new:
            return
        known = self._load()
        cuts = self._new if len(known) + len(self._new) > WORDS_MAX else {**known, **self._new}
        _write_json(self.path, {"salt": self.salt, "cuts": cuts}, "search words")
        self._known, self._new = cuts, {}


_WORDS: WordCuts | None = None


def remember_cuts(path: Path, plugins: Any = None) -> WordCuts | None:
    """Put :class:`WordCuts` in the place of jieba in Material's search plugin (kept in
    ``path``); None where Material does not cut Chinese (jieba not installed). ``plugins``:
    the site's, whose search plugin may have given jieba its dictionaries already (it is
    configured before sweeper's plugin when listed first)."""
    global _WORDS
    try:
        from material.plugins.search import plugin as material_search
    except ImportError:
        return None
    jieba = getattr(material_search, "jieba", None)
    if jieba is None:
        return None
    if isinstance(jieba, WordCuts):
        jieba.path = path
    else:
        jieba = WordCuts(jieba, path)
        material_search.jieba = jieba
    for plugin in plugins.values() if hasattr(plugins, "values") else ():
        if isinstance(plugin, material_search.SearchPlugin):
            user = plugin.config.get("jieba_dict_user")
            if user:
                jieba._given(f"user:{user}", os.path.normpath(user))
    _WORDS = jieba
    return jieba


def active_word_cuts() -> WordCuts | None:
    return _WORDS


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:  # a torn or foreign file: built again
        log.info("sweeper: the search cache %s is unreadable (%s): rebuilt", path, exc)
        return None


def _write_json(path: Path, data: Any, what: str) -> bool:
    """``data`` into ``path`` atomically; False where it cannot be written (a read-only
    project, a full disk: the site is built anyway)."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return keep_file(path, text, what)
