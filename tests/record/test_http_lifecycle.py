"""The raw client's connections under stress, on the default asyncio loop and on uvloop (which
the recorder uses when installed): a close wakes whoever waits on the connection and leaves
nothing registered in the loop, and a TLS server whose first answer comes with the end of its
handshake is read, not crashed on."""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sweeper.record.client import RequestSpec, stream_request
from sweeper.record.http import ConnectionLost, Origin, RawClient, connection, open_connection
from sweeper.record.workload import completion_body
from sweeper.testing.server import ServerThread

try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop is a dependency; the default loop still runs
    uvloop = None

LOOPS = ["asyncio", *(["uvloop"] if uvloop is not None else [])]
BIG_BODY = 50_000_000  # far more than a socket buffer holds


def _run(loop: str, main: Callable[[], Awaitable[Any]]) -> Any:
    factory = uvloop.new_event_loop if loop == "uvloop" and uvloop is not None else None
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main())  # type: ignore[arg-type]


def _spec(rid: str) -> RequestSpec:
    body = completion_body("tiny", "one two", endpoint="completions", output_len=8, ignore_eos=True)
    return RequestSpec(rid, 1, "measured", body, header_id=rid)


@pytest.fixture
def silent_listener() -> Iterator[int]:
    """A port that accepts connections (in the kernel's backlog) and never reads from them."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    yield listener.getsockname()[1]
    listener.close()


@pytest.mark.parametrize("loop", LOOPS)
def test_closing_the_client_ends_a_stream_at_once(loop: str, server: ServerThread) -> None:
    """A stream the server stalls for 5 s ends as soon as the client is closed, not at its
    timeout: the close wakes the task waiting on the connection."""

    async def main() -> tuple[Any, float]:
        client = RawClient(headers={"X-Sweeper-Fault": "stall=5000@2"})
        url = f"{server.base_url}/v1/completions"
        task = asyncio.create_task(
            stream_request(client, url, _spec("stalled"), endpoint="completions",
                           origin_ns=0, timeout_s=30)
        )  # fmt: skip
        await asyncio.sleep(0.3)
        started = asyncio.get_running_loop().time()
        await client.aclose()
        trace = await asyncio.wait_for(task, 3)
        return trace, asyncio.get_running_loop().time() - started

    trace, waited = _run(loop, main)
    assert waited < 2.0
    assert trace.status == "error" and trace.error.kind == "stream_cut", trace.error
    assert len(trace.chunk_ns) == 2  # the chunks before the stall are kept


@pytest.mark.parametrize("loop", LOOPS)
def test_a_connection_closed_while_sending_frees_its_socket_number(
    loop: str, silent_listener: int, server: ServerThread
) -> None:
    """Closing a connection whose send is waiting on a full socket buffer fails the send and
    takes the socket out of the loop, so the next socket given the same number (the next
    connection) connects and streams normally."""

    async def main() -> Any:
        conn = await open_connection(Origin("http", "127.0.0.1", silent_listener))
        sending = asyncio.create_task(conn.send(b"x" * BIG_BODY))
        await asyncio.sleep(0.2)
        assert not sending.done()  # blocked on the full buffer
        conn.close()
        with pytest.raises(ConnectionLost):
            await asyncio.wait_for(sending, 2)
        async with RawClient() as client:
            return await asyncio.wait_for(
                stream_request(client, f"{server.base_url}/v1/completions", _spec("after"),
                               endpoint="completions", origin_ns=0, timeout_s=10),
                5,
            )  # fmt: skip

    trace = _run(loop, main)
    assert trace.status == "ok", trace.error


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed: no certificate for the TLS test")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", key, "-out", cert, "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def _tls_server(cert: Path, key: Path, answer: bytes) -> tuple[int, threading.Thread]:
    """A TLS 1.2 server that sends its handshake's last message and ``answer`` in one write."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def serve() -> None:
        conn, _ = listener.accept()
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = context.wrap_bio(incoming, outgoing, server_side=True)
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                if outgoing.pending:
                    conn.sendall(outgoing.read())
                incoming.write(conn.recv(65536))
        tls.write(answer)
        conn.sendall(outgoing.read())
        conn.recv(65536)  # the request (or the close)
        conn.close()
        listener.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener.getsockname()[1], thread


@pytest.mark.parametrize("loop", LOOPS)
def test_an_answer_that_comes_with_the_tls_handshake_is_read(
    loop: str, certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = certificate
    trusting = ssl.create_default_context(cafile=str(cert))
    monkeypatch.setattr(connection, "ssl_context_for", lambda origin: trusting)
    answer = b"HTTP/1.1 503 Busy\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbusy"
    port, thread = _tls_server(cert, key, answer)

    async def main() -> tuple[int, bytes]:
        url = f"https://localhost:{port}/v1/completions"
        async with RawClient() as client, client.post(url, {}) as response:
            return response.status_code, await response.aread()

    assert _run(loop, main) == (503, b"busy")
    thread.join(5)
