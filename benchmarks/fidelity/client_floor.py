"""How fast can a Python client read streams on this machine? Delivery delay per HTTP client.

The same scripted server and workload, read by: a bare asyncio client (sockets, no HTTP library:
the floor), httpx with one shared ``AsyncClient`` (what sweeper's recorder does), httpx with one
client per stream (no shared pool), and aiohttp (what ``vllm bench serve`` uses; run this script
with a Python that has it, e.g. ``.venv-vllm/bin/python``). Each chunk's receive time is matched to
the server's write time on the same clock.

    .venv/bin/python benchmarks/fidelity/client_floor.py --streams 64 --client raw,httpx,httpx-each
    .venv-vllm/bin/python benchmarks/fidelity/client_floor.py --streams 64 --client aiohttp
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Coroutine
from typing import Any

import click
import httpx
import numpy as np

from sweeper.testing.server import spawn_server
from sweeper.units import NS_PER_MS

Recv = list[tuple[int, int]]  # (monotonic ns, content events in this read)
Result = tuple[str, int, Recv]  # (request id, send ns, reads)


def _body(tokens: int) -> dict[str, Any]:
    return {"prompt": "a b", "max_tokens": tokens, "stream": True}


async def _raw(base: str, streams: int, rounds: int, tokens: int) -> list[Result]:
    host, port = base.removeprefix("http://").split(":")
    out: list[Result] = []

    async def stream(i: int) -> None:
        reader, writer = await asyncio.open_connection(host, int(port))
        for k in range(rounds):
            rid = f"raw-{i}-{k}"
            body = json.dumps(_body(tokens)).encode()
            head = (
                f"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: {len(body)}\r\n"
                f"x-request-id: {rid}\r\n\r\n"
            ).encode()
            sent = time.monotonic_ns()
            writer.write(head + body)
            reads: Recv = []
            data = b""
            while not data.endswith(b"0\r\n\r\n"):  # the chunked body's end
                data = await reader.read(65536)
                if not data:
                    break
                reads.append((time.monotonic_ns(), data.count(b'"text"')))
            out.append((rid, sent, reads))
        writer.close()

    await asyncio.gather(*(stream(i) for i in range(streams)))
    return out


async def _httpx(base: str, streams: int, rounds: int, tokens: int, shared: bool) -> list[Result]:
    out: list[Result] = []
    name = "httpx" if shared else "httpx-each"

    async def stream(client: httpx.AsyncClient, i: int) -> None:
        for k in range(rounds):
            rid = f"{name}-{i}-{k}"
            sent = time.monotonic_ns()
            reads: Recv = []
            headers = {"X-Request-Id": rid}
            async with client.stream(
                "POST", f"{base}/v1/completions", json=_body(tokens), headers=headers
            ) as response:
                async for data in response.aiter_bytes():
                    reads.append((time.monotonic_ns(), data.count(b'"text"')))
            out.append((rid, sent, reads))

    if shared:
        limits = httpx.Limits(max_connections=streams + 4)
        async with httpx.AsyncClient(limits=limits, timeout=120) as client:
            await asyncio.gather(*(stream(client, i) for i in range(streams)))
    else:
        clients = [httpx.AsyncClient(timeout=120) for _ in range(streams)]
        await asyncio.gather(*(stream(clients[i], i) for i in range(streams)))
        for client in clients:
            await client.aclose()
    return out


async def _aiohttp(base: str, streams: int, rounds: int, tokens: int) -> list[Result]:
    import aiohttp

    out: list[Result] = []

    async def stream(session: Any, i: int) -> None:
        for k in range(rounds):
            rid = f"aiohttp-{i}-{k}"
            sent = time.monotonic_ns()
            reads: Recv = []
            async with session.post(
                f"{base}/v1/completions", json=_body(tokens), headers={"X-Request-Id": rid}
            ) as response:
                async for data in response.content.iter_any():
                    reads.append((time.monotonic_ns(), data.count(b'"text"')))
            out.append((rid, sent, reads))

    connector = aiohttp.TCPConnector(limit=streams + 4)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(stream(session, i) for i in range(streams)))
    return out


CLIENTS: dict[str, Callable[[str, int, int, int], Coroutine[Any, Any, list[Result]]]] = {
    "raw": _raw,
    "httpx": lambda b, s, r, t: _httpx(b, s, r, t, shared=True),
    "httpx-each": lambda b, s, r, t: _httpx(b, s, r, t, shared=False),
    "aiohttp": _aiohttp,
}


def delays(
    results: list[Result], truths: dict[str, dict[str, Any]]
) -> tuple[np.ndarray, list[float]]:
    """Per-chunk receive - write (ms), and per-request TTFT overhead (client - server, ms)."""
    delay: list[float] = []
    ttft: list[float] = []
    for rid, sent, reads in results:
        truth = truths[rid]
        written = truth["content_ns"]
        seen = 0
        first = None
        for t_ns, count in reads:
            if not count:
                continue
            first = first or t_ns
            seen += count
            delay.append((t_ns - written[min(seen, len(written)) - 1]) / NS_PER_MS)
        if first is not None:
            server = written[0] - truth["received_ns"]
            ttft.append((first - sent - server) / NS_PER_MS)
    return np.asarray(delay), ttft


@click.command()
@click.option("--client", "clients", default="raw,httpx,httpx-each", show_default=True)
@click.option("--streams", default=64, show_default=True)
@click.option("--rounds", default=2, show_default=True, help="Requests per stream.")
@click.option("--tokens", default=64, show_default=True)
@click.option("--itl-ms", default=10.0, show_default=True)
def main(clients: str, streams: int, rounds: int, tokens: int, itl_ms: float) -> None:
    import uvloop

    for name in clients.split(","):
        with spawn_server(itl_ms=itl_ms, ttft_ms=20) as server:
            results: list[Result] = uvloop.run(
                CLIENTS[name](server.base_url, streams, rounds, tokens)
            )
            truths = {t["request_id"]: t for t in server.truths()}
        delay, ttft = delays(results, truths)
        print(
            f"{name:10s} {streams:4d} streams: delivery p50 {np.percentile(delay, 50):7.2f} "
            f"p99 {np.percentile(delay, 99):8.2f} max {delay.max():8.1f} ms; TTFT overhead p50 "
            f"{np.percentile(ttft, 50):7.2f} p99 {np.percentile(ttft, 99):8.2f} ms"
        )


if __name__ == "__main__":
    main()
