"""A sweep's levels, one after the other: each level's prompts built before it starts, its
requests sent (a closed loop of C streams; or, for rate levels, the warm-up, then each request at
its due time; conversations turn by turn), its figures and checks kept, and its status in the
manifest, so that a run stopped anywhere (Ctrl-C, the error rate, a crash) can be resumed.

:class:`RunState` is one recording's state (the manifest, the writer, the clock); :class:`Sweep`
adds what every level uses. :mod:`sweeper.record.recorder` sets both up and calls
:func:`run_levels`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import httpx

from sweeper.errors import ErrorRateExceeded, SweeperError
from sweeper.record.checks import check_lengths, check_schedule, self_check
from sweeper.record.client import (
    Clock,
    RequestShaper,
    RequestSpec,
    StreamClient,
    open_connections,
    stream_request,
)
from sweeper.record.closed import closed_loop
from sweeper.record.config import (
    PROMPT_BUILD_PARALLEL,
    RecordConfig,
)
from sweeper.record.http import describe_exception
from sweeper.record.lag import LagMonitor, summarize_lag
from sweeper.record.progress import LevelStats, Progress
from sweeper.record.prompts import PromptSource
from sweeper.record.schedule import resumed_offsets, send_on_schedule
from sweeper.record.sessions import closed_conversations, conversations, open_conversations
from sweeper.record.stamps import StampStats
from sweeper.record.workers import (
    LevelResult,
    WorkerPool,
)
from sweeper.record.workload import (
    PromptBuilder,
    level_name,
    request_id,
)
from sweeper.schema import (
    LevelAttempt,
    LevelStatus,
    LoopLag,
    RequestTrace,
    RunManifest,
    Workload,
)
from sweeper.store import (
    TraceSetWriter,
)


@dataclass(kw_only=True)
class RunState:
    """State of one recording: the manifest being kept, the writer, the clock origin."""

    config: RecordConfig
    manifest: RunManifest
    folder: Path
    writer: TraceSetWriter
    origin_ns: int
    clock: Clock
    progress: Progress
    done_ids: set[str] = field(default_factory=set)
    # A resumed run's requests recorded before, by level: the level's error rate counts them.
    earlier: dict[int, list[RequestTrace]] = field(default_factory=dict)
    warned: set[str] = field(default_factory=set)
    scraping: bool = False  # some --metrics-url is being scraped during the levels

    def warn(self, message: str) -> None:
        if message in self.warned:
            return
        self.warned.add(message)
        self.manifest.warnings.append(message)
        self.progress.warning(message)

    def save(self) -> None:
        self.writer.write_manifest(self.manifest)

    def now_ns(self) -> int:
        return self.clock() - self.origin_ns


@dataclass(kw_only=True)
class Sweep:
    """What every level of a recording uses: where and what to send, and the helpers that
    outlive a level (the prompts' builder, the fields the server turned down, the lag monitor)."""

    run: RunState
    client: StreamClient
    api: str
    model: str
    builder: PromptBuilder
    shaper: RequestShaper
    lag: LagMonitor
    url: str = ""  # where the requests go
    endpoint: str = "completions"
    source: PromptSource | None = None  # what each request says (built with the builder)


async def run_levels(sweep: Sweep, pool: WorkerPool | None) -> None:
    """Every level not complete yet, in order; Ctrl-C marks the one under way interrupted."""
    run, manifest = sweep.run, sweep.run.manifest
    level: LevelStatus | None = None
    try:
        for concurrency in manifest.workload.concurrency_levels:
            level = manifest.level(concurrency)
            if level is None:
                level = LevelStatus(concurrency=concurrency)
                manifest.levels.append(level)
            if level.status == "complete":
                continue
            await _run_level(sweep, level, pool)
            level = None
    except (asyncio.CancelledError, Exception) as exc:
        if level is not None and level.status == "running":
            level.status = "interrupted"
            level.end_ns = run.now_ns()
            end_attempt(level, "interrupted")
            level.message = (
                "interrupted (Ctrl-C); finish with --resume"
                if isinstance(exc, asyncio.CancelledError)
                else f"stopped by {type(exc).__name__}: {exc}; finish with --resume"
            )
        raise


async def _run_level(sweep: Sweep, level: LevelStatus, pool: WorkerPool | None = None) -> None:
    run = sweep.run
    config, manifest = run.config, run.manifest
    key = level.concurrency
    workload = manifest.workload
    measured = workload.requests_per_level.get(str(key), config.requests_for(key))
    warmup = _warmup_count(workload, key)
    open_loop = workload.open_loop
    indices = [
        i
        for i in range(warmup + measured)
        if request_id(key, i, open_loop=open_loop) not in run.done_ids
    ]
    # A resumed level is one level: its earlier requests, failures included, count in its
    # figures and its error rate.
    stats = LevelStats(
        key, total=warmup + measured, label=level_name(workload, key) if open_loop else None
    )
    for trace in run.earlier.get(key, []):
        stats.add(trace)
    resumed = level.status in ("interrupted", "running", "aborted") and level.start_ns is not None
    specs = await _build_specs(sweep, key, indices, warmup)
    level.status = "running"
    start_ns = run.now_ns()
    level.start_ns = level.start_ns if resumed and level.start_ns is not None else start_ns
    level.attempts.append(LevelAttempt(start_ns=start_ns))
    level.message = "resumed" if resumed else None
    run.save()
    run.progress.level_started(stats)
    sweep.lag.reset()
    allowed_failures = config.max_error_rate * measured

    def failed_too_often() -> bool:
        return config.max_error_rate < 1.0 and stats.measured_errors > allowed_failures

    def take(trace: RequestTrace) -> bool:
        """Count a finished request; False once the level can no longer pass the error rate."""
        stats.add(trace)
        run.progress.request_done(stats)
        return not failed_too_often()

    if failed_too_often():
        specs = []  # its earlier requests failed too often already: nothing more is sent
    sent = await _send_level(sweep, key, specs, take, pool)
    level.end_ns = run.now_ns()
    scrape_interval = config.scrape_interval_s if run.scraping else None
    self_check(
        manifest, stats, sent.lag, sent.stamps.summary(key), run.warn,
        scrape_interval_s=scrape_interval, reads=sent.stamps,
    )  # fmt: skip
    check_schedule(manifest, key, sent.late_ns, run.warn)
    check_lengths(manifest, stats, run.warn)
    run.progress.level_finished(stats)
    if (
        config.max_error_rate < 1.0
        and stats.measured_done
        and stats.error_rate > config.max_error_rate
    ):
        level.status = "aborted"
        end_attempt(level, "aborted")
        level.message = (
            f"error rate {stats.error_rate:.0%} ({stats.measured_errors} of {stats.measured_done} "
            f"measured requests{_earlier(run, key)}) passed --max-error-rate "
            f"{config.max_error_rate:g}"
            + (f"; last error: {stats.last_error}" if stats.last_error else "")
        )
        run.save()
        raise ErrorRateExceeded(
            f"stopped the sweep at {level_name(workload, key, long=True)}: {level.message}"
        )
    level.status = "complete"
    end_attempt(level, "complete")
    run.save()


@dataclass
class _Sent:
    """What sending a level's requests measured about the recorder itself."""

    stamps: StampStats = field(default_factory=StampStats)
    lag_ms: list[float] = field(default_factory=list)  # from the workers
    lag: LoopLag | None = None
    late_ns: list[int] = field(default_factory=list)  # open loop: start after the due time


async def _send_level(
    sweep: Sweep,
    key: int,
    specs: list[RequestSpec],
    take: Callable[[RequestTrace], bool],
    pool: WorkerPool | None,
) -> _Sent:
    """Send a level's specs, in this process or on the workers: a closed loop of C streams, or
    (rate levels) the warm-up first, then the measured requests on their schedule."""
    run = sweep.run
    workload = run.manifest.workload
    sent = _Sent()
    stopped = False

    def keep(trace: RequestTrace) -> bool:
        nonlocal stopped
        stopped = stopped or not take(trace)
        return not stopped

    async def closed(streams: int, part: list[RequestSpec]) -> None:
        if pool is not None:
            _merge(sent, await pool.run_level(sweep.url, sweep.endpoint, streams, part, keep))
        else:
            await _stream_level(sweep, streams, part, keep, sent.stamps)

    if not workload.open_loop:
        if workload.sessions:
            await _closed_sessions(sweep, key, specs, keep, sent, pool)
        elif specs:
            await closed(key, specs)
    else:
        warm = [s for s in specs if s.phase == "warmup"]
        if warm:  # before the schedule: at once, at most --max-concurrency at a time
            await closed(min(len(warm), workload.max_concurrency or len(warm)), warm)
        measured = [s for s in specs if s.phase == "measured"]
        if measured and not stopped:
            await _open_level(sweep, measured, keep, pool, sent)
    sent.lag = summarize_lag(sent.lag_ms, key) if pool is not None else sweep.lag.summary(key)
    return sent


def _merge(sent: _Sent, result: LevelResult) -> None:
    sent.lag_ms.extend(result.lag_ms)
    sent.late_ns.extend(result.late_ns)
    for state in result.stamps:
        sent.stamps.merge(state)


async def _open_level(
    sweep: Sweep,
    specs: list[RequestSpec],
    keep: Callable[[RequestTrace], bool],
    pool: WorkerPool | None,
    sent: _Sent,
) -> None:
    """A rate level's measured requests, each at its due time: the level's schedule starts now
    (the workers': shortly, once each has its share); a resumed level's missing requests keep
    their offsets, shifted so the first is due at once (:func:`resumed_offsets`)."""
    run = sweep.run
    lead = pool.lead_ns(len(specs)) if pool is not None else 0
    start = run.now_ns() + lead
    for spec, offset in zip(specs, resumed_offsets([s.offset_ns for s in specs]), strict=True):
        spec.scheduled_ns = start + offset
    specs.sort(key=lambda spec: spec.scheduled_ns or 0)
    workload = run.manifest.workload
    cap = workload.max_concurrency
    if workload.sessions and pool is not None:
        result = await pool.run_level(
            sweep.url, sweep.endpoint, 0, specs, keep, open_loop=True, cap=cap,
            think_ms=workload.think_time_ms or 0.0,
        )  # fmt: skip
        _merge(sent, result)
        return
    if workload.sessions:
        sent.late_ns += await open_conversations(
            conversations(specs), _session_send(sweep, keep, sent), clock=run.clock,
            origin_ns=run.origin_ns, think_ms=workload.think_time_ms or 0.0, cap=cap,
        )  # fmt: skip
        return
    if pool is not None:
        _merge(
            sent,
            await pool.run_level(
                sweep.url, sweep.endpoint, 0, specs, keep, open_loop=True, cap=cap
            ),
        )
        return

    async def send(spec: RequestSpec) -> bool:
        return keep(await _send_one(sweep, spec, sent.stamps))

    sent.late_ns += await send_on_schedule(
        specs, send, origin_ns=run.origin_ns, clock=run.clock, cap=cap
    )


def _session_send(
    sweep: Sweep, keep: Callable[[RequestTrace], bool], sent: _Sent
) -> Callable[[RequestSpec], Awaitable[tuple[RequestTrace, bool]]]:
    async def send(spec: RequestSpec) -> tuple[RequestTrace, bool]:
        trace = await _send_one(sweep, spec, sent.stamps)
        return trace, keep(trace)

    return send


async def _closed_sessions(
    sweep: Sweep,
    streams: int,
    specs: list[RequestSpec],
    keep: Callable[[RequestTrace], bool],
    sent: _Sent,
    pool: WorkerPool | None = None,
) -> None:
    """A closed-loop level of conversations: the warm-up first, then C streams, each running
    one conversation at a time (on the workers: each conversation on one of them)."""
    run = sweep.run
    think_ms = run.manifest.workload.think_time_ms or 0.0
    warm = [s for s in specs if s.phase == "warmup"]
    measured = [s for s in specs if s.phase == "measured"]
    if pool is not None:
        for part, think in ((warm, None), (measured, think_ms)):
            if part:
                _merge(sent, await pool.run_level(
                    sweep.url, sweep.endpoint, streams, part, keep, think_ms=think
                ))  # fmt: skip
        return
    if warm:
        await _stream_level(sweep, streams, warm, keep, sent.stamps)
    groups = conversations(measured)
    await open_connections(sweep.client, sweep.url, min(streams, len(groups)))
    await closed_conversations(
        groups, streams, _session_send(sweep, keep, sent), clock=run.clock,
        origin_ns=run.origin_ns, think_ms=think_ms,
    )  # fmt: skip


async def _send_one(sweep: Sweep, spec: RequestSpec, stamps: StampStats) -> RequestTrace:
    run = sweep.run
    trace = await stream_request(
        sweep.client, sweep.url, spec, endpoint=sweep.endpoint, origin_ns=run.origin_ns,
        timeout_s=run.config.timeout_s, shaper=sweep.shaper, clock=run.clock, stamps=stamps,
    )  # fmt: skip
    run.writer.append_request(trace)
    return trace


def _earlier(run: RunState, concurrency: int) -> str:
    """``, 8 of them recorded before this resume`` (measured ones), or nothing."""
    before = sum(t.phase == "measured" for t in run.earlier.get(concurrency, []))
    return f", {before} of them recorded before this resume" if before else ""


def end_attempt(level: LevelStatus, outcome: Literal["complete", "aborted", "interrupted"]) -> None:
    """Close the level's attempt under way at the level's end time."""
    if level.attempts and level.attempts[-1].end_ns is None:
        level.attempts[-1].end_ns = level.end_ns
        level.attempts[-1].outcome = outcome


async def _stream_level(
    sweep: Sweep,
    streams: int,
    specs: list[RequestSpec],
    take: Callable[[RequestTrace], bool],
    stamps: StampStats,
) -> None:
    """Requests in this process: one closed-loop stream per concurrent request, each sending
    its next when the last one ends (and then recording the last one), until the specs run out
    or ``take`` says stop."""
    run = sweep.run

    async def send(spec: RequestSpec, on_sent: Callable[[], None] | None) -> RequestTrace:
        return await stream_request(
            sweep.client, sweep.url, spec, endpoint=sweep.endpoint, origin_ns=run.origin_ns,
            timeout_s=run.config.timeout_s, shaper=sweep.shaper, clock=run.clock,
            stamps=stamps, on_sent=on_sent,
        )  # fmt: skip

    def settle(trace: RequestTrace) -> bool:
        run.writer.append_request(trace)
        return take(trace)

    await open_connections(sweep.client, sweep.url, min(streams, len(specs)))
    await closed_loop(specs, streams, send, settle, on_gap=stamps.add_gap)


def _warmup_count(workload: Workload, concurrency: int) -> int:
    return workload.warmup_requests.get(str(concurrency), workload.warmup_per_level)


async def _build_specs(
    sweep: Sweep, key: int, indices: list[int], warmup: int
) -> list[RequestSpec]:
    """All prompts of a level, built before it starts (no /tokenize traffic during it); a rate
    level's measured requests get their due times within the level (``offset_ns``)."""
    source = sweep.source
    assert source is not None
    gate = asyncio.Semaphore(PROMPT_BUILD_PARALLEL)
    offsets = source.offsets(key, warmup)

    async def one(index: int) -> RequestSpec:
        async with gate:
            spec = await source.spec(key, index, warmup)
        if offsets and index >= warmup:
            spec.offset_ns = offsets[index - warmup]
        return spec

    try:
        return list(await asyncio.gather(*(one(i) for i in indices)))
    except httpx.HTTPError as exc:
        raise SweeperError(
            f"building prompts with the server's /tokenize failed: {describe_exception(exc)}"
        ) from exc
