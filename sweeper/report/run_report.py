"""What a run's report rests on, computed once for both languages: the frames, the findings,
the server-side aggregates, and the facts a title, a card or the index shows.

::

    run = collect_run(load_trace_set("traces/qwen7b-4090"))
    run.levels                 # sweeper.analysis.frames.level_frame
    run.known("recommended")   # a Finding the data supported, or None
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from sweeper.analysis.completeness import Completeness, completeness
from sweeper.analysis.frames import level_frame, request_frame, request_tokens
from sweeper.findings import SLO, Finding, analyze_frames, run_frames
from sweeper.i18n import fmt_number
from sweeper.schema import Fact, RequestTrace, fact_value
from sweeper.store import TraceSet
from sweeper.units import finite

log = logging.getLogger("sweeper.report.run_report")


# ---------------------------------------------------------------------------------------------
# What a page rests on


@dataclass
class RunReport:
    """Everything one run's page is written from, computed once for both languages."""

    ts: TraceSet
    levels: pd.DataFrame
    requests: pd.DataFrame
    findings: dict[str, Finding] = field(default_factory=dict)
    server_levels: pd.DataFrame | None = None
    # Why the findings, or some of them, could not be computed (an exception's type and message):
    # the page says so and a strict site build fails, so a bug in a rule is never a quiet gap.
    findings_errors: list[str] = field(default_factory=list)
    # Whether the run measured what it planned (levels missing or cut short, how to resume).
    done: Completeness = field(default_factory=lambda: Completeness("complete"))
    # The measured requests that failed, grouped by what failed (kind, HTTP status).
    failures: list[FailureGroup] = field(default_factory=list)
    # Chart specs drawn once for both languages' pages (sweeper.report.markup.shared_spec);
    # emptied before the report is cached.
    chart_specs: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def run_id(self) -> str:
        return self.ts.run_id

    def finding(self, finding_id: str) -> Finding | None:
        """The finding, or None when it was not written (findings failed, or none by that id)."""
        return self.findings.get(finding_id)

    def known(self, finding_id: str) -> Finding | None:
        """The finding when the data supported it (not ``severity: unknown``)."""
        found = self.findings.get(finding_id)
        return None if found is None or found.severity == "unknown" else found

    # Computed once a report: the site's runs tables ask on every row, in both languages, of a
    # thousand runs (benchmarks/site_build.py). Not fields: a copy (dataclasses.replace) and an
    # older cached report compute them anew.
    @functools.cached_property
    def peak(self) -> pd.Series | None:
        """The level with the highest output throughput (:func:`peak_level`)."""
        return peak_level(self.levels)

    @functools.cached_property
    def stream_rate(self) -> float | None:
        """The lowest measured level's output rate per stream (:func:`per_stream_rate`)."""
        return per_stream_rate(self.levels)

    @functools.cached_property
    def request_rate(self) -> float | None:
        """A rate run's output rate per request in flight (:func:`per_request_rate`)."""
        return per_request_rate(self.levels)


@dataclass(frozen=True)
class FailureGroup:
    """Measured requests that failed the same way: their status, error kind and HTTP status, how
    many, at which levels, and the first distinct messages (as the client or server wrote them)."""

    status: str
    kind: str | None
    http_status: int | None
    count: int
    levels: tuple[int, ...]
    messages: tuple[str, ...]


# How many distinct messages a failure group keeps, and how long each may be.
FAILURE_MESSAGES = 3
FAILURE_MESSAGE_CHARS = 300


def failure_groups(ts: TraceSet) -> list[FailureGroup]:
    """The failed measured requests of a trace set by (status, kind, HTTP status), most first."""
    groups: dict[tuple[str, str | None, int | None], list[RequestTrace]] = {}
    # Only the failed requests become objects: a large trace set held as columns stays columns.
    cols = ts.columns
    failed = np.flatnonzero(cols.is_("phase", "measured") & ~cols.is_("status", "ok"))
    for r in cols.to_requests(failed.tolist()):
        error = r.error
        key = (r.status, error.kind if error else None, error.http_status if error else None)
        groups.setdefault(key, []).append(r)
    out = []
    for (status, kind, http_status), rs in groups.items():
        messages: list[str] = []
        for r in rs:
            message = " ".join((r.error.message or "").split()) if r.error else ""
            if len(message) > FAILURE_MESSAGE_CHARS:
                message = message[: FAILURE_MESSAGE_CHARS - 1] + "…"
            if message and message not in messages:
                messages.append(message)
            if len(messages) == FAILURE_MESSAGES:
                break
        levels = tuple(sorted({r.concurrency for r in rs}))
        out.append(FailureGroup(status, kind, http_status, len(rs), levels, tuple(messages)))
    return sorted(out, key=lambda g: (-g.count, g.status, g.kind or "", g.http_status or 0))


# Level-frame columns a page reads: a frame without them (no measured request) gets them empty.
PAGE_COLUMNS = (
    "concurrency",
    "requests",
    "completed",
    "failed",
    "duration_s",
    "output_throughput_tok_s",
    "output_throughput_per_gpu_tok_s",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "itl_p50_ms",
    "itl_p99_ms",
    "e2el_p50_ms",
    "paused_s",
    "inflight_mean",
    "inflight_max",
)


def _page_columns(levels: pd.DataFrame) -> pd.DataFrame:
    missing = [c for c in PAGE_COLUMNS if c not in levels.columns]
    if not missing:
        return levels
    return levels.assign(**{c: pd.Series(dtype="float64") for c in missing})


def collect_run(ts: TraceSet, *, slos: Sequence[SLO] | None = None) -> RunReport:
    """Frames, findings and server-side aggregates of one trace set. The frames are computed
    once, by the findings' :func:`~sweeper.findings.run_frames`, and shared with the page.

    When the findings fail (a bug, or data no rule foresaw), the page still publishes what the
    measurements show, and ``findings_errors`` says what failed: the page shows it and a strict
    site build fails on it."""
    done, failures = completeness(ts), failure_groups(ts)
    try:
        data = run_frames(ts)
    except Exception as exc:
        # The server metrics or the server log tripped the frames the findings need: publish
        # the client-side measurements alone.
        requests = request_frame(ts)
        levels = _page_columns(level_frame(ts, requests=requests))
        run = RunReport(ts, levels, requests, done=done, failures=failures)
        return _failed(run, exc)
    requests = data.requests if data.requests is not None else request_frame(ts)
    run = RunReport(ts, _page_columns(data.levels), requests, done=done, failures=failures)
    if ts.metrics:
        run.server_levels = data.server
    try:
        found = analyze_frames(data, slos=slos)
    except Exception as exc:
        return _failed(run, exc)
    run.findings = {f.id: f for f in found}
    run.findings_errors = [f"{f.id}: {f.numbers['error']}" for f in found if "error" in f.numbers]
    for error in run.findings_errors:
        log.warning("%s: a finding could not be computed: %s", ts.path, error)
    return run


def _failed(run: RunReport, exc: Exception) -> RunReport:
    error = f"{type(exc).__name__}: {exc}"
    log.warning("%s: the findings could not be computed: %s", run.ts.path, error)
    run.findings_errors.append(error)
    return run


# ---------------------------------------------------------------------------------------------
# Facts of a run (for titles, cards and the index)


def fact_text(fact: Fact | None) -> str | None:
    value = fact_value(fact)
    return None if value is None else str(value)


def gpu_title(ts: TraceSet, lang: str) -> str | None:
    """``2 × H100 · 80 GB`` or ``RTX 4090``; None when unknown."""
    hw = ts.manifest.hardware
    name = fact_text(hw.gpu_name)
    if name is None:
        return None
    count = fact_value(hw.gpu_count)
    text = f"{count} × {name}" if isinstance(count, int) and count > 1 else name
    memory = fact_value(hw.memory_gb)
    if finite(memory):
        text += f" · {fmt_number(memory, lang, 0)} GB"
    return text


def engine_title(ts: TraceSet) -> str | None:
    engine = ts.manifest.server.engine
    if engine is None:
        return None
    version = fact_text(ts.manifest.server.version)
    return f"{engine} {version}" if version else engine


def model_full_name(ts: TraceSet) -> str:
    """The model as the trace set names it (a hub id, or the local path it was served from)."""
    m = ts.manifest
    return m.model.name or m.target.served_model_name or m.target.model or m.run_id


def model_title(ts: TraceSet) -> str:
    """The model's name for titles: a hub id (``org/name``) as it is, a local path
    (``/lustre/fsw/models/Kimi-K2.5-NVFP4``) by its last component; the full name stays in
    "How it was recorded"."""
    return short_model_name(model_full_name(ts))


def short_model_name(name: str) -> str:
    """``org/name`` as it is; a path (absolute, ``./``, ``~/``, Windows, or more than one ``/``)
    by its last component."""
    text = name.strip()
    trimmed = text.rstrip("/\\")
    is_path = (
        text.startswith(("/", "./", "../", "~", "\\"))
        or re.match(r"^[A-Za-z]:[\\/]", text) is not None
        or "\\" in text
        or trimmed.count("/") > 1
    )
    if not is_path:
        return text
    last = re.split(r"[\\/]", trimmed)[-1]
    return last or text


def run_title(ts: TraceSet, lang: str) -> str:
    """The page title as plain (unescaped) text: model · GPU · engine, leaving out what is unknown."""
    parts = [model_title(ts), gpu_title(ts, lang), engine_title(ts)]
    return " · ".join(p for p in parts if p)


def measured_levels(levels: pd.DataFrame) -> pd.DataFrame:
    """The levels with a positive output throughput: the points a curve can draw (a level whose
    every request failed has none)."""
    if "output_throughput_tok_s" not in levels.columns:
        return levels.iloc[0:0]
    throughput = pd.to_numeric(levels["output_throughput_tok_s"], errors="coerce")
    return levels[throughput > 0]


def peak_level(levels: pd.DataFrame) -> pd.Series | None:
    valid = measured_levels(levels)
    if valid.empty:
        return None
    return valid.loc[valid["output_throughput_tok_s"].idxmax()]


def per_stream_rate(levels: pd.DataFrame) -> float | None:
    """The lowest measured level's output rate per stream (tok/s), or None."""
    first = measured_levels(levels).head(1)
    if first.empty:
        return None
    return float(first["output_throughput_tok_s"].iloc[0] / first["concurrency"].iloc[0])


def per_request_rate(levels: pd.DataFrame) -> float | None:
    """A rate run's lowest measured level's output rate per request in flight (tok/s), or None
    where the trace cannot say how many were in flight."""
    first = measured_levels(levels).head(1)
    if first.empty or "inflight_mean" not in first.columns:
        return None
    inflight = first["inflight_mean"].iloc[0]
    if not finite(inflight) or inflight <= 0:
        return None
    return float(first["output_throughput_tok_s"].iloc[0] / inflight)


def tokens_per_request(run: RunReport) -> float | None:
    """Input + output tokens of one request, by the rule the kv_ceiling finding uses
    (:func:`sweeper.analysis.frames.request_tokens`)."""
    inp, out = request_tokens(run.ts.manifest.workload, run.levels)
    return inp + out if inp is not None and out is not None else None


def kv_capacity_tokens(run: RunReport) -> float | None:
    ceiling = run.known("kv_ceiling")
    if ceiling is not None and finite(ceiling.numbers.get("capacity_tokens")):
        return float(ceiling.numbers["capacity_tokens"])
    value = fact_value(run.ts.manifest.server.config.kv_cache_tokens)
    return float(value) if finite(value) and value > 0 else None


def per_level(value: object) -> dict[int, float]:
    """A per-level number of a finding as {concurrency: value}: accepts a mapping keyed by the
    level (int or str) or a list of {"concurrency": C, "value": v} rows."""
    out: dict[int, float] = {}
    if isinstance(value, Mapping):
        for key, v in value.items():
            if finite(v):
                out[int(key)] = float(v)
    elif isinstance(value, list):
        for row in value:
            if (
                isinstance(row, Mapping)
                and finite(row.get("value"))
                and row.get("concurrency") is not None
            ):
                out[int(row["concurrency"])] = float(row["value"])
    return out
