"""Public helpers for tests (sweeper's and its users'): trace-set factories written with the real
writer, and a local OpenAI-compatible streaming server with a scripted timing model
(:mod:`sweeper.testing.server`)."""

from typing import Any

from sweeper.testing.factories import (
    SyntheticLevel,
    synthetic_manifest,
    synthetic_requests,
    write_synthetic_run,
)

# The server's names load on first use: ``python -m sweeper.testing.server`` must not find the
# module already imported by this package (runpy warns about that).
_SERVER_NAMES = (
    "FaultRule",
    "ScriptedServerConfig",
    "closed_port_url",
    "run_server",
    "spawn_server",
)


def __getattr__(name: str) -> Any:
    if name in _SERVER_NAMES:
        from sweeper.testing import server

        return getattr(server, name)
    raise AttributeError(f"module 'sweeper.testing' has no attribute {name!r}")


__all__ = [
    "FaultRule",
    "ScriptedServerConfig",
    "SyntheticLevel",
    "closed_port_url",
    "run_server",
    "spawn_server",
    "synthetic_manifest",
    "synthetic_requests",
    "write_synthetic_run",
]
