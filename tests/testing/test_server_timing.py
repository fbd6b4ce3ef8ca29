"""The timing models, checked against the server's own truth and a real client's receive times.

Tolerances hold on a loaded 2-core machine: timers may fire a little early (uvloop rounds to
milliseconds) or late (a busy machine), so schedule checks allow -1.5 ms / +15 ms around the
nominal time; exact equalities are asserted on what the server scheduled (``due_ns``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sweeper.errors import ConfigError
from sweeper.testing.config import ScriptedServerConfig
from sweeper.testing.server import ServerThread, run_server, spawn_server

StreamFn = Callable[..., Any]
MS = 1_000_000
EARLY_NS = int(1.5 * MS)
LATE_NS = 15 * MS


def test_schedule_truth_matches_config_and_client(stream_request: StreamFn) -> None:
    with (
        run_server(ttft_ms=30, itl_ms=10) as server,
        httpx.Client(base_url=server.base_url) as client,
    ):
        got = stream_request(client, "/v1/completions", {"prompt": "a b", "max_tokens": 20})
        truth = server.truth(got.headers["x-request-id"])
    assert truth is not None
    due = np.array(truth["due_ns"])
    written = np.array(truth["content_ns"])
    assert due[0] - truth["received_ns"] == 30 * MS
    assert set(np.diff(due)) == {10 * MS}
    assert np.all(written - due >= -EARLY_NS) and np.all(written - due <= LATE_NS)
    # Same clock on both sides: nothing arrives before it was written, and loopback is fast.
    received = np.array(got.content_ns())
    delay = received - written
    assert len(received) == 20
    assert np.all(delay >= 0)
    assert np.median(delay) < 5 * MS


def test_tokens_per_chunk() -> None:
    with run_server(ttft_ms=1, itl_ms=2, tokens_per_chunk=4) as server:
        httpx.post(
            f"{server.base_url}/v1/completions",
            json={"prompt": "a", "max_tokens": 14, "stream": True},
            headers={"X-Request-Id": "k4"},
        )
        truth = server.truth("k4")
    assert truth is not None
    assert truth["content_tokens"] == [1, 4, 4, 4, 1]
    assert truth["completion_tokens"] == 14


def _scrape(base_url: str, client: httpx.Client | None = None) -> dict[str, float]:
    text = (client or httpx).get(f"{base_url}/metrics").text
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in (
                "vllm:num_requests_running",
                "vllm:num_requests_waiting",
                "vllm:kv_cache_usage_perc",
                "vllm:num_preemptions_total",
            ):
                values[sample.name] = sample.value
    return values


def _concurrent(base_url: str, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Send the requests at once (threads released together), scraping /metrics every 10 ms
    meanwhile. The clients exist before the threads start: building one holds the GIL for
    20-40 ms, which on a loaded machine would spread the sends over longer than a request."""
    results: list[dict[str, Any]] = [{} for _ in bodies]
    scrapes: list[dict[str, float]] = []
    limits = httpx.Limits(max_connections=len(bodies) + 1)
    with httpx.Client(limits=limits, timeout=60) as client:
        start = threading.Barrier(len(bodies))

        def send(i: int) -> None:
            start.wait()
            response = client.post(f"{base_url}/v1/completions", json=bodies[i])
            results[i] = response.json()

        threads = [threading.Thread(target=send, args=(i,)) for i in range(len(bodies))]
        for thread in threads:
            thread.start()
        while any(t.is_alive() for t in threads):
            scrapes.append(_scrape(base_url, client))
            time.sleep(0.01)
        for thread in threads:
            thread.join()
    return [*results, {"scrapes": scrapes}]


def test_batching_kv_full_queues_and_preempts() -> None:
    with run_server(
        mode="batching",
        step_base_ms=2,
        kv_capacity_tokens=256,
        max_model_len=256,
        block_size=16,
    ) as server:
        bodies = [{"prompt": " ".join(["w"] * 64), "max_tokens": 64} for _ in range(8)]
        *results, extra = _concurrent(server.base_url, bodies)
        final = _scrape(server.base_url)
        truths = server.truths()
    scrapes = extra["scrapes"]
    assert all(r["usage"]["completion_tokens"] == 64 for r in results)
    assert max(s["vllm:num_requests_waiting"] for s in scrapes) > 0
    assert max(s["vllm:kv_cache_usage_perc"] for s in scrapes) >= 0.9
    assert final["vllm:num_preemptions_total"] > 0
    assert sum(t["preemptions"] for t in truths) == final["vllm:num_preemptions_total"]
    assert final["vllm:kv_cache_usage_perc"] == 0 and final["vllm:num_requests_running"] == 0


def test_batching_without_preemption_reserves_and_never_preempts() -> None:
    with run_server(
        mode="batching", step_base_ms=2, kv_capacity_tokens=256, max_model_len=256, preemption=False
    ) as server:
        bodies = [{"prompt": " ".join(["w"] * 64), "max_tokens": 64} for _ in range(6)]
        *results, extra = _concurrent(server.base_url, bodies)
        final = _scrape(server.base_url)
    assert all(r["usage"]["completion_tokens"] == 64 for r in results)
    assert final["vllm:num_preemptions_total"] == 0
    assert max(s["vllm:num_requests_waiting"] for s in extra["scrapes"]) > 0


def test_batching_max_num_seqs_caps_running() -> None:
    with run_server(mode="batching", step_base_ms=2, max_num_seqs=2) as server:
        bodies = [{"prompt": "a b", "max_tokens": 150} for _ in range(6)]
        *_results, extra = _concurrent(server.base_url, bodies)
        truths = server.truths()
    assert max(s["vllm:num_requests_running"] for s in extra["scrapes"]) <= 2
    # From the server's own record: never more than 2 admitted and unfinished at once, and a
    # request that arrived while both seats were taken waited until one freed. (Judged on the
    # server's own times, so a loaded machine that delays the client's sends cannot fail it.)
    for t in truths:
        overlapping = [o for o in truths if o["admitted_ns"] <= t["admitted_ns"] < o["finished_ns"]]
        assert len(overlapping) <= 2
        busy = [
            o
            for o in truths
            if o is not t and o["admitted_ns"] <= t["received_ns"] < o["finished_ns"]
        ]
        if len(busy) >= 2:
            assert t["admitted_ns"] >= min(o["finished_ns"] for o in busy)
    # 6 requests on 2 seats: 4 waited in the queue until a seat freed, however close together
    # they arrived (all 6 may arrive before the first step admits anyone).
    assert len(truths) == 6
    first_free = min(t["finished_ns"] for t in truths)
    queued = [t for t in truths if t["admitted_ns"] >= first_free]
    assert len(queued) == 4
    assert all(t["admitted_ns"] > t["received_ns"] for t in queued)


def test_chunked_prefill_stalls_other_decodes() -> None:
    with run_server(
        mode="batching",
        step_base_ms=2,
        step_per_seq_ms=0,
        step_per_prefill_token_ms=0.05,
        max_num_batched_tokens=128,
    ) as server:
        decoder = threading.Thread(
            target=httpx.post,
            args=(f"{server.base_url}/v1/completions",),
            kwargs={
                "json": {"prompt": "a", "max_tokens": 200, "stream": True},
                "headers": {"X-Request-Id": "decoder"},
                "timeout": 30,
            },
        )
        decoder.start()
        time.sleep(0.05)
        long_prompt = " ".join(["w"] * 1500)
        httpx.post(
            f"{server.base_url}/v1/completions",
            json={"prompt": long_prompt, "max_tokens": 2},
            headers={"X-Request-Id": "long"},
            timeout=30,
        )
        decoder.join()
        decode = server.truth("decoder")
        long = server.truth("long")
    assert decode is not None and long is not None
    written = np.array(decode["content_ns"])
    gaps_ms = np.diff(written) / MS
    # 1500 prompt tokens in 127-token chunks (one slot goes to the decoder) take 12 steps of
    # 2 + 127 * 0.05 = 8.35 ms; the decoder's gaps in that window are those steps.
    window = (written[1:] > long["admitted_ns"]) & (written[1:] <= long["first_token_ns"] + MS)
    assert window.sum() >= 10
    assert np.median(gaps_ms[window]) > 6
    assert np.median(gaps_ms[~window]) < 4.5


def test_disconnect_frees_the_engine() -> None:
    with run_server(mode="batching", step_base_ms=2) as server:
        with (
            httpx.Client(base_url=server.base_url) as client,
            client.stream(
                "POST",
                "/v1/completions",
                json={"prompt": "a", "max_tokens": 1000, "stream": True},
                headers={"X-Request-Id": "leaver"},
            ) as response,
        ):
            for index, _line in enumerate(response.iter_lines()):
                if index > 10:
                    break
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if _scrape(server.base_url)["vllm:num_requests_running"] == 0:
                break
            time.sleep(0.02)
        state = _scrape(server.base_url)
        truth = server.truth("leaver")
    assert state["vllm:num_requests_running"] == 0 and state["vllm:kv_cache_usage_perc"] == 0
    assert truth is not None and truth["status"] == "disconnected"


def test_batching_config_must_fit_one_sequence() -> None:
    with pytest.raises(ConfigError, match="kv_capacity_tokens"):
        ScriptedServerConfig(mode="batching", kv_capacity_tokens=1024, max_model_len=2048)


def test_separate_process_server() -> None:
    with spawn_server(ttft_ms=5, itl_ms=3, model="m2") as server:
        response = httpx.post(
            f"{server.base_url}/v1/completions",
            json={"model": "m2", "prompt": "a", "max_tokens": 4, "stream": True},
            headers={"X-Request-Id": "proc-1"},
        )
        assert response.status_code == 200
        truth = server.truth("proc-1")
        assert truth is not None and truth["content_tokens"] == [1, 1, 1, 1]
        assert server.truths()[0]["request_id"] == "proc-1"
        assert "vllm:num_requests_running" in server.metrics_text()


def test_thread_server_exposes_its_object(server: ServerThread) -> None:
    assert server.call(lambda: server.server.config.itl_ms) == 2
