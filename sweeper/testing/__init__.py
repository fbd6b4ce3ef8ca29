"""Public helpers for tests (sweeper's and its users'): trace-set factories written with the real
writer, and a local OpenAI-compatible streaming server with a scripted timing model
(:mod:`sweeper.testing.server`)."""

from sweeper.testing.factories import SyntheticLevel, synthetic_manifest, synthetic_requests, write_synthetic_run

__all__ = ["SyntheticLevel", "synthetic_manifest", "synthetic_requests", "write_synthetic_run"]
