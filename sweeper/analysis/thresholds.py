"""The thresholds the findings use, as named, documented data (``docs/findings.md`` lists them).

Each one answers "how much is enough to say so?" for one sentence of a finding. They are
judgement calls, chosen so that the reference report's conclusions come out of its own numbers
and so that a quiet, healthy sweep gives no alarm; change them by passing another
:class:`Thresholds` to :func:`sweeper.findings.analyze_run`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sweeper.schema import StampCheck
from sweeper.units import MIB


@dataclass(frozen=True)
class Thresholds:
    # 1. roofline
    roofline_close: float = 0.8
    """Single-stream tok/s at or above this fraction of the bandwidth roofline: decode is
    bandwidth-bound (nothing left to gain per stream)."""
    roofline_far: float = 0.5
    """Below this fraction: per-step overheads, not memory bandwidth, limit a single stream."""
    context_output_fraction: float = 0.5
    """The roofline's context: input tokens + this fraction of the output (the mean context a
    decode step reads)."""

    # 2. scaling
    scaling_efficiency_min: float = 0.8
    """Throughput / (C x single stream) below this: the level where scaling stops being linear."""

    # 3. knee
    knee_marginal_fraction: float = 0.5
    """The knee: the first step between levels where each added concurrency slot brings less
    than this fraction of the single stream's tok/s."""

    # 3, open loop (a rate sweep): the saturation rate
    saturation_follow_fraction: float = 0.9
    """A rate level whose completed requests per second fall below this fraction of the requests
    sent per second (or whose sends fall below this fraction of what its schedule asked for):
    the server (or the client) no longer keeps up."""
    saturation_client_queue_ms: float = 100.0
    """p90 client queue (sent - scheduled) at or above this (ms): requests wait in the client
    before they are sent (a --max-concurrency cap full, or the client itself behind)."""
    saturation_server_waiting: float = 1.0
    """The server's waiting queue at or above this many requests on average over a level: it
    admits requests more slowly than they arrive."""
    saturation_latency_growth: float = 3.0
    """p50 TTFT measured from the schedule at or above this x the lowest rate's: requests queue
    somewhere (the weakest of the signs: prefill interference also lengthens TTFT)."""
    rate_single_stream_inflight: float = 1.5
    """In a rate sweep, a lowest level with at most this many requests in flight on average
    stands for a single stream (the roofline's measurement)."""

    # 4. ITL tail
    itl_tail_ratio: float = 3.0
    """p99 ITL / p50 ITL at or above this: the tail has opened (a few gaps are many times the
    typical one)."""

    # 5. tail cause (timing signature in the trace)
    long_gap_factor: float = 3.0
    """A gap longer than this x the level's p50 ITL is a stall."""
    sync_others_fraction: float = 0.5
    """A stall is synchronized when at least this fraction of the other streams decoding at that
    moment stall in the same engine step (their stalls end within one p50 ITL of each other)."""
    sync_signature_share: float = 0.5
    """At least this share of the stalls synchronized: they come from a step every stream waits
    on (a batched prefill chunk), not from one request's own trouble."""
    prefill_overlap_share: float = 0.5
    """At least this share of the stalls falls inside another request's prefill window
    (its send .. its first token)."""
    signature_max_gaps: int = 2000
    """Stalls examined per level at most (evenly spaced), to bound the work on huge sweeps."""
    cause_min_time_share: float = 0.25
    """A cause is named for the ITL tail only when the long gaps attributed to it hold more of the
    time all long gaps add (beyond the p50 ITL) than any other cause, and at least this share."""
    kv_full_fraction: float = 0.95
    """KV usage at or above this fraction: the pool is full."""
    prefix_cache_hit_share: float = 0.2
    """A prefix-cache hit rate at or above this: requests share their history in the KV cache,
    and input + output tokens per request is only an upper bound on what each needs."""
    prefix_cache_collapse: float = 0.5
    """The top level's hit rate below this fraction of the best level's: the shared history no
    longer fits in the pool."""

    # 6. KV ceiling
    kv_warning_occupancy: float = 0.9
    """A level needing this fraction of the KV pool or more is close to the ceiling."""

    # 7. memory headroom
    memory_reserve_bytes: int = 512 * MIB
    """Kept free when estimating how large the KV cache could be (when the server gives no
    --kv-cache-memory suggestion of its own)."""

    # 8. recommended operating point (when no --slo is given)
    recommend_ttft_p99_ms: float = 2000.0
    """Default service level for the recommendation: p99 TTFT at most this."""
    recommend_itl_p50_ms: float = 50.0
    """... and p50 ITL at most this."""
    ttft_doubling_band: tuple[float, float] = (1.8, 2.2)
    """A p99 TTFT ratio inside this band is said to "double"."""
    goodput_attainment: float = 0.9
    """A rate run's operating point (and each row of its SLO table): the level with the most
    goodput among those where at least this share of the measured requests met the service
    level (DistServe's attainment; TTFT and E2EL counted from the schedule)."""

    # 10. long inputs
    long_input_tokens: int = 8192
    """Prompts this long or longer on average make a long-input workload."""
    speed_drop_notice: float = 0.3
    """Per-request generation speed falling by this fraction or more from the base level is
    worth a notice."""
    plateau_speed_change: float = 0.1
    """Between two levels, a per-request speed change under this fraction while throughput grows
    more than ``plateau_throughput_gain``: the server still had room at the lower level."""
    plateau_throughput_gain: float = 0.2

    # 11. client health
    client_lag_p99_ms: float = 5.0
    """The recorder's event-loop lag at p99 above this (ms) distorts any ITL..."""
    client_lag_itl_fraction: float = 0.25
    """... as does a lag above this fraction of the level's p50 ITL..."""
    client_lag_floor_ms: float = 1.0
    """... but never a lag under this (ms): timer jitter of a healthy loop."""
    client_lag_tail_fraction: float = 0.5
    """The recorder is the tail's cause only when its p99 lag is at least this fraction of the
    tail's excess (p99 - p50 ITL): a few ms of lag cannot make a 100 ms stall."""
    client_merged_share: float = 0.005
    """With kernel receive times, a late loop moves only chunks that shared a socket read with
    the next chunk of their stream; above this share of a level's chunks they can move its p99..."""
    client_read_delay_ms: float = 1.0
    """... by up to how long the reads waited: above this at p99 (ms), the millisecond the
    recorder promises, those chunks' gaps are off by more than it."""

    def client_lag_limit_ms(self, itl_p50_ms: float | None) -> float:
        """The event-loop lag (p99, ms) above which read-stamped chunk times distort a level's
        ITL: the absolute limit, or a fraction of its p50 ITL, never under the floor."""
        relative = (
            self.client_lag_itl_fraction * itl_p50_ms
            if itl_p50_ms is not None and math.isfinite(itl_p50_ms)
            else math.inf
        )
        return max(self.client_lag_floor_ms, min(self.client_lag_p99_ms, relative))

    def stamps_distorted(self, check: StampCheck) -> bool:
        """Kernel-stamped chunks whose ITL may be off: enough of them merged, read late. The
        recorder's self-check and the ``client_health`` finding both ask this."""
        return (
            check.source == "kernel"
            and check.chunks > 0
            and check.merged_chunks / check.chunks > self.client_merged_share
            and (check.read_delay_p99_ms or 0.0) > self.client_read_delay_ms
        )

    def loop_lag_distorts(self, lag_p99_ms: float, itl_p50_ms: float | None) -> bool:
        """Read-stamped chunks (httpx, TLS) whose ITL is inflated by the event loop's lag."""
        return math.isfinite(lag_p99_ms) and lag_p99_ms > self.client_lag_limit_ms(itl_p50_ms)


DEFAULT_THRESHOLDS = Thresholds()

# Finding 9: the service levels every report tables (DESIGN.md "Findings" 9).
DEFAULT_SLO_TABLE: tuple[str, ...] = (
    "ttft_p99<=0.5s",
    "ttft_p99<=1s",
    "ttft_p99<=2s",
    "itl_p50<=20ms",
    "itl_p50<=50ms",
)
