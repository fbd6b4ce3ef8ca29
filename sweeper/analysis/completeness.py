"""Whether a run measured everything it planned, and if not, what is missing and how to finish it.

::

    done = completeness(load_trace_set("traces/x"))
    done.complete            # False for a run stopped by Ctrl-C
    done.missing_levels      # [8, 16]: planned, never measured
    done.cut_short           # [LevelShortfall(concurrency=4, measured=7, planned=32, ...)]
    done.resume_command      # "sweeper record --resume --run-id x --out traces"

A run is incomplete when its manifest's status is not ``complete``, when a planned level has no
measured request (and no tool summary standing in for it), or when a level stopped short: its
manifest entry is not ``complete`` or, in a recording of sweeper's own, it holds fewer measured
requests than were planned (``workload.requests_per_level``). ``sweeper summary``, ``sweeper findings`` and the run's page say
so, with the levels and, for sweeper's own recordings, the command that finishes the run
(``sweeper record --resume``, docs/record.md "Nothing lost").
"""

from __future__ import annotations

import shlex
from collections import Counter
from dataclasses import dataclass, field

from sweeper.i18n import level_label
from sweeper.schema import RECORDER_TOOL
from sweeper.store import TraceSet


@dataclass(frozen=True)
class LevelShortfall:
    """A level that started but did not finish: its measured requests against the plan."""

    concurrency: int  # the level's key: C, or a rate level's position
    measured: int
    planned: int | None
    status: str  # the manifest's status of the level ("interrupted", "complete"...)
    message: str | None = None


@dataclass(frozen=True)
class Completeness:
    run_status: str  # the manifest's status: complete, running, incomplete, aborted
    planned_levels: list[int] = field(default_factory=list)
    missing_levels: list[int] = field(default_factory=list)
    cut_short: list[LevelShortfall] = field(default_factory=list)
    resume_command: str | None = None
    # How the sentence names each level: ``C=16``, or a rate level's offered rate (``4 req/s``).
    level_names: dict[int, str] = field(default_factory=dict)

    def name(self, level: int) -> str:
        return self.level_names.get(level, f"C={level}")

    @property
    def complete(self) -> bool:
        return self.run_status == "complete" and not self.missing_levels and not self.cut_short

    def sentence(self) -> str:
        """One English sentence for the terminal (the pages have their own, translated)."""
        status = f" (status {self.run_status})" if self.run_status != "complete" else ""
        parts = [f"this run is incomplete{status}"]
        if self.missing_levels:
            parts.append(
                "levels never measured: " + ", ".join(self.name(c) for c in self.missing_levels)
            )
        for short in self.cut_short:
            of = f" of {short.planned}" if short.planned is not None else ""
            parts.append(
                f"{self.name(short.concurrency)} cut short ({short.measured}{of} measured requests, "
                f"level {short.status})"
            )
        text = "; ".join(parts) + "."
        if self.resume_command:
            text += f" Finish it with: {self.resume_command}"
        return text[0].upper() + text[1:]


def completeness(ts: TraceSet) -> Completeness:
    """What a run planned and did not measure (see the module docstring)."""
    m = ts.manifest
    planned = list(m.workload.concurrency_levels) or [lv.concurrency for lv in m.levels]
    # From the columns: a large trace set held as columns is not turned into objects for a count.
    cols = ts.columns
    measured = Counter(cols.concurrency[cols.is_("phase", "measured")].tolist())
    summaries = m.source.summaries
    # sweeper's own plan per level is what it meant to send; an import's is what it found.
    own = m.source.tool == RECORDER_TOOL
    missing: list[int] = []
    short: list[LevelShortfall] = []
    for c in planned:
        count = measured.get(c, 0)
        level = m.level(c)
        status = level.status if level is not None else "pending"
        wanted = m.workload.requests_per_level.get(str(c))
        if count == 0 and str(c) not in summaries:
            missing.append(c)
        elif status != "complete" or (own and wanted is not None and 0 < count < wanted):
            message = level.message if level is not None else None
            short.append(LevelShortfall(c, count, wanted, status, message))
    names = {c: level_label(c, m.workload.offered_rate(c), "en") for c in planned}
    done = Completeness(m.status, planned, missing, short, level_names=names)
    if done.complete:
        return done
    return Completeness(m.status, planned, missing, short, resume_command(ts), names)


def resume_command(ts: TraceSet) -> str | None:
    """The command that finishes a run of sweeper's own (docs/record.md); None for imports."""
    m = ts.manifest
    if m.source.tool != RECORDER_TOOL:
        return None
    words = ["sweeper", "record", "--resume", "--run-id", m.run_id, "--out", str(ts.path.parent)]
    if not m.target.base_url:
        words += ["--base-url", "URL"]
    return shlex.join(words)
