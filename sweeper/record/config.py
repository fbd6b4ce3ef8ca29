"""What ``sweeper record`` takes: :class:`RecordConfig` (one field per CLI option, same names),
its defaults and checks, and how a run is named and its command line made safe to store."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Literal

from sweeper.errors import ConfigError
from sweeper.record.schedule import check_burstiness
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
# Rate levels (--request-rate): measured requests per level unless --requests-per-level or
# --duration says otherwise, and warm-up requests sent before each level's schedule starts.
DEFAULT_RATE_REQUESTS = 100
DEFAULT_RATE_WARMUP = 1
MAX_DURATION_S = 7 * 24 * 3600.0
# The recorder warns when it started a rate level's requests later than this after their due
# time (p99): its own delay would then be read as the client's queue.
SEND_LATE_P99_MS = 5.0
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
    # None: one per stream (= C) in a closed loop, DEFAULT_RATE_WARMUP before a rate level
    warmup: int | None = None
    # Open loop: rate levels (requests/s, sorted, inf last) instead of concurrency levels.
    request_rate: list[float] | None = None
    arrival: Literal["poisson", "constant", "gamma"] = "poisson"
    burstiness: float = 1.0
    max_concurrency: int | None = None
    duration_s: float | None = None  # seconds of arrivals per rate level
    # Lengths per request, uniform in [L(1-R), L(1+R)] around --input-len / --output-len.
    input_len_range: float | None = None
    output_len_range: float | None = None
    # Where prompts come from: random, sharegpt:FILE, jsonl:FILE or mooncake:FILE (a replay).
    dataset: str = "random"
    trace_speedup: float = 1.0  # mooncake: timestamps divided by this
    # Multi-turn: conversations per level, turns each, the pause between an answer and the next.
    sessions: int | None = None
    turns: int | None = None
    think_time_ms: float = 0.0
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
    ray: str | None = None  # --ray ADDRESS|auto: the workers as Ray actors over the cluster
    worker_cpus: float = 1.0  # --worker-cpus: CPUs each Ray worker reserves
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
        if self.worker_cpus <= 0:
            raise ConfigError(
                f"--worker-cpus {self.worker_cpus:g} must be a positive number of CPUs (e.g. 1)"
            )
        if self.ray is not None and not self.ray.strip():
            raise ConfigError("--ray needs a cluster address (e.g. 10.0.0.1:6379) or auto")
        if (self.workers > 1 or self.ray) and self.max_concurrency is not None:
            raise ConfigError(
                f"--max-concurrency with --workers {self.workers}: one cap on requests in flight "
                "cannot be kept across recorder processes; pass --workers 1, or leave out "
                "--max-concurrency"
            )
        if self.warmup is not None and not 0 <= self.warmup <= MAX_REQUESTS_PER_LEVEL:
            raise ConfigError(
                f"--warmup {self.warmup} must be 0 to {MAX_REQUESTS_PER_LEVEL:,} requests"
            )
        for option, tokens in (("--input-len", self.input_len), ("--output-len", self.output_len)):
            if tokens > MAX_TOKENS:
                raise ConfigError(
                    f"{option} {tokens} is above {MAX_TOKENS:,} tokens, past any model's context"
                )
        for option, ratio in (
            ("--input-len-range", self.input_len_range),
            ("--output-len-range", self.output_len_range),
        ):
            if ratio is not None and not 0 <= ratio < 1:
                raise ConfigError(
                    f"{option} {ratio:g} must be at least 0 and below 1: lengths are drawn "
                    "uniformly in [L(1-R), L(1+R)] around the length (e.g. 0.5: 512 to 1536 "
                    "around 1024)"
                )
        self._check_prompts()
        if self.request_rate is not None:
            self._check_rates()
        elif self.resume or self.replay:
            pass  # a resumed run keeps its own counts (checked against the run's)
        elif self.sessions is not None:
            if self.sessions < max(self.concurrency):
                raise ConfigError(
                    f"--sessions {self.sessions} is fewer conversations than streams at "
                    f"C={max(self.concurrency)}: each stream runs one conversation at a time; "
                    f"pass --sessions {max(self.concurrency)} or more"
                )
        else:
            check_request_counts(self.requests_per_level, self.concurrency)
        for option, value in (("--arrival", "arrival"), ("--burstiness", "burstiness")):
            if self.request_rate is None and self.set_by_user(value):
                raise ConfigError(f"{option} shapes rate levels: add --request-rate (e.g. 1,2,4)")
        if self.request_rate is None and not self.resume:
            self._check_closed_loop_or_replay()
        if self.server_log is not None and not Path(self.server_log).is_file():
            raise ConfigError(f"--server-log {self.server_log}: no such file")
        if self.run_id is not None:
            try:
                check_run_id(self.run_id)
            except ValueError as exc:
                raise ConfigError(str(exc)) from exc

    def set_by_user(self, name: str) -> bool:
        """Whether the user set this field: given on the command line (``given``), else (library
        use) a value other than the default."""
        if self.given is not None:
            return name in self.given
        return bool(getattr(self, name) != getattr(RecordConfig(), name))

    def _check_prompts(self) -> None:
        """--dataset, --trace-speedup and the multi-turn options, with what they exclude."""
        from sweeper.record.datasets import parse_dataset_spec

        kind, _ = parse_dataset_spec(self.dataset)
        if kind == "mooncake":
            for option, name in (
                ("--request-rate", "request_rate"),
                ("--concurrency", "concurrency"),
                ("--sessions", "sessions"),
            ):
                if getattr(self, name) is not None and self.set_by_user(name):
                    raise ConfigError(
                        f"--dataset mooncake:... replays the trace at its own timestamps (one "
                        f"level): leave out {option} (--trace-speedup X replays X times faster)"
                    )
        elif self.set_by_user("trace_speedup"):
            raise ConfigError("--trace-speedup applies to a replay: add --dataset mooncake:FILE")
        if not 0 < self.trace_speedup < math.inf:
            raise ConfigError(
                f"--trace-speedup {self.trace_speedup:g} must be a positive number (2 = twice "
                "as fast as the trace, 0.5 = half as fast)"
            )
        if (self.sessions is None) != (self.turns is None):
            raise ConfigError(
                "--sessions N and --turns K go together (e.g. --sessions 8 --turns 4)"
            )
        if self.sessions is None:
            if self.set_by_user("think_time_ms"):
                raise ConfigError("--think-time-ms applies to --sessions N --turns K")
            return
        if self.sessions < 1 or (self.turns or 0) < 1:
            raise ConfigError(
                f"--sessions {self.sessions} --turns {self.turns}: both must be at least 1"
            )
        if not 0 <= self.think_time_ms < math.inf:
            raise ConfigError(f"--think-time-ms {self.think_time_ms:g} must be 0 or more")
        if kind != "random":
            raise ConfigError(
                f"--sessions with --dataset {self.dataset}: a conversation's turns are built "
                "from random prompts of --input-len; leave out --dataset"
            )
        if self.set_by_user("requests_per_level") or self.duration_s is not None:
            raise ConfigError(
                "--sessions N --turns K sets a level's requests (N x K); leave out "
                "--requests-per-level and --duration"
            )

    def _check_closed_loop_or_replay(self) -> None:
        """The rate-only options without --request-rate: a replay takes --max-concurrency (a cap
        on its requests in flight) but not --duration (the trace sets its requests); a closed
        loop takes neither (its streams are the cap, --requests-per-level the count)."""
        if self.replay:
            if self.duration_s is not None and self.set_by_user("duration_s"):
                raise ConfigError(
                    "--duration with --dataset mooncake:...: a replay sends the trace's "
                    "requests at its timestamps; leave out --duration"
                )
            if self.max_concurrency is not None and self.max_concurrency < 1:
                raise ConfigError(f"--max-concurrency {self.max_concurrency} must be at least 1")
            return
        for option, name in (
            ("--max-concurrency", "max_concurrency"),
            ("--duration", "duration_s"),
        ):
            if getattr(self, name) is not None and self.set_by_user(name):
                raise ConfigError(
                    f"{option} applies to rate levels: add --request-rate (e.g. 1,2,4), or leave "
                    f"out {option} (a closed loop's --concurrency is its requests in flight, "
                    "--requests-per-level its requests)"
                )

    @property
    def replay(self) -> bool:
        return self.dataset.startswith("mooncake:")

    def _check_rates(self) -> None:
        if self.set_by_user("concurrency"):
            raise ConfigError(
                "--concurrency and --request-rate both given: a sweep's levels are either "
                "concurrency levels (closed loop) or request rates (open loop); pass one"
            )
        check_burstiness(self.arrival, self.burstiness)
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ConfigError(f"--max-concurrency {self.max_concurrency} must be at least 1")
        count = self.requests_per_level
        if count.fixed is None and self.set_by_user("requests_per_level"):
            raise ConfigError(
                f"--requests-per-level {count} is a multiple of a concurrency level; a rate "
                f"level takes a count (e.g. --requests-per-level {DEFAULT_RATE_REQUESTS}) or "
                "--duration SECONDS"
            )
        if self.duration_s is None:
            return
        if not 0 < self.duration_s <= MAX_DURATION_S:
            raise ConfigError(
                f"--duration {self.duration_s:g} must be positive seconds, at most a week"
            )
        if count.fixed is not None:
            raise ConfigError(
                "--duration and --requests-per-level both given: a rate level lasts a count of "
                "requests or a number of seconds; pass one"
            )
        if all(rate == math.inf for rate in self.request_rate or []):
            raise ConfigError(
                "--duration needs a finite --request-rate: an 'inf' level sends its requests "
                "all at once; give --requests-per-level N instead"
            )

    @property
    def open_loop(self) -> bool:
        return self.request_rate is not None or self.replay

    def level_keys(self) -> list[int]:
        """The levels' keys: C (closed loop), or a rate level's 1-based position."""
        if self.replay:
            return [1]
        if self.request_rate is not None:
            return list(range(1, len(self.request_rate) + 1))
        return list(self.concurrency)

    def rates_by_key(self) -> dict[str, float]:
        return {str(i): rate for i, rate in enumerate(self.request_rate or [], start=1)}

    def requests_for(self, key: int) -> int:
        """Measured requests planned at a level (a replay's: set from its trace)."""
        if self.sessions is not None:
            return self.sessions * (self.turns or 1)
        if self.request_rate is None:
            return self.requests_per_level.for_level(key)
        if self.requests_per_level.fixed is not None:
            return self.requests_per_level.fixed
        if self.duration_s is None:
            return DEFAULT_RATE_REQUESTS
        finite = [r for r in self.request_rate if r != math.inf]
        rate = self.request_rate[key - 1]
        # An 'inf' level sends as many as the fastest finite level, all at once.
        return max(1, round((rate if rate != math.inf else max(finite)) * self.duration_s))

    def warmup_for(self, concurrency: int) -> int:
        if self.warmup is not None:
            return self.warmup
        if self.replay:
            return 0  # the trace is the load: nothing before it
        return DEFAULT_RATE_WARMUP if self.request_rate is not None else concurrency


def default_run_id(model: str, now: datetime) -> str:
    name = re.sub(r"[^A-Za-z0-9._+-]+", "_", model.rsplit("/", 1)[-1]).strip("._-") or "run"
    return f"{name[:80]}-{now.strftime('%Y%m%d-%H%M%S')}"
