"""Facts about the server, the GPU and the model: what a run was recorded on, each value with
where it came from (the server's log, its endpoints, sweeper's spec tables, the user).

- :mod:`~sweeper.facts.serverlog`: the server's log -> KV cache size, memory accounting,
  chunked-prefill budget, the periodic "Running / Waiting / KV cache usage" lines;
- :mod:`~sweeper.facts.hardware`: the GPU and model spec tables (``data/*.csv``) and a model's
  config.json;
- :mod:`~sweeper.facts.complete`: a manifest's missing GPU and model figures from the tables.
"""

from sweeper.facts.complete import complete_facts
from sweeper.facts.hardware import gpu_facts, model_facts
from sweeper.facts.serverlog import ServerLog, apply_server_log, parse_server_log

__all__ = [
    "ServerLog",
    "apply_server_log",
    "complete_facts",
    "gpu_facts",
    "model_facts",
    "parse_server_log",
]
