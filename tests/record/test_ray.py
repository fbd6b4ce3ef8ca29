"""``sweeper record --ray``: a real Ray cluster on loopback (a head and a second node, each a
``ray start`` in this module's own folder, stopped after), recording against the scripted
server in a process of its own (truth: its write times on the host's CLOCK_MONOTONIC)."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from sweeper.record.config import RecordConfig, RequestCount
from sweeper.record.recorder import record_sweep
from sweeper.report.provenance import recorded_section
from sweeper.store import load_trace_set
from sweeper.testing.ray_cluster import LocalRayCluster, actor_processes
from sweeper.testing.server import ServerProcess, spawn_server
from sweeper.units import NS_PER_MS
from tests.record._ray import require_ray
from tests.record.test_recorder import _config as recorder_config

require_ray()
pytestmark = [pytest.mark.ray, pytest.mark.slow]

WAIT_S = 120.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalRayCluster]:
    with LocalRayCluster(nodes=2, cpus_per_node=2) as c:
        yield c
    assert not c.processes(), "a Ray process of the test cluster outlived it"


@pytest.fixture
def ray_env(cluster: LocalRayCluster, monkeypatch: pytest.MonkeyPatch) -> LocalRayCluster:
    """The driver's environment for the cluster (no token authentication, no usage stats)."""
    for key, value in cluster.env.items():
        monkeypatch.setenv(key, value)
    return cluster


@pytest.fixture(scope="module")
def timed_server() -> Iterator[ServerProcess]:
    # 10 ms a token, as the fidelity benchmark's: at 5 ms and 32 streams this 2-core machine,
    # which also runs both Ray nodes, delays one process's reads past a token now and then.
    with spawn_server(ttft_ms=20, itl_ms=10) as srv:
        yield srv


def _config(base_url: str, out: Path, **changes: object) -> RecordConfig:
    """test_recorder's sweep, at 1 and 32 streams, 32 tokens each."""
    return recorder_config(
        base_url, out, output_len=32, concurrency=[1, 32],
        requests_per_level=RequestCount(fixed=48), run_id="r", scrape_interval_s=0.5,
        **changes,
    )  # fmt: skip


def _sweeper(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    command = [str(Path(sys.executable).with_name("sweeper")), *args]
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **env},
    )  # fmt: skip


def _record(
    base_url: str, out: Path, cluster: LocalRayCluster, concurrency: str, requests: int, *extra: str
) -> subprocess.Popen[str]:
    """``sweeper record --ray`` on the cluster with two workers, in a process of its own."""
    return _sweeper(
        "record", "--base-url", base_url, "--input-len", "16", "--output-len", "12",
        "--concurrency", concurrency, "--requests-per-level", str(requests), "--out", str(out),
        "--run-id", "r", "--ray", cluster.address, "--workers", "2", "--quiet", *extra,
        env=cluster.env,
    )  # fmt: skip


def _resume_completes(out: Path, cluster: LocalRayCluster, requests: int) -> None:
    """``--resume`` of run r against a fast server finishes it, every request once."""
    with spawn_server(ttft_ms=1, itl_ms=1) as srv:
        resumed = _sweeper(
            "record", "--resume", "--run-id", "r", "--out", str(out), "--base-url",
            srv.base_url, "--quiet", env=cluster.env,
        )  # fmt: skip
        _, err = resumed.communicate(timeout=WAIT_S)
        assert resumed.returncode == 0, err
    ts = load_trace_set(out / "r")
    assert ts.manifest.status == "complete" and ts.problems == []
    assert ts.manifest.client.mode == "ray"
    ids = [r.request_id for r in ts.requests if r.status != "cancelled"]
    assert len(ids) == len(set(ids)) == requests


def _lines(folder: Path) -> int:
    return sum(p.read_text().count("\n") for p in folder.glob("requests*.jsonl"))


def _wait(condition: object, proc: subprocess.Popen[str], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        if proc.poll() is not None:
            raise AssertionError(f"sweeper record ended before {what}: {proc.communicate()}")
        time.sleep(0.05)
    raise AssertionError(f"never {what}")


def _gone(pids: set[int], timeout_s: float = 30.0) -> list[int]:
    """Which of these processes are still alive after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [
            p for p in alive if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"
        ]
        time.sleep(0.2)
    return alive


def test_two_nodes_record_every_request_once_with_exact_gaps(
    ray_env: LocalRayCluster, timed_server: ServerProcess, tmp_path: Path
) -> None:
    folder = record_sweep(_config(timed_server.base_url, tmp_path, ray=ray_env.address, workers=2))
    ts = load_trace_set(folder)
    manifest = ts.manifest
    assert manifest.status == "complete" and ts.problems == []
    # One trace set, written by the driver alone.
    assert sorted(p.name for p in folder.glob("requests*.jsonl")) == ["requests.jsonl"]
    ids = [r.request_id for r in ts.requests]
    assert len(ids) == len(set(ids)) == (1 + 48) + (32 + 48)
    assert all(r.status == "ok" and r.completion_tokens == 32 for r in ts.requests)
    # The SPREAD group put one worker on each node; both ran streams of the wide level.
    client = manifest.client
    assert client.mode == "ray" and client.workers == 2
    assert client.ray_address == ray_env.address
    assert len(client.nodes) == 2 and sorted(w for n in client.nodes for w in n.workers) == [0, 1]
    assert all(n.cpus == 2 and n.host and n.node_id for n in client.nodes)
    assert {r.worker for r in ts.requests if r.concurrency == 32} == {0, 1}
    # Offsets: at the start and before each level, per worker; one host, so the true offset is
    # 0 and must lie within each measure's uncertainty.
    offsets = client.clock_offsets
    assert sorted({(o.concurrency, o.worker) for o in offsets}, key=str) == sorted(
        {(c, w) for c in (None, 1, 32) for w in (0, 1)}, key=str
    )
    for o in offsets:
        assert abs(o.offset_ns) <= o.uncertainty_ns, o
        assert 0 < o.uncertainty_ns < 50 * NS_PER_MS and o.samples >= 10
    # The page's "How it was recorded" says where the requests came from.
    page = "\n".join(recorded_section(ts, "en"))
    assert "2 Ray workers on 2 nodes" in page and ray_env.address.replace(":", "&#58;") in page
    assert "Clock offset (ms)" in page
    # ITL: each gap against the server's own write times, at 32 streams, as one process is.
    origin = manifest.clock.origin_monotonic_ns  # type: ignore[union-attr]
    itl_err: list[float] = []
    uncertainty = max(o.uncertainty_ns for o in offsets)
    for r in ts.requests:
        truth = timed_server.truth(f"{ts.run_id}-{r.request_id}")
        assert truth is not None and truth["status"] == "ok"
        assert r.chunk_tokens == truth["content_tokens"]
        arrivals = [origin + r.send_ns + c for c in r.chunk_ns]
        writes = truth["content_ns"]
        # On the driver's clock, to within the offset's uncertainty: never before the write.
        assert min(a - w for a, w in zip(arrivals, writes, strict=True)) >= -uncertainty
        if r.concurrency == 32:
            itl_err += [
                abs((b - a) - (y - x)) / NS_PER_MS
                for (a, b), (x, y) in zip(
                    itertools.pairwise(arrivals), itertools.pairwise(writes), strict=True
                )
            ]
    itl_err.sort()
    p99 = itl_err[int(0.99 * (len(itl_err) - 1))]
    assert p99 <= 1.0, f"ITL p99 error {p99:.3f} ms at 32 streams over two Ray nodes"


def test_a_worker_killed_mid_level_is_worker_lost_and_nothing_else_is_lost(
    ray_env: LocalRayCluster, tmp_path: Path
) -> None:
    """A worker's process killed (SIGKILL) while level 2 runs: the requests it had in flight
    fail as worker_lost; the rest of its share runs on the other worker; every request of the
    sweep is in the trace set exactly once."""
    with spawn_server(ttft_ms=5, itl_ms=20) as srv:
        before = {p.pid for p in actor_processes()}
        proc = _record(srv.base_url, tmp_path, ray_env, "1,8", 40, "--max-error-rate", "0.5")
        folder = tmp_path / "r"
        _wait(lambda: _lines(folder) >= (1 + 40) + 20, proc, "half of level 2 was recorded")
        actors = [p for p in actor_processes() if p.pid not in before]
        assert len(actors) == 2, actors
        actors[0].kill()
        _, err = proc.communicate(timeout=WAIT_S)
        assert proc.returncode == 0, err
    ts = load_trace_set(folder)
    assert ts.problems == [] and ts.manifest.status == "complete"
    ids = [r.request_id for r in ts.requests]
    assert len(ids) == len(set(ids)), "a request was recorded twice"
    assert sorted(ids) == sorted(
        [f"c1-{i:05d}" for i in range(1 + 40)] + [f"c8-{i:05d}" for i in range(8 + 40)]
    ), "a request was lost"
    lost = [r for r in ts.requests if r.status != "ok"]
    assert lost, "no request was in flight on the killed worker"
    assert all(r.error is not None and r.error.kind == "worker_lost" for r in lost), lost
    assert all(r.concurrency == 8 for r in lost) and len({r.worker for r in lost}) == 1
    # At most the worker's own streams (4 of the level's 8) were in flight on it.
    assert len(lost) <= 4
    node = next(n for n in ts.manifest.client.nodes if lost[0].worker in n.workers)
    assert all(node.host in (r.error.message if r.error else "") for r in lost)
    assert len(ts.manifest.client.lost_workers) == 1
    assert "worker_lost" in ts.manifest.client.lost_workers[0]
    assert any("was lost" in w for w in ts.manifest.warnings)
    assert not _gone({p.pid for p in actors}), "a worker outlived the run"


def test_ctrl_c_of_the_driver_stops_its_workers(ray_env: LocalRayCluster, tmp_path: Path) -> None:
    with spawn_server(ttft_ms=5, itl_ms=40) as srv:
        before = {p.pid for p in actor_processes()}
        proc = _record(srv.base_url, tmp_path, ray_env, "1,4", 40)
        _wait(lambda: _lines(tmp_path / "r") >= 1 + 40 + 4, proc, "level 2 started")
        actors = {p.pid for p in actor_processes()} - before
        assert len(actors) == 2
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=WAIT_S)
        assert proc.returncode == 130, err
        assert "--resume --run-id r" in err
    manifest = load_trace_set(tmp_path / "r").manifest
    assert manifest.status == "incomplete"
    assert [lv.status for lv in manifest.levels] == ["complete", "interrupted"]
    assert not _gone(actors), "a Ray worker outlived the Ctrl-C of its driver"
    # What was recorded is whole: --resume finishes it on the cluster.
    _resume_completes(tmp_path, ray_env, (1 + 40) + (4 + 40))


def test_a_driver_killed_takes_its_workers_with_it(
    ray_env: LocalRayCluster, tmp_path: Path
) -> None:
    with spawn_server(ttft_ms=5, itl_ms=40) as srv:
        before = {p.pid for p in actor_processes()}
        proc = _record(srv.base_url, tmp_path, ray_env, "2", 200)
        _wait(lambda: _lines(tmp_path / "r") >= 4, proc, "requests were recorded")
        actors = {p.pid for p in actor_processes()} - before
        proc.kill()
        proc.communicate(timeout=WAIT_S)
        assert actors and not _gone(actors, 60.0), "a Ray worker outlived its killed driver"
    # What it wrote is whole, and --resume finishes it on the cluster.
    _resume_completes(tmp_path, ray_env, 2 + 200)


def test_a_cluster_that_cannot_hold_the_workers_is_refused_naming_the_cpus(
    ray_env: LocalRayCluster, timed_server: ServerProcess, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setattr("sweeper.record.ray_pool.START_TIMEOUT_S", 5.0)
    config = _config(timed_server.base_url, tmp_path, ray=ray_env.address, workers=3,
                     worker_cpus=2.0)  # fmt: skip
    from sweeper.errors import ConfigError

    with pytest.raises(ConfigError, match=r"--workers 3 x --worker-cpus 2 needs 6 CPUs"):
        record_sweep(config)


def test_a_rate_level_keeps_its_schedule_across_the_clocks(
    ray_env: LocalRayCluster, timed_server: ServerProcess, tmp_path: Path
) -> None:
    """Open loop on two Ray workers: each request's due time (on the driver's clock) is met on
    the worker's, to within the offset's uncertainty and the machine's wake-up delay."""
    config = RecordConfig(
        base_url=timed_server.base_url, input_len=24, output_len=8, request_rate=[40.0],
        requests_per_level=RequestCount(fixed=60), warmup=0, out=tmp_path, run_id="r",
        scrape_interval_s=0.5, ray=ray_env.address, workers=2,
    )  # fmt: skip
    folder = record_sweep(config)
    ts = load_trace_set(folder)
    assert ts.manifest.status == "complete"
    assert len({r.request_id for r in ts.requests}) == len(ts.requests) == 60
    assert {r.worker for r in ts.requests} == {0, 1}
    queue_ms = sorted(
        (r.send_ns - r.scheduled_ns) / NS_PER_MS for r in ts.requests if r.scheduled_ns is not None
    )
    assert len(queue_ms) == 60
    uncertainty_ms = max(o.uncertainty_ns for o in ts.manifest.client.clock_offsets) / NS_PER_MS
    assert queue_ms[0] >= -uncertainty_ms, "a request was sent before it was due"
    assert queue_ms[int(0.9 * 59)] < 20.0, queue_ms
