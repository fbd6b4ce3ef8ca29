"""Keep-alive connections and the client that hands them out (:class:`RawClient`): a
kernel-stamped non-blocking socket for http on Linux, an asyncio transport otherwise (and for
https)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from sweeper.record.http.errors import ConnectFailed, ConnectionLost, describe_exception
from sweeper.record.http.framing import Origin, RawResponse, split_url
from sweeper.record.http.inbox import (
    ANCILLARY_SIZE,
    KERNEL_STAMPS,
    MAX_AGE_NS,
    SO_TIMESTAMPNS,
    Inbox,
    kernel_arrival,
)

DEFAULT_CONNECT_TIMEOUT_S = 10.0
CLOSE_WAIT_S = 2.0  # longest wait for the connections to finish closing at the end
READ_SIZE = 65536
USER_AGENT = "sweeper"


def ssl_context_for(origin: Origin) -> ssl.SSLContext | None:
    """The TLS context for an https origin (system CAs, hostname checked); None for http."""
    return ssl.create_default_context() if origin.scheme == "https" else None


class Connection:
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


class _SocketConnection(Connection):
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
            self.inbox.set_exception(ConnectionLost(describe_exception(exc)))
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
        self.inbox.feed_read(data, arrival, None if age is None else now - arrival)

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
                raise ConnectionLost(
                    f"sending the request failed: {describe_exception(exc)}"
                ) from exc
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
            self.inbox.feed_read(data, self.clock(), None)

    def eof_received(self) -> bool:
        if self.inbox is not None:
            self.inbox.feed_eof()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self.inbox is not None:
            if exc is not None:
                self.inbox.set_exception(ConnectionLost(describe_exception(exc)))
            else:
                self.inbox.feed_eof()
        self.lost.set()


class _TransportConnection(Connection):
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
    _idle: dict[Origin, list[Connection]] = field(default_factory=dict)
    _open: set[Connection] = field(default_factory=set)
    _closing: set[Connection] = field(default_factory=set)  # closed, close not yet complete
    _origins: dict[Origin, Any] = field(default_factory=dict)  # TLS context, addresses
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
        on_sent: Callable[[], None] | None = None,
    ) -> AsyncIterator[RawResponse]:
        """POST ``body`` as JSON; yield the response with its head read. ``on_sent`` is called
        once the request is written (before its answer is awaited). On leaving, a fully read
        keep-alive response gives its connection back; anything else closes it."""
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
            if on_sent is not None:
                on_sent()
            response = await RawResponse.read_head(conn.inbox)
            yield response
        finally:
            if response is not None and response.reusable() and conn.usable():
                self._idle.setdefault(origin, []).append(conn)
            else:
                self._retire(conn)

    def _retire(self, conn: Connection) -> None:
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

    async def open_idle(self, url: str, count: int) -> int:
        """Open connections to ``url``'s origin until ``count`` of them are idle; the number
        opened. One that fails is left to the request that needs it (it meets the error again
        and records it)."""
        origin = split_url(url)[0]
        idle = self._idle.setdefault(origin, [])
        for conn in [c for c in idle if not c.usable()]:
            idle.remove(conn)
            self._retire(conn)
        missing = count - len(idle)
        if missing <= 0 or self._closed:
            return 0
        opened = await asyncio.gather(
            *(self._connect(origin) for _ in range(missing)), return_exceptions=True
        )
        conns = [c for c in opened if isinstance(c, Connection)]
        idle.extend(conns)
        return len(conns)

    async def _acquire(self, origin: Origin) -> Connection:
        idle = self._idle.get(origin)
        while idle:
            conn = idle.pop()
            if conn.usable():
                return conn
            self._retire(conn)  # the server closed it while idle: open a fresh one
        return await self._connect(origin)

    async def _connect(self, origin: Origin) -> Connection:
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                conn = await open_connection(origin, self._origins)
        except TimeoutError as exc:
            raise ConnectFailed(
                f"ConnectTimeout: no connection to {origin.host}:{origin.port} "
                f"within {self.connect_timeout_s:g} s"
            ) from exc
        except (OSError, ssl.SSLError) as exc:
            raise ConnectFailed(f"{describe_exception(exc)} ({origin.host}:{origin.port})") from exc
        self.connects += 1
        self._open.add(conn)
        return conn


async def open_connection(origin: Origin, cache: dict[Origin, Any] | None = None) -> Connection:
    """A connection to ``origin``: a kernel-stamped socket for http on Linux, else an asyncio
    transport (TLS for https). ``cache`` keeps the origin's TLS context and addresses for the
    next connection: a level's first requests open hundreds at once, and each resolving the
    host again (a trip through the loop's resolver threads) and building its own TLS context
    delayed the first sends."""
    loop = asyncio.get_running_loop()
    cache = {} if cache is None else cache
    context = cache[origin][0] if origin in cache else ssl_context_for(origin)
    if context is not None or not KERNEL_STAMPS:
        cache[origin] = (context, None)
        protocol = _FeedingProtocol(time.monotonic_ns)
        transport, _ = await loop.create_connection(
            lambda: protocol, origin.host, origin.port, ssl=context
        )
        return _TransportConnection(transport, protocol)
    resolving = cache[origin][1] if origin in cache else None
    if resolving is None or (resolving.done() and resolving.exception() is not None):
        # One resolution shared by every connection being opened meanwhile (a failed one is
        # tried again by the next connection).
        resolving = asyncio.ensure_future(
            loop.getaddrinfo(origin.host, origin.port, type=socket.SOCK_STREAM)
        )
        cache[origin] = (context, resolving)
    infos = await asyncio.shield(resolving)
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
