"""Each page's Markdown render kept between builds, for MkDocs 1.x.

MkDocs converts every page's Markdown to HTML on every build (``Page.render``), also the pages
that did not change: at a thousand runs that is 2,000 pages, and the largest share of a build
after one run was added (docs/site.md). What a render produces is a function of the page's
Markdown, its place in the site (source, destination and URL), the Markdown extensions and
their settings (mkdocs.yml and the libraries' versions), and the other files its links point at.
So it is kept under a hash of all but the last, in one file per page under
``.cache/sweeper/renders/`` (a line of JSON, then the page's HTML as it is: a thousand runs'
pages read back eight times faster than from one JSON document each), and a page whose hash is
known is not converted again:

- its links are resolved again by MkDocs' own code (``_RelativePathTreeprocessor.path_to_url``,
  the same calls the render made, against this build's files). If one resolves differently, or
  says anything (a link to a file that is gone), the page is rendered afresh, so the HTML and
  the warnings are the render's own; resolving them also registers the links to other pages'
  anchors, which MkDocs checks after the build as it does for a rendered page;
- a page whose render logged anything (a warning, an unrecognized link) is never kept, so that
  every build says it again;
- the folder holds the pages of the last build only.

With an extension that reads other files into a page (``pymdownx.snippets``) the render is not a
function of the page alone, and nothing is kept. A test builds a site with the cache cold, warm
and turned off and compares every file byte for byte.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger("mkdocs.plugins.sweeper")

RENDER_CACHE_FORMAT = 2
# Extensions whose output depends on files other than the page: no page is kept with them.
_READS_OTHER_FILES = ("pymdownx.snippets",)
_LIBRARIES = ("mkdocs", "markdown", "pymdown-extensions", "mkdocs-material", "pygments")


class _Collect(logging.Handler):
    """Whether anything was logged while it was attached."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.said = False

    def emit(self, record: logging.LogRecord) -> None:
        self.said = True


@contextlib.contextmanager
def _listening() -> Any:
    """Notes what MkDocs and the Markdown extensions log meanwhile (MkDocs' logger does not
    propagate; Python-Markdown's reaches the root)."""
    handler = _Collect()
    loggers = (logging.getLogger("mkdocs"), logging.getLogger())
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield handler
    finally:
        for logger in loggers:
            logger.removeHandler(handler)


@contextlib.contextmanager
def _quiet() -> Any:
    """Keeps what MkDocs logs meanwhile from its handlers, noting whether anything was said."""
    handler = _Collect()
    mkdocs_log = logging.getLogger("mkdocs")
    saved = mkdocs_log.handlers[:]
    mkdocs_log.handlers = [handler]
    try:
        yield handler
    finally:
        mkdocs_log.handlers = saved


def _toc(items: Any) -> list[Any]:
    return [[i.title, i.id, i.level, _toc(i.children)] for i in items or []]


def _anchor_links(items: list[Any]) -> list[Any]:
    from mkdocs.structure.toc import AnchorLink

    links = []
    for title, anchor, level, children in items:
        link = AnchorLink(title, anchor, level)
        link.children = _anchor_links(children)
        links.append(link)
    return links


def _table_of_contents(items: list[Any]) -> Any:
    from mkdocs.structure.toc import TableOfContents

    links = _anchor_links(items)
    if links:  # as MkDocs' get_toc: the first item marked active
        links[0].active = True
    return TableOfContents(links)


def salt_of(config: Any) -> str | None:
    """What decides every page's render besides the page: this format, the libraries'
    versions, the config file's bytes and the extensions; None where a render can depend on
    other files (nothing is kept then)."""
    names = [e if isinstance(e, str) else type(e).__name__ for e in config["markdown_extensions"]]
    if any(name in _READS_OTHER_FILES for name in names):
        return None
    versions = []
    for name in _LIBRARIES:
        try:
            versions.append(f"{name}={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{name}=-")
    config_bytes = b""
    if config.config_file_path:
        with contextlib.suppress(OSError):
            config_bytes = Path(config.config_file_path).read_bytes()
    what = [
        RENDER_CACHE_FORMAT,
        versions,
        names,
        bool(config["use_directory_urls"]),
        hashlib.sha256(config_bytes).hexdigest(),
    ]
    return json.dumps(what)


def page_key(page: Any, salt: str) -> str:
    """The sha256 of what decides ``page``'s render besides the files its links point at: each
    part after its length, so that no two pages' parts run together into the same bytes (the
    Markdown is hashed as it is, not escaped into JSON first: a sixth of the time)."""
    digest = hashlib.sha256()
    for part in (salt, page.file.src_uri, page.file.dest_uri, page.url, page.markdown):
        data = part.encode("utf-8", "surrogatepass")
        digest.update(b"%d:" % len(data))
        digest.update(data)
    return digest.hexdigest()


class RenderCache:
    """The renders of the pages, one JSON file per page key under ``folder``."""

    def __init__(self, folder: Path, salt: str) -> None:
        self.folder = folder
        self.salt = salt
        self.used: set[str] = set()
        self.hits = 0
        self.misses = 0

    def _path(self, key: str) -> Path:
        return self.folder / f"{key}.render"

    def get(self, key: str) -> dict[str, Any] | None:
        try:
            data = self._path(key).read_bytes()
        except OSError:  # not kept (or unreadable): rendered again and written anew
            return None
        head, newline, content = data.partition(b"\n")
        try:
            render = json.loads(head)
            if not newline or not isinstance(render, dict):
                return None
            if render.pop("format", None) != RENDER_CACHE_FORMAT:
                return None
            if render.pop("length", None) != len(content):  # cut short, or written over
                return None
            render["content"] = content.decode("utf-8")
        except ValueError:  # torn or foreign (UnicodeDecodeError is one too)
            return None
        return render

    def put(self, key: str, render: dict[str, Any]) -> None:
        """One line of JSON (the page's toc, title, anchors and links, and the length of the
        HTML in bytes: json.dumps writes no newline), then the HTML."""
        try:
            content = render["content"].encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: the page is not kept
            return
        rest = {k: v for k, v in render.items() if k != "content"}
        head = {"format": RENDER_CACHE_FORMAT, "length": len(content), **rest}
        line = json.dumps(head, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        keep_file(self._path(key), line + b"\n" + content, "render")

    def prune(self) -> int:
        """Removes the renders of pages this process did not build (and the files of the first
        format, one JSON document a page); how many."""
        return prune_folder(self.folder, ".render", self.used, stale=(".json",))


def keep_file(path: Path, text: str | bytes, what: str) -> bool:
    """Writes one cache file atomically (a build killed while writing leaves no torn file);
    a folder that cannot be written (read-only, full) only means the page is not kept
    (False)."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temp.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
        os.replace(temp, path)
    except (OSError, UnicodeEncodeError) as exc:  # the site is built anyway
        log.debug("sweeper: the %s of %s was not kept (%s)", what, path.name, exc)
        return False
    finally:
        with contextlib.suppress(OSError):
            temp.unlink(missing_ok=True)
    return True


def prune_folder(folder: Path, suffix: str, used: set[str], stale: tuple[str, ...] = ()) -> int:
    """Removes the files ending in ``suffix`` whose stem is not in ``used``, and those ending in
    any of ``stale`` (an older format's), in one pass over the folder; how many."""
    removed = 0
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            stem, dot, ext = entry.name.rpartition(".")
            if not dot or not entry.is_file():
                continue
            if (f".{ext}" == suffix and stem not in used) or f".{ext}" in stale:
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
                    removed += 1
    return removed


_ACTIVE: RenderCache | None = None
# The links the page being rendered resolved: (its File, [(link, what it became)]).
_RESOLVING: tuple[Any, list[tuple[str, str]]] | None = None


def _restore(page: Any, render: dict[str, Any], config: Any, files: Any) -> bool:
    """Puts a kept render on ``page`` if its links resolve as they did; whether it did."""
    from mkdocs.structure.pages import _RelativePathTreeprocessor

    links = _RelativePathTreeprocessor(page.file, files, config)
    with _quiet() as said:
        for url, resolved in render["links"]:
            if links.path_to_url(url) != resolved:
                return False
    if said.said:
        return False
    page.content = render["content"]
    page.toc = _table_of_contents(render["toc"])
    page._title_from_render = render["title"]
    page.present_anchor_ids = set(render["anchors"])
    if logging.getLogger("mkdocs.structure.pages").getEffectiveLevel() > logging.DEBUG:
        page.links_to_anchors = links.links_to_anchors
    return True


def use_render_cache(folder: Path, config: Any) -> bool:
    """Keep each Markdown page's render in ``folder`` from now on (the same cache again for the
    same folder: mkdocs-static-i18n configures each language's build anew). False where the
    renders cannot be kept (an extension that reads other files, a MkDocs this was not written
    against)."""
    global _ACTIVE
    try:
        import mkdocs
        from mkdocs.structure import pages as mkdocs_pages
    except ImportError:
        return False
    if not mkdocs.__version__.startswith("1.6."):  # what Page.render sets was read off 1.6
        return False
    page_class = getattr(mkdocs_pages, "Page", None)
    processor = getattr(mkdocs_pages, "_RelativePathTreeprocessor", None)
    original = getattr(page_class, "render", None)
    resolve = getattr(processor, "path_to_url", None)
    if original is None or resolve is None:
        return False
    salt = salt_of(config)
    if salt is None:
        _ACTIVE = None
        return False
    if not getattr(original, "_sweeper_cached", False):

        def path_to_url(self: Any, url: str) -> str:
            resolved = resolve(self, url)
            if _RESOLVING is not None and self.file is _RESOLVING[0]:
                _RESOLVING[1].append((url, resolved))
            return resolved

        def render(self: Any, config: Any, files: Any) -> None:
            global _RESOLVING
            cache = _ACTIVE
            if cache is None or self.markdown is None or not self.file.src_uri.endswith(".md"):
                original(self, config, files)
                return
            key = page_key(self, cache.salt)
            cache.used.add(key)
            kept = cache.get(key)
            if kept is not None and _restore(self, kept, config, files):
                cache.hits += 1
                _name_render(self, key, kept["links"])
                return
            cache.misses += 1
            links: list[tuple[str, str]] = []
            _RESOLVING = (self.file, links)
            try:
                with _listening() as said:
                    original(self, config, files)
            finally:
                _RESOLVING = None
            if said.said:  # said again by every build: not kept
                return
            _name_render(self, key, links)
            cache.put(
                key,
                {
                    "content": self.content,
                    "toc": _toc(self.toc),
                    "title": self._title_from_render,
                    "anchors": sorted(self.present_anchor_ids or ()),
                    "links": links,
                },
            )

        path_to_url._sweeper_cached = True  # type: ignore[attr-defined]
        render._sweeper_cached = True  # type: ignore[attr-defined]
        processor.path_to_url = path_to_url  # type: ignore[union-attr]
        page_class.render = render  # type: ignore[union-attr]
    if _ACTIVE is None or _ACTIVE.folder != folder or _ACTIVE.salt != salt:
        _ACTIVE = RenderCache(folder, salt)
    return True


def active_render_cache() -> RenderCache | None:
    return _ACTIVE


# The attribute of a page that names its render (:func:`rendered_as`).
RENDERED_ATTR = "_sweeper_rendered"


def _name_render(page: Any, key: str, links: list[Any]) -> None:
    """A page's render is a function of its key (the config, the page and its Markdown) and of
    how its links resolved: the sha256 of both names it, while the page still holds the content
    and Markdown of that render."""
    name = hashlib.sha256(
        json.dumps([key, links], ensure_ascii=False, separators=(",", ":")).encode(
            "utf-8", errors="surrogatepass"
        )
    ).hexdigest()
    setattr(page, RENDERED_ATTR, (name, page.content, page.markdown))


def rendered_as(page: Any) -> str | None:
    """The name of the render that made ``page.content`` from ``page.markdown`` in this build
    (kept, or rendered without a word said), while the page holds both as they came out of it
    (a plugin that changed either since gets None); the theme's HTML cache keys a page by it
    instead of hashing the page's HTML and Markdown again."""
    held = vars(page).get(RENDERED_ATTR)
    if held is None:
        return None
    name, content, markdown = held
    return name if page.content is content and page.markdown is markdown else None
