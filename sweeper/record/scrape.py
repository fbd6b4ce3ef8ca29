"""Scraping Prometheus endpoints during a sweep, on the recorder's clock.

Each scrape of each ``--metrics-url`` becomes one :class:`MetricSample`: its completion time
(ns after the run's origin, the same clock as the requests), and every sample of the kept
families with its name and labels exactly as exposed (``vllm:num_preemptions_total``,
``vllm:time_to_first_token_seconds_bucket`` with ``le``). The text is parsed with
``prometheus_client``'s parser in a child process (:class:`MetricsParser`): a vLLM page takes
10 ms or more of pure Python to parse, and parsed in a thread it still held the GIL long enough
to leave chunks of every stream waiting in their sockets, merged two by two (the recorder's
self-check caught it). Only the parsed rows come back.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx

from sweeper.record import metrics_child
from sweeper.record.client import Clock, default_clock
from sweeper.record.http import describe_exception
from sweeper.schema import Fact, MetricSample, Series, ServerConfig

# Families kept: the inference engines' own, and common GPU exporters (for --metrics-url).
KEEP_PREFIXES = (
    "vllm:",  # vLLM (old and new names alike: gpu_cache_usage_perc, kv_cache_usage_perc)
    "sglang:",  # SGLang
    "llamacpp:",  # llama.cpp server
    "tgi_",  # Text Generation Inference
    "DCGM_FI_",  # NVIDIA DCGM exporter
    "nvidia_",  # nvidia_gpu_exporter
    "amd_",  # AMD device metrics exporter
)
DEFAULT_SCRAPE_INTERVAL_S = 1.0
SCRAPE_TIMEOUT_S = 5.0
CHILD_EXIT_S = 1.0

# vllm:cache_config_info label -> (ServerConfig field or extra key, parser)
_CACHE_CONFIG_LABELS: dict[str, str] = {
    "kv_cache_size_tokens": "kv_cache_tokens",
    "block_size": "block_size",
    "num_gpu_blocks": "num_gpu_blocks",
    "kv_cache_memory_bytes": "kv_cache_memory_bytes",
    "kv_cache_max_concurrency": "kv_cache_max_concurrency",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "enable_prefix_caching": "enable_prefix_caching",
    "cache_dtype": "kv_cache_dtype",
}


Row = tuple[str, dict[str, str], float]


def parse_metrics(text: str, keep: Iterable[str] = KEEP_PREFIXES) -> list[Series]:
    """Every sample of the kept families, name and labels as exposed."""
    return series_of(metrics_child.rows(text, tuple(keep)))


def series_of(rows: Iterable[Row]) -> list[Series]:
    return [Series.model_construct(name=n, labels=labels, value=v) for n, labels, v in rows]


class MetricsParser:
    """Parses metrics pages in a child process (:mod:`sweeper.record.metrics_child`), started on
    first use, one page at a time. If the child cannot start or dies, pages are parsed in a
    thread instead (harder on the event loop, but nothing is lost)."""

    def __init__(self) -> None:
        self._child: asyncio.subprocess.Process | None = None
        self._prefixes: tuple[str, ...] | None = None
        self._lock = asyncio.Lock()
        self._broken = False

    @property
    def child(self) -> asyncio.subprocess.Process | None:
        """The parsing child process; None before the first page and once pages are parsed in a
        thread."""
        return self._child

    async def parse(self, text: str, keep: tuple[str, ...]) -> list[Series]:
        if not self._broken:
            async with self._lock:
                try:
                    answer = await self._ask(text, keep)
                except (OSError, EOFError, asyncio.IncompleteReadError, ValueError):
                    self._broken = True
                    self.close()
                else:
                    if isinstance(answer, dict):  # the parser's own error: a bad page
                        raise ValueError(str(answer.get("error")))
                    return series_of(answer)
        return await asyncio.to_thread(parse_metrics, text, keep)

    async def _ask(self, text: str, keep: tuple[str, ...]) -> Any:
        if self._child is None or self._prefixes != keep:
            self.close()
            # Run as a file, isolated (-I): the child imports prometheus_client, not sweeper.
            self._child = await asyncio.create_subprocess_exec(
                sys.executable, "-I", metrics_child.__file__, *keep,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            )  # fmt: skip
            self._prefixes = keep
        child = self._child
        assert child.stdin is not None and child.stdout is not None
        page = text.encode("utf-8")
        child.stdin.write(metrics_child.FRAME.pack(len(page)) + page)
        await child.stdin.drain()
        (size,) = metrics_child.FRAME.unpack(
            await child.stdout.readexactly(metrics_child.FRAME.size)
        )
        return json.loads(await child.stdout.readexactly(size))

    def close(self) -> None:
        """Kill the child at once (it failed, or is being replaced)."""
        child, self._child = self._child, None
        if child is not None and child.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                child.kill()

    async def aclose(self) -> None:
        """Stop the child: closing its stdin ends it; a kill if it does not end within a second."""
        child, self._child = self._child, None
        if child is None:
            return
        if child.stdin is not None:
            child.stdin.close()
        try:
            await asyncio.wait_for(child.wait(), CHILD_EXIT_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                child.kill()
            await child.wait()


def _label_value(text: str) -> int | float | bool | str | None:
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null", ""):
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def cache_config_facts(series: Iterable[Series]) -> dict[str, Fact]:
    """Server facts from ``vllm:cache_config_info`` labels, keyed by ServerConfig field (or by
    the label name for those with no field: they go to ``extra``)."""
    facts: dict[str, Fact] = {}
    for s in series:
        if s.name != "vllm:cache_config_info":
            continue
        for label, raw in s.labels.items():
            value = _label_value(raw)
            if value is None:
                continue
            key = _CACHE_CONFIG_LABELS.get(label, label)
            facts[key] = Fact(
                value=value, source="metrics", detail=f"vllm:cache_config_info{{{label}}}"
            )
        break
    return facts


def apply_metric_facts(config: ServerConfig, facts: dict[str, Fact]) -> None:
    """Fill config fields from metric facts where not already known (user values win)."""
    known = set(ServerConfig.model_fields) - {"extra"}
    for key, fact in facts.items():
        if key in known:
            if getattr(config, key) is None:
                setattr(config, key, fact)
        elif key not in config.extra:
            config.extra[key] = fact


def engine_from_series(series: Iterable[Series]) -> str | None:
    for s in series:
        for prefix, engine in (
            ("vllm:", "vllm"),
            ("sglang:", "sglang"),
            ("llamacpp:", "llama.cpp"),
            ("tgi_", "tgi"),
        ):
            if s.name.startswith(prefix):
                return engine
    return None


@dataclass(slots=True)
class _Page:
    """One answer to a scrape, not parsed yet: its text, or why there is none."""

    url: str
    start: int
    end: int
    text: str = ""
    error: str | None = None


@dataclass(kw_only=True)
class Scraper:
    """Scrapes every URL every ``interval_s`` until stopped; each result goes to ``sink``."""

    client: httpx.AsyncClient
    urls: list[str]
    sink: Callable[[MetricSample], None]
    origin_ns: int
    parser: MetricsParser  # the caller's: it closes it
    interval_s: float = DEFAULT_SCRAPE_INTERVAL_S
    clock: Clock = default_clock
    keep: tuple[str, ...] = KEEP_PREFIXES
    scrapes: int = 0
    failures: dict[str, str] = field(default_factory=dict)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def _fetch(self, url: str) -> _Page:
        """The page as answered, timed by the answer (the page holds the server's state by
        then; parsing can wait)."""
        start = self.clock()
        try:
            response = await self.client.get(url, timeout=SCRAPE_TIMEOUT_S)
        except httpx.HTTPError as exc:
            return _Page(url, start, self.clock(), error=describe_exception(exc))
        end = self.clock()
        if response.status_code != httpx.codes.OK:
            return _Page(url, start, end, error=f"HTTP {response.status_code}")
        return _Page(url, start, end, text=response.text)

    async def _read(self, page: _Page) -> MetricSample:
        series: list[Series] = []
        error = page.error
        if error is None:
            try:
                series = await self.parser.parse(page.text, self.keep)
            except ValueError as exc:
                error = str(exc)
        if error is not None:
            error = error[:300]
            self.failures[page.url] = error
        self.scrapes += 1
        return MetricSample(
            t_ns=page.end - self.origin_ns, url=page.url, duration_ns=page.end - page.start,
            error=error, series=series,
        )  # fmt: skip

    async def scrape_all(self) -> list[MetricSample]:
        return await self._read_all(await self._fetch_all())

    async def _fetch_all(self) -> list[_Page]:
        return await asyncio.gather(*(self._fetch(u) for u in self.urls))

    async def _read_all(self, pages: Iterable[_Page]) -> list[MetricSample]:
        samples = [await self._read(page) for page in pages]
        for sample in samples:
            self.sink(sample)
        return samples

    async def run(self) -> None:
        """Scrape on a fixed schedule (not drifting with scrape duration) until :meth:`stop`.

        The pages are parsed in order by a task of their own, so that a parser slowed down (a
        child process on a machine short of cores) never delays the next scrape: it would leave
        a short level unseen. Once stopped, every page fetched is parsed and sunk before this
        returns; cancelled, the pages not yet parsed are dropped with it."""
        loop = asyncio.get_running_loop()
        pages: asyncio.Queue[list[_Page] | None] = asyncio.Queue()
        reader = asyncio.create_task(self._read_queue(pages))
        try:
            next_at = loop.time()
            while not self._stop.is_set():
                if reader.done():
                    await reader  # it failed (the sink could not write): so does the run
                pages.put_nowait(await self._fetch_all())
                next_at += self.interval_s
                if next_at < loop.time():
                    # A slow scrape (a busy server) put us behind: start the schedule again
                    # from now rather than firing the missed scrapes in a burst.
                    next_at = loop.time()
                delay = next_at - loop.time()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), timeout=delay)
            # a last one, after the last request
            pages.put_nowait(await self._fetch_all())
            pages.put_nowait(None)
            await asyncio.shield(reader)
        finally:
            reader.cancel()

    async def _read_queue(self, pages: asyncio.Queue[list[_Page] | None]) -> None:
        while (batch := await pages.get()) is not None:
            await self._read_all(batch)

    def stop(self) -> None:
        self._stop.set()
