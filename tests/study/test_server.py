"""The server's pid file and the reaping of a server a killed study left: matched on its pid and
start time (a console script's command line is not its argv), its process group ended."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sweeper.study import server as server_module
from sweeper.study.server import (
    ServerProcess,
    process_start_time,
    reap_stale_server,
    write_pid_file,
)
from tests.study.helpers import alive, wait_for

# A console script (as `vllm` is): its command line is [python, /path/script, ...], not its argv.
STUBBORN = f"""#!{sys.executable}
import signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
time.sleep(600)
"""


def _stubborn(tmp_path: Path) -> tuple[Path, subprocess.Popen[bytes]]:
    script = tmp_path / "stubborn-server"
    script.write_text(STUBBORN)
    script.chmod(0o755)
    process = subprocess.Popen(
        [str(script), "--api-key", "sk-pid-file-secret"],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert process.stdout is not None
    with process.stdout:
        assert process.stdout.readline() == b"ready\n"
    return script, process


def test_a_stale_console_script_server_that_ignores_sigterm_is_reaped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server_module, "STOP_GRACE_S", 0.5)
    _, process = _stubborn(tmp_path)
    pid_file = tmp_path / "server.pid"
    try:
        write_pid_file(pid_file, process.pid)
        data = json.loads(pid_file.read_text())
        assert data == {
            "pid": process.pid, "pgid": process.pid, "start_time": process_start_time(process.pid)
        }  # fmt: skip
        assert "sk-pid-file-secret" not in pid_file.read_text()
        note = reap_stale_server(pid_file)
        assert note and str(process.pid) in note
        process.wait(timeout=10)
        assert not alive(process.pid)
        assert not pid_file.exists()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def test_a_pid_now_of_another_process_is_left_alone(tmp_path: Path) -> None:
    _, process = _stubborn(tmp_path)
    pid_file = tmp_path / "server.pid"
    try:
        started = process_start_time(process.pid)
        assert started is not None
        data = {"pid": process.pid, "pgid": process.pid, "start_time": started - 1}
        pid_file.write_text(json.dumps(data))
        assert reap_stale_server(pid_file) is None
        assert alive(process.pid)
        assert not pid_file.exists()
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def test_a_pid_file_that_cannot_be_written_stops_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[int] = []

    def fail(path: Path, pid: int) -> None:
        started.append(pid)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(server_module, "write_pid_file", fail)
    server = ServerProcess(
        [sys.executable, "-c", "import time; time.sleep(600)"],
        {},
        1,
        tmp_path / "server.log",
        tmp_path / "server.pid",
    )
    with pytest.raises(OSError, match="No space left"):
        server.start()
    assert started and wait_for(lambda: not alive(started[0]), timeout_s=30)
