"""The recorder's checks of what it recorded, said as warnings in the manifest: its own
timing (event-loop lag, late socket reads, a rate level's schedule not kept), lengths the
server did not give as asked, and a dataset's skipped or repeated prompts. Each takes the
manifest and a ``warn`` callback (the run's, which keeps each message once)."""

from __future__ import annotations

from collections.abc import Callable

from sweeper.analysis.thresholds import DEFAULT_THRESHOLDS
from sweeper.errors import ConfigError
from sweeper.record.config import SEND_LATE_P99_MS
from sweeper.record.datasets import Dataset
from sweeper.record.progress import LevelStats, percentile
from sweeper.record.prompts import PromptSource
from sweeper.record.stamps import StampStats
from sweeper.record.workload import PromptBuilder, level_name
from sweeper.schema import LoopLag, RunManifest, StampCheck, fact_value
from sweeper.units import NS_PER_MS

Warn = Callable[[str], None]


def check_dataset(manifest: RunManifest, dataset: Dataset | None, warn: Warn) -> None:
    """Refuse chat messages sent to /v1/completions; say what the file's loader skipped and
    where the sweep needs more prompts than the file has (they repeat: prefix-cache hits)."""
    if dataset is None:
        return
    workload = manifest.workload
    if manifest.target.endpoint != "chat" and any(i.messages for i in dataset.items):
        raise ConfigError(
            f"--dataset {workload.dataset}: its requests carry chat 'messages', which "
            "/v1/completions does not take; add --endpoint chat"
        )
    skipped = dataset.skipped_summary()
    if skipped:
        warn(skipped)
    if dataset.kind == "mooncake":
        context = fact_value(manifest.server.config.max_model_len)
        count = workload.requests_per_level.get("1", len(dataset.items))
        if isinstance(context, int):
            over = sum(
                (i.input_len or 0) + (i.output_len or 0) > context for i in dataset.items[:count]
            )
            if over:
                warn(
                    f"{over} of the trace's {count} requests ask for more tokens than the "
                    f"server's max_model_len {context}: the server will refuse them (recorded "
                    "as errors; --max-error-rate 1 keeps the replay going whatever their share)"
                )
        return
    total = PromptSource(workload, "", "", "", PromptBuilder(1)).planned_total()
    if total > len(dataset.items):
        warn(
            f"--dataset {workload.dataset} has {len(dataset.items)} prompts and the sweep sends "
            f"{total}: prompts repeat, and a repeated prompt may hit the server's prefix cache"
        )


def self_check(
    manifest: RunManifest,
    stats: LevelStats,
    lag: LoopLag | None,
    stamps: StampCheck | None,
    warn: Warn,
    *,
    scrape_interval_s: float | None = None,
    reads: StampStats | None = None,
) -> None:
    """Store the level's loop lag and stamp check; warn where the chunk times may be off, by the
    rules the ``client_health`` finding applies (:class:`sweeper.analysis.thresholds.Thresholds`). With
    kernel receive times the loop's lag does not reach the stamps, only merged chunks do. With
    the level's ``reads`` the warning names the part that lagged (send, read or parse:
    :meth:`StampStats.lagged_part`), so a user knows whether more ``--workers`` would help."""
    concurrency = stats.concurrency
    where = level_name(manifest.workload, concurrency, long=True)
    client = manifest.client
    if lag is not None:
        client.loop_lag = [x for x in client.loop_lag if x.concurrency != concurrency] + [lag]
    if stamps is not None:
        client.stamp_checks = [x for x in client.stamp_checks if x.concurrency != concurrency] + [
            stamps
        ]
    th = DEFAULT_THRESHOLDS
    # Each /metrics scrape costs this process a few ms of CPU and the server more to render the
    # page: on a machine short of cores, reads late by that much cluster around the scrapes.
    scrapes = (
        f", a longer --scrape-interval than {scrape_interval_s:g} s"
        if scrape_interval_s is not None
        else ""
    )
    if stamps is not None and stamps.source == "kernel":
        if th.stamps_distorted(stamps):
            warn(
                f"the recorder read late at {where}: "
                f"{stamps.merged_chunks} of {stamps.chunks} chunks "
                f"({stamps.merged_chunks / stamps.chunks:.1%}) shared a socket read with their "
                f"stream's next chunk while reads waited up to {stamps.read_delay_p99_ms:.1f} ms "
                f"(p99, max {stamps.read_delay_max_ms:.1f} ms): ITL there may be off by up to "
                f"that much (fewer streams per process, more --workers{scrapes}, or a less "
                "loaded machine would help)"
                + (f"; {reads.lagged_part(stamps.read_delay_p99_ms)[1]}" if reads else "")
            )
    elif lag is not None and th.loop_lag_distorts(lag.p99_ms, stats.itl_p50_ms()):
        warn(
            f"the recorder's event loop lagged at {where} (p99 "
            f"{lag.p99_ms:.1f} ms, max {lag.max_ms:.1f} ms): ITL there may be inflated "
            "by up to that much (this process or the machine was busy: fewer streams per "
            f"process{scrapes}, or a less loaded machine, would help)"
            + (f"; {reads.lagged_part(lag.p99_ms, loop_lag=True)[1]}" if reads else "")
        )


def check_schedule(manifest: RunManifest, key: int, late_ns: list[int], warn: Warn) -> None:
    """Warn where the recorder started a rate level's requests late: its own delay, not the
    server's, would then sit in the client queue (``send - scheduled``)."""
    if not late_ns:
        return
    late_ms = [n / NS_PER_MS for n in late_ns]
    p99 = percentile(late_ms, 99)
    if p99 <= SEND_LATE_P99_MS:
        return
    warn(
        f"the recorder could not keep the schedule at "
        f"{level_name(manifest.workload, key, long=True)}: requests started up to "
        f"{p99:.1f} ms after their due time (p99, max {max(late_ms):.1f} ms), which their client "
        "queue includes (a lower rate, more --workers, or a less loaded machine would help)"
    )


def check_lengths(manifest: RunManifest, stats: LevelStats, warn: Warn) -> None:
    """Warn where the server's usage says lengths were not what was asked: the run's fixed
    --input-len / --output-len, or each request's own where lengths vary."""
    workload = manifest.workload
    where = level_name(workload, stats.concurrency, long=True)
    if stats.chunk_sum_mismatches:
        warn(
            f"{where}: in {stats.chunk_sum_mismatches} requests the per-chunk token counts "
            "do not add up to the server's usage (it gives no per-chunk counts, so each chunk "
            "was counted as one token); ITL per chunk is exact, per-token views are estimates"
        )
    for misses, counted, what in (
        (stats.prompt_misses, stats.prompt_tokens, "had a prompt of"),
        (stats.completion_misses, stats.completion_tokens, "produced"),
    ):
        if misses:
            off = [got - asked for got, asked in misses]
            warn(
                f"{where}: {len(misses)} of {len(counted)} requests {what} a length other than "
                f"they asked for, by {min(off):+d}..{max(off):+d} tokens (server usage)"
            )
    # A fixed --input-len / --output-len (lengths that vary were judged per request above).
    for tokens, asked, ranged, misses, what, flag in (
        (stats.prompt_tokens, workload.input_len, workload.input_len_range, stats.prompt_misses,
         "had a prompt of", "--input-len"),
        (stats.completion_tokens, workload.output_len, workload.output_len_range,
         stats.completion_misses, "produced", "--output-len"),
    ):  # fmt: skip
        if asked is None or not tokens or ranged or misses:
            continue
        off = [n for n in tokens if n != asked]
        if off:
            warn(
                f"{where}: {len(off)} of {len(tokens)} requests {what} {min(off)}..{max(off)} "
                f"tokens, not {flag} {asked} (server usage)"
            )
