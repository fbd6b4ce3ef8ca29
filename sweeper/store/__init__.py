"""The trace contract's files: the one writer and the one reader of trace sets
(``traces/<run-id>/``), compaction, discovery, and the columnar cache that lets a large trace set
load without one Python object per chunk.

- :mod:`~sweeper.store.files`: writing (``TraceSetWriter``, ``write_trace_set``), the manifest,
  the line reader, compaction of the files, discovery of trace sets;
- :mod:`~sweeper.store.loading`: ``load_trace_set`` -> ``TraceSet``, ``compact_trace_set``;
- :mod:`~sweeper.store.columns`: ``RequestColumns``, every request as flat arrays;
- :mod:`~sweeper.store.cache`: those columns saved beside the JSONL, keyed by its hash;
- :mod:`~sweeper.store.memory`: what a load needs, estimated before it starts.

Everything is imported from here (``from sweeper.store import load_trace_set``).
"""

from sweeper.store.cache import CACHE_DIR, CacheReport
from sweeper.store.columns import RequestColumns
from sweeper.store.files import (
    DEFAULT_TRACES_DIR,
    Compacted,
    TraceSetLock,
    TraceSetWriter,
    atomic_write,
    copy_redacted,
    discover_trace_sets,
    duplicate_run_ids,
    iter_jsonl,
    metrics_files,
    read_manifest,
    requests_files,
    resolve_run,
    write_manifest,
    write_trace_set,
)
from sweeper.store.loading import (
    CACHE_MIN_BYTES,
    MAX_NAMED_PROBLEMS,
    CachePolicy,
    TraceSet,
    compact_trace_set,
    load_trace_set,
)

__all__ = [
    "CACHE_DIR",
    "CACHE_MIN_BYTES",
    "DEFAULT_TRACES_DIR",
    "MAX_NAMED_PROBLEMS",
    "CachePolicy",
    "CacheReport",
    "Compacted",
    "RequestColumns",
    "TraceSet",
    "TraceSetLock",
    "TraceSetWriter",
    "atomic_write",
    "compact_trace_set",
    "copy_redacted",
    "discover_trace_sets",
    "duplicate_run_ids",
    "iter_jsonl",
    "load_trace_set",
    "metrics_files",
    "read_manifest",
    "requests_files",
    "resolve_run",
    "write_manifest",
    "write_trace_set",
]
