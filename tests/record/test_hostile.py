"""A hostile server and hostile options (issue 16), against the scripted server over loopback:
each failure is named in one line, nothing recorded is lost, the numbers are right."""

from __future__ import annotations

import contextlib
import json
import math
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from sweeper.cli import cli
from sweeper.errors import ConfigError, ErrorRateExceeded, ServerUnreachable
from sweeper.record import RecordConfig, RequestCount, parse_levels, record_sweep, serverinfo
from sweeper.record.http import describe_exception
from sweeper.store import load_trace_set, read_manifest
from sweeper.testing.server import FaultRule, ServerThread, run_server


def _config(base_url: str, out: Path, **changes: object) -> RecordConfig:
    config = RecordConfig(
        base_url=base_url, input_len=8, output_len=5, concurrency=[1, 2],
        requests_per_level=RequestCount(fixed=6), out=out, run_id="h", scrape_interval_s=0.05,
        warmup=0,
    )  # fmt: skip
    for key, value in changes.items():
        setattr(config, key, value)
    return config


@pytest.mark.parametrize(("bad", "wire"), [("nan", "NaN"), ("inf", "Infinity"), ("many", '"many"')])
def test_bad_usage_counts_are_a_malformed_request_and_the_sweep_goes_on(
    tmp_path: Path, bad: str, wire: str
) -> None:
    rule = FaultRule(f"usage={bad}", every=4)  # every 4th generation request
    with run_server(ttft_ms=1, itl_ms=1, faults=(rule,)) as server:
        folder = record_sweep(_config(server.base_url, tmp_path, max_error_rate=1.0))
    ts = load_trace_set(folder)
    assert ts.problems == []
    assert ts.manifest.status == "complete"
    assert [lv.status for lv in ts.manifest.levels] == ["complete", "complete"]
    assert len(ts.requests) == 12  # every request recorded once
    failed = [r for r in ts.requests if r.status == "error"]
    assert len(failed) == 3  # requests 4, 8, 12 in arrival order
    for trace in failed:
        assert trace.error is not None and trace.error.kind == "malformed"
        assert f"usage.completion_tokens={wire}" in trace.error.message
        assert sum(trace.chunk_tokens) == 5 and len(trace.chunk_ns) == 5  # its chunks are kept
        assert trace.completion_tokens == 5  # the last good usage: the running one
    good = [r for r in ts.requests if r.status == "ok"]
    assert all(r.completion_tokens == 5 and r.prompt_tokens == 8 for r in good)


def test_bad_usage_on_resume_is_the_same_malformed_request(tmp_path: Path) -> None:
    """A run stopped by the error rate, resumed with a higher --max-error-rate against the same
    server: the resumed part records the bad answers as failures too, and the run completes."""
    rule = FaultRule("usage=nan", every=2)
    with run_server(ttft_ms=1, itl_ms=1, faults=(rule,)) as server:
        with pytest.raises(ErrorRateExceeded):
            record_sweep(_config(server.base_url, tmp_path, max_error_rate=0.2))
        assert read_manifest(tmp_path / "h").status == "aborted"
        folder = record_sweep(
            _config(None, tmp_path, resume=True, max_error_rate=1.0)  # type: ignore[arg-type]
        )
    ts = load_trace_set(folder)
    assert ts.manifest.status == "complete" and ts.problems == []
    assert sorted(r.request_id for r in ts.requests) == sorted(
        [f"c1-{i:05d}" for i in range(6)] + [f"c2-{i:05d}" for i in range(6)]
    )
    kinds = {r.error.kind for r in ts.requests if r.error is not None}
    assert kinds == {"malformed"}
    lines = (folder / "requests.jsonl").read_text().splitlines()
    assert all(json.loads(line) for line in lines)


def test_a_level_is_never_planned_with_fewer_requests_than_streams(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"pass --requests-per-level 4 or more"):
        record_sweep(_config("http://127.0.0.1:9", tmp_path, concurrency=[1, 4],
                             requests_per_level=RequestCount(fixed=3)))  # fmt: skip
    assert not (tmp_path / "h").exists()
    # At the minimum, the level's measured requests are all in flight at once: it reaches C=4.
    with run_server(ttft_ms=1, itl_ms=5) as server:
        folder = record_sweep(_config(server.base_url, tmp_path, concurrency=[4],
                                      requests_per_level=RequestCount(fixed=4)))  # fmt: skip
    measured = [r for r in load_trace_set(folder).requests if r.phase == "measured"]
    last_send = max(r.send_ns for r in measured)
    assert all(r.send_ns + (r.end_ns or 0) > last_send for r in measured)


@pytest.mark.parametrize("value", ["99999999999999999999", "65536"])
def test_concurrency_is_bounded_when_parsed(value: str) -> None:
    with pytest.raises(ConfigError, match="above the most a recorder can run, 65,535"):
        parse_levels(f"1,{value}")
    assert parse_levels("1,65535") == [1, 65535]


# -- where the recording goes -------------------------------------------------------------------


def test_out_that_cannot_be_created_is_an_error_naming_it(
    server: ServerThread, tmp_path: Path
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match=re.escape(f"--out {blocker}/traces: cannot create")):
        record_sweep(_config(server.base_url, blocker / "traces"))


# -- timeouts say what timed out and after how long ---------------------------------------------


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A base URL whose server accepts connections and never answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def hold() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                held.append(listener.accept()[0])

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        listener.close()


def test_a_probe_that_times_out_says_what_and_after_how_long(
    silent_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(serverinfo, "PROBE_TIMEOUT_S", 0.3)
    with pytest.raises(ServerUnreachable) as error:
        record_sweep(_config(silent_server, tmp_path))
    assert f"(ReadTimeout: {silent_server}/v1/models sent nothing for 0.3 s)" in str(error.value)


@pytest.mark.parametrize("http_client", ["raw", "httpx"])
def test_a_request_that_times_out_says_after_how_long(tmp_path: Path, http_client: str) -> None:
    with run_server(ttft_ms=1, itl_ms=1, faults=(FaultRule("stall=2000@1", every=3),)) as server:
        folder = record_sweep(
            _config(server.base_url, tmp_path, timeout_s=0.4, max_error_rate=1.0,
                    http_client=http_client)
        )  # fmt: skip
    timeouts = [r.error for r in load_trace_set(folder).requests if r.error is not None]
    assert timeouts and all(e.kind == "timeout" for e in timeouts)
    for error in timeouts:
        assert "0.4 s" in error.message, error.message
        assert error.message.rstrip(": ") not in ("ReadTimeout", "TimeoutError"), error.message


def test_an_httpx_timeout_is_described_with_its_url_and_limit() -> None:
    request = httpx.Request("GET", "http://user:pw@host:8000/metrics")
    request.extensions["timeout"] = {"connect": 10.0, "read": 5.0, "write": 5.0, "pool": None}
    assert describe_exception(httpx.ReadTimeout("", request=request)) == (
        "ReadTimeout: http://host:8000/metrics sent nothing for 5 s"
    )
    assert describe_exception(httpx.ConnectTimeout("timed out", request=request)) == (
        "ConnectTimeout: no connection to http://host:8000/metrics within 10 s"
    )
    assert describe_exception(httpx.PoolTimeout("")) == "PoolTimeout"  # no request: as before


# -- non-finite numbers from the server ---------------------------------------------------------


def test_nan_and_infinity_from_the_server_are_recorded_and_read_back(tmp_path: Path) -> None:
    """A /metrics page with NaN and +Inf gauges (an idle spec-decode acceptance rate) and a
    llama.cpp-style timings object with Infinity: the recording reads back whole, the values as
    sent, and the commands that read it work (before: null on disk, then every reader refused
    the trace set)."""
    faults = (FaultRule("timings_inf", every=2),)
    with run_server(ttft_ms=1, itl_ms=1, metrics_nonfinite=True, faults=faults) as server:
        folder = record_sweep(_config(server.base_url, tmp_path, max_error_rate=0.0))
    ts = load_trace_set(folder)
    assert ts.problems == [] and ts.manifest.status == "complete"
    timings = [r.server_timing for r in ts.requests if r.server_timing]
    assert len(timings) == 6 and all(t["prompt_per_second"] == math.inf for t in timings)
    values = {
        s.name: s.value for sample in ts.metrics for s in sample.series if "spec_decode" in s.name
    }
    assert math.isnan(values["vllm:spec_decode_draft_acceptance_rate"])
    assert values["vllm:spec_decode_mean_acceptance_length"] == math.inf
    for command in (["summary", str(folder)], ["findings", str(folder)]):
        result = CliRunner().invoke(cli, command)
        assert result.exit_code == 0, result.output
