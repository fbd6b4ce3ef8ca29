"""The one writer and the one reader of trace sets (``traces/<run-id>/``).

The writer appends each finished request as one JSON line and flushes it at once, so a killed
recorder loses at most the line it was writing; the manifest is replaced atomically (write a
temporary file, then rename). The reader accepts what such a kill leaves behind: a truncated last
line is reported in :attr:`TraceSet.problems` and skipped; any other bad line is an error naming
the file and the line.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import tempfile
import zlib
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TypeVar

from pydantic import BaseModel, ValidationError

from sweeper.errors import SchemaVersionError, TraceError, TraceFormatError
from sweeper.schema import (
    MANIFEST_FILE,
    METRICS_FILE,
    METRICS_FILE_GZ,
    REQUESTS_FILE,
    REQUESTS_FILE_GZ,
    SERVER_LOG_FILE,
    SUPPORTED_SCHEMA_VERSIONS,
    MetricSample,
    RequestTrace,
    RunManifest,
    check_run_id,
)

DEFAULT_TRACES_DIR = Path("traces")

M = TypeVar("M", bound=BaseModel)


# ---------------------------------------------------------------------------------------------
# writing


@contextlib.contextmanager
def atomic_write(path: Path) -> Iterator[IO[bytes]]:
    """A file written beside ``path`` (hidden) and renamed over it once written and on disk: a
    reader sees the old file or the new one, never half of one. Removed if writing fails."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp makes the file private (0600); trace files are as readable as the others.
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_manifest(folder: Path, manifest: RunManifest) -> None:
    """Replace ``manifest.json`` atomically: a reader sees the old or the new one, never half."""
    folder.mkdir(parents=True, exist_ok=True)
    data = manifest.model_dump_json(indent=2, exclude_none=False)
    with atomic_write(folder / MANIFEST_FILE) as fh:
        fh.write((data + "\n").encode("utf-8"))


class TraceSetWriter:
    """Appends to one trace set. One per run (and per worker process, each with its own files).

    Lines are flushed to the OS after every write (``fsync=True`` also forces them to disk), so
    Ctrl-C or ``kill -9`` leaves every finished request readable.
    """

    def __init__(
        self, folder: Path | str, *, fsync: bool = False, requests_name: str = REQUESTS_FILE
    ):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._fsync = fsync
        self._requests: IO[str] | None = None
        self._metrics: IO[str] | None = None
        self._requests_name = requests_name

    @property
    def requests_path(self) -> Path:
        return self.folder / self._requests_name

    def write_manifest(self, manifest: RunManifest) -> None:
        write_manifest(self.folder, manifest)

    def _append(self, fh: IO[str], model: BaseModel) -> None:
        fh.write(model.model_dump_json(exclude_none=True) + "\n")
        fh.flush()
        if self._fsync:
            os.fsync(fh.fileno())

    def append_request(self, trace: RequestTrace) -> None:
        if self._requests is None:
            self._requests = _open_append(self.requests_path)
        self._append(self._requests, trace)

    def append_metrics(self, sample: MetricSample) -> None:
        if self._metrics is None:
            self._metrics = _open_append(self.folder / METRICS_FILE)
        self._append(self._metrics, sample)

    def copy_server_log(self, path: Path | str) -> Path:
        dest = self.folder / SERVER_LOG_FILE
        if Path(path).resolve() != dest.resolve():
            shutil.copyfile(path, dest)
        return dest

    def close(self) -> None:
        for fh in (self._requests, self._metrics):
            if fh is not None:
                fh.close()
        self._requests = self._metrics = None

    def __enter__(self) -> TraceSetWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _open_append(path: Path) -> IO[str]:
    """Open for appending; if a killed writer left a last line without its newline, end it
    first, so the next record does not glue onto the broken one (the reader reports that one)."""
    if path.exists() and path.stat().st_size > 0:
        with path.open("rb") as fh:
            fh.seek(-1, os.SEEK_END)
            needs_newline = fh.read(1) != b"\n"
        if needs_newline:
            with path.open("a", encoding="utf-8") as fh:
                fh.write("\n")
    return path.open("a", encoding="utf-8", buffering=1)


def write_trace_set(
    folder: Path | str,
    manifest: RunManifest,
    requests: Iterable[RequestTrace],
    metrics: Iterable[MetricSample] = (),
    *,
    server_log: Path | str | None = None,
    compress: bool = False,
) -> Path:
    """Write a whole trace set at once (importers, tests). Written into a temporary folder beside
    the destination and renamed into place, so a failure half-way leaves nothing behind."""
    folder = Path(folder)
    if folder.exists():
        raise TraceError(
            "a trace set already exists here; choose another --run-id or remove it", folder
        )
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        if compress:
            with gzip.open(tmp / REQUESTS_FILE_GZ, "wt", encoding="utf-8") as fh:
                for trace in requests:
                    fh.write(trace.model_dump_json(exclude_none=True) + "\n")
        else:
            with (tmp / REQUESTS_FILE).open("w", encoding="utf-8") as fh:
                for trace in requests:
                    fh.write(trace.model_dump_json(exclude_none=True) + "\n")
        samples = list(metrics)
        if samples:
            with (tmp / METRICS_FILE).open("w", encoding="utf-8") as fh:
                for sample in samples:
                    fh.write(sample.model_dump_json(exclude_none=True) + "\n")
        if server_log is not None:
            shutil.copyfile(server_log, tmp / SERVER_LOG_FILE)
        write_manifest(tmp, manifest)
        os.replace(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder


# ---------------------------------------------------------------------------------------------
# reading


@dataclass(kw_only=True)
class TraceSet:
    """A trace set as read from disk."""

    path: Path
    manifest: RunManifest
    requests: list[RequestTrace]
    metrics: list[MetricSample] = field(default_factory=list)
    server_log: str | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        return self.manifest.run_id

    def measured(self) -> list[RequestTrace]:
        return [r for r in self.requests if r.phase == "measured"]


def read_manifest(folder: Path | str) -> RunManifest:
    folder = Path(folder)
    path = folder / MANIFEST_FILE
    if not path.exists():
        raise TraceError(
            f"no {MANIFEST_FILE}: this is not a trace set (record one with `sweeper record` "
            "or bring one in with `sweeper import`)",
            folder,
        )
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise TraceFormatError(f"not valid JSON ({exc.msg})", path, exc.lineno) from exc
    if not isinstance(raw, dict):
        raise TraceFormatError("expected a JSON object", path)
    version = raw.get("schema_version")
    if version not in SUPPORTED_SCHEMA_VERSIONS:
        supported = ", ".join(map(str, SUPPORTED_SCHEMA_VERSIONS))
        raise SchemaVersionError(
            f"trace schema version {version!r} is not supported; this sweeper reads version "
            f"{supported} (upgrade sweeper to read newer trace sets)",
            path,
        )
    try:
        return RunManifest.model_validate(raw)
    except ValidationError as exc:
        raise TraceFormatError(_describe(exc), path) from exc


def iter_jsonl(path: Path, model: type[M], problems: list[str]) -> Iterator[M]:
    """Yield one model per line. A bad last line without a newline (a killed writer) is
    reported in ``problems`` and skipped; any other bad line raises, naming file and line."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as fh:
            data = fh.read()
    except (OSError, EOFError) as exc:
        if path.suffix != ".gz":
            raise TraceError(f"cannot read ({exc})", path) from exc
        # A gzip stream cut short: keep what decompresses.
        data = _read_truncated_gzip(path)
        problems.append(f"{path.name}: compressed stream is truncated; read what was complete")
    lines = data.split(b"\n")
    ends_with_newline = data.endswith(b"\n")
    if ends_with_newline:
        lines.pop()
    last = len(lines)
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            yield model.model_validate_json(raw)
        except ValidationError as exc:
            if number == last and not ends_with_newline and _is_truncated_json(raw):
                problems.append(
                    f"{path.name}:{number}: last line is truncated (the writer was stopped "
                    "while writing it); skipped"
                )
                return
            raise TraceFormatError(_describe(exc), path, number) from exc


def _read_truncated_gzip(path: Path) -> bytes:
    """Everything that decompresses from a gzip file whose end is missing."""
    inflater = zlib.decompressobj(wbits=31)  # 31: expect a gzip header
    try:
        return inflater.decompress(path.read_bytes())
    except zlib.error:
        return b""


def _is_truncated_json(raw: bytes) -> bool:
    try:
        json.loads(raw)
    except json.JSONDecodeError:
        return True
    return False


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        loc = ".".join(str(p) for p in err["loc"]) or "(line)"
        parts.append(f"{loc}: {err['msg']}")
    more = f" (+{exc.error_count() - 3} more)" if exc.error_count() > 3 else ""
    return "; ".join(parts) + more


def metrics_files(folder: Path) -> list[Path]:
    """The metrics files of a trace set: ``server_metrics.jsonl.gz`` (written by ``sweeper
    compact``) and ``server_metrics.jsonl`` (appended by the recorder, also after a compaction)."""
    return [p for p in (folder / METRICS_FILE_GZ, folder / METRICS_FILE) if p.exists()]


def requests_files(folder: Path) -> list[Path]:
    """The request files of a trace set: ``requests.jsonl[.gz]`` and any per-worker parts
    (``requests.w<N>.jsonl``) a multi-process recording left."""
    files = sorted(folder.glob("requests*.jsonl")) + sorted(folder.glob("requests*.jsonl.gz"))
    return files


def load_trace_set(folder: Path | str) -> TraceSet:
    """Read a whole trace set. Raises :class:`TraceError` naming the file and line on bad data."""
    folder = Path(folder)
    if not folder.is_dir():
        raise TraceError("no such trace-set folder", folder)
    manifest = read_manifest(folder)
    problems: list[str] = []
    requests: list[RequestTrace] = []
    for path in requests_files(folder):
        requests.extend(iter_jsonl(path, RequestTrace, problems))
    metrics: list[MetricSample] = []
    for path in metrics_files(folder):
        metrics.extend(iter_jsonl(path, MetricSample, problems))
    metrics.sort(key=lambda m: m.t_ns)
    log_path = folder / SERVER_LOG_FILE
    server_log = (
        log_path.read_text(encoding="utf-8", errors="replace") if log_path.exists() else None
    )
    requests = _unique(requests, lambda r: (r.request_id, r.send_ns, r.status), "request", problems)
    metrics = _unique(metrics, lambda m: (m.url, m.t_ns), "metrics sample", problems)
    requests.sort(key=lambda r: (r.send_ns, r.request_id))
    return TraceSet(
        path=folder,
        manifest=manifest,
        requests=requests,
        metrics=metrics,
        server_log=server_log,
        problems=problems,
    )


def _unique(
    records: list[M], key: Callable[[M], Hashable], what: str, problems: list[str]
) -> list[M]:
    """The records without repeats of one (a ``sweeper compact`` stopped between writing its
    file and removing the sources leaves every record twice); repeats are noted."""
    seen: set[Hashable] = set()
    kept = []
    for record in records:
        k = key(record)
        if k not in seen:
            seen.add(k)
            kept.append(record)
    if len(kept) < len(records):
        problems.append(
            f"{len(records) - len(kept)} {what} records appeared twice (an interrupted "
            "`sweeper compact`?); each was read once"
        )
    return kept


@dataclass(frozen=True)
class Compacted:
    """One file ``sweeper compact`` wrote: its name, the bytes of the files it replaced, its own
    bytes, and what it could not carry over (a killed writer's partial last line)."""

    name: str
    before: int
    after: int
    notes: tuple[str, ...] = ()


class TraceSetLock:
    """An advisory lock on a trace-set folder (``flock`` on the folder itself, so no file is
    left behind), held by ``sweeper record`` for the whole run and by ``sweeper compact``: two
    recorders resuming one run, or a compaction under a recording, are refused instead of
    interleaving their writes. The kernel drops it when its process dies. A no-op where the
    system has no ``flock``."""

    def __init__(self, folder: Path, doing: str) -> None:
        self.folder = folder
        self._fd: int | None = None
        try:
            import fcntl
        except ImportError:  # not POSIX
            return
        fd = os.open(folder, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise TraceError(
                f"in use by another sweeper process (a recording or a compaction); {doing} "
                "after it has finished",
                folder,
            ) from None
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor drops the lock
            self._fd = None

    def __enter__(self) -> TraceSetLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def compact_trace_set(folder: Path | str) -> list[Compacted]:
    """Gzip a trace set's request files into ``requests.jsonl.gz`` and its metrics into
    ``server_metrics.jsonl.gz``, lines unchanged (a vLLM metrics file shrinks ~16x). Each file is
    written beside the others and renamed into place before its sources are removed. A run still
    being recorded is refused; one that is resumed later appends plain files again, which the
    reader reads with the compacted ones."""
    folder = Path(folder)
    read_manifest(folder)  # a trace set, of a version this sweeper reads
    with TraceSetLock(folder, "compact it"):
        return _compact(folder)


def _compact(folder: Path) -> list[Compacted]:
    manifest = read_manifest(folder)
    if manifest.status == "running":
        raise TraceError(
            "still being recorded (status running): let it finish, or finish it with "
            "`sweeper record --resume` if its recorder is gone, then compact it",
            folder,
        )
    written = []
    for target, parts in (
        (REQUESTS_FILE_GZ, requests_files(folder)),
        (METRICS_FILE_GZ, metrics_files(folder)),
    ):
        plain = [p for p in parts if p.suffix != ".gz"]
        if not plain:
            continue
        notes: list[str] = []
        before = sum(p.stat().st_size for p in parts)
        with (
            atomic_write(folder / target) as raw,
            gzip.GzipFile(filename=target, fileobj=raw, mode="wb", mtime=0) as out,
        ):
            for part in parts:
                out.write(_whole_lines(part, notes))
        # Removed right after the rename; a crash in between leaves each record twice, which
        # the reader notices and reads once.
        for path in plain:
            path.unlink()
        _fsync_dir(folder)
        written.append(Compacted(target, before, (folder / target).stat().st_size, tuple(notes)))
    notes = [f"sweeper compact: {n}" for w in written for n in w.notes]
    if notes:  # what the reader would have reported, kept for the report's warnings
        manifest.warnings.extend(notes)
        write_manifest(folder, manifest)
    return written


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not every system opens folders
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _whole_lines(path: Path, notes: list[str]) -> bytes:
    """A file's lines, ending in a newline; a partial last line (which the reader would skip) is
    left out and noted."""
    if path.suffix == ".gz":
        try:
            data = gzip.decompress(path.read_bytes())
        except (OSError, EOFError, zlib.error) as exc:
            # Rewriting it would keep only what decompresses: leave that to the user's copy.
            raise TraceError(
                f"is damaged ({exc}); not compacting over it: keep a copy, recover what "
                f"decompresses with `zcat {path.name} > {path.stem}.recovered` and move the "
                "damaged file away",
                path,
            ) from exc
    else:
        data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        head, _, last = data.rpartition(b"\n")
        if _is_truncated_json(last):
            notes.append(f"{path.name}: left out a partial last line (a killed writer's)")
            return head + b"\n" if head else b""
        return data + b"\n"
    return data


def discover_trace_sets(root: Path | str = DEFAULT_TRACES_DIR) -> list[Path]:
    """Every folder under ``root`` (one level) that holds a manifest, sorted by name.
    Folders starting with a dot (temporary) are skipped."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(
        p
        for p in root.iterdir()
        if p.is_dir() and not p.name.startswith(".") and (p / MANIFEST_FILE).exists()
    )


def resolve_run(run: str | Path, root: Path | str = DEFAULT_TRACES_DIR) -> Path:
    """A trace-set folder, or a run id under ``root``."""
    path = Path(run)
    if (path / MANIFEST_FILE).exists():
        return path
    candidate = Path(root) / str(run)
    try:
        check_run_id(str(run))
    except ValueError:
        candidate = path
    if (candidate / MANIFEST_FILE).exists():
        return candidate
    known = ", ".join(p.name for p in discover_trace_sets(root)[:10]) or "none"
    raise TraceError(
        f"no trace set named {str(run)!r} (not a folder with a {MANIFEST_FILE}, nor a run id "
        f"under {root}/; run ids there: {known})"
    )
