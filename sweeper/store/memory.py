"""How much memory loading a trace set needs, estimated before anything is read, and what the
machine has: a trace set that would not fit is refused with both numbers and the fix, never
half-read (or killed by the kernel half-way).

The estimates are per chunk and per request, measured with ``benchmarks/trace_scale.py``
(docs/trace-schema.md): parsed into objects, a chunk costs ~216 bytes; as columns, 12-16 bytes
(its time and its token count) plus what one level's gaps need while it is summarized.
"""

from __future__ import annotations

import json
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

# Bytes of memory per chunk and per request, by how a trace set is held (rounded up).
OBJECT_BYTES_PER_CHUNK = 230  # two Python ints in two lists, and the parsing on the way
OBJECT_BYTES_PER_REQUEST = 3_000
COLUMN_BYTES_PER_CHUNK = 16  # int64 time + int32/int64 tokens
COLUMN_BYTES_PER_REQUEST = 1_200  # its text fields as Python strings, its numbers
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


def available_bytes() -> int:
    """Memory this process may still use: ``SWEEPER_MEMORY_BYTES`` when set, else the least of
    the system's MemAvailable and the cgroup's limit less its use."""
    own = os.environ.get("SWEEPER_MEMORY_BYTES")
    if own:
        return int(float(own))
    values = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                values.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text().strip())
        if limit != "max":
            values.append(int(limit) - used)
    except (OSError, ValueError):
        pass
    return min(values) if values else 1 << 62


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


def columns_need(size: Size, *, parse: bool, level_chunks: int | None = None) -> int:
    """Loading into columns (``parse``: from the JSONL, which is read whole; else from the
    cache), and summarizing a level at a time: ``level_chunks`` in the largest level (a cache
    knows it; before a parse, every chunk is assumed to be in one)."""
    held = size.chunks * COLUMN_BYTES_PER_CHUNK + size.requests * COLUMN_BYTES_PER_REQUEST
    text = size.text_bytes if parse else 0
    level = size.chunks if level_chunks is None else level_chunks
    return held + text + level * LEVEL_BYTES_PER_CHUNK


def gib(n: float) -> str:
    """``2.1 GiB``, ``310 MiB``, ``12 KiB``."""
    if n >= 1 << 28:
        return f"{n / (1 << 30):,.1f} GiB"
    return f"{n / (1 << 20):,.0f} MiB" if n >= 1 << 20 else f"{n / 1024:,.0f} KiB"
