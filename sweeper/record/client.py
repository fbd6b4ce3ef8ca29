"""One streamed request to an OpenAI-compatible server, timed, as a :class:`RequestTrace`.

The clock is injected (``Clock``: a function returning monotonic nanoseconds), so tests can
drive it; the default is ``time.monotonic_ns`` (CLOCK_MONOTONIC on Linux, the clock every
process on the host shares: a test server or a second recorder process reads the same one).

Each network read is stamped once, when it returns (httpx), or when its bytes arrived (the raw
client, :mod:`sweeper.record.http`: the kernel's receive time over plain TCP on Linux); every
event it completed gets that time. A :class:`~sweeper.record.stamps.StampStats` passed in counts
the reads and the chunks that shared one (the recorder's self-check).
A failed request is data: its trace carries the error kind, HTTP status and message, and the
chunks that arrived before the failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from sweeper.record.http import (
    ConnectFailed,
    ConnectionLost,
    ProtocolViolation,
    RawClient,
    RawResponse,
    describe_exception,
)
from sweeper.record.sse import (
    DONE_MARKER,
    ChunkReader,
    SSEParser,
    StreamFormatError,
    StreamServerError,
)
from sweeper.record.stamps import StampStats
from sweeper.schema import ErrorKind, RequestError, RequestTrace

Clock = Callable[[], int]
"""Monotonic time in nanoseconds."""

StreamClient = httpx.AsyncClient | RawClient
"""What streams: the raw HTTP/1.1 client (default for http/https) or an httpx client."""

MAX_ERROR_MESSAGE_CHARS = 500
REQUEST_ID_HEADER = "X-Request-Id"
DRAIN_AFTER_DONE_S = 0.05
# Request fields that not every server accepts; dropped (with one warning) when a 4xx names them.
OPTIONAL_FIELDS = ("ignore_eos", "min_tokens", "continuous_usage_stats", "stream_options")
# A server that closed an idle keep-alive connection makes the next request on it fail before
# any byte comes back (llama.cpp closes idle ones after 5 s); such a request is sent again once.
RETRY_BEFORE_RESPONSE = 1


def default_clock() -> int:
    return time.monotonic_ns()


@dataclass
class RequestSpec:
    """What to send: the id and level it belongs to and the JSON body."""

    request_id: str
    concurrency: int
    phase: str
    body: dict[str, Any]
    worker: int | None = None
    header_id: str | None = None  # sent as X-Request-Id (vLLM and others log it)
    # Open loop: when the schedule says to send (ns after the run's origin); offset_ns is its
    # due time within the level, before the level's start is known.
    scheduled_ns: int | None = None
    offset_ns: int = 0
    session: int | None = None
    turn: int | None = None
    asked_input_tokens: int | None = None
    asked_output_tokens: int | None = None
    keep_text: bool = False  # collect the answer's text (multi-turn history)
    answer: str | None = None  # the answer's text, when keep_text (set once sent)
    # When the recorder read the answer's last bytes, ns after send (set once sent; not
    # recorded: the self-check's send gap starts there).
    read_end_ns: int | None = None


@dataclass
class RequestShaper:
    """Shared by all requests of a run: the optional fields the server turned down.

    When a 4xx answer names one of :data:`OPTIONAL_FIELDS` that the request carried, the field is
    dropped for this and every later request and ``on_warning`` is called once per field.
    """

    dropped: set[str] = field(default_factory=set)
    on_warning: Callable[[str], None] | None = None

    def apply(self, body: dict[str, Any]) -> dict[str, Any]:
        if not self.dropped:
            return body
        out = copy.deepcopy(body)
        for name in self.dropped:
            out.pop(name, None)
            opts = out.get("stream_options")
            if isinstance(opts, dict):
                opts.pop(name, None)
        return out

    def learn(self, status: int, text: str, body: dict[str, Any]) -> bool:
        """True if the rejection named optional fields the body carried (retry without them)."""
        if not (400 <= status < 500) or status == httpx.codes.TOO_MANY_REQUESTS:
            return False
        present = set(body) | set(body.get("stream_options") or {})
        named = {f for f in OPTIONAL_FIELDS if f in present and f in text}
        if not named:
            return False
        for name in sorted(named - self.dropped):
            if self.on_warning is not None:
                self.on_warning(
                    f"the server rejected {name!r} (HTTP {status}); sending requests without it"
                    + (
                        ": output lengths may fall short of --output-len"
                        if name in ("ignore_eos", "min_tokens")
                        else ""
                    )
                )
        self.dropped |= named
        return True


@dataclass
class _Stream:
    chunk_ns: list[int] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    bytes_seen: bool = False
    done: bool = False
    end_ns: int | None = None
    read_ns: int | None = None  # when the last read returned (ns after send)
    server_timing: dict[str, float] | None = None


async def open_connections(client: StreamClient, url: str, count: int) -> None:
    """Before a closed loop's first round: ``count`` connections to the server open and idle.
    A request's time starts before it takes its connection, so a round of C requests opening C
    connections at once was timed through C TCP handshakes queued at the server's accept (at
    512 streams on the scripted server: a 1.3-1.9 s TTFT p99 tail that the server's own clock
    did not see, and a tenth less load). A pool kept warm, as a long-running client's is, times
    the server. httpx opens its connections on demand."""
    if isinstance(client, RawClient):
        await client.open_idle(url, count)


async def stream_request(
    client: StreamClient,
    url: str,
    spec: RequestSpec,
    *,
    endpoint: str,
    origin_ns: int,
    timeout_s: float,
    shaper: RequestShaper | None = None,
    clock: Clock = default_clock,
    stamps: StampStats | None = None,
    on_sent: Callable[[], None] | None = None,
) -> RequestTrace:
    """Send one streamed request and time its chunks. Never raises for a failed request
    (connection, HTTP, stream or timeout errors are returned as data); re-raises cancellation.

    ``on_sent`` is called once, as soon as the request is on its way (raw client: written to
    the socket; httpx: when the client is about to send it), or else before returning: a closed
    loop does the previous request's bookkeeping there, after this one is sent, not before."""
    if on_sent is not None:
        on_sent = _once(on_sent)
    try:
        return await _stream_request(
            client, url, spec, endpoint=endpoint, origin_ns=origin_ns, timeout_s=timeout_s,
            shaper=shaper, clock=clock, stamps=stamps, on_sent=on_sent,
        )  # fmt: skip
    finally:
        if on_sent is not None:
            on_sent()


def _once(call: Callable[[], None]) -> Callable[[], None]:
    called = False

    def once() -> None:
        nonlocal called
        if not called:
            called = True
            call()

    return once


async def _stream_request(
    client: StreamClient,
    url: str,
    spec: RequestSpec,
    *,
    endpoint: str,
    origin_ns: int,
    timeout_s: float,
    shaper: RequestShaper | None,
    clock: Clock,
    stamps: StampStats | None,
    on_sent: Callable[[], None] | None,
) -> RequestTrace:
    shaper = shaper or RequestShaper()
    retries_left = RETRY_BEFORE_RESPONSE
    rejected_rounds = 0
    while True:
        body = shaper.apply(spec.body)
        send_ns = clock()
        state = _Stream()
        reader = ChunkReader(endpoint=endpoint, keep_text=spec.keep_text)
        error: RequestError | None = None
        try:
            async with asyncio.timeout(timeout_s):
                status, text = await _exchange(
                    client, url, body, spec.header_id, state, reader, clock, send_ns, stamps,
                    on_sent,
                )  # fmt: skip
            if status is not None:
                if rejected_rounds < len(OPTIONAL_FIELDS) and shaper.learn(status, text, body):
                    rejected_rounds += 1
                    continue
                error = RequestError(kind="http", http_status=status, message=_clip(text))
            elif not state.done and reader.finish_reason is None:
                error = RequestError(
                    kind="stream_cut",
                    message="the stream closed before a finish_reason or [DONE]",
                )
        except TimeoutError:
            error = RequestError(
                kind="timeout", message=f"no complete answer within {timeout_s:g} s (--timeout)"
            )
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            error = RequestError(kind="connect", message=_clip(describe_exception(exc)))
        except ConnectFailed as exc:
            error = RequestError(kind="connect", message=_clip(str(exc)))
        except (
            httpx.RemoteProtocolError,
            httpx.ReadError,
            httpx.WriteError,
            ConnectionLost,
            ProtocolViolation,
        ) as exc:
            if not state.bytes_seen and retries_left > 0:
                retries_left -= 1
                continue
            kind: ErrorKind = "stream_cut" if state.bytes_seen else "reset"
            error = RequestError(kind=kind, message=_clip(describe_exception(exc)))
        except httpx.TimeoutException as exc:
            error = RequestError(kind="timeout", message=_clip(describe_exception(exc)))
        except StreamFormatError as exc:
            error = RequestError(kind="malformed", message=_clip(str(exc)))
        except StreamServerError as exc:
            error = RequestError(kind="server_error", message=_clip(str(exc)))
        except httpx.HTTPError as exc:
            error = RequestError(kind="other", message=_clip(describe_exception(exc)))
        # A good stream ends at its last byte; a failed one when the failure was seen.
        end_ns = state.end_ns if error is None and state.end_ns is not None else clock() - send_ns
        spec.read_end_ns = state.read_ns if error is None and state.read_ns is not None else end_ns
        usage = reader.usage or {}
        if spec.keep_text:
            spec.answer = "".join(reader.text)
        return RequestTrace(
            concurrency=spec.concurrency,
            request_id=spec.request_id,
            phase="warmup" if spec.phase == "warmup" else "measured",
            send_ns=send_ns - origin_ns,
            end_ns=end_ns,
            chunk_ns=state.chunk_ns,
            chunk_tokens=state.chunk_tokens,
            prompt_tokens=_int_or_none(usage.get("prompt_tokens")),
            completion_tokens=_int_or_none(usage.get("completion_tokens")),
            finish_reason=reader.finish_reason,
            status="ok" if error is None else "error",
            error=error,
            server_timing=state.server_timing,
            worker=spec.worker,
            scheduled_ns=spec.scheduled_ns,
            session=spec.session,
            turn=spec.turn,
            asked_input_tokens=spec.asked_input_tokens,
            asked_output_tokens=spec.asked_output_tokens,
        )


async def _exchange(
    client: StreamClient,
    url: str,
    body: dict[str, Any],
    header_id: str | None,
    state: _Stream,
    reader: ChunkReader,
    clock: Clock,
    send_ns: int,
    stamps: StampStats | None,
    on_sent: Callable[[], None] | None = None,
) -> tuple[int | None, str]:
    """Run the HTTP exchange; fill ``state``. Returns (status, body text) for an HTTP error."""
    headers = {REQUEST_ID_HEADER: header_id} if header_id else None
    stamps = stamps if stamps is not None else StampStats()
    if isinstance(client, RawClient):
        async with client.post(url, body, headers, clock, on_sent) as raw_response:
            return await _read_raw(raw_response, state, reader, clock, send_ns, stamps)
    if on_sent is not None:
        on_sent()  # httpx gives no hook between writing the request and reading the answer
    async with client.stream("POST", url, json=body, headers=headers) as response:
        if response.status_code >= httpx.codes.BAD_REQUEST:
            raw = await response.aread()
            state.end_ns = clock() - send_ns
            return response.status_code, raw.decode("utf-8", errors="replace")
        parser = SSEParser()
        stream = response.aiter_bytes()
        async for raw in stream:
            now = clock() - send_ns
            state.bytes_seen = True
            state.end_ns = state.read_ns = now
            chunks = len(state.chunk_ns)
            done = _handle(parser.feed(raw), state, reader, now)
            stamps.add_read(None, len(state.chunk_ns) - chunks)
            if done:
                await _drain(stream)
                return None, ""
        _handle(parser.close(), state, reader, state.end_ns or clock() - send_ns)
    return None, ""


async def _read_raw(
    response: RawResponse,
    state: _Stream,
    reader: ChunkReader,
    clock: Clock,
    send_ns: int,
    stamps: StampStats,
) -> tuple[int | None, str]:
    """:func:`_exchange` for the raw client: each socket read's events get the time its bytes
    arrived (the kernel's receive time, or the loop's read callback), not the time this task got
    to them, so other streams' parsing in the same burst does not shift this one's times."""
    if response.status_code >= httpx.codes.BAD_REQUEST:
        raw = await response.aread()
        state.end_ns = clock() - send_ns
        return response.status_code, raw.decode("utf-8", errors="replace")
    parser = SSEParser()
    ended = False

    def on_piece(data: bytes, arrival_ns: int, age_ns: int | None) -> bool:
        """One socket read's body bytes, in the event loop's read callback."""
        nonlocal ended
        if not data:
            return False  # only chunked framing arrived
        now = arrival_ns - send_ns
        state.bytes_seen = True
        state.end_ns = now
        chunks = len(state.chunk_ns)
        ended = _handle(parser.feed(data), state, reader, now)
        read_ns = arrival_ns + (age_ns or 0)  # when the read returned (the kernel's: its age)
        state.read_ns = read_ns - send_ns
        stamps.add_read(age_ns, len(state.chunk_ns) - chunks, clock() - read_ns, read_ns)
        return ended

    await response.consume(on_piece, DRAIN_AFTER_DONE_S)
    if not ended:
        _handle(parser.close(), state, reader, state.end_ns or clock() - send_ns)
    return None, ""


async def _drain(stream: AsyncIterator[bytes]) -> None:
    """After ``[DONE]`` the request is over (its end time is taken), but the body's last bytes
    (the chunked-encoding terminator) usually follow at once: read them, so the connection goes
    back to the pool instead of a new one being opened for the next request. A server that
    keeps the stream open after ``[DONE]`` gets a short grace, then the connection is closed."""
    with contextlib.suppress(TimeoutError, httpx.HTTPError):
        async with asyncio.timeout(DRAIN_AFTER_DONE_S):
            async for _ in stream:
                pass


def _handle(events: list[Any], state: _Stream, reader: ChunkReader, now: int) -> bool:
    for event in events:
        data = event.data.strip()
        if data == DONE_MARKER:
            state.done = True
            return True
        if event.event == "error":
            raise StreamServerError(data[:MAX_ERROR_MESSAGE_CHARS])
        tokens, _, _, timing = reader.parse(data)
        if tokens > 0:
            state.chunk_ns.append(now)
            state.chunk_tokens.append(tokens)
        if timing:
            state.server_timing = timing
    return False


def _clip(text: str) -> str:
    text = text.strip()
    if len(text) > MAX_ERROR_MESSAGE_CHARS:
        return text[:MAX_ERROR_MESSAGE_CHARS] + "..."
    return text


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
