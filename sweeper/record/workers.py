"""``--workers N``: the streams of a level spread over N recorder processes.

One Python event loop can read only so many chunks per second before it reads them late; past
that, more processes help where a faster loop cannot. Each worker process runs its own event loop
and HTTP client and appends its requests to its own file, ``requests.w<N>.jsonl`` (the reader
globs ``requests*.jsonl``). All processes stamp times with CLOCK_MONOTONIC, which every process
of the host shares, against the one origin the parent chose, so the parts merge into one trace
set with no clock conversion.

The parent keeps everything else: the server probe, the prompts, the metrics scrapes, the
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
from dataclasses import dataclass, field
from multiprocessing.context import SpawnProcess
from pathlib import Path
from typing import Any

import httpx

from sweeper.errors import SweeperError
from sweeper.record.client import (
    RequestShaper,
    RequestSpec,
    StreamClient,
    default_clock,
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
from sweeper.schema import RequestTrace
from sweeper.store import TraceSetWriter

START_TIMEOUT_S = 60.0
PARENT_CHECK_S = 0.5  # how often a worker checks that its parent is still alive
STOP_GRACE_S = 5.0
POLL_S = 0.2  # longest wait on the result queue before checking on the workers
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

    folder: str
    origin_ns: int
    timeout_s: float
    headers: dict[str, str]
    max_connections: int  # 0: no limit (rate levels without --max-concurrency)
    http_client: str = "raw"  # "raw": sweeper.record.http streams; "httpx": the httpx pool
    # What the run's writer masks (the key, the URLs' user info, the headers' values): the
    # workers' writers mask the same
    secrets: tuple[str, ...] = ()


@dataclass
class LevelJob:
    url: str
    endpoint: str
    streams: int
    specs: list[RequestSpec]
    open_loop: bool = False  # send each spec at its scheduled_ns instead of in streams
    cap: int | None = None  # open loop: requests in flight at most
    think_ms: float | None = None  # multi-turn: the specs are conversations (None: single)


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


class WorkerPool:
    """N recorder processes, started once per run and fed one level at a time."""

    def __init__(self, count: int, settings: WorkerSettings, on_warning: Callable[[str], None]):
        self.count = count
        self.settings = settings
        self.on_warning = on_warning
        self.dropped: set[str] = set()
        ctx = multiprocessing.get_context("spawn")
        self._results: Any = ctx.Queue()
        self._stop = ctx.Event()
        self._commands: list[Any] = [ctx.Queue() for _ in range(count)]
        self._processes: list[SpawnProcess] = [
            ctx.Process(
                target=_worker_main,
                args=(i, settings, self._commands[i], self._results, self._stop, os.getpid()),
                name=f"sweeper-record-w{i}",
                daemon=True,
            )
            for i in range(count)
        ]

    async def start(self) -> None:
        for process in self._processes:
            process.start()
        ready = 0
        while ready < self.count:
            kind, *payload = await self._next(START_TIMEOUT_S)
            if kind == "ready":
                ready += 1
            elif kind == "failed":
                raise SweeperError(f"a recorder worker failed to start: {payload[0]}")

    async def _next(self, timeout: float | None = None) -> tuple[Any, ...]:
        """The next message from any worker. Polls (rather than blocking a thread for good) so
        that Ctrl-C and a dead worker are noticed."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            try:
                message: tuple[Any, ...] = await loop.run_in_executor(None, self._get)
                return message
            except queue.Empty:
                pass
            dead = [p.name for p in self._processes if p.exitcode is not None]
            if dead:
                raise SweeperError(f"recorder worker {', '.join(dead)} exited unexpectedly")
            if deadline is not None and loop.time() > deadline:
                raise SweeperError(f"recorder workers did not answer within {timeout:g} s")

    def _get(self) -> tuple[Any, ...]:
        result: tuple[Any, ...] = self._results.get(timeout=POLL_S)
        return result

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
        self._stop.clear()
        shares = _deal(specs, concurrency, self.count, open_loop, think_ms is not None)
        for index, (streams, mine) in enumerate(shares):
            for spec in mine:
                spec.worker = index
            job = LevelJob(
                url, endpoint, streams, mine, open_loop=open_loop, cap=cap, think_ms=think_ms
            )
            self._commands[index].put(job)
        result = LevelResult()
        pending = len(shares)
        while pending:
            kind, *payload = await self._next()
            if kind == "trace":
                if not on_trace(RequestTrace.model_validate_json(payload[0])):
                    self._stop.set()
            elif kind == "warning":
                self.on_warning(payload[0])
            elif kind == "dropped":
                self.dropped |= set(payload[0])
            elif kind == "level_done":
                result.lag_ms.extend(payload[0])
                result.stamps.append(payload[1])
                result.late_ns.extend(payload[2])
                pending -= 1
            elif kind == "failed":
                raise SweeperError(f"a recorder worker failed: {payload[0]}")
        return result

    def close(self, *, cancel: bool = False) -> None:
        """Stop the workers: at once (cancel: in-flight requests are dropped, as on Ctrl-C) or
        after their current level."""
        if cancel:
            self._stop.set()
            for process in self._processes:
                if process.is_alive() and process.pid is not None:
                    os.kill(process.pid, signal.SIGTERM)
        else:
            for commands in self._commands:
                commands.put(None)
        for process in self._processes:
            if process.pid is None:
                continue
            process.join(STOP_GRACE_S)
            if process.is_alive():
                process.kill()
                process.join()
        self._results.close()
        for commands in self._commands:
            commands.close()


# ---------------------------------------------------------------------------------------------
# inside a worker process


def _worker_main(
    index: int, settings: WorkerSettings, commands: Any, results: Any, stop: Any, parent_pid: int
) -> None:
    # Ctrl-C reaches the whole process group: the parent decides, the workers do not.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import uvloop

        loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop
    except ImportError:
        loop_factory = None
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(_worker_loop(index, settings, commands, results, stop, parent_pid))
    except Exception as exc:  # reported to the parent, which names it
        results.put(("failed", f"worker {index}: {type(exc).__name__}: {exc}"))


async def _worker_loop(
    index: int, settings: WorkerSettings, commands: Any, results: Any, stop: Any, parent_pid: int
) -> None:
    loop = asyncio.get_running_loop()
    most = settings.max_connections + CONNECTIONS_HEADROOM if settings.max_connections else None
    limits = httpx.Limits(max_connections=most, max_keepalive_connections=most)
    timeout = httpx.Timeout(settings.timeout_s, connect=CONNECT_TIMEOUT_S, pool=None)
    watchdog = asyncio.create_task(_exit_with_parent(parent_pid))

    def warn(message: str) -> None:
        results.put(("warning", message))

    shaper = RequestShaper(on_warning=warn)
    writer = TraceSetWriter(
        Path(settings.folder),
        requests_name=worker_requests_name(index),
        redactor=Redactor(settings.secrets),
    )
    streamer: StreamClient
    if settings.http_client == "raw":
        streamer = RawClient(headers=settings.headers, connect_timeout_s=CONNECT_TIMEOUT_S)
    else:
        streamer = httpx.AsyncClient(
            headers=settings.headers, limits=limits, timeout=timeout, trust_env=False
        )
    async with streamer as client:
        results.put(("ready", index))
        while True:
            job: LevelJob | None = await loop.run_in_executor(None, commands.get)
            if job is None:
                break
            lag = LagMonitor()
            lag_task = asyncio.create_task(lag.run())
            stamps = StampStats()
            dropped_before = set(shaper.dropped)

            async def send(
                spec: RequestSpec,
                on_sent: Callable[[], None] | None = None,
                job: LevelJob = job,
                stamps: StampStats = stamps,
            ) -> RequestTrace:
                return await stream_request(
                    client, job.url, spec, endpoint=job.endpoint, origin_ns=settings.origin_ns,
                    timeout_s=settings.timeout_s, shaper=shaper, clock=default_clock,
                    stamps=stamps, on_sent=on_sent,
                )  # fmt: skip

            def settle(trace: RequestTrace) -> bool:
                line = trace.model_dump_json(exclude_none=True)
                writer.append_request(trace)
                results.put(("trace", line))
                return not stop.is_set()

            late = await _run_job(job, send, settle, settings.origin_ns, stop, stamps)
            lag.stop()
            with contextlib.suppress(asyncio.CancelledError):
                await lag_task
            if shaper.dropped != dropped_before:
                results.put(("dropped", sorted(shaper.dropped)))
            results.put(("level_done", lag.samples_ms, stamps.state(), late))
    writer.close()
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
