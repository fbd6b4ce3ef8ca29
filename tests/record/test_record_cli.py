"""``sweeper record`` as users run it: click's CliRunner for options and messages, and a real
subprocess for what only a process can show (kill -9, Ctrl-C, --resume)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from sweeper.cli import cli
from sweeper.store import load_trace_set, read_manifest
from sweeper.testing.server import (
    FaultRule,
    ServerThread,
    closed_port_url,
    run_server,
    spawn_server,
)

SECRET = "sk-env-5ecret-never-on-disk"
WAIT_S = 30.0


def test_help_teaches_every_option_with_defaults() -> None:
    result = CliRunner().invoke(cli, ["record", "--help"])
    assert result.exit_code == 0
    for option in (
        "--base-url", "--model", "--endpoint", "--input-len", "--output-len", "--concurrency",
        "--requests-per-level", "--warmup", "--metrics-url", "--scrape-interval", "--server-log",
        "--gpu", "--gpu-count", "--tp", "--label", "--api-key", "--out", "--run-id", "--resume",
        "--timeout", "--max-error-rate", "OPENAI_API_KEY", "1,2,4,8,16,32,64",
        "Examples:",
    ):  # fmt: skip
        assert option in result.output, option
    flat = " ".join(result.output.split())
    for words in (
        "a rate level's arrival times, a dataset's prompt order",  # --seed seeds more than text
        "for concurrency levels. Rate levels",
        "a count, default 100",
        "With --request-rate (or a --dataset mooncake: replay) only: at most N requests",
        "With --request-rate only: seconds of arrivals per level",
    ):
        assert words in flat, words


def test_record_with_key_from_environment(server: ServerThread, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli,
        [
            "record",
            "--base-url",
            server.base_url + "/v1",
            "--input-len",
            "16",
            "--output-len",
            "4",
            "--concurrency",
            "1,2",
            "--requests-per-level",
            "3",
            "--out",
            str(tmp_path),
            "--run-id",
            "cli",
            "--label",
            "case=cli",
            "--quiet",
        ],
        env={"OPENAI_API_KEY": SECRET},
    )
    assert result.exit_code == 0, result.output
    assert f"recorded {tmp_path / 'cli'}" in result.output
    ts = load_trace_set(tmp_path / "cli")
    assert ts.manifest.status == "complete" and len(ts.requests) == (1 + 3) + (2 + 3)
    assert ts.manifest.labels == {"case": "cli"}
    for path in (tmp_path / "cli").rglob("*"):
        assert SECRET not in path.read_text(errors="replace"), path


def test_unreachable_server_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["record", "--base-url", closed_port_url(), "--out", str(tmp_path)]
    )
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: cannot reach the server at")


def test_error_rate_exit_status_and_message(tmp_path: Path) -> None:
    with run_server(ttft_ms=1, itl_ms=1, faults=(FaultRule("http_429", probability=1.0),)) as srv:
        result = CliRunner().invoke(
            cli,
            [
                "record",
                "--base-url",
                srv.base_url,
                "--input-len",
                "8",
                "--output-len",
                "2",
                "--concurrency",
                "2",
                "--out",
                str(tmp_path),
                "--run-id",
                "e",
                "--quiet",
            ],
        )
    assert result.exit_code == 1
    assert "Error: stopped the sweep at concurrency 2: error rate 100%" in result.output
    assert "http 429" in result.output
    assert read_manifest(tmp_path / "e").status == "aborted"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "1,0"], "not a positive integer"),
        (["--requests-per-level", "many"], "neither a count"),
        (["--warmup", "x"], "neither a count"),
        (["--label", "novalue"], "is not key=value"),
        (["--run-id", "../up"], "not safe as a folder name"),
        (["--concurrency", "99999999999999999999"], "above the most a recorder can run, 65,535"),
        (["--requests-per-level", "99999999999x"], "is above 10,000,000 requests"),
        (["--warmup", "99999999999999999999"], "--warmup 99999999999999999999 must be 0 to"),
        (["--output-len", "99999999999999999999"], "--output-len 99999999999999999999 is above"),
        (
            ["--concurrency", "1,8,16,32", "--requests-per-level", "8"],
            "--requests-per-level 8 is fewer measured requests than streams at C=16 (8 requests), "
            "C=32 (8 requests)",
        ),
        (["--concurrency", "1,16", "--requests-per-level", "8"], "--requests-per-level 16 or more"),
        # rate-only options in a closed loop: refused, not silently dropped (issue 12)
        (
            ["--concurrency", "1", "--max-concurrency", "4"],
            "--max-concurrency applies to rate levels: add --request-rate (e.g. 1,2,4), or leave "
            "out --max-concurrency",
        ),
        (["--concurrency", "1", "--duration", "5"], "--duration applies to rate levels"),
        (["--max-concurrency", "4"], "--max-concurrency applies to rate levels"),
        (["--concurrency", "1", "--burstiness", "2"], "--burstiness shapes rate levels"),
    ],
)
def test_bad_options_are_usage_errors(args: list[str], message: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["record", "--base-url", "http://127.0.0.1:9", "--out", str(tmp_path), *args]
    )
    assert result.exit_code == 2
    assert message in " ".join(result.output.split()), result.output
    assert "Traceback" not in result.output


def test_a_replay_takes_max_concurrency_but_not_duration(tmp_path: Path) -> None:
    """A Mooncake replay caps its requests in flight with --max-concurrency (past the options'
    check: the unreachable server is what stops it); --duration there is refused (issue 12)."""
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [0]}\n')
    common = ["record", "--base-url", "http://127.0.0.1:9", "--out", str(tmp_path)]
    replay = [*common, "--dataset", f"mooncake:{trace}"]
    capped = CliRunner().invoke(cli, [*replay, "--max-concurrency", "2"])
    assert capped.exit_code == 1 and "max-concurrency" not in capped.output, capped.output
    timed = CliRunner().invoke(cli, [*replay, "--duration", "5"])
    assert timed.exit_code == 2
    assert (
        "--duration with --dataset mooncake:...: a replay sends the trace's requests"
        in " ".join(timed.output.split())
    )


# ---------------------------------------------------------------------------------------------
# a real process: kill -9, Ctrl-C, --resume


def _start(base_url: str, out: Path, *extra: str) -> subprocess.Popen[str]:
    command = [
        str(Path(sys.executable).with_name("sweeper")), "record", "--base-url", base_url, "--input-len", "16",
        "--output-len", "12", "--concurrency", "1,2", "--requests-per-level", "6", "--out", str(out),
        "--run-id", "r", "--scrape-interval", "0.2", *extra,
    ]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _lines(folder: Path) -> int:
    return sum(p.read_text().count("\n") for p in folder.glob("requests*.jsonl"))


def _wait_for_lines(folder: Path, count: int, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if _lines(folder) >= count:
            return
        if proc.poll() is not None:
            raise AssertionError(f"recorder ended early: {proc.communicate()}")
        time.sleep(0.01)
    raise AssertionError(f"{folder} never reached {count} request lines")


def _check_complete(folder: Path) -> None:
    ts = load_trace_set(folder)
    assert ts.problems == []
    assert ts.manifest.status == "complete"
    ids = [r.request_id for r in ts.requests]
    assert len(ids) == len(set(ids)), "a request was recorded twice"
    assert sorted(ids) == sorted(
        [f"c1-{i:05d}" for i in range(1 + 6)] + [f"c2-{i:05d}" for i in range(2 + 6)]
    )
    assert all(r.status == "ok" for r in ts.requests)
    assert [lv.status for lv in ts.manifest.levels] == ["complete", "complete"]


def _sweeper(*args: str) -> subprocess.CompletedProcess[str]:
    command = [str(Path(sys.executable).with_name("sweeper")), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=WAIT_S, check=False)


def test_kill_9_leaves_a_readable_trace_set_and_resume_finishes_it(tmp_path: Path) -> None:
    with spawn_server(ttft_ms=5, itl_ms=10) as srv:
        proc = _start(srv.base_url, tmp_path)
        requests = tmp_path / "r" / "requests.jsonl"
        _wait_for_lines(tmp_path / "r", 3, proc)
        proc.kill()  # SIGKILL: no cleanup at all
        proc.communicate(timeout=WAIT_S)
        ts = load_trace_set(tmp_path / "r")
        assert ts.manifest.status == "running"  # nobody got to say otherwise
        assert 3 <= len(ts.requests) < 7 + 8
        # As if the kill had landed half-way through writing a line.
        with requests.open("a") as fh:
            fh.write('{"concurrency": 1, "request_id": "c1-0')
        assert any("truncated" in p for p in load_trace_set(tmp_path / "r").problems)
        # Its recorder may still be writing, as far as anyone can tell: not compacted.
        refused = _sweeper("compact", str(tmp_path / "r"))
        assert refused.returncode == 1 and "still being recorded" in refused.stderr
        assert requests.exists()
        # Everything else (base URL, lengths, levels, run id) comes from the manifest.
        command = [
            str(Path(sys.executable).with_name("sweeper")),
            "record",
            "--resume",
            "--out",
            str(tmp_path),
        ]
        resumed = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        out, err = resumed.communicate(timeout=WAIT_S)
        assert resumed.returncode == 0, err
        assert "recorded" in out
    _check_complete(tmp_path / "r")
    # The killed stretch ends at the last request it wrote; the resume is a stretch of its own.
    killed = read_manifest(tmp_path / "r").levels[0]
    assert [a.outcome for a in killed.attempts] == ["killed", "complete"]
    assert killed.attempts[0].end_ns is not None
    assert killed.attempts[0].end_ns <= killed.attempts[1].start_ns


def test_a_run_being_recorded_is_not_resumed_or_compacted_by_another_process(
    tmp_path: Path,
) -> None:
    """The recorder holds the trace set's lock: a second `--resume` of the same run, or a
    compaction, is refused while it records, and the recording finishes untouched. (100 ms a
    token: the run lasts about 13 s, ample for two commands to start on a loaded machine.)"""
    with spawn_server(ttft_ms=5, itl_ms=100) as srv:
        proc = _start(srv.base_url, tmp_path)
        _wait_for_lines(tmp_path / "r", 2, proc)
        second = _sweeper("record", "--resume", "--run-id", "r", "--out", str(tmp_path))
        assert second.returncode == 1
        assert "in use by another sweeper process" in second.stderr
        assert "resume it after it has finished" in second.stderr
        compacting = _sweeper("compact", str(tmp_path / "r"))
        assert compacting.returncode == 1 and "in use by another" in compacting.stderr
        assert proc.poll() is None, "the refused commands stopped the recording"
        _, err = proc.communicate(timeout=WAIT_S)
        assert proc.returncode == 0, err
    _check_complete(tmp_path / "r")


@pytest.mark.parametrize("workers", ["1", "2"])
def test_ctrl_c_marks_the_run_incomplete_then_resume(tmp_path: Path, workers: str) -> None:
    # 40 ms a token: level 2 lasts about 2 s, so the signal lands inside it even when a loaded
    # machine delays this test's polling by hundreds of milliseconds.
    with spawn_server(ttft_ms=5, itl_ms=40) as srv:
        proc = _start(srv.base_url, tmp_path, "--workers", workers)
        _wait_for_lines(tmp_path / "r", 8, proc)  # inside level 2
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=WAIT_S)
        assert proc.returncode == 130, err
        assert "--resume --run-id r" in err
        manifest = read_manifest(tmp_path / "r")
        assert manifest.status == "incomplete"
        assert [lv.status for lv in manifest.levels] == ["complete", "interrupted"]
        kept = json.loads((tmp_path / "r" / "manifest.json").read_text())["levels"][1]["message"]
        assert "resume" in kept
        # Compacted while interrupted: the resumed run appends plain files beside the .gz ones.
        compacted = _sweeper("compact", str(tmp_path / "r"))
        assert compacted.returncode == 0, compacted.stderr
        assert "requests.jsonl.gz" in compacted.stdout
        assert not list((tmp_path / "r").glob("*.jsonl"))
        resumed = _start(srv.base_url, tmp_path, "--resume", "--workers", workers)
        _, err = resumed.communicate(timeout=WAIT_S)
        assert resumed.returncode == 0, err
    _check_complete(tmp_path / "r")
    levels = read_manifest(tmp_path / "r").levels
    assert [[a.outcome for a in lv.attempts] for lv in levels] == [
        ["complete"],
        ["interrupted", "complete"],
    ]
    # The run's own options given again: nothing to say about them.
    assert not [w for w in read_manifest(tmp_path / "r").warnings if w.startswith("resumed")]


def test_resume_refuses_changed_options_and_applies_safe_ones(tmp_path: Path) -> None:
    with spawn_server(ttft_ms=1, itl_ms=1, faults=(FaultRule("http_500", every=2),)) as srv:
        first = _start(srv.base_url, tmp_path, "--timeout", "30", "--label", "flags=default")
        _, err = first.communicate(timeout=WAIT_S)
        assert first.returncode == 1 and "passed --max-error-rate 0.2" in err
    with spawn_server(ttft_ms=1, itl_ms=1) as srv:
        base = ["record", "--resume", "--run-id", "r", "--out", str(tmp_path), "--quiet"]
        changed = _sweeper(*base, "--concurrency", "1,2,4", "--output-len", "9", "--label", "x=y")
        assert changed.returncode == 1
        assert "Traceback" not in changed.stderr
        rows = [" ".join(line.split()) for line in changed.stderr.splitlines()[1:]]
        assert rows == [
            "--output-len recorded 12, given 9",
            "--concurrency recorded 1,2, given 1,2,4",
            "--label recorded flags=default, given x=y",
        ], changed.stderr
        assert read_manifest(tmp_path / "r").status == "aborted"  # untouched
        applied = _sweeper(*base, "--base-url", srv.base_url, "--max-error-rate", "1")
        assert applied.returncode == 0, applied.stderr
    manifest = read_manifest(tmp_path / "r")
    assert manifest.status == "complete"
    notes = [w for w in manifest.warnings if w.startswith("resumed")]
    assert any(
        "--max-error-rate 1 (the run's first part: 0.2): applied to the requests sent from now on"
        in n
        for n in notes
    ), notes
    assert any(f"resumed against {srv.base_url} (recorded: " in n for n in notes), notes
    assert not any("--timeout" in n for n in notes), notes  # the run's own 30 s, inherited


def test_out_under_a_file_or_not_writable_is_one_line_naming_the_path(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    # Unwritable: a folder without write permission; as root, where permissions do not hold,
    # a folder of sysfs (no new files there, whoever asks).
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    unwritable = locked / "traces" if os.geteuid() != 0 else Path("/sys/sweeper-traces")
    cases = [
        (blocker / "traces", f"Error: --out {blocker}/traces is under {blocker}, a file, not a folder"),
        (unwritable, f"Error: --out {unwritable}: cannot write there (in {unwritable.parent}): "),
    ]  # fmt: skip
    for out, message in cases:
        result = CliRunner().invoke(
            cli, ["record", "--base-url", closed_port_url(), "--out", str(out), "--quiet"]
        )
        assert result.exit_code == 1, result.output
        assert result.output.startswith(message), result.output
        assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output
    assert not (tmp_path / "file" / "traces").exists() and list(locked.iterdir()) == []


def test_ctrl_c_during_the_server_probe_says_there_is_nothing_to_resume(tmp_path: Path) -> None:
    accepted = threading.Event()
    with socket.create_server(("127.0.0.1", 0)) as listener:
        held: list[socket.socket] = []

        def hold() -> None:  # accept the probe's connection and never answer it
            held.append(listener.accept()[0])
            accepted.set()

        threading.Thread(target=hold, daemon=True).start()
        proc = _start(f"http://127.0.0.1:{listener.getsockname()[1]}", tmp_path)
        assert accepted.wait(WAIT_S), "the recorder never probed the server"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=WAIT_S)
        for conn in held:
            conn.close()
    assert proc.returncode == 130, err
    assert "interrupted before anything was recorded: there is no run to resume" in err
    assert "None" not in err and "--resume" not in err
    assert not (tmp_path / "r").exists()
