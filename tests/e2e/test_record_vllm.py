"""``sweeper record`` against a real vLLM (CPU build): what it stored agrees with what the server
itself counted, reported on ``/metrics`` and wrote in its log."""

from __future__ import annotations

import itertools
import re
import warnings

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sweeper.facts.serverlog import parse_server_log
from sweeper.schema import MetricSample, RequestTrace
from tests.e2e.conftest import Recorded

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def prom_values(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample of one metric in a Prometheus text exposition."""
    found = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                found.append((dict(sample.labels), float(sample.value)))
    return found


def prom_total(text: str, name: str) -> float:
    return sum(value for _, value in prom_values(text, name))


def scraped(samples: list[MetricSample], name: str) -> list[float]:
    """One value per scrape (summed over label sets) of one metric, in scrape order."""
    values = []
    for sample in samples:
        series = [s.value for s in sample.series if s.name == name]
        if series:
            values.append(sum(series))
    return values


# A request the client has sent may take a moment to reach the engine's scheduler, and one the
# engine finished a moment to end its stream: a queue is certain inside these margins only.
QUEUE_ENTRY_MARGIN_NS = 3_000_000_000
QUEUE_EXIT_MARGIN_NS = 1_000_000_000
# A scrape answered this fast shows the server's state inside its own window.
WITNESS_SCRAPE_NS = 200_000_000


def queue_windows(requests: list[RequestTrace], *, more_than: int) -> list[tuple[int, int]]:
    """When more than ``more_than`` requests were in flight (from the client's clock), shrunk by
    the margins: where a server running at most ``more_than`` at a time must have had a queue."""
    events = sorted(
        edge
        for r in requests
        if r.end_ns is not None
        for edge in ((r.send_ns, 1), (r.send_ns + r.end_ns, -1))
    )
    windows, in_flight, opened = [], 0, None
    for t_ns, step in events:
        in_flight += step
        if in_flight > more_than and opened is None:
            opened = t_ns
        elif in_flight <= more_than and opened is not None:
            start, end = opened + QUEUE_ENTRY_MARGIN_NS, t_ns - QUEUE_EXIT_MARGIN_NS
            if start < end:
                windows.append((start, end))
            opened = None
    return windows


def within(sample: MetricSample, windows: list[tuple[int, int]]) -> bool:
    """The scrape was sent and answered quickly inside one window."""
    sent = sample.t_ns - sample.duration_ns
    quick = sample.duration_ns <= WITNESS_SCRAPE_NS
    return quick and any(start <= sent and sample.t_ns <= end for start, end in windows)


# --- default configuration -------------------------------------------------------------------


def test_every_request_completed_with_the_asked_output(recorded_default: Recorded) -> None:
    trace, sweep = recorded_default.trace, recorded_default.sweep
    assert trace.manifest.status == "complete"
    assert trace.problems == []
    measured = [r for r in trace.requests if r.phase == "measured"]
    assert len(measured) == sweep.requests_per_level * len(sweep.levels)
    assert {r.concurrency for r in measured} == set(sweep.levels)
    for request in trace.requests:
        assert request.status == "ok", request.error
        assert request.completion_tokens == sweep.output_len  # ignore_eos honoured


def test_token_counts_equal_the_servers_usage(recorded_default: Recorded) -> None:
    trace = recorded_default.trace
    for request in trace.requests:
        # Per chunk counts add up to the usage the server reported for that request ...
        assert sum(request.chunk_tokens) == request.completion_tokens, request.request_id
        assert all(n >= 1 for n in request.chunk_tokens)
    # ... and the run's totals equal the server's own counters over the same time.
    before, after = recorded_default.metrics_before, recorded_default.metrics_after
    generated = prom_total(after, "vllm:generation_tokens_total") - prom_total(
        before, "vllm:generation_tokens_total"
    )
    prompted = prom_total(after, "vllm:prompt_tokens_total") - prom_total(
        before, "vllm:prompt_tokens_total"
    )
    assert generated == sum(r.completion_tokens or 0 for r in trace.requests)
    assert prompted == sum(r.prompt_tokens or 0 for r in trace.requests)
    succeeded = prom_total(after, "vllm:request_success_total") - prom_total(
        before, "vllm:request_success_total"
    )
    assert succeeded == len(trace.requests)


def test_chunk_offsets_increase(recorded_default: Recorded) -> None:
    trace = recorded_default.trace
    sends = []
    for request in trace.requests:
        offsets = request.chunk_ns
        assert offsets, request.request_id
        assert offsets[0] > 0
        # Never backwards. Chunks that arrive in one socket read share their arrival time, and the
        # tiny model outruns vLLM's API server on 2 cores: a whole answer can come in one burst.
        assert all(b >= a for a, b in itertools.pairwise(offsets)), request.request_id
        assert request.end_ns is not None and request.end_ns >= offsets[-1]
        sends.append(request.send_ns)
    assert all(s >= 0 for s in sends)
    # Within one stream requests follow each other: at C=1 each send is after the previous end.
    single = sorted((r for r in trace.requests if r.concurrency == 1), key=lambda r: r.send_ns)
    for prev, nxt in itertools.pairwise(single):
        assert prev.end_ns is not None
        assert nxt.send_ns >= prev.send_ns + prev.end_ns


def test_kv_capacity_in_the_manifest_is_the_servers(recorded_default: Recorded) -> None:
    config = recorded_default.trace.manifest.server.config
    info = prom_values(recorded_default.metrics_after, "vllm:cache_config_info")
    assert len(info) == 1
    labels = info[0][0]
    assert config.kv_cache_tokens is not None
    assert config.kv_cache_tokens.value == int(labels["kv_cache_size_tokens"])
    assert config.block_size is not None
    assert config.block_size.value == int(labels["block_size"])
    # The log says the same thing in its own words.
    logged = re.search(r"CPU KV cache size: ([\d,]+) tokens", recorded_default.log_text)
    assert logged is not None
    assert config.kv_cache_tokens.value == int(logged.group(1).replace(",", ""))


def test_server_facts_have_sources(recorded_default: Recorded) -> None:
    manifest = recorded_default.trace.manifest
    assert manifest.server.engine == "vllm"
    version = recorded_default.trace.manifest.server.version
    assert version is not None
    assert version.value == "0.32.0"
    config = manifest.server.config
    assert config.max_model_len is not None and config.max_model_len.value == 2048
    # Facts only the log has came from it (the copy stored in the trace set).
    assert recorded_default.trace.server_log is not None
    assert config.dtype is not None and config.dtype.value == "float32"
    assert config.enable_chunked_prefill is not None
    assert config.enable_chunked_prefill.value is True
    for name, fact in config:
        if fact is not None and name != "extra":
            assert fact.source in {"endpoint", "metrics", "log", "user"}, name
    # The recorder's log parse matches a direct one.
    direct = parse_server_log(recorded_default.trace.server_log)
    assert direct.version == "0.32.0"
    assert manifest.workload.input_len == recorded_default.sweep.input_len
    assert manifest.workload.output_len == recorded_default.sweep.output_len


def test_metrics_were_scraped_all_along(recorded_default: Recorded) -> None:
    trace = recorded_default.trace
    samples = [s for s in trace.metrics if s.error is None]
    assert len(samples) >= 4
    first_send = min(r.send_ns for r in trace.requests)
    last_end = max(r.send_ns + (r.end_ns or 0) for r in trace.requests)
    assert samples[0].t_ns <= first_send
    assert samples[-1].t_ns >= last_end
    ts = [s.t_ns for s in samples]
    assert ts == sorted(ts)
    names = {series.name for s in samples for series in s.series}
    for wanted in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions_total",
        "vllm:generation_tokens_total",
        "vllm:inter_token_latency_seconds_bucket",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:request_queue_time_seconds_bucket",
    ):
        assert wanted in names, wanted
    # Every level long enough to hold a few scrape intervals was scraped while it ran, and the
    # server's token counter moved between scrapes (gauges are instantaneous and a short level
    # can fall between two scrapes; counters cannot).
    interval_ns = recorded_default.sweep.scrape_interval_s * 1e9
    for level in trace.manifest.levels:
        assert level.start_ns is not None and level.end_ns is not None
        if level.end_ns - level.start_ns < 3 * interval_ns:
            continue
        # A scrape shows the server at some moment between its request and its answer, which a
        # busy API server can give seconds late: it saw the level if the two overlap.
        inside = [
            s
            for s in samples
            if s.t_ns - (s.duration_ns or 0) <= level.end_ns and s.t_ns >= level.start_ns
        ]
        if not inside:
            lag = [(lag.concurrency, lag.max_ms) for lag in trace.manifest.client.loop_lag]
            around = [
                (round(s.t_ns / 1e9, 2), round((s.duration_ns or 0) / 1e9, 3), s.error)
                for s in trace.metrics
                if level.start_ns - 5 * interval_ns <= s.t_ns <= level.end_ns + 5 * interval_ns
            ]
            raise AssertionError(
                f"no scrape during C={level.concurrency} "
                f"({level.start_ns / 1e9:.2f}-{level.end_ns / 1e9:.2f} s); "
                f"recorder loop lag max (level, ms) {lag}; scrapes around it "
                f"(answered s, took s, error): {around}"
            )
    generated = scraped(samples, "vllm:generation_tokens_total")
    assert generated == sorted(generated)
    assert (
        len(set(generated)) >= 3
    )  # rose at least twice: scraped during the run, not only around it
    running = scraped(samples, "vllm:num_requests_running")
    assert max(running) <= max(recorded_default.sweep.levels)
    # The scraped counter ends where the server's own /metrics said it ended.
    assert generated[-1] == prom_total(
        recorded_default.metrics_after, "vllm:generation_tokens_total"
    )


# --- forced pressure: a KV pool too small for the streams -----------------------------------


def test_small_kv_pool_preempts_and_queues(recorded_preemption: Recorded) -> None:
    trace = recorded_preemption.trace
    assert trace.manifest.status == "complete"
    assert all(r.status == "ok" for r in trace.requests)
    config = trace.manifest.server.config
    # 16 blocks of 128 tokens: what the override asked for, as the server reports it.
    assert config.num_gpu_blocks is not None and config.num_gpu_blocks.value == 16
    assert config.kv_cache_tokens is not None and config.kv_cache_tokens.value == 16 * 128
    samples = [s for s in trace.metrics if s.error is None]
    preemptions = scraped(samples, "vllm:num_preemptions_total")
    assert preemptions[-1] - preemptions[0] > 0
    # The server's own account that requests queued: time in its waiting queue, per request.
    before, after = recorded_preemption.metrics_before, recorded_preemption.metrics_after
    queued_s = prom_total(after, "vllm:request_queue_time_seconds_sum") - prom_total(
        before, "vllm:request_queue_time_seconds_sum"
    )
    assert queued_s > 1.0
    # ... and every scrape answered while the server had to hold a queue saw it: more requests
    # in flight than --max-num-seqs 4 lets run means some wait.
    waiting = "vllm:num_requests_waiting"
    windows = queue_windows(trace.requests, more_than=4)
    witnesses = [s for s in samples if within(s, windows)]
    timeline = [
        (round(s.t_ns / 1e9, 2), round(s.duration_ns / 1e9, 2), s.error or scraped([s], waiting))
        for s in trace.metrics
    ]
    loop_lag = [(level.concurrency, level.max_ms) for level in trace.manifest.client.loop_lag]
    why = (
        f"queue windows (s) {[(round(a / 1e9, 1), round(b / 1e9, 1)) for a, b in windows]}, "
        f"recorder loop lag max (level, ms) {loop_lag}, (t s, scrape s, [waiting] or error): {timeline}"
    )
    assert windows, why
    assert all(scraped([s], waiting)[0] >= 1 for s in witnesses), why
    assert max(scraped(samples, "vllm:num_requests_running")) <= 4  # --max-num-seqs 4 caps it
    if witnesses:
        # A full batch was seen, and the pool well filled (one block is held back by the
        # scheduler and a scrape every 0.5 s can miss the peak: not necessarily full).
        assert max(scraped(witnesses, "vllm:num_requests_running")) >= 2, why
        assert max(scraped(witnesses, "vllm:kv_cache_usage_perc")) >= 0.5, why
    else:  # the server answered no scrape while the queue lasted: its gauges had nothing to show
        warnings.warn(f"no scrape answered while the queue lasted: {why}", stacklevel=1)
    # The server's own periodic log lines, as parsed into the trace set's facts, agree.
    assert trace.server_log is not None
    log = parse_server_log(trace.server_log)
    assert log.stats, "vLLM logs Running / Waiting / KV usage every 10 s while busy"
    assert max(stat.running for stat in log.stats) <= 4
    assert all(0.0 <= stat.kv_usage <= 1.0 for stat in log.stats)
    # The per-request histogram agrees: some requests were preempted at least once.
    assert prom_total(after, "vllm:request_num_preemptions_sum") > 0
