"""``sweeper record --ray auto`` on a host with no Ray cluster: it starts a local one, records on
it, and stops it; none of its Ray processes outlives it (in order, and killed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from sweeper.store import load_trace_set
from sweeper.testing.server import spawn_server
from tests.record._ray import require_ray

require_ray()
pytestmark = [pytest.mark.ray, pytest.mark.slow]

WAIT_S = 180.0
RAY_PROCESSES = ("gcs_server", "raylet", "ray::", "ray/_private", "ray/dashboard", "ray/autoscaler")


def _ray_processes() -> set[int]:
    found = set()
    for proc in psutil.process_iter(["cmdline", "name"]):
        try:
            title = " ".join(proc.info["cmdline"] or []) + " " + (proc.info["name"] or "")
        except psutil.Error:
            continue
        if any(mark in title for mark in RAY_PROCESSES):
            found.add(proc.pid)
    return found


def _left(before: set[int], timeout_s: float = 30.0) -> set[int]:
    deadline = time.monotonic() + timeout_s
    while True:
        new = {p for p in _ray_processes() - before if psutil.Process(p).status() != "zombie"}
        if not new or time.monotonic() > deadline:
            return new
        time.sleep(0.5)


def _record(base_url: str, out: Path, *extra: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    command = [
        str(Path(sys.executable).with_name("sweeper")), "record", "--base-url", base_url,
        "--input-len", "16", "--output-len", "8", "--out", str(out), "--run-id", "r",
        "--ray", "auto", "--workers", "2", "--quiet", *extra,
    ]  # fmt: skip
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def test_auto_starts_a_local_cluster_and_stops_it(tmp_path: Path) -> None:
    before = _ray_processes()
    token_file = Path.home() / ".ray" / "auth_token"
    had_token = token_file.exists()
    with spawn_server(ttft_ms=5, itl_ms=2) as srv:
        proc = _record(srv.base_url, tmp_path, "--concurrency", "1,4", "--requests-per-level", "8")
        _out, err = proc.communicate(timeout=WAIT_S)
        assert proc.returncode == 0, err
    assert "Traceback" not in err
    ts = load_trace_set(tmp_path / "r")
    assert ts.manifest.status == "complete" and ts.manifest.client.mode == "ray"
    assert ts.manifest.client.ray_address == "auto"
    assert len(ts.requests) == (1 + 8) + (4 + 8) and all(r.status == "ok" for r in ts.requests)
    assert not _left(before), "a Ray process started by --ray auto outlived sweeper"
    # The local cluster's token lived in memory: Ray would have written a new one into ~.
    assert had_token or not token_file.exists(), f"{token_file} was written"


def test_auto_cluster_ends_with_sweeper_killed(tmp_path: Path) -> None:
    """SIGKILL leaves sweeper no say: the cluster it started must end all the same."""
    before = _ray_processes()
    with spawn_server(ttft_ms=5, itl_ms=40) as srv:
        proc = _record(srv.base_url, tmp_path, "--concurrency", "2", "--requests-per-level", "200")
        folder = tmp_path / "r"
        deadline = time.monotonic() + WAIT_S
        while not any(p.stat().st_size for p in folder.glob("requests*.jsonl")):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no request was recorded"
            time.sleep(0.1)
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=WAIT_S)
        left = _left(before, timeout_s=60.0)
    assert not left, f"Ray processes outlived a killed sweeper: {sorted(left)}"


def test_auto_cluster_too_small_is_refused_and_stopped(tmp_path: Path) -> None:
    before = _ray_processes()
    with spawn_server(ttft_ms=5, itl_ms=2) as srv:
        proc = _record(srv.base_url, tmp_path, "--concurrency", "1", "--workers", "64")
        _, err = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 1, err
    assert "--workers 64 x --worker-cpus 1 needs 64 CPUs of the local Ray cluster" in err, err
    assert "Traceback" not in err
    assert not _left(before), "the local cluster of a refused run outlived it"
