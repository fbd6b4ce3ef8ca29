"""The raw client's failures, which the caller maps to the trace's error kinds, and the one way
an exception is described in a failed request's message."""

from __future__ import annotations


class RawHTTPError(Exception):
    """Base of this module's errors."""


class ConnectFailed(RawHTTPError):
    """No connection could be made (refused, unknown host, TLS handshake, connect timeout)."""


class ConnectionLost(RawHTTPError):
    """The connection broke or closed before the response was complete."""


class ProtocolViolation(RawHTTPError):
    """The server's bytes are not a valid HTTP/1.1 response."""


def describe_exception(exc: BaseException) -> str:
    """``Type: message``, or just ``Type`` for an exception without a message."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
