"""A tiny step-by-step model of a batching engine, for trace-level findings tests.

Each engine step takes ``decode_ms``; a step that also carries a prefill chunk of a newly arrived
request takes ``decode_ms + chunk_ms`` (chunked prefill: one chunk per step, FIFO), so every
stream already decoding gets its next token late, all in the same step. ``random_stall_*``
instead delays single streams at random, independently (no shared cause). ``solo_stalls`` long
stalls of one stream each (``solo_stall_ms``, half-way through its request, while the others
go on) are what a preempted request shows: it waits for KV room and is recomputed. The requests are laid
out as a closed-loop sweep (C streams, each sending the next request when its last one ends) and
written with the real writer.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sweeper.schema import LoopLag, MetricSample, RequestTrace, ServerConfig, StampCheck
from sweeper.store import write_trace_set
from sweeper.testing.factories import SyntheticLevel, synthetic_manifest

NS_PER_MS = 1_000_000


@dataclass
class _Req:
    rid: str
    send_ms: float
    chunks_left: int
    tokens_left: int
    times_ms: list[float] = field(default_factory=list)


def simulate_level(
    concurrency: int,
    *,
    start_ms: float,
    requests: int,
    output_len: int = 64,
    decode_ms: float = 10.0,
    prefill_chunks: int = 2,
    chunk_ms: float = 80.0,
    random_stall_prob: float = 0.0,
    random_stall_ms: float = 0.0,
    solo_stalls: int = 0,
    solo_stall_ms: float = 0.0,
    seed: int = 0,
) -> tuple[list[RequestTrace], float]:
    """One level; returns its traces and the time its last request ended (ms)."""
    rng = np.random.default_rng(seed)
    t = start_ms
    sent = 0
    queue: deque[_Req] = deque()
    decoding: list[_Req] = []
    done: list[_Req] = []

    def send(at: float) -> None:
        nonlocal sent
        queue.append(_Req(f"c{concurrency}-{sent:04d}", at, prefill_chunks, output_len))
        sent += 1

    for _ in range(min(concurrency, requests)):
        send(t)
    while queue or decoding:
        prefilling = queue[0] if queue else None
        step = decode_ms + (chunk_ms if prefilling is not None and prefill_chunks > 0 else 0.0)
        t += step
        finished = []
        for r in decoding:
            extra = (
                random_stall_ms if random_stall_prob and rng.random() < random_stall_prob else 0.0
            )
            r.times_ms.append(t + extra)
            r.tokens_left -= 1
            if r.tokens_left == 0:
                finished.append(r)
        if prefilling is not None:
            prefilling.chunks_left -= 1
            if prefilling.chunks_left <= 0:
                queue.popleft()
                prefilling.times_ms.append(t)  # the first token comes with the last chunk
                prefilling.tokens_left -= 1
                decoding.append(prefilling)
        for r in finished:
            decoding.remove(r)
            done.append(r)
            if sent < requests:
                send(r.times_ms[-1] + 0.1)  # after the last request ended
    for r in done[len(done) // 2 : len(done) // 2 + solo_stalls]:
        half = len(r.times_ms) // 2
        r.times_ms[half:] = [x + solo_stall_ms for x in r.times_ms[half:]]
    traces = []
    for r in done:
        send_ns = round(r.send_ms * NS_PER_MS)
        offsets = [round(x * NS_PER_MS) - send_ns for x in r.times_ms]
        offsets = list(np.maximum.accumulate(offsets))
        traces.append(
            RequestTrace(
                concurrency=concurrency,
                request_id=r.rid,
                send_ns=send_ns,
                end_ns=offsets[-1] + 50_000,  # before the next request is sent
                chunk_ns=offsets,
                chunk_tokens=[1] * len(offsets),
                prompt_tokens=1000,
                completion_tokens=output_len,
                finish_reason="length",
            )
        )
    end = max(r.times_ms[-1] for r in done)
    return traces, end


def write_simulated_run(
    root: Path,
    run_id: str,
    levels: list[int],
    *,
    config: ServerConfig | None = None,
    metrics: list[MetricSample] | None = None,
    requests_per_stream: int = 4,
    loop_lag_p99_ms: dict[int, float] | None = None,
    stamp_checks: list[StampCheck] | None = None,
    per_level: dict[int, dict[str, float]] | None = None,
    **kwargs: float,
) -> Path:
    """``kwargs`` are :func:`simulate_level`'s for every level; ``per_level[c]`` overrides them
    at level c."""
    traces: list[RequestTrace] = []
    t = 0.0
    for c in levels:
        args = {**kwargs, **(per_level or {}).get(c, {})}
        level, end = simulate_level(c, start_ms=t, requests=requests_per_stream * c, **args)  # type: ignore[arg-type]
        traces.extend(level)
        t = end + 100.0
    manifest = synthetic_manifest(
        run_id,
        [SyntheticLevel(concurrency=c, ttft_ms=0, itl_ms=0) for c in levels],
        input_len=1000,
        output_len=int(kwargs.get("output_len", 64)),
        config=config,
    )
    for c, lag in (loop_lag_p99_ms or {}).items():
        manifest.client.loop_lag.append(
            LoopLag(concurrency=c, samples=100, p50_ms=lag / 4, p99_ms=lag, max_ms=lag * 2)
        )
    manifest.client.stamp_checks = list(stamp_checks or [])
    return write_trace_set(root / run_id, manifest, traces, metrics or [])
