"""A lean HTTP/1.1 client for streamed POSTs, on bare asyncio streams.

Why: httpx/httpcore re-checks every pooled connection on each request (``has_expired`` ->
anyio ``extra_attributes``); at 64+ concurrent streams that bookkeeping delays chunk delivery by
milliseconds (docs/fidelity.md, "HTTP client"). This client does only what a streamed
completion needs: one keep-alive connection per stream slot (a slot takes an idle connection or
opens one, and gives it back after a complete response), ``POST`` with ``Content-Length``, and a
response body framed by ``Content-Length``, chunked transfer encoding or the connection's close.
Each :meth:`RawResponse.read_some` returns what arrived; :attr:`RawResponse.arrival_ns` says when
(stamped in the event loop's data callback, before any parsing).

An idle connection the server has closed meanwhile (llama.cpp closes idle keep-alives after 5 s)
is seen as closed before reuse and replaced; one that breaks in the instant of reuse fails before
any byte, which the caller retries once (``RETRY_BEFORE_RESPONSE`` in :mod:`sweeper.record.client`).

Failures are three exception types the caller maps to the trace's error kinds:
:class:`ConnectFailed` (no connection: refused, DNS, TLS, connect timeout),
:class:`ConnectionLost` (reset, closed early, write failed) and :class:`ProtocolViolation`
(a response that is not HTTP/1.1 as expected).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import ssl
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, SupportsIndex
from urllib.parse import unquote, urlsplit

DEFAULT_CONNECT_TIMEOUT_S = 10.0
CLOSE_WAIT_S = 2.0  # longest wait for the connections to finish closing at the end
READ_SIZE = 65536
MAX_HEAD_BYTES = 65536  # status line + headers
MAX_CHUNK_SIZE_LINE = 1024
DEFAULT_PORTS = {"http": 80, "https": 443}
USER_AGENT = "sweeper"
CRLF = b"\r\n"
HEAD_END = b"\r\n\r\n"
HTTP_CONTINUE_MIN, HTTP_CONTINUE_MAX = 100, 199
SWITCHING_PROTOCOLS = 101
NO_BODY_STATUSES = (204, 304)  # never a body, whatever the headers say


class RawHTTPError(Exception):
    """Base of this module's errors."""


class ConnectFailed(RawHTTPError):
    """No connection could be made (refused, unknown host, TLS handshake, connect timeout)."""


class ConnectionLost(RawHTTPError):
    """The connection broke or closed before the response was complete."""


class ProtocolViolation(RawHTTPError):
    """The server's bytes are not a valid HTTP/1.1 response."""


@dataclass(frozen=True)
class Origin:
    scheme: str
    host: str
    port: int

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if DEFAULT_PORTS.get(self.scheme) == self.port else f"{host}:{self.port}"


def split_url(url: str) -> tuple[Origin, str, str | None]:
    """(origin, request target, Basic credentials or None) of an http:// or https:// URL."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        raise ValueError(f"{url!r}: the raw HTTP client takes http:// or https:// URLs only")
    port = parts.port or DEFAULT_PORTS[scheme]
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    basic = None
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        basic = base64.b64encode(pair.encode()).decode("ascii")
    return Origin(scheme, parts.hostname, port), target, basic


def ssl_context_for(origin: Origin) -> ssl.SSLContext | None:
    """The TLS context for an https origin (system CAs, hostname checked); None for http."""
    return ssl.create_default_context() if origin.scheme == "https" else None


class StampingReader(asyncio.StreamReader):
    """A StreamReader that reads the clock each time bytes arrive (the event loop's data
    callback), before any stream's parsing runs: ``arrival_ns`` is the arrival of the newest
    unread bytes. Stamping there rather than when a task gets to its read keeps the work spent on
    other streams' chunks (a burst of them) out of this one's timestamps."""

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self.clock: Callable[[], int] = time.monotonic_ns
        self.arrival_ns = 0

    def feed_data(self, data: Iterable[SupportsIndex]) -> None:
        self.arrival_ns = self.clock()
        super().feed_data(data)


@dataclass(eq=False)
class _Connection:
    reader: StampingReader
    writer: asyncio.StreamWriter

    def usable(self) -> bool:
        """Still open on both sides with nothing unread (a FIN or stray byte rules it out)."""
        unread = len(self.reader._buffer)  # type: ignore[attr-defined]  # asyncio's buffer
        return not self.writer.is_closing() and not self.reader.at_eof() and unread == 0

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


@dataclass
class RawClient:
    """Keep-alive connections per origin; at most one in use per concurrent request.

    ``headers`` go with every request (e.g. ``Authorization``); they live in memory only.
    ``connects`` counts the connections opened (tests use it to see reuse).
    """

    headers: Mapping[str, str] = field(default_factory=dict)
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    connects: int = 0
    _idle: dict[Origin, list[_Connection]] = field(default_factory=dict)
    _open: set[_Connection] = field(default_factory=set)
    _closed: bool = False

    async def __aenter__(self) -> RawClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self._closed = True
        conns = list(self._open)
        self._open.clear()
        self._idle.clear()
        for conn in conns:
            conn.close()
        # A peer that never answers the close (TLS close_notify) does not hold up the end.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CLOSE_WAIT_S):
                for conn in conns:
                    with contextlib.suppress(Exception):
                        await conn.writer.wait_closed()

    @contextlib.asynccontextmanager
    async def post(
        self,
        url: str,
        body: Any,
        headers: Mapping[str, str] | None = None,
        clock: Callable[[], int] = time.monotonic_ns,
    ) -> AsyncIterator[RawResponse]:
        """POST ``body`` as JSON; yield the response with its head read. On leaving, a fully
        read keep-alive response gives its connection back; anything else closes it."""
        if self._closed:
            raise RuntimeError("the raw HTTP client is closed")
        origin, target, basic = split_url(url)
        payload = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        head = self._request_head(origin, target, basic, len(payload), headers)
        conn = await self._acquire(origin)
        conn.reader.clock = clock  # the caller's clock stamps the arrivals
        response: RawResponse | None = None
        try:
            try:
                conn.writer.write(head + payload)
                await conn.writer.drain()
            except (OSError, RuntimeError) as exc:
                raise ConnectionLost(f"sending the request failed: {_name(exc)}") from exc
            response = await RawResponse.read_head(conn.reader)
            yield response
        finally:
            if response is not None and response.reusable() and conn.usable():
                self._idle.setdefault(origin, []).append(conn)
            else:
                self._open.discard(conn)
                conn.close()

    def _request_head(
        self,
        origin: Origin,
        target: str,
        basic: str | None,
        length: int,
        extra: Mapping[str, str] | None,
    ) -> bytes:
        fields: dict[str, tuple[str, str]] = {}
        for name, value in (
            ("Host", origin.host_header),
            ("User-Agent", USER_AGENT),
            ("Accept", "*/*"),
            ("Content-Type", "application/json"),
            *(("Authorization", f"Basic {basic}"),) * (basic is not None),
            *self.headers.items(),
            *(extra or {}).items(),
        ):
            fields[name.lower()] = (name, value)
        fields["content-length"] = ("Content-Length", str(length))
        lines = [f"POST {target} HTTP/1.1", *(f"{n}: {v}" for n, v in fields.values())]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def _acquire(self, origin: Origin) -> _Connection:
        idle = self._idle.get(origin)
        while idle:
            conn = idle.pop()
            if conn.usable():
                return conn
            self._open.discard(conn)
            conn.close()  # the server closed it while idle: open a fresh one
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                reader, writer = await _open(origin)
        except TimeoutError as exc:
            raise ConnectFailed(
                f"ConnectTimeout: no connection to {origin.host}:{origin.port} "
                f"within {self.connect_timeout_s:g} s"
            ) from exc
        except (OSError, ssl.SSLError) as exc:
            raise ConnectFailed(f"{_name(exc)} ({origin.host}:{origin.port})") from exc
        self.connects += 1
        conn = _Connection(reader, writer)
        self._open.add(conn)
        return conn


async def _open(origin: Origin) -> tuple[StampingReader, asyncio.StreamWriter]:
    """``asyncio.open_connection`` with a :class:`StampingReader`."""
    loop = asyncio.get_running_loop()
    reader = StampingReader(limit=MAX_HEAD_BYTES, loop=loop)
    protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
    transport, _ = await loop.create_connection(
        lambda: protocol, origin.host, origin.port, ssl=ssl_context_for(origin)
    )
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop)


class RawResponse:
    """Status, headers, and the body read one socket read at a time."""

    def __init__(
        self, reader: StampingReader, version: str, status: int, headers: dict[str, str]
    ) -> None:
        self._reader = reader
        self.http_version = version
        self.status_code = status
        self.headers = headers
        self._complete = False
        encoding = headers.get("transfer-encoding", "").lower()
        self._chunked = "chunked" in encoding
        self._remaining: int | None = None  # Content-Length left; None: chunked or until close
        if not self._chunked and "content-length" in headers:
            try:
                self._remaining = int(headers["content-length"])
            except ValueError as exc:
                raise ProtocolViolation(
                    f"bad Content-Length {headers['content-length']!r}"
                ) from exc
            if self._remaining < 0:
                raise ProtocolViolation(f"bad Content-Length {self._remaining}")
            self._complete = self._remaining == 0
        if status in NO_BODY_STATUSES:
            self._chunked, self._remaining, self._complete = False, 0, True
        self._buffer = bytearray()  # chunked: bytes read, not yet decoded
        self._chunk_left = 0  # data bytes left in the current chunk
        self._stage = "size"  # chunked: size, data, data_end, trailer

    @classmethod
    async def read_head(cls, reader: StampingReader) -> RawResponse:
        while True:
            try:
                head = await reader.readuntil(HEAD_END)
            except asyncio.IncompleteReadError as exc:
                what = "before any response byte" if not exc.partial else "inside the headers"
                raise ConnectionLost(f"the server closed the connection {what}") from exc
            except asyncio.LimitOverrunError as exc:
                raise ProtocolViolation(
                    f"response headers longer than {MAX_HEAD_BYTES} bytes"
                ) from exc
            except OSError as exc:
                raise ConnectionLost(_name(exc)) from exc
            version, status, headers = _parse_head(head)
            if HTTP_CONTINUE_MIN <= status <= HTTP_CONTINUE_MAX and status != SWITCHING_PROTOCOLS:
                continue  # an interim answer (100 Continue): the real one follows
            return cls(reader, version, status, headers)

    def reusable(self) -> bool:
        if not self._complete:
            return False
        connection = self.headers.get("connection", "").lower()
        if self.http_version == "HTTP/1.0":
            return "keep-alive" in connection
        return "close" not in connection

    @property
    def arrival_ns(self) -> int:
        """When the newest bytes of the last :meth:`read_some` arrived (the caller's clock)."""
        return self._reader.arrival_ns

    async def read_some(self) -> bytes | None:
        """The body bytes of the next socket read (b"" when it held only framing); None at the
        end of the body. :attr:`arrival_ns` says when they arrived."""
        if self._complete:
            return None
        try:
            data = await self._reader.read(READ_SIZE)
        except OSError as exc:
            raise ConnectionLost(_name(exc)) from exc
        if not data:
            if self._chunked or self._remaining is not None:
                raise ConnectionLost("the server closed the connection before the body's end")
            self._complete = True  # close-delimited body: the close is its end
            return None
        if self._chunked:
            return self._decode_chunked(data)
        if self._remaining is not None:
            if len(data) > self._remaining:
                raise ProtocolViolation(
                    f"{len(data) - self._remaining} bytes after the Content-Length body"
                )
            self._remaining -= len(data)
            self._complete = self._remaining == 0
        return data

    async def aread(self) -> bytes:
        parts = []
        while (data := await self.read_some()) is not None:
            parts.append(data)
        return b"".join(parts)

    def _decode_chunked(self, data: bytes) -> bytes:
        buf = self._buffer
        buf += data
        out = bytearray()
        while True:
            if self._stage == "data":
                take = min(self._chunk_left, len(buf))
                out += buf[:take]
                del buf[:take]
                self._chunk_left -= take
                if self._chunk_left:
                    return bytes(out)
                self._stage = "data_end"
            if self._stage == "data_end":
                if len(buf) < len(CRLF):
                    return bytes(out)
                if buf[: len(CRLF)] != CRLF:
                    raise ProtocolViolation("a chunk of the chunked body does not end in CRLF")
                del buf[: len(CRLF)]
                self._stage = "size"
            end = buf.find(CRLF)
            if end < 0:
                if len(buf) > MAX_CHUNK_SIZE_LINE:
                    raise ProtocolViolation("a chunk-size line longer than 1 KiB")
                return bytes(out)
            line = bytes(buf[:end])
            del buf[: end + len(CRLF)]
            if self._stage == "trailer":
                if not line:  # the empty line after the trailers: the body is over
                    if buf:
                        raise ProtocolViolation(f"{len(buf)} bytes after the chunked body")
                    self._complete = True
                    return bytes(out)
                continue
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError as exc:
                raise ProtocolViolation(f"bad chunk-size line {line[:40]!r}") from exc
            if size == 0:
                self._stage = "trailer"
            else:
                self._chunk_left, self._stage = size, "data"


def _parse_head(head: bytes) -> tuple[str, int, dict[str, str]]:
    lines = head[: -len(HEAD_END)].decode("latin-1").split("\r\n")
    status_line = lines[0].split(" ", 2)
    if len(status_line) < 2 or not status_line[0].startswith("HTTP/1."):
        raise ProtocolViolation(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    try:
        status = int(status_line[1])
    except ValueError as exc:
        raise ProtocolViolation(f"bad status code in {lines[0][:80]!r}") from exc
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            raise ProtocolViolation(f"bad header line {line[:80]!r}")
        key = name.strip().lower()
        value = value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return status_line[0], status, headers


def _name(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
