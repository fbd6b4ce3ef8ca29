"""Ground-truth statistics from the scripted server, and sweeper's per-chunk delivery delay.

Definitions follow DESIGN.md ("Metrics"): TTFT is first content chunk - request start; ITL is every
gap between consecutive content chunks, pooled over the requests of a level; TPOT is a request's
mean gap, (last - first) / (chunks - 1), with percentiles across requests (AIPerf and GuideLLM call
this per-request mean "ITL"). Percentiles interpolate linearly (numpy's default), as
``vllm bench serve`` does. The truth's TTFT starts when the server had read the whole request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from sweeper.units import NS_PER_MS, NS_PER_S


def pct(values: list[float] | np.ndarray, q: float) -> float:
    array = np.asarray(values, dtype=float)
    return float(np.percentile(array, q)) if array.size else float("nan")


@dataclass
class TruthStats:
    """What the server actually did for one level (times in ms)."""

    requests: int
    chunks: int
    tokens: int
    ttft_p50_ms: float
    ttft_p99_ms: float
    itl_p50_ms: float
    itl_p99_ms: float
    tpot_p50_ms: float
    tpot_p99_ms: float
    duration_s: float
    token_rate: float  # tokens written per second over the level
    start_ns: int  # first request received
    end_ns: int  # last content chunk written


def truth_stats(truths: list[dict[str, Any]]) -> TruthStats:
    """Statistics of the finished requests in ``truths`` (the server's /_sweeper/truth items)."""
    done = [t for t in truths if t["status"] == "ok" and t["content_ns"]]
    ttft = [(t["content_ns"][0] - t["received_ns"]) / NS_PER_MS for t in done]
    gaps: list[np.ndarray] = [np.diff(t["content_ns"]) / NS_PER_MS for t in done]
    itl = np.concatenate(gaps) if gaps else np.array([])
    tpot = [float(g.mean()) for g in gaps if g.size]
    tokens = sum(sum(t["content_tokens"]) for t in done)
    start = min((t["received_ns"] for t in done), default=0)
    end = max((t["content_ns"][-1] for t in done), default=0)
    duration_s = max(end - start, 1) / NS_PER_S if done else float("nan")
    return TruthStats(
        requests=len(done),
        chunks=sum(len(t["content_ns"]) for t in done),
        tokens=tokens,
        ttft_p50_ms=pct(ttft, 50),
        ttft_p99_ms=pct(ttft, 99),
        itl_p50_ms=pct(itl, 50),
        itl_p99_ms=pct(itl, 99),
        tpot_p50_ms=pct(tpot, 50),
        tpot_p99_ms=pct(tpot, 99),
        duration_s=duration_s,
        token_rate=tokens / duration_s if done else float("nan"),
        start_ns=start,
        end_ns=end,
    )


@dataclass
class Delivery:
    """Per-chunk receive - write, for chunks matched by cumulative token count (ms)."""

    chunks: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    negative: int  # receive before write: would mean the clocks differ


def match_sweeper(
    requests: list[tuple[str, int, list[int], list[int]]], truths: dict[str, dict[str, Any]]
) -> Delivery:
    """``requests``: (truth key, absolute send ns, chunk offsets from send, chunk tokens).

    A recorded chunk carrying tokens up to cumulative count T was complete when the server wrote
    the content event that brought its own cumulative count to T; its delay is receive - that
    write."""
    delays: list[int] = []
    for key, send_abs_ns, chunk_ns, chunk_tokens in requests:
        truth = truths.get(key)
        if truth is None or not truth["content_ns"]:
            continue
        written = truth["content_ns"]
        cumulative_truth = np.cumsum(truth["content_tokens"])
        cumulative_seen = np.cumsum(chunk_tokens)
        index = np.searchsorted(cumulative_truth, cumulative_seen, side="left")
        valid = index < len(written)
        received = send_abs_ns + np.asarray(chunk_ns, dtype=np.int64)
        delays.extend((received[valid] - np.asarray(written)[index[valid]]).tolist())
    array = np.asarray(delays, dtype=float) / NS_PER_MS
    return Delivery(
        chunks=len(delays),
        p50_ms=pct(array, 50),
        p99_ms=pct(array, 99),
        max_ms=float(array.max()) if array.size else float("nan"),
        negative=int((array < 0).sum()),
    )
