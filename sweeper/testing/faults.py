"""Fault injection for the scripted server: the fault names, their parser, and how a request gets one.

A request asks for faults with the header ``X-Sweeper-Fault: <spec>``; requests without it get the
server's :class:`~sweeper.testing.config.FaultRule` s (by probability, drawn from a seeded
generator in arrival order, or every N-th request). A spec is a comma-separated list of items:

=====================  =========================================================================
``reset``              TCP reset (RST) right after the request is read, before any response byte
``close``              orderly close (FIN) before any response byte
``http=CODE``          answer HTTP CODE with a vLLM-style error body; ``http_500``, ``http_429``
                       and ``http_400`` are shorthands. 429 carries ``Retry-After`` (``retry_after=S``,
                       default 1)
``delay=MS``           wait MS before sending the response headers
``cut=N``              close the connection after N content chunks: no finish, no ``[DONE]``, an
                       unterminated chunked body
``malformed=N``        after N content chunks, one ``data:`` line that is not JSON (the stream goes on)
``error=N``            after N content chunks, an error object in the stream, then ``[DONE]``
``stall=MS[@N]``       after N content chunks (default 0: right after the headers) send nothing for MS
``no_done``            end the stream after the finish (and usage) chunk without ``data: [DONE]``
``no_usage``           leave out the usage chunk even when ``include_usage`` asks for it
``comments``           an SSE comment (``: keep-alive``) and an empty line before every event
``split[=SEED]``       write every event in 2-4 pieces split at random byte offsets (seeded), one
                       of them inside a multi-byte UTF-8 character where the event has one, with
                       ``split_delay_ms`` between pieces
``echo_auth``          answer HTTP 401 (or ``http=CODE``) with a vLLM-style error body whose message
                       holds the request's ``Authorization`` and ``api-key`` header values verbatim,
                       as a careless server does (``(none)`` when it has neither)
``usage=BAD``          the usage's token counts (``prompt_tokens``, ``completion_tokens``,
                       ``total_tokens``; the stream's usage chunk, a whole response's ``usage``) are
                       ``nan`` (``NaN``), ``inf`` (``Infinity``) or ``many`` (the string ``"many"``);
                       running usage (``continuous_usage_stats``) stays right
``timings_inf``        a llama.cpp-style ``timings`` object (``prompt_n``, ``prompt_ms``,
                       ``prompt_per_second`` ``Infinity``, ``predicted_n``, ``predicted_ms``,
                       ``predicted_per_second``) on the finish chunk (a whole response: the body)
=====================  =========================================================================

Non-finite ``/metrics`` values are a server setting, not a request's fault:
``ScriptedServerConfig(metrics_nonfinite=True)`` (CLI ``--metrics-nonfinite``) adds
``vllm:spec_decode_draft_acceptance_rate NaN`` (an idle spec-decode acceptance rate, as real vLLM
pages show) and ``vllm:spec_decode_mean_acceptance_length +Inf`` gauges to every page.

"Connection refused" needs no server: :func:`sweeper.testing.server.closed_port_url`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from sweeper.errors import ConfigError
from sweeper.testing.config import FaultRule

FAULT_HEADER = "x-sweeper-fault"
DEFAULT_RETRY_AFTER_S = 1.0
_SHORTHAND_STATUS = {"http_500": 500, "http_429": 429, "http_400": 400, "http_503": 503}
FAULT_NAMES = (
    "reset",
    "close",
    "http",
    *_SHORTHAND_STATUS,
    "retry_after",
    "delay",
    "cut",
    "malformed",
    "error",
    "stall",
    "no_done",
    "no_usage",
    "comments",
    "split",
    "echo_auth",
    "usage",
    "timings_inf",
)
# usage=BAD: what each bad count is on the wire (json.dumps writes NaN and Infinity bare).
BAD_USAGE: dict[str, object] = {"nan": float("nan"), "inf": float("inf"), "many": "many"}


@dataclass(frozen=True)
class Faults:
    """The faults one request gets (all off by default)."""

    spec: str = ""
    reset: bool = False
    close: bool = False
    http_status: int | None = None
    retry_after_s: float = DEFAULT_RETRY_AFTER_S
    delay_ms: float = 0.0
    cut_after: int | None = None
    malformed_after: int | None = None
    error_after: int | None = None
    stall_ms: float = 0.0
    stall_after: int = 0
    no_done: bool = False
    no_usage: bool = False
    comments: bool = False
    split_seed: int | None = None
    echo_auth: bool = False
    bad_usage: str | None = None
    timings_inf: bool = False

    @property
    def any(self) -> bool:
        return bool(self.spec)


NO_FAULTS = Faults()


def _number(item: str, value: str | None, *, integer: bool) -> float:
    if value is None or value == "":
        raise ConfigError(f"fault {item!r} needs a value, e.g. {item}=3")
    try:
        number = int(value) if integer else float(value)
    except ValueError as exc:
        kind = "an integer" if integer else "a number"
        raise ConfigError(f"fault {item!r}: {value!r} is not {kind}") from exc
    if number < 0:
        raise ConfigError(f"fault {item!r}: {value!r} must be >= 0")
    return number


def parse_faults(spec: str) -> Faults:
    """Parse a fault spec (see the module docstring); raises ConfigError naming the bad item."""
    fields: dict[str, object] = {"spec": spec.strip()}
    for raw in spec.split(","):
        item = raw.strip()
        if not item:
            continue
        name, _, value = item.partition("=")
        name = name.strip().lower()
        has_value = "=" in item
        flags = ("reset", "close", "no_done", "no_usage", "comments", "echo_auth", "timings_inf")
        if name in flags and not has_value:
            fields[name] = True
        elif name in _SHORTHAND_STATUS and not has_value:
            fields["http_status"] = _SHORTHAND_STATUS[name]
        elif name == "http":
            status = int(_number(item, value, integer=True))
            if not 400 <= status < 600:
                raise ConfigError(f"fault {item!r}: HTTP status must be 4xx or 5xx")
            fields["http_status"] = status
        elif name == "retry_after":
            fields["retry_after_s"] = _number(item, value, integer=False)
        elif name == "delay":
            fields["delay_ms"] = _number(item, value, integer=False)
        elif name in ("cut", "malformed", "error"):
            after = int(_number(item, value, integer=True)) if has_value else 1
            fields[f"{name}_after"] = after
        elif name == "stall":
            duration, _, at = value.partition("@")
            fields["stall_ms"] = _number(item, duration, integer=False)
            fields["stall_after"] = int(_number(item, at, integer=True)) if at else 0
        elif name == "usage":
            if value not in BAD_USAGE:
                raise ConfigError(f"fault {item!r}: use usage={'|'.join(BAD_USAGE)}")
            fields["bad_usage"] = value
        elif name == "split":
            fields["split_seed"] = int(_number(item, value, integer=True)) if has_value else 0
        else:
            raise ConfigError(
                f"unknown fault {item!r}; known faults: {', '.join(FAULT_NAMES)} "
                "(see sweeper.testing.faults)"
            )
    return Faults(**fields)  # type: ignore[arg-type]


class FaultPicker:
    """Chooses the faults of each request: its header if it has one, else the server's rules."""

    def __init__(self, rules: tuple[FaultRule, ...], seed: int) -> None:
        self._rules = [(rule, parse_faults(rule.spec)) for rule in rules]
        self._rng = random.Random(seed)
        self._count = 0

    def pick(self, header: str | None) -> Faults:
        self._count += 1
        if header is not None:
            return parse_faults(header)
        for rule, faults in self._rules:
            if rule.every and self._count % rule.every == 0:
                return faults
            if rule.probability and self._rng.random() < rule.probability:
                return faults
        return NO_FAULTS


def split_points(data: bytes, seed: int) -> list[int]:
    """Offsets (sorted, inside ``data``) at which to cut an event into 2-4 pieces; one of them falls
    inside a multi-byte UTF-8 character when the event has one."""
    if len(data) < 2:
        return []
    rng = random.Random(seed ^ len(data))
    points: set[int] = set()
    # A continuation byte (0b10xxxxxx) is never the first byte of a character: cutting before it
    # splits the character.
    inside = [i for i, byte in enumerate(data) if i and byte & 0xC0 == 0x80]
    if inside:
        points.add(rng.choice(inside))
    while len(points) < rng.randint(1, 3):
        points.add(rng.randrange(1, len(data)))
    return sorted(points)
