"""The server's own view of each concurrency level: scraped Prometheus samples -> one row per level.

:func:`server_level_frame` cuts the scrapes of ``server_metrics.jsonl`` into the time window of
each level (the manifest's level start/end, else the level's first send to last end) and reduces
them: gauges (running, waiting, KV usage) to their max and mean over the scrapes inside the
window; counters (preemptions, prompt / generation tokens, prefix cache) and histograms (sum and
count of queue, prefill, decode, TTFT, ITL, iteration tokens) to their increase over the window,
so a histogram's mean for the level is ``delta(sum) / delta(count)``.

Series with the same name but different labels (``engine``, ``model_name``, several servers) are
summed; KV usage, a fraction per engine, is averaged instead. Old and new vLLM names, SGLang's and
llama.cpp's are all read. What no scrape says stays NaN: nothing is invented. Where no scrape
carried a gauge, the periodic "Running / Waiting / KV cache usage" lines of the server log stand
in for it (column ``gauge_source``: ``metrics``, ``log`` or ``metrics+log``).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd

from sweeper.analysis.frames import request_frame
from sweeper.schema import MetricSample
from sweeper.store import TraceSet
from sweeper.units import MS_PER_S, NS_PER_S

# Levels sharing more than this fraction of their window with another level are not attributed
# server numbers (a closed-loop sweep's levels follow each other; a little slack for clock skew).
OVERLAP_TOLERANCE = 0.05

# Each quantity and the sample names that carry it, first match wins (new vLLM, old vLLM,
# SGLang, llama.cpp). Histograms are named by family; "_sum" / "_count" are appended.
GAUGES: dict[str, tuple[str, ...]] = {
    "running": (
        "vllm:num_requests_running",
        "sglang:num_running_reqs",
        "llamacpp:requests_processing",
    ),
    "waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "llamacpp:requests_deferred"),
    "kv_usage": (
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "sglang:token_usage",
        "llamacpp:kv_cache_usage_ratio",
    ),
}
# Gauges that are a fraction per engine: averaged across series, not summed.
AVERAGED_GAUGES = frozenset({"kv_usage"})
COUNTERS: dict[str, tuple[str, ...]] = {
    "preemptions": ("vllm:num_preemptions_total", "vllm:num_preemptions"),
    "prompt_tokens": (
        "vllm:prompt_tokens_total",
        "sglang:prompt_tokens_total",
        "llamacpp:prompt_tokens_total",
    ),
    "generation_tokens": (
        "vllm:generation_tokens_total",
        "sglang:generation_tokens_total",
        "llamacpp:tokens_predicted_total",
    ),
    "prefix_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    "prefix_queries": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
}
HISTOGRAMS: dict[str, tuple[str, ...]] = {
    "queue_time": ("vllm:request_queue_time_seconds", "sglang:queue_time_seconds"),
    "prefill_time": ("vllm:request_prefill_time_seconds",),
    "decode_time": ("vllm:request_decode_time_seconds",),
    "ttft_server": ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"),
    "itl_server": (
        "vllm:inter_token_latency_seconds",
        "vllm:time_per_output_token_seconds",
        "sglang:inter_token_latency_seconds",
        "sglang:time_per_output_token_seconds",
    ),
    "iteration_tokens": ("vllm:iteration_tokens_total",),
}
# Histogram families in seconds: their level means are reported in ms.
SECONDS_HISTOGRAMS = frozenset(
    {"queue_time", "prefill_time", "decode_time", "ttft_server", "itl_server"}
)

SERVER_COLUMNS = [
    "concurrency",
    "window_start_s",
    "window_end_s",
    "scrapes",
    "window_overlap",
    "gauge_source",
    "preemptions_delta",
    "waiting_max",
    "waiting_mean",
    "running_max",
    "running_mean",
    "kv_usage_max",
    "kv_usage_mean",
    "prompt_tokens_delta",
    "generation_tokens_delta",
    "prefix_cache_hit_rate",
    "queue_time_mean_ms",
    "prefill_time_mean_ms",
    "decode_time_mean_ms",
    "ttft_server_mean_ms",
    "itl_server_mean_ms",
    "iteration_tokens_mean",
]

# Aligning the log's wall-clock lines with the run: the log's time zone is not written down, so
# candidate offsets from UTC are tried in quarter hours across every zone in use.
_TZ_STEP_MIN = 15
_TZ_MIN_H = -12
_TZ_MAX_H = 14
_LOG_TIME = re.compile(r"^(?:(\d{4})-)?(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)$")


@dataclass(frozen=True)
class LevelWindow:
    concurrency: int
    start_s: float
    end_s: float


def level_windows(ts: TraceSet, requests: pd.DataFrame | None = None) -> list[LevelWindow]:
    """Each level's window in s on the run's clock: the manifest's start/end when recorded,
    else the level's first measured send to its last end."""
    req = request_frame(ts) if requests is None else requests
    windows: dict[int, LevelWindow] = {}
    for lv in ts.manifest.levels:
        if lv.start_ns is not None and lv.end_ns is not None and lv.end_ns > lv.start_ns:
            windows[lv.concurrency] = LevelWindow(
                lv.concurrency, lv.start_ns / NS_PER_S, lv.end_ns / NS_PER_S
            )
    for conc, grp in req.groupby("concurrency", sort=True):
        c = int(conc)
        if c in windows:
            continue
        start = float(grp["send_s"].min())
        ends = grp["end_s"].to_numpy(dtype=float)
        end = float(np.nanmax(ends)) if np.isfinite(ends).any() else math.nan
        if math.isfinite(start) and math.isfinite(end) and end > start:
            windows[c] = LevelWindow(c, start, end)
    return [windows[c] for c in sorted(windows)]


def _series_table(samples_in: Sequence[MetricSample]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Scrape times (s) and, per sample name of interest, its value at each scrape (NaN where
    absent), reduced across label sets (sum, or mean for averaged gauges)."""
    wanted: dict[str, str] = {}  # sample name -> how to reduce ("sum" / "mean")
    for key, names in GAUGES.items():
        for name in names:
            wanted[name] = "mean" if key in AVERAGED_GAUGES else "sum"
    for names in COUNTERS.values():
        for name in names:
            wanted[name] = "sum"
    for names in HISTOGRAMS.values():
        for name in names:
            wanted[name + "_sum"] = "sum"
            wanted[name + "_count"] = "sum"
    samples = sorted((s for s in samples_in if s.error is None and s.series), key=lambda s: s.t_ns)
    times = np.array([s.t_ns / NS_PER_S for s in samples], dtype=float)
    table: dict[str, np.ndarray] = {}
    for i, sample in enumerate(samples):
        acc: dict[str, list[float]] = defaultdict(list)
        for series in sample.series:
            if series.name in wanted:
                acc[series.name].append(series.value)
        for name, values in acc.items():
            column = table.setdefault(name, np.full(len(samples), math.nan))
            column[i] = float(np.mean(values)) if wanted[name] == "mean" else float(np.sum(values))
    return times, table


def _first(table: dict[str, np.ndarray], names: Sequence[str]) -> np.ndarray | None:
    for name in names:
        column = table.get(name)
        if column is not None and np.isfinite(column).any():
            return column
    return None


def _counter_delta(
    times: np.ndarray, values: np.ndarray, start: float, end: float, next_start: float
) -> float:
    """Increase of a counter over [start, end]. The baseline is the last scrape at or before
    the start (else the first inside); the end value is the first scrape after the end when it
    comes before the next level starts (it has seen the level's last requests), else the last
    scrape inside. A decrease (a restarted server) gives NaN."""
    ok = np.isfinite(values)
    t, v = times[ok], values[ok]
    if t.size == 0:
        return math.nan
    before = np.nonzero(t <= start)[0]
    inside = np.nonzero((t > start) & (t <= end))[0]
    after = np.nonzero((t > end) & (t < next_start))[0]
    if before.size:
        base = v[before[-1]]
    elif inside.size:
        base = v[inside[0]]
    else:
        return math.nan
    if after.size:
        last = v[after[0]]
    elif inside.size:
        last = v[inside[-1]]
    else:
        return math.nan
    delta = float(last - base)
    return delta if delta >= 0 else math.nan


def _gauge_stats(
    times: np.ndarray, values: np.ndarray | None, start: float, end: float
) -> tuple[float, float]:
    if values is None:
        return math.nan, math.nan
    inside = (times >= start) & (times <= end) & np.isfinite(values)
    if not inside.any():
        return math.nan, math.nan
    return float(values[inside].max()), float(values[inside].mean())


def server_level_frame(ts: TraceSet, *, requests: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per concurrency level (columns :data:`SERVER_COLUMNS`); NaN where no data.

    Each metrics URL is reduced on its own and the results combined (several servers behind one
    sweep: counters and gauges summed, KV usage averaged). When levels overlap in time and each
    had a server of its own (an imported sweep run in parallel), each level reads only the URL
    whose scrapes bracket its window; when they overlap on one server, the level gets no server
    numbers (``window_overlap``)."""
    windows = level_windows(ts, requests)
    by_url: dict[str, list[MetricSample]] = defaultdict(list)
    for sample in ts.metrics:
        by_url[sample.url].append(sample)
    tables = {url: _series_table(samples) for url, samples in sorted(by_url.items())}
    overlapping = _overlapping(windows)
    own_server = len(tables) > 1 and bool(overlapping)
    log_gauges = _log_gauges(ts, [w for w in windows if w.concurrency not in overlapping])
    rows = []
    for i, w in enumerate(windows):
        next_start = windows[i + 1].start_s if i + 1 < len(windows) else math.inf
        if own_server:
            url = _bracketing_url(tables, w)
            use = {url: tables[url]} if url is not None else {}
            # That server ran this level alone; its next scrapes may belong to a later level.
            next_start = w.end_s + OVERLAP_TOLERANCE * (w.end_s - w.start_s)
        elif w.concurrency in overlapping:
            use = {}
        else:
            use = tables
        parts = [_level_values(times, table, w, next_start) for times, table in use.values()]
        row: dict[str, float | int | str | None] = {
            "concurrency": w.concurrency,
            "window_start_s": w.start_s,
            "window_end_s": w.end_s,
            "scrapes": sum(int(p["scrapes"]) for p in parts),
            "window_overlap": w.concurrency in overlapping and not own_server,
            "gauge_source": None,
        }
        row.update(_combine(parts))
        sources = set()
        for key in GAUGES:
            if math.isfinite(float(row[f"{key}_max"])):  # type: ignore[arg-type]
                sources.add("metrics")
            elif f"{key}_max" in log_gauges.get(w.concurrency, {}):
                # A gauge no scrape carried (AIPerf keeps only some; llama.cpp has no KV usage):
                # the log's periodic line stands in for it.
                row[f"{key}_max"] = log_gauges[w.concurrency][f"{key}_max"]
                row[f"{key}_mean"] = log_gauges[w.concurrency][f"{key}_mean"]
                sources.add("log")
        row["gauge_source"] = "+".join(sorted(sources, reverse=True)) or None
        rows.append(row)
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in SERVER_COLUMNS})
    return pd.DataFrame(rows, columns=SERVER_COLUMNS)


def _level_values(
    times: np.ndarray, table: dict[str, np.ndarray], w: LevelWindow, next_start: float
) -> dict[str, float]:
    """One URL's raw numbers for one level: gauge max / mean, counter deltas, histogram deltas."""
    out: dict[str, float] = {
        "scrapes": float(((times >= w.start_s) & (times <= w.end_s)).sum()) if times.size else 0.0
    }
    for key, names in GAUGES.items():
        out[f"{key}_max"], out[f"{key}_mean"] = _gauge_stats(
            times, _first(table, names), w.start_s, w.end_s
        )
    for key, names in COUNTERS.items():
        column = _first(table, names)
        out[key] = (
            math.nan
            if column is None
            else _counter_delta(times, column, w.start_s, w.end_s, next_start)
        )
    for key, families in HISTOGRAMS.items():
        out[f"{key}_sum"] = out[f"{key}_count"] = math.nan
        for family in families:
            s_col, c_col = table.get(family + "_sum"), table.get(family + "_count")
            if s_col is None or c_col is None:
                continue
            d_sum = _counter_delta(times, s_col, w.start_s, w.end_s, next_start)
            d_count = _counter_delta(times, c_col, w.start_s, w.end_s, next_start)
            if math.isfinite(d_sum) and math.isfinite(d_count):
                out[f"{key}_sum"], out[f"{key}_count"] = d_sum, d_count
                break
    return out


def _nansum(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return float(sum(finite)) if finite else math.nan


def _combine(parts: list[dict[str, float]]) -> dict[str, float]:
    """Several servers' numbers for one level: sums, KV usage averaged, histogram means pooled."""
    out: dict[str, float] = {}
    for key in GAUGES:
        for stat in ("max", "mean"):
            values = [p[f"{key}_{stat}"] for p in parts]
            if key in AVERAGED_GAUGES:
                finite = [v for v in values if math.isfinite(v)]
                out[f"{key}_{stat}"] = float(np.mean(finite)) if finite else math.nan
            else:
                out[f"{key}_{stat}"] = _nansum(values)
    deltas = {key: _nansum([p[key] for p in parts]) for key in COUNTERS}
    out["preemptions_delta"] = deltas["preemptions"]
    out["prompt_tokens_delta"] = deltas["prompt_tokens"]
    out["generation_tokens_delta"] = deltas["generation_tokens"]
    queries = deltas["prefix_queries"]
    out["prefix_cache_hit_rate"] = deltas["prefix_hits"] / queries if queries > 0 else math.nan
    for key in HISTOGRAMS:
        total, count = (
            _nansum([p[f"{key}_sum"] for p in parts]),
            _nansum([p[f"{key}_count"] for p in parts]),
        )
        mean = total / count if math.isfinite(count) and count > 0 else math.nan
        if key in SECONDS_HISTOGRAMS:
            out[f"{key}_mean_ms"] = mean * MS_PER_S
        else:
            out[f"{key}_mean"] = mean
    return out


def _bracketing_url(
    tables: dict[str, tuple[np.ndarray, dict[str, np.ndarray]]], w: LevelWindow
) -> str | None:
    """The URL with scrapes closest to this level's start and end (its own server; a server may
    have run several levels one after another)."""
    best, best_miss = None, math.inf
    for url, (times, _) in tables.items():
        if times.size == 0:
            continue
        miss = float(np.abs(times - w.start_s).min() + np.abs(times - w.end_s).min())
        if miss < best_miss:
            best, best_miss = url, miss
    return best


def _overlapping(windows: list[LevelWindow]) -> set[int]:
    """Levels whose window overlaps another level's by more than OVERLAP_TOLERANCE of its length
    (imported sets whose levels ran concurrently or whose clocks disagree)."""
    out: set[int] = set()
    for a in windows:
        for b in windows:
            if a is b:
                continue
            shared = min(a.end_s, b.end_s) - max(a.start_s, b.start_s)
            if shared > OVERLAP_TOLERANCE * (a.end_s - a.start_s):
                out.add(a.concurrency)
    return out


# ---------------------------------------------------------------------------------------------
# The server log's periodic lines, when nothing was scraped


def _log_gauges(ts: TraceSet, windows: list[LevelWindow]) -> dict[int, dict[str, float]]:
    """Running / waiting / KV usage per level from the log's periodic lines, placed on the run's
    clock through their wall-clock time. Empty when the log, its times or the run's clock
    anchor are missing, or when no offset puts any busy line inside a level."""
    if not ts.server_log or ts.manifest.clock is None or not windows:
        return {}
    try:
        from sweeper.facts.serverlog import parse_server_log
    except ImportError:  # pragma: no cover - serverlog ships with sweeper
        return {}
    stats = parse_server_log(ts.server_log).stats
    origin = datetime.fromtimestamp(ts.manifest.clock.origin_unix_ns / NS_PER_S, UTC).replace(
        tzinfo=None
    )
    year = origin.year
    naive: list[
        tuple[float, float, float, float]
    ] = []  # (s since origin as if UTC, running, waiting, kv)
    for stat in stats:
        when = _parse_log_time(stat.time, year)
        if when is None:
            continue
        seconds = (when - origin).total_seconds()
        naive.append((seconds, stat.running, stat.waiting, stat.kv_usage))
    if not naive:
        return {}
    arr = np.array(naive, dtype=float)
    busy = arr[:, 1] + arr[:, 2] > 0
    best_offset, best_hits = None, 0
    for minutes in range(_TZ_MIN_H * 60, _TZ_MAX_H * 60 + 1, _TZ_STEP_MIN):
        t = arr[:, 0] - minutes * 60
        hits = sum(int(((t >= w.start_s) & (t <= w.end_s) & busy).sum()) for w in windows)
        if hits > best_hits:
            best_offset, best_hits = minutes, hits
    if best_offset is None:
        return {}
    t = arr[:, 0] - best_offset * 60
    out: dict[int, dict[str, float]] = {}
    for w in windows:
        inside = (t >= w.start_s) & (t <= w.end_s)
        if not inside.any():
            continue
        sel = arr[inside]
        out[w.concurrency] = {
            "running_max": float(sel[:, 1].max()),
            "running_mean": float(sel[:, 1].mean()),
            "waiting_max": float(sel[:, 2].max()),
            "waiting_mean": float(sel[:, 2].mean()),
            "kv_usage_max": float(sel[:, 3].max()),
            "kv_usage_mean": float(sel[:, 3].mean()),
        }
    return out


def _parse_log_time(text: str | None, year: int) -> datetime | None:
    """``"06-03 15:15:30"`` (vLLM, no year: the run's) or ``"2025-06-03 15:15:30"`` (SGLang),
    as a naive datetime in the log's own (unknown) zone."""
    if not text:
        return None
    m = _LOG_TIME.match(text.strip())
    if not m:
        return None
    y = int(m.group(1)) if m.group(1) else year
    try:
        return datetime(y, int(m.group(2)), int(m.group(3))) + timedelta(
            hours=int(m.group(4)), minutes=int(m.group(5)), seconds=int(m.group(6))
        )
    except ValueError:
        return None
