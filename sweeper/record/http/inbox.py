"""What a connection received: one :class:`Piece` per socket read, with the time its bytes
arrived, queued in an :class:`Inbox`; and the kernel's receive time of a read
(:func:`kernel_arrival`)."""

from __future__ import annotations

import asyncio
import socket
import struct
import sys
from collections import deque
from collections.abc import Callable
from typing import NamedTuple, Protocol

from sweeper.record.http.errors import ConnectionLost, ProtocolViolation
from sweeper.units import NS_PER_S

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


class Piece(NamedTuple):
    """The bytes of one socket read and when they arrived (the caller's clock). ``age_ns`` is how
    long they waited in the socket before the read, from the kernel's receive timestamp; None
    where the kernel gave none (TLS, other systems): ``arrival_ns`` is then the read's time.
    A named tuple: one is made per socket read, and a frozen dataclass costs several times more."""

    data: bytes
    arrival_ns: int
    age_ns: int | None


class Consumer(Protocol):
    """What takes a streaming body's pieces as they arrive (:meth:`Inbox.attach`)."""

    def read(self, data: bytes, arrival_ns: int, age_ns: int | None) -> None: ...

    def end(self, error: BaseException | None) -> None: ...


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
        # While a response body streams (:meth:`RawResponse.consume`), each piece goes straight
        # to this callback, inside the event loop's read callback: no task wakes up per read.
        self._consumer: Consumer | None = None

    @property
    def unread(self) -> int:
        return self._size

    @property
    def ended(self) -> bool:
        """The peer closed its side, or the connection failed."""
        return self._eof or self._error is not None

    def feed_read(self, data: bytes, arrival_ns: int, age_ns: int | None) -> None:
        """:meth:`feed` of one read's parts (a streaming body's reads make no :class:`Piece`)."""
        if self._consumer is not None:
            self._consumer.read(data, arrival_ns, age_ns)
        else:
            self.feed(Piece(data, arrival_ns, age_ns))

    def feed(self, piece: Piece) -> None:
        if self._consumer is not None:
            self._consumer.read(*piece)
            return
        self._pieces.append(piece)
        self._size += len(piece.data)
        if self._size > HIGH_WATER and not self._paused:
            self._paused = True
            self._pause()
        self._wake()

    def feed_eof(self) -> None:
        self._eof = True
        self._wake()
        if self._consumer is not None:
            self._consumer.end(None)

    def set_exception(self, exc: BaseException) -> None:
        self._error = exc
        self._wake()
        if self._consumer is not None:
            self._consumer.end(exc)

    def attach(self, consumer: Consumer) -> None:
        """Hand every piece unread and every piece to come to ``consumer`` (until
        :meth:`detach`); an end already seen is passed on at once."""
        self._consumer = consumer
        pieces = self.take_nowait()
        for i, piece in enumerate(pieces):
            if self._consumer is not consumer:  # it detached itself: keep the rest
                self.give_back(pieces[i:])
                break
            consumer.read(*piece)
        if self._consumer is consumer and self.ended:
            consumer.end(self._error)

    def detach(self) -> None:
        self._consumer = None

    def take_nowait(self) -> list[Piece]:
        """Every unread piece, without waiting (maybe [])."""
        pieces = list(self._pieces)
        self._pieces.clear()
        self._size = 0
        if self._paused:
            self._paused = False
            self._resume()
        return pieces

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
        return self.take_nowait()

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
