"""Each page's HTML (the theme's templates rendered) kept between builds, for MkDocs 1.x.

After the Markdown renders (:mod:`sweeper.report.render_cache`), the largest share of a build
where one run was added to a thousand is the theme's templates, rendered again for every page
(docs/site.md). A page's HTML is a function of what the template is given: the template
context (the page, the navigation, the config, the URLs) and the templates themselves. So it is
kept in ``.cache/sweeper/html/`` under a hash of all of it:

- the template's name, the theme's folders (a folder outside the installed packages by every
  file's name, size and modification time; the installed themes by their versions, in the
  render cache's salt, which also names mkdocs.yml's bytes);
- every value of the context, read whole (the config with every plugin's settings, the
  navigation's titles and URLs, the page's content, table of contents, meta, neighbours and
  URLs). A value the key cannot name (an object of a kind it does not know) means the page is
  rendered and not kept;
- but not the context names only MkDocs' sitemap reads (``pages``, ``build_date_utc``, a page's
  ``update_date``), when no template of the theme besides its static ones mentions them: with
  them every page would change whenever any page is added, and every day.

A render that logged anything is never kept (every build says it again), and the folder holds
the pages of the last build only. A test builds a site with the cache cold, warm and removed
and compares every file byte for byte, and changes mkdocs.yml, an override template and a
neighbouring page's title to see each shown.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import enum
import functools
import hashlib
import importlib.util
import json
import logging
import re
import types
from collections.abc import Mapping
from pathlib import Path, PurePath
from typing import Any

import jinja2
from mkdocs.config.base import Config
from mkdocs.plugins import BasePlugin
from mkdocs.structure.files import File
from mkdocs.structure.nav import Link, Navigation, Section
from mkdocs.structure.pages import Page
from mkdocs.structure.toc import AnchorLink, TableOfContents
from mkdocs.theme import Theme

from sweeper.report.render_cache import (
    RENDERED_ATTR,
    _listening,
    keep_file,
    prune_folder,
    rendered_as,
    salt_of,
)

log = logging.getLogger("mkdocs.plugins.sweeper")

HTML_CACHE_FORMAT = 2
# Read by MkDocs' sitemap.xml only: left out of the key when no page template mentions them.
_SITEMAP_NAMES = ("pages", "build_date_utc", "update_date")


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).resolve()


_VERSIONED = tuple(p for p in (_package_dir("mkdocs"), _package_dir("material")) if p is not None)


class Opaque(Exception):
    """A value the key cannot name: the page is rendered and not kept."""


def _sig(value: Any, stack: set[int]) -> Any:
    """``value`` as JSON-able data that changes whenever what a template can read of it does."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Page):  # a page other than the one rendered: what a nav shows of it
        return ["Page", value.file.src_uri, value.url, value.title]
    if isinstance(value, File):
        return ["File", value.src_uri, value.dest_uri, value.url]
    if isinstance(value, Link):
        return ["Link", value.title, value.url]
    if isinstance(value, AnchorLink):
        return ["Anchor", value.title, value.id, value.level, _sig(value.children, stack)]
    if isinstance(value, enum.Enum | PurePath | dt.date | dt.time):
        return [type(value).__name__, str(value)]
    if isinstance(value, re.Pattern):
        return ["Pattern", value.pattern, value.flags]
    if isinstance(value, types.FunctionType | types.BuiltinFunctionType | type):
        return ["Callable", getattr(value, "__module__", ""), value.__qualname__]
    if isinstance(value, jinja2.Undefined):
        return ["Undefined"]
    if id(value) in stack:
        raise Opaque(f"a {type(value).__name__} that holds itself")
    stack.add(id(value))
    try:
        if isinstance(value, Section):
            return ["Section", value.title, _sig(value.children, stack)]
        if isinstance(value, Navigation):
            return ["Navigation", _sig(value.items, stack), _sig(value.homepage, stack)]
        if isinstance(value, TableOfContents):
            return ["Toc", _sig(value.items, stack)]
        if isinstance(value, BasePlugin):
            return ["Plugin", type(value).__qualname__, _sig(value.config, stack)]
        if isinstance(value, Theme):
            items = {k: value[k] for k in value}
            return [
                "Theme",
                value.name,
                list(value.dirs),
                sorted(value.static_templates),
                str(value.locale),
                _sig(items, stack),
            ]
        if isinstance(value, Mapping | Config):
            return ["Map", [[str(k), _sig(v, stack)] for k, v in value.items()]]
        if isinstance(value, functools.partial):
            return [
                "Partial",
                _sig(value.func, stack),
                _sig(value.args, stack),
                _sig(value.keywords, stack),
            ]
        if isinstance(value, list | tuple):
            return [_sig(v, stack) for v in value]
        if isinstance(value, set | frozenset):
            return ["Set", sorted(json.dumps(_sig(v, stack), sort_keys=True) for v in value)]
        if hasattr(value, "patterns") and hasattr(value, "match_file"):  # exclude_docs (pathspec)
            return ["PathSpec", [str(getattr(p, "pattern", p)) for p in value.patterns]]
        if type(value).__module__ == "babel.core":  # a Locale
            return ["Locale", str(value)]
    finally:
        stack.discard(id(value))
    raise Opaque(f"a {type(value).__module__}.{type(value).__qualname__}")


# The attributes of the page rendered that the key reads in their own way (the rest as _sig).
_PAGE_OWN = frozenset(
    {
        "file", "parent", "children", "previous_page", "next_page", "markdown", "content",
        "toc", "present_anchor_ids", "links_to_anchors", "update_date", "_title_from_render",
        RENDERED_ATTR,
    }
)  # fmt: skip


def _page_sig(page: Any, sitemap_only: frozenset[str]) -> Any:
    stack: set[int] = set()
    what: dict[str, Any] = {
        "file": [page.file.src_uri, page.file.dest_uri, page.file.url],
        "title": page.title,
        "url": page.url,
        # The page's largest strings by the name of the render that made one from the other,
        # or by their hashes (cheaper than escaping them into JSON).
        "render": rendered_as(page),
        "toc": _sig(page.toc, stack),
        "is_homepage": page.is_homepage,
        "previous": _sig(page.previous_page, stack),
        "next": _sig(page.next_page, stack),
        "ancestors": _sig(list(page.ancestors), stack),
    }
    if what["render"] is None:
        what["content"] = None if page.content is None else _sha256(page.content)
        what["markdown"] = None if page.markdown is None else _sha256(page.markdown)
    if "update_date" not in sitemap_only:
        what["update_date"] = page.update_date
    for name, value in sorted(vars(page).items()):
        if name not in _PAGE_OWN:
            what[f"attr:{name}"] = _sig(value, stack)
    return what


def _files_of(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def _versioned(folder: Path) -> bool:
    """A folder of MkDocs' or Material's installed package: their versions (in the render
    cache's salt) stand for its files."""
    resolved = folder.resolve()
    return any(resolved.is_relative_to(root) for root in _VERSIONED)


@functools.cache
def _versioned_mentions(folder: str, static: frozenset[str]) -> frozenset[str]:
    return _mentions(Path(folder), static)


_TEMPLATE_SUFFIXES = frozenset({".html", ".htm", ".xml", ".j2", ".jinja", ".jinja2", ".txt"})
_NAME = re.compile(r"(?<![\w.'\"])(" + "|".join(_SITEMAP_NAMES) + r")\b")


def _mentions(folder: Path, static: frozenset[str] = frozenset()) -> frozenset[str]:
    found: set[str] = set()
    for path in _files_of(folder):
        if path.suffix not in _TEMPLATE_SUFFIXES:  # assets: copied, not rendered
            continue
        if path.relative_to(folder).as_posix() in static:
            continue
        with contextlib.suppress(OSError, UnicodeDecodeError):
            text = path.read_text(encoding="utf-8")
            found.update(m.group(1) for m in _NAME.finditer(text))
    return frozenset(found)


# The static templates of MkDocs and its themes: rendered without a page, never kept.
_STATIC = frozenset({"sitemap.xml", "404.html"})


def theme_signature(theme: Any) -> tuple[str, frozenset[str]]:
    """The theme's folders (outside the installed packages: every file's name, size and
    modification time) and the sitemap-only names its page templates never mention."""
    digest = hashlib.sha256()
    mentioned: set[str] = set()
    static = frozenset(theme.static_templates) | _STATIC
    for folder in (Path(d) for d in theme.dirs):
        digest.update(f"{folder}\0".encode())
        if _versioned(folder):
            mentioned |= _versioned_mentions(str(folder), static)
            continue
        for path in _files_of(folder):
            stat = path.stat()
            digest.update(f"{path.relative_to(folder)}:{stat.st_size}:{stat.st_mtime_ns};".encode())
        mentioned |= _mentions(folder, static)
    return digest.hexdigest(), frozenset(_SITEMAP_NAMES) - mentioned


class HtmlCache:
    """The pages' HTML, one file per key under ``folder``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.used: set[str] = set()
        self.hits = 0
        self.misses = 0
        self.opaque: set[str] = set()

    def _path(self, key: str) -> Path:
        return self.folder / f"{key}.html"

    def get(self, key: str) -> str | None:
        path = self._path(key)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        head, _, body = data.partition(b"\n")
        if head != f"sweeper-html {HTML_CACHE_FORMAT} {key}".encode():
            return None  # torn or foreign: rendered again and written anew
        try:
            return body.decode("utf-8")
        except UnicodeDecodeError:
            return None

    def put(self, key: str, html: str) -> None:
        keep_file(self._path(key), f"sweeper-html {HTML_CACHE_FORMAT} {key}\n{html}", "HTML")

    def prune(self) -> int:
        """Removes the pages this process did not build; how many."""
        return prune_folder(self.folder, ".html", self.used)


_ACTIVE: HtmlCache | None = None


class _KeptTemplate(jinja2.Template):
    """A template whose render for a page is taken from the HTML cache when its key is known.
    (Jinja renders included and extended templates through their render functions, not
    ``render``: only MkDocs' own call for the whole page comes here.)"""

    # Set on the subclass :func:`use_html_cache` makes for a build: the render cache's salt, the
    # theme's signature, and this build's navigation and config but for ``extra`` (which
    # mkdocs-static-i18n sets for each page), each hashed once: neither changes while the pages'
    # templates are rendered.
    _sweeper_salt: str = ""
    _sweeper_theme: tuple[str, frozenset[str]] = ("", frozenset())
    _sweeper_once: dict[int, tuple[Any, str]]

    def render(self, *args: Any, **kwargs: Any) -> str:
        kept = _ACTIVE
        context = dict(*args, **kwargs)
        page = context.get("page")
        if kept is None or not isinstance(page, Page) or not self._sweeper_salt:
            return super().render(*args, **kwargs)
        try:
            key = self._key(context, page)
        except Opaque as exc:
            kept.opaque.add(str(exc))
            return super().render(*args, **kwargs)
        kept.used.add(key)
        html = kept.get(key)
        if html is not None:
            kept.hits += 1
            return html
        kept.misses += 1
        with _listening() as said:
            html = super().render(*args, **kwargs)
        if not said.said:
            kept.put(key, html)
        return html

    def _key(self, context: dict[str, Any], page: Any) -> str:
        salt, sitemap_only = self._sweeper_theme
        stack: set[int] = set()
        values = {
            name: self._value_sig(name, value, stack)
            for name, value in context.items()
            if name != "page" and name not in sitemap_only
        }
        what = [
            HTML_CACHE_FORMAT,
            self._sweeper_salt,
            salt,
            self.name,
            sorted(values.items()),
            _page_sig(page, sitemap_only),
        ]
        return _sha256(json.dumps(what, ensure_ascii=False, separators=(",", ":")))

    def _value_sig(self, name: str, value: Any, stack: set[int]) -> Any:
        if name == "config" and isinstance(value, Config):
            rest = self._once(value, lambda: {k: v for k, v in value.items() if k != "extra"})
            return ["Config", rest, _sig(value.get("extra"), stack)]
        if name == "nav" and isinstance(value, Navigation):
            return ["Navigation", self._once(value, lambda: value)]
        return _sig(value, stack)

    def _once(self, value: Any, part: Any) -> str:
        """The digest of ``part()``, computed once for ``value`` (held, so that its id is not
        reused by another object while this build runs)."""
        held = self._sweeper_once.get(id(value))
        if held is None or held[0] is not value:
            held = (value, _digest(part()))
            self._sweeper_once[id(value)] = held
        return held[1]


def _digest(value: Any) -> str:
    """The sha256 of ``value``'s signature: what a page's key holds of a large value that is
    the same for every page of a build (read once, not serialized again for each page)."""
    text = json.dumps(_sig(value, set()), ensure_ascii=False, separators=(",", ":"))
    return _sha256(text)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()


def use_html_cache(folder: Path, env: jinja2.Environment, config: Any) -> bool:
    """Keep each page's HTML in ``folder`` from now on, for the templates ``env`` loads from
    here (call from ``on_env``). False where it cannot be kept (a render that can read other
    files, a MkDocs this was not written against)."""
    global _ACTIVE
    import mkdocs

    salt = salt_of(config)
    if salt is None or not mkdocs.__version__.startswith("1.6."):
        _ACTIVE = None  # nothing kept or pruned this build
        return False
    theme = theme_signature(config.theme)
    kept = type(
        "KeptTemplate",
        (_KeptTemplate,),
        {"_sweeper_salt": salt, "_sweeper_theme": theme, "_sweeper_once": {}},
    )
    env.template_class = kept
    if _ACTIVE is None or _ACTIVE.folder != folder:
        _ACTIVE = HtmlCache(folder)
    return True


def active_html_cache() -> HtmlCache | None:
    return _ACTIVE
