"""HTTP/1.1 on the wire: a URL split into origin and target, the response head parsed, and the
body framed by ``Content-Length``, chunked transfer encoding or the connection's close
(:class:`RawResponse`)."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from sweeper.record.http.errors import ConnectionLost, ProtocolViolation
from sweeper.record.http.inbox import Inbox, Piece

MAX_HEAD_BYTES = 65536  # status line + headers
MAX_CHUNK_SIZE_LINE = 1024
DEFAULT_PORTS = {"http": 80, "https": 443}
CRLF = b"\r\n"
HEAD_END = b"\r\n\r\n"
HTTP_CONTINUE_MIN, HTTP_CONTINUE_MAX = 100, 199
SWITCHING_PROTOCOLS = 101
NO_BODY_STATUSES = (204, 304)  # never a body, whatever the headers say
BodyCallback = Callable[[bytes, int, "int | None"], bool]
"""(body bytes of one read, arrival ns, age ns or None) -> whether the stream has ended."""


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


class RawResponse:
    """Status, headers, and the body read one batch of socket reads at a time."""

    def __init__(self, inbox: Inbox, version: str, status: int, headers: dict[str, str]) -> None:
        self._inbox = inbox
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
    async def read_head(cls, inbox: Inbox) -> RawResponse:
        while True:
            head = await inbox.read_until(HEAD_END, MAX_HEAD_BYTES)
            version, status, headers = _parse_head(head)
            if HTTP_CONTINUE_MIN <= status <= HTTP_CONTINUE_MAX and status != SWITCHING_PROTOCOLS:
                continue  # an interim answer (100 Continue): the real one follows
            return cls(inbox, version, status, headers)

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

    async def consume(self, on_piece: BodyCallback, grace_s: float) -> None:
        """Pass each read's body bytes (with its ``arrival_ns`` and ``age_ns``, as in
        :class:`Piece`) to ``on_piece`` as they arrive, inside the event loop's
        read callback (no task wakes up per read: at hundreds of streams that wake-up cost more
        than the parsing); return at the body's end. Once ``on_piece`` returns True (the stream's
        last event), the rest of the body (the chunked terminator) is read but not passed on, for
        at most ``grace_s``. Raises what ``on_piece`` raises, and :class:`ConnectionLost` for a
        body cut short (after a True, a cut is no error: the connection is just not reused)."""
        if self._complete:
            return
        sink = _BodySink(self, on_piece, asyncio.get_running_loop().create_future(), grace_s)
        try:
            self._inbox.attach(sink)
            await sink.done
        finally:
            sink.close()

    async def aread(self) -> bytes:
        parts = []
        while (pieces := await self.read_pieces()) is not None:
            parts += [piece.data for piece in pieces]
        return b"".join(parts)

    def _decode_chunked(self, data: bytes) -> bytes:
        buf = self._buffer
        if not buf and self._stage == "size":
            # The common read: whole chunks (size line, data, CRLF), one or a few.
            whole, used = _whole_chunks(data)
            if used == len(data):
                return whole
            return whole + self._decode_slow(data[used:])  # the rest goes the general way
        return self._decode_slow(data)

    def _decode_slow(self, data: bytes) -> bytes:
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


def _whole_chunks(data: bytes) -> tuple[bytes, int]:
    """The data of the whole, non-empty chunks at the start of ``data``, and how many bytes of
    ``data`` they took (0: none: the general decoder handles the rest, and says what is bad)."""
    parts = []
    pos, size_of = 0, len(data)
    while pos < size_of:
        end = data.find(CRLF, pos, pos + MAX_CHUNK_SIZE_LINE)
        if end <= pos:
            break
        try:
            size = int(data[pos:end], 16)
        except ValueError:
            break  # a chunk extension, or bad
        start = end + len(CRLF)
        stop = start + size
        if size <= 0 or data[stop : stop + len(CRLF)] != CRLF:
            break  # the last chunk, or one not complete in this read
        parts.append(data[start:stop])
        pos = stop + len(CRLF)
    return (parts[0] if len(parts) == 1 else b"".join(parts)), pos


class _BodySink:
    """:meth:`RawResponse.consume`'s consumer of the inbox."""

    def __init__(
        self,
        response: RawResponse,
        on_piece: BodyCallback,
        done: asyncio.Future[None],
        grace_s: float,
    ) -> None:
        self.response, self.on_piece, self.done, self.grace_s = response, on_piece, done, grace_s
        self.stopped = False  # on_piece has seen the stream's end
        self._timer: asyncio.TimerHandle | None = None

    def read(self, data: bytes, arrival_ns: int, age_ns: int | None) -> None:
        response = self.response
        if response._complete:  # bytes after the body: the connection's check sees them
            self._finish(None)
            response._inbox.give_back([Piece(data, arrival_ns, age_ns)])
            return
        try:
            whole, used = (
                _whole_chunks(data)  # the common read, without the calls around it
                if response._chunked and response._stage == "size" and not response._buffer
                else (b"", 0)
            )
            data = whole if used == len(data) else whole + response._body(data[used:])
            if not self.stopped and self.on_piece(data, arrival_ns, age_ns):
                self.stopped = True
                if not response._complete:
                    self._timer = asyncio.get_running_loop().call_later(
                        self.grace_s, self._finish, None
                    )
        except Exception as exc:  # the caller's task gets it (after the stream's end: no error)
            self._finish(None if self.stopped else exc)
            return
        if response._complete:
            self._finish(None)

    def end(self, error: BaseException | None) -> None:
        response = self.response
        if self.stopped:
            self._finish(None)
        elif error is not None:
            self._finish(ConnectionLost(str(error)))
        elif response._chunked or response._remaining is not None:
            self._finish(ConnectionLost("the server closed the connection before the body's end"))
        else:
            response._complete = True  # close-delimited body: the close is its end
            self._finish(None)

    def _finish(self, exc: BaseException | None) -> None:
        self.close()
        if not self.done.done():
            if exc is None:
                self.done.set_result(None)
            else:
                self.done.set_exception(exc)

    def close(self) -> None:
        self.response._inbox.detach()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


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
