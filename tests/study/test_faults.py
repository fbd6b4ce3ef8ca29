"""A server never outlives its study: the study process killed with SIGKILL (the kernel's
PR_SET_PDEATHSIG ends the server) and then resumed (nothing finished is redone), and Ctrl-C
(the server stopped, the run left to resume). The study runs as a real process here."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from sweeper.store import load_trace_set, read_manifest
from tests.study.helpers import SWEEPER, alive, invoke, read_json, study_args, wait_for

# Config 1 is over in a blink; config 2 decodes 10 ms a step, 60 tokens a request: seconds.
FAST, SLOW = "--step-base-ms 1", "--step-base-ms 10"
LONG = ("--output-len", "60")


def _start(out: Path, study_id: str, *configs: str) -> subprocess.Popen[bytes]:
    args = study_args(out, study_id, *configs, extra=LONG)
    with open(out / f"{study_id}.out", "wb") as output:
        return subprocess.Popen([*SWEEPER, *args], stdout=output, stderr=subprocess.STDOUT)


def _server_pid_when_recording(out: Path, study_id: str, run_id: str) -> int:
    folder = out / study_id
    assert wait_for(
        lambda: (folder / "server.pid").exists() and (out / run_id / "requests.jsonl").exists(),
        timeout_s=60,
    ), "the study never started recording " + run_id
    return int(read_json(folder / "server.pid")["pid"])


def test_kill_9_leaves_no_server_and_resume_redoes_nothing_finished(tmp_path: Path) -> None:
    study = _start(tmp_path, "k", FAST, SLOW)
    try:
        server = _server_pid_when_recording(tmp_path, "k", "k-step-base-ms-10")
        assert alive(server)
        finished = tmp_path / "k-step-base-ms-1" / "requests.jsonl"
        before = finished.stat().st_mtime_ns
        study.kill()
        study.wait(timeout=10)
        assert wait_for(lambda: not alive(server), timeout_s=10), "the server outlived the study"
    finally:
        if study.poll() is None:
            study.kill()
    assert (tmp_path / "k" / "server.pid").exists()  # left by the killed study
    result = invoke(["study", "run", "k", "--resume", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "k-step-base-ms-1: complete, skipped" in result.output
    assert "k-step-base-ms-10: resuming" in result.output
    assert finished.stat().st_mtime_ns == before
    assert not (tmp_path / "k" / "server.pid").exists()
    resumed = load_trace_set(tmp_path / "k-step-base-ms-10")
    assert resumed.manifest.status == "complete"
    measured = [r for r in resumed.requests if r.phase == "measured" and r.status == "ok"]
    ids = [r.request_id for r in measured]
    assert len(ids) == len(set(ids)) == 8
    configurations = read_json(tmp_path / "k" / "study.json")["configurations"]
    assert [c["status"] for c in configurations] == ["complete", "complete"]


def test_ctrl_c_stops_the_server_and_leaves_the_run_to_resume(tmp_path: Path) -> None:
    study = _start(tmp_path, "i", SLOW)
    try:
        server = _server_pid_when_recording(tmp_path, "i", "i-step-base-ms-10")
        os.kill(study.pid, signal.SIGINT)
        study.wait(timeout=60)
        output = (tmp_path / "i.out").read_text()
    finally:
        if study.poll() is None:
            study.kill()
    assert study.returncode == 130, output
    assert "sweeper study run i --resume" in output
    assert not alive(server)
    assert not (tmp_path / "i" / "server.pid").exists()
    configuration = read_json(tmp_path / "i" / "study.json")["configurations"][0]
    assert configuration["status"] == "incomplete"
    assert configuration["runs"][0]["status"] == "incomplete"
    assert read_manifest(tmp_path / "i-step-base-ms-10").status == "incomplete"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_stop_the_study_as_ctrl_c_does(tmp_path: Path, signum: int) -> None:
    study = _start(tmp_path, "t", SLOW)
    try:
        server = _server_pid_when_recording(tmp_path, "t", "t-step-base-ms-10")
        os.kill(study.pid, signum)
        study.wait(timeout=60)
        output = (tmp_path / "t.out").read_text()
    finally:
        if study.poll() is None:
            study.kill()
    assert study.returncode == 130, output
    assert "sweeper study run t --resume" in output
    assert not alive(server)
    assert not (tmp_path / "t" / "server.pid").exists()
    configuration = read_json(tmp_path / "t" / "study.json")["configurations"][0]
    assert configuration["status"] == "incomplete"
    assert configuration["runs"][0]["status"] == "incomplete"
    assert read_manifest(tmp_path / "t-step-base-ms-10").status == "incomplete"
