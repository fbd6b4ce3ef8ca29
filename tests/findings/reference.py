"""The reference report (shared/reference/concurrency-sweep-report.md) as findings inputs.

Every number here is one the report states, except the two marked ESTIMATE (the report's table
survived only as images): throughput at C=4 and C=8, and latencies the report does not give,
chosen consistent with its text (e.g. C=8 from 8 x 256 tokens / (TTFT + 255 x 17.5 ms)).
"""

from __future__ import annotations

from datetime import UTC, datetime

import pandas as pd

from sweeper.facts.hardware import gpu_facts, model_facts
from sweeper.findings import RunFrames
from sweeper.schema import Fact, RunManifest, Server, ServerConfig, Source, Workload
from sweeper.version import __version__

GIB = 1 << 30
LEVELS = [1, 2, 4, 8, 16, 32, 64]
SINGLE = 61.48  # "理想线性(61.5 × C)", "效率 = 吞吐 ÷ (C × 61.48)"
THROUGHPUT = {
    1: SINGLE,
    2: SINGLE + 56.6,  # "第一个并发槽带来 56.6 tok/s"
    4: 236.0,  # ESTIMATE
    8: 450.0,  # ESTIMATE
    16: 683.0,  # "C = 16 · 683 tok/s"
    32: 683.0 * 1.51,  # "C=32 多拿 51% 吞吐"
    64: 22.8 * SINGLE,  # "C=64 吞吐增益 22.8 ×"
}
ITL_P50 = {
    1: 15.9,
    2: 16.0,
    4: 16.2,
    8: 16.6,
    16: 17.4,
    32: 19.5,
    64: 22.7,
}  # 15.9 / 17.4 / 22.7 given
ITL_P90 = {1: 16.3, 2: 16.5, 4: 16.9, 8: 18.0, 16: 60.0, 32: 150.0, 64: 188.0}  # 188 at C=64 given
ITL_P99 = {
    1: 16.6,
    2: 17.0,
    4: 17.4,
    8: 99.6,
    16: 17.4 * 10.3,
    32: 190.0,
    64: 210.0,
}  # 17.4 / 99.6 / 10.3x given
TTFT_P99 = {
    1: 110.0,
    2: 130.0,
    4: 300.0,
    8: 700.0,
    16: 1390.0,
    32: 2850.0,
    64: 5750.0,
}  # 1, 16, 32, 64 given
# TPOT: 4.06 s / 255 tokens at C=1 and 10.92 s / 255 at C=64 ("解码段从 4.06 秒涨到 10.92 秒");
# between them ESTIMATE, each consistent with its level's throughput (E2EL = C x 256 / throughput).
TPOT_MS = {1: 4060 / 255, 2: 16.2, 4: 16.4, 8: 17.2, 16: 22.4, 32: 29.6, 64: 10920 / 255}
KV_USAGE_MAX = {
    1: 0.015,
    2: 0.03,
    4: 0.06,
    8: 0.12,
    16: 0.235,
    32: 0.47,
    64: 0.92,
}  # 92.0% at C=64 given
WAITING_MAX = {1: 0, 2: 0, 4: 0, 8: 0, 16: 1, 32: 2, 64: 3}  # "Waiting 队列最长只有 3 条"


def reference_levels() -> pd.DataFrame:
    rows = []
    for c in LEVELS:
        itl_p50 = ITL_P50[c]
        tpot = TPOT_MS[c]
        e2el = c * 256 / THROUGHPUT[c] * 1e3  # a closed loop: C requests of 256 tokens per E2EL
        ttft_p50 = e2el - 255 * tpot
        rows.append(
            {
                "concurrency": c,
                "requests": {1: 20, 2: 40, 4: 80, 8: 96, 16: 160, 32: 320, 64: 616}[
                    c
                ],  # 1,332 in all
                "completed": {1: 20, 2: 40, 4: 80, 8: 96, 16: 160, 32: 320, 64: 616}[c],
                "failed": 0,
                "output_throughput_tok_s": THROUGHPUT[c],
                "output_throughput_per_gpu_tok_s": THROUGHPUT[c],
                "ttft_mean_ms": ttft_p50,
                "ttft_p50_ms": ttft_p50,
                "ttft_p99_ms": TTFT_P99[c],
                "itl_p50_ms": itl_p50,
                "itl_p90_ms": ITL_P90[c],
                "itl_p99_ms": ITL_P99[c],
                "itl_mean_ms": tpot,
                "tpot_p99_ms": tpot * 1.5,
                "tpot_p50_ms": tpot,
                "tpot_mean_ms": tpot,
                "e2el_p50_ms": e2el,
                "e2el_mean_ms": e2el,
                "gen_mean_tok_s": 256 / (e2el / 1e3),
                "decode_mean_tok_s": 255 / (255 * tpot / 1e3),
                "prompt_tokens_mean": 1024.0,
                "output_tokens_mean": 256.0,
            }
        )
    return pd.DataFrame(rows)


def reference_server() -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "concurrency": c,
                "scrapes": 10,
                "gauge_source": "metrics",
                "preemptions_delta": 0.0,  # "preempt 出现 0 次"
                "waiting_max": float(WAITING_MAX[c]),
                "running_max": float(c),
                "kv_usage_max": KV_USAGE_MAX[c],
            }
            for c in LEVELS
        ]
    )


def reference_manifest() -> RunManifest:
    def log(value: float | int | bool) -> Fact:
        return Fact(value=value, source="log")

    config = ServerConfig(
        max_num_seqs=Fact(value=128, source="user"),  # "--max-num-seqs 128"
        enable_chunked_prefill=log(True),  # "enable_chunked_prefill=True(日志确认)"
        kv_cache_tokens=log(86_896),  # "GPU KV cache size: 86,896 tokens"
        kv_cache_memory_bytes=log(int(4.64 * GIB)),  # "Available KV cache memory: 4.64 GiB"
        gpu_memory_utilization=log(0.90),
        weights_memory_bytes=log(int(15.49 * GIB)),  # "权重 + non-torch 15.49 GiB"
        activation_peak_bytes=log(int(1.04 * GIB)),
        cuda_graph_memory_bytes=log(int(0.34 * GIB)),
        memory_budget_bytes=log(int(21.17 * GIB)),
        total_memory_bytes=log(int(23.52 * GIB)),
        suggested_kv_cache_memory_bytes=log(6_569_114_112),  # "--kv-cache-memory=6569114112"
        dtype=log("bfloat16"),
    )
    return RunManifest(
        run_id="reference-4090-qwen25-7b",
        started_at=datetime(2026, 1, 1, tzinfo=UTC),
        status="complete",
        sweeper_version=__version__,
        source=Source(tool="reference report"),
        server=Server(engine="vllm", version=Fact(value="0.27.1", source="user"), config=config),
        hardware=gpu_facts("NVIDIA GeForce RTX 4090", 1),
        model=model_facts("Qwen/Qwen2.5-7B-Instruct", dtype="bfloat16"),
        workload=Workload(input_len=1024, output_len=256, concurrency_levels=LEVELS),
    )


def reference_frames() -> RunFrames:
    return RunFrames(reference_manifest(), reference_levels(), reference_server())
