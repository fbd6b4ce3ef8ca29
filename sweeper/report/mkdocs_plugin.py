"""The ``sweeper`` MkDocs plugin: report pages generated inside every ``mkdocs build`` / ``serve``.

::

    plugins:
      - sweeper:
          traces_dir: traces        # relative to mkdocs.yml

On each build it reads every trace set of ``traces_dir`` and writes the report pages (en + zh),
the index and the comparison pages into generated folders of the docs folder (``runs/``,
``compare/``; see :mod:`sweeper.report.site`), adds them to the navigation after ``runs/index.md``,
serves the chart script, its CSS and the Vega bundle from the site itself, and tells
``mkdocs serve`` to watch ``traces_dir`` so a new or changed trace set regenerates its page.

It also carries the small fixes the site stack needs (SITE_NOTES.md):

- ``.ipynb`` counts as a documentation page, so mkdocs-static-i18n hands notebooks to
  mkdocs-jupyter instead of copying them as raw JSON (mkdocs-static-i18n issue 198);
- the language links (header and ``<link rel="alternate">``) point at each language's root,
  and each language folder gets a copy of ``sitemap.xml``: Material fetches
  ``<alternate>/sitemap.xml`` for every alternate link, which 404s for page-level links;
- the i18n plugin's warning that its contextual language link does not survive Material's
  instant navigation is filtered (the language link in ``sweeper-charts.js`` does a full page
  load of the same page in the other language instead), so ``mkdocs build --strict`` passes;
- the i18n plugin's removal of duplicate search entries, quadratic in the entries (most of a
  warm build at 1,000 runs), is replaced by a linear one with the same result
  (:mod:`sweeper.report.search_index`);
- Material's search entries of a page whose HTML, table of contents and meta did not change are
  taken from ``.cache/sweeper/search-entries.json`` instead of parsing the page again;
- a Markdown page whose source, place and links did not change is not converted again: its
  render is taken from ``.cache/sweeper/renders/`` (:mod:`sweeper.report.render_cache`);
- a page whose template context (content, navigation, config...) and templates did not change
  is not rendered by the theme again: its HTML is taken from ``.cache/sweeper/html/``
  (:mod:`sweeper.report.html_cache`).
"""

from __future__ import annotations

import gc
import logging
import os
import time
from pathlib import Path
from typing import Any

import mkdocs.utils
from mkdocs.config import config_options
from mkdocs.config.base import Config
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.plugins import BasePlugin, event_priority
from mkdocs.structure.files import File, Files

from sweeper.i18n import DEFAULT_LANGUAGE, LANGUAGES
from sweeper.report import html_cache, render_cache, search_index, site
from sweeper.store import atomic_write

log = logging.getLogger("mkdocs.plugins.sweeper")

ASSETS_DIR = Path(__file__).parent / "assets"
ASSETS_URL = "assets/sweeper"
CHART_SCRIPT = "sweeper-charts.js"
STYLESHEET = "sweeper.css"
VEGA_BUNDLE = "vega-bundle.js"
NOTEBOOK_EXTENSION = ".ipynb"
# Rendered pages per trace set, beside mkdocs.yml (.cache/ is where mkdocs-jupyter caches too).
PAGE_CACHE = Path(".cache") / "sweeper" / "pages"
# Material's search entries per page (sweeper.report.search_index.EntryCache), beside them.
SEARCH_CACHE = Path(".cache") / "sweeper" / "search-entries.json"
SEARCH_WORDS = SEARCH_CACHE.with_name("search-words.json")
# Each Markdown page's render (sweeper.report.render_cache), one file per page.
RENDER_CACHE = Path(".cache") / "sweeper" / "renders"
# Each page's HTML, the theme's templates rendered (sweeper.report.html_cache).
HTML_CACHE = Path(".cache") / "sweeper" / "html"
_I18N_LOGGERS = (
    "mkdocs.plugins.mkdocs_static_i18n.reconfigure",
    "mkdocs.plugins.mkdocs_static_i18n",
)
_INSTANT_WARNING = "language switcher contextual link is not compatible"


class _DropInstantNavigationWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return _INSTANT_WARNING not in record.getMessage()


_FILTER = _DropInstantNavigationWarning()


def cache_dir() -> Path:
    """Where generated assets are cached between builds: ``$SWEEPER_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/sweeper``, else ``~/.cache/sweeper``."""
    if env := os.environ.get("SWEEPER_CACHE_DIR"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sweeper"


def vega_bundle(folder: Path | None = None) -> Path:
    """vega + vega-lite + vega-embed as one script, built by vl-convert (about 0.9 MB, about 2 s
    to build) and cached per vl-convert version. It declares top-level constants, so it is
    wrapped in a function scope: two scripts on one page must not clash."""
    import vl_convert

    folder = folder or cache_dir()
    version = getattr(vl_convert, "__version__", "unknown")
    path = folder / f"vega-bundle-vl-convert-{version}.js"
    if path.exists():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    # The default snippet assigns vegaEmbed, vegaLite and vega to window (the type stub marks
    # the optional snippet as required).
    bundle = vl_convert.javascript_bundle()  # type: ignore[call-arg]
    text = "(function () {\n" + bundle + "\n})();\n"
    with atomic_write(path) as fh:
        fh.write(text.encode("utf-8"))
    return path


class SweeperPluginConfig(Config):
    traces_dir = config_options.Type(str, default="traces")
    enabled = config_options.Type(bool, default=True)


class SweeperPlugin(BasePlugin[SweeperPluginConfig]):
    def __init__(self) -> None:
        super().__init__()
        self.traces_path: Path | None = None
        # The config the pages were generated for and the pages: mkdocs-static-i18n runs
        # on_config again, on the same config, for each other language it builds.
        self.generated: tuple[MkDocsConfig, dict[str, str]] | None = None

    def on_config(self, config: MkDocsConfig) -> MkDocsConfig:
        extensions: tuple[str, ...] = tuple(mkdocs.utils.markdown_extensions)
        if NOTEBOOK_EXTENSION not in extensions:
            mkdocs.utils.markdown_extensions = (*extensions, NOTEBOOK_EXTENSION)  # type: ignore[assignment]
        for name in _I18N_LOGGERS:
            logger = logging.getLogger(name)
            if _FILTER not in logger.filters:
                logger.addFilter(_FILTER)
        search_index.install(config.plugins)
        search_index.skip_idle_scrub(config.plugins)
        root = Path(config.config_file_path).parent if config.config_file_path else Path.cwd()
        search_index.use_entry_cache(root / SEARCH_CACHE)
        search_index.remember_cuts(root / SEARCH_WORDS, config.plugins)
        render_cache.use_render_cache(root / RENDER_CACHE, config)
        # Once: mkdocs-static-i18n runs on_config again for each other language, and a script
        # listed twice would answer every click twice (a sort undone at once).
        if f"{ASSETS_URL}/{STYLESHEET}" not in config.extra_css:
            config.extra_css.append(f"{ASSETS_URL}/{STYLESHEET}")
        scripts = [str(script) for script in config.extra_javascript]
        for name in (VEGA_BUNDLE, CHART_SCRIPT):
            if f"{ASSETS_URL}/{name}" not in scripts:
                config.extra_javascript.append(f"{ASSETS_URL}/{name}")
        if not self.config.enabled:
            return config
        self.traces_path = (root / self.config.traces_dir).resolve()
        if not self.traces_path.is_dir():
            # `mkdocs build --strict` fails on it; the pages generated before are kept.
            log.warning(
                "sweeper: traces folder %s does not exist: no report page was generated "
                "(set traces_dir or SWEEPER_TRACES_DIR)",
                self.traces_path,
            )
            return config
        if self.generated is not None and self.generated[0] is config:
            # mkdocs-static-i18n building another language: the pages are written, the
            # problems told; only the nav is extended again (the same call, a no-op if kept).
            self._extend_nav(config, self.generated[1])
            return config
        # The runs' reports and pages live until the build ends. They are made with the cyclic
        # garbage collector paused, then set aside from it (frozen, unscanned): otherwise each
        # full collection goes over all of them again while MkDocs builds two thousand pages
        # (a sixth of a warm build's CPU at 1,000 runs). Objects made from here on are collected
        # as before; what a run rendered here leaves in cycles (~150 small objects a run: the
        # render workers collect their own) waits for the next build, which unfreezes.
        gc.unfreeze()
        with site.collector_paused():
            pages = self._generate(config, root)
            gc.freeze()
        self.generated = (config, pages)
        self._extend_nav(config, pages)
        return config

    def _generate(self, config: MkDocsConfig, root: Path) -> dict[str, str]:
        """The report pages generated and written into the docs folder; a strict build's
        problems logged as warnings."""
        assert self.traces_path is not None
        started = time.perf_counter()
        pages, problems = site.generate_site(
            self.traces_path, root / PAGE_CACHE, directory_urls=config.use_directory_urls
        )
        written = site.write_pages(pages, Path(config.docs_dir))
        # benchmarks/site_build.py reads this line: sweeper's share of a build's time.
        log.info(
            "sweeper: generated %d pages in %.2f s (%d written) from %s",
            len(pages),
            time.perf_counter() - started,
            written,
            self.traces_path,
        )
        # A warning through MkDocs' logger: `mkdocs build --strict` fails on it (a trace set
        # left out of the site, findings that failed, a study without a page).
        for problem in problems:
            log.warning("sweeper: %s", problem)
        return pages

    @staticmethod
    def _extend_nav(config: MkDocsConfig, pages: dict[str, str]) -> None:
        if config.nav is not None and not site.extend_nav(config.nav, site.generated_nav(pages)):
            log.info(
                "sweeper: runs/index.md is not in the nav; run pages are reachable from the index only"
            )

    def on_files(self, files: Files, *, config: MkDocsConfig) -> Files:
        bundle = vega_bundle()
        sources = [
            (ASSETS_DIR / CHART_SCRIPT, CHART_SCRIPT),
            (ASSETS_DIR / STYLESHEET, STYLESHEET),
            (bundle, VEGA_BUNDLE),
        ]
        for path, name in sources:
            files.append(
                File(
                    path.name,
                    str(path.parent),
                    config.site_dir,
                    config.use_directory_urls,
                    dest_uri=f"{ASSETS_URL}/{name}",
                )
            )
        return files

    @event_priority(-100)  # after the other plugins set the environment up
    def on_env(self, env: Any, *, config: MkDocsConfig, files: Files) -> Any:
        root = Path(config.config_file_path).parent if config.config_file_path else Path.cwd()
        html_cache.use_html_cache(root / HTML_CACHE, env, config)
        return env

    @event_priority(-50)  # after mkdocs-static-i18n made the links point at this page (50)
    def on_page_context(self, context: Any, *, page: Any, config: MkDocsConfig, nav: Any) -> Any:
        # mkdocs-static-i18n sets the attribute (not the mapping item), and Jinja reads it first.
        for alternate in getattr(config.extra, "alternate", None) or []:
            lang = alternate.get("lang")
            if lang in LANGUAGES:
                alternate["link"] = "./" if lang == DEFAULT_LANGUAGE else f"{lang}/"
        return context

    @event_priority(-200)  # after mkdocs-static-i18n built the other languages (-100)
    def on_post_build(self, *, config: MkDocsConfig) -> None:
        site_dir = Path(config.site_dir)
        for name in ("sitemap.xml", "sitemap.xml.gz"):
            source = site_dir / name
            for lang in LANGUAGES:
                target = site_dir / lang / name
                if lang != DEFAULT_LANGUAGE and source.exists() and target.parent.is_dir():
                    target.write_bytes(source.read_bytes())
        # Each cache written back (the search entries) or pruned to this build's pages (the
        # renders, the HTML), and its counts logged: benchmarks/site_build.py reads these lines.
        html = html_cache.active_html_cache()
        caches = [
            (search_index.active_entry_cache(), "save",
             "sweeper: search entries of %d pages from the cache, %d pages indexed"),
            (search_index.active_word_cuts(), "save",
             "sweeper: %d Chinese phrases cut as before, %d cut by jieba"),
            (render_cache.active_render_cache(), "prune",
             "sweeper: %d pages from the render cache, %d rendered"),
            (html, "prune",
             "sweeper: HTML of %d pages from the cache, %d rendered by the theme"),
        ]  # fmt: skip
        for cache, finish, line in caches:
            if cache is not None and cache.hits + cache.misses:
                getattr(cache, finish)()
                log.info(line, cache.hits, cache.misses)
        if html is not None:
            for why in sorted(html.opaque):
                log.info("sweeper: a page's HTML was not kept: its context holds %s", why)

    def on_serve(self, server: Any, *, config: MkDocsConfig, builder: Any) -> Any:
        if self.traces_path is not None:
            self.traces_path.mkdir(parents=True, exist_ok=True)
            server.watch(str(self.traces_path))
        return server
