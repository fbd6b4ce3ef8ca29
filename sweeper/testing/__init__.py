"""Public helpers for tests (sweeper's and its users'): trace-set factories written with the real
writer, and a local OpenAI-compatible streaming server with a scripted timing model
(:mod:`sweeper.testing.server`)."""

from sweeper.testing.factories import (
    SyntheticLevel,
    synthetic_manifest,
    synthetic_requests,
    write_synthetic_run,
)
from sweeper.testing.server import (
    FaultRule,
    ServerConfig,
    closed_port_url,
    run_server,
    spawn_server,
)

__all__ = [
    "FaultRule",
    "ServerConfig",
    "SyntheticLevel",
    "closed_port_url",
    "run_server",
    "spawn_server",
    "synthetic_manifest",
    "synthetic_requests",
    "write_synthetic_run",
]
