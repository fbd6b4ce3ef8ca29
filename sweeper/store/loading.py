"""The one reader of trace sets: folder -> :class:`TraceSet`.

It accepts what a killed recorder leaves behind: a truncated last line is reported in
:attr:`TraceSet.problems` and skipped; any other bad line is an error naming the file and the
line. Lines that parse but cannot be true (a request id twice in one level, negative or
decreasing chunk times) are reported in :attr:`TraceSet.problems` and left out.

Two ways to hold the requests, the same facts either way:

- small trace sets (request files under :data:`CACHE_MIN_BYTES`) are parsed into
  :class:`~sweeper.schema.RequestTrace` objects, as they always were;
- larger ones become :class:`~sweeper.store.columns.RequestColumns` (flat arrays, ~16 bytes a
  chunk instead of ~216), parsed once and kept in a columnar cache (:mod:`sweeper.store.cache`)
  that later loads read instead of the JSONL. ``ts.requests`` still gives the objects, made
  on first use.

Before anything is read, the memory the load needs is estimated (:mod:`sweeper.store.memory`);
a trace set that would not fit is refused with its size, the estimate and the fix.
"""

from __future__ import annotations

import hashlib
import itertools
import operator
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

import numpy as np

from sweeper.errors import TraceError
from sweeper.schema import SERVER_LOG_FILE, MetricSample, RequestTrace, RunManifest
from sweeper.store import memory
from sweeper.store.cache import (
    CACHE_DIR,
    Cached,
    CacheReport,
    cache_bytes,
    cache_enabled,
    files_key,
    meta_of,
    read_cache,
    remove_caches,
    write_cache,
)
from sweeper.store.columns import ColumnsBuilder, RequestColumns
from sweeper.store.files import (
    Compacted,
    TraceSetLock,
    compact_files,
    iter_jsonl,
    metrics_files,
    numbered_jsonl,
    read_manifest,
    requests_files,
)

# Request files smaller than this are parsed into objects on every load (a few MB parse in
# well under a second) and get no cache; ``cache="always"`` (``sweeper compact``) writes one.
CACHE_MIN_BYTES = 8 << 20

CachePolicy = Literal["auto", "always", "off"]


class TraceSet:
    """A trace set as read from disk: its manifest, requests, server metrics, server log and
    the problems met reading them.

    The requests are :attr:`requests` (a list of :class:`RequestTrace`, as written) and
    :attr:`columns` (the same requests as arrays, :class:`RequestColumns`); either is made from
    the other on first use. The analysis reads :attr:`columns`; a large trace set loaded from
    its cache never makes the objects unless a caller asks for :attr:`requests`.

    Editing the requests: assign a new list (``ts.requests = [...]``), or change the list's
    items (replace, append, remove, sort): :attr:`columns` is made again when the list holds
    other objects than it was made of. The request objects themselves are read-only here: a
    field set on one in place (``r.status = "error"``) is not seen by :attr:`columns`; replace
    it instead (``ts.requests[i] = r.model_copy(update={"status": "error"})``).
    """

    def __init__(
        self,
        *,
        path: Path,
        manifest: RunManifest,
        requests: list[RequestTrace] | None = None,
        metrics: list[MetricSample] | None = None,
        server_log: str | None = None,
        problems: list[str] | None = None,
        columns: RequestColumns | None = None,
        cache: CacheReport | None = None,
    ) -> None:
        self.path = path
        self.manifest = manifest
        self.metrics = metrics if metrics is not None else []
        self.server_log = server_log
        self.problems = problems if problems is not None else []
        self.cache = cache if cache is not None else CacheReport(why=["not loaded from disk"])
        self._requests = requests if requests is not None or columns is not None else []
        self._columns = columns
        # What the columns were made of (or made): the list and the objects it held.
        self._columns_of: tuple[int, int] | None = None
        if requests is not None and columns is not None:
            self._columns_of = _fingerprint(requests)

    def __repr__(self) -> str:
        return f"TraceSet(path={self.path!r}, run_id={self.run_id!r}, requests={self.count})"

    @property
    def run_id(self) -> str:
        return self.manifest.run_id

    @property
    def count(self) -> int:
        """How many requests, without making their objects."""
        return len(self._requests) if self._requests is not None else len(self.columns)

    @property
    def has_objects(self) -> bool:
        """Whether :attr:`requests` is already made (reading it then costs nothing)."""
        return self._requests is not None

    @property
    def requests(self) -> list[RequestTrace]:
        """Every request as an object (made from :attr:`columns` on first use, which a trace set
        too large for the memory left refuses rather than exhaust it)."""
        if self._requests is None:
            assert self._columns is not None
            cols = self._columns
            size = memory.Size(0, 0, cols.chunks, len(cols), estimated=False)
            need = memory.objects_need(size)
            have = memory.available_bytes()
            if need > have:
                raise TraceError(
                    f"making its {len(cols):,} requests ({cols.chunks:,} chunks) Python objects "
                    f"needs about {memory.gib(need)} of memory and {memory.gib(have)} is "
                    "available; read them as columns instead (TraceSet.columns, the frames of "
                    "sweeper.analysis.frames), or use a machine with more memory",
                    self.path,
                )
            self._requests = cols.to_requests()
            self._columns_of = _fingerprint(self._requests)
        return self._requests

    @requests.setter
    def requests(self, value: list[RequestTrace]) -> None:
        self._requests = value
        self._columns = None

    @property
    def columns(self) -> RequestColumns:
        """Every request as columns, in the order of :attr:`requests`."""
        reqs = self._requests
        if reqs is not None:
            now = _fingerprint(reqs)
            if self._columns is None or self._columns_of != now:
                self._columns = RequestColumns.from_requests(reqs)
                self._columns_of = now
        assert self._columns is not None
        return self._columns

    def measured(self) -> list[RequestTrace]:
        return [r for r in self.requests if r.phase == "measured"]

    def without_chunks(self) -> TraceSet:
        """The same trace set with each request's chunks left out (``chunk_ns`` and
        ``chunk_tokens`` empty; every other field as read): for code that reads only
        per-request fields (counts, statuses, errors), at a small part of the memory."""
        heads = self.columns.heads()
        return TraceSet(
            path=self.path,
            manifest=self.manifest,
            requests=heads,
            metrics=self.metrics,
            server_log=self.server_log,
            problems=self.problems,
            cache=self.cache,
        )


def _fingerprint(requests: list[RequestTrace]) -> tuple[int, int]:
    """Which list, holding which objects in which order (~10 ns a request): a list whose items
    were replaced, added, removed or reordered gives another."""
    return id(requests), hash(tuple(map(id, requests)))


def load_trace_set(folder: Path | str, *, cache: CachePolicy = "auto") -> TraceSet:
    """Read a whole trace set. Raises :class:`TraceError` naming the file and line on bad data;
    lines that parse but cannot be true are left out and named in :attr:`TraceSet.problems`.

    ``cache``: ``"auto"`` reads a matching columnar cache, else parses the JSONL and writes one
    when the request files are at least :data:`CACHE_MIN_BYTES`; ``"always"`` writes one
    whatever the size; ``"off"`` parses the JSONL into objects as sweeper always did, reading
    and writing no cache. ``SWEEPER_CACHE=off`` makes ``"auto"`` and ``"always"`` read and
    write none (the requests are still held as columns above the size)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise TraceError("no such trace-set folder", folder)
    manifest = read_manifest(folder)
    files = requests_files(folder)
    report = CacheReport()
    requests: list[RequestTrace] | None = None
    columns: RequestColumns | None = None
    on_disk = sum(p.stat().st_size for p in files)
    if cache == "off" or (cache == "auto" and on_disk < CACHE_MIN_BYTES and not _has_cache(folder)):
        report.why.append("off" if cache == "off" else "small: parsed, no cache")
        _check_memory(folder, files, objects=True, report=None)
        requests, read_problems, load_problems = _read_objects(files)
    else:
        loaded = _load_columns(
            folder, files, write=cache == "always" or on_disk >= CACHE_MIN_BYTES, report=report
        )
        columns, read_problems, load_problems = (
            loaded.columns,
            loaded.read_problems,
            loaded.load_problems,
        )
    metric_problems: list[str] = []
    metrics: list[MetricSample] = []
    for path in metrics_files(folder):
        metrics.extend(iter_jsonl(path, MetricSample, metric_problems))
    metrics.sort(key=lambda m: m.t_ns)
    log_path = folder / SERVER_LOG_FILE
    server_log = (
        log_path.read_text(encoding="utf-8", errors="replace") if log_path.exists() else None
    )
    after: list[str] = []
    metrics = _unique(metrics, lambda m: (m.url, m.t_ns), "metrics sample", after)
    return TraceSet(
        path=folder,
        manifest=manifest,
        requests=requests,
        columns=columns,
        metrics=metrics,
        server_log=server_log,
        # The order the problems were always met in: reading requests, reading metrics,
        # judging requests, judging metrics.
        problems=[*read_problems, *metric_problems, *load_problems, *after],
        cache=report,
    )


def _has_cache(folder: Path) -> bool:
    return cache_enabled() and meta_of(folder) is not None


def being_recorded(folder: Path) -> str | None:
    """Why ``folder`` is still being recorded (its manifest says ``running``, or a recorder or
    a compaction holds its lock), as ``sweeper compact`` decides; None when it is not."""
    try:
        if read_manifest(folder).status == "running":
            return "status running"
    except TraceError:
        return None
    try:
        TraceSetLock(folder, "load it").release()
    except TraceError:
        return "in use by another sweeper process"
    except OSError:
        return None
    return None


def _load_columns(folder: Path, files: list[Path], *, write: bool, report: CacheReport) -> Cached:
    """The requests as columns: from a matching cache, else parsed (and cached if ``write``,
    unless the trace set is still being recorded: its files are still growing). The key a
    cache is written with is hashed from the very bytes that were parsed, in the same read."""
    use_cache = cache_enabled()
    found = meta_of(folder) if use_cache else None
    key = files_key(files) if found is not None else []
    if use_cache:
        if found is not None and found[1].get("files") == key:
            meta = found[1]
            known = memory.Size(
                sum(f["bytes"] for f in key),
                0,
                int(meta.get("chunks", 0)),
                int(meta.get("requests", 0)),
                estimated=False,
            )
            largest = meta.get("largest_level_chunks")
            need = memory.columns_need(
                known, parse=False, level_chunks=largest if isinstance(largest, int) else None
            )
            _check_need(folder, known, need, cached=True)
        # With no meta.json that reads, nothing can match: this only says why (and hashes
        # nothing: the key is made while parsing).
        cached = read_cache(folder, key, report)
        if cached is not None:
            return cached
    else:
        report.why.append("SWEEPER_CACHE=off")
    _check_memory(folder, files, objects=False, report=report)
    parsed_key: list[dict[str, object]] = []
    parsed = parse_columns(files, key=parsed_key)
    if use_cache and write:
        recording = being_recorded(folder)
        if recording is not None:
            report.why.append(
                f"still being recorded ({recording}): held as columns, no cache written"
            )
        else:
            write_cache(folder, parsed_key, parsed, report)
    return parsed


def _check_memory(
    folder: Path, files: list[Path], *, objects: bool, report: CacheReport | None
) -> None:
    size = memory.measure(files)
    need = memory.objects_need(size) if objects else memory.columns_need(size, parse=True)
    _check_need(folder, size, need, cached=False)


def _check_need(folder: Path, size: memory.Size, need: int, *, cached: bool) -> None:
    have = memory.available_bytes()
    if need <= have:
        return
    about = "about " if size.estimated else ""
    what = (
        f"its request files are {memory.gib(size.disk_bytes)} on disk, {about}{size.chunks:,} "
        f"chunks in {about}{size.requests:,} requests"
    )
    compact = memory.columns_need(size, parse=True)
    from_cache = memory.gib(memory.columns_need(size, parse=False))
    if cached:
        fix = "free memory or use a machine with more"
    elif compact <= have:
        # Loading as objects does not fit, but parsing into columns does.
        fix = (
            f"load it as columns instead: `sweeper compact` it (which needs about "
            f"{memory.gib(compact)} here) and load it again (about {from_cache} then)"
        )
    else:
        # `sweeper compact` parses the same way and would be refused here too.
        fix = (
            f"free memory, or `sweeper compact` it (which writes the columnar cache) on a "
            f"machine with at least {memory.gib(compact)} available; loading from that cache "
            f"then needs about {from_cache}"
        )
    raise TraceError(
        f"too large to load here: {what}; loading it needs {about}{memory.gib(need)} of memory "
        f"and {memory.gib(have)} is available (nothing was read); {fix}",
        folder,
    )


# ---------------------------------------------------------------------------------------------
# parsing the JSONL


def _read_objects(files: list[Path]) -> tuple[list[RequestTrace], list[str], list[str]]:
    """Every sound request as an object, sorted by send time (the way sweeper always read)."""
    read_problems: list[str] = []
    judge = _Judge()
    kept = [trace for _, trace in judge.sound(_numbered(files, read_problems))]
    kept.sort(key=lambda r: (r.send_ns, r.request_id))
    return kept, read_problems, judge.problems()


def parse_columns(files: list[Path], *, key: list[dict[str, object]] | None = None) -> Cached:
    """Every sound request as columns, sorted by send time, parsed line by line from the JSONL
    without keeping one object per request: what :func:`_read_objects` reads, as arrays.
    ``key``: filled with each file's name, size and SHA-256 (:func:`~sweeper.store.cache.
    files_key`) hashed from the bytes parsed, read once: a recorder appending meanwhile cannot
    make a key that describes other bytes than the columns hold."""
    read_problems: list[str] = []
    judge = _Judge()
    builder = ColumnsBuilder()
    keys: list[tuple[int, str]] = []
    for _, trace in judge.sound(_numbered(files, read_problems, key)):
        builder.add(trace)
        keys.append((trace.send_ns, trace.request_id))
    order = np.asarray(sorted(range(len(keys)), key=keys.__getitem__), dtype=np.int64)
    return Cached(builder.build(order), read_problems, judge.problems())


@dataclass(frozen=True)
class _Line:
    """Where a request was read: its file and its line."""

    file: str
    line: int

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def _numbered(
    files: list[Path], problems: list[str], key: list[dict[str, object]] | None = None
) -> Iterator[tuple[_Line, RequestTrace]]:
    for path in files:
        raw = None
        if key is not None:
            try:
                raw = path.read_bytes()
            except OSError as exc:
                raise TraceError(f"cannot read ({exc})", path) from exc
            key.append(
                {"name": path.name, "bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}
            )
        for number, trace in numbered_jsonl(path, RequestTrace, problems, raw=raw):
            yield _Line(path.name, number), trace
        del raw


# Lines named one by one in TraceSet.problems, per kind of problem; the rest are counted.
MAX_NAMED_PROBLEMS = 20


class _Judge:
    """Leaves out, one line at a time, what cannot be true: a record seen twice (a ``sweeper
    compact`` stopped between writing its file and removing the sources leaves every record
    twice; read once), a line with impossible times, and of a request id seen twice in one level
    every copy after the first (a cancelled request is one a resumed run sends again under its
    id: not a copy). Each line left out is named in :meth:`problems`."""

    def __init__(self) -> None:
        self.repeated_records = 0
        self.bad_times: list[str] = []
        self.repeats: list[str] = []

    def sound(
        self, lines: Iterator[tuple[_Line, RequestTrace]]
    ) -> Iterator[tuple[_Line, RequestTrace]]:
        seen: set[Hashable] = set()
        first: dict[tuple[int, str], _Line] = {}
        for line, trace in lines:
            record = (trace.request_id, trace.send_ns, trace.status)
            if record in seen:
                self.repeated_records += 1
                continue
            seen.add(record)
            wrong = _bad_times(trace)
            if wrong is not None:
                self.bad_times.append(
                    f"{line.where}: request {trace.request_id!r} (C={trace.concurrency}): "
                    f"{wrong}; left out"
                )
                continue
            if trace.status != "cancelled":
                key = (trace.concurrency, trace.request_id)
                earlier = first.get(key)
                if earlier is not None:
                    self.repeats.append(
                        f"{line.where}: request id {trace.request_id!r} appears again at "
                        f"C={trace.concurrency} (first at {earlier.where}); this copy left out"
                    )
                    continue
                first[key] = line
            yield line, trace

    def problems(self) -> list[str]:
        out = []
        if self.repeated_records:
            out.append(_twice(self.repeated_records, "request"))
        for named in (self.bad_times, self.repeats):
            out.extend(named[:MAX_NAMED_PROBLEMS])
            if len(named) > MAX_NAMED_PROBLEMS:
                out.append(f"... and {len(named) - MAX_NAMED_PROBLEMS} more lines like these")
        return out


def _twice(count: int, what: str) -> str:
    return (
        f"{count} {what} records appeared twice (an interrupted `sweeper compact`?); each was "
        "read once"
    )


def _bad_times(trace: RequestTrace) -> str | None:
    """What is impossible about a request's times (a chunk before its send, chunks out of
    order, an end before the send, a first token after the end), or None. Times after the send
    are ``>= 0`` and a request's chunks arrive in order (equal times: one read)."""
    chunks = trace.chunk_ns
    if chunks:
        if chunks[0] < 0:
            return f"chunk 0 arrives {chunks[0]} ns, before its request was sent"
        # one pass at C speed, no sorted copy per request; the index only when one goes back
        if any(map(operator.gt, chunks, itertools.islice(chunks, 1, None))):
            i = next(i for i in range(1, len(chunks)) if chunks[i] < chunks[i - 1])
            return (
                f"chunk times go back: chunk {i} at {chunks[i]} ns after chunk {i - 1} at "
                f"{chunks[i - 1]} ns"
            )
    for name in ("end_ns", "ttft_ns", "e2el_ns"):
        value = getattr(trace, name)
        if value is not None and value < 0:
            return f"{name} is {value}, before its request was sent"
    if trace.ttft_ns is not None and trace.e2el_ns is not None and trace.ttft_ns > trace.e2el_ns:
        return f"ttft_ns {trace.ttft_ns} is after e2el_ns {trace.e2el_ns} (the end)"
    return None


T = TypeVar("T")


def _unique(
    records: list[T], key: Callable[[T], Hashable], what: str, problems: list[str]
) -> list[T]:
    """The records without repeats of one (see :class:`_Judge`); repeats are noted."""
    seen: set[Hashable] = set()
    kept = []
    for record in records:
        k = key(record)
        if k not in seen:
            seen.add(k)
            kept.append(record)
    if len(kept) < len(records):
        problems.append(_twice(len(records) - len(kept), what))
    return kept


# ---------------------------------------------------------------------------------------------
# compaction


def compact_trace_set(folder: Path | str) -> list[Compacted]:
    """Gzip a trace set's request files into ``requests.jsonl.gz`` and its metrics into
    ``server_metrics.jsonl.gz``, lines unchanged (a vLLM metrics file shrinks ~16x), then write
    its columnar cache (:mod:`sweeper.store.cache`), so the next load reads arrays. Each file
    is written beside the others and renamed into place before its sources are removed. A run
    still being recorded is refused; one that is resumed later appends plain files again, which
    the reader reads with the compacted ones (and the cache, no longer matching, is rebuilt)."""
    folder = Path(folder)
    written = compact_files(folder)
    files = requests_files(folder)
    if not files:
        remove_caches(folder)
    elif cache_enabled():
        report = CacheReport()
        cached = _load_columns(folder, files, write=True, report=report)
        if report.written is not None:
            cols = cached.columns
            written.append(
                Compacted(
                    f"{CACHE_DIR}/",
                    sum(p.stat().st_size for p in files),
                    cache_bytes(report.written),
                    (f"columnar cache of {len(cols):,} requests, {cols.chunks:,} chunks",),
                )
            )
    return written
