"""`vllm bench serve` result files, built here in the exact shape vLLM writes them
(vllm/benchmarks/serve.py: the result dict, ``--save-detailed`` lists, ``--metric-percentiles``
keys), with the aggregates computed the way vLLM computes them; sweeper must reproduce them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sweeper.errors import ImportFormatError
from sweeper.importers import import_run
from sweeper.store import load_trace_set
from tests._peers import import_and_summarize, level

PERCENTILES = (50, 90, 95, 99)
TOL_MS = 2e-6


def vllm_result(
    concurrency: int,
    *,
    requests: int = 24,
    seed: int = 0,
    detailed: bool = True,
    start_times: bool = True,
    failures: int = 1,
    overhead_s: float = 0.05,
) -> dict[str, Any]:
    """One run as `vllm bench serve --save-result [--save-detailed]` writes it."""
    rng = np.random.default_rng(seed + concurrency)
    ttfts, itls, starts, latencies, in_lens, out_lens, errors = [], [], [], [], [], [], []
    free = [100.0] * concurrency  # perf_counter seconds of each stream
    for i in range(requests):
        stream = int(np.argmin(free))
        start = free[stream] + 0.001
        if i < failures:
            ttfts.append(0.0)
            itls.append([])
            latencies.append(0.0)
            out_lens.append(0)
            errors.append("Bad Request: prompt too long")
            in_lens.append(512)
            starts.append(start)
            free[stream] = start + 0.01
            continue
        n_out = int(rng.integers(20, 40))
        ttft = float(rng.uniform(0.05, 0.2) * concurrency**0.5)
        gaps = rng.uniform(0.008, 0.012, size=n_out - 1)
        gaps[::7] *= 4  # a tail
        # one multi-token chunk (speculative decoding / buffering): one gap fewer than tokens
        chunk_gaps = [float(g) for g in gaps[:-1]]
        ttfts.append(ttft)
        itls.append(chunk_gaps)
        latency = ttft + sum(chunk_gaps)
        latencies.append(latency)
        starts.append(start)
        in_lens.append(512)
        out_lens.append(n_out)
        errors.append("")
        free[stream] = start + latency
    ok = [i for i, e in enumerate(errors) if not e]
    duration = max(free) - 100.0 + overhead_s  # the benchmark's wall time
    completed = len(ok)
    total_out = sum(out_lens[i] for i in ok)
    ttft_v = [ttfts[i] for i in ok]
    tpot_v = [(latencies[i] - ttfts[i]) / (out_lens[i] - 1) for i in ok if out_lens[i] > 1]
    itl_v = [g for i in ok for g in itls[i]]
    e2el_v = [latencies[i] for i in ok]
    result: dict[str, Any] = {
        "date": "20261129-120000",
        "endpoint_type": "openai",
        "backend": "openai",
        "label": None,
        "model_id": "Qwen/Qwen2.5-7B-Instruct",
        "tokenizer_id": "Qwen/Qwen2.5-7B-Instruct",
        "num_prompts": requests,
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": concurrency,
        "duration": duration,
        "completed": completed,
        "failed": requests - completed,
        "total_input_tokens": sum(in_lens[i] for i in ok),
        "total_output_tokens": total_out,
        "request_throughput": completed / duration,
        "request_goodput": None,
        "output_throughput": total_out / duration,
        "total_token_throughput": (total_out + sum(in_lens[i] for i in ok)) / duration,
        "input_lens": in_lens,
        "output_lens": out_lens,
        "ttfts": ttfts,
        "itls": itls,
        "latencies": latencies,
        "start_times": starts,
        "generated_texts": ["x" * n for n in out_lens],
        "errors": errors,
        "max_output_tokens_per_s": 0.0,
        "max_concurrent_requests": concurrency,
    }
    for name, values in (("ttft", ttft_v), ("tpot", tpot_v), ("itl", itl_v), ("e2el", e2el_v)):
        result[f"mean_{name}_ms"] = float(np.mean(values)) * 1000
        result[f"median_{name}_ms"] = float(np.median(values)) * 1000
        result[f"std_{name}_ms"] = float(np.std(values)) * 1000
        for p in PERCENTILES:
            result[f"p{p}_{name}_ms"] = float(np.percentile(values, p)) * 1000
    if not start_times:
        del result["start_times"], result["latencies"]  # older vLLM
    if not detailed:
        for key in (
            "input_lens",
            "output_lens",
            "start_times",
            "ttfts",
            "itls",
            "generated_texts",
            "errors",
        ):
            result.pop(key, None)
    return result


def write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(json.dumps(data))
    return path


def assert_latencies_match(ours: dict[str, Any], result: dict[str, Any]) -> None:
    for metric in ("ttft", "tpot", "itl", "e2el"):
        mine = ours[f"{metric}_ms"]
        assert mine["mean"] == pytest.approx(result[f"mean_{metric}_ms"], abs=TOL_MS)
        assert mine["p50"] == pytest.approx(result[f"median_{metric}_ms"], abs=TOL_MS)
        for p in (90, 95, 99):
            assert mine[f"p{p}"] == pytest.approx(result[f"p{p}_{metric}_ms"], abs=TOL_MS)


def test_detailed_sweep_reproduces_vllm_numbers(tmp_path: Path) -> None:
    results = {c: vllm_result(c) for c in (1, 4, 16)}
    files = [write(tmp_path / f"openai-infqps-concurrency{c}.json", r) for c, r in results.items()]
    summary = import_and_summarize("vllm-bench", files, tmp_path / "traces", "vb")
    assert summary["source"]["fidelity"] == "per_chunk"
    for c, result in results.items():
        ours = level(summary, c)
        assert_latencies_match(ours, result)
        assert ours["completed"] == result["completed"] and ours["failed"] == result["failed"]
        # Definition difference: vLLM divides by the whole benchmark's wall time (`duration`,
        # which also covers scheduling and the last usage chunk); sweeper by first send to last
        # content chunk. So sweeper's window is shorter by the overhead, its throughput higher.
        ok = [i for i, e in enumerate(result["errors"]) if not e]
        window = max(result["start_times"][i] + result["latencies"][i] for i in ok) - min(
            result["start_times"]
        )
        assert ours["duration_s"] == pytest.approx(window, abs=1e-9)
        assert ours["duration_s"] < result["duration"]
        assert ours["output_throughput_tok_s"] == pytest.approx(
            result["total_output_tokens"] / window, rel=1e-9
        )


def test_multi_token_chunk_is_one_gap(tmp_path: Path) -> None:
    result = vllm_result(2, requests=6, failures=0)
    folder = import_run("vllm-bench", [write(tmp_path / "r.json", result)], out=tmp_path / "t")
    ts = load_trace_set(folder)
    for trace, gaps, out in zip(ts.requests, result["itls"], result["output_lens"], strict=True):
        assert len(trace.chunk_ns) == len(gaps) + 1
        assert sum(trace.chunk_tokens) == out  # one chunk carried 2 tokens


def test_older_vllm_without_start_times_uses_vllm_duration(tmp_path: Path) -> None:
    result = vllm_result(8, start_times=False)
    summary = import_and_summarize(
        "vllm-bench", [write(tmp_path / "r.json", result)], tmp_path / "t", "old"
    )
    ours = level(summary, 8)
    assert summary["source"]["send_times"] == "reconstructed"
    assert ours["basis"] == "requests+tool_duration"
    assert ours["duration_s"] == pytest.approx(result["duration"])
    assert ours["output_throughput_tok_s"] == pytest.approx(result["output_throughput"], rel=1e-12)
    assert_latencies_match(ours, result)


def test_summary_only_file_keeps_vllm_numbers(tmp_path: Path) -> None:
    result = vllm_result(4, detailed=False)
    summary = import_and_summarize(
        "vllm-bench", [write(tmp_path / "r.json", result)], tmp_path / "t", "s"
    )
    ours = level(summary, 4)
    assert summary["source"]["fidelity"] == "summary"
    assert ours["basis"] == "tool_summary"
    assert ours["output_throughput_tok_s"] == result["output_throughput"]
    assert ours["duration_s"] == result["duration"]
    assert ours["completed"] == result["completed"]
    assert_latencies_match(ours, result)
    assert load_trace_set(tmp_path / "t" / "s").requests == []


def test_mixed_detailed_and_summary_files_are_refused(tmp_path: Path) -> None:
    a = write(tmp_path / "a.json", vllm_result(1))
    b = write(tmp_path / "b.json", vllm_result(2, detailed=False))
    with pytest.raises(ImportFormatError, match="save-detailed"):
        import_run("vllm-bench", [a, b], out=tmp_path / "t")
    assert not (tmp_path / "t").exists() or not any((tmp_path / "t").iterdir())


def test_run_without_max_concurrency_is_one_rate_level_all_at_once(tmp_path: Path) -> None:
    """request_rate inf and no --max-concurrency: every request released at once, none held
    back, so each was sent when it was due (open loop; it used to be refused)."""
    result = vllm_result(4)
    result["max_concurrency"] = None
    folder = import_run("vllm-bench", [write(tmp_path / "r.json", result)], out=tmp_path / "t")
    ts = load_trace_set(folder)
    assert ts.manifest.workload.load == "rate"
    assert ts.manifest.workload.request_rates == {"1": float("inf")}
    assert all(r.scheduled_ns == r.send_ns for r in ts.requests)
    assert [r.request_id for r in ts.requests][:2] == ["r1-00000", "r1-00001"]
