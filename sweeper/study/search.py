"""``--find-max``: the highest level meeting an SLO, found by bisecting between the grid's levels.

Each level measured for a configuration (its sweeps' levels and every probe so far) is judged on
the SLO's terms, each term on the level's statistic (``ttft_p99<=2s``: the level's p99 TTFT);
with repeats a level's statistic is the mean over the runs that measured it. Between the highest
level that meets the SLO (``meets``) and the lowest above it that fails (``fails``) the next
probe is the middle; the search ends when ``fails - meets <= tolerance x meets`` (or, for
concurrency, when no whole number lies between them). Each probe is a run of its own (one
level), so nothing measured is lost and no finished run is reopened.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sweeper.analysis.frames import level_frame
from sweeper.analysis.slo import SLO
from sweeper.store import TraceSet

DEFAULT_TOLERANCE = 0.1


@dataclass(frozen=True)
class Bracket:
    """What the measurements say: ``meets`` / ``fails`` as in :class:`~sweeper.study.model.FindMax`,
    and the next level to probe (None: the search is over)."""

    meets: float | None
    fails: float | None
    next_probe: float | None


def level_value(row: pd.Series) -> float | None:
    """A level's position on the search axis: its offered rate (rate levels), else its C."""
    rate = row.get("offered_rate_rps")
    if rate is not None and np.isfinite(rate):
        return float(rate)
    if rate is not None and not pd.isna(rate):
        return None  # inf: all at once, no point between it and a finite rate
    return float(row["concurrency"])


def level_means(trace_sets: Iterable[TraceSet], slos: Sequence[SLO]) -> dict[float, pd.Series]:
    """Each measured level's statistics, the mean over the runs that measured it."""
    rows: dict[float, list[pd.Series]] = {}
    for ts in trace_sets:
        for _, row in level_frame(ts).iterrows():
            if not row.get("completed"):
                continue
            value = level_value(row)
            if value is not None:
                rows.setdefault(value, []).append(row)
    # the schedule's columns too: an open-loop level's ttft / e2el terms are judged on them
    columns = sorted({c for slo in slos for c in (slo.column, slo.sched_column) if c})
    out = {}
    for value, group in rows.items():
        frame = pd.DataFrame(group)
        out[value] = pd.Series(
            {
                c: pd.to_numeric(frame[c], errors="coerce").mean()
                for c in columns
                if c in frame.columns
            }
        )
    return out


def meets_all(row: pd.Series, slos: Sequence[SLO]) -> bool:
    return all(slo.met(row) for slo in slos)


def bracket(
    judged: dict[float, bool], *, tolerance: float = DEFAULT_TOLERANCE, integer: bool = True
) -> Bracket:
    """The bracket of the limit and the next probe, from each level's verdict."""
    met = [v for v, ok in judged.items() if ok]
    meets = max(met) if met else None
    if meets is None:
        return Bracket(None, min(judged) if judged else None, None)
    above = [v for v, ok in judged.items() if not ok and v > meets]
    fails = min(above) if above else None
    if fails is None:
        return Bracket(meets, None, None)
    if fails - meets <= tolerance * meets:
        return Bracket(meets, fails, None)
    middle = (meets + fails) / 2
    if integer:
        middle = math.floor(middle)
        if middle <= meets:
            return Bracket(meets, fails, None)
    return Bracket(meets, fails, float(middle))
