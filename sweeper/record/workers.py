"""``--workers N``: the streams of a level spread over N recorder workers.

One Python event loop can read only so many chunks per second before it reads them late; past
that, more processes help where a faster loop cannot. Each worker runs its own event loop and
HTTP client (:func:`run_worker`); where it runs is a :class:`Transport`'s business: local
processes (:class:`LocalTransport`, ``--workers N``) or Ray actors over a cluster's nodes
(:mod:`sweeper.record.ray_pool`, ``--ray``). The driver's side, :class:`WorkerPool`, is the
same for both.

Local workers append their requests to their own files, ``requests.w<N>.jsonl`` (the reader
globs ``requests*.jsonl``), and all stamp times with the host's one CLOCK_MONOTONIC against the
origin the driver chose, so the parts merge with no clock conversion. Workers on other hosts
send every request back and the driver writes it; each level, the driver measures each worker's
clock at the run's origin (:meth:`Transport.origins`) and hands it over with the job, so that
send times land on the driver's timeline while a request's own timings (TTFT, every chunk gap)
stay differences on the worker's clock.

The driver keeps everything else: the server probe, the prompts, the metrics scrapes, the
manifest and the progress display. For each level it splits the streams and the requests over
the workers (stream ``s`` of the closed loop runs in worker ``s % N``) and hears back, per
request, the trace line each worker wrote (for the running figures and the error-rate stop).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import queue
import signal
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from multiprocessing.context import SpawnProcess
from pathlib import Path
from typing import Any, Protocol

import httpx

from sweeper.errors import SweeperError
from sweeper.record.client import (
    RequestShaper,
    RequestSpec,
    StreamClient,
    default_clock,
    open_connections,
    stream_request,
)
from sweeper.record.closed import Send, closed_loop
from sweeper.record.config import CONNECT_TIMEOUT_S
from sweeper.record.http import RawClient
from sweeper.record.lag import LagMonitor
from sweeper.record.schedule import send_on_schedule
from sweeper.record.sessions import closed_conversations, conversations, open_conversations
from sweeper.record.stamps import StampState, StampStats
from sweeper.redact import Redactor
from sweeper.schema import ClientNode, ClockOffset, RequestError, RequestTrace
from sweeper.store import TraceSetWriter

START_TIMEOUT_S = 60.0
PARENT_CHECK_S = 0.1  # how often a worker checks that its parent is still alive
STOP_GRACE_S = 5.0
POLL_S = 0.2  # longest wait on the result queue before checking on the workers
DRAIN_MAX = 512  # messages taken at a time
CONNECTIONS_HEADROOM = 2
# A rate level's schedule starts this long after the parent hands out the specs, so that every
# worker has its share before the first request is due.
WORKER_LEAD_NS = 200_000_000
WORKER_LEAD_PER_SPEC_NS = 50_000  # and this per request: the specs travel pickled


def worker_requests_name(index: int) -> str:
    return f"requests.w{index}.jsonl"


@dataclass(kw_only=True)
class WorkerSettings:
    """What every worker needs, picklable (the API key travels in memory only)."""

    folder: str | None  # None: the driver writes the requests (workers on other hosts)
    origin_ns: int
    timeout_s: float
    headers: dict[str, str]
    max_connections: int  # 0: no limit (rate levels without --max-concurrency)
    http_client: str = "raw"  # "raw": sweeper.record.http streams; "httpx": the httpx pool
    # What the run's writer masks (the key, the URLs' user info, the headers' values): the
    # workers' writers mask the same
    secrets: tuple[str, ...] = ()
    # Say each request as it is sent ("sent": id, send time): for a relay that must know what a
    # lost worker had in flight (the Ray actor)
    report_sent: bool = False


@dataclass
class LevelJob:
    url: str
    endpoint: str
    streams: int
    specs: list[RequestSpec]
    open_loop: bool = False  # send each spec at its scheduled_ns instead of in streams
    cap: int | None = None  # open loop: requests in flight at most
    think_ms: float | None = None  # multi-turn: the specs are conversations (None: single)
    job_id: int = 0
    origin_ns: int | None = None  # the run's origin on the worker's clock (None: the settings')
    connections: int = 0  # open this many before sending (a job with no specs: only that)


@dataclass
class LevelResult:
    lag_ms: list[float] = field(default_factory=list)
    stamps: list[StampState] = field(default_factory=list)
    late_ns: list[int] = field(default_factory=list)  # open loop: starts after the due time


def split_level(
    specs: list[RequestSpec], streams: int, workers: int
) -> list[tuple[int, list[RequestSpec]]]:
    """(streams, specs) per worker: stream s of the closed loop goes to worker s % workers and
    spec i to stream i % streams (the order a closed loop starts them in)."""
    used = min(workers, streams)
    shares: list[tuple[int, list[RequestSpec]]] = []
    for w in range(used):
        n_streams = len(range(w, streams, used))
        mine = [spec for i, spec in enumerate(specs) if (i % streams) % used == w]
        shares.append((n_streams, mine))
    return shares


def _deal(
    specs: list[RequestSpec], streams: int, workers: int, open_loop: bool, sessions: bool
) -> list[tuple[int, list[RequestSpec]]]:
    """(streams, specs) per worker: :func:`split_level` for a closed loop; in turn for an open
    one; whole conversations in turn where there are (a closed loop's streams split as
    :func:`split_level` splits them)."""
    if not sessions:
        if not open_loop:
            return split_level(specs, streams, workers)
        dealt = [specs[w::workers] for w in range(workers)]
        return [(0, mine) for mine in dealt if mine]
    groups = conversations(specs)
    used = workers if open_loop else min(workers, streams)
    shares: list[tuple[int, list[RequestSpec]]] = []
    for w in range(used):
        mine = [spec for group in groups[w::used] for spec in group]
        if mine:
            shares.append((0 if open_loop else len(range(w, streams, used)), mine))
    return shares


class WorkerLost(SweeperError):
    """A worker that is gone mid-level (its process or node died). ``in_flight``: its requests
    sent and not reported yet (id -> send time, ns after the run's origin), as it last said;
    None where the transport cannot tell (then the run cannot go on without it)."""

    def __init__(
        self, index: int, where: str, reason: str, in_flight: dict[str, int] | None = None
    ) -> None:
        super().__init__(f"recorder worker {index} ({where}) was lost: {reason}")
        self.index, self.where, self.reason, self.in_flight = index, where, reason, in_flight


class Transport(Protocol):
    """How the driver reaches its workers: local processes (:class:`LocalTransport`) or Ray
    actors (:class:`sweeper.record.ray_pool.RayTransport`). Both run :func:`run_worker`; the
    driver's side (:class:`WorkerPool`) is the same for both."""

    count: int
    # True: each worker appends its requests to its own file; False (workers on other hosts):
    # the driver writes every request it hears of into the run's own file.
    workers_write: bool
    # For the manifest's client section: the nodes the workers run on, each worker's clock
    # offsets (appended to as the levels measure them), what to warn of once started. Empty
    # for local processes (one host, one clock).
    nodes: list[ClientNode]
    offsets: list[ClockOffset]
    warnings: list[str]

    @property
    def lead_ns(self) -> int:
        """A rate level's extra lead for these workers (their clocks are measured first)."""
        ...

    async def start(self) -> None: ...

    async def origins(self, key: int) -> list[int]:
        """Each worker's clock reading at the run's origin, measured now (before level ``key``)."""
        ...

    def submit(self, index: int, job: LevelJob) -> None: ...

    def stop_sending(self, stop: bool) -> None: ...

    async def receive(self) -> list[Message]:
        """The next messages from any worker (at least one); :class:`WorkerLost` for one gone."""
        ...

    def close(self, *, cancel: bool) -> None: ...


Message = tuple[Any, ...]
"""``(kind, worker index, *payload)``: ``ready``, ``trace`` (a JSON line), ``warning``,
``dropped`` (field names), ``job_done`` (job id, lag samples, stamp state, lateness), ``failed``."""


@dataclass
class _Job:
    worker: int
    streams: int
    specs: list[RequestSpec]
    done: bool = False
    connect: bool = False  # only opens the worker's connections for the level


class WorkerPool:
    """The driver's side of the workers: deals each level over them, hears every request back,
    and carries a level over a worker lost mid-way (its requests in flight fail as
    ``worker_lost``; the ones it had not sent yet go to the others)."""

    def __init__(
        self,
        transport: Transport,
        on_warning: Callable[[str], None],
        write: Callable[[RequestTrace], None] | None = None,
        clock: Callable[[], int] = default_clock,
        origin_ns: int = 0,
    ):
        self.transport = transport
        self.on_warning = on_warning
        self.write = write  # where the driver writes the requests (workers_write False)
        self.clock = clock
        self.origin_ns = origin_ns
        self.dropped: set[str] = set()
        self.alive = set(range(transport.count))
        self.lost: list[str] = []  # what was lost, in words, over the run

    async def start(self) -> None:
        await self.transport.start()

    async def run_level(
        self, url: str, endpoint: str, concurrency: int, specs: list[RequestSpec],
        on_trace: Callable[[RequestTrace], bool], *, open_loop: bool = False,
        cap: int | None = None, think_ms: float | None = None,
    ) -> LevelResult:  # fmt: skip
        """Run one level on the workers: ``concurrency`` closed-loop streams, or (``open_loop``)
        each spec at its ``scheduled_ns``, the specs dealt in turn; with ``think_ms``
        (multi-turn) whole conversations are dealt, each run by one worker. ``on_trace`` is
        called per finished request; when it returns False the workers stop taking new
        requests (the error-rate stop)."""
        transport = self.transport
        transport.stop_sending(False)
        origins = await transport.origins(specs[0].concurrency if specs else concurrency)
        jobs: dict[int, _Job] = {}
        finished: set[str] = set()
        stopping = False
        result = LevelResult()

        def deal(part: list[RequestSpec], streams: int, connect: bool = False) -> None:
            """Hand ``part`` out over the workers alive; ``connect``: only ask each to open the
            connections its share will use."""
            workers = sorted(self.alive)
            shares = _deal(part, streams, len(workers), open_loop, think_ms is not None)
            for (n_streams, mine), index in zip(shares, workers, strict=False):
                job_id = len(jobs)
                jobs[job_id] = _Job(index, n_streams, [] if connect else mine, connect=connect)
                if connect:
                    needed = len(conversations(mine)) if think_ms is not None else len(mine)
                    job = LevelJob(
                        url, endpoint, n_streams, [], job_id=job_id,
                        origin_ns=origins[index], connections=min(n_streams, needed),
                    )  # fmt: skip
                else:
                    for spec in mine:
                        spec.worker = index
                    job = LevelJob(
                        url, endpoint, n_streams, mine, open_loop=open_loop, cap=cap,
                        think_ms=think_ms, job_id=job_id, origin_ns=origins[index],
                    )  # fmt: skip
                transport.submit(index, job)

        def take(trace: RequestTrace) -> None:
            nonlocal stopping
            finished.add(trace.request_id)
            if self.write is not None:
                self.write(trace)
            if not on_trace(trace) and not stopping:
                stopping = True
                transport.stop_sending(True)

        async def until_done() -> None:
            while any(not job.done for job in jobs.values()):
                try:
                    messages = await transport.receive()
                except WorkerLost as lost:
                    if lost.in_flight is None:
                        raise
                    self._carry_over(lost, jobs, finished, take, deal, think_ms is not None,
                                     stopping)  # fmt: skip
                    continue
                for kind, _index, *payload in messages:
                    if kind == "trace":
                        take(RequestTrace.model_validate_json(payload[0]))
                    elif kind == "warning":
                        self.on_warning(payload[0])
                    elif kind == "dropped":
                        self.dropped |= set(payload[0])
                    elif kind == "job_done":
                        job_id, lag_ms, stamps, late = payload
                        jobs[job_id].done = True
                        if not jobs[job_id].connect:
                            result.lag_ms.extend(lag_ms)
                            result.stamps.append(stamps)
                            result.late_ns.extend(late)
                    elif kind == "failed":
                        raise SweeperError(f"a recorder worker failed: {payload[0]}")

        if not open_loop and specs:
            # Every worker's connections open before any sends: one that still opened its own
            # while the others streamed had its first round queued behind their load at the
            # server's accept (1.5 s of TTFT at 512 streams over two workers).
            deal(specs, concurrency, connect=True)
            await until_done()
        deal(specs, concurrency)
        await until_done()
        return result

    def _carry_over(
        self,
        lost: WorkerLost,
        jobs: dict[int, _Job],
        finished: set[str],
        take: Callable[[RequestTrace], None],
        deal: Callable[[list[RequestSpec], int], None],
        sessions: bool,
        stopping: bool,
    ) -> None:
        """A worker gone mid-level: each of its requests in flight is recorded as failed
        (``worker_lost``); the ones it had not sent go to the workers left, its streams with
        them (a conversation it had begun cannot go on elsewhere: its other turns fail too)."""
        self.alive.discard(lost.index)
        in_flight = lost.in_flight or {}
        now = self.clock() - self.origin_ns
        mine = [job for job in jobs.values() if job.worker == lost.index and not job.done]
        message = f"{lost}; its requests in flight are recorded as failed (worker_lost)"
        rest: list[RequestSpec] = []
        streams = 0
        begun = set()
        for job in mine:
            job.done = True
            streams += job.streams
            if sessions:
                begun |= {
                    s.session for s in job.specs
                    if s.request_id in finished or s.request_id in in_flight
                }  # fmt: skip
            for spec in job.specs:
                if spec.request_id in finished:
                    continue
                sent_ns = in_flight.get(spec.request_id)
                if sent_ns is not None or (sessions and spec.session in begun):
                    take(_lost_trace(spec, lost, sent_ns, now))
                else:
                    rest.append(spec)
        if not self.alive:
            raise SweeperError(f"{lost}, and no recorder worker is left to finish the level")
        if rest and not stopping:
            deal(rest, max(streams, 1))
            message += f"; its {len(rest)} requests not sent yet went to the other workers"
        self.lost.append(message)
        self.on_warning(message)

    def lead_ns(self, requests: int) -> int:
        """How long before a rate level's first request is due to hand out its schedule."""
        return WORKER_LEAD_NS + WORKER_LEAD_PER_SPEC_NS * requests + self.transport.lead_ns

    def close(self, *, cancel: bool = False) -> None:
        """Stop the workers: at once (cancel: in-flight requests are dropped, as on Ctrl-C) or
        after their current level."""
        self.transport.close(cancel=cancel)


def _lost_trace(spec: RequestSpec, lost: WorkerLost, sent_ns: int | None, now: int) -> RequestTrace:
    """The failed request of a worker that was lost while it ran it (or before it could run a
    conversation's later turn)."""
    send_ns = sent_ns if sent_ns is not None else now
    return RequestTrace(
        concurrency=spec.concurrency, request_id=spec.request_id, phase=spec.phase,
        send_ns=send_ns, end_ns=max(now - send_ns, 0), status="error",
        error=RequestError(kind="worker_lost", message=str(lost)[:500]),
        worker=lost.index, scheduled_ns=spec.scheduled_ns, session=spec.session,
        turn=spec.turn, asked_input_tokens=spec.asked_input_tokens,
        asked_output_tokens=spec.asked_output_tokens,
    )  # fmt: skip


class LocalWorker:
    """One worker process of this host and its queues (``results`` and ``stop`` may be shared
    by several workers). Exits with the process that started it, however that one ends."""

    def __init__(
        self, index: int, settings: WorkerSettings, results: Any = None, stop: Any = None
    ) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.commands: Any = ctx.Queue()
        self.results: Any = ctx.Queue() if results is None else results
        self.stop: Any = ctx.Event() if stop is None else stop
        self.process: SpawnProcess = ctx.Process(
            target=_worker_main,
            args=(index, settings, self.commands, self.results, self.stop, os.getpid()),
            name=f"sweeper-record-w{index}",
            daemon=True,
        )

    def wait_ready(self, timeout_s: float) -> list[Message]:
        """Start it and wait for its first word (``ready``, or ``failed``)."""
        self.process.start()
        try:
            return [self.results.get(timeout=timeout_s)]
        except queue.Empty:
            return [("failed", -1, f"the worker did not start within {timeout_s:g} s")]

    def take(self, wait_s: float) -> list[Message]:
        """The messages waiting, waiting ``wait_s`` for a first."""
        out: list[Message] = []
        try:
            out.append(
                self.results.get(timeout=wait_s) if wait_s > 0 else self.results.get_nowait()
            )
        except queue.Empty:
            return out
        with contextlib.suppress(queue.Empty):
            while len(out) < DRAIN_MAX:
                out.append(self.results.get_nowait())
        return out

    def close(self, *, cancel: bool) -> None:
        """At once (cancel: SIGTERM; its requests in flight are dropped) or after its jobs."""
        process = self.process
        if process.pid is None:
            return
        if cancel and process.is_alive():
            os.kill(process.pid, signal.SIGTERM)
        elif not cancel:
            self.commands.put(None)
        process.join(STOP_GRACE_S)
        if process.is_alive():
            process.kill()
            process.join()
        self.commands.close()


def local_worker(index: int, settings: WorkerSettings, *, report_sent: bool = False) -> LocalWorker:
    """A worker process with queues of its own (not started: :meth:`LocalWorker.wait_ready`)."""
    return LocalWorker(index, replace(settings, report_sent=report_sent))


class LocalTransport:
    """``--workers N`` on this host: N recorder processes (spawned), started once per run, each
    writing its own requests file; all share this host's CLOCK_MONOTONIC, so no offset."""

    workers_write = True
    lead_ns = 0

    def __init__(self, count: int, settings: WorkerSettings):
        self.count = count
        self.settings = settings
        self.nodes: list[ClientNode] = []
        self.offsets: list[ClockOffset] = []
        self.warnings: list[str] = []
        ctx = multiprocessing.get_context("spawn")
        self._results: Any = ctx.Queue()
        self._stop = ctx.Event()
        self._workers = [
            LocalWorker(i, settings, results=self._results, stop=self._stop) for i in range(count)
        ]

    async def start(self) -> None:
        for worker in self._workers:
            worker.process.start()
        ready = 0
        while ready < self.count:
            for kind, _index, *payload in await self._next(START_TIMEOUT_S):
                if kind == "ready":
                    ready += 1
                elif kind == "failed":
                    raise SweeperError(f"a recorder worker failed to start: {payload[0]}")

    async def origins(self, key: int) -> list[int]:
        return [self.settings.origin_ns] * self.count

    def submit(self, index: int, job: LevelJob) -> None:
        self._workers[index].commands.put(job)

    def stop_sending(self, stop: bool) -> None:
        if stop:
            self._stop.set()
        else:
            self._stop.clear()

    def where(self, index: int) -> str:
        return f"pid {self._workers[index].process.pid}"

    async def receive(self) -> list[Message]:
        return await self._next()

    async def _next(self, timeout: float | None = None) -> list[Message]:
        """The next messages from any worker. Polls (rather than blocking a thread for good) so
        that Ctrl-C and a dead worker are noticed."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        taker = self._workers[0]  # the results queue is shared
        while True:
            messages = await loop.run_in_executor(None, taker.take, POLL_S)
            if messages:
                return messages
            for index, worker in enumerate(self._workers):
                if worker.process.exitcode is not None:
                    raise WorkerLost(
                        index, self.where(index), f"its process exited ({worker.process.exitcode})"
                    )
            if deadline is not None and loop.time() > deadline:
                raise SweeperError(f"recorder workers did not answer within {timeout:g} s")

    def close(self, *, cancel: bool) -> None:
        if cancel:
            self._stop.set()
        for worker in self._workers:
            worker.close(cancel=cancel)
        self._results.close()


# ---------------------------------------------------------------------------------------------
# inside a worker process


def _worker_main(
    index: int, settings: WorkerSettings, commands: Any, results: Any, stop: Any, parent_pid: int
) -> None:
    """A local worker process: Ctrl-C reaches the whole process group, and the parent decides,
    not the workers; a worker whose parent died (kill -9) exits too."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    run_worker(index, settings, commands, results, stop, parent_pid=parent_pid)


def run_worker(
    index: int,
    settings: WorkerSettings,
    commands: Any,
    results: Any,
    stop: Any,
    *,
    parent_pid: int | None = None,
) -> None:
    """A worker, wherever it runs (a local process, a Ray actor's thread): its own event loop
    (uvloop where installed) and HTTP client, running the jobs it takes from ``commands``
    (``.get()``; None: stop) and putting :data:`Message` s on ``results`` (``.put()``);
    ``stop.is_set()`` says stop sending."""
    try:
        import uvloop

        loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop
    except ImportError:
        loop_factory = None
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(_worker_loop(index, settings, commands, results, stop, parent_pid))
    except Exception as exc:  # reported to the driver, which names it
        results.put(("failed", index, f"worker {index}: {type(exc).__name__}: {exc}"))


async def _worker_loop(
    index: int,
    settings: WorkerSettings,
    commands: Any,
    results: Any,
    stop: Any,
    parent_pid: int | None,
) -> None:
    loop = asyncio.get_running_loop()
    most = settings.max_connections + CONNECTIONS_HEADROOM if settings.max_connections else None
    limits = httpx.Limits(max_connections=most, max_keepalive_connections=most)
    timeout = httpx.Timeout(settings.timeout_s, connect=CONNECT_TIMEOUT_S, pool=None)
    watchdog = asyncio.create_task(_exit_with_parent(parent_pid)) if parent_pid else None

    def warn(message: str) -> None:
        results.put(("warning", index, message))

    shaper = RequestShaper(on_warning=warn)
    writer = (
        TraceSetWriter(
            Path(settings.folder),
            requests_name=worker_requests_name(index),
            redactor=Redactor(settings.secrets),
        )
        if settings.folder is not None
        else None
    )
    streamer: StreamClient
    if settings.http_client == "raw":
        streamer = RawClient(headers=settings.headers, connect_timeout_s=CONNECT_TIMEOUT_S)
    else:
        streamer = httpx.AsyncClient(
            headers=settings.headers, limits=limits, timeout=timeout, trust_env=False
        )

    async def run(job: LevelJob) -> None:
        origin_ns = settings.origin_ns if job.origin_ns is None else job.origin_ns
        lag = LagMonitor()
        lag_task = asyncio.create_task(lag.run())
        stamps = StampStats()
        dropped_before = set(shaper.dropped)

        async def send(
            spec: RequestSpec, on_sent: Callable[[], None] | None = None
        ) -> RequestTrace:
            if settings.report_sent:
                results.put(("sent", index, spec.request_id, default_clock() - origin_ns))
            return await stream_request(
                client, job.url, spec, endpoint=job.endpoint, origin_ns=origin_ns,
                timeout_s=settings.timeout_s, shaper=shaper, clock=default_clock,
                stamps=stamps, on_sent=on_sent,
            )  # fmt: skip

        def settle(trace: RequestTrace) -> bool:
            line = trace.model_dump_json(exclude_none=True)
            if writer is not None:
                writer.append_request(trace)
            results.put(("trace", index, line, trace.request_id))
            return not stop.is_set()

        await open_connections(client, job.url, job.connections)
        late = await _run_job(job, send, settle, origin_ns, stop, stamps)
        lag.stop()
        with contextlib.suppress(asyncio.CancelledError):
            await lag_task
        if shaper.dropped != dropped_before:
            results.put(("dropped", index, sorted(shaper.dropped)))
        results.put(("job_done", index, job.job_id, lag.samples_ms, stamps.state(), late))

    async with streamer as client:
        results.put(("ready", index))
        # Jobs run side by side: a level's own, and the share of a lost worker handed over.
        running: set[asyncio.Task[None]] = set()
        while True:
            job: LevelJob | None = await loop.run_in_executor(None, commands.get)
            if job is None:
                break
            task = asyncio.create_task(run(job))
            running.add(task)
            task.add_done_callback(running.discard)
        await asyncio.gather(*running)
    if writer is not None:
        writer.close()
    if watchdog is not None:
        watchdog.cancel()


async def _run_job(
    job: LevelJob,
    send: Send,
    settle: Callable[[RequestTrace], bool],
    origin_ns: int,
    stop: Any,
    stamps: StampStats,
) -> list[int]:
    """A job's requests, as the parent asked; the open loop's start lateness (ns)."""

    async def send_pair(spec: RequestSpec) -> tuple[RequestTrace, bool]:
        trace = await send(spec, None)
        return trace, settle(trace)

    async def send_one(spec: RequestSpec) -> bool:
        return (await send_pair(spec))[1]

    clock = default_clock
    if job.think_ms is not None:
        groups = conversations(job.specs)
        if job.open_loop:
            return await open_conversations(
                groups, send_pair, clock=clock, origin_ns=origin_ns, think_ms=job.think_ms,
                cap=job.cap,
            )  # fmt: skip
        await closed_conversations(
            groups, job.streams, send_pair, clock=clock, origin_ns=origin_ns,
            think_ms=job.think_ms,
        )  # fmt: skip
        return []
    if job.open_loop:
        return await send_on_schedule(
            job.specs, send_one, origin_ns=origin_ns, clock=clock, cap=job.cap
        )
    # The job's specs over its streams, each stream sending its next when the last one ends.
    await closed_loop(
        job.specs, job.streams, send, settle, go=lambda: not stop.is_set(), on_gap=stamps.add_gap
    )
    return []


async def _exit_with_parent(parent_pid: int) -> None:
    """A worker whose parent died (kill -9) stops too, instead of sending on alone."""
    while True:
        await asyncio.sleep(PARENT_CHECK_S)
        if os.getppid() != parent_pid:
            os._exit(1)
