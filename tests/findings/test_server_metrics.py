"""server_level_frame: scraped Prometheus samples cut into each level's window and reduced."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from sweeper.analysis.server_frames import SERVER_COLUMNS, server_level_frame
from sweeper.schema import LevelStatus, MetricSample, Series
from sweeper.store import load_trace_set, write_trace_set
from sweeper.testing.factories import SyntheticLevel, synthetic_manifest, synthetic_requests

URL = "http://127.0.0.1:8000/metrics"


def _sample(t_s: float, **values: float) -> MetricSample:
    series = []
    for name, value in values.items():
        metric = name.replace("__", ":")
        # Two engines (data parallel): counters and gauges are summed, KV usage averaged.
        for engine in ("0", "1"):
            series.append(
                Series(name=metric, labels={"engine": engine, "model_name": "m"}, value=value / 2)
            )
    return MetricSample(t_ns=round(t_s * 1e9), url=URL, series=series)


def _run(tmp_path: Path, samples: list[MetricSample], *, windows: bool = True) -> Path:
    levels = [
        SyntheticLevel(concurrency=1, ttft_ms=10, itl_ms=5, requests=4),
        SyntheticLevel(concurrency=4, ttft_ms=20, itl_ms=8, requests=8),
    ]
    manifest = synthetic_manifest("sm", levels, input_len=100, output_len=32)
    if windows:
        manifest.levels = [
            LevelStatus(concurrency=1, status="complete", start_ns=0, end_ns=10 * 10**9),
            LevelStatus(concurrency=4, status="complete", start_ns=10 * 10**9, end_ns=20 * 10**9),
        ]
    requests = synthetic_requests(levels, input_len=100, output_len=32)
    return write_trace_set(tmp_path / "sm", manifest, requests, samples)


def test_gauges_counters_and_histograms_per_level(tmp_path: Path) -> None:
    samples = []
    for t in range(0, 21):
        busy = t > 10
        samples.append(
            _sample(
                t,
                vllm__num_requests_running=4.0 if busy else 1.0,
                vllm__num_requests_waiting=float(t - 10) if busy else 0.0,
                vllm__num_preemptions_total=float(max(0, t - 15) * 2),
                vllm__prompt_tokens_total=100.0 * t,
                vllm__generation_tokens_total=30.0 * t,
                vllm__prefix_cache_queries_total=100.0 * t,
                vllm__prefix_cache_hits_total=25.0 * t,
                vllm__request_queue_time_seconds_sum=0.5 * t,
                vllm__request_queue_time_seconds_count=1.0 * t,
                vllm__iteration_tokens_total_sum=(8.0 if busy else 2.0) * t,
                vllm__iteration_tokens_total_count=1.0 * t,
            )
        )
    # KV usage: a fraction per engine, averaged across engines (0.2 and 0.6 -> 0.4).
    for s in samples:
        s.series.append(Series(name="vllm:kv_cache_usage_perc", labels={"engine": "0"}, value=0.2))
        s.series.append(Series(name="vllm:kv_cache_usage_perc", labels={"engine": "1"}, value=0.6))
    frame = server_level_frame(load_trace_set(_run(tmp_path, samples)))
    assert list(frame.columns) == SERVER_COLUMNS
    one, four = frame.iloc[0], frame.iloc[1]
    assert one["scrapes"] == 11 and one["gauge_source"] == "metrics"
    assert one["running_max"] == 1 and four["running_max"] == 4
    assert four["waiting_max"] == 10 and four["waiting_mean"] == pytest.approx(5.5, abs=0.6)
    assert four["kv_usage_max"] == pytest.approx(0.4)
    assert one["preemptions_delta"] == 0
    # Counter from the scrape at the window start (10 s: 0) to the first one after its end (20 s: 10).
    assert four["preemptions_delta"] == 10
    assert one["prompt_tokens_delta"] == pytest.approx(
        1000
    )  # 0 s .. 10 s, then the 11 s scrape is the next level's
    assert four["prefix_cache_hit_rate"] == pytest.approx(0.25)
    assert four["queue_time_mean_ms"] == pytest.approx(500)
    assert math.isnan(four["prefill_time_mean_ms"])  # never scraped: NaN, not 0


def test_no_scrapes_gives_nan_not_zero(tmp_path: Path) -> None:
    frame = server_level_frame(load_trace_set(_run(tmp_path, [])))
    assert len(frame) == 2
    assert frame["scrapes"].tolist() == [0, 0]
    assert frame["preemptions_delta"].isna().all() and frame["kv_usage_max"].isna().all()
    assert frame["gauge_source"].isna().all()


def test_windows_from_requests_when_the_manifest_has_none(tmp_path: Path) -> None:
    ts = load_trace_set(_run(tmp_path, [], windows=False))
    frame = server_level_frame(ts)
    sends = sorted(r.send_ns for r in ts.requests if r.concurrency == 4)
    assert frame.iloc[1]["window_start_s"] == pytest.approx(sends[0] / 1e9)
    assert frame.iloc[0]["window_end_s"] < frame.iloc[1]["window_start_s"]


def test_old_vllm_names_and_counter_reset(tmp_path: Path) -> None:
    samples = [
        _sample(0, vllm__gpu_cache_usage_perc=0.3, vllm__num_preemptions_total=5.0),
        _sample(5, vllm__gpu_cache_usage_perc=0.9, vllm__num_preemptions_total=7.0),
        _sample(12, vllm__gpu_cache_usage_perc=0.5, vllm__num_preemptions_total=1.0),  # restarted
        _sample(19, vllm__gpu_cache_usage_perc=0.5, vllm__num_preemptions_total=2.0),
    ]
    frame = server_level_frame(load_trace_set(_run(tmp_path, samples)))
    assert frame.iloc[0]["kv_usage_max"] == pytest.approx(
        0.9 / 2
    )  # summed per name, averaged per engine
    assert frame.iloc[0]["preemptions_delta"] == 2
    assert math.isnan(frame.iloc[1]["preemptions_delta"])  # 7 -> 2: a reset, not a negative count


def test_log_lines_stand_in_when_nothing_was_scraped(tmp_path: Path) -> None:
    folder = _run(tmp_path, [])
    # The run's origin is 2025-11-29 12:00:00 UTC (the factory's clock); the log is in UTC+8.
    lines = []
    for t, running, waiting, kv in [(3, 1, 0, 1.5), (13, 4, 2, 6.0), (17, 4, 5, 9.5)]:
        stamp = f"11-29 20:00:{t:02d}"
        lines.append(
            f"(APIServer pid=1) INFO {stamp} [loggers.py:271] Engine 000: Avg prompt throughput: 10.0 tokens/s, "
            f"Avg generation throughput: 50.0 tokens/s, Running: {running} reqs, Waiting: {waiting} reqs, "
            f"GPU KV cache usage: {kv}%, Prefix cache hit rate: 0.0%"
        )
    (folder / "server.log").write_text("\n".join(lines) + "\n")
    frame = server_level_frame(load_trace_set(folder))
    assert frame["gauge_source"].tolist() == ["log", "log"]
    assert frame.iloc[0]["running_max"] == 1
    assert frame.iloc[1]["waiting_max"] == 5
    assert frame.iloc[1]["kv_usage_max"] == pytest.approx(0.095)
    assert math.isnan(frame.iloc[1]["preemptions_delta"])


def _overlapping_run(tmp_path: Path, samples: list[MetricSample]) -> Path:
    levels = [
        SyntheticLevel(concurrency=1, ttft_ms=10, itl_ms=5, requests=4),
        SyntheticLevel(concurrency=4, ttft_ms=20, itl_ms=8, requests=8),
    ]
    manifest = synthetic_manifest("ov", levels, input_len=100, output_len=32)
    # Both levels ran at the same time (an imported sweep run on two servers in parallel).
    manifest.levels = [
        LevelStatus(concurrency=1, status="complete", start_ns=0, end_ns=10 * 10**9),
        LevelStatus(concurrency=4, status="complete", start_ns=1 * 10**9, end_ns=11 * 10**9),
    ]
    return write_trace_set(tmp_path / "ov", manifest, synthetic_requests(levels), samples)


def _at(url: str, t_s: float, preemptions: float) -> MetricSample:
    return MetricSample(
        t_ns=round(t_s * 1e9),
        url=url,
        series=[Series(name="vllm:num_preemptions_total", labels={}, value=preemptions)],
    )


def test_overlapping_levels_on_their_own_servers_read_their_own_url(tmp_path: Path) -> None:
    a, b = "http://a:8000/metrics", "http://b:8000/metrics"
    samples = [_at(a, 0, 0), _at(a, 10, 3), _at(b, 1, 100), _at(b, 11, 107)]
    frame = server_level_frame(load_trace_set(_overlapping_run(tmp_path, samples)))
    assert frame["preemptions_delta"].tolist() == [3, 7]
    assert not frame["window_overlap"].any()


def test_overlapping_levels_on_one_server_get_no_server_numbers(tmp_path: Path) -> None:
    a = "http://a:8000/metrics"
    samples = [_at(a, 0, 0), _at(a, 1, 1), _at(a, 10, 3), _at(a, 11, 7)]
    frame = server_level_frame(load_trace_set(_overlapping_run(tmp_path, samples)))
    assert frame["window_overlap"].all()
    assert frame["preemptions_delta"].isna().all()
