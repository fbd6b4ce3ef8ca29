"""The sweep: probe the server, set up the run (a new one, or the one ``--resume`` finishes),
scrape the server's metrics all along while :mod:`sweeper.record.levels` runs the levels (closed
loop: C streams; open loop: requests on a schedule), and keep the manifest's bookkeeping so an
interrupted run can be resumed.

``record_sweep(config)`` is the whole of ``sweeper record``; the CLI only parses options into a
:class:`RecordConfig`. Nothing is lost: each request is appended and flushed as it ends; the
manifest (replaced atomically) says which levels are complete; Ctrl-C marks the run
``incomplete``; ``resume=True`` sends only the requests a run does not have yet.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from sweeper.errors import ConfigError, ErrorRateExceeded, SweeperError
from sweeper.record.checks import check_dataset
from sweeper.record.client import (
    Clock,
    RequestShaper,
    StreamClient,
    default_clock,
)
from sweeper.record.config import (
    CONNECT_TIMEOUT_S,
    CONNECTIONS_HEADROOM,
    RecordConfig,
    default_run_id,
)
from sweeper.record.datasets import Dataset
from sweeper.record.http import RawClient
from sweeper.record.lag import LagMonitor
from sweeper.record.levels import RunState, Sweep, run_levels
from sweeper.record.manifest import (
    find_resumable,
    new_manifest,
    new_workload,
    trim_partial_line,
)
from sweeper.record.progress import NullProgress, Progress
from sweeper.record.prompts import PromptSource, apply_dataset, run_dataset
from sweeper.record.resume import check_resume, close_killed_attempts
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
from sweeper.record.workers import (
    LocalTransport,
    Transport,
    WorkerPool,
    WorkerSettings,
)
from sweeper.record.workload import (
    PromptBuilder,
    TokenCounter,
    length_bounds,
    level_name,
)
from sweeper.redact import Redactor, run_secrets
from sweeper.schema import (
    METRICS_FILE,
    RunManifest,
    Workload,
    fact_value,
    strip_credentials,
)
from sweeper.store import (
    TraceSetLock,
    TraceSetWriter,
    load_trace_set,
    requests_files,
)


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
            run = RunState(
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
    run: RunState,
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
    sweep = Sweep(
        run=run, client=streamer, api=api, model=model, builder=builder, shaper=shaper,
        lag=LagMonitor(run.clock), endpoint=endpoint, source=source,
        url=f"{api}/chat/completions" if endpoint == "chat" else f"{api}/completions",
    )  # fmt: skip
    scrape_task = asyncio.create_task(scraper.run()) if scraper.urls else None
    lag_task = asyncio.create_task(sweep.lag.run())
    pool: WorkerPool | None = None
    clean = False
    manifest.client.mode = "ray" if config.ray else "workers" if config.workers > 1 else "local"
    try:
        if config.workers > 1 or config.ray:
            pool = _worker_pool(run, headers, "httpx" if streamer is client else "raw")
            await pool.start()
            _describe_workers(run, pool.transport)
        await run_levels(sweep, pool)
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
            manifest.client.lost_workers += pool.lost
        sweep.lag.stop()
        if scrape_task is not None:
            scraper.stop()
            await _finish(scrape_task)
        await _finish(lag_task)
        _close_manifest(sweep)
    return run.folder


def _prompt_source(
    run: RunState, counter: TokenCounter | None, model: str, dataset: Dataset | None
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
    context = fact_value(manifest.server.config.max_model_len)
    return PromptSource(
        workload, manifest.target.endpoint, model, manifest.run_id, builder, counter, dataset,
        output_given=dataset is not None and config.set_by_user("output_len"),
        max_model_len=context if isinstance(context, int) else None,
    )  # fmt: skip


async def _first_scrape(
    run: RunState, client: httpx.AsyncClient, parser: MetricsParser, info: ServerInfo
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


def _worker_pool(run: RunState, headers: dict[str, str], http_client: str) -> WorkerPool:
    """The ``--workers`` recorder processes, or (``--ray``) the Ray actors (not started yet)."""
    config = run.config
    run.manifest.client.workers = config.workers
    settings = WorkerSettings(
        folder=None if config.ray else str(run.folder),
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
    transport: Transport
    if config.ray:
        from sweeper.record.ray_pool import RayTransport

        transport = RayTransport(
            config.ray, config.workers, config.worker_cpus, settings, clock=run.clock
        )
        run.manifest.client.ray_address = strip_credentials(config.ray)
    else:
        transport = LocalTransport(config.workers, settings)
    write = None if transport.workers_write else run.writer.append_request
    return WorkerPool(transport, run.warn, write=write, clock=run.clock, origin_ns=run.origin_ns)


def _describe_workers(run: RunState, transport: Transport) -> None:
    """The manifest's client section: the nodes the workers run on and their clocks (the
    transport's offsets list becomes the manifest's, so that each level's measure lands in it).
    A resumed run keeps its first part's nodes and measures: this part's are added."""
    if not transport.nodes:
        return
    client = run.manifest.client
    known = {node.node_id for node in client.nodes}
    client.nodes += [node for node in transport.nodes if node.node_id not in known]
    client.clock_offsets += transport.offsets
    transport.offsets = client.clock_offsets
    for message in transport.warnings:
        run.warn(message)
    run.save()


def _close_manifest(sweep: Sweep) -> None:
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
    if sweep.source is not None and sweep.source.too_long:
        run.warn(
            f"{sweep.source.too_long} prompts of --dataset {workload.dataset} were left out: "
            "with their output length they do not fit the server's max_model_len "
            f"{sweep.source.max_model_len}"
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
    run: RunState, client: httpx.AsyncClient, info: ServerInfo, model: str
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


def _read_server_log(run: RunState) -> None:
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


__all__ = ["RecordConfig", "arecord_sweep", "record_sweep"]
