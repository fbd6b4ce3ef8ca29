"""Ground truth of the scripted server: what it wrote, when, per request.

Every write of a response event is stamped with ``time.monotonic_ns()`` taken immediately before
the bytes go to the socket (for an event written in pieces: before its last piece). On Linux that
is CLOCK_MONOTONIC, the same clock in every process of the host, and the clock behind Python's
``time.perf_counter_ns()``, so a client's receive times and these write times subtract directly.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

EventKind = Literal[
    "headers", "role", "content", "usage", "done", "error", "malformed", "comment", "body"
]
TruthStatus = Literal["running", "ok", "fault", "rejected", "disconnected"]


@dataclass(eq=False)
class RequestTruth:
    """One request as the server saw and served it. ``events`` are parallel lists: the kind of
    each write, its monotonic ns, and the tokens it carried (content events only)."""

    request_id: str
    endpoint: str
    stream: bool
    received_ns: int
    prompt_tokens: int = 0
    max_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    faults: str = ""
    status: TruthStatus = "running"
    http_status: int = 200
    admitted_ns: int | None = None
    first_token_ns: int | None = None
    finished_ns: int | None = None
    preemptions: int = 0
    cached_tokens: int = 0  # prompt tokens the prefix cache held (prefix_caching)
    # the nominal time of each content chunk in schedule mode (monotonic ns)
    due_ns: list[int] = field(default_factory=list)
    event_kind: list[str] = field(default_factory=list)
    event_ns: list[int] = field(default_factory=list)
    event_tokens: list[int] = field(default_factory=list)

    def add_event(self, kind: EventKind, t_ns: int, tokens: int = 0) -> None:
        self.event_kind.append(kind)
        self.event_ns.append(t_ns)
        self.event_tokens.append(tokens)

    @property
    def content_ns(self) -> list[int]:
        """Write times of the content-bearing events, in order."""
        return [t for k, t in zip(self.event_kind, self.event_ns, strict=True) if k == "content"]

    @property
    def content_tokens(self) -> list[int]:
        return [
            n for k, n in zip(self.event_kind, self.event_tokens, strict=True) if k == "content"
        ]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["content_ns"] = self.content_ns
        data["content_tokens"] = self.content_tokens
        return data


class TruthStore:
    """Truth of the most recent requests by id (a re-used id replaces the older entry)."""

    def __init__(self, limit: int = 0) -> None:
        self._limit = limit
        self._items: OrderedDict[str, RequestTruth] = OrderedDict()

    def add(self, truth: RequestTruth) -> None:
        self._items.pop(truth.request_id, None)
        self._items[truth.request_id] = truth
        if self._limit and len(self._items) > self._limit:
            self._items.popitem(last=False)

    def get(self, request_id: str) -> RequestTruth | None:
        return self._items.get(request_id)

    def all(self) -> list[RequestTruth]:
        return list(self._items.values())

    def clear(self) -> None:
        self._items.clear()

    def __len__(self) -> int:
        return len(self._items)
