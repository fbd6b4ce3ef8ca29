"""Recording a concurrency sweep against an OpenAI-compatible server (``sweeper record``).

``record_sweep(RecordConfig(base_url=..., ...)) -> Path`` records one trace set and returns its
folder. Modules, in the order data flows: :mod:`~sweeper.record.sse` (SSE bytes -> events ->
tokens), :mod:`~sweeper.record.client` (one timed request), :mod:`~sweeper.record.workload`
(levels and exact-length prompts), :mod:`~sweeper.record.serverinfo` (what the server says about
itself), :mod:`~sweeper.record.scrape` (Prometheus), :mod:`~sweeper.record.schedule` (open-loop
arrivals), :mod:`~sweeper.record.prompts` (what each request says: random, a dataset, a replay),
:mod:`~sweeper.record.sessions` (multi-turn), :mod:`~sweeper.record.levels` (a level's requests),
:mod:`~sweeper.record.recorder` (the sweep).
"""

from sweeper.record.config import RecordConfig
from sweeper.record.recorder import arecord_sweep, record_sweep
from sweeper.record.workload import RequestCount, parse_levels
from sweeper.redact import redact_argv  # the command line safe to store, one rule for secrets

__all__ = [
    "RecordConfig",
    "RequestCount",
    "arecord_sweep",
    "parse_levels",
    "record_sweep",
    "redact_argv",
]
