"""One recorder process at load: the closed loop sends a stream's next request before recording
its last; a body's reads are parsed in the
loop's read callback (fast paths equal to the general ones); and when the self-check flags a
level it names the part that lagged (send, read or parse), over real loopback HTTP against the
scripted server."""

from __future__ import annotations

import asyncio
import random
import sys
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest

from sweeper.record import RecordConfig, RequestCount, arecord_sweep
from sweeper.record.client import RequestSpec, stream_request
from sweeper.record.closed import closed_loop
from sweeper.record.http import RawClient
from sweeper.record.http.framing import RawResponse
from sweeper.record.http.inbox import Inbox
from sweeper.record.sse import ChunkReader, SSEParser
from sweeper.record.stamps import StampStats
from sweeper.record.workload import completion_body
from sweeper.schema import RequestTrace
from sweeper.store import load_trace_set
from sweeper.testing.server import ServerProcess, ServerThread

BusyLoop = Callable[[float], AbstractAsyncContextManager[None]]
NS_PER_MS = 1_000_000
linux_only = pytest.mark.skipif(
    sys.platform != "linux", reason="kernel receive timestamps are Linux's"
)


def _spec(rid: str, output_len: int = 8) -> RequestSpec:
    body = completion_body("tiny", "one two three", endpoint="completions",
                           output_len=output_len, ignore_eos=True)  # fmt: skip
    return RequestSpec(rid, 1, "measured", body, header_id=rid)


def _config(server: ServerProcess, tmp_path: Path, run_id: str, streams: int) -> RecordConfig:
    return RecordConfig(
        base_url=server.base_url, input_len=8, output_len=24, concurrency=[streams],
        requests_per_level=RequestCount(fixed=2 * streams), warmup=0, out=tmp_path,
        run_id=run_id, metrics_urls=[],
    )  # fmt: skip


def _flag(folder: Path) -> str:
    manifest = load_trace_set(folder).manifest
    flagged = [w for w in manifest.warnings if "read late" in w or "lagged" in w]
    assert len(flagged) == 1, manifest.warnings
    return flagged[0]


@linux_only
async def test_a_loop_blocked_by_other_work_is_not_blamed_on_parsing(
    process_server: ServerProcess, busy_loop: BusyLoop, tmp_path: Path
) -> None:
    """The loop is blocked 12 ms at a time by something that is not the recorder's parsing
    (chunks come every 5 ms): reads wait and merge, and the next requests wait too. Parsing
    took little of the time, so the warning names sending or reading with the figures, not
    parsing."""
    async with busy_loop(0.012):
        folder = await arecord_sweep(_config(process_server, tmp_path, "blocked", 2))
    warning = _flag(folder)
    assert "the lag was in sending" in warning or "the lag was in reading" in warning, warning
    assert "handling reads took" in warning and "reads waited" in warning
    assert "the lag was in parsing" not in warning


@linux_only
async def test_slow_parsing_names_parsing(
    process_server: ServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each chunk's parsing takes 4 ms (in the read callback, as the real parsing runs) for 4
    streams with a chunk every 5 ms each: the process is short of CPU for its chunks, the
    reads merge, and the warning says the lag was in parsing and that --workers would help."""
    real = ChunkReader.parse

    def slow(self: ChunkReader, data: str) -> tuple[int, str | None, object, object]:
        time.sleep(0.004)
        return real(self, data)

    monkeypatch.setattr(ChunkReader, "parse", slow)
    folder = await arecord_sweep(_config(process_server, tmp_path, "parsing", 4))
    warning = _flag(folder)
    assert "the lag was in parsing" in warning, warning
    assert "more --workers would help" in warning


@linux_only
async def test_late_sends_name_sending(process_server: ServerProcess) -> None:
    """A closed loop whose streams wait 30 ms before each next send (the loop itself free):
    the send gaps say so, reads are prompt, and the part named is the send."""
    stamps = StampStats()
    url = f"{process_server.base_url}/v1/completions"
    traces: list[RequestTrace] = []

    async def send(spec: RequestSpec, on_sent: Callable[[], None] | None) -> RequestTrace:
        await asyncio.sleep(0.03)
        return await stream_request(
            client, url, spec, endpoint="completions", origin_ns=0, timeout_s=10,
            stamps=stamps, on_sent=on_sent,
        )  # fmt: skip

    async with RawClient() as client:
        specs = [_spec(f"late-send-{i}") for i in range(8)]
        await closed_loop(specs, 2, send, lambda t: traces.append(t) is None, on_gap=stamps.add_gap)
    assert len(traces) == 8 and all(t.status == "ok" for t in traces)
    check = stamps.summary(2)
    assert check is not None
    gap = stamps.gap_p99_ms()
    assert gap is not None and gap >= 25.0
    part, sentence = stamps.lagged_part(check.read_delay_p99_ms)
    assert part == "send", sentence
    assert "next requests left" in sentence
    # The process waited, it was not busy: more processes would not help.
    assert "this process was not busy" in sentence and "more than --workers" in sentence


def test_the_parts_and_their_figures_merge_from_the_workers() -> None:
    """A worker's parse time, busy share and send gaps reach the parent: the busiest process
    decides (a parent that parsed nothing does not dilute it)."""
    busy, idle, parent = StampStats(), StampStats(), StampStats()
    for i in range(10):  # 10 reads over 9 ms, each parsed for 0.8 ms: 89 % busy
        busy.add_read(0, 1, parse_ns=800_000, read_ns=i * NS_PER_MS)
        idle.add_read(0, 1, parse_ns=10_000, read_ns=i * NS_PER_MS)
    busy.add_gap(3 * NS_PER_MS)
    for worker in (busy, idle):
        parent.merge(worker.state())
    share = parent.busy_share()
    assert share is not None and 0.85 < share < 0.92
    assert parent.parse_ns == 10 * 810_000
    assert parent.gap_p99_ms() == 3.0
    assert parent.lagged_part(5.0)[0] == "parse"
    quiet = StampStats()
    quiet.add_gap(8 * NS_PER_MS)
    assert quiet.lagged_part(2.0)[0] == "send"
    assert quiet.lagged_part(9.0)[0] == "read"
    busy_elsewhere = StampStats()
    busy_elsewhere.add_gap(8 * NS_PER_MS)
    busy_elsewhere.cpu_shares.append(0.95)  # a worker busy with something other than parsing
    part, sentence = busy_elsewhere.lagged_part(2.0)
    assert part == "send" and "busy (95% of a core), more --workers would help" in sentence
    # Without kernel stamps the figure is the event loop's lag, and it is named so.
    assert "reads waited 9.0 ms" in quiet.lagged_part(9.0)[1]
    _, lagged = quiet.lagged_part(9.0, loop_lag=True)
    assert "the event loop lagged 9.0 ms (p99)" in lagged and "reads waited" not in lagged


async def test_the_next_request_is_sent_before_the_last_is_recorded(server: ServerThread) -> None:
    """Each stream's next request is on the wire (the server has it) before the request that
    ended is settled; a failed request is settled before the next send; every request is
    settled once, the last ones when the loop ends."""
    url = f"{server.base_url}/v1/completions"
    order: list[str] = []

    async def send(spec: RequestSpec, on_sent: Callable[[], None] | None) -> RequestTrace:
        order.append(f"send {spec.request_id}")
        return await stream_request(
            client, url, spec, endpoint="completions", origin_ns=0, timeout_s=10,
            on_sent=on_sent,
        )  # fmt: skip

    def settle(trace: RequestTrace) -> bool:
        order.append(f"settle {trace.request_id}")
        return True

    async with RawClient() as client:
        specs = [_spec(f"order-{i}") for i in range(3)]
        specs[1].body = {**specs[1].body, "max_tokens": -1}  # the server refuses it: HTTP 400
        await closed_loop(specs, 1, send, settle)
    assert order == [
        "send order-0", "send order-1", "settle order-0",  # order-1 was sent first
        "settle order-1", "send order-2",  # a failure: settled before the next send
        "settle order-2",
    ]  # fmt: skip


async def test_a_cancelled_loop_still_settles_the_request_that_ended(server: ServerThread) -> None:
    url = f"{server.base_url}/v1/completions"
    settled: list[str] = []
    started = asyncio.Event()

    async def send(spec: RequestSpec, on_sent: Callable[[], None] | None) -> RequestTrace:
        if spec.request_id == "cancel-1":
            started.set()
            await asyncio.sleep(30)  # cancelled here, before it is sent
        return await stream_request(
            client, url, spec, endpoint="completions", origin_ns=0, timeout_s=10,
            on_sent=on_sent,
        )  # fmt: skip

    async with RawClient() as client:
        specs = [_spec("cancel-0"), _spec("cancel-1")]
        task = asyncio.create_task(
            closed_loop(specs, 1, send, lambda t: settled.append(t.request_id) is None)
        )
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert settled == ["cancel-0"]


async def test_connections_opened_at_once_share_one_address_lookup(
    server: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A level's first requests open their connections at once: they resolve the host once
    between them (hundreds of lookups queued on the loop's resolver threads delayed the first
    round's sends by seconds), and every request still gets its own connection."""
    loop = asyncio.get_running_loop()
    real = loop.getaddrinfo
    lookups: list[object] = []

    async def counted(*args: Any, **kwargs: Any) -> Any:
        lookups.append(args[0])
        await asyncio.sleep(0.05)  # a slow resolver: everyone arrives while it works
        return await real(*args, **kwargs)

    monkeypatch.setattr(loop, "getaddrinfo", counted)
    url = f"{server.base_url}/v1/completions"
    async with RawClient() as client:
        traces = await asyncio.gather(*(
            stream_request(client, url, _spec(f"dns-{i}"), endpoint="completions",
                           origin_ns=0, timeout_s=10)
            for i in range(12)
        ))  # fmt: skip
        assert all(t.status == "ok" for t in traces), [t.error for t in traces]
        assert client.connects == 12
    assert lookups == ["127.0.0.1"]


class _NoInbox(Inbox):
    def __init__(self) -> None:
        super().__init__(lambda: None, lambda: None)


def _chunked(events: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"


def test_whole_chunk_reads_decode_as_the_general_path_does() -> None:
    """Any split of a chunked body (reads of one chunk, several, or parts) gives the same data
    as reading it a byte at a time, and the body's end is found."""
    events = [b'data: {"n": %d}\n\n' % i for i in range(40)] + [b"data: [DONE]\n\n"]
    wire = _chunked(events)
    rng = random.Random(7)
    for _ in range(50):
        cuts = sorted(rng.sample(range(1, len(wire)), rng.randint(0, 30)))
        reads = [wire[a:b] for a, b in zip([0, *cuts], [*cuts, len(wire)], strict=True)]
        response = RawResponse(_NoInbox(), "HTTP/1.1", 200, {"transfer-encoding": "chunked"})
        assert b"".join(response._body(r) for r in reads) == b"".join(events)
        assert response._complete
    one = RawResponse(_NoInbox(), "HTTP/1.1", 200, {"transfer-encoding": "chunked"})
    assert one._body(wire[: wire.index(b"0\r\n\r\n")]) == b"".join(events)  # all whole chunks
    assert not one._complete


def test_data_only_events_parse_as_the_general_path_does() -> None:
    """Reads of whole ``data:`` events (one or several) take a fast path; a read with anything
    else (a comment, an event name, CRLF, a part of an event) goes line by line: every split
    gives the same events."""
    stream = (
        b'data: {"a": 1}\n\ndata: {"b": 2}\n\n: keep-alive\n\nevent: error\ndata: x\n\n'
        b'data: two\ndata: lines\n\ndata: {"c": 3}\r\n\r\ndata: [DONE]\n\n'
    )
    expected = [(e.data, e.event) for e in SSEParser().feed(stream)]
    assert expected == [
        ('{"a": 1}', "message"), ('{"b": 2}', "message"), ("x", "error"),
        ("two\nlines", "message"), ('{"c": 3}', "message"), ("[DONE]", "message"),
    ]  # fmt: skip
    rng = random.Random(3)
    for _ in range(100):
        cuts = sorted(rng.sample(range(1, len(stream)), rng.randint(0, 12)))
        parser = SSEParser()
        got = [
            (e.data, e.event)
            for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)
            for e in parser.feed(stream[a:b])
        ]
        assert got == expected
