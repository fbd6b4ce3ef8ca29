"""Every request of a trace set as columns: numpy arrays instead of one Python object per chunk.

A :class:`~sweeper.schema.RequestTrace` holds its chunk times as two Python lists, ~216 bytes a
chunk once parsed: a 100 M-chunk sweep would need ~22 GB. :class:`RequestColumns` holds the same
facts in flat arrays (8 bytes a chunk time, 4 or 8 a token count) plus one entry per request, in
the order of :attr:`TraceSet.requests <sweeper.store.TraceSet.requests>`. It converts both ways
without loss (:meth:`RequestColumns.from_requests`, :meth:`RequestColumns.to_requests`), so the
analysis reads the arrays while any caller of ``ts.requests`` still gets the objects.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np

from sweeper.schema import RequestError, RequestTrace

# The optional integer fields of a request, stored as int64 values and a "present" flag each.
OPTIONAL_INTS = (
    "end_ns",
    "ttft_ns",
    "e2el_ns",
    "prompt_tokens",
    "completion_tokens",
    "worker",
    "scheduled_ns",
    "session",
    "turn",
    "asked_input_tokens",
    "asked_output_tokens",
)
# The per-request text and JSON fields, kept as Python lists (one entry per request).
TEXT_FIELDS = ("request_id", "phase", "status", "finish_reason", "error", "server_timing")
INT32 = np.iinfo(np.int32)


@dataclass(frozen=True, eq=False)
class RequestColumns:
    """The requests of a trace set, one entry per request (``n``) and per chunk (``m``).

    ``chunk_start[i]:chunk_start[i + 1]`` are request i's chunks in ``chunk_ns`` (ns after its
    send) and ``chunk_tokens``. ``ints[k]`` is :data:`OPTIONAL_INTS` [k] of every request, valid
    where ``present[k]``; ``text`` holds :data:`TEXT_FIELDS` (``error`` and ``server_timing`` as
    the JSON objects read, ``None`` where absent)."""

    concurrency: np.ndarray  # int64 [n]
    send_ns: np.ndarray  # int64 [n]
    chunk_start: np.ndarray  # int64 [n + 1]
    chunk_ns: np.ndarray  # int64 [m]
    chunk_tokens: np.ndarray  # int32 or int64 [m]
    token_sum: np.ndarray  # int64 [n]: each request's chunk_tokens summed
    multi_chunks: np.ndarray  # int64 [n]: each request's chunks of more than one token
    ints: np.ndarray  # int64 [len(OPTIONAL_INTS), n]
    present: np.ndarray  # bool [len(OPTIONAL_INTS), n]
    text: dict[str, list[Any]]

    def __len__(self) -> int:
        return int(self.concurrency.size)

    @property
    def chunks(self) -> int:
        """How many chunks all requests carry together."""
        return int(self.chunk_ns.size)

    @property
    def chunk_counts(self) -> np.ndarray:
        return np.diff(self.chunk_start)

    def optional(self, name: str) -> np.ndarray:
        """An optional integer field of every request as floats, NaN where absent (what the
        frames compute with: the same ``float(value)`` as for one request)."""
        k = OPTIONAL_INTS.index(name)
        return np.where(self.present[k], self.ints[k].astype(float), np.nan)

    def is_(self, field: str, value: str) -> np.ndarray:
        """A boolean mask: requests whose text ``field`` (``phase``, ``status``) is ``value``."""
        return np.asarray(np.array(self.text[field], dtype=object) == value, dtype=bool)

    def nbytes(self) -> int:
        arrays = (self.concurrency, self.send_ns, self.chunk_start, self.chunk_ns)
        return sum(a.nbytes for a in arrays) + self.chunk_tokens.nbytes + self.ints.nbytes

    # -----------------------------------------------------------------------------------------
    # conversions

    @classmethod
    def from_requests(cls, requests: Sequence[RequestTrace]) -> RequestColumns:
        """The columns of a list of requests (in that order)."""
        builder = ColumnsBuilder()
        for trace in requests:
            builder.add(trace)
        return builder.build()

    def to_requests(self, indices: Iterable[int] | None = None) -> list[RequestTrace]:
        """The requests as :class:`RequestTrace` objects (all, or those at ``indices``), equal to
        those the columns were made from."""
        rows = range(len(self)) if indices is None else indices
        starts = self.chunk_start.tolist()
        fields = self._rows()
        out = []
        for i in rows:
            one = fields(i)
            lo, hi = starts[i], starts[i + 1]
            one["chunk_ns"] = self.chunk_ns[lo:hi].tolist()
            one["chunk_tokens"] = self.chunk_tokens[lo:hi].tolist()
            out.append(RequestTrace.model_validate(one))
        return out

    def heads(self) -> list[RequestTrace]:
        """Every request without its chunks (``chunk_ns`` and ``chunk_tokens`` empty, every other
        field as read): for readers of per-request fields only, at a fraction of the memory."""
        blank = RequestTrace(concurrency=1, request_id="", send_ns=0).__dict__
        fields = self._rows()
        out = []
        for i in range(len(self)):
            one = fields(i)
            error = one.get("error")
            if error is not None:
                one["error"] = RequestError.model_validate(error)
            values = {**blank, **one, "chunk_ns": [], "chunk_tokens": []}
            out.append(_construct(values, set(one)))
        return out

    def _rows(self) -> Callable[[int], dict[str, Any]]:
        """A function giving one request's fields (as read: absent ones left out)."""
        # Columns every request has (most) go in by one zip; the others are looked at per row.
        whole: list[tuple[str, list[Any]]] = [
            ("concurrency", self.concurrency.tolist()),
            ("send_ns", self.send_ns.tolist()),
        ]
        some: list[tuple[str, list[Any], list[bool]]] = []
        for name in TEXT_FIELDS:
            values = self.text[name]
            has = [v is not None for v in values]
            if all(has):
                whole.append((name, values))
            elif any(has):
                some.append((name, values, has))
        for k, name in enumerate(OPTIONAL_INTS):
            has_k = self.present[k]
            if has_k.all():
                whole.append((name, self.ints[k].tolist()))
            elif has_k.any():
                some.append((name, self.ints[k].tolist(), has_k.tolist()))
        names = [name for name, _ in whole]
        rows = list(zip(*(values for _, values in whole), strict=True))

        def fields(i: int) -> dict[str, Any]:
            one = dict(zip(names, rows[i], strict=True))
            for name, values, has in some:
                if has[i]:
                    one[name] = values[i]
            return one

        return fields


_set = object.__setattr__


def _construct(values: dict[str, Any], fields_set: set[str]) -> RequestTrace:
    """A :class:`RequestTrace` of values already valid, as ``model_construct`` makes it (the
    same four attributes) without its per-field default lookups (~17 us a request; this ~1 us).
    tests/test_store_cache.py checks that the result equals a validated request."""
    trace = RequestTrace.__new__(RequestTrace)
    _set(trace, "__dict__", values)
    _set(trace, "__pydantic_fields_set__", fields_set)
    _set(trace, "__pydantic_extra__", None)
    _set(trace, "__pydantic_private__", None)
    return trace


class ColumnsBuilder:
    """Collects requests one at a time into columns without keeping the objects: the chunk
    lists are copied into arrays in batches (one C-speed pass per batch, no Python frame per
    chunk), so a loader holds ~12-16 bytes a chunk, never the parsed lists of every request."""

    BATCH = 2048

    def __init__(self) -> None:
        self._conc: list[int] = []
        self._send: list[int] = []
        self._counts: list[int] = []
        self._ints: list[list[int]] = [[] for _ in OPTIONAL_INTS]
        self._present: list[list[bool]] = [[] for _ in OPTIONAL_INTS]
        self._text: dict[str, list[Any]] = {name: [] for name in TEXT_FIELDS}
        self._pending_ns: list[list[int]] = []
        self._pending_tokens: list[list[int]] = []
        self._ns_parts: list[np.ndarray] = []
        self._token_parts: list[np.ndarray] = []

    def add(self, trace: RequestTrace) -> None:
        self._conc.append(trace.concurrency)
        self._send.append(trace.send_ns)
        self._counts.append(len(trace.chunk_ns))
        for k, name in enumerate(OPTIONAL_INTS):
            value = getattr(trace, name)
            self._present[k].append(value is not None)
            self._ints[k].append(0 if value is None else value)
        text = self._text
        text["request_id"].append(trace.request_id)
        text["phase"].append(trace.phase)
        text["status"].append(trace.status)
        text["finish_reason"].append(trace.finish_reason)
        text["error"].append(trace.error.model_dump() if trace.error is not None else None)
        text["server_timing"].append(trace.server_timing)
        if trace.chunk_ns:
            self._pending_ns.append(trace.chunk_ns)
            self._pending_tokens.append(trace.chunk_tokens)
            if len(self._pending_ns) >= self.BATCH:
                self._flush()

    def _flush(self) -> None:
        if not self._pending_ns:
            return
        total = sum(map(len, self._pending_ns))
        self._ns_parts.append(
            np.fromiter(chain.from_iterable(self._pending_ns), dtype=np.int64, count=total)
        )
        self._token_parts.append(
            np.fromiter(chain.from_iterable(self._pending_tokens), dtype=np.int64, count=total)
        )
        self._pending_ns, self._pending_tokens = [], []

    def build(self, order: np.ndarray | None = None) -> RequestColumns:
        """The columns, requests in the order added, or in ``order`` (indices into it)."""
        self._flush()
        n = len(self._conc)
        counts = np.asarray(self._counts, dtype=np.int64)
        chunk_ns = _concat(self._ns_parts)
        tokens = _concat(self._token_parts)
        self._ns_parts, self._token_parts = [], []
        if tokens.size and INT32.min <= tokens.min() and tokens.max() <= INT32.max:
            tokens = tokens.astype(np.int32)
        ints = np.asarray(self._ints, dtype=np.int64).reshape(len(OPTIONAL_INTS), n)
        present = np.asarray(self._present, dtype=bool).reshape(len(OPTIONAL_INTS), n)
        conc = np.asarray(self._conc, dtype=np.int64)
        send = np.asarray(self._send, dtype=np.int64)
        text = self._text
        if order is not None and not np.array_equal(order, np.arange(n)):
            gather = chunk_gather(_starts(counts), counts, order)
            chunk_ns, tokens = chunk_ns[gather], tokens[gather]
            counts, conc, send = counts[order], conc[order], send[order]
            ints, present = ints[:, order], present[:, order]
            picks = order.tolist()
            text = {name: [values[i] for i in picks] for name, values in text.items()}
        chunk_start = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return RequestColumns(
            concurrency=conc,
            send_ns=send,
            chunk_start=chunk_start,
            chunk_ns=chunk_ns,
            chunk_tokens=tokens,
            token_sum=_per_request(tokens, chunk_start),
            multi_chunks=_per_request(tokens > 1, chunk_start),
            ints=ints,
            present=present,
            text=text,
        )


def _per_request(values: np.ndarray, chunk_start: np.ndarray) -> np.ndarray:
    """Each request's sum of ``values`` over its chunks (exact: integer running sums)."""
    running = np.concatenate([[0], np.cumsum(values, dtype=np.int64)])
    return running[chunk_start[1:]] - running[chunk_start[:-1]]


def _concat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _starts(counts: np.ndarray) -> np.ndarray:
    return np.cumsum(counts) - counts


def chunk_gather(starts: np.ndarray, counts: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The positions in the chunk arrays of the chunks of ``rows``, request after request."""
    lengths = counts[rows]
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    # Each output position: its request's start plus its place within the request.
    offset = np.repeat(starts[rows] - (np.cumsum(lengths) - lengths), lengths)
    return offset + np.arange(total, dtype=np.int64)
