"""A trace set's headline numbers per level: the stable JSON contract, CSV, and rich tables.

:func:`summarize` is what ``sweeper summary RUN --format json`` prints, documented in
docs/summary-json.md. Its shape is a contract other tools read::

    {"run_id": "...", "levels": [{"concurrency": 8, "completed": 64, "failed": 0,
      "duration_s": 12.3, "output_throughput_tok_s": 1234.5, "request_throughput_rps": 5.2,
      "ttft_ms": {"mean": .., "p50": .., "p90": .., "p95": .., "p99": ..},
      "tpot_ms": {...}, "itl_ms": {...}, "e2el_ms": {...}}, ...]}

Keys may be added (``summary_version``, ``source``, ``notes``, ``problems``, per-level ``requests``,
``cancelled``, ``total_token_throughput_tok_s``, ``output_throughput_per_gpu_tok_s``, ``basis``,
``itl_available``, ``tool``, per-level ``paused_s``, ``inflight_mean``, ``inflight_max``, and
``run_status``, ``complete``, ``missing_levels``, ``cut_short``, ``resume_command``; for open
loops and service levels, issue 12: top-level ``load`` and ``slo``, per-level ``level``,
``offered_rate_rps``, ``achieved_rate_rps``, ``client_queue_ms`` {mean, p50, p90, p99},
``ttft_sched_ms`` and ``e2el_sched_ms`` (stat dicts like ``ttft_ms``), ``goodput_rps``,
``slo_met_share``); none is renamed or removed. A value that cannot be computed (no ITL
for a per-request import, no throughput for a level without a time window) is ``null``.

A level's ``level`` is its key; ``concurrency`` is the same number for a concurrency level and
``null`` for a rate level (its key is a position in ``--request-rate``, not a number of streams).
``offered_rate_rps`` is ``null`` for concurrency levels and the string ``"inf"`` for a level that
sent everything at once (as ``vllm bench serve`` writes it): JSON has no infinity.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import Any

import pandas as pd
from rich.console import Console
from rich.table import Table

from sweeper.analysis.completeness import completeness
from sweeper.analysis.frames import (
    LATENCY_METRICS,
    QUEUE_STATS,
    STAT_NAMES,
    latency_column,
    level_frame,
)
from sweeper.analysis.slo import SLO, slo_label
from sweeper.i18n import level_label
from sweeper.store import TraceSet
from sweeper.units import finite, json_safe

SUMMARY_VERSION = 1

LEVEL_SCALARS = (
    "concurrency",
    "requests",
    "completed",
    "failed",
    "cancelled",
    "duration_s",
    "output_throughput_tok_s",
    "request_throughput_rps",
    "total_token_throughput_tok_s",
    "output_throughput_per_gpu_tok_s",
)
# Added after the first contract, so the CSV keeps them after ``basis`` (no column moves).
ADDED_LEVEL_SCALARS = ("paused_s", "inflight_mean", "inflight_max")
# Added for open loops and service levels (issue 12), after those in the CSV: ``level``,
# ``offered_rate_rps``, ``achieved_rate_rps``, then each SCHEDULE_METRICS statistic, then
# GOODPUT_SCALARS.
RATE_LEVEL_SCALARS = ("level", "offered_rate_rps", "achieved_rate_rps")
# Stat dicts, by their JSON key, with their statistics and the level-frame column of each.
SCHEDULE_METRICS = {
    "client_queue_ms": QUEUE_STATS,
    "ttft_sched_ms": STAT_NAMES,
    "e2el_sched_ms": STAT_NAMES,
}
GOODPUT_SCALARS = ("goodput_rps", "slo_met_share")
INT_KEYS = frozenset(
    {"concurrency", "level", "requests", "completed", "failed", "cancelled", "inflight_max"}
)

NOTE_PER_REQUEST = (
    "ITL is null: the source tool recorded per-request times only (fidelity per_request), "
    "not each chunk's arrival, so inter-token gaps cannot be computed."
)
NOTE_SUMMARY = (
    "Numbers come from the source tool's own summary (fidelity summary): it kept no "
    "per-request data, so sweeper could not recompute them."
)
NOTE_RECONSTRUCTED = (
    "The source tool did not record send times: duration and throughputs are the tool's own; "
    "latencies are recomputed from its per-request records."
)


def _number(value: Any) -> Any:
    """A summary value: every number a float (JSON-safe), text and flags as they are."""
    value = json_safe(value)
    return float(value) if finite(value) else value


def summarize(
    ts: TraceSet, *, levels: pd.DataFrame | None = None, slos: Sequence[SLO] | None = None
) -> dict[str, Any]:
    """The summary of one trace set as plain JSON-ready Python (see the module docstring).

    ``slos``: the user's service level (all terms together), for ``goodput_rps`` and
    ``slo_met_share``; ``levels``, when given, must have been computed with the same terms."""
    frame = level_frame(ts, slos=slos) if levels is None else levels
    source = ts.manifest.source
    workload = ts.manifest.workload
    notes: list[str] = []
    if source.fidelity == "per_request":
        notes.append(NOTE_PER_REQUEST)
    elif source.fidelity == "summary":
        notes.append(NOTE_SUMMARY)
    if source.send_times == "reconstructed":
        notes.append(NOTE_RECONSTRUCTED)
    out_levels = []
    for record in frame.to_dict("records"):
        level: dict[str, Any] = {}
        for key in LEVEL_SCALARS:
            value = _number(record.get(key))
            if key in INT_KEYS and value is not None:
                value = int(value)
            level[key] = value
        for metric in LATENCY_METRICS:
            level[metric] = {
                stat: _number(record.get(latency_column(metric, stat))) for stat in STAT_NAMES
            }
        level["itl_available"] = level["itl_ms"]["mean"] is not None
        level["basis"] = record.get("basis")
        for key in ADDED_LEVEL_SCALARS:
            value = _number(record.get(key))
            level[key] = int(value) if key in INT_KEYS and value is not None else value
        key = level["concurrency"]
        level["level"] = key
        offered = workload.offered_rate(key) if key is not None else None
        if offered is not None:
            level["concurrency"] = None  # a rate level's key is not a number of streams
        level["offered_rate_rps"] = "inf" if offered == float("inf") else _number(offered)
        level["achieved_rate_rps"] = _number(record.get("achieved_rate_rps"))
        for metric, names in SCHEDULE_METRICS.items():
            level[metric] = {s: _number(record.get(latency_column(metric, s))) for s in names}
        for key_name in GOODPUT_SCALARS:
            level[key_name] = _number(record.get(key_name)) if slos else None
        tool = source.summaries.get(str(key))
        if tool:
            level["tool"] = {k: _number(v) for k, v in tool.items()}
        out_levels.append(level)
    # The completeness counts requests per level: a trace set held as columns lends it its
    # requests without their chunks rather than make every chunk an object.
    done = completeness(ts if ts.has_objects else ts.without_chunks())
    if not done.complete:
        notes.append(done.sentence())
    return {
        "summary_version": SUMMARY_VERSION,
        "run_id": ts.run_id,
        "source": {
            "tool": source.tool,
            "version": source.version,
            "fidelity": source.fidelity,
            "send_times": source.send_times,
        },
        "notes": notes,
        "problems": list(ts.problems),
        "run_status": done.run_status,
        "complete": done.complete,
        "missing_levels": list(done.missing_levels),
        "cut_short": [
            {
                "concurrency": short.concurrency,
                "measured": short.measured,
                "planned": short.planned,
                "status": short.status,
            }
            for short in done.cut_short
        ],
        "resume_command": done.resume_command,
        "load": workload.load,
        "slo": slo_label(slos) if slos else None,
        "levels": out_levels,
    }


def summary_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The summary flattened to one dict per level (``ttft_ms_p50``...), for CSV."""
    rows = []
    for level in summary["levels"]:
        row = {key: level.get(key) for key in LEVEL_SCALARS}
        for metric in LATENCY_METRICS:
            for stat in STAT_NAMES:
                row[f"{metric}_{stat}"] = level[metric][stat]
        row["basis"] = level.get("basis")
        for key in ADDED_LEVEL_SCALARS:
            row[key] = level.get(key)
        for key in RATE_LEVEL_SCALARS:
            row[key] = level.get(key)
        for metric, names in SCHEDULE_METRICS.items():
            for stat in names:
                row[f"{metric}_{stat}"] = (level.get(metric) or {}).get(stat)
        for key in GOODPUT_SCALARS:
            row[key] = level.get(key)
        rows.append(row)
    return rows


def summary_csv(summary: dict[str, Any]) -> str:
    """CSV text: a header and one row per level; an empty cell where JSON has null."""
    buffer = io.StringIO()
    rows = summary_rows(summary)
    fields = list(rows[0]) if rows else [*LEVEL_SCALARS]
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buffer.getvalue()


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):  # "inf": an offered rate of everything at once
        return value
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.{digits}f}"


def _inflight(level: dict[str, Any]) -> str:
    """``3.9 / 4``: the time-weighted mean and the most requests in flight, or a dash."""
    mean, top = level.get("inflight_mean"), level.get("inflight_max")
    if mean is None or top is None:
        return "-"
    return f"{mean:,.1f} / {top:,}"


def _level_name(level: dict[str, Any]) -> str:
    """``C=16``, or a rate level's offered rate (``4 req/s``, ``all at once``)."""
    key = level.get("level", level["concurrency"])
    if level.get("concurrency") is not None or key is None:
        return level_label(key, None, "en") if key is not None else "-"
    offered = level.get("offered_rate_rps")
    rate = float("inf") if offered == "inf" else offered
    return level_label(key, rate, "en") if rate is not None else f"level {key}"


def _incomplete_sentence(summary: dict[str, Any]) -> str:
    return next((n for n in summary["notes"] if n.startswith("This run is incomplete")), "")


def render_summary(summary: dict[str, Any], console: Console) -> None:
    """Print the run's overview table (one row per level) and a latency table per level."""
    src = summary["source"]
    version = f" {src['version']}" if src.get("version") else ""
    console.print(
        f"[bold]{summary['run_id']}[/bold]  source: {src['tool']}{version}, "
        f"fidelity {src['fidelity']}"
    )
    open_loop = summary.get("load") == "rate"
    with_slo = summary.get("slo") is not None
    overview = Table(title="Levels", title_justify="left")
    headers = [
        "level",
        "in flight",
        "ok",
        "failed",
        "duration s",
        "out tok/s",
        "req/s",
        "tok/s/GPU",
    ]
    if open_loop:
        headers += ["offered req/s", "achieved req/s", "queue p99 ms"]
    if with_slo:
        headers += ["goodput req/s"]
    for header in headers:
        overview.add_column(header, justify="right", no_wrap=header == "level")
    for level in summary["levels"]:
        cells = [
            _level_name(level),
            _inflight(level),
            _fmt(level["completed"]),
            _fmt(level["failed"]),
            _fmt(level["duration_s"], 2),
            _fmt(level["output_throughput_tok_s"]),
            _fmt(level["request_throughput_rps"], 3),
            _fmt(level["output_throughput_per_gpu_tok_s"]),
        ]
        if open_loop:
            cells += [
                _fmt(level.get("offered_rate_rps"), 2),
                _fmt(level.get("achieved_rate_rps"), 2),
                _fmt((level.get("client_queue_ms") or {}).get("p99"), 1),
            ]
        if with_slo:
            cells += [_fmt(level.get("goodput_rps"), 3)]
        overview.add_row(*cells)
    if not summary.get("complete", True):
        console.print(f"[bold red]Incomplete:[/bold red] {_incomplete_sentence(summary)}")
    console.print(overview)
    for level in summary["levels"]:
        name = _level_name(level)
        if level.get("concurrency") is not None:
            name = f"C = {level['concurrency']}"
        table = Table(title=f"{name}: latency (ms)", title_justify="left")
        table.add_column("metric")
        for stat in STAT_NAMES:
            table.add_column(stat, justify="right")
        for metric in LATENCY_METRICS:
            values = level[metric]
            label = metric.removesuffix("_ms").upper()
            if metric == "itl_ms" and not level["itl_available"]:
                label += " (n/a)"
            table.add_row(label, *(_fmt(values[stat], 2) for stat in STAT_NAMES))
        if open_loop:  # from when the schedule said to send: what the user waited
            for metric, label in (
                ("ttft_sched_ms", "TTFT (sched)"),
                ("e2el_sched_ms", "E2EL (sched)"),
            ):
                values = level.get(metric) or {}
                table.add_row(label, *(_fmt(values.get(stat), 2) for stat in STAT_NAMES))
            queue = level.get("client_queue_ms") or {}
            table.add_row(
                "client queue",
                *(_fmt(queue.get(stat), 2) if stat in queue else "" for stat in STAT_NAMES),
            )
        console.print(table)
    if with_slo:
        console.print(f"Goodput: requests per second meeting every term of {summary['slo']}.")
    for note in summary["notes"]:
        if summary.get("complete", True) or note != _incomplete_sentence(summary):
            console.print(f"[yellow]Note:[/yellow] {note}")
    for problem in summary.get("problems", []):
        console.print(f"[yellow]Warning:[/yellow] {problem}")
