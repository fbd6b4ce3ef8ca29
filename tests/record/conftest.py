"""Fixtures: the scripted server, in a thread (fault and sweep tests) and in a separate process
(timing tests and subprocess sweeps: no GIL shared with the recorder)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sweeper.testing.server import ServerProcess, ServerThread, run_server, spawn_server


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    with run_server(ttft_ms=5, itl_ms=1) as srv:
        yield srv


@pytest.fixture(scope="module")
def process_server() -> Iterator[ServerProcess]:
    with spawn_server(ttft_ms=20, itl_ms=5) as srv:
        yield srv
