"""What ``sweeper record`` takes: :class:`RecordConfig` (one field per CLI option, same names),
its defaults and checks, and how a run is named and its command line made safe to store."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Literal

from sweeper.errors import ConfigError
from sweeper.record.scrape import DEFAULT_SCRAPE_INTERVAL_S
from sweeper.record.workload import (
    DEFAULT_LEVELS,
    MAX_REQUESTS_PER_LEVEL,
    RequestCount,
    check_request_counts,
)
from sweeper.schema import check_run_id
from sweeper.store import DEFAULT_TRACES_DIR

DEFAULT_INPUT_LEN = 1024
DEFAULT_OUTPUT_LEN = 256
DEFAULT_TIMEOUT_S = 600.0
DEFAULT_MAX_ERROR_RATE = 0.2
MAX_TOKENS = 100_000_000  # --input-len / --output-len: far past any context window
PROMPT_BUILD_PARALLEL = 8  # /tokenize calls in flight while prompts are built
CONNECT_TIMEOUT_S = 10.0
CONNECTIONS_HEADROOM = 4  # extra pooled connections (metrics scrapes) beyond the streams
HTTP_CLIENTS = ("raw", "httpx")
LIBRARIES = ("httpx", "httpcore", "pydantic", "prometheus_client", "rich", "click", "uvloop")

# User-given server facts ("what the server was started with"): option -> ServerConfig field.
USER_SERVER_FACTS = {
    "tp": "tensor_parallel_size",
    "pp": "pipeline_parallel_size",
    "dp": "data_parallel_size",
    "max_num_seqs": "max_num_seqs",
    "max_num_batched_tokens": "max_num_batched_tokens",
}


@dataclass
class RecordConfig:
    """Everything ``sweeper record`` takes; each field is the CLI option of the same name."""

    base_url: str | None = None
    model: str | None = None
    endpoint: Literal["completions", "chat"] = "completions"
    input_len: int = DEFAULT_INPUT_LEN
    output_len: int = DEFAULT_OUTPUT_LEN
    concurrency: list[int] = field(default_factory=lambda: list(DEFAULT_LEVELS))
    requests_per_level: RequestCount = field(default_factory=RequestCount)
    warmup: int | None = None  # warm-up requests per level; None: one per stream (= C)
    metrics_urls: list[str] | None = None  # None: <base-url>/metrics; []: no scraping
    scrape_interval_s: float = DEFAULT_SCRAPE_INTERVAL_S
    server_log: Path | None = None
    gpu: str | None = None
    gpu_count: int | None = None
    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    model_config: Path | None = None
    tokenizer: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    api_key: str | None = None
    out: Path = DEFAULT_TRACES_DIR
    run_id: str | None = None
    resume: bool = False
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_error_rate: float = DEFAULT_MAX_ERROR_RATE
    seed: int = 0
    ignore_eos: bool = True
    shared_prefix: bool = False
    workers: int = 1
    command: list[str] | None = None
    http_client: Literal["raw", "httpx"] = "raw"  # what streams (probes and scrapes: httpx)
    # The fields the user set (the CLI: options given on the command line or from the
    # environment); None: those that differ from the defaults. --resume compares these.
    given: frozenset[str] | None = None

    def check(self) -> None:
        if self.base_url is None and not self.resume:
            raise ConfigError("--base-url is required (e.g. --base-url http://127.0.0.1:8000)")
        if self.output_len < 1:
            raise ConfigError(f"--output-len {self.output_len} must be at least 1 token")
        if self.input_len < 1:
            raise ConfigError(f"--input-len {self.input_len} must be at least 1 token")
        if not 0.0 <= self.max_error_rate <= 1.0:
            raise ConfigError(
                f"--max-error-rate {self.max_error_rate} must be between 0 and 1 (e.g. 0.2)"
            )
        if self.timeout_s <= 0:
            raise ConfigError(f"--timeout {self.timeout_s} must be a positive number of seconds")
        if self.scrape_interval_s <= 0:
            raise ConfigError(
                f"--scrape-interval {self.scrape_interval_s} must be positive seconds"
            )
        if self.http_client not in HTTP_CLIENTS:
            raise ConfigError(
                f"--http-client {self.http_client!r}: use one of {', '.join(HTTP_CLIENTS)}"
            )
        if self.workers < 1:
            raise ConfigError(f"--workers {self.workers} must be at least 1")
        if self.warmup is not None and not 0 <= self.warmup <= MAX_REQUESTS_PER_LEVEL:
            raise ConfigError(
                f"--warmup {self.warmup} must be 0 to {MAX_REQUESTS_PER_LEVEL:,} requests"
            )
        for option, tokens in (("--input-len", self.input_len), ("--output-len", self.output_len)):
            if tokens > MAX_TOKENS:
                raise ConfigError(
                    f"{option} {tokens} is above {MAX_TOKENS:,} tokens, past any model's context"
                )
        if not self.resume:  # a resumed run keeps its own counts (checked against the run's)
            check_request_counts(self.requests_per_level, self.concurrency)
        if self.server_log is not None and not Path(self.server_log).is_file():
            raise ConfigError(f"--server-log {self.server_log}: no such file")
        if self.run_id is not None:
            try:
                check_run_id(self.run_id)
            except ValueError as exc:
                raise ConfigError(str(exc)) from exc

    def warmup_for(self, concurrency: int) -> int:
        return concurrency if self.warmup is None else self.warmup


def default_run_id(model: str, now: datetime) -> str:
    name = re.sub(r"[^A-Za-z0-9._+-]+", "_", model.rsplit("/", 1)[-1]).strip("._-") or "run"
    return f"{name[:80]}-{now.strftime('%Y%m%d-%H%M%S')}"
