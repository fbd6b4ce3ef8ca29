"""Open-loop (rate) trace sets for the findings and report tests, written with the real writer.

A toy server with ``slots`` requests decoding at once: each request takes ``ttft_ms`` to its
first token and ``itl_ms`` a token after it, once it holds a slot; requests arriving while every
slot is busy wait in the server's queue (their TTFT grows). Arrivals follow the schedule
exactly (constant spacing at each offered rate), so the client never queues unless
``max_concurrency`` caps the requests in flight. Its capacity is ``slots / service time``
requests per second: offered rates above it saturate it. Multi-turn sessions (``turns``) send
each conversation's turns in order; a later turn's TTFT is ``later_turn_ttft_ms`` (a prefix
cache hit skips most of the prefill).
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sweeper.schema import (
    ClockOrigin,
    Fact,
    LevelStatus,
    MetricSample,
    RequestTrace,
    RunManifest,
    Series,
    Server,
    ServerConfig,
    Source,
    Target,
    Workload,
)
from sweeper.store import write_trace_set
from sweeper.version import __version__

NS = 1_000_000_000


@dataclass
class ToyServer:
    slots: int = 4
    ttft_ms: float = 50.0
    itl_ms: float = 10.0
    output_len: int = 32
    input_len: int = 256
    later_turn_ttft_ms: float | None = None
    stall_every: int = 0  # a gap of stall_ms every N tokens once a request waited for a slot
    stall_ms: float = 0.0

    @property
    def service_s(self) -> float:
        return (self.ttft_ms + (self.output_len - 1) * self.itl_ms) / 1e3

    @property
    def capacity_rps(self) -> float:
        return self.slots / self.service_s


def _one(
    server: ToyServer,
    key: int,
    i: int,
    sched: float,
    start: float,
    turn: int | None,
    send: float | None = None,
) -> tuple[RequestTrace, float]:
    """A request scheduled at ``sched`` (s), sent at ``send`` (default: on schedule), served from
    ``start``; returns its end."""
    send = sched if send is None else send
    first = server.ttft_ms
    if turn is not None and turn > 1 and server.later_turn_ttft_ms is not None:
        first = server.later_turn_ttft_ms
    gaps = [server.itl_ms] * (server.output_len - 1)
    if server.stall_every and start - send > 1e-6:  # a loaded server: long prefills stall it
        gaps = [
            server.stall_ms if (k + 1) % server.stall_every == 0 else g for k, g in enumerate(gaps)
        ]
    offsets = [(start - send) + first / 1e3]
    for g in gaps:
        offsets.append(offsets[-1] + g / 1e3)
    chunk_ns = [round(o * NS) for o in offsets]
    trace = RequestTrace(
        concurrency=key,
        request_id=f"r{key}-{i:05d}",
        send_ns=round(send * NS),
        scheduled_ns=round(sched * NS),
        end_ns=chunk_ns[-1] + 100_000,
        chunk_ns=chunk_ns,
        chunk_tokens=[1] * server.output_len,
        prompt_tokens=server.input_len,
        completion_tokens=server.output_len,
        finish_reason="length",
    )
    return trace, send + offsets[-1]


@dataclass
class Spans:
    """When each request waited in the server's queue and ran, for the scrapes."""

    waiting: list[tuple[float, float]]
    running: list[tuple[float, float]]


def rate_level(
    server: ToyServer,
    key: int,
    rate: float,
    requests: int,
    origin_s: float,
    *,
    client_cap: int | None = None,
    spans: Spans | None = None,
    poisson_seed: int | None = None,
) -> tuple[list[RequestTrace], float]:
    """One rate level from ``origin_s``; returns its traces and when its last request ended.
    ``client_cap``: at most this many requests in flight (``--max-concurrency``): a request
    waits in the client until one ends. ``poisson_seed``: exponential gaps (a Poisson schedule)
    instead of constant ones."""
    gap = 0.0 if math.isinf(rate) else 1.0 / rate
    rng = random.Random(poisson_seed)
    at = [0.0]
    for _ in range(requests - 1):
        step = rng.expovariate(rate) if poisson_seed is not None and gap else gap
        at.append(at[-1] + step)
    free = [origin_s] * server.slots  # when each server slot frees
    client = [origin_s] * (client_cap or requests)  # when each client slot frees
    out: list[RequestTrace] = []
    last = origin_s
    for i in range(requests):
        sched = origin_s + at[i]
        send = max(sched, heapq.heappop(client))
        start = max(send, heapq.heappop(free))
        trace, end = _one(server, key, i, sched, start, None, send)
        heapq.heappush(free, end)
        heapq.heappush(client, end)
        if spans is not None:
            spans.waiting.append((send, start))
            spans.running.append((start, end))
        out.append(trace)
        last = max(last, end)
    return out, last


def session_level(
    server: ToyServer, key: int, rate: float, sessions: int, turns: int, origin_s: float
) -> tuple[list[RequestTrace], float]:
    """Multi-turn: ``sessions`` conversations starting at ``rate`` per second, each sending its
    next turn when the previous answer ended (no think time); never more than the slots."""
    out: list[RequestTrace] = []
    last = origin_s
    i = 0
    for s in range(sessions):
        at = origin_s + s / rate
        for turn in range(1, turns + 1):
            trace, end = _one(server, key, i, at, at, turn)
            trace = trace.model_copy(update={"session": s, "turn": turn})
            out.append(trace)
            i += 1
            at = end + 0.001
            last = max(last, end)
    return out, last


def rate_manifest(
    run_id: str,
    rates: list[float],
    server: ToyServer,
    requests: int,
    *,
    turns: int | None = None,
    sessions: int | None = None,
    max_concurrency: int | None = None,
    kv_cache_tokens: int | None = None,
) -> RunManifest:
    keys = list(range(1, len(rates) + 1))
    return RunManifest(
        run_id=run_id,
        started_at=datetime(2026, 11, 30, 9, 0, tzinfo=UTC),
        ended_at=datetime(2026, 11, 30, 9, 10, tzinfo=UTC),
        status="complete",
        sweeper_version=__version__,
        source=Source(tool="sweeper record", version=__version__),
        target=Target(base_url="http://127.0.0.1:8000", endpoint="completions", model="tiny"),
        server=Server(
            engine="vllm",
            version=Fact(value="0.0-toy", source="user"),
            config=ServerConfig(
                max_num_seqs=Fact(value=server.slots, source="user"),
                kv_cache_tokens=Fact(value=kv_cache_tokens, source="user")
                if kv_cache_tokens
                else None,
            ),
        ),
        workload=Workload(
            input_len=server.input_len,
            output_len=server.output_len,
            concurrency_levels=keys,
            requests_per_level={str(k): requests for k in keys},
            ignore_eos=True,
            load="rate",
            request_rates={str(k): r for k, r in zip(keys, rates, strict=True)},
            arrival="constant",
            burstiness=1.0,
            max_concurrency=max_concurrency,
            dataset="random",
            turns=turns,
            sessions=sessions,
            seed=7,
        ),
        clock=ClockOrigin(origin_monotonic_ns=0, origin_unix_ns=1_764_493_200_000_000_000),
        levels=[LevelStatus(concurrency=k, status="complete") for k in keys],
    )


def write_rate_run(
    root: Path,
    run_id: str,
    rates: list[float],
    *,
    server: ToyServer | None = None,
    requests: int = 40,
    kv_cache_tokens: int | None = None,
    client_cap: int | None = None,
    scrape: bool = False,
    poisson_seed: int | None = None,
) -> Path:
    """A rate sweep against the toy server, one level per offered rate; ``client_cap``: the
    client's --max-concurrency; ``scrape``: the server's running / waiting gauges scraped."""
    server = server or ToyServer()
    traces: list[RequestTrace] = []
    t = 0.0
    spans = Spans([], [])
    for key, rate in enumerate(rates, start=1):
        level, end = rate_level(
            server,
            key,
            rate,
            requests,
            t,
            client_cap=client_cap,
            spans=spans,
            poisson_seed=None if poisson_seed is None else poisson_seed + key,
        )
        traces += level
        t = end + 0.5
    manifest = rate_manifest(
        run_id,
        rates,
        server,
        requests,
        kv_cache_tokens=kv_cache_tokens,
        max_concurrency=client_cap,
    )
    metrics = queue_scrapes(t, spans) if scrape else []
    return write_trace_set(root / run_id, manifest, traces, metrics=metrics)


def queue_scrapes(until_s: float, spans: Spans) -> list[MetricSample]:
    """Scrapes every 0.1 s of vLLM's running and waiting gauges, from the simulated spans."""
    out = []
    for i in range(int(until_s / 0.1) + 1):
        t = i * 0.1
        waiting = sum(1 for a, b in spans.waiting if a <= t < b)
        running = sum(1 for a, b in spans.running if a <= t < b)
        out.append(
            MetricSample(
                t_ns=round(t * NS),
                url="http://127.0.0.1:8000/metrics",
                series=[
                    Series(name="vllm:num_requests_waiting", value=float(waiting)),
                    Series(name="vllm:num_requests_running", value=float(running)),
                ],
            )
        )
    return out


def write_session_run(
    root: Path,
    run_id: str,
    *,
    rates: tuple[float, ...] = (1.0, 2.0),
    sessions: int = 4,
    turns: int = 3,
    server: ToyServer | None = None,
    hit_rate: float | None = None,
) -> Path:
    """A multi-turn sweep: each level ``sessions`` conversations of ``turns`` turns;
    ``hit_rate``: scrapes of vLLM's prefix-cache counters serving that share of prompt tokens."""
    server = server or ToyServer(later_turn_ttft_ms=15.0)
    traces: list[RequestTrace] = []
    t = 0.0
    for key, rate in enumerate(rates, start=1):
        level, end = session_level(server, key, rate, sessions, turns, t)
        traces += level
        t = end + 0.5
    manifest = rate_manifest(
        run_id, list(rates), server, sessions * turns, turns=turns, sessions=sessions
    )
    metrics = prefix_cache_scrapes(t + 1.0, hit_rate) if hit_rate is not None else []
    return write_trace_set(root / run_id, manifest, traces, metrics=metrics)


def prefix_cache_scrapes(until_s: float, hit_rate: float) -> list[MetricSample]:
    """Scrapes every 0.1 s of vLLM's prefix-cache counters (1,000 prompt tokens a second queried,
    ``hit_rate`` of them served from the cache)."""
    out = []
    for i in range(int(until_s / 0.1) + 1):
        t = i * 0.1
        out.append(
            MetricSample(
                t_ns=round(t * NS),
                url="http://127.0.0.1:8000/metrics",
                series=[
                    Series(name="vllm:prefix_cache_queries_total", value=1000.0 * t),
                    Series(name="vllm:prefix_cache_hits_total", value=1000.0 * t * hit_rate),
                    Series(name="vllm:num_requests_waiting", value=0.0),
                ],
            )
        )
    return out
