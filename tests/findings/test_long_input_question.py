"""The long-input question (shared/reference/long-input-bottleneck-question.md) as findings input:
Qwen 32B, TP2 on H800, 63K tokens in / 1K out; per-request generation speed 40 tok/s alone, 22 at
C=40, 20 at C=100; 440 and 1,000 tok/s per GPU. Why does per-request speed halve at C=40 when
the server is not full, and why does C=100 not make it slower still?

The user gives speeds and throughputs; the split of each request's time (queue, prefill, decode)
is what a scrape of vLLM's histograms would add. It is ESTIMATED here, consistent with the
user's numbers (E2EL = 1,024 tokens / speed)."""

from __future__ import annotations

from datetime import UTC, datetime

import pandas as pd
import pytest

from sweeper.facts.hardware import gpu_facts, model_facts
from sweeper.findings import RunFrames, analyze, finding
from sweeper.schema import Fact, RunManifest, Server, ServerConfig, Source, Workload
from sweeper.version import __version__

LEVELS = [1, 40, 100]
SPEED = {1: 40.0, 40: 22.0, 100: 20.0}  # "平均生成速率"
QUEUE_S = {1: 0.0, 40: 0.5, 100: 4.0}  # ESTIMATE
PREFILL_S = {1: 3.0, 40: 8.0, 100: 8.84}  # ESTIMATE
ITL_P50_MS = {1: 22.0, 40: 30.0, 100: 32.0}  # ESTIMATE
OUT = 1024


def question_run() -> RunFrames:
    rows, server = [], []
    for c in LEVELS:
        e2el_s = OUT / SPEED[c]
        ttft_s = QUEUE_S[c] + PREFILL_S[c]
        tpot_ms = (e2el_s - ttft_s) / (OUT - 1) * 1e3
        rows.append(
            {
                "concurrency": c,
                "output_throughput_tok_s": c * SPEED[c],
                "output_throughput_per_gpu_tok_s": c * SPEED[c] / 2,  # "吞吐是1000token/卡/s"
                "gen_mean_tok_s": SPEED[c],
                "e2el_mean_ms": e2el_s * 1e3,
                "ttft_mean_ms": ttft_s * 1e3,
                "ttft_p99_ms": ttft_s * 1.5e3,
                "tpot_mean_ms": tpot_ms,
                "itl_p50_ms": ITL_P50_MS[c],
                "itl_p99_ms": ITL_P50_MS[c] * (1.2 if c == 1 else 12),
                "prompt_tokens_mean": 63_000.0,
                "output_tokens_mean": float(OUT),
            }
        )
        server.append(
            {
                "concurrency": c,
                "scrapes": 20,
                "preemptions_delta": 0.0,
                "queue_time_mean_ms": QUEUE_S[c] * 1e3,
                "prefill_time_mean_ms": PREFILL_S[c] * 1e3,
            }
        )
    manifest = RunManifest(
        run_id="long-input-question",
        started_at=datetime(2025, 6, 1, tzinfo=UTC),
        sweeper_version=__version__,
        source=Source(tool="reference question"),
        server=Server(
            engine="vllm",
            config=ServerConfig(
                tensor_parallel_size=Fact(value=2, source="user"),
                enable_chunked_prefill=Fact(value=True, source="user"),
            ),
        ),
        hardware=gpu_facts("H800", 2),
        model=model_facts("Qwen2.5-32B"),
        workload=Workload(input_len=63_000, output_len=OUT, concurrency_levels=LEVELS),
    )
    return RunFrames(manifest, pd.DataFrame(rows), pd.DataFrame(server))


def test_the_long_input_question_is_answered() -> None:
    found = analyze(question_run())
    f = finding(found, "long_input")
    n = f.numbers
    assert n["concurrency"] == 100
    assert n["speed_drop"] == pytest.approx(0.5)
    assert n["per_gpu_tok_s"] == {"1": 20.0, "40": 440.0, "100": 1000.0}
    assert n["long_input"] is True
    assert n["attribution_source"] == "server"
    # The added 25.6 s per request: other requests' prefills first, then slower steps, then queueing.
    assert n["added_s"] == pytest.approx(25.6, abs=0.01)
    assert n["dominant"] == "prefill_interference"
    parts = n["attribution"]
    assert parts["queueing"] == pytest.approx(4.0, abs=0.01)
    assert parts["prefill_interference"] > parts["decode_slowdown"] > parts["queueing"]
    en, zh = f.text["en"], f.text["zh"]
    assert "from 40 tok/s at C=1 to 20 tok/s at C=100" in en
    # Q5 of the thread: C=40 to C=100 barely changes per-request speed while throughput grows.
    assert "From C=40 to C=100 per-request speed barely changes" in en
    assert "at C=40 the server was not saturated" in en
    assert "--max-num-batched-tokens" in en
    assert "C=40 时服务端并没有打满" in zh and "prefill 干扰" in zh
    assert f.severity == "notice"
    assert finding(found, "tail_cause").numbers["cause"] == "chunked_prefill"
