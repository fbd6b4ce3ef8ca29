"""Helpers for the scripted-server tests: stream a request over real HTTP and keep each SSE line
with its receive time on the same clock as the server's truth."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from sweeper.testing.server import ServerThread, run_server


@dataclass
class Received:
    status: int
    headers: httpx.Headers
    lines: list[str]
    line_ns: list[int]

    @property
    def data(self) -> list[str]:
        return [line[len("data: ") :] for line in self.lines if line.startswith("data: ")]

    @property
    def events(self) -> list[dict[str, Any]]:
        return [json.loads(d) for d in self.data if d != "[DONE]"]

    def content_ns(self, chat: bool = False) -> list[int]:
        """Receive times of the lines that carry text."""
        times = []
        for line, t_ns in zip(self.lines, self.line_ns, strict=True):
            if not line.startswith("data: {"):
                continue
            choices = json.loads(line[6:])["choices"]
            if not choices:
                continue
            text = choices[0]["delta"].get("content") if chat else choices[0]["text"]
            if text:
                times.append(t_ns)
        return times


def stream(
    client: httpx.Client,
    path: str,
    body: dict[str, Any],
    headers: dict[str, str] | None = None,
) -> Received:
    lines: list[str] = []
    line_ns: list[int] = []
    with client.stream("POST", path, json={"stream": True, **body}, headers=headers) as response:
        for line in response.iter_lines():
            line_ns.append(time.monotonic_ns())
            lines.append(line)
        return Received(response.status_code, response.headers, lines, line_ns)


StreamFn = Callable[..., Received]


@pytest.fixture
def stream_request() -> StreamFn:
    """``stream_request(client, path, body, headers=None) -> Received``."""
    return stream


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    with run_server(ttft_ms=5, itl_ms=2) as running:
        yield running


@pytest.fixture
def client(server: ServerThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=10) as http:
        yield http
