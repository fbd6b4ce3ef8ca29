"""The recorder's self-check on its own reads: counts, read delays, the worker round trip and
the rule that decides a level's chunk times may be off."""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import pytest

from sweeper.analysis.thresholds import DEFAULT_THRESHOLDS
from sweeper.record import RecordConfig, RequestCount, arecord_sweep
from sweeper.record.stamps import StampStats
from sweeper.store import load_trace_set
from sweeper.testing.server import ServerProcess

stamps_distorted = DEFAULT_THRESHOLDS.stamps_distorted
BusyLoop = Callable[[float], AbstractAsyncContextManager[None]]  # the busy_loop fixture

NS_PER_MS = 1_000_000


def test_counts_and_read_delays_summarize_one_level() -> None:
    stats = StampStats()
    for i in range(100):
        stats.add_read(i * NS_PER_MS // 10, 1)  # 0.0 .. 9.9 ms
    stats.add_read(5 * NS_PER_MS, 3)  # one read carried three chunks of a stream: two merged
    check = stats.summary(8)
    assert check is not None
    assert (check.concurrency, check.source) == (8, "kernel")
    assert (check.reads, check.chunks, check.merged_chunks) == (101, 103, 2)
    assert check.read_delay_max_ms == 9.9
    assert 4.5 < (check.read_delay_p50_ms or 0) < 5.5
    assert stamps_distorted(check)  # 2 of 103 merged (1.9 %), reads 9.8 ms late at p99


def test_merged_chunks_read_promptly_are_not_a_distortion() -> None:
    """A server that writes two events at once gives merged reads that waited no time: not the
    recorder's doing, no warning."""
    stats = StampStats()
    for _ in range(100):
        stats.add_read(20_000, 2)  # 20 µs in the socket
    check = stats.summary(1)
    assert check is not None and check.merged_chunks == 100
    assert not stamps_distorted(check)


def test_a_few_merged_chunks_do_not_reach_the_p99() -> None:
    stats = StampStats()
    chunks = 1000
    merged = int(DEFAULT_THRESHOLDS.client_merged_share * chunks) - 1
    for _ in range(chunks - 2 * merged):
        stats.add_read(5 * NS_PER_MS, 1)
    for _ in range(merged):
        stats.add_read(5 * NS_PER_MS, 2)
    check = stats.summary(64)
    assert check is not None and check.merged_chunks == merged
    assert not stamps_distorted(check)


def test_without_kernel_times_the_source_is_the_read() -> None:
    stats = StampStats()
    stats.add_read(None, 1)
    stats.add_read(1_000, 1)  # half the reads with a kernel time is not enough
    check = stats.summary(2)
    assert check is not None and check.source == "read" and check.read_delay_p99_ms is None
    assert not stamps_distorted(check)
    assert StampStats().summary(2) is None


def test_worker_states_merge_into_the_parents() -> None:
    a, b, parent = StampStats(), StampStats(), StampStats()
    a.add_read(1 * NS_PER_MS, 1)
    b.add_read(3 * NS_PER_MS, 2)
    for worker in (a, b):
        parent.merge(worker.state())
    check = parent.summary(4)
    assert check is not None
    assert (check.reads, check.chunks, check.merged_chunks) == (2, 3, 1)
    assert check.read_delay_max_ms == 3.0


def test_a_first_read_without_a_kernel_time_does_not_change_the_source() -> None:
    """Linux may deliver a socket's first read before it stamps: 1 in 200 reads without a time
    leaves the level's stamps the kernel's."""
    stats = StampStats()
    stats.add_read(None, 1)
    for _ in range(199):
        stats.add_read(100_000, 1)
    check = stats.summary(4)
    assert check is not None and check.source == "kernel" and check.read_delay_p99_ms == 0.1


def test_read_stamped_levels_are_judged_against_their_own_itl() -> None:
    """Without kernel times every chunk moves by the loop's lag: 3 ms at p99 inflates gaps of
    8 ms (over a quarter of them) but not gaps of 40 ms; never under 1 ms, always over 5 ms."""
    th = DEFAULT_THRESHOLDS
    assert th.loop_lag_distorts(3.0, itl_p50_ms=8.0)
    assert not th.loop_lag_distorts(3.0, itl_p50_ms=40.0)
    assert not th.loop_lag_distorts(0.9, itl_p50_ms=0.5)
    assert th.loop_lag_distorts(5.5, itl_p50_ms=400.0)
    assert th.loop_lag_distorts(5.5, itl_p50_ms=None)  # no gaps yet: the absolute limit


@pytest.mark.skipif(sys.platform != "linux", reason="kernel receive timestamps are Linux's")
async def test_a_sweep_that_reads_late_stores_its_figures_and_names_the_remedies(
    process_server: ServerProcess, busy_loop: BusyLoop, tmp_path: Path
) -> None:
    """A level recorded while the loop is blocked 12 ms at a time (chunks come every 5 ms, so
    reads return two or three at once) is stored and warned about; a longer --scrape-interval is
    among the remedies only while /metrics is being scraped (each scrape costs CPU the reads
    were short of)."""
    for scraping in (True, False):
        config = RecordConfig(
            base_url=process_server.base_url, input_len=8, output_len=24, concurrency=[2],
            requests_per_level=RequestCount(fixed=4), warmup=0, out=tmp_path,
            run_id=f"late-{scraping}", scrape_interval_s=0.5,
            metrics_urls=None if scraping else [],
        )  # fmt: skip
        async with busy_loop(0.012):
            folder = await arecord_sweep(config)
        manifest = load_trace_set(folder).manifest
        (check,) = manifest.client.stamp_checks
        assert check.concurrency == 2 and check.source == "kernel"
        assert stamps_distorted(check)
        (warning,) = [w for w in manifest.warnings if "read late" in w]
        assert "read late at concurrency 2" in warning
        assert f"{check.merged_chunks} of {check.chunks} chunks" in warning
        assert ("--scrape-interval than 0.5 s" in warning) is scraping
