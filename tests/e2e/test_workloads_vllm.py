"""Open-loop and multi-turn workloads against a real vLLM (CPU build): a Poisson rate sweep whose
top rate saturates the server, a multi-turn run whose later turns hit vLLM's prefix cache, and a
short Mooncake trace replayed on its own schedule. Each is checked against what the server itself
counted on ``/metrics``."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from sweeper.analysis.frames import level_frame
from sweeper.analysis.server_frames import server_level_frame
from sweeper.store import TraceSet, load_trace_set
from tests.e2e.conftest import RECORD_TIMEOUT_S, fetch
from tests.e2e.test_record_vllm import prom_total, scraped

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

SWEEPER = Path(sys.executable).parent / "sweeper"
# The small model with room for two sequences: a burst of requests must wait in its queue.
RATE_SERVER = ("rates", "small", ("--max-num-seqs", "2", "--max-model-len", "1024"))
PREFIX_SERVER = ("prefix", "tiny", ("--enable-prefix-caching",))
HITS = "vllm:prefix_cache_hits_total"


def record(base_url: str, out: Path, run_id: str, *args: str) -> TraceSet:
    command = [
        str(SWEEPER), "record", "--base-url", base_url, "--out", str(out), "--run-id", run_id,
        "--scrape-interval", "0.5", "--quiet", *args,
    ]  # fmt: skip
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=RECORD_TIMEOUT_S, check=False
    )
    if done.returncode != 0:
        pytest.fail(
            f"sweeper record exited {done.returncode}:\n{done.stdout}\n{done.stderr}",
            pytrace=False,
        )
    return load_trace_set(out / run_id)


def summary_json(out: Path, run_id: str) -> dict:
    done = subprocess.run(
        [str(SWEEPER), "summary", run_id, "--traces", str(out), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def rate_sweep(
    vllm_server: Callable[..., object], tmp_path_factory: pytest.TempPathFactory
) -> tuple[TraceSet, dict]:
    name, model, args = RATE_SERVER
    server = vllm_server(name, model=model, args=args)
    out = tmp_path_factory.mktemp("rates")
    ts = record(
        server.base_url,  # type: ignore[attr-defined]
        out,
        "poisson",
        "--request-rate", "0.5,40", "--arrival", "poisson", "--max-concurrency", "4",
        "--requests-per-level", "10", "--warmup", "1", "--input-len", "64",
        "--output-len", "48", "--seed", "7",
    )  # fmt: skip
    return ts, summary_json(out, "poisson")


def test_poisson_sweep_keeps_its_schedule(rate_sweep: tuple[TraceSet, dict]) -> None:
    ts, _ = rate_sweep
    assert ts.manifest.status == "complete"
    workload = ts.manifest.workload
    assert workload.load == "rate" and workload.arrival == "poisson"
    assert workload.request_rates == {"1": 0.5, "2": 40.0}
    measured = [r for r in ts.requests if r.phase == "measured"]
    assert len(measured) == 20 and all(r.status == "ok" for r in measured)
    for key in (1, 2):
        level = sorted((r for r in measured if r.concurrency == key), key=lambda r: r.send_ns)
        scheduled = [r.scheduled_ns for r in level]
        assert all(s is not None for s in scheduled)
        assert scheduled == sorted(scheduled)  # type: ignore[type-var]
        # Never early: a request goes out at its time or after it.
        assert all(r.send_ns >= r.scheduled_ns for r in level)  # type: ignore[operator]


def test_top_rate_saturates_client_queue_and_server_queue(
    rate_sweep: tuple[TraceSet, dict],
) -> None:
    ts, summary = rate_sweep
    low, high = summary["levels"]
    assert (low["offered_rate_rps"], high["offered_rate_rps"]) == (0.5, 40.0)
    assert low["concurrency"] is None and low["level"] == 1
    # 0.5 req/s is under what two sequences serve, but a Poisson burst can still find all 4
    # slots taken on a slow machine (CI, 2026-12-02: a p99 of 101 ms). Every request that found
    # a free slot at its time went out on time; the rest waited for one.
    low_level = [r for r in ts.requests if r.phase == "measured" and r.concurrency == 1]
    on_time = [r for r in low_level if _in_flight(ts, r.scheduled_ns) < 4]  # type: ignore[arg-type]
    assert len(on_time) >= len(low_level) // 2
    late_ms = [(r.send_ns - r.scheduled_ns) / 1e6 for r in on_time]  # type: ignore[operator]
    assert max(late_ms) < 50, late_ms
    assert low["client_queue_ms"]["p99"] < 0.2 * high["client_queue_ms"]["p99"]
    # 40 req/s with 4 in flight at most: the requests wait in the client for a slot...
    assert high["client_queue_ms"]["p99"] > 500
    assert high["achieved_rate_rps"] < 0.5 * high["offered_rate_rps"]
    # ... the latency from the schedule holds that wait, the latency from the send does not.
    assert high["ttft_sched_ms"]["p99"] > high["ttft_ms"]["p99"]
    # ... and in the server's own queue: 4 sent, 2 running (--max-num-seqs 2). The server's
    # queue-time histogram counts every wait; its waiting gauge is seen only when a scrape falls
    # inside one (a CI run once had none of its 0.5 s scrapes do so), so the histogram decides.
    samples = [s for s in ts.metrics if s.error is None]
    assert max(scraped(samples, "vllm:num_requests_running")) <= 2
    server = server_level_frame(ts).set_index("concurrency")
    # On a slower machine (CI, 2026-12-01: ~60 ms decode steps) the 0.5 req/s level queues too
    # (263 ms against 1,742 ms at the top rate), so the top level must queue several times
    # more, not ten.
    assert server.loc[2, "queue_time_mean_ms"] > 100
    assert server.loc[2, "queue_time_mean_ms"] > 4 * server.loc[1, "queue_time_mean_ms"]


def _in_flight(ts: TraceSet, at_ns: int) -> int:
    """Requests of the run sent before ``at_ns`` and not yet ended at it."""
    return sum(
        1
        for r in ts.requests
        if r.send_ns < at_ns and (r.end_ns is None or r.send_ns + r.end_ns > at_ns)
    )


@pytest.fixture(scope="module")
def prefix_server(vllm_server: Callable[..., object]) -> object:
    name, model, args = PREFIX_SERVER
    return vllm_server(name, model=model, args=args)


def test_multi_turn_later_turns_hit_the_prefix_cache(prefix_server: object, tmp_path: Path) -> None:
    base_url = prefix_server.base_url  # type: ignore[attr-defined]
    before = prom_total(fetch(base_url + "/metrics"), HITS)
    ts = record(
        base_url, tmp_path, "turns",
        "--endpoint", "chat", "--sessions", "3", "--turns", "3", "--concurrency", "2",
        "--input-len", "160", "--output-len", "16", "--warmup", "0", "--think-time-ms", "50",
    )  # fmt: skip
    after = prom_total(fetch(base_url + "/metrics"), HITS)
    measured = [r for r in ts.requests if r.phase == "measured"]
    assert len(measured) == 9 and all(r.status == "ok" for r in measured)
    assert sorted((r.session, r.turn) for r in measured) == [
        (s, t) for s in sorted({r.session for r in measured}) for t in (1, 2, 3)
    ]
    # The history grows: each turn's prompt holds the previous turns and their answers.
    for session in {r.session for r in measured}:
        turns = sorted((r for r in measured if r.session == session), key=lambda r: r.turn or 0)
        prompts = [r.prompt_tokens or 0 for r in turns]
        assert prompts[0] < prompts[1] < prompts[2], prompts
    # vLLM's own counter: the later turns found their history in the cache.
    assert after - before > 0
    server = server_level_frame(ts)
    assert float(server["prefix_cache_hit_rate"].max()) > 0


def test_mooncake_trace_is_replayed_on_schedule(prefix_server: object, tmp_path: Path) -> None:
    base_url = prefix_server.base_url  # type: ignore[attr-defined]
    trace = tmp_path / "mooncake.jsonl"
    rows = [
        {"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [11, 12]},
        {"timestamp": 400, "input_length": 560, "output_length": 8, "hash_ids": [11, 13]},
        {"timestamp": 800, "input_length": 300, "output_length": 12, "hash_ids": [21]},
        {"timestamp": 1200, "input_length": 700, "output_length": 8, "hash_ids": [11, 12]},
        {"timestamp": 1600, "input_length": 200, "output_length": 6, "hash_ids": [31]},
    ]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    before = prom_total(fetch(base_url + "/metrics"), HITS)
    ts = record(
        base_url, tmp_path, "replay", "--dataset", f"mooncake:{trace}", "--warmup", "0",
    )  # fmt: skip
    after = prom_total(fetch(base_url + "/metrics"), HITS)
    workload = ts.manifest.workload
    assert workload.load == "rate" and workload.arrival == "trace"
    measured = sorted(
        (r for r in ts.requests if r.phase == "measured"), key=lambda r: r.scheduled_ns or 0
    )
    assert len(measured) == len(rows) and all(r.status == "ok" for r in measured)
    start = measured[0].scheduled_ns or 0
    offsets_ms = [((r.scheduled_ns or 0) - start) / 1e6 for r in measured]
    assert offsets_ms == pytest.approx([r["timestamp"] for r in rows], abs=1.0)
    lateness_ms = np.array([(r.send_ns - (r.scheduled_ns or 0)) / 1e6 for r in measured])
    assert lateness_ms.min() >= 0 and np.percentile(lateness_ms, 99) < 50
    # Exact lengths from vLLM's /tokenize, as the trace asked them.
    assert [r.prompt_tokens for r in measured] == [r["input_length"] for r in rows]
    assert [r.completion_tokens for r in measured] == [r["output_length"] for r in rows]
    # Requests sharing hash id 11 share its 512-token block: the server's cache saw it.
    assert after - before > 0
    frame = level_frame(ts)
    assert frame["offered_rate_rps"].iloc[0] == pytest.approx(4 / 1.6)
