"""Prometheus scraping: names and labels kept as exposed, engine families, cache_config facts,
and the child process that parses the pages off the recorder's event loop."""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from sweeper.record.client import default_clock
from sweeper.record.scrape import (
    KEEP_PREFIXES,
    MetricsParser,
    Scraper,
    apply_metric_facts,
    cache_config_facts,
    engine_from_series,
    parse_metrics,
)
from sweeper.schema import Fact, MetricSample, Series, ServerConfig
from sweeper.testing.server import ServerThread
from sweeper.units import NS_PER_MS

OTHER_ENGINES = """\
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.25
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="m"} 0.5
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 3
# TYPE process_cpu_seconds counter
process_cpu_seconds_total 12.0
# TYPE python_gc_objects_collected counter
python_gc_objects_collected_total{generation="0"} 5
"""


def test_scripted_server_metrics_keep_vllm_names_and_labels(server: ServerThread) -> None:
    series = parse_metrics(server.metrics_text())
    names = {s.name for s in series}
    assert "vllm:num_preemptions_total" in names
    assert "vllm:kv_cache_usage_perc" in names
    buckets = [s for s in series if s.name == "vllm:time_to_first_token_seconds_bucket"]
    assert buckets and all("le" in s.labels for s in buckets)
    assert any(s.labels["le"] == "+Inf" for s in buckets)
    assert not any(n.endswith("_created") for n in names)
    assert engine_from_series(series) == "vllm"


def test_other_engine_families_kept_and_process_metrics_dropped() -> None:
    series = parse_metrics(OTHER_ENGINES)
    assert {s.name: s.value for s in series} == {
        "vllm:gpu_cache_usage_perc": 0.25,
        "sglang:token_usage": 0.5,
        "llamacpp:requests_processing": 3.0,
    }


def test_cache_config_info_labels_become_facts_and_never_override_known_ones() -> None:
    text = (
        "# TYPE vllm:cache_config_info gauge\n"
        'vllm:cache_config_info{block_size="128",kv_cache_size_tokens="262144",'
        'gpu_memory_utilization="0.9",enable_prefix_caching="True",cache_dtype="auto",'
        'num_gpu_blocks="2048",kv_cache_memory_bytes="268435456",swap_space="4"} 1.0\n'
    )
    facts = cache_config_facts(parse_metrics(text))
    assert facts["kv_cache_tokens"].value == 262144
    assert facts["block_size"].value == 128
    assert facts["enable_prefix_caching"].value is True
    assert facts["gpu_memory_utilization"].value == 0.9
    assert facts["kv_cache_memory_bytes"].source == "metrics"
    config = ServerConfig(block_size=Fact(value=16, source="user"))
    apply_metric_facts(config, facts)
    assert config.block_size is not None and config.block_size.value == 16
    assert config.num_gpu_blocks is not None and config.num_gpu_blocks.value == 2048
    assert config.extra["swap_space"].value == 4


async def test_pages_are_parsed_in_a_child_process_the_same_as_here(server: ServerThread) -> None:
    """The child (sweeper.record.metrics_child) gives back exactly what parsing in this process
    gives, page after page; a page it cannot parse is an error for that page only."""
    parser = MetricsParser()
    try:
        text = server.metrics_text()
        for page in (text, OTHER_ENGINES, text):
            assert await parser.parse(page, KEEP_PREFIXES) == parse_metrics(page)
        child = parser.child
        assert child is not None and child.pid != os.getpid() and child.returncode is None
        with pytest.raises(ValueError, match="float"):
            await parser.parse("vllm:broken{le=} not a number\n", KEEP_PREFIXES)
        assert await parser.parse(text, KEEP_PREFIXES) == parse_metrics(text)
    finally:
        await parser.aclose()
    assert child.returncode == 0  # ended by closing its input, not killed


async def test_a_dead_parser_child_falls_back_to_parsing_here(server: ServerThread) -> None:
    parser = MetricsParser()
    text = server.metrics_text()
    try:
        await parser.parse(text, KEEP_PREFIXES)
        assert parser.child is not None
        parser.child.kill()
        await parser.child.wait()
        assert await parser.parse(text, KEEP_PREFIXES) == parse_metrics(text)
        assert parser.child is None  # not restarted: parsed in a thread
    finally:
        await parser.aclose()


class _SlowParser(MetricsParser):
    """Parses as usual, 300 ms late: a child process on a machine short of cores."""

    async def parse(self, text: str, keep: tuple[str, ...]) -> list[Series]:
        await asyncio.sleep(0.3)
        return parse_metrics(text, keep)


def _slow_scraper(
    client: httpx.AsyncClient,
    server: ServerThread,
    sink: Callable[[MetricSample], None],
    **options: Any,
) -> Scraper:
    """A scraper of the test server's metrics whose parser takes 300 ms a page."""
    return Scraper(
        client=client, urls=[f"{server.base_url}/metrics"], sink=sink, origin_ns=0,
        parser=_SlowParser(), **options,
    )  # fmt: skip


async def test_a_scrape_is_timed_by_the_answer_not_by_the_parsing(server: ServerThread) -> None:
    """The page holds the server's state when it arrives; a parser that takes its time must not
    move the sample later (it would fall into the next level)."""
    samples: list[MetricSample] = []
    async with httpx.AsyncClient() as client:
        scraper = _slow_scraper(client, server, samples.append)
        before = default_clock()
        (sample,) = await scraper.scrape_all()
        after = default_clock()
    assert sample.error is None and sample.series
    assert after - before >= 300 * NS_PER_MS
    assert sample.duration_ns is not None and sample.duration_ns < 200 * NS_PER_MS
    assert before <= sample.t_ns - sample.duration_ns and sample.t_ns <= after - 250 * NS_PER_MS
    assert samples == [sample]


async def test_a_slow_parser_does_not_hold_back_the_next_scrape(server: ServerThread) -> None:
    """Scrapes keep their schedule while the pages wait for a parser three times slower than
    the interval (CI once saw a 3 s gap between scrapes of a server answering in 25 ms); every
    page fetched is still parsed, in order, once the scraper stops."""
    samples: list[MetricSample] = []
    async with httpx.AsyncClient() as client:
        scraper = _slow_scraper(client, server, samples.append, interval_s=0.1)
        task = asyncio.create_task(scraper.run())
        await asyncio.sleep(1.0)
        scraper.stop()
        await task
    sent = [s.t_ns - (s.duration_ns or 0) for s in samples]
    gaps = [(b - a) / NS_PER_MS for a, b in itertools.pairwise(sent)]
    # 1 s at 0.1 s a scrape, and the last one after stopping; parsed one by one that would be
    # four scrapes 300 ms apart.
    assert len(samples) >= 8, gaps
    assert max(gaps) < 250, gaps
    assert [s.t_ns for s in samples] == sorted(s.t_ns for s in samples)
    assert all(s.error is None and s.series for s in samples)
    assert scraper.scrapes == len(samples)


async def test_a_failing_sink_stops_the_scraper(server: ServerThread) -> None:
    """The pages are sunk by a task of their own: its failure (the trace cannot be written)
    ends the scraper with the error, it is not left behind unseen."""

    def sink(sample: MetricSample) -> None:
        raise OSError(28, "No space left on device")

    async with httpx.AsyncClient() as client:
        scraper = _slow_scraper(client, server, sink, interval_s=0.05)
        with pytest.raises(OSError, match="No space left"):
            await asyncio.wait_for(scraper.run(), timeout=5)
