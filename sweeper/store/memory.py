"""How much memory loading a trace set needs, estimated before anything is read, and what the
machine has: a trace set that would not fit is refused with both numbers and the fix, never
half-read (or killed by the kernel half-way).

The estimates are per chunk and per request, measured with ``benchmarks/trace_scale.py``
(docs/trace-schema.md): parsed into objects, a chunk costs ~216 bytes; as columns, 12-16 bytes
(its time and its token count) plus what one level's gaps need while it is summarized.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

from sweeper.errors import ConfigError

# Bytes of memory per chunk and per request, by how a trace set is held (rounded up).
OBJECT_BYTES_PER_CHUNK = 230  # two Python ints in two lists, and the parsing on the way
OBJECT_BYTES_PER_REQUEST = 3_000
COLUMN_BYTES_PER_CHUNK = 16  # int64 time + int32/int64 tokens
COLUMN_BYTES_PER_REQUEST = 1_200  # its text fields as Python strings, its numbers
# Parsing the JSONL into columns, beside its text and the requests' fields: the chunk arrays
# built in parts then joined (two copies), and a batch of requests whose chunk lists are held
# before they are copied into arrays. Measured (peak RSS of parse_columns less the process's
# before it) on benchmarks/trace_scale.py's trace sets, 2026-12-01, a loaded machine: 1 M
# chunks 55.6 MB (text 13.6 MB), 10 M chunks 373 MB (text 136 MB): ~19 B a chunk and a batch
# of ~15 MB. The estimate: 68 MB and 452 MB.
PARSE_BYTES_PER_CHUNK = 24
PARSE_BATCH_BYTES = 24 << 20
# Summarizing one level at a time: the gather index, the gaps, ms, tokens, per-token ITL.
LEVEL_BYTES_PER_CHUNK = 64
# The whole-file read of a JSONL (or its decompressed bytes), beside what is built from it.
SAMPLE_BYTES = 1 << 20
_SAMPLE_COMPRESSED = 256 << 10


@dataclass(frozen=True)
class Size:
    """A trace set's request files: on disk, as JSON text, and the chunks and requests they
    hold (estimated from the first MB when not known)."""

    disk_bytes: int
    text_bytes: int
    chunks: int
    requests: int
    estimated: bool = True


MEMORY_ENV = "SWEEPER_MEMORY_BYTES"
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_AMOUNT = re.compile(r"\s*(\d+(?:\.\d+)?(?:e\d+)?)\s*([kmgt]?)(?:i?b)?\s*", re.IGNORECASE)
# A cgroup v1 limit this large means "no limit" (the kernel writes 2**63 rounded to a page).
_NO_LIMIT = 1 << 60


def parse_bytes(text: str) -> int:
    """``SWEEPER_MEMORY_BYTES``'s value: bytes, or with a binary suffix (``4G``, ``512MiB``,
    ``1.5g``, ``2e9``). Anything else is a :class:`ConfigError` naming the variable."""
    m = _AMOUNT.fullmatch(text)
    if m is None:
        raise ConfigError(
            f"{MEMORY_ENV}={text!r} is not an amount of memory: give bytes (8589934592, 8e9) "
            "or a number with K, M, G or T (binary: 8G is 8 GiB; KiB, MB, ... also read)"
        )
    return int(float(m[1]) * _UNITS[m[2].lower()])


def available_bytes(
    *, proc: Path = Path("/proc"), cgroup_root: Path = Path("/sys/fs/cgroup")
) -> int:
    """Memory this process may still use: ``SWEEPER_MEMORY_BYTES`` when set, else the least of
    the system's MemAvailable and the room left in this process's own cgroups
    (:func:`cgroup_room`: v2 and v1)."""
    own = os.environ.get(MEMORY_ENV, "").strip()
    if own:
        return parse_bytes(own)
    values = []
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in (proc / "meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                values.append(int(line.split()[1]) * 1024)
    room = cgroup_room(proc=proc, cgroup_root=cgroup_root)
    if room is not None:
        values.append(room)
    return max(0, min(values)) if values else 1 << 62


def cgroup_room(
    *, proc: Path = Path("/proc"), cgroup_root: Path = Path("/sys/fs/cgroup")
) -> int | None:
    """The memory this process's cgroups leave it (limit less use, page cache the kernel can
    reclaim not counted as use), the least over its cgroup and the ancestors that are visible;
    None where no limit is set or none can be read. ``/proc/self/cgroup`` names the cgroups:
    ``0::/path`` (v2: ``memory.max``, ``memory.current``, ``inactive_file`` of ``memory.stat``)
    and ``N:...memory...:/path`` (v1: ``memory/memory.limit_in_bytes``,
    ``memory.usage_in_bytes``, ``total_inactive_file``)."""
    try:
        lines = (proc / "self" / "cgroup").read_text().splitlines()
    except OSError:
        return None
    rooms: list[int] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if parts[0] == "0" and controllers == "":
            base, files = cgroup_root, ("memory.max", "memory.current", "inactive_file")
        elif "memory" in controllers.split(","):
            base = cgroup_root / "memory"
            files = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
        else:
            continue
        for folder in _cgroup_folders(base, path):
            room = _room(folder, *files)
            if room is not None:
                rooms.append(room)
    return min(rooms) if rooms else None


def _cgroup_folders(base: Path, path: str) -> list[Path]:
    """The folders of a cgroup and its ancestors under ``base`` (in a container, whose own
    cgroup is its root, the path named may not exist: the root is then the cgroup)."""
    rel = [p for p in path.strip().split("/") if p]
    found = [base.joinpath(*rel[:n]) for n in range(len(rel), -1, -1)]
    return [f for f in found if f.is_dir()]


def _room(folder: Path, limit_file: str, used_file: str, reclaimable: str) -> int | None:
    try:
        limit_text = (folder / limit_file).read_text().strip()
    except OSError:
        return None
    if limit_text == "max":
        return None
    try:
        limit = int(limit_text)
        used = int((folder / used_file).read_text().strip())
    except (OSError, ValueError):
        return None
    if limit >= _NO_LIMIT:
        return None
    cache = 0
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in (folder / "memory.stat").read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == reclaimable:
                cache = int(value)
                break
    return limit - max(0, used - cache)


def measure(paths: list[Path]) -> Size:
    """The size of a trace set's request files, estimated from the first MB of each."""
    disk = text = chunks = requests = 0
    for path in paths:
        size = path.stat().st_size
        disk += size
        sample, ratio = _sample(path, size)
        file_text = int(size * ratio)
        text += file_text
        lines = [line for line in sample.split(b"\n")[:-1] if line.strip()]
        if not lines:
            continue
        n_chunks = 0
        for line in lines:
            try:
                n_chunks += len(json.loads(line).get("chunk_ns") or ())
            except (ValueError, AttributeError):
                continue
        used = sum(len(line) + 1 for line in lines)
        chunks += int(n_chunks * file_text / used)
        requests += int(len(lines) * file_text / used)
    return Size(disk, text, chunks, requests)


def _sample(path: Path, size: int) -> tuple[bytes, float]:
    """The first MB of a request file as text, and text bytes per byte on disk."""
    with path.open("rb") as fh:
        if path.suffix != ".gz":
            return fh.read(SAMPLE_BYTES), 1.0
        raw = fh.read(_SAMPLE_COMPRESSED)
    inflater = zlib.decompressobj(wbits=31)
    try:
        out = inflater.decompress(raw, SAMPLE_BYTES)
    except zlib.error:
        return b"", 1.0
    used = len(raw) - len(inflater.unused_data) - len(inflater.unconsumed_tail)
    return out, (len(out) / used if used > 0 else 1.0)


def objects_need(size: Size) -> int:
    """Loading as today: the text read whole, every request and chunk a Python object."""
    return (
        size.text_bytes
        + size.chunks * OBJECT_BYTES_PER_CHUNK
        + size.requests * OBJECT_BYTES_PER_REQUEST
    )


def columns_need(
    size: Size, *, parse: bool, level_chunks: int | None = None, summarize: bool = False
) -> int:
    """Loading into columns: ``parse``, from the JSONL (read whole, the chunk arrays built in
    parts: :data:`PARSE_BYTES_PER_CHUNK`), else from the cache (the arrays held); and, only
    when ``summarize``, summarizing a level at a time: ``level_chunks`` in the largest level (a
    cache knows it; else every chunk is assumed to be in one). A load does not summarize: a
    first load or a compaction is not refused for what a later summary needs."""
    held = size.chunks * COLUMN_BYTES_PER_CHUNK + size.requests * COLUMN_BYTES_PER_REQUEST
    if parse:
        # The peak is while parsing (the text, both copies of the arrays, a batch of lists).
        held = (
            size.text_bytes
            + size.chunks * PARSE_BYTES_PER_CHUNK
            + size.requests * COLUMN_BYTES_PER_REQUEST
            + min(PARSE_BATCH_BYTES, size.chunks * 80)
        )
    if not summarize:
        return held
    level = size.chunks if level_chunks is None else level_chunks
    return held + level * LEVEL_BYTES_PER_CHUNK


def gib(n: float) -> str:
    """``2.1 GiB``, ``310 MiB``, ``12 KiB``."""
    if n >= 1 << 28:
        return f"{n / (1 << 30):,.1f} GiB"
    return f"{n / (1 << 20):,.0f} MiB" if n >= 1 << 20 else f"{n / 1024:,.0f} KiB"
