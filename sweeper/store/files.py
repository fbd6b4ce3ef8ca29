"""The files of a trace set (``traces/<run-id>/``): the one writer, the line reader, compaction,
discovery.

The writer appends each finished request as one JSON line and flushes it at once, so a killed
recorder loses at most the line it was writing; the manifest is replaced atomically (write a
temporary file, then rename). Everything it writes (the manifest, every line, the copied server
log, what compaction rewrites) goes through a :class:`~sweeper.redact.Redactor` first: secrets
never reach the disk.

The line reader accepts what such a kill leaves behind: a truncated last line is reported in
the problems and skipped; any other bad line is an error naming the file and the line.
:mod:`sweeper.store.loading` turns the lines into a :class:`~sweeper.store.TraceSet`.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import tempfile
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TypeVar

from pydantic import BaseModel, ValidationError

from sweeper.errors import SchemaVersionError, TraceError, TraceFormatError
from sweeper.redact import PATTERNS, Redactor
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


def write_manifest(folder: Path, manifest: RunManifest, *, redactor: Redactor = PATTERNS) -> None:
    """Replace ``manifest.json`` atomically: a reader sees the old or the new one, never half.
    Every secret ``redactor`` knows or recognizes is masked first."""
    folder.mkdir(parents=True, exist_ok=True)
    data = redactor.json(manifest.model_dump_json(indent=2, exclude_none=False))
    with atomic_write(folder / MANIFEST_FILE) as fh:
        fh.write((data + "\n").encode("utf-8"))


def _line(model: BaseModel, redactor: Redactor) -> str:
    """One JSON line of a trace file, its secrets masked."""
    return redactor.json(model.model_dump_json(exclude_none=True)) + "\n"


class TraceSetWriter:
    """Appends to one trace set. One per run (and per worker process, each with its own files).

    Lines are flushed to the OS after every write (``fsync=True`` also forces them to disk), so
    Ctrl-C or ``kill -9`` leaves every finished request readable. ``redactor`` holds the secrets
    the caller knows (:meth:`Redactor.for_run`: the API key, the URLs' passwords); without one,
    what can be recognized is masked all the same.
    """

    def __init__(
        self,
        folder: Path | str,
        *,
        fsync: bool = False,
        requests_name: str = REQUESTS_FILE,
        redactor: Redactor = PATTERNS,
    ):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._fsync = fsync
        self._requests: IO[str] | None = None
        self._metrics: IO[str] | None = None
        self._requests_name = requests_name
        self.redactor = redactor

    @property
    def requests_path(self) -> Path:
        return self.folder / self._requests_name

    def write_manifest(self, manifest: RunManifest) -> None:
        write_manifest(self.folder, manifest, redactor=self.redactor)

    def _append(self, fh: IO[str], model: BaseModel) -> None:
        fh.write(_line(model, self.redactor))
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
        """Copy the server's log into the trace set (replacing an earlier copy), its secrets
        masked; the log given may be the trace set's own copy."""
        dest = self.folder / SERVER_LOG_FILE
        copy_redacted(Path(path), dest, self.redactor)
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


# The server log is copied this many bytes at a time (cut at a line end).
_COPY_BLOCK_BYTES = 1 << 20


def copy_redacted(source: Path, dest: Path, redactor: Redactor = PATTERNS) -> None:
    """Copy a text file (a server log) to ``dest`` atomically, every secret masked line by line;
    bytes that are not UTF-8 pass unchanged."""
    with source.open("rb") as src, atomic_write(dest) as out:
        rest = b""
        while True:
            block = src.read(_COPY_BLOCK_BYTES)
            if not block:
                break
            head, newline, rest_new = (rest + block).rpartition(b"\n")
            if not newline:  # no line end yet: keep reading
                rest = head + rest_new
                continue
            out.write(_redact_bytes(head + newline, redactor))
            rest = rest_new
        if rest:
            out.write(_redact_bytes(rest, redactor))


def _redact_bytes(data: bytes, redactor: Redactor) -> bytes:
    text = data.decode("utf-8", errors="surrogateescape")
    return redactor.text(text).encode("utf-8", errors="surrogateescape")


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
    redactor: Redactor = PATTERNS,
) -> Path:
    """Write a whole trace set at once (importers, tests). Written into a temporary folder beside
    the destination and renamed into place, so a failure half-way leaves nothing behind; every
    file's secrets masked by ``redactor``."""
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
                    fh.write(_line(trace, redactor))
        else:
            with (tmp / REQUESTS_FILE).open("w", encoding="utf-8") as fh:
                for trace in requests:
                    fh.write(_line(trace, redactor))
        samples = list(metrics)
        if samples:
            with (tmp / METRICS_FILE).open("w", encoding="utf-8") as fh:
                for sample in samples:
                    fh.write(_line(sample, redactor))
        if server_log is not None:
            copy_redacted(Path(server_log), tmp / SERVER_LOG_FILE, redactor)
        write_manifest(tmp, manifest, redactor=redactor)
        os.replace(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder


# ---------------------------------------------------------------------------------------------
# reading


def read_manifest(folder: Path | str) -> RunManifest:
    folder = Path(folder)
    path = folder / MANIFEST_FILE
    if not path.exists():
        raise TraceError(
            f"no {MANIFEST_FILE}: this is not a trace set (record one with `sweeper record` "
            "or bring one in with `sweeper import`)",
            folder,
        )
    text = _manifest_text(path)
    try:
        # Masked on reading too: a trace set written by an older sweeper keeps no secret on a page.
        raw = json.loads(PATTERNS.json(text))
    except json.JSONDecodeError as exc:
        raise TraceFormatError(f"not valid JSON ({exc.msg})", path, exc.lineno) from exc
    if not isinstance(raw, dict):
        raise TraceFormatError("expected a JSON object", path)
    version = raw.get("schema_version")
    supported = ", ".join(map(str, SUPPORTED_SCHEMA_VERSIONS))
    # bool is an int in Python: true must not pass for version 1 (nor a string "1").
    if isinstance(version, bool) or not isinstance(version, int | float):
        raise SchemaVersionError(
            f"trace schema version {json.dumps(version)} is {_json_type(version)}, not a number; "
            f"this sweeper reads version {supported}, written as a JSON number "
            f'("schema_version": {SUPPORTED_SCHEMA_VERSIONS[-1]})',
            path,
        )
    if type(version) is not int or version not in SUPPORTED_SCHEMA_VERSIONS:
        raise SchemaVersionError(
            f"trace schema version {version} is not supported; this sweeper reads version "
            f"{supported} (upgrade sweeper to read newer trace sets)",
            path,
        )
    try:
        return RunManifest.model_validate(raw)
    except ValidationError as exc:
        raise TraceFormatError(_describe(exc), path) from exc


def _json_type(value: object) -> str:
    """What a JSON value is, in words ("a string", "true/false")."""
    if value is None:
        return "missing (or null)"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, int | float):
        return "a number"
    return "a list" if isinstance(value, list) else "an object"


def _manifest_text(path: Path) -> str:
    """The manifest as text; one that is not UTF-8 (UTF-16 from an editor, a binary file) is
    refused naming the encoding expected."""
    data = path.read_bytes()
    if data.startswith((b"\xff\xfe", b"\xfe\xff")) or (
        b"\x00" in data[:4096] and data[1:2] == b"\x00"
    ):
        found = "UTF-16 text"
    elif b"\x00" in data:
        found = "binary data"
    else:
        try:
            return data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            found = f"not UTF-8 (byte {exc.start}: {data[exc.start : exc.start + 1]!r})"
    raise TraceFormatError(
        f"holds {found}; a manifest must be UTF-8 JSON (re-save it as UTF-8)", path
    )


def iter_jsonl(path: Path, model: type[M], problems: list[str]) -> Iterator[M]:
    """Yield one model per line. A bad last line without a newline (a killed writer) is
    reported in ``problems`` and skipped; any other bad line raises, naming file and line."""
    for _, record in numbered_jsonl(path, model, problems):
        yield record


def numbered_jsonl(
    path: Path, model: type[M], problems: list[str], *, raw: bytes | None = None
) -> Iterator[tuple[int, M]]:
    """:func:`iter_jsonl` with each record's line number. The file is read whole (a ``.gz``
    one decompressed) but its lines are cut one at a time, never all copied at once. ``raw``:
    the file's bytes as already read (what a cache key was hashed from), not read again."""
    data = read_trace_bytes(path, problems, raw=raw)
    for number, raw, unterminated in _lines(data):
        if not raw.strip():
            continue
        try:
            yield number, model.model_validate_json(raw)
        except ValidationError as exc:
            if unterminated and _is_truncated_json(raw):
                problems.append(
                    f"{path.name}:{number}: last line is truncated (the writer was stopped "
                    "while writing it); skipped"
                )
                return
            raise TraceFormatError(_describe(exc), path, number) from exc


def _lines(data: bytes) -> Iterator[tuple[int, bytes, bool]]:
    """Each line of ``data`` with its 1-based number and whether it is a last line without a
    newline (what a killed writer leaves)."""
    pos, number, size = 0, 0, len(data)
    while pos < size:
        end = data.find(b"\n", pos)
        number += 1
        if end < 0:
            yield number, data[pos:], True
            return
        yield number, data[pos:end], False
        pos = end + 1


def read_trace_bytes(path: Path, problems: list[str], *, raw: bytes | None = None) -> bytes:
    """A trace file's bytes, a ``.gz`` one decompressed. A gzip stream cut short (a killed
    compaction, a partial copy) gives what decompresses, noted in ``problems``; a file that is
    not gzip, or whose compressed data is damaged, is an error naming it."""
    if path.suffix != ".gz":
        if raw is not None:
            return raw
        try:
            return path.read_bytes()
        except OSError as exc:
            raise TraceError(f"cannot read ({exc})", path) from exc
    try:
        if raw is not None:
            return gzip.decompress(raw)
        with gzip.open(path, "rb") as fh:
            return fh.read()
    except EOFError:
        # A gzip stream cut short: keep what decompresses.
        problems.append(f"{path.name}: compressed stream is truncated; read what was complete")
        return _read_truncated_gzip(path, raw)
    except gzip.BadGzipFile as exc:
        if not (raw if raw is not None else path.read_bytes()).startswith(b"\x1f\x8b"):
            raise TraceError(
                "is not a gzip file (it does not start with gzip's signature); a .gz trace "
                "file is written by `sweeper compact`: restore it, or rename it if it is plain "
                "JSON lines",
                path,
            ) from exc
        raise _corrupt_gzip(path, exc) from exc
    except zlib.error as exc:
        raise _corrupt_gzip(path, exc) from exc
    except OSError as exc:
        raise TraceError(f"cannot read ({exc})", path) from exc


def _corrupt_gzip(path: Path, exc: Exception) -> TraceError:
    return TraceError(
        f"is a corrupt gzip file ({exc}): its compressed data is damaged, not cut short; "
        f"restore it from a copy (`zcat {path.name}` shows what still decompresses)",
        path,
    )


def _read_truncated_gzip(path: Path, raw: bytes | None = None) -> bytes:
    """Everything that decompresses from a gzip file whose end is missing."""
    inflater = zlib.decompressobj(wbits=31)  # 31: expect a gzip header
    try:
        return inflater.decompress(raw if raw is not None else path.read_bytes())
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


def compact_files(folder: Path | str) -> list[Compacted]:
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
                out.write(_redact_lines(_whole_lines(part, notes)))
        # Removed right after the rename; a crash in between leaves each record twice, which
        # the reader notices and reads once.
        for path in plain:
            path.unlink()
        _fsync_dir(folder)
        written.append(Compacted(target, before, (folder / target).stat().st_size, tuple(notes)))
    notes = [f"sweeper compact: {n}" for w in written for n in w.notes]
    if notes:  # what the reader would have reported, kept for the report's warnings
        manifest.warnings.extend(notes)
    # read_manifest masked any secret an older sweeper left in it: keep the masked one.
    text = (folder / MANIFEST_FILE).read_text(encoding="utf-8", errors="replace")
    if notes or PATTERNS.json(text) != text:
        write_manifest(folder, manifest)
    _scrub_server_log(folder)
    return written


def _scrub_server_log(folder: Path) -> None:
    """The copied server log with every secret sweeper recognizes masked, rewritten only where
    one was found (a trace set from an older sweeper)."""
    path = folder / SERVER_LOG_FILE
    if not path.exists():
        return
    data = path.read_bytes()
    masked = _redact_bytes(data, PATTERNS)
    if masked != data:
        with atomic_write(path) as fh:
            fh.write(masked)


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not every system opens folders
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _redact_lines(data: bytes) -> bytes:
    """JSON lines with every secret sweeper recognizes masked (a trace set from an older sweeper
    is cleaned when compacted); lines without one pass unchanged."""
    text = data.decode("utf-8", errors="surrogateescape")
    lines = [PATTERNS.json(line) for line in text.split("\n")]
    return "\n".join(lines).encode("utf-8", errors="surrogateescape")


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


def discover_trace_sets(
    root: Path | str = DEFAULT_TRACES_DIR, problems: list[str] | None = None
) -> list[Path]:
    """Every folder under ``root`` (one level) that holds a manifest, sorted by name.
    Folders starting with a dot (temporary) are skipped, and so is a folder whose manifest
    names a run id an earlier folder's already has (a copy): one run, one page. Each one left
    out is reported in ``problems`` (when given) naming both folders."""
    root = Path(root)
    if not root.is_dir():
        return []
    folders = sorted(
        p
        for p in root.iterdir()
        if p.is_dir() and not p.name.startswith(".") and (p / MANIFEST_FILE).exists()
    )
    refused = duplicate_run_ids(folders)
    if problems is not None:
        problems.extend(f"{folder}: {why}" for folder, why in refused.items())
    return [p for p in folders if p not in refused]


def duplicate_run_ids(folders: Iterable[Path]) -> dict[Path, str]:
    """The folders (of those given, in order) whose manifest names a run id an earlier one
    already has, each with why it is refused (naming the other folder). A manifest that cannot
    be read is not judged here (reading it says what is wrong). The site leaves these out."""
    owner: dict[str, Path] = {}
    refused: dict[Path, str] = {}
    for folder in folders:
        run_id = _run_id_of(folder)
        if run_id is None:
            continue
        if run_id in owner:
            refused[folder] = (
                f"run id {run_id!r} is already the run id of {owner[run_id]}; left out (two "
                "trace sets of one run id would share one page: give one of them another "
                "run_id in its manifest.json, or remove the copy)"
            )
        else:
            owner[run_id] = folder
    return refused


def _run_id_of(folder: Path) -> str | None:
    try:
        raw = json.loads((folder / MANIFEST_FILE).read_bytes())
    except (OSError, ValueError):
        return None
    run_id = raw.get("run_id") if isinstance(raw, dict) else None
    return run_id if isinstance(run_id, str) else None


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
