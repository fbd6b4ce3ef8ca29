"""Fixtures: the scripted server, in a thread (fault and sweep tests) and in a separate process
(timing tests and subprocess sweeps: no GIL shared with the recorder); and a busy event loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import pytest

from sweeper.testing.server import ServerProcess, ServerThread, run_server, spawn_server

BusyLoop = Callable[[float], AbstractAsyncContextManager[None]]
"""``async with busy_loop(block_s):`` keeps the running event loop busy meanwhile."""


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    with run_server(ttft_ms=5, itl_ms=1) as srv:
        yield srv


@pytest.fixture(scope="module")
def process_server() -> Iterator[ServerProcess]:
    with spawn_server(ttft_ms=20, itl_ms=5) as srv:
        yield srv


@pytest.fixture
def busy_loop() -> BusyLoop:
    """While open, the event loop is blocked ``block_s`` at a time (what parsing hundreds of
    other streams does), yielding only briefly in between."""

    @asynccontextmanager
    async def hogging(block_s: float) -> AsyncIterator[None]:
        stop = asyncio.Event()

        async def hog() -> None:
            while not stop.is_set():
                time.sleep(block_s)
                await asyncio.sleep(0.0005)

        task = asyncio.create_task(hog())
        try:
            yield
        finally:
            stop.set()
            await task

    return hogging
