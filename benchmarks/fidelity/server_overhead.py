"""The scripted server's own cost per chunk: is it ever the limit of the fidelity benchmark?

Starts the server in its own process, drives N streams with a minimal asyncio client (raw
sockets, no HTTP library: the cheapest client there is), and divides the server process's CPU
time by the chunks it wrote.

    python benchmarks/fidelity/server_overhead.py                 # uvloop and asyncio, 3 loads
    python benchmarks/fidelity/server_overhead.py --loop uvloop --streams 512 --itl-ms 10
"""

from __future__ import annotations

import asyncio
import json
import time

import click
import psutil

from sweeper.testing.server import spawn_server

LOADS = ((64, 0.0, 2000), (256, 5.0, 400), (512, 10.0, 200))  # streams, itl_ms, tokens


async def _one_stream(host: str, port: int, tokens: int) -> int:
    reader, writer = await asyncio.open_connection(host, port)
    body = json.dumps({"prompt": "a b c", "max_tokens": tokens, "stream": True}).encode()
    writer.write(
        b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body) + body
    )
    events = 0
    while data := await reader.read(65536):
        events += data.count(b"data: ")
    writer.close()
    return events


async def _drive(base_url: str, streams: int, tokens: int) -> int:
    host, port = base_url.removeprefix("http://").split(":")
    counts = await asyncio.gather(*[_one_stream(host, int(port), tokens) for _ in range(streams)])
    return sum(counts)


def measure(loop: str, streams: int, itl_ms: float, tokens: int) -> dict[str, float]:
    with spawn_server(itl_ms=itl_ms, ttft_ms=1, loop=loop) as server:  # type: ignore[arg-type]
        process = psutil.Process(server.pid)
        before = process.cpu_times()
        start = time.perf_counter()
        asyncio.run(_drive(server.base_url, streams, tokens))
        wall_s = time.perf_counter() - start
        after = process.cpu_times()
    cpu_s = (after.user + after.system) - (before.user + before.system)
    chunks = streams * tokens
    return {
        "loop": loop,
        "streams": streams,
        "itl_ms": itl_ms,
        "chunks": chunks,
        "wall_s": wall_s,
        "server_cpu_s": cpu_s,
        "us_per_chunk": cpu_s / chunks * 1e6,
        "chunks_per_s": chunks / wall_s,
        "server_cores": cpu_s / wall_s,
    }


@click.command()
@click.option("--loop", "loops", multiple=True, default=("uvloop", "asyncio"), show_default=True)
@click.option("--streams", type=int, default=None, help="One load instead of the default three.")
@click.option("--itl-ms", type=float, default=10.0, show_default=True)
@click.option("--tokens", type=int, default=200, show_default=True)
def main(loops: tuple[str, ...], streams: int | None, itl_ms: float, tokens: int) -> None:
    loads = ((streams, itl_ms, tokens),) if streams else LOADS
    for loop in loops:
        for n, itl, count in loads:
            r = measure(loop, n, itl, count)
            print(
                f"{r['loop']:8s} {r['streams']:4d} streams, {r['itl_ms']:4g} ms: "
                f"{r['us_per_chunk']:5.1f} us of server CPU per chunk, "
                f"{r['chunks_per_s']:8.0f} chunks/s, server {r['server_cores']:.2f} cores"
            )


if __name__ == "__main__":
    main()
