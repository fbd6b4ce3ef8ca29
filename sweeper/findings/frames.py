"""What the findings read: :class:`RunFrames`, the manifest and the frames of one run.

:func:`run_frames` computes them from a trace set (once: the report pages reuse them); tests and
notebooks build them by hand from a per-level table. The helpers below read the inputs several
rules share: the single-stream baseline, the ITL percentiles and the tokens of one request.
"""

from __future__ import annotations

import math
import re
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from sweeper.analysis.frames import gap_frame, level_frame, request_frame, request_tokens
from sweeper.analysis.server_frames import server_level_frame
from sweeper.analysis.tail_signature import GapAttribution, gap_attribution
from sweeper.analysis.thresholds import Thresholds
from sweeper.facts.complete import complete_facts
from sweeper.facts.serverlog import parse_server_log
from sweeper.schema import RunManifest, fact_value
from sweeper.store import TraceSet
from sweeper.units import finite

_PER_LEVEL = re.compile(r"C=(\d+):\s*(-?[0-9]+(?:\.[0-9]+)?)(?=,|$)")


def level_cell(frame: pd.DataFrame | None, concurrency: int, name: str) -> float:
    """``frame[name]`` at one concurrency level as a float; NaN when the frame, the column, the
    level or the number is missing."""
    if frame is None or frame.empty or name not in frame.columns:
        return math.nan
    # The first row of the level, found in the column's array (a boolean mask over the whole
    # frame cost ~10x more; the rules read thousands of cells a run).
    rows = np.flatnonzero(frame["concurrency"].to_numpy() == concurrency)
    if rows.size == 0:
        return math.nan
    v = frame[name].iat[int(rows[0])]
    if not isinstance(v, float | int | np.number | np.bool_):  # text, None, NA
        v = pd.to_numeric(pd.Series([v], dtype=object), errors="coerce").iloc[0]
    return float(v) if pd.notna(v) else math.nan


@dataclass
class RunFrames:
    """What the findings read: the manifest and the frames of :mod:`sweeper.analysis.frames` and
    :mod:`sweeper.analysis.server_frames`. Frames may be partial (a per-level table typed in by hand):
    missing columns or frames make the findings that need them ``unknown``."""

    manifest: RunManifest
    levels: pd.DataFrame
    server: pd.DataFrame | None = None
    _: KW_ONLY
    requests: pd.DataFrame | None = None
    gaps: pd.DataFrame | None = None
    server_log_stats: int = 0  # periodic stat lines found in the server log (0: none / no log)
    # Chunks of several tokens (a server streaming every N tokens): the level's ``itl_*_ms``
    # are then per token and the chunk gaps are kept as ``chunk_itl_*_ms`` (see per_token).
    tokens_per_chunk: float = math.nan
    itl_per_token: bool = False
    # gap_attribution per (level, thresholds): tail_cause and long_input both read it
    _attributions: dict[tuple[int, Thresholds], GapAttribution | None] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        self.levels = self.levels.sort_values("concurrency").reset_index(drop=True)

    def col(self, name: str) -> pd.Series | None:
        if name not in self.levels.columns:
            return None
        series = pd.to_numeric(self.levels[name], errors="coerce")
        return series if series.notna().any() else None

    def value(self, concurrency: int, name: str) -> float:
        return level_cell(self.levels, concurrency, name)

    def server_value(self, concurrency: int, name: str) -> float:
        return level_cell(self.server, concurrency, name)

    def attribution(self, concurrency: int, th: Thresholds) -> GapAttribution | None:
        """The long gaps of one level blamed on their causes
        (:func:`~sweeper.analysis.tail_signature.gap_attribution`, with the level's own
        server's preemption count), computed once; None without per-chunk gaps."""
        key = (concurrency, th)
        if key not in self._attributions:
            found = None
            if self.requests is not None and self.gaps is not None and not self.gaps.empty:
                preempted = self.server_value(concurrency, "preemptions_delta")
                found = gap_attribution(concurrency, self.requests, self.gaps, preempted, th)
            self._attributions[key] = found
        return self._attributions[key]

    def chunk_gap(self, concurrency: int, stat: str) -> float:
        """The gap between chunks at one level (``p50``...), whatever a chunk carried: what a
        late client read delays."""
        name = f"chunk_itl_{stat}_ms" if self.itl_per_token else f"itl_{stat}_ms"
        return self.value(concurrency, name)

    @property
    def concurrencies(self) -> list[int]:
        return [int(c) for c in self.levels["concurrency"]]

    def level_facts(self, name: str) -> dict[int, float]:
        """A server configuration value that differed between levels (each level on its own
        server), by level: ``server.config.extra["<name>_per_level"]`` (``C=8: 8, C=16: 16``);
        empty when the sweep has one value (see :meth:`fact`) or none."""
        fact = self.manifest.server.config.extra.get(f"{name}_per_level")
        out: dict[int, float] = {}
        for level, value in _PER_LEVEL.findall(str(fact.value) if fact is not None else ""):
            out[int(level)] = float(value)
        return out

    def fact(self, path: str) -> Any:
        """A manifest fact's value by dotted path (``server.config.max_num_seqs``), or None."""
        obj: Any = self.manifest
        for part in path.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                return None
        return fact_value(obj) if hasattr(obj, "source") else obj


def run_frames(ts: TraceSet) -> RunFrames:
    """The frames the findings read, from a trace set."""
    requests = request_frame(ts)
    gaps = gap_frame(ts)
    levels = level_frame(ts, requests=requests, gaps=gaps)
    server = server_level_frame(ts, requests=requests) if len(levels) else None
    log_stats = 0
    if ts.server_log:
        log_stats = len(parse_server_log(ts.server_log).stats)
    return RunFrames(
        complete_facts(ts.manifest),
        levels,
        server,
        requests=requests,
        gaps=gaps,
        server_log_stats=log_stats,
    )


# Chunks carry this many tokens on average (some level), or the server says it streams every N
# tokens: ITL is then judged per token, since a gap between chunks is N tokens' worth of time.
MULTI_TOKEN_CHUNKS = 1.5
_ITL_STATS = ("mean", "p50", "p90", "p95", "p99")


def stream_interval(data: RunFrames) -> float:
    """The server's stream interval (tokens per streamed chunk) as configured, NaN when unknown."""
    fact = data.manifest.server.config.extra.get("stream_interval")
    value = fact.value if fact is not None else None
    return float(value) if finite(value) else math.nan


def per_token(data: RunFrames) -> RunFrames:
    """The frames with ITL per token where chunks carry several tokens: each level's
    ``itl_<stat>_ms`` becomes its ``token_itl_<stat>_ms`` (every gap divided by its chunk's
    tokens), the chunk gaps kept as ``chunk_itl_<stat>_ms``. Unchanged otherwise."""
    carried = data.col("tokens_per_chunk_mean")
    tokens = float(carried.max()) if carried is not None else math.nan
    interval = stream_interval(data)
    multi = (finite(tokens) and tokens >= MULTI_TOKEN_CHUNKS) or (finite(interval) and interval > 1)
    token_cols = [f"token_itl_{s}_ms" for s in _ITL_STATS]
    if not multi or not all(c in data.levels.columns for c in token_cols):
        return replace(data, tokens_per_chunk=tokens)
    levels = data.levels.copy()
    for stat in _ITL_STATS:
        levels[f"chunk_itl_{stat}_ms"] = levels[f"itl_{stat}_ms"]
        levels[f"itl_{stat}_ms"] = levels[f"token_itl_{stat}_ms"]
    return replace(data, levels=levels, tokens_per_chunk=tokens, itl_per_token=True)


# ---------------------------------------------------------------------------------------------
# The baseline: a single stream


@dataclass(frozen=True)
class SingleStream:
    concurrency: int
    tok_s: float  # per stream


def streams(data: RunFrames, level: int) -> float:
    """Requests in flight at a level: C in a closed loop; in a rate run the time-weighted mean
    measured from the trace (``inflight_mean``; NaN where the trace cannot say)."""
    if not data.manifest.workload.open_loop:
        return float(level)
    return data.value(level, "inflight_mean")


def single_stream(data: RunFrames) -> SingleStream | None:
    """The rate per stream of the lowest level with a throughput (a rate run: per request in
    flight, measured from the trace)."""
    tput = data.col("output_throughput_tok_s")
    if tput is None:
        return None
    for c, t in zip(data.concurrencies, tput, strict=True):
        n = streams(data, c)
        if finite(t) and t > 0 and finite(n) and n > 0:
            return SingleStream(c, float(t) / n)
    return None


def request_lengths(data: RunFrames) -> tuple[float | None, float | None]:
    """Input and output tokens of one request (:func:`sweeper.analysis.frames.request_tokens`)."""
    return request_tokens(data.manifest.workload, data.levels)


def itl_percentiles(data: RunFrames) -> tuple[list[float], list[float], list[float]] | None:
    p50, p90, p99 = data.col("itl_p50_ms"), data.col("itl_p90_ms"), data.col("itl_p99_ms")
    if p50 is None or p99 is None:
        return None
    p90_list = [float(x) for x in p90] if p90 is not None else [math.nan] * len(p50)
    return [float(x) for x in p50], p90_list, [float(x) for x in p99]
