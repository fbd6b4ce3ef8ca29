"""The raw HTTP/1.1 streaming client: timing against the scripted server's own write times
(kernel receive times that a busy loop cannot move, and the self-check on chunks that share a
read), keep-alive reuse (one connection per stream slot), body framings (chunked, Content-Length,
close-delimited) and idle connections the server closed, over real loopback sockets."""

from __future__ import annotations

import asyncio
import json
import ssl
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from sweeper.analysis.thresholds import DEFAULT_THRESHOLDS
from sweeper.record import recorder
from sweeper.record.client import RequestSpec, stream_request
from sweeper.record.config import RecordConfig, RequestCount
from sweeper.record.http import RawClient, split_url, ssl_context_for
from sweeper.record.stamps import StampStats
from sweeper.record.workload import completion_body
from sweeper.store import load_trace_set
from sweeper.testing.server import ServerProcess, ServerThread

OUTPUT_LEN = 8
NS_PER_MS = 1_000_000
TIMING_ATTEMPTS = 3
STREAMS = 4
REQUESTS_PER_STREAM = 3
BusyLoop = Callable[[float], AbstractAsyncContextManager[None]]  # the busy_loop fixture


def _spec(rid: str) -> RequestSpec:
    body = completion_body("tiny", "one two three", endpoint="completions",
                           output_len=OUTPUT_LEN, ignore_eos=True)  # fmt: skip
    return RequestSpec(rid, 1, "measured", body, header_id=rid)


async def _stream(client: RawClient, base_url: str, rid: str, timeout_s: float = 10) -> Any:
    return await stream_request(
        client, f"{base_url}/v1/completions", _spec(rid), endpoint="completions",
        origin_ns=0, timeout_s=timeout_s,
    )  # fmt: skip


async def test_arrivals_match_the_servers_write_times(process_server: ServerProcess) -> None:
    """Each chunk's arrival (CLOCK_MONOTONIC, origin 0) against the moment the server process
    wrote it: never before, and within a millisecond at the median (best of three attempts on
    a shared machine; causality must hold in every one)."""
    medians = []
    for attempt in range(TIMING_ATTEMPTS):
        rids = [f"timing-{attempt}-{s}-{i}" for s in range(STREAMS) for i in range(2)]
        async with RawClient() as client:
            traces = await asyncio.gather(
                *(_stream(client, process_server.base_url, r) for r in rids)
            )
        delays = []
        for trace, rid in zip(traces, rids, strict=True):
            assert trace.status == "ok", trace.error
            truth = process_server.truth(rid)
            assert truth is not None and trace.chunk_tokens == truth["content_tokens"]
            arrivals = [trace.send_ns + c for c in trace.chunk_ns]
            delays += [
                (a - w) / NS_PER_MS for a, w in zip(arrivals, truth["content_ns"], strict=True)
            ]
        assert min(delays) >= 0, "a chunk was stamped before the server wrote it"
        medians.append(statistics.median(delays))
        if medians[-1] < 1.0:
            break
    assert min(medians) < 1.0, medians


async def test_one_keep_alive_connection_per_stream_slot(server: ServerThread) -> None:
    async with RawClient() as client:

        async def slot(s: int) -> list[str]:
            out = []
            for i in range(REQUESTS_PER_STREAM):
                trace = await _stream(client, server.base_url, f"slot-{s}-{i}")
                out.append(trace.status)
            return out

        statuses = await asyncio.gather(*(slot(s) for s in range(STREAMS)))
        assert statuses == [["ok"] * REQUESTS_PER_STREAM] * STREAMS
        assert client.connects == STREAMS


# A tiny HTTP server of canned answers, to control framing and closes byte by byte.

Answer = Callable[[int, int], bytes | None]
"""(connection number, request number on it) -> the bytes to answer, or None to close."""


def _sse_body() -> bytes:
    events = [
        {"choices": [{"text": "a", "finish_reason": None}]},
        {"choices": [{"text": "b", "finish_reason": "length"}]},
        {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}},
    ]
    return b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events) + b"data: [DONE]\n\n"


def _content_length(body: bytes, extra: str = "") -> bytes:
    head = f"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {len(body)}\r\n{extra}\r\n"
    return head.encode() + body


def _chunked(body: bytes, piece: int = 7) -> bytes:
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    parts = [body[i : i + piece] for i in range(0, len(body), piece)]
    chunks = b"".join(f"{len(p):x};ext=1\r\n".encode() + p + b"\r\n" for p in parts)
    return head + chunks + b"0\r\n\r\n"


@asynccontextmanager
async def _canned(
    answer: Answer, close_after: bool = False
) -> AsyncIterator[tuple[str, list[bytes]]]:
    heads: list[bytes] = []
    conns = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal conns
        conn, n = conns, 0
        conns += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                await reader.readexactly(length)
                heads.append(head)
                out = answer(conn, n)
                n += 1
                if out is None:
                    return
                writer.write(out)
                await writer.drain()
                if close_after:
                    return
        finally:
            writer.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    async with srv:
        yield f"http://127.0.0.1:{port}", heads


@pytest.mark.parametrize("framing", ["chunked", "content-length", "close"])
async def test_each_body_framing_reads_the_whole_stream(framing: str) -> None:
    def answer(conn: int, n: int) -> bytes:
        if framing == "chunked":
            return _chunked(_sse_body())
        if framing == "content-length":
            return _content_length(_sse_body())
        return b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n" + _sse_body()

    async with (
        _canned(answer, close_after=framing == "close") as (url, heads),
        RawClient(headers={"Authorization": "Bearer k3y"}) as client,
    ):
        first = await _stream(client, url, "f-1")
        second = await _stream(client, url, "f-2")
    for trace in (first, second):
        assert trace.status == "ok", trace.error
        assert trace.chunk_tokens == [1, 1] and trace.completion_tokens == 2
    # A framed body keeps the connection; a close-delimited one needs a new one each time.
    assert client.connects == (2 if framing == "close" else 1)
    assert all(b"\r\nAuthorization: Bearer k3y\r\n" in h for h in heads)
    assert all(b"\r\nX-Request-Id: f-" in h and b"\r\nContent-Length: " in h for h in heads)


async def test_an_idle_connection_the_server_closed_is_replaced() -> None:
    """llama.cpp closes idle keep-alives: the FIN is seen before reuse, a new one is opened."""
    async with (
        _canned(lambda c, n: _chunked(_sse_body()), close_after=True) as (url, _),
        RawClient() as client,
    ):
        first = await _stream(client, url, "idle-1")
        await asyncio.sleep(0.05)  # the server's FIN arrives while the connection is idle
        second = await _stream(client, url, "idle-2")
    assert first.status == second.status == "ok"
    assert client.connects == 2


async def test_a_connection_closed_at_the_moment_of_reuse_is_retried_once() -> None:
    """The server reads the second request on the kept connection, then closes without a byte:
    sent again once on a new connection, and no error recorded."""

    def answer(conn: int, n: int) -> bytes | None:
        return None if (conn, n) == (0, 1) else _chunked(_sse_body())

    async with _canned(answer) as (url, heads), RawClient() as client:
        first = await _stream(client, url, "race-1")
        second = await _stream(client, url, "race-2")
    assert first.status == second.status == "ok", second.error
    assert client.connects == 2 and len(heads) == 3


async def test_connections_opened_ahead_are_the_ones_the_requests_use() -> None:
    """``open_idle`` opens up to the asked number (counting those already idle); the requests
    after it take them, and open none of their own."""
    async with _canned(lambda c, n: _chunked(_sse_body())) as (url, heads), RawClient() as client:
        assert await client.open_idle(url, STREAMS) == STREAMS
        assert await client.open_idle(url, STREAMS) == 0  # all idle already
        assert client.connects == STREAMS and heads == []  # opened, nothing sent yet
        traces = await asyncio.gather(*(_stream(client, url, f"ahead-{i}") for i in range(STREAMS)))
        assert [t.status for t in traces] == ["ok"] * STREAMS
        assert client.connects == STREAMS and len(heads) == STREAMS
        assert await client.open_idle(url, STREAMS + 1) == 1
        assert client.connects == STREAMS + 1


async def test_connections_that_cannot_be_opened_ahead_are_the_requests_errors() -> None:
    """Nothing listening: opening ahead opens none and raises nothing; the request that needs
    the connection meets the refusal and records it as a connect error."""
    srv = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    srv.close()
    await srv.wait_closed()
    url = f"http://127.0.0.1:{port}"
    async with RawClient() as client:
        assert await client.open_idle(url, 2) == 0
        trace = await _stream(client, url, "refused")
    assert trace.status == "error" and trace.error is not None
    assert trace.error.kind == "connect", trace.error


def test_a_closed_loop_level_opens_its_connections_before_its_first_send(
    server: ServerThread, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A level of C streams has its C connections open before its first request is sent, so no
    request of its first round is timed through a TCP handshake (docs/fidelity.md); the next
    level opens only the ones it lacks."""
    events: list[str] = []

    class LoggingRawClient(RawClient):
        async def _connect(self, origin: Any) -> Any:
            events.append("connect")
            return await super()._connect(origin)

        def post(self, *args: Any, **kwargs: Any) -> Any:
            events.append("send")
            return super().post(*args, **kwargs)

    monkeypatch.setattr(recorder, "RawClient", LoggingRawClient)
    config = RecordConfig(
        base_url=server.base_url, input_len=8, output_len=2, concurrency=[3, 5],
        requests_per_level=RequestCount(fixed=10), warmup=0, out=tmp_path, run_id="ahead",
        metrics_urls=[],
    )  # fmt: skip
    ts = load_trace_set(recorder.record_sweep(config))
    assert len(ts.requests) == 20 and all(r.status == "ok" for r in ts.requests)
    first_level = events[: events.index("send") + 10]
    assert first_level[:3] == ["connect"] * 3 and first_level[3:] == ["send"] * 10, events
    second_level = events[len(first_level) :]
    assert second_level[:2] == ["connect"] * 2 and second_level[2:] == ["send"] * 10, events


def test_workers_open_every_connection_before_a_level_sends(
    server: ServerThread, tmp_path: Path
) -> None:
    """With two worker processes, the server takes up no connection while a level's requests
    arrive: every worker opened its share before any of them sent (a worker still opening its
    own while the other streamed had its first round queued behind that load)."""
    server.reset()
    config = RecordConfig(
        base_url=server.base_url, input_len=8, output_len=4, concurrency=[4, 8],
        requests_per_level=RequestCount(fixed=16), warmup=0, out=tmp_path, run_id="w2",
        metrics_urls=[], workers=2,
    )  # fmt: skip
    ts = load_trace_set(recorder.record_sweep(config))
    assert len(ts.requests) == 32 and all(r.status == "ok" for r in ts.requests)
    assert {r.worker for r in ts.requests} == {0, 1}
    received = {t["request_id"]: t["received_ns"] for t in server.truths()}
    accepted = server.accepted_ns()
    assert len(accepted) >= 8, accepted  # the second level's 8 streams, at least
    for level in (4, 8):
        times = [received[f"w2-{r.request_id}"] for r in ts.requests if r.concurrency == level]
        first, last = min(times), max(times)
        during = [a for a in accepted if first < a <= last]
        assert during == [], (level, [(a - first) / 1e6 for a in during])


@pytest.mark.parametrize(
    ("answer", "kind", "chunks"),
    [
        (b"garbage\r\n\r\n", "reset", 0),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n", "reset", 0),
        (_content_length(_sse_body())[:-40], "stream_cut", 2),
        (b"HTTP/1.1 404 Not Found\r\ncontent-length: 9\r\n\r\nno model!", "http", 0),
        (b"HTTP/1.1 204 No Content\r\n\r\n", "stream_cut", 0),
    ],
    ids=["status-line", "chunk-size", "short-content-length", "http-404", "no-content"],
)
async def test_broken_responses_map_to_the_error_kinds(
    answer: bytes, kind: str, chunks: int
) -> None:
    async with _canned(lambda c, n: answer, close_after=True) as (url, _), RawClient() as client:
        trace = await _stream(client, url, "broken")
    assert trace.error is not None and trace.error.kind == kind
    assert trace.error.message
    assert len(trace.chunk_ns) == chunks
    if kind == "http":
        assert (trace.error.http_status, trace.error.message) == (404, "no model!")


def test_https_urls_get_a_verifying_tls_context() -> None:
    origin, target, basic = split_url("https://user:p%40ss@gpu-box/v1/completions?x=1")
    context = ssl_context_for(origin)
    assert isinstance(context, ssl.SSLContext)
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    assert (origin.port, origin.host_header, target) == (443, "gpu-box", "/v1/completions?x=1")
    assert basic == "dXNlcjpwQHNz"  # base64 of "user:p@ss"
    plain, _, _ = split_url("http://127.0.0.1:8000/v1/completions")
    assert ssl_context_for(plain) is None and plain.host_header == "127.0.0.1:8000"
    with pytest.raises(ValueError, match="http:// or https://"):
        split_url("unix:///tmp/sock")


@pytest.mark.parametrize("http_client", ["raw", "httpx"])
def test_the_sweep_streams_over_the_chosen_client(
    server: ServerThread, tmp_path: Path, http_client: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--http-client raw`` (the default) streams over RawClient, one connection per stream
    slot; ``httpx`` streams over the httpx client. Both record every request, with the key."""
    made: list[RawClient] = []

    class CountingRawClient(RawClient):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(recorder, "RawClient", CountingRawClient)
    config = RecordConfig(
        base_url=server.base_url, input_len=8, output_len=4, concurrency=[1, 3],
        requests_per_level=RequestCount(fixed=6), warmup=0, out=tmp_path, run_id=http_client,
        metrics_urls=[], http_client="httpx" if http_client == "httpx" else "raw",
        api_key="s3cret-key",
    )  # fmt: skip
    ts = load_trace_set(recorder.record_sweep(config))
    assert len(ts.requests) == 12 and all(r.status == "ok" for r in ts.requests)
    assert ts.manifest.client.http_client == http_client
    if http_client == "raw":
        assert len(made) == 1 and made[0].connects == 3  # the 3-stream level reused level 1's
        assert made[0].headers == {"Authorization": "Bearer s3cret-key"}
    else:
        assert made == []
    for path in (tmp_path / http_client).rglob("*"):
        assert "s3cret-key" not in path.read_text(errors="replace"), path


async def test_arrivals_are_stamped_with_the_injected_clock(server: ServerThread) -> None:
    """The raw client stamps arrivals with the clock stream_request was given, not its own: a
    clock shifted by a day gives the same small offsets from send."""
    shift_ns = 86_400 * 10**9

    def shifted() -> int:
        return time.monotonic_ns() + shift_ns

    async with RawClient() as client:
        trace = await stream_request(
            client, f"{server.base_url}/v1/completions", _spec("shifted"), endpoint="completions",
            origin_ns=shift_ns, timeout_s=10, clock=shifted,
        )  # fmt: skip
    assert trace.status == "ok", trace.error
    assert 0 < trace.chunk_ns[0] <= trace.chunk_ns[-1] <= trace.end_ns < 10 * 10**9  # type: ignore[operator]


async def _stream_with_hog(
    process_server: ServerProcess, busy_loop: BusyLoop, rids: list[str], block_s: float
) -> tuple[list[float], StampStats]:
    """Stream ``rids`` while the loop is hogged; each chunk's delay (stamp - server write, ms)."""
    stamps = StampStats()
    async with busy_loop(block_s), RawClient() as client:
        traces = await asyncio.gather(*(
            stream_request(
                client, f"{process_server.base_url}/v1/completions", _spec(rid),
                endpoint="completions", origin_ns=0, timeout_s=30, stamps=stamps,
            )
            for rid in rids
        ))  # fmt: skip
    delays = []
    for trace, rid in zip(traces, rids, strict=True):
        assert trace.status == "ok", trace.error
        truth = process_server.truth(rid)
        assert truth is not None
        arrivals = [trace.send_ns + c for c in trace.chunk_ns]
        delays += [(a - w) / NS_PER_MS for a, w in zip(arrivals, truth["content_ns"], strict=True)]
    return delays, stamps


@pytest.mark.skipif(sys.platform != "linux", reason="kernel receive timestamps are Linux's")
async def test_a_busy_loop_reads_late_but_stamps_the_kernels_arrival_time(
    process_server: ServerProcess, busy_loop: BusyLoop
) -> None:
    """The loop is blocked 3 ms at a time, so chunks wait in their sockets for up to 3 ms (the
    read delay says so); their stamps are still the kernel's receive times, within 0.5 ms of the
    server's writes, because chunks 5 ms apart never wait long enough to share a read."""
    for attempt in range(TIMING_ATTEMPTS):
        rids = [f"hog-{attempt}-{i}" for i in range(2)]
        delays, stamps = await _stream_with_hog(process_server, busy_loop, rids, block_s=0.003)
        check = stamps.summary(2)
        assert check is not None and check.source == "kernel"
        assert min(delays) >= 0, "a chunk was stamped before the server wrote it"
        assert check.read_delay_max_ms is not None and check.read_delay_max_ms > 1.0
        if check.merged_chunks == 0 and max(delays) < 0.5:
            break
    assert check.merged_chunks == 0 and max(delays) < 0.5, (check, max(delays))
    assert not DEFAULT_THRESHOLDS.stamps_distorted(check)


@pytest.mark.skipif(sys.platform != "linux", reason="kernel receive timestamps are Linux's")
async def test_chunks_that_share_a_late_read_are_counted_and_flagged(
    process_server: ServerProcess, busy_loop: BusyLoop
) -> None:
    """Blocked 12 ms at a time against chunks every 5 ms, reads return two or three chunks at
    once: the earlier ones carry the later one's time. The self-check counts them, says the
    level's stamps are distorted, and the late stamps it warns about are really there."""
    delays, stamps = await _stream_with_hog(
        process_server, busy_loop, ["merge-0", "merge-1"], block_s=0.012
    )
    check = stamps.summary(2)
    assert check is not None and check.source == "kernel"
    assert check.merged_chunks > 0.1 * check.chunks
    assert DEFAULT_THRESHOLDS.stamps_distorted(check)
    assert max(delays) > 2.0  # the merged chunks' stamps are late
    assert min(delays) >= 0
