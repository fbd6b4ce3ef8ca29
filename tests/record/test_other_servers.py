"""A server unlike vLLM (as ``transformers serve`` behaves): no /metrics, /tokenize or /version,
rejects ``ignore_eos`` / ``min_tokens`` with 422, streams without ``[DONE]`` and puts the usage
in the finish chunk. Served through ``httpx.MockTransport`` so each quirk is exact."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

from sweeper.record import RecordConfig, RequestCount, record_sweep
from sweeper.record.progress import RichProgress
from sweeper.store import load_trace_set

OUTPUT_LEN = 5


def _handler(request: httpx.Request) -> httpx.Response:
    path = request.url.path
    if path == "/v1/models":
        return httpx.Response(
            200, json={"object": "list", "data": [{"id": "m/small", "object": "model"}]}
        )
    if path != "/v1/chat/completions":
        return httpx.Response(404, json={"detail": "Not Found"})
    body = json.loads(request.content)
    rejected = [k for k in ("ignore_eos", "min_tokens") if k in body]
    if rejected:
        return httpx.Response(
            422,
            json={
                "detail": [
                    {"loc": ["body", k], "msg": "extra fields not permitted"} for k in rejected
                ]
            },
        )
    words = len(body["messages"][0]["content"].split())

    async def stream() -> AsyncIterator[bytes]:
        yield b'data: {"choices": [{"delta": {"role": "assistant"}, "index": 0}]}\n\n'
        for i in range(OUTPUT_LEN):
            chunk: dict[str, object] = {
                "choices": [{"delta": {"content": f" w{i}"}, "index": 0, "finish_reason": None}]
            }
            if i == OUTPUT_LEN - 1:
                chunk["choices"][0]["finish_reason"] = "length"  # type: ignore[index]
                chunk["usage"] = {"prompt_tokens": words + 3, "completion_tokens": OUTPUT_LEN}
            yield f"data: {json.dumps(chunk)}\n\n".encode()

    return httpx.Response(200, content=stream(), headers={"content-type": "text/event-stream"})


def test_a_server_with_none_of_vllms_extras(tmp_path: Path) -> None:
    config = RecordConfig(
        base_url="http://other:8000", endpoint="chat", input_len=12, output_len=OUTPUT_LEN,
        concurrency=[1, 2], requests_per_level=RequestCount(fixed=3), out=tmp_path, run_id="o",
    )  # fmt: skip
    folder = record_sweep(config, transport=httpx.MockTransport(_handler))
    ts = load_trace_set(folder)
    m = ts.manifest
    assert m.status == "complete"
    assert m.target.model == "m/small"
    assert m.server.engine is None and m.server.version is None
    assert m.workload.exact_input is False and m.workload.prompt_source == "words (approximate)"
    warnings = "\n".join(m.warnings)
    assert "no /tokenize" in warnings
    assert "no metrics at http://other:8000/metrics" in warnings
    assert warnings.count("rejected") == 2 and "HTTP 422" in warnings
    # Prompt of 12 words + 3 template tokens: the mismatch is reported, not hidden.
    assert "had a prompt of 15..15 tokens, not --input-len 12" in warnings
    assert [s.error for s in ts.metrics] == ["HTTP 404"]  # the one try, then no more
    for r in ts.requests:
        assert r.status == "ok" and r.finish_reason == "length"
        assert r.chunk_tokens == [1] * OUTPUT_LEN and r.completion_tokens == OUTPUT_LEN


def test_live_progress_table_renders(tmp_path: Path) -> None:
    from io import StringIO

    from rich.console import Console

    out = StringIO()
    progress = RichProgress(Console(file=out, force_terminal=True, width=100))
    config = RecordConfig(
        base_url="http://other:8000", endpoint="chat", input_len=4, output_len=OUTPUT_LEN,
        concurrency=[2], requests_per_level=RequestCount(fixed=2), out=tmp_path, run_id="p",
    )  # fmt: skip
    record_sweep(config, progress=progress, transport=httpx.MockTransport(_handler))
    text = out.getvalue()
    for word in ("level", "done / total", "TTFT p50", "ITL p50", "errors", "4 / 4"):
        assert word in text, word


def _two_tokens_per_chunk(request: httpx.Request) -> httpx.Response:
    """Completions that stream 2 tokens per chunk and tell only the total at the end."""
    if request.url.path == "/v1/models":
        return httpx.Response(200, json={"data": [{"id": "m"}]})
    if request.url.path != "/v1/completions":
        return httpx.Response(404)
    chunks = [
        {"choices": [{"text": "ab", "index": 0}]},
        {"choices": [{"text": "cd", "index": 0, "finish_reason": "length"}]},
        {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 4}},
    ]
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    return httpx.Response(200, content=body.encode())


def test_chunks_without_token_counts_are_flagged_when_usage_disagrees(tmp_path: Path) -> None:
    config = RecordConfig(
        base_url="http://other:8000", input_len=4, output_len=4, concurrency=[1],
        requests_per_level=RequestCount(fixed=2), warmup=0, out=tmp_path, run_id="m",
    )  # fmt: skip
    ts = load_trace_set(record_sweep(config, transport=httpx.MockTransport(_two_tokens_per_chunk)))
    assert all(r.chunk_tokens == [1, 1] and r.completion_tokens == 4 for r in ts.requests)
    assert any("do not add up to the server's usage" in w for w in ts.manifest.warnings)
