"""Everything sweeper writes to disk, as typed pydantic models (trace schema version 1).

A trace set is a folder ``traces/<run-id>/`` holding:

- ``manifest.json``        one :class:`RunManifest`: what was run, on what, with each fact's source;
- ``requests.jsonl[.gz]``  one :class:`RequestTrace` per line, appended as each request ends;
- ``server_metrics.jsonl`` one :class:`MetricSample` per scrape of a Prometheus endpoint;
- ``server.log``           optional: the server's own log, copied as given.

Only observed facts are stored; TTFT, ITL, throughput and the rest are derived by
:mod:`sweeper.analysis.frames`. Times are integers in nanoseconds on one monotonic clock: a request's
``send_ns`` and a scrape's ``t_ns`` count from the run's origin (``RunManifest.clock``), and a
chunk's arrival counts from its own request's send. Units are in the field names.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sweeper.redact import strip_credentials

SCHEMA_VERSION = 1
SUPPORTED_SCHEMA_VERSIONS = (1,)

MANIFEST_FILE = "manifest.json"
REQUESTS_FILE = "requests.jsonl"
REQUESTS_FILE_GZ = "requests.jsonl.gz"
METRICS_FILE = "server_metrics.jsonl"
METRICS_FILE_GZ = "server_metrics.jsonl.gz"
SERVER_LOG_FILE = "server.log"

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")

FactValue = int | float | bool | str | None
FactSource = Literal[
    "endpoint",  # an HTTP endpoint of the server (/version, /v1/models, /tokenize, ...)
    "metrics",  # the server's Prometheus /metrics (e.g. vllm:cache_config_info labels)
    "log",  # the server's log
    "user",  # a command-line option or the user's own file
    "spec_table",  # sweeper's built-in table of GPUs and models
    "model_config",  # the model's config.json
    "import",  # a foreign tool's result files
    "derived",  # computed from other facts (the detail says how)
]


class _Model(BaseModel):
    # NaN, +Inf and -Inf are written as the strings "NaN", "Infinity", "-Infinity" (JSON has no
    # such numbers) and read back as floats; see docs/trace-schema.md.
    model_config = ConfigDict(
        extra="forbid", frozen=False, validate_assignment=False, ser_json_inf_nan="strings"
    )


def _finite_or_none(value: Any) -> Any:
    """A non-finite float as None (unknown): a fact or a tool's summary number is a value or
    nothing (stored as null, as before)."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _null_as_nan(value: Any) -> Any:
    """null as NaN: files written before non-finite numbers were stored as strings hold null
    where the value was NaN or infinite."""
    return math.nan if value is None else value


class Fact(_Model):
    """One value and where it came from."""

    value: FactValue
    source: FactSource
    detail: str | None = Field(
        default=None, description="The endpoint, metric, log line or option it was read from."
    )

    @field_validator("value")
    @classmethod
    def _finite(cls, value: FactValue) -> FactValue:
        return _finite_or_none(value)


def fact_value(fact: Fact | None) -> FactValue:
    """The value of an optional fact, or None."""
    return None if fact is None else fact.value


# ---------------------------------------------------------------------------------------------
# manifest.json


RECORDER_TOOL = "sweeper record"  # Source.tool of a trace set sweeper record wrote


class Source(_Model):
    """Who produced the trace set."""

    tool: str = Field(
        description='"sweeper record", or the imported tool: "aiperf", "vllm-bench"...'
    )
    version: str | None = None
    fidelity: Literal["per_chunk", "per_request", "summary"] = Field(
        default="per_chunk",
        description="per_chunk: every content chunk's arrival is known (ITL can be computed); "
        "per_request: only TTFT / end-to-end times per request; summary: no per-request data, "
        "only the tool's own per-level numbers (in ``summaries``).",
    )
    command: list[str] | None = Field(default=None, description="argv of the command that ran.")
    files: list[str] = Field(default_factory=list, description="Imported files, as given.")
    send_times: Literal["measured", "reconstructed"] = Field(
        default="measured",
        description="reconstructed: the tool did not record when each request was sent, so the "
        "importer laid the requests out as a closed loop of C streams (a rate level: on its "
        "offered schedule); per-level duration and throughput then come from the tool's own "
        "summary.",
    )
    summaries: dict[str, dict[str, float | int | str | None]] = Field(
        default_factory=dict,
        description="Per-level numbers the imported tool computed itself, keyed by the level "
        "(str(C), or a rate level's key), under "
        "the names of sweeper's summary CSV where one exists (duration_s, ttft_ms_mean...).",
    )

    @field_validator("summaries")
    @classmethod
    def _finite_summaries(
        cls, value: dict[str, dict[str, float | int | str | None]]
    ) -> dict[str, dict[str, float | int | str | None]]:
        return {
            level: {k: _finite_or_none(v) for k, v in numbers.items()}
            for level, numbers in value.items()
        }


class Target(_Model):
    """The endpoint that was swept. ``base_url`` never carries credentials."""

    base_url: str | None = None
    endpoint: Literal["completions", "chat"] = "completions"
    model: str | None = Field(default=None, description="The model name sent in each request.")
    served_model_name: str | None = None

    @field_validator("base_url")
    @classmethod
    def _no_credentials(cls, value: str | None) -> str | None:
        if value is None:
            return value
        return strip_credentials(value)


class ServerConfig(_Model):
    """The server's configuration as far as it could be found out; each value with its source."""

    max_num_seqs: Fact | None = None
    max_num_batched_tokens: Fact | None = Field(default=None, description="Chunked-prefill budget.")
    enable_chunked_prefill: Fact | None = None
    enable_prefix_caching: Fact | None = None
    kv_cache_tokens: Fact | None = Field(default=None, description="KV cache capacity in tokens.")
    kv_cache_memory_bytes: Fact | None = None
    kv_cache_max_concurrency: Fact | None = Field(
        default=None, description="The server's own 'maximum concurrency for N tokens per request'."
    )
    block_size: Fact | None = None
    num_gpu_blocks: Fact | None = None
    gpu_memory_utilization: Fact | None = None
    dtype: Fact | None = None
    kv_cache_dtype: Fact | None = None
    tensor_parallel_size: Fact | None = None
    pipeline_parallel_size: Fact | None = None
    data_parallel_size: Fact | None = None
    max_model_len: Fact | None = None
    # Memory accounting from the server log (vLLM prints it at start-up).
    weights_memory_bytes: Fact | None = None
    non_torch_memory_bytes: Fact | None = None
    activation_peak_bytes: Fact | None = None
    cuda_graph_memory_bytes: Fact | None = None
    memory_budget_bytes: Fact | None = Field(
        default=None,
        description="total memory x gpu_memory_utilization, as the server computed it.",
    )
    total_memory_bytes: Fact | None = None
    suggested_kv_cache_memory_bytes: Fact | None = Field(
        default=None, description="The --kv-cache-memory value the server suggests in its log."
    )
    extra: dict[str, Fact] = Field(
        default_factory=dict, description="Any other flag or fact, by its server-side name."
    )


class Server(_Model):
    engine: str | None = Field(default=None, description='"vllm", "sglang", "llama.cpp", "tgi"...')
    version: Fact | None = None
    config: ServerConfig = Field(default_factory=ServerConfig)


class Hardware(_Model):
    gpu_name: Fact | None = None
    gpu_count: Fact | None = None
    memory_bandwidth_gb_s: Fact | None = Field(default=None, description="Per GPU, GB/s (1e9).")
    memory_gb: Fact | None = Field(default=None, description="Per GPU, GB (1e9).")
    bf16_tflops: Fact | None = Field(default=None, description="Dense bf16, per GPU.")


class ModelFacts(_Model):
    name: str | None = None
    parameters: Fact | None = None
    weight_bytes: Fact | None = None
    kv_bytes_per_token: Fact | None = None
    num_layers: Fact | None = None
    num_kv_heads: Fact | None = None
    head_dim: Fact | None = None
    hidden_size: Fact | None = None
    dtype: Fact | None = None
    active_parameters: Fact | None = Field(
        default=None,
        description="Mixture-of-experts: parameters read per token (for the roofline).",
    )


class Workload(_Model):
    input_len: int | None = Field(
        default=None, description="Prompt tokens asked for (None: varied)."
    )
    output_len: int | None = Field(default=None, description="Output tokens asked for.")
    concurrency_levels: list[int] = Field(default_factory=list)
    requests_per_level: dict[str, int] = Field(
        default_factory=dict,
        description="Measured requests planned per level, keyed by the level (str(C) or the "
        "rate level's key).",
    )
    warmup_per_level: int = 0
    warmup_requests: dict[str, int] = Field(
        default_factory=dict,
        description="Warm-up requests planned per level, keyed by the level; where given, it wins "
        "over warmup_per_level (sweeper record's default is one per stream: C at level C).",
    )
    unique_prefix: bool | None = Field(
        default=None,
        description="Each prompt starts with a prefix of its own: no prefix-cache hits between "
        "requests. False: all requests share one prompt.",
    )
    ignore_eos: bool | None = None
    exact_input: bool | None = Field(
        default=None, description="Prompts were built to exactly input_len tokens by a tokenizer."
    )
    prompt_source: str | None = Field(
        default=None, description='"server /tokenize", "tokenizer X"...'
    )
    seed: int | None = None
    request_params: dict[str, Any] = Field(
        default_factory=dict, description="Extra sampling parameters sent with each request."
    )
    # Open loop (``--request-rate``): each level is an offered rate, not a number of streams.
    load: Literal["concurrency", "rate"] = Field(
        default="concurrency",
        description='"concurrency": closed loop, each level keeps C streams busy; "rate": open '
        "loop, each level sends on a schedule of arrivals whatever the server does. A rate "
        "level's key (``concurrency`` in the traces and levels) is its 1-based position in "
        "``request_rates``.",
    )
    request_rates: dict[str, float] = Field(
        default_factory=dict,
        description="Rate levels: offered requests/s by str(level key); Infinity = all at once.",
    )
    arrival: Literal["poisson", "constant", "gamma", "trace"] | None = Field(
        default=None, description="How a rate level's arrivals are spaced (trace: a replay)."
    )
    burstiness: float | None = Field(
        default=None, description="Gamma shape of the gaps between arrivals (1 = Poisson)."
    )
    max_concurrency: int | None = Field(
        default=None, description="Cap on requests in flight at a rate level (None: no cap)."
    )
    duration_s: float | None = Field(
        default=None, description="Seconds of arrivals per level (--duration), when given."
    )
    dataset: str | None = Field(
        default=None,
        description='Where prompts came from: "random", "sharegpt:<file>", "jsonl:<file>", '
        '"mooncake:<file>" (the file name as given).',
    )
    dataset_sha256: str | None = Field(default=None, description="SHA-256 of the dataset file.")
    input_len_range: float | None = Field(
        default=None, description="Prompt lengths uniform in [L(1-R), L(1+R)] (--input-len-range)."
    )
    output_len_range: float | None = Field(
        default=None, description="Output lengths uniform in [L(1-R), L(1+R)]."
    )
    sessions: int | None = Field(default=None, description="Multi-turn: conversations per level.")
    turns: int | None = Field(default=None, description="Multi-turn: turns per conversation.")
    think_time_ms: float | None = Field(
        default=None, description="Multi-turn: wait between an answer and the next turn."
    )
    trace_speedup: float | None = Field(
        default=None, description="Trace replay: timestamps divided by this (2 = twice as fast)."
    )

    @property
    def open_loop(self) -> bool:
        return self.load == "rate"

    def offered_rate(self, level: int) -> float | None:
        """The offered requests/s of a rate level (inf: all at once); None for concurrency."""
        return self.request_rates.get(str(level)) if self.open_loop else None


class LoopLag(_Model):
    """The recorder's own event-loop lag during one level (how late its timers fired)."""

    concurrency: int
    samples: int
    p50_ms: float
    p99_ms: float
    max_ms: float


class StampCheck(_Model):
    """How exact one level's chunk times are: the recorder's reads during it
    (:mod:`sweeper.record.stamps`)."""

    concurrency: int
    source: Literal["kernel", "read"] = Field(
        description='"kernel": each read stamped with the socket\'s receive time (SO_TIMESTAMPNS); '
        '"read": stamped when the event loop read it'
    )
    reads: int
    chunks: int
    merged_chunks: int = Field(
        description="content chunks that arrived in one read with the next chunk of their stream "
        "(stamped with its time)"
    )
    read_delay_p50_ms: float | None = Field(
        default=None, description="kernel stamps only: how long a read's bytes waited in the socket"
    )
    read_delay_p99_ms: float | None = None
    read_delay_max_ms: float | None = None


class ClientNode(_Model):
    """One host the recorder's workers ran on (``--ray``: a node of the cluster)."""

    host: str | None = None
    node_id: str | None = Field(default=None, description="Ray's node id.")
    address: str | None = Field(default=None, description="The node's IP address.")
    cpus: float | None = Field(default=None, description="CPUs the node offers to the cluster.")
    workers: list[int] = Field(default_factory=list, description="The workers placed on it.")


class ClockOffset(_Model):
    """One worker's clock against the driver's, measured by round trips (the fastest of them
    kept): ``offset_ns`` = worker clock - driver clock; the true offset lies within
    ``uncertainty_ns`` (half that round trip) of it. Send times are mapped onto the driver's
    clock with it; a request's own timings (TTFT, chunk gaps) are differences on the worker's
    clock and need none."""

    worker: int
    concurrency: int | None = Field(
        default=None, description="The level it was measured before (None: at the start)."
    )
    offset_ns: int
    uncertainty_ns: int
    samples: int


class Client(_Model):
    host: str | None = None
    python: str | None = None
    platform: str | None = None
    libraries: dict[str, str] = Field(default_factory=dict)
    workers: int = 1
    mode: Literal["local", "workers", "ray"] | None = Field(
        default=None,
        description='Where the requests were sent from: "local" (this process), "workers" '
        '(--workers processes of this host) or "ray" (Ray actors over a cluster\'s nodes).',
    )
    ray_address: str | None = Field(default=None, description="The cluster joined (--ray).")
    nodes: list[ClientNode] = Field(default_factory=list)
    clock_offsets: list[ClockOffset] = Field(default_factory=list)
    lost_workers: list[str] = Field(
        default_factory=list, description="Workers lost during the run, in words."
    )
    http_client: str | None = Field(
        default=None,
        description='What streamed the requests: "raw" (sweeper\'s HTTP/1.1 client) or "httpx".',
    )
    loop_lag: list[LoopLag] = Field(default_factory=list)
    stamp_checks: list[StampCheck] = Field(default_factory=list)


class LevelAttempt(_Model):
    """One stretch of a level's recording: its first run, then each ``--resume`` that went on
    with it. The level ran from ``start_ns`` to ``end_ns`` of each; between them it was paused."""

    start_ns: int = Field(description="ns from origin: when this stretch started sending.")
    end_ns: int | None = Field(
        default=None,
        description="ns from origin: when it stopped; for a recorder that was killed, the end of "
        "the last request it wrote (set by the resume). None while it runs.",
    )
    outcome: Literal["complete", "aborted", "interrupted", "killed"] | None = None


class LevelStatus(_Model):
    """Bookkeeping of one concurrency level, so an interrupted sweep can be resumed."""

    concurrency: int = Field(description="The level's key: C, or a rate level's position.")
    status: Literal["pending", "running", "complete", "interrupted", "aborted"] = "pending"
    start_ns: int | None = None
    end_ns: int | None = None
    message: str | None = None
    attempts: list[LevelAttempt] = Field(
        default_factory=list,
        description="Each stretch the level was recorded in (one unless it was resumed).",
    )


class ClockOrigin(_Model):
    """The run's time origin: ``origin_unix_ns`` (wall clock) at ``origin_monotonic_ns``."""

    kind: Literal["monotonic"] = "monotonic"
    origin_monotonic_ns: int = Field(description="CLOCK_MONOTONIC at the origin (0 if unknown).")
    origin_unix_ns: int = Field(description="Unix time at the origin, in ns.")


class RunManifest(_Model):
    schema_version: int = Field(default=SCHEMA_VERSION, strict=True)  # true is not 1
    run_id: str
    started_at: datetime = Field(description="UTC wall-clock time of the run's start.")
    ended_at: datetime | None = None
    status: Literal["running", "complete", "incomplete", "aborted"] = "running"
    sweeper_version: str
    source: Source
    target: Target = Field(default_factory=Target)
    server: Server = Field(default_factory=Server)
    hardware: Hardware = Field(default_factory=Hardware)
    model: ModelFacts = Field(default_factory=ModelFacts)
    workload: Workload = Field(default_factory=Workload)
    client: Client = Field(default_factory=Client)
    clock: ClockOrigin | None = None
    levels: list[LevelStatus] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, value: int) -> int:
        if value not in SUPPORTED_SCHEMA_VERSIONS:
            raise ValueError(
                f"unknown trace schema version {value}; this sweeper reads versions "
                f"{', '.join(map(str, SUPPORTED_SCHEMA_VERSIONS))}"
            )
        return value

    @field_validator("run_id")
    @classmethod
    def _safe_run_id(cls, value: str) -> str:
        check_run_id(value)
        return value

    @field_validator("started_at", "ended_at")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value

    def level(self, concurrency: int) -> LevelStatus | None:
        return next((lv for lv in self.levels if lv.concurrency == concurrency), None)


def check_run_id(run_id: str) -> str:
    """Refuse a run id that is not safe as one path segment."""
    if not _RUN_ID.match(run_id) or ".." in run_id:
        raise ValueError(
            f"run id {run_id!r} is not safe as a folder name: use letters, digits and . _ + - "
            "(at most 128, not starting with a dot, no '..')"
        )
    return run_id


# ---------------------------------------------------------------------------------------------
# requests.jsonl


ErrorKind = Literal[
    "connect",  # connection refused / DNS / TLS: nothing sent
    "reset",  # connection reset or closed before a response
    "timeout",  # --timeout passed
    "http",  # the server answered an HTTP error status (4xx / 5xx / 429)
    "stream_cut",  # the stream ended before finish_reason / [DONE] and usage
    "malformed",  # a data line that is not valid JSON or not an OpenAI chunk
    "server_error",  # an error object inside the stream
    "cancelled",  # cancelled by the user (Ctrl-C) or by the importing tool
    "worker_lost",  # the recorder worker (or its node) running it was lost mid-request
    "other",
]


class RequestError(_Model):
    kind: ErrorKind
    http_status: int | None = None
    message: str = ""


class RequestTrace(_Model):
    """One request: when it was sent, when each content chunk arrived, what the server reported.

    ``chunk_ns[i]`` is the arrival of the i-th content-bearing chunk, in ns after ``send_ns``;
    ``chunk_tokens[i]`` is how many tokens it carried. Per-request-only imports leave both empty
    and give ``ttft_ns`` / ``e2el_ns`` instead.
    """

    concurrency: int = Field(ge=1)
    request_id: str
    phase: Literal["warmup", "measured"] = "measured"
    send_ns: int = Field(description="Send time, ns after the run's clock origin.")
    end_ns: int | None = Field(default=None, description="Stream end, ns after send.")
    chunk_ns: list[int] = Field(default_factory=list)
    chunk_tokens: list[int] = Field(default_factory=list)
    ttft_ns: int | None = Field(default=None, description="Only for per-request imports.")
    e2el_ns: int | None = Field(default=None, description="Only for per-request imports.")
    prompt_tokens: int | None = Field(default=None, description="Server-reported usage.")
    completion_tokens: int | None = Field(default=None, description="Server-reported usage.")
    finish_reason: str | None = None
    status: Literal["ok", "error", "cancelled"] = "ok"
    error: RequestError | None = None
    server_timing: dict[str, float] | None = Field(
        default=None,
        description=(
            "The server's own per-request timings as it sent them (llama.cpp's ``timings``); "
            "each key carries its unit in its name: ``prompt_ms``, ``predicted_per_token_ms`` "
            "(ms), ``predicted_per_second`` (tokens/s), ``prompt_n`` (tokens)."
        ),
    )
    worker: int | None = Field(default=None, description="Recorder worker process, if several.")
    scheduled_ns: int | None = Field(
        default=None,
        description="Open loop: when the schedule said to send, ns after the run's clock origin "
        "(send_ns - scheduled_ns is the client's queue). None in a closed loop.",
    )
    session: int | None = Field(default=None, description="Multi-turn: the conversation.")
    turn: int | None = Field(default=None, description="Multi-turn: 1-based turn in it.")
    asked_input_tokens: int | None = Field(
        default=None, description="Prompt tokens this request asked for, where lengths vary."
    )
    asked_output_tokens: int | None = Field(
        default=None, description="Output tokens this request asked for, where lengths vary."
    )

    @field_validator("server_timing", mode="before")
    @classmethod
    def _timing_nulls(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: _null_as_nan(v) for k, v in value.items()}
        return value

    @model_validator(mode="after")
    def _chunks_line_up(self) -> RequestTrace:
        if len(self.chunk_ns) != len(self.chunk_tokens):
            raise ValueError(
                f"chunk_ns has {len(self.chunk_ns)} entries but chunk_tokens has "
                f"{len(self.chunk_tokens)}; they must be the same length"
            )
        return self


# ---------------------------------------------------------------------------------------------
# server_metrics.jsonl


class Series(_Model):
    """One Prometheus sample: a histogram bucket is ``name_bucket`` with an ``le`` label."""

    name: str
    labels: dict[str, str] = Field(default_factory=dict)
    value: float = Field(description='NaN, +Inf, -Inf: "NaN", "Infinity", "-Infinity".')

    @field_validator("value", mode="before")
    @classmethod
    def _value_null(cls, value: Any) -> Any:
        return _null_as_nan(value)


class MetricSample(_Model):
    """One scrape of one metrics endpoint."""

    t_ns: int = Field(description="When the answer arrived, ns after the run's clock origin.")
    url: str
    duration_ns: int | None = None
    error: str | None = None
    series: list[Series] = Field(default_factory=list)
