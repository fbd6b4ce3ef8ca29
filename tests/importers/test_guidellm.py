"""GuideLLM ``benchmarks.json``, built here in the shape GuideLLM's report schema dumps
(GenerativeBenchmarksReport -> benchmarks[].config.strategy, requests.successful[] of
GenerativeRequestStats with info.timings and its computed fields), with GuideLLM's own metrics
computed by GuideLLM's formulas; sweeper must agree where the definitions are the same."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sweeper.errors import ImportFormatError
from sweeper.importers import import_run
from tests._peers import import_and_summarize, level

T0 = 1_764_417_600.0  # Unix seconds
TOL_MS = 1e-3  # GuideLLM keeps float seconds since 1970: ~0.2 us of resolution


def distribution(values: list[float]) -> dict[str, Any]:
    arr = np.asarray(values)
    return {
        "mean": float(arr.mean()),
        "median": float(np.median(arr)),
        "count": len(values),
        "percentiles": {f"p{p}": float(np.percentile(arr, p)) for p in (50, 90, 95, 99)},
    }


def request_stats(
    index: int,
    start: float,
    ttft: float,
    gaps: int,
    gap: float,
    out: int,
    targeted: float | None = None,
) -> dict[str, Any]:
    first = start + ttft
    last = first + gaps * gap
    return {
        "type_": "generative_request_stats",
        "request_id": f"req-{index}",
        "request_args": None,
        "output": "x" * out,
        "info": {
            "request_id": f"req-{index}",
            "status": "completed",
            "scheduler_node_id": 0,
            "scheduler_process_id": 0,
            "scheduler_start_time": T0,
            "timings": {
                "targeted_start": start if targeted is None else targeted,
                "queued": start - 0.001,
                "dequeued": start - 0.0005,
                "resolve_start": start,
                "request_start": start,
                "first_request_iteration": start + 0.001,
                "first_token_iteration": first,
                "last_token_iteration": last,
                "request_iterations": gaps + 1,
                "token_iterations": gaps + 1,
                "request_end": last + 0.002,
                "resolve_end": last + 0.003,
                "finalized": last + 0.004,
            },
            "error": None,
        },
        "input_metrics": {"text_tokens": 256, "total_tokens": 256},
        "output_metrics": {"text_tokens": out, "total_tokens": out},
        "request_start_time": start,
        "request_end_time": last + 0.002,
        "request_latency": last + 0.002 - start,
        "prompt_tokens": 256,
        "output_tokens": out,
        "total_tokens": 256 + out,
        "time_to_first_token_ms": 1000 * ttft,
        "time_per_output_token_ms": 1000 * (last - start) / out,
        "inter_token_latency_ms": 1000 * (last - first) / (out - 1),
    }


def benchmark(strategy: dict[str, Any], streams: int, start: float, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    requests = []
    free = [start] * streams
    for i in range(5 * streams):
        stream = int(np.argmin(free))
        ttft = float(rng.uniform(0.05, 0.3))
        out = int(rng.integers(16, 64))
        stats = request_stats(i, free[stream], ttft, out - 1, float(rng.uniform(0.01, 0.02)), out)
        requests.append(stats)
        free[stream] = stats["info"]["timings"]["request_end"]
    return {
        "type_": "generative_benchmark",
        "config": {
            "id_": f"bench-{seed}",
            "run_id": "run-1",
            "run_index": seed,
            "strategy": strategy,
            "constraints": {},
            "profile": {"type_": "concurrent"},
            "requests": {},
            "backend": {"model": "Qwen/Qwen2.5-7B-Instruct"},
            "environment": {},
        },
        "scheduler_metrics": {"measure_start_time": start, "measure_end_time": max(free)},
        "duration": max(free) - start,
        "metrics": {
            "time_to_first_token_ms": {
                "successful": distribution([r["time_to_first_token_ms"] for r in requests])
            },
            "inter_token_latency_ms": {
                "successful": distribution([r["inter_token_latency_ms"] for r in requests])
            },
            "time_per_output_token_ms": {
                "successful": distribution([r["time_per_output_token_ms"] for r in requests])
            },
        },
        "requests": {"successful": requests, "errored": [], "incomplete": [], "total": None},
    }


def report(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    data = {
        "metadata": {
            "version": 1,
            "guidellm_version": "0.7.1",
            "python_version": "3.12.3",
            "platform": "Linux",
        },
        "args": {"model": "Qwen/Qwen2.5-7B-Instruct"},
        "benchmarks": [
            benchmark({"type_": "synchronous"}, 1, T0, 1),
            benchmark({"type_": "concurrent", "streams": 4}, 4, T0 + 100, 2),
            benchmark({"type_": "constant", "rate": 2.0}, 2, T0 + 200, 3),
        ],
    }
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(data))
    return path, data


def test_guidellm_report_imports_per_request_and_agrees(tmp_path: Path) -> None:
    path, data = report(tmp_path)
    summary = import_and_summarize(
        "guidellm", [path], tmp_path / "t", "gl", "--load", "concurrency"
    )
    assert summary["source"] == {
        "tool": "guidellm",
        "version": "0.7.1",
        "fidelity": "per_request",
        "send_times": "measured",
    }
    assert [lv["concurrency"] for lv in summary["levels"]] == [1, 4]  # constant rate left out
    for concurrency, bench in ((1, data["benchmarks"][0]), (4, data["benchmarks"][1])):
        ours = level(summary, concurrency)
        theirs = bench["metrics"]
        ttft = theirs["time_to_first_token_ms"]["successful"]
        # GuideLLM's inter_token_latency_ms is sweeper's TPOT
        tpot = theirs["inter_token_latency_ms"]["successful"]
        assert ours["ttft_ms"]["mean"] == pytest.approx(ttft["mean"], abs=TOL_MS)
        assert ours["ttft_ms"]["p50"] == pytest.approx(ttft["median"], abs=TOL_MS)
        assert ours["ttft_ms"]["p99"] == pytest.approx(ttft["percentiles"]["p99"], abs=TOL_MS)
        assert ours["tpot_ms"]["mean"] == pytest.approx(tpot["mean"], abs=TOL_MS)
        assert ours["tpot_ms"]["p50"] == pytest.approx(tpot["percentiles"]["p50"], abs=TOL_MS)
        # E2EL ends at the last token, not at request_end as GuideLLM's request_latency does
        e2el = [
            1000
            * (r["info"]["timings"]["last_token_iteration"] - r["info"]["timings"]["request_start"])
            for r in bench["requests"]["successful"]
        ]
        assert ours["e2el_ms"]["mean"] == pytest.approx(float(np.mean(e2el)), abs=TOL_MS)
        assert ours["itl_available"] is False
        assert ours["completed"] == len(bench["requests"]["successful"])


def test_guidellm_missing_timing_names_the_request(tmp_path: Path) -> None:
    path, data = report(tmp_path)
    del data["benchmarks"][2]["requests"]["successful"][3]["info"]["timings"]["request_start"]
    path.write_text(json.dumps(data))
    with pytest.raises(ImportFormatError) as info:
        import_run("guidellm", [path], out=tmp_path / "t")  # the constant rate: imported
    message = str(info.value)
    assert "benchmarks.json" in message
    assert "benchmarks[2].requests.successful[3]" in message
    assert "request_start" in message


def test_older_guidellm_layout_with_flat_times(tmp_path: Path) -> None:
    """GuideLLM before 0.4: ``args.strategy`` and the times on the request itself
    (start_time, first_token_time, last_token_time, end_time)."""
    path, data = report(tmp_path)
    bench = data["benchmarks"][1]
    bench["args"] = bench.pop("config")
    for item in bench["requests"]["successful"]:
        timings = item.pop("info")["timings"]
        item["start_time"] = timings["request_start"]
        item["first_token_time"] = timings["first_token_iteration"]
        item["last_token_time"] = timings["last_token_iteration"]
        item["end_time"] = timings["request_end"]
    data["benchmarks"] = [bench]
    del data["metadata"]
    path.write_text(json.dumps(data))
    summary = import_and_summarize("guidellm", [path], tmp_path / "t", "old")
    ttft = bench["metrics"]["time_to_first_token_ms"]["successful"]
    assert level(summary, 4)["ttft_ms"]["mean"] == pytest.approx(ttft["mean"], abs=TOL_MS)
    assert summary["source"]["version"] is None
