"""The recorder's own health: how late its event loop wakes up.

A timer that should fire every :data:`LagMonitor.INTERVAL_S` measures how late it actually
fired. A busy loop (too many streams for one process, a slow callback) delays the reading of
every chunk by about as much, and that delay lands in the recorded ITL. The lag of each level is
stored in the manifest (``client.loop_lag``); where the chunks are stamped when read, a level
whose p99 lag distorts its ITL (:meth:`sweeper.analysis.thresholds.Thresholds.loop_lag_distorts`) gets a
warning.
"""

from __future__ import annotations

import asyncio

from sweeper.record.client import Clock, default_clock
from sweeper.record.progress import percentile
from sweeper.schema import LoopLag
from sweeper.units import NS_PER_MS, NS_PER_S


class LagMonitor:
    INTERVAL_S = 0.01
    MAX_SAMPLES = 200_000  # per level; ~33 min at the interval above

    def __init__(self, clock: Clock = default_clock):
        self.clock = clock
        self.samples_ms: list[float] = []
        self._stop = asyncio.Event()

    async def run(self) -> None:
        interval_ns = int(self.INTERVAL_S * NS_PER_S)
        while not self._stop.is_set():
            before = self.clock()
            await asyncio.sleep(self.INTERVAL_S)
            late_ns = self.clock() - before - interval_ns
            if len(self.samples_ms) < self.MAX_SAMPLES:
                self.samples_ms.append(max(late_ns, 0) / NS_PER_MS)

    def stop(self) -> None:
        self._stop.set()

    def reset(self) -> None:
        self.samples_ms = []

    def summary(self, concurrency: int) -> LoopLag | None:
        return summarize_lag(self.samples_ms, concurrency)


def summarize_lag(samples_ms: list[float], concurrency: int) -> LoopLag | None:
    """One level's lag samples (from one or several processes) as a :class:`LoopLag`."""
    if not samples_ms:
        return None
    return LoopLag(
        concurrency=concurrency,
        samples=len(samples_ms),
        p50_ms=round(percentile(samples_ms, 50), 4),
        p99_ms=round(percentile(samples_ms, 99), 4),
        max_ms=round(max(samples_ms), 4),
    )
