"""Open-loop and multi-turn trace sets for the analysis tests, written by the real writer
(:mod:`sweeper.store`) with timings chosen by hand, so every expected number follows from the
definitions (DESIGN.md "Metrics") and not from the code under test."""

from __future__ import annotations

from pathlib import Path

from sweeper.schema import LevelStatus, RequestError, RequestTrace, Source, Workload
from sweeper.store import TraceSet, load_trace_set, write_trace_set
from sweeper.testing.factories import SyntheticLevel, synthetic_manifest

MS = 1_000_000  # ns
INF = float("inf")


def open_trace(
    rid: str,
    level: int,
    scheduled_ms: float | None,
    send_ms: float,
    chunks_ms: list[float] | None,
    *,
    asked_output: int | None = None,
    session: int | None = None,
    turn: int | None = None,
) -> RequestTrace:
    """One request, one token a chunk; ``chunks_ms=None``: it failed (an HTTP 503 after 5 ms)."""
    common = {
        "concurrency": level,
        "request_id": rid,
        "send_ns": round(send_ms * MS),
        "scheduled_ns": None if scheduled_ms is None else round(scheduled_ms * MS),
        "session": session,
        "turn": turn,
        "asked_output_tokens": asked_output,
    }
    if chunks_ms is None:
        return RequestTrace(
            **common,  # type: ignore[arg-type]
            end_ns=5 * MS,
            status="error",
            error=RequestError(kind="http", http_status=503, message="busy"),
        )
    return RequestTrace(
        **common,  # type: ignore[arg-type]
        end_ns=round(chunks_ms[-1] * MS),
        chunk_ns=[round(c * MS) for c in chunks_ms],
        chunk_tokens=[1] * len(chunks_ms),
        prompt_tokens=100,
        completion_tokens=len(chunks_ms),
        finish_reason="length",
    )


def write_rate_run(
    path: Path, requests: list[RequestTrace], rates: list[float], *, output_len: int | None = None
) -> TraceSet:
    """A rate sweep: level k (1-based) offered ``rates[k - 1]`` requests/s."""
    keys = list(range(1, len(rates) + 1))
    m = synthetic_manifest(path.name, [SyntheticLevel(k, 1, 1) for k in keys])
    m.source = Source(tool="sweeper record", version="test")
    m.workload = Workload(
        input_len=100,
        output_len=output_len,
        load="rate",
        request_rates={str(k): r for k, r in zip(keys, rates, strict=True)},
        arrival="poisson",
        concurrency_levels=keys,
        requests_per_level={str(k): sum(r.concurrency == k for r in requests) for k in keys},
    )
    m.levels = [LevelStatus(concurrency=k, status="complete") for k in keys]
    return load_trace_set(write_trace_set(path, m, requests))


def rate_sweep(path: Path) -> TraceSet:
    """Two rate levels.

    Level 1, 2 req/s offered, four requests scheduled 500 ms apart:

    ==== ========= ===== ===== ================ ======= =============
    id   scheduled send  queue chunks (from send) TTFT   sched TTFT / E2EL
    ==== ========= ===== ===== ================ ======= =============
    a    0         0     0     100, 110, 130    100     100 / 130
    b    500       540   40    120, 130         120     160 / 170
    x    1000      1060  60    (failed)         -       -
    d    1500      1500  0     50               50      50 / 50
    ==== ========= ===== ===== ================ ======= =============

    Level 2, all at once: two requests scheduled at 3000 ms, sent at 3000 and 3005 ms.
    """
    requests = [
        open_trace("r1-00000", 1, 0, 0, [100, 110, 130], asked_output=3),
        open_trace("r1-00001", 1, 500, 540, [120, 130], asked_output=4),
        open_trace("r1-00002", 1, 1000, 1060, None, asked_output=2),
        open_trace("r1-00003", 1, 1500, 1500, [50], asked_output=2),
        open_trace("r2-00000", 2, 3000, 3000, [40, 50]),
        open_trace("r2-00001", 2, 3000, 3005, [60, 70]),
    ]
    return write_rate_run(path, requests, [2.0, INF])


def multi_turn(path: Path) -> TraceSet:
    """A closed loop of two sessions (C=2) of two turns each, and one failed third request in turn 2:
    turn 1 TTFTs 100 and 80 ms, turn 2 TTFTs 30 and 50 ms (the prefix cache at work)."""
    requests = [
        open_trace("c2-00000", 2, None, 0, [100, 110], session=0, turn=1),
        open_trace("c2-00001", 2, None, 0, [80, 90], session=1, turn=1),
        open_trace("c2-00002", 2, None, 200, [30, 40], session=0, turn=2),
        open_trace("c2-00003", 2, None, 200, [50, 60], session=1, turn=2),
        open_trace("c2-00004", 2, None, 300, None, session=2, turn=2),
    ]
    m = synthetic_manifest(path.name, [SyntheticLevel(2, 1, 1, requests=5)])
    m.workload.sessions, m.workload.turns = 2, 2
    return load_trace_set(write_trace_set(path, m, requests))
