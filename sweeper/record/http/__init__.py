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

Modules: :mod:`~sweeper.record.http.framing` (URLs, the response head, body framing),
:mod:`~sweeper.record.http.inbox` (what arrived, and when), :mod:`~sweeper.record.http.connection`
(the connections and :class:`RawClient`), :mod:`~sweeper.record.http.errors` (the failures).

Failures are three exception types the caller maps to the trace's error kinds:
:class:`ConnectFailed` (no connection: refused, DNS, TLS, connect timeout),
:class:`ConnectionLost` (reset, closed early, write failed) and :class:`ProtocolViolation`
(a response that is not HTTP/1.1 as expected).
"""

from sweeper.record.http.connection import (
    DEFAULT_CONNECT_TIMEOUT_S,
    Connection,
    RawClient,
    open_connection,
    ssl_context_for,
)
from sweeper.record.http.errors import (
    ConnectFailed,
    ConnectionLost,
    ProtocolViolation,
    RawHTTPError,
    describe_exception,
)
from sweeper.record.http.framing import Origin, RawResponse, split_url
from sweeper.record.http.inbox import KERNEL_STAMPS, Inbox, Piece, kernel_arrival

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT_S",
    "KERNEL_STAMPS",
    "ConnectFailed",
    "Connection",
    "ConnectionLost",
    "Inbox",
    "Origin",
    "Piece",
    "ProtocolViolation",
    "RawClient",
    "RawHTTPError",
    "RawResponse",
    "describe_exception",
    "kernel_arrival",
    "open_connection",
    "split_url",
    "ssl_context_for",
]
