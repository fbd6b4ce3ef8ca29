"""A minimal HTTP/1.1 layer over asyncio streams, for the scripted server.

Why not starlette/uvicorn: the server must control every byte and every TCP write (split an
event inside a UTF-8 character, reset a connection before the status line, cut a chunked body
mid-way) and stamp each write with the clock, and per-chunk cost must stay small. A request is
read with ``readuntil``/``readexactly`` (Content-Length bodies only, which every OpenAI client
sends); a streamed response is written with chunked transfer encoding, one ``transport.write`` per
event.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
import time
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl, urlsplit

MAX_HEAD_BYTES = 65_536
MAX_BODY_BYTES = 64 * 1024 * 1024
# Above this much unsent data, wait for the socket to drain (a client that stopped reading).
WRITE_HIGH_WATER_BYTES = 256 * 1024


class BadRequest(Exception):
    """The request cannot be parsed; answered with 400 and the connection closed."""


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    received_ns: int

    @property
    def keep_alive(self) -> bool:
        return self.headers.get("connection", "").lower() != "close"

    def json(self) -> Any:
        try:
            return json.loads(self.body or b"null")
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BadRequest(f"request body is not valid JSON: {exc}") from exc


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    """The next request on the connection, or None when the client closed it."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    except asyncio.LimitOverrunError as exc:
        raise BadRequest(f"request head larger than {MAX_HEAD_BYTES} bytes") from exc
    lines = head.decode("latin-1").split("\r\n")
    try:
        method, target, _version = lines[0].split(" ", 2)
    except ValueError as exc:
        raise BadRequest(f"bad request line {lines[0]!r}") from exc
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        raise BadRequest("chunked request bodies are not supported; send Content-Length")
    try:
        length = int(headers.get("content-length", "0"))
    except ValueError as exc:
        raise BadRequest(f"bad Content-Length {headers['content-length']!r}") from exc
    if not 0 <= length <= MAX_BODY_BYTES:
        raise BadRequest(f"Content-Length {length} outside 0..{MAX_BODY_BYTES}")
    try:
        body = await reader.readexactly(length) if length else b""
    except asyncio.IncompleteReadError:
        return None
    parts = urlsplit(target)
    return Request(
        method=method.upper(),
        path=parts.path,
        query=dict(parse_qsl(parts.query)),
        headers=headers,
        body=body,
        received_ns=time.monotonic_ns(),
    )


class Connection:
    """The writing side of one client connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.transport = writer.transport

    @property
    def gone(self) -> bool:
        """The client closed its side (or the connection broke)."""
        return self.transport.is_closing() or self.reader.at_eof()

    @staticmethod
    def head(status: int, headers: dict[str, str]) -> bytes:
        lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}"]
        lines.extend(f"{name}: {value}" for name, value in headers.items())
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def send(
        self,
        status: int,
        body: bytes,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> int:
        """Write a whole response; returns the monotonic ns just before the write."""
        all_headers = {"content-type": content_type, "content-length": str(len(body))}
        all_headers.update(headers or {})
        data = self.head(status, all_headers) + body
        t_ns = time.monotonic_ns()
        self.transport.write(data)
        return t_ns

    def send_json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> int:
        body = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
        return self.send(status, body, headers=headers)

    def start_chunked(self, status: int, headers: dict[str, str]) -> int:
        all_headers = {"content-type": "text/event-stream; charset=utf-8"}
        all_headers.update(headers)
        all_headers["transfer-encoding"] = "chunked"
        t_ns = time.monotonic_ns()
        self.transport.write(self.head(status, all_headers))
        return t_ns

    @staticmethod
    def frame(payload: bytes) -> bytes:
        """One chunk of a chunked body."""
        return b"%x\r\n%s\r\n" % (len(payload), payload)

    def end_chunked(self) -> None:
        self.transport.write(b"0\r\n\r\n")

    async def drain_if_needed(self) -> None:
        if self.transport.get_write_buffer_size() > WRITE_HIGH_WATER_BYTES:
            await self.writer.drain()

    def reset(self) -> None:
        """Abort with a TCP RST (SO_LINGER 0), as a crashed server's kernel would."""
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()

    async def close(self) -> None:
        """Flush and close (FIN)."""
        try:
            if not self.transport.is_closing():
                await self.writer.drain()
            self.writer.close()
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass
