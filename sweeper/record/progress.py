"""What the user sees while a sweep runs: level, requests done / total, running p50 TTFT and
ITL, errors. :class:`LevelStats` keeps the running figures (cheaply: ITL from a bounded window);
:class:`RichProgress` draws them live in a terminal, :class:`LineProgress` prints one line per
level (logs, CI), :class:`NullProgress` is silent (library use)."""

from __future__ import annotations

import math
import sys
import time
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from rich.console import Console
from rich.live import Live
from rich.table import Table

from sweeper.schema import RequestTrace
from sweeper.units import NS_PER_MS

ITL_WINDOW = 4096  # recent gaps kept for the running ITL median
LIVE_REFRESH_PER_S = 2  # low: the drawing thread shares the GIL with the timing loop


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass
class LevelStats:
    concurrency: int
    total: int
    done: int = 0
    errors: int = 0
    measured_done: int = 0
    measured_errors: int = 0
    ttft_ms: list[float] = field(default_factory=list)
    itl_ms: array[float] = field(default_factory=lambda: array("d"))  # every gap, 8 bytes each
    prompt_tokens: list[int] = field(default_factory=list)
    completion_tokens: list[int] = field(default_factory=list)
    started_s: float = field(default_factory=time.monotonic)
    last_error: str | None = None
    chunk_sum_mismatches: int = 0  # ok requests whose chunk token counts do not add up to usage
    label: str | None = None  # how the level is named: "C=4", "2 req/s" (default: its key)
    # Where lengths vary per request: (got, asked) of each request whose count missed its own.
    prompt_misses: list[tuple[int, int]] = field(default_factory=list)
    completion_misses: list[tuple[int, int]] = field(default_factory=list)

    def add(self, trace: RequestTrace) -> None:
        self.done += 1
        failed = trace.status != "ok"
        if failed:
            self.errors += 1
            if trace.error is not None:
                status = f" {trace.error.http_status}" if trace.error.http_status else ""
                self.last_error = f"{trace.error.kind}{status}: {trace.error.message[:80]}"
        if trace.phase != "measured":
            return
        self.measured_done += 1
        if failed:
            self.measured_errors += 1
            return
        if trace.chunk_ns:
            self.ttft_ms.append(trace.chunk_ns[0] / NS_PER_MS)
            self.itl_ms.extend(
                (b - a) / NS_PER_MS
                for a, b in zip(trace.chunk_ns, trace.chunk_ns[1:], strict=False)
            )
        # A later turn's prompt holds the conversation so far: no fixed length to check.
        if trace.prompt_tokens is not None and (trace.turn or 1) == 1:
            self.prompt_tokens.append(trace.prompt_tokens)
            asked = trace.asked_input_tokens
            if asked is not None and trace.prompt_tokens != asked:
                self.prompt_misses.append((trace.prompt_tokens, asked))
        if trace.completion_tokens is not None:
            self.completion_tokens.append(trace.completion_tokens)
            asked = trace.asked_output_tokens
            if asked is not None and trace.completion_tokens != asked:
                self.completion_misses.append((trace.completion_tokens, asked))
            if trace.chunk_tokens and sum(trace.chunk_tokens) != trace.completion_tokens:
                self.chunk_sum_mismatches += 1

    @property
    def error_rate(self) -> float:
        return self.measured_errors / self.measured_done if self.measured_done else 0.0

    def itl_p50_ms(self) -> float | None:
        """The median of all the level's chunk gaps, as the findings compute it."""
        return percentile(self.itl_ms.tolist(), 50) if self.itl_ms else None

    def recent_itl_p50_ms(self) -> float:
        """The median of the last :data:`ITL_WINDOW` gaps (the live display's; NaN: none)."""
        return percentile(self.itl_ms[-ITL_WINDOW:].tolist(), 50)

    @property
    def name(self) -> str:
        return self.label or str(self.concurrency)

    def summary(self) -> str:
        return (
            f"level {self.name}: {self.done}/{self.total} requests, "
            f"TTFT p50 {_ms(percentile(self.ttft_ms, 50))}, "
            f"ITL p50 {_ms(self.recent_itl_p50_ms())}, errors {self.errors}"
        )


def _ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.1f} ms"


class Progress(Protocol):
    def start(self, run_id: str, levels: Sequence[int | str]) -> None: ...
    def level_started(self, stats: LevelStats) -> None: ...
    def request_done(self, stats: LevelStats) -> None: ...
    def level_finished(self, stats: LevelStats) -> None: ...
    def warning(self, message: str) -> None: ...
    def stop(self) -> None: ...


class NullProgress:
    def start(self, run_id: str, levels: Sequence[int | str]) -> None:
        pass

    def level_started(self, stats: LevelStats) -> None:
        pass

    def request_done(self, stats: LevelStats) -> None:
        pass

    def level_finished(self, stats: LevelStats) -> None:
        pass

    def warning(self, message: str) -> None:
        pass

    def stop(self) -> None:
        pass


class LineProgress(NullProgress):
    """One line per level and per warning, to stderr."""

    def __init__(self, console: Console | None = None):
        self.console = console or Console(stderr=True, highlight=False, soft_wrap=True)

    def start(self, run_id: str, levels: Sequence[int | str]) -> None:
        self.console.print(f"recording {run_id}: levels {', '.join(map(str, levels))}")

    def level_finished(self, stats: LevelStats) -> None:
        self.console.print(stats.summary())

    def warning(self, message: str) -> None:
        self.console.print(f"[yellow]warning:[/yellow] {message}")


class RichProgress(LineProgress):
    """A live table: one row per finished level and the current one, redrawn twice a second."""

    def __init__(self, console: Console | None = None):
        super().__init__(console)
        self._finished: list[LevelStats] = []
        self._current: LevelStats | None = None
        self._live: Live | None = None
        self._run_id = ""

    def start(self, run_id: str, levels: Sequence[int | str]) -> None:
        self._run_id = run_id
        self._live = Live(
            get_renderable=self._table,
            console=self.console,
            refresh_per_second=LIVE_REFRESH_PER_S,
            transient=False,
        )
        self._live.start()

    def _table(self) -> Table:
        table = Table(title=f"sweeper record {self._run_id}", title_justify="left")
        for name in ("level", "done / total", "TTFT p50", "ITL p50", "errors", "elapsed"):
            table.add_column(name, justify="right")
        rows = [*self._finished, *([self._current] if self._current else [])]
        for st in rows:
            table.add_row(
                st.name,
                f"{st.done} / {st.total}",
                _ms(percentile(st.ttft_ms, 50)),
                _ms(st.recent_itl_p50_ms()),
                str(st.errors),
                f"{time.monotonic() - st.started_s:.0f} s" if st is self._current else "",
            )
        if self._current is not None and self._current.last_error:
            table.caption = f"last error: {self._current.last_error}"
        return table

    def level_started(self, stats: LevelStats) -> None:
        self._current = stats

    def level_finished(self, stats: LevelStats) -> None:
        self._finished.append(stats)
        self._current = None

    def stop(self) -> None:
        if self._live is not None:
            self._live.refresh()
            self._live.stop()
            self._live = None


def default_progress(quiet: bool = False) -> Progress:
    if quiet:
        return NullProgress()
    if sys.stderr.isatty():
        return RichProgress()
    return LineProgress()
