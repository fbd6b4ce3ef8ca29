"""A real Ray cluster on this host for tests and benchmarks: a head and more nodes, each a
``ray start`` of its own, in a temporary folder of their own, stopped after.

``ray stop`` would stop every Ray process of the host, a user's own cluster included; this stops
only the processes whose command line names the cluster's folder, with their children (the
raylets' workers). Ray resolves ``--node-ip-address 127.0.0.1`` to the host's own address, so
the nodes announce that one; the head is asked for on loopback all the same.

Token authentication (on by default for ``ray start`` since Ray 2.5x) is turned off for this
cluster (``RAY_AUTH_MODE=disabled``, in :attr:`LocalRayCluster.env`): it would write a token into
the user's home. A driver joining the cluster needs the same environment.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

import psutil

START_TIMEOUT_S = 90.0
_SHORT_TMP = "/tmp" if os.path.isdir("/tmp") else None
STOP_GRACE_S = 3.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def ray_executable() -> str:
    """The ``ray`` command of this Python's environment."""
    beside = Path(sys.executable).with_name("ray")
    found = str(beside) if beside.exists() else shutil.which("ray")
    if found is None:
        raise RuntimeError("no ray command: pip install 'sweeper[ray]'")
    return found


class LocalRayCluster:
    """``with LocalRayCluster(nodes=2) as cluster:`` ... ``cluster.address``."""

    def __init__(self, nodes: int = 2, cpus_per_node: int = 2) -> None:
        self.nodes = nodes
        self.cpus_per_node = cpus_per_node
        # Short: Ray's sockets live below it, and a socket's path has at most 107 bytes.
        self.root = Path(tempfile.mkdtemp(prefix="sweeper-ray-", dir=_SHORT_TMP))
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.env = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}

    def __enter__(self) -> LocalRayCluster:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def _start(self) -> None:
        env = {**os.environ, **self.env}
        ray = ray_executable()
        common = ["--node-ip-address", "127.0.0.1", "--num-cpus", str(self.cpus_per_node)]
        head = [
            ray, "start", "--head", "--port", str(self.port), "--include-dashboard=false",
            "--disable-usage-stats", "--temp-dir", str(self.root / "h"), *common,
        ]  # fmt: skip
        self._run(head, env)
        for n in range(1, self.nodes):
            node = [
                ray, "start", "--address", self.address, "--temp-dir",
                str(self.root / f"n{n}"), *common,
            ]  # fmt: skip
            self._run(node, env)
        self._wait_for_nodes(env)

    def _run(self, command: list[str], env: dict[str, str]) -> None:
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=START_TIMEOUT_S
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(command[1:3])} failed ({done.returncode}): {done.stderr[-2000:]}"
            )

    def _wait_for_nodes(self, env: dict[str, str]) -> None:
        """Until every node has joined (``ray start`` returns before the head counts it)."""
        probe = (
            "import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR'); "
            "print(sum(1 for n in ray.nodes() if n['Alive']))"
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            done = subprocess.run(
                [sys.executable, "-c", probe, self.address], env=env, capture_output=True,
                text=True, timeout=START_TIMEOUT_S,
            )  # fmt: skip
            alive = done.stdout.strip().splitlines()[-1:] if done.returncode == 0 else []
            if alive and int(alive[0]) >= self.nodes:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Ray cluster at {self.address} did not get its nodes")
            time.sleep(1.0)

    def processes(self) -> list[psutil.Process]:
        """This cluster's processes: those naming its folder, and their descendants."""
        marker = str(self.root)
        roots = []
        for proc in psutil.process_iter(["cmdline"]):
            try:
                if marker in " ".join(proc.info["cmdline"] or []):
                    roots.append(proc)
            except psutil.Error:
                continue
        found: dict[int, psutil.Process] = {p.pid: p for p in roots}
        for proc in roots:
            try:
                found.update({c.pid: c for c in proc.children(recursive=True)})
            except psutil.Error:
                continue
        return list(found.values())

    def stop(self) -> None:
        procs = self.processes()
        for proc in procs:
            try:
                proc.terminate()
            except psutil.Error:
                continue
        _, alive = psutil.wait_procs(procs, timeout=STOP_GRACE_S)
        for proc in alive:
            try:
                proc.kill()
            except psutil.Error:
                continue
        psutil.wait_procs(alive, timeout=STOP_GRACE_S)
        shutil.rmtree(self.root, ignore_errors=True)


def actor_processes(name: str = "RecorderActor") -> list[psutil.Process]:
    """Processes of the host running a Ray actor of this class (Ray titles them ``ray::<Name>``)."""
    out = []
    for proc in psutil.process_iter(["cmdline", "name"]):
        try:
            title = " ".join(proc.info["cmdline"] or []) + " " + (proc.info["name"] or "")
        except psutil.Error:
            continue
        if f"ray::{name}" in title:
            out.append(proc)
    return out
