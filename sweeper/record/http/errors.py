"""The raw client's failures, which the caller maps to the trace's error kinds, and the one way
an exception is described in a failed request's message."""

from __future__ import annotations

import httpx

from sweeper.schema import strip_credentials

# An httpx timeout: which of the client's limits it is, and what ran past it.
_TIMEOUTS: dict[type[httpx.TimeoutException], tuple[str, str]] = {
    httpx.ConnectTimeout: ("connect", "no connection to {url} within {s} s"),
    httpx.ReadTimeout: ("read", "{url} sent nothing for {s} s"),
    httpx.WriteTimeout: ("write", "sending to {url} took longer than {s} s"),
    httpx.PoolTimeout: ("pool", "no free connection to {url} within {s} s"),
}


class RawHTTPError(Exception):
    """Base of this module's errors."""


class ConnectFailed(RawHTTPError):
    """No connection could be made (refused, unknown host, TLS handshake, connect timeout)."""


class ConnectionLost(RawHTTPError):
    """The connection broke or closed before the response was complete."""


class ProtocolViolation(RawHTTPError):
    """The server's bytes are not a valid HTTP/1.1 response."""


def describe_exception(exc: BaseException) -> str:
    """``Type: message``, or just ``Type`` for an exception without a message. An httpx timeout
    (whose own message is often empty) says what timed out and after how long:
    ``ReadTimeout: http://host:8000/metrics sent nothing for 5 s``."""
    text = str(exc)
    if isinstance(exc, httpx.TimeoutException):
        said = describe_timeout(exc)
        if said:
            text = said if not text or text == "timed out" else f"{said} ({text})"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def describe_timeout(exc: httpx.TimeoutException) -> str | None:
    """What an httpx timeout ran past, from its request (URL without credentials, the limit in
    seconds); None when the request is not known."""
    try:
        request = exc.request
    except RuntimeError:
        return None
    for kind, (limit, words) in _TIMEOUTS.items():
        if isinstance(exc, kind):
            seconds = (request.extensions.get("timeout") or {}).get(limit)
            url = strip_credentials(str(request.url))
            shown = f"{seconds:g}" if isinstance(seconds, int | float) else "?"
            return words.format(url=url, s=shown)
    return None
