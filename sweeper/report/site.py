"""The build: every trace set in ``traces/`` -> report pages (en + zh), the index and comparisons.

::

    pages = generate_pages(Path("traces"))           # {"runs/<id>/index.md": "...", ...}
    write_pages(pages, Path("docs"))                  # only changed files are written

The MkDocs plugin (:mod:`sweeper.report.mkdocs_plugin`) calls these inside every ``mkdocs build`` /
``serve``; ``sweeper build`` calls them to write the same Markdown for people who want the files.

Layout (suffix structure of mkdocs-static-i18n: ``page.md`` is English, ``page.zh.md`` Chinese)::

    runs/index.md, runs/index.zh.md                   every run: GPU, model, engine, date, headline numbers
    runs/<run-id>/index.md, index.zh.md               one report per run
    compare/<model>/index.md, index.zh.md             runs of the same model, overlaid
    runs/<study-id>/index.md, index.zh.md             one page per study (``<traces>/<study-id>/study.json``;
                                                      a study id is a folder of traces/, so never a run id)

A trace set that cannot be read gets an entry on the index naming the file and the problem; the
other runs still publish. Pages are cached per trace set, keyed by its files' sizes and times and
by sweeper's own code and catalogs: in memory (the second language's build and ``mkdocs serve``
rebuilds cost nothing for unchanged runs) and, given a ``cache_dir``, on disk (a later
``mkdocs build`` only renders the runs that changed; about 0.7 s per run otherwise).
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import html
import logging
import multiprocessing as mp
import os
import pickle
import posixpath
import re
import signal
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from functools import cache, partial
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import pandas as pd

from sweeper.errors import SweeperError
from sweeper.findings.levels import level_name, level_rates
from sweeper.i18n import LANGUAGES, fmt_date, fmt_number
from sweeper.report import charts
from sweeper.report.markup import (
    chart_labels,
    esc,
    figure_html,
    front_matter,
    html_table,
    labels_html,
    table,
    tr,
    trn,
)
from sweeper.report.pages import render_run_page
from sweeper.report.run_report import (
    RunReport,
    collect_run,
    engine_title,
    gpu_title,
    model_title,
)
from sweeper.schema import MANIFEST_FILE
from sweeper.store import TraceSet, atomic_write, duplicate_run_ids, load_trace_set
from sweeper.study.model import STUDY_FILE
from sweeper.study.server import parent_death_signal

log = logging.getLogger("sweeper.report.site")

RUNS_DIR = "runs"
COMPARE_DIR = "compare"
GENERATED_DIRS = (RUNS_DIR, COMPARE_DIR)
# One page per (model, GPU), what the navigation lists: runs/groups/<slug>/index.md (a run whose
# id is "groups" keeps its page, runs/groups/index.md).
GROUPS_DIR = f"{RUNS_DIR}/groups"
# Written into each generated folder: only folders carrying it are ever cleaned by sweeper.
SENTINEL = ".sweeper-generated"
_SLUG_MAX = 48


@dataclass
class RunEntry:
    """One folder of ``traces/``: its report data, or the reason it could not be read."""

    folder: Path
    run: RunReport | None = None
    error: str | None = None
    pages: dict[str, str] | None = None
    bug: bool = False  # the error is sweeper's own (an exception no user can fix), not the data's

    def problems(self) -> list[str]:
        """What a strict build fails on: a trace set left out of the site (unreadable, or a page
        sweeper could not make), or findings that failed on a page it made."""
        if self.error:
            what = "no page (a bug in sweeper)" if self.bug else "left out of the site"
            return [f"{self.folder}: {what}: {self.error}"]
        errors = self.run.findings_errors if self.run is not None else []
        return [f"{self.folder}: findings failed: {error}" for error in errors]


# (the folder as an absolute path, fingerprint) -> entry; lets repeated builds in one process skip
# unchanged runs.
_CACHE: dict[Path, tuple[str, RunEntry]] = {}
# The last whole generation, keyed by every folder's fingerprint (index and comparisons included).
_LAST: dict[str, tuple[tuple[tuple[str, str], ...], dict[str, str], list[str]]] = {}
# Group and comparison pages by what makes them (sha256 of the page's kind, language, title and
# its runs' fingerprints); on disk under the page cache's TABLES_DIR too.
_TABLES: dict[str, str] = {}
TABLES_DIR = "tables"


def page_language(path: str) -> str:
    """The language of a generated page, by its suffix (``index.zh.md``: zh)."""
    return next((lg for lg in LANGUAGES[1:] if path.endswith(f".{lg}.md")), LANGUAGES[0])


def page_path(relative: str, lang: str) -> str:
    """``runs/x/index.md`` in ``lang``: the suffix layout of mkdocs-static-i18n."""
    if lang == LANGUAGES[0]:
        return relative
    stem, _, ext = relative.rpartition(".")
    return f"{stem}.{lang}.{ext}"


def check_traces_dir(traces_dir: Path) -> Path:
    """``traces_dir`` when it is a folder; a missing or misspelt one is an error (a build from
    it would replace every page with an empty index)."""
    if not traces_dir.exists():
        raise SweeperError(
            f"traces folder {traces_dir} does not exist: nothing was built, and the pages "
            "generated before are kept (pass --traces with the folder of your trace sets)"
        )
    if not traces_dir.is_dir():
        raise SweeperError(f"traces folder {traces_dir} is not a folder: nothing was built")
    return traces_dir


def candidate_folders(traces_dir: Path) -> list[Path]:
    """Folders of ``traces_dir`` that are (or look like) trace sets: a manifest or request files.
    Dot-folders (a writer's temporary folders) are skipped."""
    if not traces_dir.is_dir():
        return []
    found = []
    for folder in sorted(traces_dir.iterdir()):
        if not folder.is_dir() or folder.name.startswith("."):
            continue
        if (folder / MANIFEST_FILE).exists() or any(folder.glob("requests*.jsonl*")):
            found.append(folder)
    return found


def _fingerprint(folder: Path) -> str:
    digest = hashlib.sha256(_code_fingerprint().encode())
    for path in sorted(folder.iterdir()):
        if path.is_file():
            stat = path.stat()
            digest.update(f"{path.name}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    return digest.hexdigest()


# The whole package, not this folder: a page is made by the findings, the analysis and the facts
# as much as by the report code.
PACKAGE_DIR = Path(__file__).resolve().parents[1]


@cache
def _code_fingerprint() -> str:
    return code_fingerprint(PACKAGE_DIR)


def code_fingerprint(package: Path) -> str:
    """sweeper's own modules and catalogs, in every subpackage: a cached page is stale when any
    of them changes (by name, size or modification time)."""
    digest = hashlib.sha256()
    for path in sorted([*package.rglob("*.py"), *package.rglob("*.po")]):
        stat = path.stat()
        digest.update(f"{path.relative_to(package)}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    return digest.hexdigest()


def _slim(entry: RunEntry) -> RunEntry:
    """What the index and comparisons still need once the pages are rendered (no requests)."""
    if entry.run is None:
        return entry
    ts = entry.run.ts
    slim_ts = TraceSet(path=ts.path, manifest=ts.manifest, requests=[], problems=list(ts.problems))
    run = replace(entry.run, ts=slim_ts, requests=entry.run.requests.iloc[0:0], chart_specs={})
    # The runs tables' headline numbers, computed now and kept with the entry (cached
    # properties, pickled with it): not again from the levels on every build.
    for name in _HEADLINES:
        vars(run)[name] = getattr(entry.run, name)
    return replace(entry, run=run)


_HEADLINES = ("peak", "stream_rate", "request_rate")


def _read_cached(path: Path) -> RunEntry | None:
    try:
        with path.open("rb") as fh:
            entry = pickle.load(fh)
    except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError, TypeError):
        return None  # an unreadable cache entry is rebuilt
    return entry if isinstance(entry, RunEntry) else None


def _write_cached(path: Path, entry: RunEntry) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    for old in path.parent.glob(f"{entry.folder.name}.*.pickle"):
        old.unlink(missing_ok=True)
    with atomic_write(path) as fh:
        pickle.dump(_slim(entry), fh, protocol=pickle.HIGHEST_PROTOCOL)


def _lookup(
    folder: Path, cache_dir: Path | None, fingerprint: str | None = None
) -> tuple[str, Path | None, RunEntry | None]:
    """(fingerprint, the entry's file in the page cache, the cached entry or None); the
    fingerprint is computed unless given."""
    fingerprint = fingerprint or _fingerprint(folder)
    cached = _CACHE.get(folder.absolute())
    if cached is not None and cached[0] == fingerprint:
        return fingerprint, None, cached[1]
    disk = cache_dir / f"{folder.name}.{fingerprint[:20]}.pickle" if cache_dir is not None else None
    entry = _read_cached(disk) if disk is not None and disk.exists() else None
    return fingerprint, disk, entry


def _keep(folder: Path, fingerprint: str, disk: Path | None, entry: RunEntry) -> RunEntry:
    """A rendered entry into the caches: on disk, and in memory without its requests (the
    index, the comparisons and a strict build's problems need only the slim entry)."""
    if disk is not None and entry.run is not None:
        _write_cached(disk, entry)
    slim = _slim(entry)
    _CACHE[folder.absolute()] = (fingerprint, slim)
    return slim


def load_entry(folder: Path, cache_dir: Path | None = None) -> RunEntry:
    """Read one trace set and render its pages; a failure becomes an entry with the error."""
    fingerprint, disk, entry = _lookup(folder, cache_dir)
    if entry is not None:
        _CACHE[folder.absolute()] = (fingerprint, entry)
        return entry
    return _keep(folder, fingerprint, disk, _render_entry(folder))


# Trace sets rendered in worker processes when this many or more need rendering (a cold build):
# each process renders whole runs, so the pages are the same as in one process.
PARALLEL_FROM = 4
MAX_JOBS = 4


def render_jobs() -> int:
    """How many processes render pages: ``$SWEEPER_JOBS``, else the CPUs (at most 4)."""
    given = os.environ.get("SWEEPER_JOBS", "").strip()
    if given:
        try:
            jobs = int(given)
        except ValueError:
            jobs = 0
        if jobs < 1:
            raise SweeperError(
                f"SWEEPER_JOBS={given!r}: give the number of processes that render pages "
                "(1 renders them in the build's own process)"
            )
        return jobs
    return max(1, min(os.cpu_count() or 1, MAX_JOBS))


def _render_slim(folder: Path) -> RunEntry:
    return _slim(_render_entry(folder))


def _render_worker_start() -> None:
    """A render worker ends with the build: Ctrl-C is the build's to handle (it stops the pool),
    and on Linux the kernel sends the worker SIGTERM when the build dies, however it dies. Its
    cyclic garbage collector runs, whatever the build's was doing when it forked."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent_death_signal()
    gc.enable()


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused while many objects that are kept arrive at once
    (the cached reports of a thousand runs: some 400 tracked objects each). Each collection
    would go over all of them again while they pile up, which took two thirds of the time of
    reading them; they hold no cycle to collect, and whatever else is left over is collected
    once the collector runs again."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _render_all(
    folders: list[Path], cache_dir: Path | None, fingerprints: Mapping[Path, str] | None = None
) -> dict[Path, RunEntry]:
    """Every folder's entry: from the caches, or rendered, in ``render_jobs()`` processes when
    enough need it (forked: the modules are already imported). ``fingerprints``: the folders'
    own, where the caller has them."""
    found: dict[Path, RunEntry] = {}
    todo = []
    with collector_paused():
        for folder in folders:
            given = fingerprints.get(folder) if fingerprints is not None else None
            fingerprint, disk, entry = _lookup(folder, cache_dir, given)
            if entry is None:
                todo.append((folder, fingerprint, disk))
            else:
                _CACHE[folder.absolute()] = (fingerprint, entry)
                found[folder] = entry
    jobs = min(render_jobs(), len(todo))
    # Forked only from a process without other threads (under `mkdocs serve` its server and
    # watcher run: a fork there could copy a lock another thread holds).
    forkable = "fork" in mp.get_all_start_methods() and threading.active_count() == 1
    if jobs < 2 or len(todo) < PARALLEL_FROM or not forkable:
        for folder, fingerprint, disk in todo:
            found[folder] = _keep(folder, fingerprint, disk, _render_entry(folder))
        return found
    log.info("sweeper: rendering %d trace sets in %d processes", len(todo), jobs)
    pool = mp.get_context("fork").Pool(jobs, initializer=_render_worker_start)
    try:
        entries = pool.imap(_render_slim, [f for f, _, _ in todo], chunksize=1)
        with collector_paused():  # the workers are forked: only this process's is paused
            for (folder, fingerprint, disk), entry in zip(todo, entries, strict=True):
                found[folder] = _keep(folder, fingerprint, disk, entry)
        pool.close()
    except BaseException:
        pool.terminate()  # Ctrl-C or an error: the workers stop now, not after the queue
        raise
    finally:
        pool.join()
    return found


def _render_entry(folder: Path) -> RunEntry:
    entry = RunEntry(folder)
    try:
        run = collect_run(load_trace_set(folder))
        entry.pages = {
            page_path(f"{RUNS_DIR}/{run.run_id}/index.md", lang): render_run_page(run, lang)
            for lang in LANGUAGES
        }
        run.chart_specs.clear()  # drawn for both languages; not kept in memory
        entry.run = run
    except SweeperError as exc:
        entry.error = str(exc)
        log.info("trace set %s left out of the site: %s", folder, exc)
    except Exception as exc:  # a bug in sweeper must not take the other runs down with it
        entry.error = f"{folder}: {type(exc).__name__}: {exc}"
        entry.bug = True
        log.warning("trace set %s could not be turned into a page: %s", folder, entry.error)
    return entry


def load_entries(traces_dir: Path, cache_dir: Path | None = None) -> list[RunEntry]:
    return _load_entries(candidate_folders(traces_dir), cache_dir)


def _load_entries(
    folders: list[Path], cache_dir: Path | None, fingerprints: Mapping[Path, str] | None = None
) -> list[RunEntry]:
    refused = duplicate_run_ids(folders)  # a second folder of one run id: left out, both named
    found = _render_all([f for f in folders if f not in refused], cache_dir, fingerprints)
    return [RunEntry(f, error=refused[f]) if f in refused else found[f] for f in folders]


# ---------------------------------------------------------------------------------------------
# Index and comparisons


def model_slug(model: str) -> str:
    """A folder name for a model: readable part + a short hash (two names never collide)."""
    readable = re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")[:_SLUG_MAX] or "model"
    return f"{readable}-{hashlib.sha256(model.encode()).hexdigest()[:6]}"


def comparison_groups(runs: Iterable[RunReport]) -> dict[str, list[RunReport]]:
    """Runs grouped by model (only models with two runs or more)."""
    groups: dict[str, list[RunReport]] = {}
    for run in runs:
        groups.setdefault(model_title(run.ts), []).append(run)
    return {
        model: sorted(rs, key=lambda r: r.run_id) for model, rs in groups.items() if len(rs) > 1
    }


def _link(text: str, target: str) -> str:
    return f"[{text}]({quote(target)})"


def _headline_numbers(run: RunReport, lang: str) -> tuple[str, str, str]:
    rates = level_rates(run.ts.manifest)  # a rate run's levels are named by their rate
    peak = run.peak
    peak_text = "–"
    if peak is not None:
        name = esc(level_name(int(peak["concurrency"]), rates, lang))
        peak_text = f"{fmt_number(peak['output_throughput_tok_s'], lang, 0)} ({name})"
    rate = run.stream_rate if not rates else run.request_rate
    single = fmt_number(rate, lang, 1) if rate is not None else "–"
    recommended = run.known("recommended")
    rec = "–"
    if recommended is not None:
        chosen = recommended.numbers.get("concurrency")
        rec = (
            esc(level_name(int(chosen), rates, lang))
            if chosen is not None
            else html.escape(tr(lang, "none meets the SLO"))
        )
    return peak_text, single, rec


# A run's (or a group's) link on the runs pages (HTML: :func:`html_table`), written as a
# directory URL; :func:`file_urls` makes it ``.../index.html`` for a site built with
# use_directory_urls off.
_RUN_LINK = '<a data-sweeper-run href="{href}/">{text}</a>'
_RUN_HREF = re.compile(r'(<a data-sweeper-run href="[^"]*/)(">)')


def file_urls(text: str) -> str:
    """A runs table's links made file URLs (``x/index.html``): the links MkDocs writes for
    ``x/index.md`` when ``use_directory_urls`` is false."""
    return _RUN_HREF.sub(r"\1index.html\2", text)


# A Markdown link to a page: its target's path (relative, a .md file) and any #anchor.
_MD_LINK = re.compile(r"(\]\()([^)\s:#]+\.md)(#[^)\s]*)?(\))")
_RUN_FOLDER = re.compile(r'(<a data-sweeper-run href=")([^"]*/)(">)')


def markdown_file_links(pages: Mapping[str, str], others: Iterable[str] = ()) -> dict[str, str]:
    """``pages`` with their links pointing at the Markdown files, for reading them where no
    site is built (GitHub, an editor): a runs table's ``x/`` becomes ``x/index.md``, and a
    translated page's link to a page that exists in its language (one of ``pages``, or of
    ``others``: the docs folder's own files) leads to that translation (``index.zh.md``), as the
    site's i18n plugin would. Paths are relative to the docs folder, with ``/``."""
    known = set(pages) | set(others)
    out = {}
    for path, text in pages.items():
        lang = page_language(path)
        folder = posixpath.dirname(path)

        def in_language(target: str, lang: str = lang, folder: str = folder) -> str:
            if lang == LANGUAGES[0]:
                return target
            resolved = posixpath.normpath(posixpath.join(folder, unquote(target)))
            if page_path(resolved, lang) in known:
                return page_path(target, lang)
            return target

        text = _RUN_FOLDER.sub(
            lambda m: m.group(1) + in_language(m.group(2) + "index.md") + m.group(3), text
        )
        out[path] = _MD_LINK.sub(
            lambda m: m.group(1) + in_language(m.group(2)) + (m.group(3) or "") + m.group(4), text
        )
    return out


def _run_cell(run: RunReport, lang: str, prefix: str = "") -> str:
    """The run's link, marked when the run is incomplete or nothing in it succeeded."""
    cell = _RUN_LINK.format(href=quote(f"{prefix}{run.run_id}"), text=esc(run.run_id))
    levels = run.levels
    if levels.empty or int(levels["requests"].sum()) == 0:
        cell += " " + html.escape(tr(lang, "(no measured request)"))
    elif int(levels["completed"].sum()) == 0:
        cell += " " + html.escape(tr(lang, "(no request succeeded)"))
    elif not run.done.complete:
        cell += " " + html.escape(tr(lang, "(incomplete)"))
    return cell


def run_group(run: RunReport, lang: str) -> tuple[str, str]:
    """The group a run is listed in on the index and in the navigation: (model, GPU)."""
    return model_title(run.ts), gpu_title(run.ts, lang) or "–"


def group_slug(model: str, gpu: str) -> str:
    """A folder name for a (model, GPU) group: readable part + a short hash."""
    key = f"{model}\0{gpu}"
    readable = re.sub(r"[^a-z0-9]+", "-", f"{model} {gpu}".lower()).strip("-")[:_SLUG_MAX]
    return f"{readable or 'group'}-{hashlib.sha256(key.encode()).hexdigest()[:6]}"


def run_groups(runs: Iterable[RunReport]) -> dict[tuple[str, str], list[RunReport]]:
    """Runs by (model, GPU) (the GPU named in English: one group for both languages), the
    groups sorted by model then GPU, the runs newest first."""
    groups: dict[tuple[str, str], list[RunReport]] = {}
    for run in runs:
        groups.setdefault(run_group(run, LANGUAGES[0]), []).append(run)
    return {
        key: sorted(groups[key], key=lambda r: r.ts.manifest.started_at, reverse=True)
        for key in sorted(groups)
    }


def _sortable(text: str, key: object) -> str:
    """A cell's text with the value it sorts by (the index's script reads ``data-sort``)."""
    return f'<span data-sort="{html.escape(str(key), quote=True)}">{text}</span>'


def _level_sort_key(run: RunReport, level: object) -> str:
    """What a recommended level sorts by: its concurrency, or in a rate run its offered rate
    (all at once last: ``Infinity``); nothing when there is none."""
    if not isinstance(level, int | float) or isinstance(level, bool):
        return ""
    rates = level_rates(run.ts.manifest)
    value = float(rates.get(int(level), level)) if rates else float(level)
    return "Infinity" if value == float("inf") else f"{value:g}"


def _header_cell(text: str, *, sort: str | None = None, facet: str | None = None) -> str:
    attrs = ""
    if sort:
        attrs += f' data-sweeper-sort="{sort}" role="button" tabindex="0"'
    if facet:
        attrs += f' data-sweeper-col="{facet}"'
    return f"<span{attrs}>{html.escape(text)}</span>" if attrs else html.escape(text)


def _runs_table(runs: list[RunReport], lang: str, labelled: bool, prefix: str = "") -> str:
    """The sortable table of runs (date, peak tok/s, recommended level), each row's model, GPU
    and engine marked for the filters."""
    header = [
        _header_cell(tr(lang, "Run")),
        _header_cell(tr(lang, "Model"), facet="model"),
        _header_cell(tr(lang, "GPU"), facet="gpu"),
        _header_cell(tr(lang, "Engine"), facet="engine"),
        _header_cell(tr(lang, "Date"), sort="date"),
        _header_cell(tr(lang, "Peak tok/s"), sort="peak"),
        _header_cell(tr(lang, "Per stream tok/s")),
        _header_cell(tr(lang, "Recommended"), sort="recommended"),
    ]
    if labelled:
        header.append(_header_cell(tr(lang, "Labels"), facet="labels"))
    rows = []
    for run in runs:
        peak_text, single, rec = _headline_numbers(run, lang)
        peak = run.peak
        recommended = run.known("recommended")
        chosen = recommended.numbers.get("concurrency") if recommended is not None else None
        row = [
            _run_cell(run, lang, prefix),
            esc(model_title(run.ts)),
            esc(gpu_title(run.ts, lang) or "–"),
            esc(engine_title(run.ts) or "–"),
            _sortable(
                # Seconds since the epoch: the table's script sorts a number as a number (an ISO
                # date read as a number is its year).
                fmt_date(run.ts.manifest.started_at, lang),
                f"{run.ts.manifest.started_at.timestamp():.0f}",
            ),
            _sortable(
                peak_text,
                f"{float(peak['output_throughput_tok_s']):.3f}" if peak is not None else "",
            ),
            single,
            _sortable(rec, _level_sort_key(run, chosen)),
        ]
        if labelled:
            row.append(labels_html(run.ts.manifest.labels) or "–")
        rows.append(row)
    return html_table(header, rows)


def _filters(runs: list[RunReport], lang: str) -> str:
    """The box that filters the rows by words (a label, a model...) and one menu per column
    (model, GPU, engine) listing its values."""
    placeholder = tr(lang, "Filter runs: a label, a model, a GPU…")
    parts = [
        '<p class="sweeper-filter"><input type="search" data-sweeper-filter '
        f'placeholder="{html.escape(placeholder, quote=True)}" '
        f'aria-label="{html.escape(placeholder, quote=True)}">'
    ]
    facets = [
        ("model", tr(lang, "Model"), [model_title(r.ts) for r in runs]),
        ("gpu", tr(lang, "GPU"), [gpu_title(r.ts, lang) or "–" for r in runs]),
        ("engine", tr(lang, "Engine"), [engine_title(r.ts) or "–" for r in runs]),
    ]
    for facet, name, values in facets:
        every = tr(lang, "every {column}").format(column=name)
        options = [f'<option value="">{html.escape(every)}</option>']
        options += [
            f'<option value="{esc(v)}">{esc(v)}</option>' for v in sorted(set(values), key=str)
        ]
        parts.append(
            f'<select data-sweeper-facet="{facet}" aria-label="{html.escape(name, quote=True)}">'
            + "".join(options)
            + "</select>"
        )
    parts.append("</p>")
    return " ".join(parts)


def render_index(
    entries: list[RunEntry],
    comparisons: Mapping[str, list[RunReport]],
    lang: str,
    studies: Mapping[str, int] | None = None,
) -> str:
    """The runs grouped by model and GPU (a sortable, filterable table per group), the studies
    (id -> number of configurations), the comparisons, and the trace sets that could not be
    read."""
    # Left out of the search: each row is its run's page, which search finds.
    parts = [front_matter(tr(lang, "Runs"), searched=False), "# " + html.escape(tr(lang, "Runs"))]
    runs = [e.run for e in entries if e.run is not None]
    if runs:
        parts.append(
            html.escape(
                tr(
                    lang,
                    "Every trace set in traces/, by model and GPU, newest first. Peak throughput in output tok/s at the level where it was reached.",
                )
            )
            + " "
            + html.escape(
                tr(
                    lang,
                    "Click Date, Peak tok/s or Recommended to sort; the menus and the box filter the rows.",
                )
            )
        )
        labelled = any(run.ts.manifest.labels for run in runs)
        parts.append(_filters(runs, lang))
        for (model, gpu), members in run_groups(runs).items():
            title = f"{model} · {gpu}"
            parts.append(f"## {esc(title)} {{ .sweeper-group #{group_slug(model, gpu)} }}")
            parts.append(
                f'<p class="sweeper-group__count">{html.escape(_runs_count(lang, len(members)))}'
                # HTML, not a Markdown link: a block that opens with a tag is passed through.
                " · "
                + _RUN_LINK.format(
                    href=f"groups/{group_slug(model, gpu)}",
                    text=html.escape(tr(lang, "this group alone")),
                )
                + "</p>"
            )
            parts.append(_runs_table(members, lang, labelled))
    else:
        parts.append(
            html.escape(
                tr(
                    lang,
                    "No trace set yet: record one with `sweeper record` or bring one in with `sweeper import`.",
                )
            )
        )
    if studies:
        parts.append("## " + html.escape(tr(lang, "Studies")))
        parts.append(
            "\n".join(
                f"- {_link(esc(study_id), f'{study_id}/index.md')} "
                f"({html.escape(_configurations_count(lang, n))})"
                for study_id, n in sorted(studies.items())
            )
        )
    if comparisons:
        parts.append("## " + html.escape(tr(lang, "Comparisons")))
        parts.append(
            "\n".join(
                f"- {_link(esc(model), f'../{COMPARE_DIR}/{model_slug(model)}/index.md')} "
                f"({html.escape(_runs_count(lang, len(rs)))})"
                for model, rs in sorted(comparisons.items())
            )
        )
    broken = [e for e in entries if e.error is not None]
    if broken:
        parts.append("## " + html.escape(tr(lang, "Trace sets that could not be read")))
        parts.append(
            html.escape(
                tr(lang, "These folders were left out of the site; the other runs are published.")
            )
        )
        parts.append(
            _markdown_table(
                [tr(lang, "Folder"), tr(lang, "Problem")],
                [[f"<code>{esc(e.folder.name)}</code>", esc(e.error)] for e in broken],
            )
        )
    return "\n\n".join(parts) + "\n"


def render_group(model: str, gpu: str, runs: list[RunReport], lang: str) -> str:
    """One (model, GPU) group's page: its runs in the index's sortable table."""
    title = f"{model} · {gpu}"
    labelled = any(run.ts.manifest.labels for run in runs)
    parts = [front_matter(title, searched=False), "# " + esc(title)]
    parts.append(
        html.escape(_runs_count(lang, len(runs)))
        + " · "
        + _link(html.escape(tr(lang, "every run")), "../../index.md")
    )
    parts.append(_filters(runs, lang))
    parts.append(_runs_table(runs, lang, labelled, prefix="../../"))
    return "\n\n".join(parts) + "\n"


def _configurations_count(lang: str, n: int) -> str:
    return trn(lang, "{count} configuration", "{count} configurations", n).format(
        count=fmt_number(n, lang, 0)
    )


def _runs_count(lang: str, n: int) -> str:
    return trn(lang, "{count} run", "{count} runs", n).format(count=fmt_number(n, lang, 0))


def _markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A table of text columns whose header words are escaped here (the cells already are)."""
    return table([html.escape(h) for h in header], rows, numeric=False)


def compare_frame(runs: list[RunReport], lang: str | None = None) -> pd.DataFrame:
    """The per-level frames of several runs stacked, with a ``run`` column naming each; where a
    run is a rate sweep (and ``lang`` is given), a ``level_label`` column names every level
    (``C=8``, ``4 req/s``) for the tooltips."""
    measured = [run for run in runs if not run.levels.empty]
    if not measured:
        return pd.DataFrame()
    # Stacked first, the names added once: a column assigned to each of a group's hundreds of
    # frames took most of a comparison page's time.
    frame = pd.concat([run.levels for run in measured], ignore_index=True)
    frame["run"] = [run.run_id for run in measured for _ in range(len(run.levels))]
    if lang is not None and any(level_rates(run.ts.manifest) for run in runs):
        names = []
        for run in measured:
            rates = level_rates(run.ts.manifest)
            names += [level_name(int(c), rates, lang) for c in run.levels["concurrency"]]
        frame["level_label"] = names
    return frame


def render_comparison(model: str, runs: list[RunReport], lang: str) -> str:
    title = tr(lang, "{model}: runs compared").format(model=model)
    parts = [front_matter(title), "# " + esc(title)]
    parts.append(
        html.escape(
            trn(
                lang,
                "{count} run of the same model, on different GPUs, engines or server flags.",
                "{count} runs of the same model, on different GPUs, engines or server flags.",
                len(runs),
            ).format(count=fmt_number(len(runs), lang, 0))
        )
    )
    rows = []
    for run in runs:
        peak = run.peak
        rows.append(
            [
                _link(esc(run.run_id), f"../../{RUNS_DIR}/{run.run_id}/index.md"),
                esc(gpu_title(run.ts, lang) or "–"),
                esc(engine_title(run.ts) or "–"),
                fmt_number(peak["output_throughput_tok_s"], lang, 0) if peak is not None else "–",
                fmt_number(peak["output_throughput_per_gpu_tok_s"], lang, 0)
                if peak is not None
                else "–",
            ]
        )
    parts.append(
        _markdown_table(
            [
                tr(lang, "Run"),
                tr(lang, "GPU"),
                tr(lang, "Engine"),
                tr(lang, "Peak tok/s"),
                tr(lang, "Peak tok/s per GPU"),
            ],
            rows,
        )
    )
    frame = compare_frame(runs, lang)
    point = (
        tr(lang, "One curve per run; a point per level. Lower and further right is better.")
        if "level_label" in frame.columns
        else tr(
            lang,
            "One curve per run; a point per concurrency level. Lower and further right is better.",
        )
    )
    figures = [
        (
            "compare_latency",
            charts.chart_compare_latency,
            tr(lang, "Throughput against p99 TTFT"),
            point,
        ),
        (
            "compare_per_gpu",
            charts.chart_compare_per_gpu,
            tr(lang, "Throughput per GPU against tokens/s per user"),
            tr(
                lang,
                "What the operator gets (output tok/s per GPU) against what each user sees (p50 generation "
                "speed of one request). Up and to the right is better.",
            ),
        ),
    ]
    for number, (key, draw, fig_title, caption) in enumerate(figures, start=1):
        try:
            chart = draw(frame, chart_labels(lang, key))
        except ValueError:
            continue  # no run has the numbers this figure needs
        parts.append(figure_html(number, lang, fig_title, chart, html.escape(caption)))
    return "\n\n".join(parts) + "\n"


# ---------------------------------------------------------------------------------------------
# Studies (sweeper study): one page each, linked from the index and from each member run


def study_folders(traces_dir: Path) -> list[Path]:
    """Folders of ``traces_dir`` holding a study manifest (``study.json``, no run manifest)."""
    if not traces_dir.is_dir():
        return []
    return [
        f
        for f in sorted(traces_dir.iterdir())
        if f.is_dir()
        and not f.name.startswith(".")
        and (f / STUDY_FILE).is_file()
        and not (f / MANIFEST_FILE).exists()
    ]


def study_pages(traces_dir: Path, run_ids: set[str]) -> tuple[dict[str, str], dict[str, int]]:
    """Each study's page (en + zh) and its number of configurations, by study id. A study that
    cannot be summarized is left out with a warning (its runs still publish)."""
    from sweeper.study.page import render_study_page
    from sweeper.study.summary import summarize_study

    def run_link(run_id: str) -> str:
        return f"../{run_id}/index.md" if run_id in run_ids else ""

    pages: dict[str, str] = {}
    counts: dict[str, int] = {}
    for folder in study_folders(traces_dir):
        try:
            summary = summarize_study(folder.name, traces_dir)
        except SweeperError as exc:
            log.warning("study %s left out of the site: %s", folder, exc)
            continue
        except Exception as exc:  # a bug in sweeper: the runs still publish, a strict build fails
            log.warning(
                "study %s: no page (a bug in sweeper): %s: %s", folder, type(exc).__name__, exc
            )
            continue
        counts[folder.name] = len(summary["configs"])
        for lang in LANGUAGES:
            body = render_study_page(summary, lang, run_link=run_link)
            title = body.splitlines()[0].removeprefix("# ")
            path = page_path(f"{RUNS_DIR}/{folder.name}/index.md", lang)
            pages[path] = front_matter(title) + "\n\n" + body
    return pages, counts


def with_study_link(page: str, run: RunReport, lang: str, studies: Mapping[str, int]) -> str:
    """A member run's page with a line naming its study (label ``study``) and configuration."""
    labels = run.ts.manifest.labels or {}
    study_id = labels.get("study")
    if study_id not in studies:
        return page
    flags = labels.get("flags") or ""
    note = tr(lang, "Part of the study {study}, configuration {flags}.").format(
        study=_link(esc(study_id), f"../{study_id}/index.md"),
        flags=f"<code>{esc(flags)}</code>" if flags else "–",
    )
    lines = page.split("\n")
    at = next(
        (i for i, line in enumerate(lines) if line.startswith('<p class="sweeper-lede">')),
        next((i for i, line in enumerate(lines) if line.startswith("# ")), 0),
    )
    return "\n".join([*lines[: at + 1], "", note, *lines[at + 1 :]])


def _studies_key(traces_dir: Path) -> tuple[tuple[str, str], ...]:
    return tuple(
        (
            str(f.resolve()),
            f"{(f / STUDY_FILE).stat().st_size}:{(f / STUDY_FILE).stat().st_mtime_ns}",
        )
        for f in study_folders(traces_dir)
    )


# ---------------------------------------------------------------------------------------------
# Whole site


class _TablePages:
    """The group and comparison pages of the last generation, kept by what makes them: one run
    added to a thousand renders the one group and the one comparison it joins, not all of them.

    A page is a function of its kind, language and title and of its runs, each named by its
    trace set's fingerprint (files and sweeper's code: ``_fingerprint``), in their order. Kept
    in memory and, given a cache folder, as ``<cache>/tables/<key>.md``; the files the last
    generation did not use are removed.
    """

    def __init__(self, cache_dir: Path | None, fingerprints: Mapping[str, str]) -> None:
        self.folder = cache_dir / TABLES_DIR if cache_dir is not None else None
        self.fingerprints = fingerprints
        self.used: set[str] = set()

    def page(
        self,
        kind: str,
        lang: str,
        title: tuple[str, ...],
        runs: list[RunReport],
        render: Callable[[], str],
    ) -> str:
        parts = [kind, lang, *title, *(f"{r.run_id}\0{self.fingerprints[r.run_id]}" for r in runs)]
        key = hashlib.sha256("\x1f".join(parts).encode()).hexdigest()
        self.used.add(key)
        text = _TABLES.get(key)
        path = self.folder / f"{key}.md" if self.folder is not None else None
        if text is None and path is not None:
            with contextlib.suppress(OSError, UnicodeDecodeError):
                text = path.read_text(encoding="utf-8")
        if text is None:
            text = render()
            if path is not None:
                self._write(path, text)
        _TABLES[key] = text
        return text

    @staticmethod
    def _write(path: Path, text: str) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_write(path) as fh:
                fh.write(text.encode("utf-8"))
        except OSError as exc:  # a read-only project: the page is rendered again next build
            log.info("sweeper: page cache %s not written: %s", path.parent, exc)

    def prune(self) -> None:
        for key in set(_TABLES) - self.used:
            del _TABLES[key]
        if self.folder is None or not self.folder.is_dir():
            return
        for path in self.folder.glob("*.md"):
            if path.stem not in self.used:
                path.unlink(missing_ok=True)


def generate_pages(
    traces_dir: Path, cache_dir: Path | None = None, *, directory_urls: bool = True
) -> dict[str, str]:
    """Every generated page: relative path (under the docs folder) -> Markdown.
    ``directory_urls``: the site's ``use_directory_urls`` (the runs tables' links are URLs)."""
    return generate_site(traces_dir, cache_dir, directory_urls=directory_urls)[0]


def generate_site(
    traces_dir: Path, cache_dir: Path | None = None, *, directory_urls: bool = True
) -> tuple[dict[str, str], list[str]]:
    """:func:`generate_pages`, and what a strict build of them fails on, in the words both
    engines' builds log (:func:`strict_problems`)."""
    pages, problems = _generate_pages(traces_dir, cache_dir)
    if not directory_urls:
        tables = (f"{RUNS_DIR}/index.", f"{GROUPS_DIR}/")
        pages = {p: file_urls(t) if p.startswith(tables) else t for p, t in pages.items()}
    return pages, strict_problems(traces_dir, pages, problems)


def strict_problems(
    traces_dir: Path, pages: Mapping[str, str], entry_problems: Iterable[str]
) -> list[str]:
    """The trace sets' problems (:meth:`RunEntry.problems`), and each study without a page."""
    problems = list(entry_problems)
    for folder in study_folders(traces_dir):
        if page_path(f"{RUNS_DIR}/{folder.name}/index.md", "en") not in pages:
            problems.append(f"{folder}: the study has no page (its summary failed)")
    return problems


def _generate_pages(traces_dir: Path, cache_dir: Path | None) -> tuple[dict[str, str], list[str]]:
    folders = candidate_folders(traces_dir)
    prints = [_fingerprint(f) for f in folders]
    key = (
        *((str(f.absolute()), fp) for f, fp in zip(folders, prints, strict=True)),
        *_studies_key(traces_dir),
    )
    last = _LAST.get(str(traces_dir.resolve()))
    if last is not None and last[0] == key:
        return dict(last[1]), list(last[2])
    entries = _load_entries(folders, cache_dir, dict(zip(folders, prints, strict=True)))
    problems = [problem for entry in entries for problem in entry.problems()]
    runs = [e.run for e in entries if e.run is not None]
    studies, counts = study_pages(traces_dir, {r.run_id for r in runs})
    pages: dict[str, str] = {}
    for entry in entries:
        for path, text in (entry.pages or {}).items():
            lang = page_language(path)
            run = entry.run
            pages[path] = with_study_link(text, run, lang, counts) if run is not None else text
    pages.update(studies)
    comparisons = comparison_groups(runs)
    groups = run_groups(runs)
    tables = _TablePages(
        cache_dir,
        {e.run.run_id: fp for e, fp in zip(entries, prints, strict=True) if e.run is not None},
    )
    for lang in LANGUAGES:
        for (model, gpu), members in groups.items():
            path = page_path(f"{GROUPS_DIR}/{group_slug(model, gpu)}/index.md", lang)
            pages[path] = tables.page(
                "group",
                lang,
                (model, gpu),
                members,
                partial(render_group, model, gpu, members, lang),
            )
        pages[page_path(f"{RUNS_DIR}/index.md", lang)] = render_index(
            entries, comparisons, lang, counts
        )
        for model, members in comparisons.items():
            path = page_path(f"{COMPARE_DIR}/{model_slug(model)}/index.md", lang)
            pages[path] = tables.page(
                "compare", lang, (model,), members, partial(render_comparison, model, members, lang)
            )
    tables.prune()
    _LAST[str(traces_dir.resolve())] = (key, dict(pages), problems)
    return pages, problems


def generated_nav(pages: Mapping[str, str]) -> list[str]:
    """The generated pages of the navigation (English paths; the i18n plugin maps them): the
    index first, then one page per (model, GPU) group, then the comparisons. The run and study
    pages are reached from the index and the group pages: a navigation listing a thousand runs
    would be written into every page of the site."""
    translated = tuple(f".{lang}.md" for lang in LANGUAGES[1:])
    paths = sorted(p for p in pages if not p.endswith(translated))
    index = f"{RUNS_DIR}/index.md"
    groups = [p for p in paths if p.startswith(f"{GROUPS_DIR}/") and p.count("/") == 3]
    compare = [p for p in paths if p.startswith(f"{COMPARE_DIR}/")]
    return [index, *groups, *compare]


def extend_nav(nav: list[Any], generated: list[str]) -> bool:
    """Put the generated pages (:func:`generated_nav`) after the index entry (``runs/index.md``)
    wherever a configured navigation lists it, leaving those it lists already where they are;
    False when it lists no index. One rule for both engines (the MkDocs plugin, Zensical)."""
    index = generated[0]
    for position, item in enumerate(nav):
        value = next(iter(item.values())) if isinstance(item, dict) and len(item) == 1 else item
        if value == index:
            present = {
                v for entry in nav for v in (entry.values() if isinstance(entry, dict) else [entry])
            }
            nav[position + 1 : position + 1] = [p for p in generated[1:] if p not in present]
            return True
        if isinstance(value, list) and extend_nav(value, generated):
            return True
    return False


def write_pages(pages: Mapping[str, str], docs_dir: Path) -> int:
    """Write the generated pages under ``docs_dir``, touching only files whose content changed
    (so ``mkdocs serve`` does not rebuild in a loop), and remove generated pages that are no longer
    produced. Refuses to write into a folder it did not create. Returns the number of files
    written or removed."""
    changed = 0
    for name in GENERATED_DIRS:
        folder = docs_dir / name
        if folder.exists() and not (folder / SENTINEL).exists() and any(folder.iterdir()):
            raise SweeperError(
                f"{folder} exists and was not generated by sweeper (no {SENTINEL} in it): move it away or "
                "choose another output folder; sweeper only writes into folders it created"
            )
        folder.mkdir(parents=True, exist_ok=True)
        sentinel = folder / SENTINEL
        if not sentinel.exists():  # rewriting it on every build would wake `mkdocs serve` again
            sentinel.write_text("Generated by sweeper from traces/: edits here are overwritten.\n")
    for relative, text in pages.items():
        path = docs_dir / relative
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        changed += 1
    wanted = {docs_dir / p for p in pages}
    for name in GENERATED_DIRS:
        for path in sorted((docs_dir / name).rglob("*.md")):
            if path not in wanted:
                path.unlink()
                changed += 1
        for path in sorted((docs_dir / name).rglob("*"), reverse=True):
            if path.is_dir() and not any(path.iterdir()):
                path.rmdir()
    return changed


LINK_STYLES = ("site", "files")


def build_pages(
    traces_dir: Path | str, docs_dir: Path | str, *, links: str = "site"
) -> dict[str, str]:
    """Generate the report pages of every trace set in ``traces_dir`` (Markdown, en + zh) and
    write them under ``docs_dir`` (runs/, compare/); returns the pages by path. Every page is
    generated before any is written: a build that fails (a missing traces folder, an output
    folder sweeper did not create) leaves the pages written before as they were. ``links``:
    ``site``, the links a site built from the folder serves (MkDocs, Zensical); ``files``, links
    to the Markdown files themselves (:func:`markdown_file_links`)."""
    if links not in LINK_STYLES:
        raise SweeperError(f"links must be one of {', '.join(LINK_STYLES)}, not {links!r}")
    docs = Path(docs_dir)
    pages = generate_pages(check_traces_dir(Path(traces_dir)))
    if links == "files":
        others = (
            p.relative_to(docs).as_posix()
            for p in (docs.rglob("*.md") if docs.is_dir() else ())
            if p.relative_to(docs).parts[0] not in GENERATED_DIRS
        )
        pages = markdown_file_links(pages, others)
    write_pages(pages, docs)
    return pages


__all__ = [
    "build_pages",
    "check_traces_dir",
    "generate_pages",
    "generate_site",
    "generated_nav",
    "markdown_file_links",
    "render_comparison",
    "render_index",
    "strict_problems",
    "study_folders",
    "study_pages",
    "with_study_link",
    "write_pages",
]
