"""The scripted server's endpoints over real loopback HTTP: shapes, usage, lengths, ids, truth."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from sweeper.testing.server import ServerThread, run_server

StreamFn = Callable[..., Any]


def test_models_version_health(client: httpx.Client) -> None:
    models = client.get("/v1/models").json()
    assert models["data"][0]["id"] == "tiny"
    assert models["data"][0]["max_model_len"] == 4096
    assert client.get("/version").json() == {"version": "0.0.0+sweeper.scripted"}
    assert client.get("/health").status_code == 200
    missing = client.get("/nope")
    assert missing.status_code == 404
    assert "/nope" in missing.json()["error"]["message"]


def test_tokenize_counts_words(client: httpx.Client) -> None:
    prompt = " ".join(["word"] * 37)
    result = client.post("/tokenize", json={"model": "tiny", "prompt": prompt}).json()
    assert result["count"] == 37
    assert len(result["tokens"]) == 37
    assert result["max_model_len"] == 4096
    chat = client.post(
        "/tokenize", json={"messages": [{"role": "user", "content": "one two three"}]}
    ).json()
    assert chat["count"] == 3
    assert client.post("/tokenize", json={"nothing": 1}).status_code == 400


def test_completion_stream_shape_and_usage(client: httpx.Client, stream_request: StreamFn) -> None:
    got = stream_request(
        client,
        "/v1/completions",
        {
            "model": "tiny",
            "prompt": "a b c d",
            "max_tokens": 7,
            "stream_options": {"include_usage": True},
        },
    )
    assert got.status == 200
    assert got.headers["content-type"].startswith("text/event-stream")
    assert got.data[-1] == "[DONE]"
    events = got.events
    content = [e for e in events if e["choices"]]
    assert len(content) == 7
    assert all(e["object"] == "text_completion" for e in events)
    assert [e["choices"][0]["finish_reason"] for e in content] == [None] * 6 + ["length"]
    assert events[-1]["choices"] == []
    assert events[-1]["usage"] == {"prompt_tokens": 4, "total_tokens": 11, "completion_tokens": 7}
    assert all("usage" not in e for e in content)
    # multi-byte UTF-8 text comes through
    text = "".join(e["choices"][0]["text"] for e in content)
    assert "héllo" in text and len(text.split()) == 7


def test_chat_stream_role_chunk_and_continuous_usage(
    client: httpx.Client, stream_request: StreamFn
) -> None:
    got = stream_request(
        client,
        "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": "hi there you"}],
            "max_tokens": 4,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        },
    )
    events = got.events
    assert events[0]["object"] == "chat.completion.chunk"
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    content = [e for e in events[1:] if e["choices"]]
    assert len(content) == 4
    assert [e["usage"]["completion_tokens"] for e in content] == [1, 2, 3, 4]
    assert all(e["usage"]["prompt_tokens"] == 3 for e in events)
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 4


def test_non_stream_completion_and_chat(client: httpx.Client) -> None:
    completion = client.post("/v1/completions", json={"prompt": "x y", "max_tokens": 5}).json()
    assert completion["usage"] == {"prompt_tokens": 2, "total_tokens": 7, "completion_tokens": 5}
    assert len(completion["choices"][0]["text"].split()) == 5
    chat = client.post(
        "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 3},
    ).json()
    assert chat["object"] == "chat.completion"
    assert chat["choices"][0]["message"]["role"] == "assistant"
    assert chat["usage"]["completion_tokens"] == 3


def test_natural_stop_ignore_eos_and_min_tokens() -> None:
    with (
        run_server(ttft_ms=1, itl_ms=1, natural_len=3) as server,
        httpx.Client(base_url=server.base_url) as client,
    ):

        def finish(**extra: object) -> tuple[int, str]:
            body = {"prompt": "p", "max_tokens": 10, **extra}
            result = client.post("/v1/completions", json=body).json()
            return result["usage"]["completion_tokens"], result["choices"][0]["finish_reason"]

        assert finish() == (3, "stop")
        assert finish(ignore_eos=True) == (10, "length")
        assert finish(min_tokens=6) == (6, "stop")


def test_reject_params_names_them() -> None:
    with (
        run_server(ttft_ms=1, itl_ms=1, reject_params=("ignore_eos", "min_tokens")) as server,
        httpx.Client(base_url=server.base_url) as client,
    ):
        rejected = client.post(
            "/v1/completions", json={"prompt": "p", "max_tokens": 2, "ignore_eos": True}
        )
        assert rejected.status_code == 400
        assert "ignore_eos" in rejected.json()["error"]["message"]
        accepted = client.post("/v1/completions", json={"prompt": "p", "max_tokens": 2})
        assert accepted.json()["usage"]["completion_tokens"] == 2


def test_bad_requests(client: httpx.Client) -> None:
    too_long = client.post("/v1/completions", json={"prompt": "a b", "max_tokens": 4095})
    assert too_long.status_code == 400
    assert "maximum context length is 4096" in too_long.json()["error"]["message"]
    wrong_model = client.post("/v1/completions", json={"model": "other", "prompt": "a"})
    assert wrong_model.status_code == 404
    not_json = client.post("/v1/completions", content=b"{", headers={"content-type": "x"})
    assert not_json.status_code == 400


def test_request_id_header_and_truth_endpoint(
    server: ServerThread, client: httpx.Client, stream_request: StreamFn
) -> None:
    got = stream_request(
        client,
        "/v1/completions",
        {"prompt": "a", "max_tokens": 3},
        headers={"X-Request-Id": "mine-1"},
    )
    assert got.headers["x-request-id"] == "mine-1"
    assert got.events[0]["id"] == "mine-1"
    over_http = client.get("/_sweeper/truth", params={"request_id": "mine-1"}).json()
    in_process = server.truth("mine-1")
    assert over_http == in_process
    assert over_http["status"] == "ok"
    assert over_http["content_tokens"] == [1, 1, 1]
    assert over_http["event_kind"] == ["headers", "content", "content", "content", "done"]
    assert client.get("/_sweeper/truth", params={"request_id": "absent"}).status_code == 404
    listed = client.get("/_sweeper/truth").json()["requests"]
    assert "mine-1" in {item["request_id"] for item in listed}
    # generated ids are echoed and usable as truth keys
    generated = stream_request(client, "/v1/completions", {"prompt": "a", "max_tokens": 1})
    assert server.truth(generated.headers["x-request-id"]) is not None
    assert client.get("/_sweeper/config").json()["itl_ms"] == 2


def test_reset_forgets_truth_and_since_filter() -> None:
    with run_server(ttft_ms=1, itl_ms=1) as server:
        httpx.post(f"{server.base_url}/v1/completions", json={"prompt": "a", "max_tokens": 1})
        middle_ns = time.monotonic_ns()
        httpx.post(f"{server.base_url}/v1/completions", json={"prompt": "a", "max_tokens": 1})
        assert len(server.truths()) == 2
        later = httpx.get(f"{server.base_url}/_sweeper/truth", params={"since_ns": middle_ns})
        assert [t["request_id"] for t in later.json()["requests"]] == ["cmpl-00000002"]
        earlier = httpx.get(f"{server.base_url}/_sweeper/truth", params={"until_ns": middle_ns})
        assert [t["request_id"] for t in earlier.json()["requests"]] == ["cmpl-00000001"]
        httpx.post(f"{server.base_url}/_sweeper/reset")
        assert server.truths() == []


def test_metrics_in_vllm_format(client: httpx.Client, stream_request: StreamFn) -> None:
    stream_request(client, "/v1/completions", {"prompt": "a b", "max_tokens": 5})
    text = client.get("/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions",
        "vllm:prompt_tokens",
        "vllm:generation_tokens",
        "vllm:cache_config_info",
        "vllm:request_queue_time_seconds",
        "vllm:request_prefill_time_seconds",
        "vllm:request_decode_time_seconds",
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
    ):
        assert name in families, name
    info = families["vllm:cache_config_info"].samples[0].labels
    assert info["block_size"] == "16"
    assert int(info["num_gpu_blocks"]) * 16 == int(info["kv_cache_size_tokens"])
    generation = families["vllm:generation_tokens"].samples[0]
    assert generation.labels == {"engine": "0", "model_name": "tiny"}
    assert generation.value >= 5
    ttft_count = [
        s for s in families["vllm:time_to_first_token_seconds"].samples if s.name.endswith("_count")
    ]
    assert ttft_count[0].value >= 1


def test_config_survives_json_dump(client: httpx.Client) -> None:
    config = client.get("/_sweeper/config").json()
    assert json.loads(json.dumps(config))["mode"] == "schedule"


def _counter(page: str, name: str) -> float:
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    raise AssertionError(f"{name} not on the page")


def test_prefix_cache_counts_the_blocks_an_earlier_prompt_or_answer_filled() -> None:
    """Blocks of 4 toy tokens: a second turn that repeats the first prompt and its answer
    finds them cached (their whole blocks); an unrelated prompt finds nothing; with caching
    off nothing is ever a hit, but the queries are counted."""
    first = " ".join(f"w{i}" for i in range(10))  # 10 tokens: blocks 0-1 full
    with run_server(ttft_ms=0, itl_ms=0, prefix_caching=True, block_size=4) as srv:
        with httpx.Client(base_url=srv.base_url) as http:
            answer = http.post(
                "/v1/completions", json={"prompt": first, "max_tokens": 6},
                headers={"X-Request-Id": "one"},
            ).json()["choices"][0]["text"]  # fmt: skip
            second = first + answer + " and more words"  # 10 + 6 + 3 tokens
            http.post("/v1/completions", json={"prompt": second, "max_tokens": 2},
                      headers={"X-Request-Id": "two"})  # fmt: skip
            http.post("/v1/completions", json={"prompt": "x y z a b c d e", "max_tokens": 2},
                      headers={"X-Request-Id": "three"})  # fmt: skip
            page = http.get("/metrics").text
        cached = [srv.truth(i)["cached_tokens"] for i in ("one", "two", "three")]  # type: ignore[index]
    assert cached == [0, 16, 0]  # the first 16 of 10 + 6 tokens: four whole blocks
    assert _counter(page, "vllm:prefix_cache_queries_total") == 10 + 19 + 8
    assert _counter(page, "vllm:prefix_cache_hits_total") == 16
    assert 'enable_prefix_caching="True"' in page
    with run_server(ttft_ms=0, itl_ms=0) as off, httpx.Client(base_url=off.base_url) as http:
        for _ in range(2):
            http.post("/v1/completions", json={"prompt": first, "max_tokens": 2})
        page = http.get("/metrics").text
    assert _counter(page, "vllm:prefix_cache_hits_total") == 0
    assert _counter(page, "vllm:prefix_cache_queries_total") == 20
