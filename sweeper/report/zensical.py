"""The report site built with Zensical (Material for MkDocs' successor) instead of MkDocs.

::

    build(Path("site-zensical"))                      # traces/ -> site-zensical/ (en) + zh/
    python -m sweeper.report.zensical --out site-zensical

Zensical reads mkdocs.yml but has neither mkdocs-static-i18n nor sweeper's MkDocs plugin, so
the work they do inside ``mkdocs build`` is done here beforehand, in a work folder
(``.cache/sweeper/zensical/`` by default):

- the report pages are generated from the trace sets (:func:`sweeper.report.site.generate_pages`,
  with the same page cache as the plugin) and the chart script, its stylesheet and the Vega bundle
  are copied in as static files;
- each language is a docs tree of its own (``en/docs``, ``zh/docs``: ``page.zh.md`` becomes
  ``page.md``, a page without a Chinese version falls back to the English one, as the i18n
  plugin's ``fallback_to_default`` does) with a config of its own (``mkdocs.en.yml``,
  ``mkdocs.zh.yml``: the project's mkdocs.yml with that language, the translated navigation, the
  generated pages in it, the language links), built into ``out_dir`` and ``out_dir/zh/``: the
  same addresses as the MkDocs site, and one search index per language;
- a small script (``sweeper-zensical.js``, loaded before the chart script) makes the language
  links land on the same page in the other language: the chart script reads the site root from
  the page, which here is the root of the page's language;
- each notebook of the docs is executed and converted to a Markdown page with its outputs
  (what mkdocs-jupyter does inside ``mkdocs build``), cached in ``.cache/sweeper/notebooks/``
  (:mod:`sweeper.report.zensical_notebook`).

The two Zensical builds run at once, each in a process group of its own, stopped (SIGTERM, then
SIGKILL) when the build is interrupted; the site is filled in a folder beside ``out_dir`` and
swapped in by renames, so an interrupted build leaves the site before in place.

What this does not do (Zensical 0.0.x has no equivalent; see docs/site.md): mike's version
selector, ``zensical serve`` regenerating the pages when a trace set lands. The ``--strict``
checks of the sweeper plugin are :func:`build`'s own (``strict=True``, the plugin's own
:func:`sweeper.report.site.strict_problems`: a trace set left out of the site, a study without
a page; and a notebook that fails), with ``zensical build --strict`` for the links.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sweeper.errors import SweeperError
from sweeper.i18n import DEFAULT_LANGUAGE, LANGUAGES
from sweeper.report import site
from sweeper.report.mkdocs_plugin import (
    ASSETS_DIR,
    ASSETS_URL,
    CHART_SCRIPT,
    PAGE_CACHE,
    STYLESHEET,
    VEGA_BUNDLE,
    vega_bundle,
)
from sweeper.report.zensical_notebook import (
    NOTEBOOK_SUFFIX,
    nav_notebooks,
    notebook_links,
    notebook_markdown,
    notebook_pages,
)
from sweeper.study.server import parent_death_signal

__all__ = ["build", "build_site", "notebook_links", "notebook_markdown", "notebook_pages"]

log = logging.getLogger("sweeper.report.zensical")

ROOT = Path(__file__).resolve().parents[2]
WORK_DIR = Path(".cache") / "sweeper" / "zensical"
LANGUAGE_SCRIPT = "sweeper-zensical.js"
SITE_MARKER = ".sweeper-zensical"
# The suffix of the folders a build fills beside the site before it swaps them in.
_TEMPORARY = ".sweeper-tmp"
# The plugins Zensical does not have: their work is done here, or is listed as missing.
DROPPED_PLUGINS = ("sweeper", "i18n", "mkdocs-jupyter")
# Executed notebooks, beside mkdocs.yml like the page cache (a build in a fresh work folder, as
# the tests make, does not execute them again).
NOTEBOOK_CACHE = Path(".cache") / "sweeper" / "notebooks"
DEFAULT_SITE_URL = "http://127.0.0.1:8000/"

# Runs before sweeper-charts.js: a click on a language link goes to the same page in the other
# language with a full page load. Each language is a site of its own here, so the site root is
# the page's own root less its language prefix.
_LANGUAGE_JS = """\
/* sweeper (Zensical build): the language links go to the same page in the other language. */
(function () {
  "use strict";
  var CURRENT = %(current)s;
  var PREFIXES = %(prefixes)s;
  var languageRoot = null;
  function findLanguageRoot() {
    if (languageRoot) return languageRoot;
    var config = document.getElementById("__config");
    if (!config) return null;
    try {
      languageRoot = new URL(JSON.parse(config.textContent).base, location.href).pathname;
    } catch (e) { languageRoot = null; }
    if (languageRoot && languageRoot.slice(-1) !== "/") languageRoot += "/";
    return languageRoot;
  }
  findLanguageRoot();
  window.addEventListener("click", function (event) {
    var link = event.target && event.target.closest ? event.target.closest("a[hreflang]") : null;
    if (!link || event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey) return;
    var lang = link.getAttribute("hreflang");
    var root = findLanguageRoot();
    if (!(lang in PREFIXES) || !root || location.pathname.indexOf(root) !== 0) return;
    var siteRoot = root.slice(0, root.length - PREFIXES[CURRENT].length);
    event.preventDefault();
    event.stopImmediatePropagation();
    location.assign(siteRoot + PREFIXES[lang] + location.pathname.slice(root.length));
  }, true);
})();
"""


@dataclass
class BuildResult:
    """What :func:`build` made: the site folder, the configs it built, the time each language's
    Zensical build took, and the problems a strict MkDocs build would fail on."""

    site_dir: Path
    configs: dict[str, Path]
    seconds: dict[str, float] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    log: str = ""


class _Loader(yaml.SafeLoader):
    """mkdocs.yml's tags: ``!ENV`` resolved, ``!!python/...`` kept as written (Zensical loads
    the config with PyYAML's full loader, which builds them)."""


class _Tagged:
    def __init__(self, tag: str, node: yaml.Node) -> None:
        self.tag = tag
        self.node = node


def _env(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        names, default = [loader.construct_scalar(node)], None
    elif isinstance(node, yaml.SequenceNode):
        values = [loader.construct_object(child) for child in node.value]
        names, default = values[:-1] if len(values) > 1 else values, values[-1]
        if len(values) == 1:
            default = None
    else:
        raise SweeperError(f"mkdocs.yml: !ENV takes a name or a list, not {node.id}")
    for name in names:
        if str(name) in os.environ:
            return yaml.safe_load(os.environ[str(name)])
    return default


def _python(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> _Tagged:
    return _Tagged("tag:yaml.org,2002:python/" + suffix, node)


_Loader.add_constructor("!ENV", _env)
_Loader.add_multi_constructor("tag:yaml.org,2002:python/", _python)


class _Dumper(yaml.SafeDumper):
    pass


def _represent_tagged(dumper: yaml.SafeDumper, data: _Tagged) -> yaml.Node:
    node = copy.copy(data.node)
    node.tag = data.tag
    return node


_Dumper.add_representer(_Tagged, _represent_tagged)


def read_config(path: Path) -> dict[str, Any]:
    """The project's mkdocs.yml, environment variables resolved."""
    try:
        with path.open(encoding="utf-8") as fh:
            config = yaml.load(fh, Loader=_Loader)  # a SafeLoader subclass
    except OSError as exc:
        raise SweeperError(f"cannot read the site config {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise SweeperError(f"{path} is not valid YAML: {exc}") from exc
    if not isinstance(config, dict):
        raise SweeperError(f"{path} does not hold a mapping of settings")
    return config


def _i18n_options(config: Mapping[str, Any]) -> dict[str, Any]:
    for plugin in config.get("plugins") or []:
        if isinstance(plugin, dict) and "i18n" in plugin:
            return dict(plugin["i18n"] or {})
    return {}


def _languages(config: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Each built language's settings of the i18n plugin (name, nav translations...)."""
    found = {
        str(lang.get("locale")): dict(lang)
        for lang in _i18n_options(config).get("languages") or []
        if isinstance(lang, dict) and lang.get("build", True)
    }
    return {lang: found.get(lang, {"locale": lang, "name": lang}) for lang in LANGUAGES}


def prefix(lang: str) -> str:
    """Where a language lives under the site root: ``""`` for English, ``zh/`` for Chinese."""
    return "" if lang == DEFAULT_LANGUAGE else f"{lang}/"


def _translated(path: str, lang: str) -> str | None:
    """``page.zh.md`` -> ``page.md`` for ``zh``; None for another language's page."""
    name = Path(path).name
    for other in LANGUAGES[1:]:
        marker = f".{other}."
        if marker in name:
            if other != lang:
                return None
            return str(Path(path).with_name(name.replace(marker, ".", 1)))
    return path


# A Markdown link to a page of one language: ](page.zh.md) or ](../x/index.zh.md#anchor).
_OTHER_LANGUAGES = "|".join(LANGUAGES[1:])
_LANGUAGE_LINK = re.compile(rf"\]\(([^()\s]*?)\.({_OTHER_LANGUAGES})\.md((?:#[^()\s]*)?)\)")


def language_links(text: str) -> str:
    """Links to ``page.zh.md`` made links to ``page.md``: in a language's own tree that is the
    page of the same language (the i18n plugin resolves them inside ``mkdocs build``)."""
    return _LANGUAGE_LINK.sub(r"](\1.md\3)", text)


def language_tree(files: Mapping[str, bytes], lang: str) -> dict[str, bytes]:
    """The files of one language's docs tree: its own version of each page, else the default
    language's (``fallback_to_default``); files of another language are left out."""
    tree: dict[str, bytes] = {}
    own: dict[str, bytes] = {}
    for path, data in files.items():
        target = _translated(path, lang)
        if target is None:
            continue
        if target.endswith(".md"):
            data = language_links(data.decode("utf-8")).encode("utf-8")
        (own if target != path else tree)[target] = data
    tree.update(own)
    return tree


def _docs_files(docs_dir: Path) -> dict[str, bytes]:
    """The hand-written docs (generated folders and notebooks left out)."""
    files: dict[str, bytes] = {}
    for path in sorted(docs_dir.rglob("*")):
        relative = path.relative_to(docs_dir)
        if not path.is_file() or relative.parts[0] in site.GENERATED_DIRS:
            continue
        if path.suffix == NOTEBOOK_SUFFIX or any(p.startswith(".") for p in relative.parts):
            continue
        files[relative.as_posix()] = path.read_bytes()
    return files


def _translate_nav(nav: list[Any], titles: Mapping[str, str]) -> list[Any]:
    out: list[Any] = []
    for item in nav:
        if isinstance(item, dict) and len(item) == 1:
            title, value = next(iter(item.items()))
            if isinstance(value, list):
                value = _translate_nav(value, titles)
            out.append({titles.get(title, title): value})
        else:
            out.append(item)
    return out


def language_config(
    config: Mapping[str, Any],
    lang: str,
    docs_dir: Path,
    site_dir: Path,
    site_url: str,
    generated: list[str],
    notebooks: Iterable[str] = (),
) -> dict[str, Any]:
    """One language's Zensical config: the project's with that language's docs, site folder,
    address, theme language, navigation and language links; the plugins Zensical lacks dropped.
    ``notebooks``: the notebooks made Markdown pages (``x.md`` for ``x.ipynb``); the nav entry
    of any other notebook is left out."""
    languages = _languages(config)
    out = copy.deepcopy(dict(config))
    root_url = site_url if site_url.endswith("/") else site_url + "/"
    out["docs_dir"] = str(docs_dir)
    out["site_dir"] = str(site_dir)
    out["site_url"] = root_url + prefix(lang)
    settings = languages[lang]
    if settings.get("site_name"):
        out["site_name"] = settings["site_name"]
    theme = dict(out.get("theme") or {})
    theme["language"] = lang
    out["theme"] = theme
    plugins = []
    for plugin in out.get("plugins") or []:
        name = next(iter(plugin)) if isinstance(plugin, dict) else plugin
        if name not in DROPPED_PLUGINS:
            plugins.append(plugin)
    out["plugins"] = plugins
    extra = dict(out.get("extra") or {})
    extra.pop("version", None)  # mike's selector: no versions.json beside a Zensical build
    # Relative to this language's root (Material fetches <link>/sitemap.xml of each one).
    up = "../" * prefix(lang).count("/")
    extra["alternate"] = [
        {
            "name": languages[other].get("name", other),
            "link": (up + prefix(other)) or "./",
            "lang": other,
        }
        for other in LANGUAGES
    ]
    out["extra"] = extra
    out["extra_css"] = [*(out.get("extra_css") or []), f"{ASSETS_URL}/{STYLESHEET}"]
    out["extra_javascript"] = [
        *(out.get("extra_javascript") or []),
        f"{ASSETS_URL}/{VEGA_BUNDLE}",
        f"{ASSETS_URL}/{LANGUAGE_SCRIPT}",
        f"{ASSETS_URL}/{CHART_SCRIPT}",
    ]
    nav = out.get("nav")
    if isinstance(nav, list):
        nav = nav_notebooks(copy.deepcopy(nav), set(notebooks))
        if generated and not site.extend_nav(nav, generated):
            log.info(
                "sweeper: runs/index.md is not in the nav; run pages are reachable from the index only"
            )
        if lang != DEFAULT_LANGUAGE:
            nav = _translate_nav(nav, settings.get("nav_translations") or {})
        out["nav"] = nav
    return out


def _write_if_changed(path: Path, data: bytes) -> bool:
    if path.is_file() and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return True


def _sync_tree(folder: Path, files: Mapping[str, bytes]) -> None:
    """``folder`` holds exactly ``files``; unchanged files are not touched (Zensical's cache
    keeps them), files no longer made are removed."""
    for relative, data in files.items():
        _write_if_changed(folder / relative, data)
    wanted = {folder / p for p in files}
    if folder.is_dir():
        for path in sorted(folder.rglob("*"), reverse=True):
            if path.is_file() and path not in wanted:
                path.unlink()
            elif path.is_dir() and not any(path.iterdir()):
                path.rmdir()


def _assets(lang: str) -> dict[str, bytes]:
    prefixes = {other: prefix(other) for other in LANGUAGES}
    script = _LANGUAGE_JS % {"current": _js(lang), "prefixes": _js(prefixes)}
    return {
        f"{ASSETS_URL}/{CHART_SCRIPT}": (ASSETS_DIR / CHART_SCRIPT).read_bytes(),
        f"{ASSETS_URL}/{STYLESHEET}": (ASSETS_DIR / STYLESHEET).read_bytes(),
        f"{ASSETS_URL}/{VEGA_BUNDLE}": vega_bundle().read_bytes(),
        f"{ASSETS_URL}/{LANGUAGE_SCRIPT}": script.encode("utf-8"),
    }


def _js(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def prepare(
    work_dir: Path,
    *,
    traces_dir: Path,
    config_file: Path,
    site_url: str,
) -> tuple[dict[str, Path], list[str]]:
    """Write each language's docs tree and config under ``work_dir``; returns the configs by
    language and the problems a strict build fails on (a trace set left out of the site)."""
    site.check_traces_dir(traces_dir)
    config = read_config(config_file)
    project = config_file.resolve().parent
    docs_dir = project / str(config.get("docs_dir", "docs"))
    pages, problems = site.generate_site(
        traces_dir,
        project / PAGE_CACHE,
        directory_urls=bool(config.get("use_directory_urls", True)),
    )
    files = _docs_files(docs_dir)
    try:
        notebooks = notebook_pages(docs_dir, project / NOTEBOOK_CACHE)
    except SweeperError as exc:  # the rest of the site is built; a strict build fails
        problems.append(f"{exc} (the notebook page is left out)")
        notebooks = {}
    files.update(notebooks)
    files.update({path: text.encode("utf-8") for path, text in pages.items()})
    for page in [p for p in files if p.endswith(".md") and p not in notebooks]:
        files[page] = notebook_links(files[page].decode("utf-8"), notebooks).encode("utf-8")
    generated = site.generated_nav(pages) if pages else []
    configs: dict[str, Path] = {}
    for lang in LANGUAGES:
        tree = language_tree(files, lang)
        tree.update(_assets(lang))
        lang_docs = work_dir / lang / "docs"
        _sync_tree(lang_docs, tree)
        # Relative to the config: Zensical 0.0.73 panics on absolute folders.
        lang_config = language_config(
            config,
            lang,
            Path(lang) / "docs",
            Path(lang) / "site",
            site_url,
            generated,
            notebooks=[p for p in notebooks if p.endswith(".md")],
        )
        path = work_dir / f"mkdocs.{lang}.yml"
        header = (
            f"# Generated by sweeper.report.zensical from {config_file}: edits are overwritten.\n"
        )
        text = header + yaml.dump(lang_config, Dumper=_Dumper, allow_unicode=True, sort_keys=False)
        _write_if_changed(path, text.encode("utf-8"))
        configs[lang] = path
    return configs, problems


def check_out_dir(out_dir: Path) -> Path:
    """``out_dir`` when a build may replace it: missing, empty, or a site built here before."""
    if out_dir.exists():
        if not out_dir.is_dir():
            raise SweeperError(f"{out_dir} is not a folder: choose another output folder")
        if any(out_dir.iterdir()) and not (out_dir / SITE_MARKER).exists():
            raise SweeperError(
                f"{out_dir} exists and is not a site built by sweeper (no {SITE_MARKER} in it): "
                "move it away or choose another output folder; it is replaced by every build"
            )
    return out_dir


def _assemble(out_dir: Path, built: Mapping[str, Path]) -> None:
    """Each language's build copied to its place in a folder beside ``out_dir`` (the marker
    written first: an interrupted copy leaves a folder the next build knows as its own), then
    swapped in by renames: ``out_dir`` is the site before or the site after, never half of one.
    What an interrupted build left beside it is removed first."""
    check_out_dir(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    for leftover in out_dir.parent.glob(f".{out_dir.name}.*{_TEMPORARY}"):
        if (leftover / SITE_MARKER).exists() or not any(leftover.iterdir()):
            shutil.rmtree(leftover, ignore_errors=True)
    new = Path(
        tempfile.mkdtemp(prefix=f".{out_dir.name}.new.", suffix=_TEMPORARY, dir=out_dir.parent)
    )
    old: Path | None = None
    try:
        os.chmod(new, 0o755)  # mkdtemp's folder is private; a site is as readable as the others
        (new / SITE_MARKER).write_text(
            "Built by sweeper.report.zensical: replaced by every build.\n"
        )
        for lang in sorted(built, key=lambda lg: len(prefix(lg))):
            shutil.copytree(built[lang], new / prefix(lang), dirs_exist_ok=True)
        if out_dir.exists():
            old = new.with_name(new.name.replace(".new.", ".old.", 1))
            out_dir.rename(old)
        new.rename(out_dir)
    except BaseException:
        if old is not None and not out_dir.exists():
            old.rename(out_dir)  # the site before, back in its place
            old = None
        shutil.rmtree(new, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


# After SIGTERM to a Zensical build's process group, how long it has before SIGKILL.
STOP_GRACE_S = 5.0


class _Children:
    """The Zensical processes of a build, each in a process group of its own (as the study's
    server is, :mod:`sweeper.study.server`); on leaving, normally or by an exception (Ctrl-C,
    SIGTERM), each group still running gets SIGTERM, then SIGKILL after :data:`STOP_GRACE_S`,
    and is waited for: no Zensical outlives the build."""

    def __init__(self) -> None:
        self.running: list[tuple[str, subprocess.Popen[str], float]] = []

    def __enter__(self) -> _Children:
        return self

    def start(self, lang: str, argv: list[str], *, cwd: Path, env: Mapping[str, str]) -> None:
        # The interrupt signals held while the process starts and is listed: one that arrives
        # in between is handled once it is in the list, so it is stopped too.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, _INTERRUPTS)
        try:
            process = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,  # its own process group: stopped as one
                preexec_fn=_in_child(os.getpid(), held),
            )
            self.running.append((lang, process, time.perf_counter()))
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        live = [p for _, p, _ in self.running if p.poll() is None]
        for process in live:
            _signal_group(process.pid, signal.SIGTERM)
            _signal_group(process.pid, signal.SIGCONT)  # a suspended one (Ctrl-Z) too
        deadline = time.monotonic() + STOP_GRACE_S
        for process in live:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
        for process in live:
            _signal_group(process.pid, signal.SIGKILL)  # what is left of the group
            process.wait()
        for _, process, _ in self.running:
            if process.stdout is not None:
                process.stdout.close()


_INTERRUPTS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def _in_child(parent: int, mask: Iterable[int]) -> Callable[[], None]:
    """In the child, before exec: the signal mask of before :meth:`_Children.start` (not the
    interrupts held), SIGTERM when the build's process dies however it dies (``prctl``, as the
    study's server has), and an exit at once if it died already."""

    def arm() -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        parent_death_signal()
        if os.getppid() != parent:
            os._exit(1)

    return arm


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


@contextlib.contextmanager
def _interrupt_on_termination() -> Iterator[None]:
    """While Zensical builds, SIGTERM and SIGHUP do what Ctrl-C does (KeyboardInterrupt, as
    :func:`sweeper.study.runner.interrupt_on_termination` does for a study): the build's
    processes are stopped on the way out. Only in the main thread (where signals are handled)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, interrupt) for sig in _INTERRUPTS - {signal.SIGINT}}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def zensical_command() -> list[str]:
    """How to run Zensical: the ``zensical`` module of this Python (a clear error without it)."""
    try:
        import zensical  # noqa: F401
    except ImportError as exc:
        raise SweeperError(
            "Zensical is not installed in this environment: "
            f"{sys.executable} -m pip install 'zensical==0.0.73' (or make site-zensical)"
        ) from exc
    return [sys.executable, "-m", "zensical"]


def build(
    out_dir: Path,
    *,
    traces_dir: Path | None = None,
    config_file: Path | None = None,
    work_dir: Path | None = None,
    site_url: str | None = None,
    strict: bool = False,
) -> Path:
    """Build the site with Zensical into ``out_dir`` (English) and ``out_dir/zh/`` (Chinese);
    returns ``out_dir``. Raises :class:`SweeperError` when Zensical fails; with ``strict``, also
    on a warning of Zensical's (``zensical build --strict``: a link to a missing page) and on
    what :func:`sweeper.report.site.strict_problems` finds (the site is built all the same)."""
    return build_site(
        out_dir,
        traces_dir=traces_dir,
        config_file=config_file,
        work_dir=work_dir,
        site_url=site_url,
        strict=strict,
    ).site_dir


def build_site(
    out_dir: Path,
    *,
    traces_dir: Path | None = None,
    config_file: Path | None = None,
    work_dir: Path | None = None,
    site_url: str | None = None,
    strict: bool = False,
) -> BuildResult:
    """:func:`build`, with what it made and how long each language took."""
    config_file = (config_file or ROOT / "mkdocs.yml").resolve()
    project = config_file.parent
    traces_dir = traces_dir or Path(os.environ.get("SWEEPER_TRACES_DIR") or project / "traces")
    work_dir = (work_dir or project / WORK_DIR).resolve()
    site_url = site_url or os.environ.get("SITE_URL") or DEFAULT_SITE_URL
    out_dir = check_out_dir(out_dir.resolve())  # before the build, not after it
    command = zensical_command()
    configs, problems = prepare(
        work_dir, traces_dir=traces_dir, config_file=config_file, site_url=site_url
    )
    result = BuildResult(out_dir, configs, problems=problems)
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    logs: list[str] = []
    failed = []
    with _interrupt_on_termination(), _Children() as children:
        for lang, path in configs.items():
            children.start(
                lang,
                # --strict: Zensical's own checks too (a link to a page that does not exist).
                [*command, "build", "-f", str(path), *(["--strict"] if strict else [])],
                cwd=path.parent,
                env=env,
            )
        for lang, process, started in children.running:
            output, _ = process.communicate()
            result.seconds[lang] = time.perf_counter() - started
            logs.append(f"[{lang}] {output.strip()}")
            if process.returncode != 0:
                failed.append(f"{lang} (exit {process.returncode})")
    result.log = "\n".join(logs)
    if failed:
        raise SweeperError(
            f"zensical build failed for {', '.join(failed)}; its output:\n{result.log}"
        )
    with _interrupt_on_termination():  # an interrupted copy leaves the site before in place
        _assemble(out_dir, {lang: work_dir / lang / "site" for lang in configs})
    for problem in problems:
        log.warning("sweeper: %s", problem)
    if strict and problems:
        raise SweeperError(
            f"{len(problems)} problem(s) (the site in {out_dir} was built): " + "; ".join(problems)
        )
    return result


def main(argv: list[str] | None = None) -> int:
    """``python -m sweeper.report.zensical``: build the site with Zensical."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m sweeper.report.zensical",
        description="Build the report site (en + zh) with Zensical instead of MkDocs.",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("site-zensical"), help="site folder (site-zensical)"
    )
    parser.add_argument(
        "--traces", type=Path, default=None, help="trace sets ($SWEEPER_TRACES_DIR, else traces)"
    )
    parser.add_argument(
        "--config", type=Path, default=None, help="the MkDocs config to start from (mkdocs.yml)"
    )
    parser.add_argument(
        "--work", type=Path, default=None, help=f"work folder (<project>/{WORK_DIR})"
    )
    parser.add_argument(
        "--site-url",
        default=None,
        help=f"the address it is served from ($SITE_URL, else {DEFAULT_SITE_URL})",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 on what mkdocs build --strict fails on (a trace set left out, a study "
        "without a page, a failing notebook) or a broken link",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    started = time.perf_counter()
    try:
        result = build_site(
            args.out,
            traces_dir=args.traces,
            config_file=args.config,
            work_dir=args.work,
            site_url=args.site_url,
            strict=args.strict,
        )
    except SweeperError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    languages = ", ".join(f"{lang} {seconds:.1f} s" for lang, seconds in result.seconds.items())
    print(
        f"site built with Zensical in {result.site_dir} ({time.perf_counter() - started:.1f} s; "
        f"zensical build: {languages})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
