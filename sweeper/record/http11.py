"""A lean HTTP/1.1 client for streamed POSTs, on bare non-blocking sockets.

Why: httpx/httpcore re-checks every pooled connection on each request (``has_expired`` ->
anyio ``extra_attributes``); at 64+ concurrent streams that bookkeeping delays chunk delivery by
milliseconds (docs/fidelity.md, "HTTP client"). This client does only what a streamed
completion needs: one keep-alive connection per stream slot (a slot takes an idle connection or
opens one, and gives it back after a complete response), ``POST`` with ``Content-Length``, and a
response body framed by ``Content-Length``, chunked transfer encoding or the connection's close.
Each :meth:`RawResponse.read_pieces` returns what arrived since the last call, one
:class:`Piece` per socket read with the time its bytes arrived. Over plain TCP on Linux that time
is the kernel's receive timestamp (``SO_TIMESTAMPNS``): an event loop busy with other streams
delays when a chunk is read, not the time it is stamped with. Only chunks of one stream that
arrive while their socket waits to be read share a read (and the later one's time); the recorder
counts those (:mod:`sweeper.record.stamps`). Over TLS, or where the kernel gives no timestamp, a
read is stamped in the event loop's read callback, before any parsing.

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
import socket
import ssl
import struct
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import unquote, urlsplit

from sweeper.units import NS_PER_S

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


# Kernel receive timestamps (SO_TIMESTAMPNS, Linux): every recvmsg() on a TCP socket carries the
# time its newest bytes reached the socket, in CLOCK_REALTIME. Python names neither constant.
# Elsewhere (and over TLS) connections are asyncio transports, stamped in the data callback.
KERNEL_STAMPS = sys.platform == "linux" and hasattr(socket.socket, "recvmsg")
SO_TIMESTAMPNS = 35
SCM_TIMESTAMPNS = SO_TIMESTAMPNS
TIMESPEC = struct.Struct("@qq")  # struct timespec on 64-bit Linux: seconds, nanoseconds
ANCILLARY_SIZE = socket.CMSG_SPACE(TIMESPEC.size) if KERNEL_STAMPS else 0
# A kernel time older than this is not believed (CLOCK_REALTIME stepped between arrival and read):
# the read's own time is used instead.
MAX_AGE_NS = 10 * NS_PER_S
HIGH_WATER = 4 * 1024 * 1024  # unread bytes at which a connection stops reading (flow control)


@dataclass(frozen=True)
class Piece:
    """The bytes of one socket read and when they arrived (the caller's clock). ``age_ns`` is how
    long they waited in the socket before the read, from the kernel's receive timestamp; None
    where the kernel gave none (TLS, other systems): ``arrival_ns`` is then the read's time."""

    data: bytes
    arrival_ns: int
    age_ns: int | None


class Inbox:
    """What a connection received and not yet consumed, in arrival order, one :class:`Piece` per
    socket read. Fed by the event loop's read callback; read by one task at a time."""

    def __init__(self, pause: Callable[[], None], resume: Callable[[], None]) -> None:
        self._pieces: deque[Piece] = deque()
        self._size = 0
        self._eof = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._pause, self._resume = pause, resume
        self._paused = False

    @property
    def unread(self) -> int:
        return self._size

    @property
    def ended(self) -> bool:
        """The peer closed its side, or the connection failed."""
        return self._eof or self._error is not None

    def feed(self, piece: Piece) -> None:
        self._pieces.append(piece)
        self._size += len(piece.data)
        if self._size > HIGH_WATER and not self._paused:
            self._paused = True
            self._pause()
        self._wake()

    def feed_eof(self) -> None:
        self._eof = True
        self._wake()

    def set_exception(self, exc: BaseException) -> None:
        self._error = exc
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def _wait(self) -> None:
        """Until something is unread, the end was reached, or the connection failed."""
        if self._size or self._eof or self._error:
            return
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    async def take(self) -> list[Piece]:
        """Every unread piece (waiting for one); [] at the end. Raises the connection's error."""
        await self._wait()
        if not self._size and self._error is not None:
            raise ConnectionLost(str(self._error)) from self._error  # a fresh one per caller
        pieces = list(self._pieces)
        self._pieces.clear()
        self._size = 0
        if self._paused:
            self._paused = False
            self._resume()
        return pieces

    def give_back(self, pieces: list[Piece]) -> None:
        """Put pieces taken but not consumed back in front, in order."""
        for piece in reversed(pieces):
            if piece.data:
                self._pieces.appendleft(piece)
                self._size += len(piece.data)

    async def read_until(self, separator: bytes, limit: int) -> bytes:
        """The bytes up to and including ``separator``; the rest stays unread. Raises
        :class:`ConnectionLost` at the end and :class:`ProtocolViolation` past ``limit`` bytes."""
        head = bytearray()
        while True:
            pieces = await self.take()
            if not pieces:
                what = "before any response byte" if not head else "inside the headers"
                raise ConnectionLost(f"the server closed the connection {what}")
            for i, piece in enumerate(pieces):
                start = max(len(head) - len(separator) + 1, 0)
                head += piece.data
                found = head.find(separator, start)
                if found >= 0:
                    cut = found + len(separator)
                    if cut > limit:
                        raise ProtocolViolation(f"response headers longer than {limit} bytes")
                    rest = len(head) - cut
                    tail = Piece(
                        piece.data[len(piece.data) - rest :], piece.arrival_ns, piece.age_ns
                    )
                    self.give_back([tail, *pieces[i + 1 :]])
                    return bytes(head[:cut])
                if len(head) > limit:
                    raise ProtocolViolation(f"response headers longer than {limit} bytes")


def kernel_arrival(ancillary: list[tuple[int, int, bytes]]) -> int | None:
    """The CLOCK_REALTIME nanoseconds of a recvmsg()'s SCM_TIMESTAMPNS, or None."""
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == SCM_TIMESTAMPNS and len(payload) >= TIMESPEC.size:
            seconds, nanoseconds = TIMESPEC.unpack_from(payload)
            return int(seconds) * NS_PER_S + int(nanoseconds)
    return None


class _Connection:
    """One keep-alive connection: an :class:`Inbox` of what arrived, and a way to send."""

    inbox: Inbox
    clock: Callable[[], int] = staticmethod(time.monotonic_ns)  # set per request by the caller

    async def send(self, data: bytes) -> None:
        raise NotImplementedError

    def is_closing(self) -> bool:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    async def wait_closed(self) -> None:
        return None

    def closed(self) -> bool:
        """Closed, and done closing."""
        return self.is_closing()

    def usable(self) -> bool:
        """Still open on both sides with nothing unread (a FIN or stray byte rules it out)."""
        return not self.is_closing() and not self.inbox.ended and not self.inbox.unread


class _SocketConnection(_Connection):
    """Plain TCP on Linux: a non-blocking socket read by the loop's reader callback with
    recvmsg(), so each read comes with the kernel's receive time: a busy event loop delays when
    a chunk is read, not the time it is stamped with."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
        self._loop, self._sock, self._fd = loop, sock, sock.fileno()
        self._closed = False
        self._reading = False
        self._sending: asyncio.Future[None] | None = None
        self._last_arrival = 0
        self.inbox = Inbox(self._pause, self._resume)
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self._resume()

    def _pause(self) -> None:
        if self._reading:
            self._loop.remove_reader(self._fd)
            self._reading = False

    def _resume(self) -> None:
        if not self._reading and not self._closed:
            self._loop.add_reader(self._fd, self._readable)
            self._reading = True

    def _readable(self) -> None:
        try:
            data, ancillary, _, _ = self._sock.recvmsg(READ_SIZE, ANCILLARY_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._pause()
            self.inbox.set_exception(ConnectionLost(_name(exc)))
            return
        # Both clocks read back to back: the kernel's realtime stamp becomes the caller's clock
        # by its age.
        real_now = time.time_ns()
        now = self.clock()
        if not data:
            self._pause()
            self.inbox.feed_eof()
            return
        kernel_ns = kernel_arrival(ancillary)
        age = None if kernel_ns is None else max(real_now - kernel_ns, 0)
        if age is not None and age > MAX_AGE_NS:
            age = None
        # Never before the connection's previous read (a realtime clock stepped forward between
        # this read's arrival and the read would make its age too large), never after now.
        arrival = min(max(now - (age or 0), self._last_arrival), now)
        self._last_arrival = arrival
        self.inbox.feed(Piece(data, arrival, None if age is None else now - arrival))

    async def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            if self._closed:
                raise ConnectionLost("sending the request failed: the connection was closed")
            try:
                view = view[self._sock.send(view) :]
            except (BlockingIOError, InterruptedError):
                pass
            except OSError as exc:
                raise ConnectionLost(f"sending the request failed: {_name(exc)}") from exc
            if view:  # the socket's send buffer is full: wait until it drains
                self._sending = self._loop.create_future()
                self._loop.add_writer(self._fd, _settle, self._sending)
                try:
                    await self._sending
                finally:
                    self._sending = None
                    if not self._closed:
                        self._loop.remove_writer(self._fd)

    def is_closing(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Close the socket, first taking it out of the loop (a stale registration would catch
        the next socket given the same number) and waking whoever waits on it."""
        if self._closed:
            return
        self._pause()
        if self._sending is not None:
            self._loop.remove_writer(self._fd)
            _settle(self._sending)  # send() sees the close and raises
        self._closed = True
        self.inbox.set_exception(ConnectionLost("the connection was closed"))
        self._sock.close()


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class _FeedingProtocol(asyncio.Protocol):
    """Feeds a transport's bytes to its inbox, stamped in the data callback. The inbox exists
    from ``connection_made`` on: a TLS transport can deliver data (or a close) in the same
    callback that completes its handshake, before ``create_connection`` returns."""

    def __init__(self, clock: Callable[[], int]) -> None:
        self.clock = clock
        self.inbox: Inbox | None = None
        self.lost = asyncio.Event()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have the same methods.
        reading = cast(asyncio.ReadTransport, transport)
        self.inbox = Inbox(reading.pause_reading, reading.resume_reading)

    def data_received(self, data: bytes) -> None:
        if self.inbox is not None:
            self.inbox.feed(Piece(data, self.clock(), None))

    def eof_received(self) -> bool:
        if self.inbox is not None:
            self.inbox.feed_eof()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self.inbox is not None:
            if exc is not None:
                self.inbox.set_exception(ConnectionLost(_name(exc)))
            else:
                self.inbox.feed_eof()
        self.lost.set()


class _TransportConnection(_Connection):
    """https, and plain TCP where the kernel gives no receive times: an asyncio transport,
    each read stamped in the event loop's data callback."""

    def __init__(self, transport: asyncio.BaseTransport, protocol: _FeedingProtocol) -> None:
        if protocol.inbox is None:
            raise ConnectionLost("the connection was made without a transport")
        self._transport = cast(asyncio.Transport, transport)
        self._protocol = protocol
        self.inbox = protocol.inbox

    @property
    def clock(self) -> Callable[[], int]:
        return self._protocol.clock

    @clock.setter
    def clock(self, value: Callable[[], int]) -> None:
        self._protocol.clock = value

    async def send(self, data: bytes) -> None:
        if self._transport.is_closing():
            raise ConnectionLost("sending the request failed: the connection is closed")
        self._transport.write(data)  # a request is small: the transport buffers it

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def close(self) -> None:
        self._transport.close()

    async def wait_closed(self) -> None:
        await self._protocol.lost.wait()

    def closed(self) -> bool:
        return self._protocol.lost.is_set()


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
    _closing: set[_Connection] = field(default_factory=set)  # closed, close not yet complete
    _closed: bool = False

    async def __aenter__(self) -> RawClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self._closed = True
        conns = [*self._open, *self._closing]
        self._open.clear()
        self._closing.clear()
        self._idle.clear()
        for conn in conns:
            conn.close()
        # A peer that never answers the close (TLS close_notify) does not hold up the end.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CLOSE_WAIT_S):
                for conn in conns:
                    with contextlib.suppress(Exception):
                        await conn.wait_closed()

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
        conn.clock = clock  # the caller's clock stamps the arrivals
        response: RawResponse | None = None
        try:
            await conn.send(head + payload)
            response = await RawResponse.read_head(conn)
            yield response
        finally:
            if response is not None and response.reusable() and conn.usable():
                self._idle.setdefault(origin, []).append(conn)
            else:
                self._retire(conn)

    def _retire(self, conn: _Connection) -> None:
        """Close a connection; one whose close takes a while (TLS) is awaited by aclose()."""
        self._open.discard(conn)
        conn.close()
        if not conn.closed():
            self._closing = {c for c in self._closing if not c.closed()} | {conn}

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
            self._retire(conn)  # the server closed it while idle: open a fresh one
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                conn = await _open(origin)
        except TimeoutError as exc:
            raise ConnectFailed(
                f"ConnectTimeout: no connection to {origin.host}:{origin.port} "
                f"within {self.connect_timeout_s:g} s"
            ) from exc
        except (OSError, ssl.SSLError) as exc:
            raise ConnectFailed(f"{_name(exc)} ({origin.host}:{origin.port})") from exc
        self.connects += 1
        self._open.add(conn)
        return conn


async def _open(origin: Origin) -> _Connection:
    """A connection to ``origin``: a kernel-stamped socket for http on Linux, else an asyncio
    transport (TLS for https)."""
    loop = asyncio.get_running_loop()
    context = ssl_context_for(origin)
    if context is not None or not KERNEL_STAMPS:
        protocol = _FeedingProtocol(time.monotonic_ns)
        transport, _ = await loop.create_connection(
            lambda: protocol, origin.host, origin.port, ssl=context
        )
        return _TransportConnection(transport, protocol)
    infos = await loop.getaddrinfo(origin.host, origin.port, type=socket.SOCK_STREAM)
    failure: OSError | None = None
    for family, kind, proto, _, address in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            await loop.sock_connect(sock, address)
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return _SocketConnection(loop, sock)
        except OSError as exc:
            sock.close()
            failure = exc
        except BaseException:
            sock.close()
            raise
    raise failure or OSError(f"no address for {origin.host}")


class RawResponse:
    """Status, headers, and the body read one batch of socket reads at a time."""

    def __init__(
        self, conn: _Connection, version: str, status: int, headers: dict[str, str]
    ) -> None:
        self._inbox = conn.inbox
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
    async def read_head(cls, conn: _Connection) -> RawResponse:
        while True:
            head = await conn.inbox.read_until(HEAD_END, MAX_HEAD_BYTES)
            version, status, headers = _parse_head(head)
            if HTTP_CONTINUE_MIN <= status <= HTTP_CONTINUE_MAX and status != SWITCHING_PROTOCOLS:
                continue  # an interim answer (100 Continue): the real one follows
            return cls(conn, version, status, headers)

    def reusable(self) -> bool:
        if not self._complete:
            return False
        connection = self.headers.get("connection", "").lower()
        if self.http_version == "HTTP/1.0":
            return "keep-alive" in connection
        return "close" not in connection

    async def read_pieces(self) -> list[Piece] | None:
        """The body bytes of every socket read since the last call (waiting for one), each with
        its arrival time; a piece's data is b"" when its read held only framing. None at the end
        of the body."""
        if self._complete:
            return None
        pieces = await self._inbox.take()
        if not pieces:
            if self._chunked or self._remaining is not None:
                raise ConnectionLost("the server closed the connection before the body's end")
            self._complete = True  # close-delimited body: the close is its end
            return None
        out = []
        for i, piece in enumerate(pieces):
            if self._complete:  # bytes after the body: keep them for the connection's check
                self._inbox.give_back(pieces[i:])
                break
            out.append(Piece(self._body(piece.data), piece.arrival_ns, piece.age_ns))
        return out

    def _body(self, data: bytes) -> bytes:
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
        while (pieces := await self.read_pieces()) is not None:
            parts += [piece.data for piece in pieces]
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
