"""The recorder's CPU per socket read on its own, without sockets or a server: each read's bytes
go through the same code as in a recording (the connection's inbox, the chunked framing, the SSE
parser, the chunk's JSON, the level's read figures), for S streams interleaved, a fresh bytes
object per read.

    .venv/bin/python benchmarks/read_path.py                 # 1, 256 and 1024 streams
    .venv/bin/python benchmarks/read_path.py --streams 1,64 --rounds 30

The baseline is one stream, measured in the same run: the ratio says what many streams' state
costs (caches) on top of the work itself. Compare it with a recording's CPU per token
(benchmarks/recorder_fidelity.py): the difference is what the event loop, the system calls and
the machine's other processes add (docs/fidelity.md, "CPU per token").
"""

from __future__ import annotations

import argparse
import asyncio
import time

from sweeper.record.client import _read_raw, _Stream
from sweeper.record.http.framing import RawResponse
from sweeper.record.http.inbox import Inbox
from sweeper.record.sse import ChunkReader
from sweeper.record.stamps import StampStats

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
PROMPT_TOKENS = 32


def _event(index: int, *, last: bool) -> bytes:
    """One chunk as vLLM's /v1/completions streams it with running usage."""
    reason = '"length"' if last else "null"
    return (
        'data: {"id":"cmpl-0c5b2e","object":"text_completion","created":1796296055,'
        '"model":"tiny","choices":[{"index":0,"text":" quick","logprobs":null,'
        f'"finish_reason":{reason},"stop_reason":null}}],"usage":{{"prompt_tokens":'
        f'{PROMPT_TOKENS},"total_tokens":{PROMPT_TOKENS + index},"completion_tokens":{index}}}}}'
        "\n\n"
    ).encode()


def _framed(body: bytes) -> bytes:
    return b"%x\r\n" % len(body) + body + b"\r\n"


def stream_reads(tokens: int) -> list[bytes]:
    """One response body, a read per chunk, as the scripted server writes it."""
    reads = [_framed(_event(i, last=i == tokens)) for i in range(1, tokens + 1)]
    reads.append(_framed(b"data: [DONE]\n\n") + b"0\r\n\r\n")
    return reads


async def one_round(streams: int, tokens: int, stamps: StampStats) -> float:
    """CPU µs per read over one round: every stream's reads, interleaved."""
    reads = stream_reads(tokens)
    running = []
    for _ in range(streams):
        inbox = Inbox(lambda: None, lambda: None)
        inbox.feed_read(HEAD, 0, None)
        response = await RawResponse.read_head(inbox)
        state = _Stream()
        task = asyncio.ensure_future(
            _read_raw(response, state, ChunkReader(), time.monotonic_ns, 0, stamps)
        )
        running.append((inbox, state, task, [bytes(bytearray(r)) for r in reads]))
    await asyncio.sleep(0)  # every stream waits on its body
    start = time.process_time_ns()
    for i in range(len(reads)):
        for inbox, _, _, own in running:
            inbox.feed_read(own[i], 1_000 + i, 5)
    cpu = time.process_time_ns() - start
    for _, state, task, _ in running:
        await task
        if sum(state.chunk_tokens) != tokens:
            raise SystemExit(
                f"the body path counted {sum(state.chunk_tokens)} tokens, not {tokens}"
            )
    return cpu / (streams * len(reads)) / 1_000


async def measure(streams: int, tokens: int, rounds: int) -> tuple[float, float]:
    """(min, median) CPU µs per read over ``rounds`` rounds; the min is the work's own cost,
    the rest is the machine's interference."""
    stamps = StampStats()
    times = sorted([await one_round(streams, tokens, stamps) for _ in range(rounds)])
    return times[0], times[len(times) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", default="1,256,1024", help="stream counts, comma-separated")
    parser.add_argument("--tokens", type=int, default=64, help="chunks per response")
    parser.add_argument("--rounds", type=int, default=15, help="rounds per stream count")
    args = parser.parse_args()
    counts = [int(x) for x in args.streams.split(",")]
    if not counts or min(counts) < 1 or args.tokens < 1 or args.rounds < 1:
        parser.error("--streams, --tokens and --rounds take whole numbers >= 1")
    try:
        import uvloop

        run = uvloop.run  # what the recorder runs on
    except ImportError:
        run = asyncio.run
    baseline = run(measure(1, args.tokens, args.rounds))[0]
    print(f"CPU per read, {args.tokens} chunks a response, min / median of {args.rounds} rounds")
    print(f"{'streams':>8} {'min µs':>8} {'median µs':>10} {'min vs 1 stream':>16}")
    for count in counts:
        low, mid = run(measure(count, args.tokens, args.rounds))
        print(f"{count:>8} {low:>8.2f} {mid:>10.2f} {low / baseline:>15.2f}x")


if __name__ == "__main__":
    main()
