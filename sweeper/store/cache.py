"""The columnar cache of a trace set's requests: :class:`~sweeper.store.columns.RequestColumns`
saved as ``.npy`` files, so a second load reads arrays instead of parsing every JSON line.

The JSONL stays the record; the cache is a copy that is never trusted unless it matches:

- **Its key** is, for every request file (``requests*.jsonl[.gz]``), the name, the size and the
  SHA-256 of the bytes: what the files hold, not their times, so an edit that keeps the size and
  the modification time (a byte changed, the time put back) is caught, and a trace set copied
  elsewhere (its times changed) keeps its cache. Hashing is one sequential read (~1.5 GB/s
  here, ~0.1 s for 10 M chunks), far cheaper than parsing.
- **Its own files** are checked too: each array's SHA-256 and size, and the text's, are in
  ``meta.json`` (written last); a truncated, edited or half-written cache is rebuilt.
- It carries a version (:data:`CACHE_VERSION`) and a fingerprint of the reader's code
  (:func:`reader_fingerprint`: the SHA-256 of ``sweeper/store/*.py`` and ``sweeper/schema.py``):
  one written by another layout or another reader is rebuilt, even if nobody bumped the version.
- Its text (request ids, error messages, ...) goes through the project's redactor
  (:mod:`sweeper.redact`) like every file sweeper writes, and its files get the mode of the request
  files they copy (a ``0600`` JSONL gives a ``0600`` cache).

Where it lives: beside the JSONL (``<trace set>/.sweeper-columns/``) when that folder may be
written, else in the user's cache folder (``$SWEEPER_CACHE_DIR``, else
``$XDG_CACHE_HOME/sweeper/columns``, else ``~/.cache/sweeper/columns``), one entry per trace set;
``SWEEPER_CACHE=off`` turns it off. A folder whose permissions let nobody write (shared data
mounted read-only, even when running as root) is never written.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import hashlib
import json
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from sweeper.redact import PATTERNS
from sweeper.store.columns import OPTIONAL_INTS, TEXT_FIELDS, RequestColumns

CACHE_VERSION = 1
CACHE_DIR = ".sweeper-columns"
META_FILE = "meta.json"
TEXT_FILE = "text.json"
ARRAYS = (
    "concurrency",
    "send_ns",
    "chunk_start",
    "chunk_ns",
    "chunk_tokens",
    "token_sum",
    "multi_chunks",
    "ints",
    "present",
)
_BLOCK = 1 << 20


@functools.cache
def reader_fingerprint() -> str:
    """The SHA-256 of the reader's code (``sweeper/store/*.py`` and ``sweeper/schema.py``, names
    and bytes): a cache written by another reader is rebuilt."""
    here = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in [*sorted(here.glob("*.py")), here.parent / "schema.py"]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def files_key(paths: list[Path]) -> list[dict[str, Any]]:
    """The key of a trace set's request files: the name, size and SHA-256 of each. What the
    files hold, not when they were touched: a trace set copied elsewhere keeps its cache."""
    return [{"name": p.name, "bytes": p.stat().st_size, "sha256": file_sha256(p)} for p in paths]


def cache_bytes(place: Path) -> int:
    return sum(p.stat().st_size for p in place.iterdir() if p.is_file())


def user_cache_dir() -> Path:
    """Where caches go when a trace set's own folder may not be written."""
    own = os.environ.get("SWEEPER_CACHE_DIR")
    if own:
        return Path(own)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "sweeper" / "columns"


def cache_enabled() -> bool:
    return os.environ.get("SWEEPER_CACHE", "").strip().lower() not in {"off", "0", "no", "false"}


def cache_dirs(folder: Path) -> list[Path]:
    """The places a trace set's cache may be, in the order they are tried."""
    name = hashlib.sha256(str(folder.resolve()).encode("utf-8", "surrogateescape")).hexdigest()
    return [folder / CACHE_DIR, user_cache_dir() / name[:32]]


def may_write(folder: Path) -> bool:
    """Whether sweeper may write into ``folder``: the system says so and its permissions let
    someone write (root may write anywhere; a folder marked read-only for all is left alone)."""
    try:
        mode = folder.stat().st_mode
    except OSError:
        return False
    return bool(stat.S_IMODE(mode) & 0o222) and os.access(folder, os.W_OK)


@dataclass
class Cached:
    """Columns read from (or written to) a cache, with the problems the load reported."""

    columns: RequestColumns
    read_problems: list[str]
    load_problems: list[str]
    path: Path | None = None


@dataclass
class CacheReport:
    """What happened to the cache on one load: ``read`` (its path), ``written`` (its path),
    or why not (``why``: "no cache yet", "key differs", "chunk_ns.npy: sha256 differs", ...)."""

    read: Path | None = None
    written: Path | None = None
    why: list[str] = field(default_factory=list)


def meta_of(folder: Path) -> tuple[Path, dict[str, Any]] | None:
    """The first cache of ``folder`` whose meta.json reads, with it (not yet verified)."""
    for place in cache_dirs(folder):
        with contextlib.suppress(OSError, ValueError):
            meta = json.loads((place / META_FILE).read_bytes())
            if isinstance(meta, dict):
                return place, meta
    return None


def read_cache(folder: Path, key: list[dict[str, Any]], report: CacheReport) -> Cached | None:
    """The cached columns of ``folder`` whose key is ``key``, every file verified; None (the
    reason in ``report.why``) when there is none that matches."""
    for place in cache_dirs(folder):
        if not (place / META_FILE).exists():
            continue
        try:
            cached = _read(place, key)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            report.why.append(f"{place}: {exc}")
            continue
        cached.path = place
        report.read = place
        return cached
    if not report.why:
        report.why.append("no cache yet")
    return None


def _read(place: Path, key: list[dict[str, Any]]) -> Cached:
    meta = json.loads((place / META_FILE).read_bytes())
    if meta.get("cache_version") != CACHE_VERSION:
        raise ValueError(f"cache version {meta.get('cache_version')} is not {CACHE_VERSION}")
    if meta.get("reader") != reader_fingerprint():
        raise ValueError("it was written by another version of sweeper's reader")
    if meta.get("files") != key:
        raise ValueError("its key differs from the request files' (they changed since)")
    if meta.get("optional_ints") != list(OPTIONAL_INTS):
        raise ValueError("its columns are not this sweeper's")
    arrays: dict[str, np.ndarray] = {}
    for name in ARRAYS:
        path = place / f"{name}.npy"
        want = meta["arrays"][name]
        if path.stat().st_size != want["bytes"] or file_sha256(path) != want["sha256"]:
            raise ValueError(f"{path.name} does not match its recorded size and SHA-256")
        arrays[name] = np.asarray(np.load(path, mmap_mode="r", allow_pickle=False))
    text_path = place / TEXT_FILE
    data = text_path.read_bytes()
    if hashlib.sha256(data).hexdigest() != meta["text_sha256"]:
        raise ValueError(f"{TEXT_FILE} does not match its recorded SHA-256")
    text = json.loads(data)
    n = int(meta["requests"])
    if set(text) != set(TEXT_FIELDS) or any(len(v) != n for v in text.values()):
        raise ValueError(f"{TEXT_FILE} does not hold {n} requests")
    columns = RequestColumns(text=text, **arrays)
    if len(columns) != n or columns.chunk_start.size != n + 1 or columns.chunks != meta["chunks"]:
        raise ValueError("its arrays do not have the lengths recorded")
    return Cached(columns, list(meta["read_problems"]), list(meta["load_problems"]))


def write_cache(
    folder: Path, key: list[dict[str, Any]], cached: Cached, report: CacheReport
) -> Path | None:
    """Save ``cached`` for ``folder`` in the first place that may be written; None (the reason
    in ``report.why``) where none could be."""
    for place in cache_dirs(folder):
        parent = place.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            report.why.append(f"{parent}: cannot create ({exc.strerror or exc})")
            continue
        if not may_write(parent):
            report.why.append(f"{parent}: not writable; not written there")
            continue
        try:
            _write(place, key, cached, folder)
        except OSError as exc:
            report.why.append(f"{place}: cannot write ({exc.strerror or exc})")
            continue
        report.written = place
        return place
    return None


def _write(place: Path, key: list[dict[str, Any]], cached: Cached, folder: Path) -> None:
    """Written into a temporary folder beside ``place``, then renamed into place: a reader sees
    the old cache, the new one or none, never half of one (and verifies it anyway)."""
    tmp = Path(tempfile.mkdtemp(prefix=f"{place.name}.", suffix=".tmp", dir=place.parent))
    try:
        columns = cached.columns
        arrays = {}
        for name in ARRAYS:
            path = tmp / f"{name}.npy"
            np.save(path, np.ascontiguousarray(getattr(columns, name)), allow_pickle=False)
            arrays[name] = {"bytes": path.stat().st_size, "sha256": file_sha256(path)}
        # Redacted like every file sweeper writes: a line from an older sweeper or another tool
        # may hold a secret (an error message naming a URL with its password) the JSONL kept.
        text = PATTERNS.json(
            json.dumps(columns.text, ensure_ascii=False, separators=(",", ":"))
        ).encode()
        (tmp / TEXT_FILE).write_bytes(text)
        meta = {
            "cache_version": CACHE_VERSION,
            "reader": reader_fingerprint(),
            "trace_set": str(folder.resolve()),
            "written": datetime.now(UTC).isoformat(timespec="seconds"),
            "files": key,
            "optional_ints": list(OPTIONAL_INTS),
            "requests": len(columns),
            "chunks": columns.chunks,
            "largest_level_chunks": largest_level(columns),
            "arrays": arrays,
            "text_sha256": hashlib.sha256(text).hexdigest(),
            "read_problems": cached.read_problems,
            "load_problems": cached.load_problems,
        }
        (tmp / META_FILE).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        file_mode = source_mode(key, folder)
        for path in tmp.iterdir():
            os.chmod(path, file_mode)
        # The folder: the files' mode, searchable by whoever may read them.
        os.chmod(tmp, file_mode | (file_mode & 0o444) >> 2 | 0o700)
        old = place.with_name(f"{place.name}.old-{os.getpid()}")
        moved = False
        try:
            if place.exists():
                shutil.rmtree(old, ignore_errors=True)
                os.replace(place, old)
                moved = True
            os.replace(tmp, place)
        finally:
            # Another writer's cache landing between the two renames makes the second fail:
            # its cache stays; ours is dropped. Never leave the old copy behind.
            if moved:
                if place.exists():
                    shutil.rmtree(old, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        os.replace(old, place)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def source_mode(key: list[dict[str, Any]], folder: Path) -> int:
    """The permission bits the cache's files get: those every request file has (``0600``
    sources give a ``0600`` cache), write kept for the owner."""
    mode = 0o666
    for entry in key:
        with contextlib.suppress(OSError):
            mode &= stat.S_IMODE((folder / entry["name"]).stat().st_mode)
    return (mode & 0o666) | 0o600


def largest_level(columns: RequestColumns) -> int:
    """The most chunks one level holds (what summarizing that level needs memory for)."""
    if not len(columns):
        return 0
    _, level = np.unique(columns.concurrency, return_inverse=True)
    return int(np.bincount(level, weights=columns.chunk_counts).max())


def remove_caches(folder: Path) -> None:
    """Remove every cache of ``folder`` (its files are gone or replaced), and what an
    interrupted write left beside one (``.sweeper-columns.*``: a temporary or old copy)."""
    for place in cache_dirs(folder):
        if place.is_dir() and (place / META_FILE).exists():
            shutil.rmtree(place, ignore_errors=True)
        with contextlib.suppress(OSError):
            for left in place.parent.glob(f"{glob.escape(place.name)}.*"):
                if left.is_dir():
                    shutil.rmtree(left, ignore_errors=True)
