"""A server streaming every N tokens (vLLM --stream-interval N) sends ~N tokens a chunk: its
inter-chunk latency is N tokens' worth. The service levels, the operating point and the ITL tail
judge ITL per token; the page's tables keep the gap between chunks, named as such."""

from __future__ import annotations

from pathlib import Path

from sweeper.findings import analyze_run, finding
from sweeper.schema import Fact, RequestTrace
from sweeper.store import load_trace_set, write_trace_set
from sweeper.testing.factories import SyntheticLevel, synthetic_manifest, synthetic_requests

TOKENS = 20
LEVELS = [SyntheticLevel(1, 100, 7), SyntheticLevel(4, 150, 7.5), SyntheticLevel(16, 300, 8)]


def _merged(trace: RequestTrace, k: int) -> RequestTrace:
    """The same request as a server sending k tokens a chunk would stream it."""
    ends = trace.chunk_ns[k - 1 :: k]
    if len(trace.chunk_ns) % k:
        ends = [*ends, trace.chunk_ns[-1]]
    tokens = [k] * (len(ends) - 1) + [len(trace.chunk_ns) - k * (len(ends) - 1)]
    return trace.model_copy(update={"chunk_ns": ends, "chunk_tokens": tokens})


def _write(root: Path, *, interval: int | None) -> Path:
    manifest = synthetic_manifest("chunks", LEVELS, input_len=512, output_len=201)
    if interval is not None:
        manifest.server.config.extra["stream_interval"] = Fact(value=interval, source="log")
    requests = [_merged(r, TOKENS) for r in synthetic_requests(LEVELS, output_len=201)]
    return write_trace_set(root / "chunks", manifest, requests)


def test_service_levels_and_the_operating_point_judge_itl_per_token(tmp_path: Path) -> None:
    found = analyze_run(load_trace_set(_write(tmp_path, interval=TOKENS)))
    tail = finding(found, "itl_tail")
    assert tail.numbers["itl_basis"] == "per_token"
    # the measured mean: the last chunk of each request carries the rest
    assert TOKENS * 0.85 < tail.numbers["tokens_per_chunk"] <= TOKENS
    # ~8 ms a token, not the ~160 ms between chunks
    assert all(v < 10 for v in tail.numbers["itl_p50_ms"].values())
    assert "Chunks carry ~18 tokens (server stream interval 20)" in tail.text["en"]
    assert "每个 chunk 约携带 18 个 token（服务端 stream interval 为 20）" in tail.text["zh"]
    recommended = finding(found, "recommended")
    assert recommended.numbers["concurrency"] == 16, recommended.text["en"]
    assert recommended.numbers["itl_p50_ms"] < 10
    rows = finding(found, "slo_table").numbers["rows"]
    itl_rows = [r for r in rows if r["slo"].startswith("itl_p50")]
    assert itl_rows and all(r["concurrency"] is not None for r in itl_rows)


def test_multi_token_chunks_are_seen_without_the_server_saying_so(tmp_path: Path) -> None:
    tail = finding(analyze_run(load_trace_set(_write(tmp_path, interval=None))), "itl_tail")
    assert tail.numbers["itl_basis"] == "per_token"
    assert tail.numbers["stream_interval"] is None
    assert "Chunks carry ~18 tokens, so ITL" in tail.text["en"]


def test_single_token_chunks_keep_the_chunk_gap(tmp_path: Path) -> None:
    manifest = synthetic_manifest("plain", LEVELS, output_len=64)
    folder = write_trace_set(
        tmp_path / "plain", manifest, synthetic_requests(LEVELS, output_len=64)
    )
    tail = finding(analyze_run(load_trace_set(folder)), "itl_tail")
    assert tail.numbers["itl_basis"] == "per_chunk"
    assert "Chunks carry" not in tail.text["en"]
