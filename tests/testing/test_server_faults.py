"""Every injectable fault, seen by a real client over loopback."""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from sweeper.errors import ConfigError
from sweeper.testing.config import FaultRule
from sweeper.testing.faults import parse_faults, split_points
from sweeper.testing.server import ServerThread, closed_port_url, run_server, spawn_server

StreamFn = Callable[..., Any]
BODY = {"prompt": "a b c", "max_tokens": 6, "stream_options": {"include_usage": True}}


def fault(spec: str, request_id: str | None = None) -> dict[str, str]:
    headers = {"X-Sweeper-Fault": spec}
    if request_id:
        headers["X-Request-Id"] = request_id
    return headers


def partial_lines(client: httpx.Client, headers: dict[str, str]) -> tuple[list[str], Exception]:
    """Lines received before the stream broke, and the error it broke with."""
    lines: list[str] = []
    with (
        pytest.raises(httpx.TransportError) as error,
        client.stream(
            "POST", "/v1/completions", json={"stream": True, **BODY}, headers=headers
        ) as response,
    ):
        lines.extend(response.iter_lines())
    return lines, error.value


def test_connection_refused() -> None:
    with pytest.raises(httpx.ConnectError):
        httpx.get(closed_port_url() + "/health", timeout=2)


def test_reset_before_response(client: httpx.Client, server: ServerThread) -> None:
    with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)) as error:
        client.post("/v1/completions", json=BODY, headers=fault("reset", "reset-1"))
    assert "reset" in str(error.value).lower() or "disconnected" in str(error.value).lower()
    truth = server.truth("reset-1")
    assert truth is not None and truth["status"] == "fault" and truth["event_kind"] == []


def test_close_before_response(client: httpx.Client) -> None:
    with pytest.raises(httpx.RemoteProtocolError, match="without sending a response"):
        client.post("/v1/completions", json=BODY, headers=fault("close"))


@pytest.mark.parametrize(
    ("spec", "status"), [("http_500", 500), ("http_400", 400), ("http=503", 503)]
)
def test_http_errors(client: httpx.Client, spec: str, status: int) -> None:
    response = client.post("/v1/completions", json=BODY, headers=fault(spec))
    assert response.status_code == status
    assert response.json()["error"]["code"] == status


def test_http_429_has_retry_after(client: httpx.Client) -> None:
    default = client.post("/v1/completions", json=BODY, headers=fault("http_429"))
    assert (default.status_code, default.headers["retry-after"]) == (429, "1")
    custom = client.post("/v1/completions", json=BODY, headers=fault("http_429,retry_after=2.5"))
    assert custom.headers["retry-after"] == "2.5"


def test_cut_mid_stream(client: httpx.Client, server: ServerThread) -> None:
    lines, error = partial_lines(client, fault("cut=3", "cut-1"))
    assert isinstance(error, httpx.RemoteProtocolError)
    data = [line for line in lines if line.startswith("data: ")]
    assert len(data) == 3
    assert "[DONE]" not in "".join(lines)
    truth = server.truth("cut-1")
    assert truth is not None and truth["status"] == "fault" and len(truth["content_ns"]) == 3


def test_malformed_line_then_stream_goes_on(client: httpx.Client, stream_request: StreamFn) -> None:
    got = stream_request(client, "/v1/completions", BODY, headers=fault("malformed=2"))
    bad = []
    for item in got.data:
        if item == "[DONE]":
            continue
        try:
            json.loads(item)
        except json.JSONDecodeError:
            bad.append(item)
    assert len(bad) == 1
    assert got.data.index(bad[0]) == 2
    assert got.data[-1] == "[DONE]"


def test_error_object_in_stream(client: httpx.Client, stream_request: StreamFn) -> None:
    got = stream_request(client, "/v1/completions", BODY, headers=fault("error=2"))
    events = got.events
    assert [bool(e.get("choices")) for e in events] == [True, True, False]
    assert events[-1]["error"]["code"] == 500
    assert got.data[-1] == "[DONE]"


def test_stall_past_client_timeout(server: ServerThread) -> None:
    with (
        httpx.Client(base_url=server.base_url, timeout=httpx.Timeout(5, read=0.3)) as client,
        pytest.raises(httpx.ReadTimeout),
        client.stream(
            "POST",
            "/v1/completions",
            json={"stream": True, **BODY},
            headers=fault("stall=800@1", "stall-1"),
        ) as response,
    ):
        for _ in response.iter_lines():
            pass
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        truth = server.truth("stall-1")
        if truth is not None and truth["status"] == "disconnected":
            break
        time.sleep(0.05)
    assert truth is not None and truth["status"] == "disconnected"
    assert len(truth["content_ns"]) == 1


def test_no_done_and_no_usage(client: httpx.Client, stream_request: StreamFn) -> None:
    got = stream_request(client, "/v1/completions", BODY, headers=fault("no_done"))
    assert got.data[-1] != "[DONE]"
    assert got.events[-1]["choices"] == [] and got.events[-1]["usage"]["completion_tokens"] == 6
    bare = stream_request(client, "/v1/completions", BODY, headers=fault("no_usage,no_done"))
    assert bare.events[-1]["choices"][0]["finish_reason"] == "length"
    assert all(e["choices"] for e in bare.events)


def test_comments_and_empty_lines(client: httpx.Client, stream_request: StreamFn) -> None:
    got = stream_request(client, "/v1/completions", BODY, headers=fault("comments"))
    assert got.lines.count(": keep-alive") == 8  # 6 content + usage + [DONE]
    assert len([e for e in got.events if e["choices"]]) == 6
    # an empty line after each comment, one after each event, and one extra
    assert got.lines.count("") >= 3 * 8


def _raw_stream(
    base_url: str, headers: dict[str, str], *, include_usage: bool = False
) -> list[bytes]:
    """POST with a plain socket and return the byte pieces exactly as recv() returned them."""
    host, port = base_url.removeprefix("http://").split(":")
    request_body: dict[str, Any] = {"stream": True, "prompt": "a", "max_tokens": 12}
    if include_usage:
        request_body["stream_options"] = {"include_usage": True}
    body = json.dumps(request_body).encode()
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    request = (
        f"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n{head}\r\n"
    ).encode() + body
    pieces: list[bytes] = []
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(request)
        while piece := sock.recv(65536):
            pieces.append(piece)
    return pieces


def test_split_writes_cut_inside_utf8() -> None:
    with run_server(ttft_ms=1, itl_ms=20, split_delay_ms=5) as server:
        pieces = _raw_stream(server.base_url, fault("split=7"))
    whole = b"".join(pieces)
    assert whole.count(b"data: ") == 13  # 12 content events and [DONE]
    split_inside_char = False
    for piece in pieces[:-1]:
        try:
            piece.decode("utf-8")
        except UnicodeDecodeError:
            split_inside_char = True
    assert split_inside_char, "no recv() boundary fell inside a multi-byte character"
    assert len(pieces) >= 13 * 2
    body = whole.split(b"\r\n\r\n", 1)[1]
    assert "héllo".encode() in body


def test_split_points_are_deterministic_and_inside() -> None:
    data = " héllo 世界".encode()
    points = split_points(data, 3)
    assert points == split_points(data, 3)
    assert all(0 < p < len(data) for p in points)
    assert any(data[p] & 0xC0 == 0x80 for p in points)


def test_delay_before_headers(client: httpx.Client) -> None:
    start = time.monotonic()
    response = client.post(
        "/v1/completions", json=BODY | {"stream": False}, headers=fault("delay=200")
    )
    assert response.status_code == 200
    assert time.monotonic() - start >= 0.2


def test_unknown_fault_is_a_400_naming_it(client: httpx.Client) -> None:
    response = client.post("/v1/completions", json=BODY, headers=fault("bogus=1"))
    assert response.status_code == 400
    assert "bogus" in response.json()["error"]["message"]
    with pytest.raises(ConfigError, match="cut"):
        parse_faults("cut=x")


def test_fault_rules_every_and_seeded_probability() -> None:
    with run_server(ttft_ms=0, itl_ms=0, faults=(FaultRule("http_500", every=3),)) as server:
        statuses = [
            httpx.post(
                f"{server.base_url}/v1/completions", json={"prompt": "a", "max_tokens": 1}
            ).status_code
            for _ in range(6)
        ]
    assert statuses == [200, 200, 500, 200, 200, 500]

    def pattern(seed: int) -> list[int]:
        rule = FaultRule("http_429", probability=0.5)
        with run_server(ttft_ms=0, itl_ms=0, faults=(rule,), seed=seed) as server:
            return [
                httpx.post(
                    f"{server.base_url}/v1/completions", json={"prompt": "a", "max_tokens": 1}
                ).status_code
                for _ in range(20)
            ]

    first = pattern(11)
    assert first == pattern(11)
    assert 200 in first and 429 in first


def test_echo_auth_puts_the_credentials_in_a_401_body(client: httpx.Client) -> None:
    headers = fault("echo_auth") | {"Authorization": "Bearer sk-echo-123", "api-key": "k-456"}
    response = client.post("/v1/completions", json=BODY, headers=headers)
    assert response.status_code == 401
    error = response.json()["error"]
    assert (error["code"], error["type"]) == (401, "AuthenticationError")
    assert "Bearer sk-echo-123" in error["message"] and "k-456" in error["message"]
    streamed = client.post(
        "/v1/completions", json={"stream": True, **BODY}, headers=fault("echo_auth,http=403")
    )
    assert streamed.status_code == 403 and "(none)" in streamed.json()["error"]["message"]


@pytest.mark.parametrize(
    ("bad", "wire"), [("nan", b"NaN"), ("inf", b"Infinity"), ("many", b'"many"')]
)
def test_bad_usage_counts_on_the_wire(server: ServerThread, bad: str, wire: bytes) -> None:
    raw = b"".join(_raw_stream(server.base_url, fault(f"usage={bad}"), include_usage=True))
    usage_line = next(line for line in raw.split(b"\n") if b'"choices":[]' in line)
    for key in (b"prompt_tokens", b"completion_tokens", b"total_tokens"):
        assert b'"' + key + b'":' + wire in usage_line
    assert raw.count(b"data: ") == 14  # 12 content events, the usage chunk, [DONE]
    with httpx.Client(base_url=server.base_url, timeout=10) as http:
        whole = http.post("/v1/completions", json=BODY, headers=fault(f"usage={bad}"))
    assert b'"completion_tokens":' + wire in whole.content
    with pytest.raises(ConfigError, match=re.escape("usage=nan|inf|many")):
        parse_faults("usage=lots")


def test_running_usage_stays_right_with_bad_final_usage(
    client: httpx.Client, stream_request: StreamFn
) -> None:
    body = BODY | {"stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    got = stream_request(client, "/v1/completions", body, headers=fault("usage=many"))
    running = [e["usage"]["completion_tokens"] for e in got.events if e["choices"]]
    assert running == [1, 2, 3, 4, 5, 6]
    assert got.events[-1]["usage"]["completion_tokens"] == "many"


def test_timings_inf_on_the_finish_chunk(server: ServerThread) -> None:
    raw = b"".join(_raw_stream(server.base_url, fault("timings_inf")))
    lines = [line for line in raw.split(b"\n") if line.startswith(b"data: {")]
    assert [b'"timings":' in line for line in lines] == [False] * 11 + [True]
    assert b'"prompt_per_second":Infinity' in lines[-1] and b'"finish_reason":"length"' in lines[-1]
    timings = json.loads(lines[-1][6:])["timings"]  # Python's json reads Infinity
    assert timings["predicted_n"] == 12 and timings["prompt_per_second"] == float("inf")
    with httpx.Client(base_url=server.base_url, timeout=10) as http:
        whole = http.post("/v1/completions", json=BODY, headers=fault("timings_inf"))
    assert b'"prompt_per_second":Infinity' in whole.content


def test_metrics_page_with_nan_and_inf() -> None:
    with run_server(ttft_ms=0, itl_ms=0, metrics_nonfinite=True) as server:
        page = httpx.get(f"{server.base_url}/metrics").text
    lines = page.splitlines()
    assert any(
        line.startswith("vllm:spec_decode_draft_acceptance_rate{") and line.endswith(" NaN")
        for line in lines
    )
    assert any(
        line.startswith("vllm:spec_decode_mean_acceptance_length{") and line.endswith(" +Inf")
        for line in lines
    )
    with run_server(ttft_ms=0, itl_ms=0) as plain:
        assert "spec_decode" not in httpx.get(f"{plain.base_url}/metrics").text


def test_metrics_nonfinite_reaches_a_server_process() -> None:
    with spawn_server(port=0, ttft_ms=0, itl_ms=0, metrics_nonfinite=True) as server:
        page = server.metrics_text()
    assert "vllm:spec_decode_draft_acceptance_rate" in page and " +Inf\n" in page
