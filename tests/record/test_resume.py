"""``--resume`` against the scripted server over loopback: a resumed level is one level (its
earlier failures count in the error rate, each stretch is kept as an attempt), and options that
differ from the run's are refused with the differences, or applied and said."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from sweeper.errors import ConfigError, ErrorRateExceeded
from sweeper.record import RecordConfig, RequestCount, record_sweep
from sweeper.record.recorder import arecord_sweep
from sweeper.store import load_trace_set, read_manifest
from sweeper.testing.server import FaultRule, run_server


def _config(base_url: str | None, out: Path, **changes: object) -> RecordConfig:
    config = RecordConfig(
        base_url=base_url, input_len=8, output_len=4, concurrency=[1], warmup=0,
        requests_per_level=RequestCount(fixed=10), out=out, run_id="r", scrape_interval_s=0.05,
    )  # fmt: skip
    for key, value in changes.items():
        setattr(config, key, value)
    return config


def _aborted_run(out: Path, **changes: object) -> None:
    """A run stopped by its error rate: every second request fails (HTTP 500)."""
    with run_server(ttft_ms=1, itl_ms=1, faults=(FaultRule("http_500", every=2),)) as server:
        config = _config(server.base_url, out, **changes)
        with pytest.raises(ErrorRateExceeded, match="passed --max-error-rate"):
            record_sweep(config)


def _resume(out: Path, **changes: object) -> RecordConfig:
    config = RecordConfig(out=out, run_id="r", resume=True, scrape_interval_s=0.05)
    for key, value in changes.items():
        setattr(config, key, value)
    return config


def test_a_resumed_level_keeps_its_failures_in_its_error_rate(tmp_path: Path) -> None:
    """4 of the first 8 requests fail (HTTP 500), the level stops (4 > 30% of 10). Resumed
    against a healthy server with the same rate, it can no longer pass: aborted again, nothing
    sent (before: the resumed part alone, 0 failures in 2, passed and the level was marked
    complete). Resumed with --max-error-rate 0.5, the level as a whole (4 in 10) passes."""
    _aborted_run(tmp_path, max_error_rate=0.3)
    assert "4 of 8" in (read_manifest(tmp_path / "r").levels[0].message or "")
    with run_server(ttft_ms=1, itl_ms=1) as healthy:
        with pytest.raises(
            ErrorRateExceeded,
            match=r"50% \(4 of 8 measured requests, 8 of them recorded before this resume\)",
        ):
            record_sweep(_resume(tmp_path, base_url=healthy.base_url, max_error_rate=0.3))
        ts = load_trace_set(tmp_path / "r")
        assert len(ts.requests) == 8 and ts.manifest.levels[0].status == "aborted"
        assert [a.outcome for a in ts.manifest.levels[0].attempts] == ["aborted", "aborted"]
        # Above the rate the user accepts now: the level passes, as a whole.
        record_sweep(_resume(tmp_path, base_url=healthy.base_url, max_error_rate=0.5))
    ts = load_trace_set(tmp_path / "r")
    level = ts.manifest.levels[0]
    assert (ts.manifest.status, level.status) == ("complete", "complete")
    assert sorted(r.request_id for r in ts.requests) == [f"c1-{i:05d}" for i in range(10)]
    assert sum(r.status == "error" for r in ts.requests) == 4  # the old failures are kept
    assert [a.outcome for a in level.attempts] == ["aborted", "aborted", "complete"]
    assert any("--max-error-rate 0.5" in w for w in ts.manifest.warnings)


def test_an_interrupted_level_keeps_each_attempt_with_its_times(tmp_path: Path) -> None:
    with run_server(ttft_ms=1, itl_ms=20) as server:
        config = _config(server.base_url, tmp_path, concurrency=[2], output_len=6)

        async def interrupted() -> None:
            task = asyncio.create_task(arecord_sweep(config))
            requests = tmp_path / "r" / "requests.jsonl"
            while not (requests.exists() and requests.read_text().count("\n") >= 3):
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(interrupted())
        first = read_manifest(tmp_path / "r").levels[0]
        assert first.status == "interrupted"
        assert [a.outcome for a in first.attempts] == ["interrupted"]
        asyncio.run(asyncio.sleep(0.3))  # the pause
        record_sweep(_resume(tmp_path))
    ts = load_trace_set(tmp_path / "r")
    level = ts.manifest.levels[0]
    assert level.status == "complete" and ts.problems == []
    one, two = level.attempts
    assert (one.outcome, two.outcome) == ("interrupted", "complete")
    assert one.end_ns is not None and two.end_ns is not None
    assert level.start_ns == one.start_ns < one.end_ns < two.start_ns < two.end_ns == level.end_ns
    assert two.start_ns - one.end_ns >= 300_000_000
    # Every request of the level lies inside one of its attempts.
    for trace in ts.requests:
        if trace.status == "cancelled":
            continue
        end = trace.send_ns + (trace.end_ns or 0)
        assert any(a.start_ns <= trace.send_ns and end <= (a.end_ns or 0) for a in level.attempts)


def test_an_attempt_left_open_by_a_killed_recorder_ends_at_its_last_request(
    tmp_path: Path,
) -> None:
    _aborted_run(tmp_path, max_error_rate=0.0)
    with run_server(ttft_ms=1, itl_ms=1) as server:
        # What kill -9 leaves: the level running, its attempt open, the run "running".
        path = tmp_path / "r" / "manifest.json"
        data = json.loads(path.read_text())
        data["status"] = "running"
        data["levels"][0].update(status="running", end_ns=None, message=None)
        data["levels"][0]["attempts"][0].update(end_ns=None, outcome=None)
        path.write_text(json.dumps(data))
        before = load_trace_set(tmp_path / "r").requests
        last_end = max(r.send_ns + (r.end_ns or 0) for r in before)
        record_sweep(_resume(tmp_path, base_url=server.base_url, max_error_rate=1.0))
    killed, resumed = read_manifest(tmp_path / "r").levels[0].attempts
    assert (killed.outcome, killed.end_ns) == ("killed", last_end)
    assert resumed.outcome == "complete" and resumed.start_ns > last_end


def test_resume_refuses_options_that_change_what_is_measured(tmp_path: Path) -> None:
    _aborted_run(tmp_path, labels={"flags": "default"})
    before = (tmp_path / "r" / "manifest.json").read_text()
    changed = _resume(
        tmp_path, concurrency=[1, 4], output_len=16, endpoint="chat",
        labels={"flags": "other"}, requests_per_level=RequestCount(factor=4),
        given=frozenset({"concurrency", "output_len", "endpoint", "labels", "requests_per_level"}),
    )  # fmt: skip
    with pytest.raises(ConfigError) as refused:
        record_sweep(changed)  # refused before any request: no server needed
    message = str(refused.value)
    rows = [" ".join(line.split()) for line in message.splitlines()[1:]]
    assert "5 option(s) differ from run 'r'" in message.splitlines()[0]
    assert rows == [
        "--endpoint recorded completions, given chat",
        "--output-len recorded 4, given 16",
        "--concurrency recorded 1, given 1,4",
        "--requests-per-level recorded C=1: 10, C=4: none, given C=1: 8, C=4: 16",
        "--label recorded flags=default, given flags=other",
    ]
    assert (tmp_path / "r" / "manifest.json").read_text() == before  # nothing touched


def test_resume_with_the_same_options_or_safe_ones_goes_on_and_says_so(tmp_path: Path) -> None:
    _aborted_run(tmp_path, tp=2)
    with run_server(ttft_ms=1, itl_ms=1) as healthy:
        # The run's own options given again, plus a new server address, timeout and error rate.
        again = _config(
            f"http://user:pw@{healthy.base_url.removeprefix('http://')}/v1", tmp_path,
            resume=True, timeout_s=30.0, max_error_rate=1.0, tp=2, max_num_seqs=8,
        )  # fmt: skip
        folder = record_sweep(again)
    manifest = read_manifest(folder)
    assert manifest.status == "complete"
    notes = [w for w in manifest.warnings if w.startswith("resumed")]
    assert any(
        f"resumed against {healthy.base_url} (recorded: " in n and "pw" not in n for n in notes
    )
    assert any("--timeout 30: applied to the requests sent from now on" in n for n in notes)
    assert any("--max-error-rate 1" in n for n in notes)
    assert any("--max-num-seqs 8 (the run had no such fact): added" in n for n in notes)
    assert manifest.server.config.max_num_seqs is not None
    assert manifest.server.config.max_num_seqs.value == 8
    assert manifest.server.config.tensor_parallel_size is not None
    assert manifest.target.base_url is not None and "pw" not in manifest.target.base_url


def test_resume_refuses_a_server_fact_that_contradicts_the_run(tmp_path: Path) -> None:
    _aborted_run(tmp_path, tp=2)
    with pytest.raises(ConfigError, match=r"--tp\s+recorded 2, given 4"):
        record_sweep(_resume(tmp_path, tp=4))


def test_resume_refuses_a_run_that_plans_fewer_requests_than_streams(tmp_path: Path) -> None:
    _aborted_run(tmp_path, concurrency=[1, 4])
    # As a run recorded before such counts were refused would have it.
    path = tmp_path / "r" / "manifest.json"
    data = json.loads(path.read_text())
    data["workload"]["requests_per_level"]["4"] = 2
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=r"C=4 \(2 requests\)"):
        record_sweep(_resume(tmp_path))
