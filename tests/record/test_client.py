"""One streamed request: exact timing with an injected clock, and every fault kind against the
scripted server over real loopback HTTP."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from sweeper.record.client import RequestShaper, RequestSpec, StreamClient, stream_request
from sweeper.record.http import RawClient
from sweeper.record.workload import completion_body
from sweeper.testing.server import ServerThread, closed_port_url, run_server

OUTPUT_LEN = 6


def _spec(endpoint: str = "completions", rid: str = "c1-00000") -> RequestSpec:
    body = completion_body(
        "tiny", "one two three", endpoint=endpoint, output_len=OUTPUT_LEN, ignore_eos=True
    )
    return RequestSpec(rid, 1, "measured", body, header_id=rid)


class FakeClock:
    """Advances by a fixed step each time it is read: every timestamp is known in advance."""

    def __init__(self, start: int = 1_000, step: int = 10) -> None:
        self.now = start - step
        self.step = step

    def __call__(self) -> int:
        self.now += self.step
        return self.now


async def test_chunk_offsets_come_from_the_injected_clock_to_the_nanosecond() -> None:
    def sse(obj: dict[str, Any]) -> bytes:
        return f"data: {json.dumps(obj)}\n\n".encode()

    reads = [
        sse(
            {
                "choices": [{"delta": {"role": "assistant", "content": ""}}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 0},
            }
        ),
        sse(
            {
                "choices": [{"delta": {"content": "a"}}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1},
            }
        )[:7],
        sse(
            {
                "choices": [{"delta": {"content": "a"}}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1},
            }
        )[7:]
        + b": keep-alive\n\n",
        sse(
            {
                "choices": [{"delta": {"content": "bc"}, "finish_reason": "length"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 3},
            }
        ),
        sse({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 3}})
        + b"data: [DONE]\n\n",
    ]

    async def body() -> AsyncIterator[bytes]:
        for part in reads:
            yield part

    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=body()))
    clock = FakeClock(start=1_000, step=10)
    async with httpx.AsyncClient(transport=transport) as client:
        trace = await stream_request(
            client, "http://x/v1/chat/completions", _spec("chat"), endpoint="chat",
            origin_ns=400, timeout_s=5, clock=clock,
        )  # fmt: skip
    # Clock reads: send at 1000, then one per network read: 1010, 1020, 1030, 1040, 1050.
    assert trace.send_ns == 600
    assert trace.chunk_ns == [30, 40]  # role chunk (read 1) is no token; read 2 ends no event
    assert trace.chunk_tokens == [1, 2]
    assert trace.end_ns == 50
    assert (trace.prompt_tokens, trace.completion_tokens, trace.finish_reason) == (3, 3, "length")
    assert trace.status == "ok"


@pytest.fixture(params=["raw", "httpx"])
def client_kind(request: pytest.FixtureRequest) -> str:
    """Every exchange test runs with both streaming paths: the raw client and httpx."""
    return str(request.param)


def _client(kind: str, headers: dict[str, str]) -> StreamClient:
    return RawClient(headers=headers) if kind == "raw" else httpx.AsyncClient(headers=headers)


async def _one(server_url: str, fault: str | None = None, *, endpoint: str = "completions",
               timeout_s: float = 10, shaper: RequestShaper | None = None, rid: str = "c1-00000",
               kind: str = "raw") -> Any:  # fmt: skip
    headers = {"X-Sweeper-Fault": fault} if fault else {}
    url = f"{server_url}/v1/{'chat/completions' if endpoint == 'chat' else 'completions'}"
    async with _client(kind, headers) as client:
        return await stream_request(
            client,
            url,
            _spec(endpoint, rid),
            endpoint=endpoint,
            origin_ns=0,
            timeout_s=timeout_s,
            shaper=shaper,
        )


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
@pytest.mark.parametrize(
    "fault", [None, "comments", "split", "no_done", "no_usage", "split,comments"]
)
async def test_clean_streams_count_every_token(
    server: ServerThread, endpoint: str, fault: str | None, client_kind: str
) -> None:
    trace = await _one(server.base_url, fault, endpoint=endpoint, kind=client_kind)
    assert trace.status == "ok", trace.error
    assert sum(trace.chunk_tokens) == OUTPUT_LEN == trace.completion_tokens
    assert trace.chunk_ns == sorted(trace.chunk_ns) and trace.chunk_ns[0] > 0
    assert trace.prompt_tokens == 3
    assert trace.finish_reason == "length"


@pytest.mark.parametrize(
    ("fault", "kind", "status", "chunks"),
    [
        ("reset", "reset", None, 0),
        ("close", "reset", None, 0),
        ("http_500", "http", 500, 0),
        ("http_429", "http", 429, 0),
        ("http=503", "http", 503, 0),
        ("cut=3", "stream_cut", None, 3),
        ("malformed=2", "malformed", None, 2),
        ("error=2", "server_error", None, 2),
    ],
)
async def test_each_fault_is_recorded_as_data(
    server: ServerThread, fault: str, kind: str, status: int | None, chunks: int, client_kind: str
) -> None:
    trace = await _one(server.base_url, fault, kind=client_kind)
    assert trace.status == "error"
    assert trace.error is not None
    assert (trace.error.kind, trace.error.http_status) == (kind, status)
    assert trace.error.message
    assert len(trace.chunk_ns) == chunks
    assert trace.end_ns is not None and trace.end_ns >= 0


async def test_timeout_mid_stream_keeps_the_chunks_before_it(
    server: ServerThread, client_kind: str
) -> None:
    trace = await _one(server.base_url, "stall=3000@2", timeout_s=0.5, kind=client_kind)
    assert trace.error is not None and trace.error.kind == "timeout"
    assert len(trace.chunk_ns) == 2
    assert 400_000_000 <= trace.end_ns <= 2_000_000_000  # type: ignore[operator]


async def test_connection_refused(client_kind: str) -> None:
    trace = await _one(closed_port_url(), kind=client_kind)
    assert trace.error is not None and trace.error.kind == "connect"


async def test_rejected_optional_fields_are_dropped_once_with_one_warning(
    client_kind: str,
) -> None:
    warnings: list[str] = []
    shaper = RequestShaper(on_warning=warnings.append)
    with run_server(ttft_ms=1, itl_ms=1, reject_params=("ignore_eos", "min_tokens")) as srv:
        first = await _one(srv.base_url, shaper=shaper, rid="first", kind=client_kind)
        second = await _one(srv.base_url, shaper=shaper, rid="second", kind=client_kind)
        truths = srv.truths()
    assert first.status == second.status == "ok"
    assert shaper.dropped == {"ignore_eos", "min_tokens"}
    assert len(warnings) == 2 and all("rejected" in w for w in warnings)
    # The server's last word on each id (a retry replaces the rejected attempt's truth).
    assert sorted((t["request_id"], t["status"]) for t in truths) == [
        ("first", "ok"),
        ("second", "ok"),
    ]


async def test_connection_is_reused_after_done(server: ServerThread) -> None:
    """Reading past [DONE] to the end of the body hands the connection back to the pool: a
    sweep does not pay a new TCP connection (or TLS handshake) per request."""
    async with httpx.AsyncClient() as client:
        for i in range(3):
            trace = await stream_request(
                client, f"{server.base_url}/v1/completions", _spec(rid=f"reuse-{i}"),
                endpoint="completions", origin_ns=0, timeout_s=5,
            )  # fmt: skip
            assert trace.status == "ok"
        pool = client._transport._pool  # type: ignore[attr-defined]  # httpx's own pool
        assert len(pool.connections) == 1
