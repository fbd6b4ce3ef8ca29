"""``sweeper record --ray ADDRESS|auto``: the recorder's workers as Ray actors over a cluster.

Past one client host, sweeper runs on Ray rather than on a home-made cluster of its own. The
driver (the ``sweeper record`` process) joins the cluster (``ray.init(address=...)``; ``auto``
with no cluster running starts a local one, and stops it at the end), reserves a SPREAD
placement group of ``--workers`` bundles of ``--worker-cpus`` CPUs, and places one
:class:`RecorderActor` in each. An actor runs :func:`sweeper.record.workers.run_worker`, the
same code as a local worker process, in a thread of its own; :class:`RayTransport` is the
driver's side of it, behind the same :class:`sweeper.record.workers.Transport` as local
processes.

**Time.** A worker stamps everything on its own host's CLOCK_MONOTONIC. Before each level the
driver measures every worker's clock against its own by round trips (``clock()`` calls; the
fastest kept, :func:`best_offset`) and hands the worker the run's origin *on the worker's clock*.
Send times (the level's timeline, matched against the server's metrics) then land on the
driver's clock, to within the offset's uncertainty (half that round trip); TTFT and every chunk
gap are differences on the worker's clock and are exact whatever the offset. Each offset and
its uncertainty go in the manifest (``client.clock_offsets``).

**Faults.** A drain call to an actor that died (its process killed, its node gone) raises; the
driver then knows what the worker last said it had in flight, and the pool records those
requests as failed (``worker_lost``) and hands the rest on (:class:`WorkerPool`).

**Processes.** The actors are the driver's: they die with its Ray job (its end, Ctrl-C, or the
driver killed, when Ray's owner-based fate sharing takes them). A cluster joined is left
running; one started by ``auto`` is stopped at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweeper.errors import ConfigError, SweeperError
from sweeper.record.ray_reaper import descendants, start_time
from sweeper.record.workers import (
    DRAIN_MAX,
    LevelJob,
    Message,
    WorkerLost,
    WorkerSettings,
    local_worker,
)
from sweeper.schema import ClientNode, ClockOffset
from sweeper.version import __version__

RAY_MISSING = (
    "--ray needs Ray: pip install 'sweeper[ray]' (and sweeper itself, the same version, on "
    "every node of the cluster)"
)
OFFSET_SAMPLES = 15  # round trips per worker and level; the fastest one is kept
# An actor's drain call gathers messages this long before it answers (or until it has many):
# few calls, each carrying many requests, keep the relay's CPU small beside the worker's.
DRAIN_PERIOD_S = 0.1
POLL_S = 0.2  # longest wait of the driver for any actor
START_TIMEOUT_S = 120.0  # the placement group and the actors' start
ROUND_TRIP_BUDGET_NS = 3_000_000  # a clock round trip, at most, for a rate level's lead
UNAVAILABLE_RETRIES = 5  # drain calls that may find an actor unreachable before it counts lost
STOP_GRACE_S = 5.0
# Auto-started local clusters: a small object store (the traces are small) in /dev/shm.
LOCAL_OBJECT_STORE_BYTES = 256 * 1024 * 1024
_LINUX = sys.platform.startswith("linux")


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ConfigError(RAY_MISSING) from exc
    return ray


class RecorderActor:
    """One recorder worker on a node of the cluster (made a Ray actor by :class:`RayTransport`).

    The worker itself is a process of its own that the actor starts, exactly a ``--workers``
    process (:func:`sweeper.record.workers.local_worker`): a worker's event loop must not share
    its process, and its GIL, with Ray's own threads, which delay its reads by milliseconds. It
    exits when the actor does. The actor relays: jobs down, messages up, and keeps what the
    worker has in flight (from its ``sent`` messages) for the driver to know if it is lost."""

    def __init__(self, index: int, settings: WorkerSettings) -> None:
        self.index = index
        self.worker = local_worker(index, settings, report_sent=True)
        self.in_flight: dict[str, int] = {}

    def ready(self, timeout_s: float) -> dict[str, Any]:
        """Once the worker has started: where it runs."""
        import ray

        for kind, _index, *payload in self.worker.wait_ready(timeout_s):
            if kind == "failed":
                raise SweeperError(str(payload[0]))
        return {
            "niceness": _normal_priority(self.worker.process.pid or 0),
            "host": socket.gethostname(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "address": ray.util.get_node_ip_address(),
            "pid": self.worker.process.pid,
            "version": __version__,
        }

    def clock(self) -> int:
        return time.monotonic_ns()

    def submit(self, job: LevelJob | None) -> None:
        self.worker.commands.put(job)

    def stop_sending(self, stop: bool) -> None:
        if stop:
            self.worker.stop.set()
        else:
            self.worker.stop.clear()

    def drain(self, period_s: float) -> tuple[list[Message], dict[str, int]]:
        """The messages of the next ``period_s`` (fewer if many come), and the requests in
        flight then."""
        out: list[Message] = []
        deadline = time.monotonic() + period_s
        while len(out) < DRAIN_MAX:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for message in self.worker.take(left):
                kind, _index, *payload = message
                if kind == "sent":
                    self.in_flight[payload[0]] = payload[1]
                    continue
                if kind == "trace":
                    self.in_flight.pop(payload[1], None)
                out.append(message)
        if not out and self.worker.process.exitcode is not None:
            raise SweeperError(f"its worker process exited ({self.worker.process.exitcode})")
        return out, dict(self.in_flight)

    def finish(self, timeout_s: float) -> None:
        """Stop after the jobs under way (the run is over: nothing is left to relay)."""
        self.worker.commands.put(None)
        self.worker.process.join(timeout_s)
        self.worker.close(cancel=True)


def _normal_priority(pid: int) -> int:
    """Undo Ray's ``worker_niceness`` (15) for the worker and this relay, where allowed (root,
    CAP_SYS_NICE): at nice 15 any other work on the node delays the worker's reads by tens of
    milliseconds. The worker's niceness after the attempt."""
    for target in (pid, 0):
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, target, 0)
    try:
        return os.getpriority(os.PRIO_PROCESS, pid)
    except OSError:
        return 0


@dataclass
class _Sample:
    before_ns: int
    worker_ns: int
    after_ns: int


def best_offset(samples: list[_Sample]) -> tuple[int, int]:
    """(offset, uncertainty) in ns from round trips: the worker's reading against the middle of
    the fastest round trip; the true offset lies within half that round trip of it."""
    best = min(samples, key=lambda s: s.after_ns - s.before_ns)
    middle = (best.before_ns + best.after_ns) // 2
    return best.worker_ns - middle, (best.after_ns - best.before_ns + 1) // 2


class RayTransport:
    """The driver's side of ``--ray``: ``count`` :class:`RecorderActor` s in a SPREAD placement
    group; every request travels back to the driver, which writes it."""

    workers_write = False

    def __init__(
        self,
        address: str,
        count: int,
        worker_cpus: float,
        settings: WorkerSettings,
        clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self.address = address
        self.count = count
        self.worker_cpus = worker_cpus
        self.settings = settings
        self.clock = clock
        self.started_cluster = False
        self.nodes: list[ClientNode] = []
        self.offsets: list[ClockOffset] = []
        self.warnings: list[str] = []  # for the run's warnings, once started
        self._actors: list[Any] = []
        self._infos: list[dict[str, Any]] = []
        self._alive: set[int] = set()
        self._drains: dict[int, Any] = {}  # worker -> its drain call under way
        self._in_flight: dict[int, dict[str, int]] = {}
        self._group: Any = None
        self._ray: Any = None
        self._closed = False
        self._cluster: list[tuple[int, int]] = []  # a local cluster started here: pid, start
        self._reaper: subprocess.Popen[bytes] | None = None
        self._closing = threading.Event()  # Ctrl-C during the start
        self._misses: dict[int, int] = {}  # drain calls in a row that found the actor away

    @property
    def lead_ns(self) -> int:
        """A rate level's extra lead: the clock round trips (worker after worker), then the jobs
        over the network."""
        return 200_000_000 + self.count * OFFSET_SAMPLES * ROUND_TRIP_BUDGET_NS

    # -- start ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Join (or start) the cluster and start the actors. Ctrl-C meanwhile lets the start
        reach its next step, where it stops, so that :meth:`close` finds all it made."""
        starting = asyncio.ensure_future(asyncio.to_thread(self._start))
        try:
            await asyncio.shield(starting)
        except asyncio.CancelledError:
            self._closing.set()
            with contextlib.suppress(BaseException):
                await starting
            raise

    def _step(self) -> None:
        if self._closing.is_set():
            raise _Closing

    def _start(self) -> None:
        ray = self._ray = _ray()
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        before = set(descendants(os.getpid())) if _LINUX else set()
        self._join(ray)
        if self.started_cluster and _LINUX:
            self._watch_cluster(before)
        self._step()
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        need = self.count * self.worker_cpus
        cpus = ray.cluster_resources().get("CPU", 0)
        if cpus < need:
            raise self._too_small(need, cpus)
        bundles = [{"CPU": self.worker_cpus} for _ in range(self.count)]
        self._group = placement_group(bundles, strategy="SPREAD")
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            self._step()
            try:
                ray.get(self._group.ready(), timeout=1.0)
                break
            except ray.exceptions.GetTimeoutError:
                if time.monotonic() > deadline:
                    raise self._too_small(need, cpus) from None
        # Threaded: clock() and drain() answer while another call waits.
        actor_class = ray.remote(max_concurrency=4)(RecorderActor)
        self._actors = [
            actor_class.options(
                num_cpus=self.worker_cpus,
                max_restarts=0,
                name=None,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=self._group, placement_group_bundle_index=i
                ),
            ).remote(i, self.settings)
            for i in range(self.count)
        ]
        readies = [a.ready.remote(START_TIMEOUT_S) for a in self._actors]
        deadline = time.monotonic() + START_TIMEOUT_S * 2
        try:
            while True:
                self._step()
                done, _ = ray.wait(readies, num_returns=len(readies), timeout=1.0)
                if len(done) == len(readies) or time.monotonic() > deadline:
                    break
            self._infos = ray.get(readies, timeout=1.0)
        except ray.exceptions.RayError as exc:
            raise SweeperError(
                f"the Ray workers did not start: {_reason(exc)} (is sweeper, with the "
                "same version, installed on every node?)"
            ) from exc
        nice = sorted({info["host"] for info in self._infos if info.get("niceness", 0) > 0})
        if nice:
            self.warnings.append(
                f"the Ray workers on {', '.join(nice)} run at a lower priority (nice "
                f"{max(i.get('niceness', 0) for i in self._infos)}, Ray's worker_niceness) and "
                "could not be raised: other work on those nodes can delay their reads; start "
                "the nodes with RAY_worker_niceness=0 (docs/record.md, 'Past one machine')"
            )
        for index, info in enumerate(self._infos):
            if info["version"] != __version__:
                raise ConfigError(
                    f"recorder worker {index} on {info['host']} runs sweeper {info['version']}, "
                    f"the driver {__version__}: install the same version on every node"
                )
        self._alive = set(range(self.count))
        self.nodes = self._describe_nodes(ray)
        # A failure at start (the worker's loop could not begin) shows in the first messages.
        for index in range(self.count):
            self._drains[index] = self._actors[index].drain.remote(DRAIN_PERIOD_S)
        self._measure(None)

    def _join(self, ray: Any) -> None:
        """Join the cluster at the address; ``auto`` with none running starts a local one."""
        quiet = {"logging_level": logging.ERROR, "log_to_driver": False, "namespace": "sweeper"}
        try:
            ray.init(address=self.address, **quiet)
            return
        except ConnectionError as exc:
            if self.address != "auto":
                raise ConfigError(
                    f"--ray {self.address}: no Ray cluster answers there ({_first_line(exc)}); "
                    "start one (ray start --head on the first node, ray start --address "
                    "<head>:6379 on the others), or pass --ray auto to start a local one"
                ) from None
        except (ValueError, RuntimeError) as exc:
            raise ConfigError(f"--ray {self.address}: {_first_line(exc)}") from None
        _token_in_memory()
        ray.init(
            include_dashboard=False,
            object_store_memory=LOCAL_OBJECT_STORE_BYTES,
            # Ray starts its workers at nice 15; a recorder's reads must not wait on the rest
            _system_config={"worker_niceness": 0},
            **quiet,
        )
        self.started_cluster = True

    def _too_small(self, need: float, cpus: float) -> ConfigError:
        where = (
            "the local Ray cluster" if self.started_cluster
            else f"the Ray cluster at {self.address}"
        )  # fmt: skip
        return ConfigError(
            f"--workers {self.count} x --worker-cpus {self.worker_cpus:g} needs {need:g} CPUs "
            f"of {where}, which has {cpus:g} in all (some may be in use); pass fewer --workers, "
            "a smaller --worker-cpus, or add nodes"
        )

    def _watch_cluster(self, before: set[int]) -> None:
        """The local cluster's processes (Ray's, new since before ``ray.init``), handed to
        :mod:`sweeper.record.ray_reaper`, which kills them if this process is killed;
        :meth:`close` stops them in order."""
        for pid in descendants(os.getpid()):
            start = start_time(pid)
            if pid not in before and start is not None and _is_ray_process(pid):
                self._cluster.append((pid, start))
        self._reaper = subprocess.Popen(
            [sys.executable, "-m", "sweeper.record.ray_reaper", str(os.getpid()),
             *(f"{pid}:{start}" for pid, start in self._cluster)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip

    def _describe_nodes(self, ray: Any) -> list[ClientNode]:
        known = {n["NodeID"]: n for n in ray.nodes() if n.get("Alive")}
        nodes: dict[str, ClientNode] = {}
        for index, info in enumerate(self._infos):
            node = nodes.get(info["node_id"])
            if node is None:
                about = known.get(info["node_id"], {})
                node = nodes[info["node_id"]] = ClientNode(
                    host=info["host"],
                    node_id=info["node_id"],
                    address=info["address"],
                    cpus=about.get("Resources", {}).get("CPU"),
                )
            node.workers.append(index)
        return list(nodes.values())

    # -- the levels -------------------------------------------------------------------------

    async def origins(self, key: int) -> list[int]:
        offsets = await asyncio.to_thread(self._measure, key)
        return [self.settings.origin_ns + offset for offset in offsets]

    def _measure(self, key: int | None) -> list[int]:
        """Each live worker's clock offset, now; a lost worker keeps its last."""
        ray = self._ray
        last = {o.worker: o.offset_ns for o in self.offsets}
        out = []
        for index, actor in enumerate(self._actors):
            if index not in self._alive:
                out.append(last.get(index, 0))
                continue
            samples = []
            try:
                for _ in range(OFFSET_SAMPLES):
                    before = self.clock()
                    reading = ray.get(actor.clock.remote(), timeout=START_TIMEOUT_S)
                    samples.append(_Sample(before, reading, self.clock()))
            except ray.exceptions.RayError:
                out.append(last.get(index, 0))  # lost: the next drain says so
                continue
            offset, uncertainty = best_offset(samples)
            self.offsets.append(
                ClockOffset(
                    worker=index,
                    concurrency=key,
                    offset_ns=offset,
                    uncertainty_ns=uncertainty,
                    samples=len(samples),
                )
            )
            out.append(offset)
        return out

    def submit(self, index: int, job: LevelJob) -> None:
        self._actors[index].submit.remote(job)

    def stop_sending(self, stop: bool) -> None:
        for index in self._alive:
            self._actors[index].stop_sending.remote(stop)

    def where(self, index: int) -> str:
        info = self._infos[index] if index < len(self._infos) else {}
        node = str(info.get("node_id") or "?")[:8]
        return f"node {info.get('host', '?')} ({node}), pid {info.get('pid', '?')}"

    async def receive(self) -> list[Message]:
        while True:
            messages = await asyncio.to_thread(self._receive)
            if messages:
                return messages

    def _receive(self) -> list[Message]:
        ray = self._ray
        refs = {ref: index for index, ref in self._drains.items()}
        if not refs:
            raise SweeperError("no Ray recorder worker is left")
        ready, _ = ray.wait(list(refs), num_returns=1, timeout=POLL_S)
        out: list[Message] = []
        for ref in ready:
            index = refs[ref]
            try:
                messages, in_flight = ray.get(ref)
            except ray.exceptions.RayError as exc:
                unavailable = getattr(ray.exceptions, "ActorUnavailableError", ())
                misses = self._misses.get(index, 0) + 1
                if isinstance(exc, unavailable) and misses <= UNAVAILABLE_RETRIES:
                    self._misses[index] = misses  # a network blip: ask again
                    self._drains[index] = self._actors[index].drain.remote(DRAIN_PERIOD_S)
                    continue
                del self._drains[index]
                self._alive.discard(index)
                # Gone for good, from here on: whatever of it still runs must not go on
                # sending the share the others are about to take over.
                with contextlib.suppress(Exception):
                    ray.kill(self._actors[index], no_restart=True)
                raise WorkerLost(
                    index, self.where(index), _reason(exc),
                    in_flight=self._in_flight.get(index, {}),
                ) from None  # fmt: skip
            self._misses.pop(index, None)
            self._in_flight[index] = in_flight
            out.extend(messages)
            if not self._closed:  # no Ray call after the shutdown
                self._drains[index] = self._actors[index].drain.remote(DRAIN_PERIOD_S)
        return out

    # -- the end ---------------------------------------------------------------------------

    def close(self, *, cancel: bool) -> None:
        if self._closed or self._ray is None:
            return
        self._closed = True
        ray = self._ray
        try:
            if not cancel and self._alive:
                with contextlib.suppress(ray.exceptions.RayError):
                    ray.get(
                        [self._actors[i].finish.remote(STOP_GRACE_S) for i in self._alive],
                        timeout=STOP_GRACE_S * 2,
                    )
            for actor in self._actors:
                with contextlib.suppress(Exception):
                    ray.kill(actor, no_restart=True)
            if self._group is not None:
                from ray.util.placement_group import remove_placement_group

                with contextlib.suppress(Exception):
                    remove_placement_group(self._group)
        finally:
            # Leaves a joined cluster running; stops one that ray.init started here.
            ray.shutdown()
            self._end_cluster()

    def _end_cluster(self) -> None:
        """After the shutdown of a cluster started here: what is left of it (the agents, which
        wait on the GCS for a minute) is stopped now, and the reaper with it."""
        left = [pid for pid, start in self._cluster if start_time(pid) == start]
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in left:
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + STOP_GRACE_S
            while left and time.monotonic() < deadline:
                left = [pid for pid, start in self._cluster if start_time(pid) == start]
                time.sleep(0.05)
            if not left:
                break
        if self._reaper is not None:
            self._reaper.kill()
            self._reaper.wait()


def _token_in_memory() -> None:
    """Before starting a local cluster: Ray (2.60) turns token authentication on and, with no
    token at hand, writes a new one to ~/.ray/auth_token. The cluster listens on the host's
    address, so it keeps its token; where the user has none, it is a fresh one held in this
    process's environment (inherited by the cluster's processes) and written nowhere."""
    if any(os.environ.get(name) for name in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")):
        return
    if (Path.home() / ".ray" / "auth_token").exists():
        return
    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)


class _Closing(SweeperError):
    """The start stopped at a step because the run is being stopped."""

    def __init__(self) -> None:
        super().__init__("stopped while the Ray workers were starting")


def _is_ray_process(pid: int) -> bool:
    """Whether the process is one of Ray's (its command line names Ray), not another child."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            command = fh.read().replace(b"\0", b" ")
    except OSError:
        return False
    return b"ray" in command


def _reason(exc: BaseException) -> str:
    """What went wrong inside a Ray call: the task's own exception where there is one (a
    RayTaskError's first line is only its header), else the error's first line."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException) and str(cause).strip():
        return f"{type(cause).__name__}: {_first_line(cause)}"
    return _first_line(exc)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]
