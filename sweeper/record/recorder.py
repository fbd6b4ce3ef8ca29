"""The sweep: for each concurrency level, keep C streams busy (closed loop: each stream sends its
next request when the previous one ends), record every request as it ends, scrape the server's
metrics all along, and keep the manifest's bookkeeping so an interrupted run can be resumed.

``record_sweep(config)`` is the whole of ``sweeper record``; the CLI only parses options into a
:class:`RecordConfig`. Nothing is lost: each request is appended and flushed as it ends; the
manifest (replaced atomically) says which levels are complete; Ctrl-C marks the run
``incomplete``; ``resume=True`` sends only the requests a run does not have yet.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import httpx

from sweeper.errors import ConfigError, ErrorRateExceeded, SweeperError
from sweeper.record.checks import check_dataset, check_lengths, check_schedule, self_check
from sweeper.record.client import (
    Clock,
    RequestShaper,
    RequestSpec,
    StreamClient,
    default_clock,
    stream_request,
)
from sweeper.record.config import (
    CONNECT_TIMEOUT_S,
    CONNECTIONS_HEADROOM,
    PROMPT_BUILD_PARALLEL,
    RecordConfig,
    default_run_id,
)
from sweeper.record.datasets import Dataset
from sweeper.record.http import RawClient, describe_exception
from sweeper.record.lag import LagMonitor, summarize_lag
from sweeper.record.manifest import (
    find_resumable,
    new_manifest,
    new_workload,
    trim_partial_line,
)
from sweeper.record.progress import LevelStats, NullProgress, Progress
from sweeper.record.prompts import PromptSource, apply_dataset, run_dataset
from sweeper.record.resume import check_resume, close_killed_attempts
from sweeper.record.schedule import resumed_offsets, send_on_schedule
from sweeper.record.scrape import (
    MetricsParser,
    Scraper,
    apply_metric_facts,
    cache_config_facts,
    engine_from_series,
)
from sweeper.record.serverinfo import (
    ServerInfo,
    api_roots,
    probe_server,
    tokenize_counter,
    tokenizer_counter,
)
from sweeper.record.sessions import closed_conversations, conversations, open_conversations
from sweeper.record.stamps import StampStats
from sweeper.record.workers import WORKER_LEAD_NS, LevelResult, WorkerPool, WorkerSettings
from sweeper.record.workload import (
    PromptBuilder,
    TokenCounter,
    length_bounds,
    level_name,
    request_id,
)
from sweeper.redact import Redactor, run_secrets
from sweeper.schema import (
    METRICS_FILE,
    LevelAttempt,
    LevelStatus,
    LoopLag,
    RequestTrace,
    RunManifest,
    Workload,
    strip_credentials,
)
from sweeper.store import (
    TraceSetLock,
    TraceSetWriter,
    load_trace_set,
    requests_files,
)


@dataclass(kw_only=True)
class _Run:
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
class _Sweep:
    """What every level of a recording uses: where and what to send, and the helpers that
    outlive a level (the prompts' builder, the fields the server turned down, the lag monitor)."""

    run: _Run
    client: StreamClient
    api: str
    model: str
    builder: PromptBuilder
    shaper: RequestShaper
    lag: LagMonitor
    url: str = ""  # where the requests go
    endpoint: str = "completions"
    source: PromptSource | None = None  # what each request says (built with the builder)


def record_sweep(
    config: RecordConfig,
    *,
    progress: Progress | None = None,
    clock: Clock = default_clock,
    transport: httpx.AsyncBaseTransport | None = None,
) -> Path:
    """Record a sweep; return the trace-set folder. Raises :class:`SweeperError` subclasses for
    problems a user can fix; KeyboardInterrupt after marking the run incomplete."""
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        return runner.run(
            arecord_sweep(config, progress=progress, clock=clock, transport=transport)
        )


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop where it is installed: less overhead per chunk, less lag."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


async def arecord_sweep(
    config: RecordConfig,
    *,
    progress: Progress | None = None,
    clock: Clock = default_clock,
    transport: httpx.AsyncBaseTransport | None = None,
) -> Path:
    """:func:`record_sweep` for callers already inside an event loop."""
    config.check()
    progress = progress or NullProgress()
    previous: RunManifest | None = None
    folder: Path | None = None
    notes: list[str] = []
    if config.resume:
        folder, previous = find_resumable(config)
        config.run_id = previous.run_id
        notes = check_resume(config, previous)
        base_url = config.base_url or previous.target.base_url
        if base_url is None:
            raise ConfigError("the run to resume names no base URL; pass --base-url")
        config.base_url = base_url
    assert config.base_url is not None
    # A dataset file that does not parse is said before any request.
    dataset = run_dataset(config, previous.workload if previous is not None else None)
    root, api = api_roots(config.base_url)
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    limits = _limits(previous.workload if previous is not None else new_workload(config))
    timeout = httpx.Timeout(config.timeout_s, connect=CONNECT_TIMEOUT_S, pool=None)
    async with httpx.AsyncClient(
        headers=headers, limits=limits, timeout=timeout, transport=transport, trust_env=False
    ) as client:
        info = await probe_server(client, config.base_url)
        if previous is None:
            folder, manifest, model, origin_ns = _new_run(config, info, root, clock)
        else:
            assert folder is not None
            manifest, model, origin_ns = _resumed_run(config, previous, folder, clock)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"--out {config.out}: cannot create {folder}: {exc.strerror or exc}"
            ) from exc
        with TraceSetLock(folder, "resume it" if previous else "record into it"):
            if previous is not None:
                for path in [*requests_files(folder), folder / METRICS_FILE]:
                    if path.suffix != ".gz":  # compacted files hold whole lines only
                        trim_partial_line(path)
            secrets = [config.base_url, *(config.metrics_urls or [])]
            writer = TraceSetWriter(
                folder, redactor=Redactor.for_run(api_key=config.api_key, urls=secrets)
            )
            run = _Run(
                config=config, manifest=manifest, folder=folder, writer=writer,
                origin_ns=origin_ns, clock=clock, progress=progress,
            )  # fmt: skip
            if previous is not None:
                earlier = [r for r in load_trace_set(folder).requests if r.status != "cancelled"]
                run.done_ids = {r.request_id for r in earlier}
                for trace in earlier:
                    run.earlier.setdefault(trace.concurrency, []).append(trace)
                close_killed_attempts(manifest, earlier)
            for note in notes:
                run.warn(note)
            streamer = _streaming_client(config, headers, transport, client)
            # Kept per run (a resume may use another client): it bounds how exact the stamps are.
            manifest.client.http_client = "httpx" if streamer is client else "raw"
            parser = MetricsParser()
            try:
                return await _record(
                    run, client, streamer, parser, info, model, api, headers, dataset
                )
            finally:
                writer.close()
                await parser.aclose()
                if streamer is not client:
                    await streamer.aclose()


def _limits(workload: Workload) -> httpx.Limits:
    """The httpx pool: a connection per stream, and for a rate level one per request in flight
    (no cap unless --max-concurrency: a pool that made requests wait would hide a queue)."""
    if workload.open_loop and workload.max_concurrency is None:
        return httpx.Limits(max_connections=None, max_keepalive_connections=None)
    most = max(workload.concurrency_levels) if not workload.open_loop else 0
    most = max(most, workload.max_concurrency or 0) + CONNECTIONS_HEADROOM
    return httpx.Limits(max_connections=most, max_keepalive_connections=most)


def _new_run(
    config: RecordConfig, info: ServerInfo, root: str, clock: Clock
) -> tuple[Path, RunManifest, str, int]:
    """(folder, manifest, model, clock origin) of a new run: the model checked against the
    server's list, the run named, its folder not in use yet."""
    model = config.model or (info.model_ids[0] if info.model_ids else None)
    if model is None:
        raise ConfigError(
            f"the server at {strip_credentials(root)} lists no model at /v1/models; pass --model"
        )
    if config.model and info.model_ids and config.model not in info.model_ids:
        raise ConfigError(
            f"--model {config.model!r} is not served at {strip_credentials(root)}; "
            f"it serves: {', '.join(info.model_ids)}"
        )
    started = datetime.now(UTC)
    run_id = config.run_id or default_run_id(model, started)
    config.run_id = run_id  # the caller may need it (e.g. to say how to resume)
    folder = Path(config.out) / run_id
    if folder.exists() and any(folder.iterdir()):
        raise ConfigError(
            f"{folder} already exists; pass another --run-id, or --resume to finish it"
        )
    origin_ns = clock()
    return folder, new_manifest(config, info, model, run_id, started, origin_ns), model, origin_ns


def _resumed_run(
    config: RecordConfig, manifest: RunManifest, folder: Path, clock: Clock
) -> tuple[RunManifest, str, int]:
    """(manifest, model, clock origin) of a run resumed: its own origin, which this boot's
    monotonic clock must still count from."""
    model = manifest.target.model or config.model or ""
    origin_ns = manifest.clock.origin_monotonic_ns if manifest.clock else clock()
    if clock() < origin_ns:
        raise ConfigError(
            f"cannot resume {folder}: the monotonic clock restarted since it was recorded "
            "(the machine rebooted?); record a new run"
        )
    manifest.status = "running"
    manifest.ended_at = None
    return manifest, model, origin_ns


def _streaming_client(
    config: RecordConfig,
    headers: dict[str, str],
    transport: httpx.AsyncBaseTransport | None,
    client: httpx.AsyncClient,
) -> StreamClient:
    """The raw HTTP/1.1 client for http(s) targets (``--http-client raw``, the default); the
    httpx client (shared with the probes) for ``--http-client httpx`` or an injected transport."""
    scheme = (config.base_url or "").split("://", 1)[0].lower()
    if config.http_client != "raw" or transport is not None or scheme not in ("http", "https"):
        return client
    return RawClient(headers=headers, connect_timeout_s=CONNECT_TIMEOUT_S)


async def _record(
    run: _Run,
    client: httpx.AsyncClient,
    streamer: StreamClient,
    parser: MetricsParser,
    info: ServerInfo,
    model: str,
    api: str,
    headers: dict[str, str],
    dataset: Dataset | None = None,
) -> Path:
    """The sweep, with the scraper and the lag monitor around it; the manifest's end is kept
    whatever happens (Ctrl-C: ``incomplete``; the error rate passed: ``aborted``)."""
    config, manifest = run.config, run.manifest
    for message in info.warnings:
        run.warn(message)
    if config.server_log is not None:
        run.writer.copy_server_log(config.server_log)
    counter = await _token_counter(run, client, info, model)
    scraper = await _first_scrape(run, client, parser, info)
    shaper = RequestShaper(on_warning=run.warn)
    workload = manifest.workload
    source = _prompt_source(run, counter, model, dataset)
    builder = source.builder
    run.save()
    run.progress.start(
        manifest.run_id,
        [level_name(workload, k) if workload.open_loop else k for k in workload.concurrency_levels],
    )
    endpoint = manifest.target.endpoint
    sweep = _Sweep(
        run=run, client=streamer, api=api, model=model, builder=builder, shaper=shaper,
        lag=LagMonitor(run.clock), endpoint=endpoint, source=source,
        url=f"{api}/chat/completions" if endpoint == "chat" else f"{api}/completions",
    )  # fmt: skip
    scrape_task = asyncio.create_task(scraper.run()) if scraper.urls else None
    lag_task = asyncio.create_task(sweep.lag.run())
    pool: WorkerPool | None = None
    clean = False
    try:
        if config.workers > 1:
            pool = _worker_pool(run, headers, "httpx" if streamer is client else "raw")
            await pool.start()
        await _run_levels(sweep, pool)
        manifest.status = "complete"
        clean = True
    except asyncio.CancelledError:
        manifest.status = "incomplete"
        raise
    except ErrorRateExceeded:
        manifest.status = "aborted"
        clean = True  # the workers finished the level: they can stop in order
        raise
    except Exception:
        # A failure of the recorder's own: what was recorded is kept and can be resumed.
        manifest.status = "incomplete"
        raise
    finally:
        if pool is not None:
            pool.close(cancel=not clean)
            shaper.dropped |= pool.dropped
        sweep.lag.stop()
        if scrape_task is not None:
            scraper.stop()
            await _finish(scrape_task)
        await _finish(lag_task)
        _close_manifest(sweep)
    return run.folder


def _prompt_source(
    run: _Run, counter: TokenCounter | None, model: str, dataset: Dataset | None
) -> PromptSource:
    """What the run's requests say: a new run's manifest takes in its dataset first."""
    config, manifest = run.config, run.manifest
    workload = manifest.workload
    if dataset is not None and not config.resume:
        apply_dataset(workload, dataset, config)
    check_dataset(manifest, dataset, run.warn)
    input_len = workload.input_len or config.input_len
    builder = PromptBuilder(
        input_len,
        seed=workload.seed or 0,
        counter=counter,
        shared_prefix=workload.unique_prefix is False,
        max_len=length_bounds(input_len, workload.input_len_range or 0)[1],
    )
    return PromptSource(
        workload, manifest.target.endpoint, model, manifest.run_id, builder, counter, dataset,
        output_given=dataset is not None and config.set_by_user("output_len"),
    )  # fmt: skip


async def _first_scrape(
    run: _Run, client: httpx.AsyncClient, parser: MetricsParser, info: ServerInfo
) -> Scraper:
    """The run's scraper, after one scrape of each URL: the server facts on the pages go into
    the manifest; a default URL without metrics is dropped, a given one is kept trying."""
    config, manifest = run.config, run.manifest
    metrics_urls = (
        config.metrics_urls if config.metrics_urls is not None else [f"{info.root}/metrics"]
    )
    scraper = Scraper(
        client=client,
        urls=metrics_urls,
        sink=run.writer.append_metrics,
        origin_ns=run.origin_ns,
        parser=parser,
        interval_s=config.scrape_interval_s,
        clock=run.clock,
    )
    first = await scraper.scrape_all() if metrics_urls else []
    for sample in first:
        if sample.error is None:
            apply_metric_facts(manifest.server.config, cache_config_facts(sample.series))
            manifest.server.engine = manifest.server.engine or engine_from_series(sample.series)
        elif config.metrics_urls is None:
            # The default URL: a server without /metrics is common; stop asking it.
            scraper.urls.remove(sample.url)
            run.warn(f"no metrics at {sample.url} ({sample.error}); recording without them")
        else:
            run.warn(f"cannot scrape {sample.url}: {sample.error}; will keep trying")
    run.scraping = bool(scraper.urls)
    return scraper


def _worker_pool(run: _Run, headers: dict[str, str], http_client: str) -> WorkerPool:
    """The ``--workers`` recorder processes (not started yet)."""
    config = run.config
    run.manifest.client.workers = config.workers
    settings = WorkerSettings(
        folder=str(run.folder),
        origin_ns=run.origin_ns,
        timeout_s=config.timeout_s,
        headers=headers,
        max_connections=_limits(run.manifest.workload).max_connections or 0,
        http_client=http_client,
        secrets=tuple(
            run_secrets(
                api_key=config.api_key,
                urls=[config.base_url, *(config.metrics_urls or [])],
                headers=headers,
            )
        ),
    )
    return WorkerPool(config.workers, settings, run.warn)


async def _run_levels(sweep: _Sweep, pool: WorkerPool | None) -> None:
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
            _end_attempt(level, "interrupted")
            level.message = (
                "interrupted (Ctrl-C); finish with --resume"
                if isinstance(exc, asyncio.CancelledError)
                else f"stopped by {type(exc).__name__}: {exc}; finish with --resume"
            )
        raise


def _close_manifest(sweep: _Sweep) -> None:
    """The manifest's last word, whatever ended the sweep: the end time, the request fields the
    server turned down, prompts not built exactly, the server log's facts."""
    run, shaper, builder = sweep.run, sweep.shaper, sweep.builder
    workload = run.manifest.workload
    run.manifest.ended_at = datetime.now(UTC)
    if shaper.dropped:
        workload.request_params = shaper.apply(workload.request_params)
        if "ignore_eos" in shaper.dropped:
            workload.ignore_eos = False
    if builder.inexact:
        run.warn(
            f"{builder.inexact} prompts could not be built to exactly {builder.input_len} tokens"
            if not workload.input_len_range
            else f"{builder.inexact} prompts could not be built to exactly their own length"
        )
    if sweep.source is not None and sweep.source.inexact:
        run.warn(
            f"{sweep.source.inexact} replayed prompts could not be built to exactly their "
            "input_length (words merging at a block boundary)"
        )
    _read_server_log(run)
    run.save()
    run.progress.stop()


async def _finish(task: asyncio.Task[Any]) -> None:
    """Wait for a helper task to end, even while this task is being cancelled."""
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        task.cancel()
    except Exception:  # a helper's failure must not hide the sweep's outcome
        pass


async def _token_counter(
    run: _Run, client: httpx.AsyncClient, info: ServerInfo, model: str
) -> TokenCounter | None:
    config, workload = run.config, run.manifest.workload
    endpoint = run.manifest.target.endpoint
    counter = await tokenize_counter(client, info, model, endpoint)
    if counter is not None:
        workload.exact_input, workload.prompt_source = True, "server /tokenize"
        return counter
    if config.tokenizer is not None:
        workload.exact_input, workload.prompt_source = True, f"tokenizer {config.tokenizer}"
        return tokenizer_counter(config.tokenizer, endpoint)
    workload.exact_input, workload.prompt_source = False, "words (approximate)"
    run.warn(
        "the server has no /tokenize and no --tokenizer was given: prompt lengths are "
        "approximate (one word per token); the server-reported prompt tokens are recorded"
    )
    return None


def _read_server_log(run: _Run) -> None:
    if run.config.server_log is None:
        return
    from sweeper.facts.serverlog import apply_server_log, parse_server_log

    try:
        # Copied again at the end: lines the server wrote during the run count too.
        dest = run.writer.copy_server_log(run.config.server_log)
        log = parse_server_log(dest.read_text(encoding="utf-8", errors="replace"))
    except (OSError, SweeperError) as exc:
        run.warn(f"cannot read --server-log {run.config.server_log}: {exc}")
        return
    apply_server_log(run.manifest, log)


async def _run_level(sweep: _Sweep, level: LevelStatus, pool: WorkerPool | None = None) -> None:
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
        scrape_interval_s=scrape_interval,
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
        _end_attempt(level, "aborted")
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
    _end_attempt(level, "complete")
    run.save()


@dataclass
class _Sent:
    """What sending a level's requests measured about the recorder itself."""

    stamps: StampStats = field(default_factory=StampStats)
    lag_ms: list[float] = field(default_factory=list)  # from the workers
    lag: LoopLag | None = None
    late_ns: list[int] = field(default_factory=list)  # open loop: start after the due time


async def _send_level(
    sweep: _Sweep,
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
            await _closed_sessions(sweep, key, specs, keep, sent)
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
    sweep: _Sweep,
    specs: list[RequestSpec],
    keep: Callable[[RequestTrace], bool],
    pool: WorkerPool | None,
    sent: _Sent,
) -> None:
    """A rate level's measured requests, each at its due time: the level's schedule starts now
    (the workers': shortly, once each has its share); a resumed level's missing requests keep
    their offsets, shifted so the first is due at once (:func:`resumed_offsets`)."""
    run = sweep.run
    start = run.now_ns() + (WORKER_LEAD_NS if pool is not None else 0)
    for spec, offset in zip(specs, resumed_offsets([s.offset_ns for s in specs]), strict=True):
        spec.scheduled_ns = start + offset
    specs.sort(key=lambda spec: spec.scheduled_ns or 0)
    workload = run.manifest.workload
    cap = workload.max_concurrency
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
    sweep: _Sweep, keep: Callable[[RequestTrace], bool], sent: _Sent
) -> Callable[[RequestSpec], Awaitable[tuple[RequestTrace, bool]]]:
    async def send(spec: RequestSpec) -> tuple[RequestTrace, bool]:
        trace = await _send_one(sweep, spec, sent.stamps)
        return trace, keep(trace)

    return send


async def _closed_sessions(
    sweep: _Sweep,
    streams: int,
    specs: list[RequestSpec],
    keep: Callable[[RequestTrace], bool],
    sent: _Sent,
) -> None:
    """A closed-loop level of conversations: the warm-up first, then C streams, each running
    one conversation at a time."""
    run = sweep.run
    warm = [s for s in specs if s.phase == "warmup"]
    if warm:
        await _stream_level(sweep, streams, warm, keep, sent.stamps)
    await closed_conversations(
        conversations([s for s in specs if s.phase == "measured"]), streams,
        _session_send(sweep, keep, sent), clock=run.clock, origin_ns=run.origin_ns,
        think_ms=run.manifest.workload.think_time_ms or 0.0,
    )  # fmt: skip


async def _send_one(sweep: _Sweep, spec: RequestSpec, stamps: StampStats) -> RequestTrace:
    run = sweep.run
    trace = await stream_request(
        sweep.client, sweep.url, spec, endpoint=sweep.endpoint, origin_ns=run.origin_ns,
        timeout_s=run.config.timeout_s, shaper=sweep.shaper, clock=run.clock, stamps=stamps,
    )  # fmt: skip
    run.writer.append_request(trace)
    return trace


def _earlier(run: _Run, concurrency: int) -> str:
    """``, 8 of them recorded before this resume`` (measured ones), or nothing."""
    before = sum(t.phase == "measured" for t in run.earlier.get(concurrency, []))
    return f", {before} of them recorded before this resume" if before else ""


def _end_attempt(
    level: LevelStatus, outcome: Literal["complete", "aborted", "interrupted"]
) -> None:
    """Close the level's attempt under way at the level's end time."""
    if level.attempts and level.attempts[-1].end_ns is None:
        level.attempts[-1].end_ns = level.end_ns
        level.attempts[-1].outcome = outcome


async def _stream_level(
    sweep: _Sweep,
    streams: int,
    specs: list[RequestSpec],
    take: Callable[[RequestTrace], bool],
    stamps: StampStats,
) -> None:
    """Requests in this process: one closed-loop stream per concurrent request, each sending
    its next when the last one ends, until the specs run out or ``take`` says stop."""
    queue = list(reversed(specs))

    async def stream() -> None:
        while queue:
            trace = await _send_one(sweep, queue.pop(), stamps)
            if not take(trace):
                queue.clear()  # stop sending

    await asyncio.gather(*(stream() for _ in range(min(streams, len(specs)))))


def _warmup_count(workload: Workload, concurrency: int) -> int:
    return workload.warmup_requests.get(str(concurrency), workload.warmup_per_level)


async def _build_specs(
    sweep: _Sweep, key: int, indices: list[int], warmup: int
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


__all__ = ["RecordConfig", "arecord_sweep", "record_sweep"]
