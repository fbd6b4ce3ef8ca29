"""GuideLLM ``benchmarks.json`` -> a trace set (per request only).

GuideLLM's report (``GenerativeBenchmarksReport``: ``metadata.version`` 1, ``guidellm_version``)
holds ``benchmarks``, one per strategy it ran. Each has ``config.strategy`` (``type_``
``synchronous``: one stream; ``concurrent`` with ``streams``; ``constant`` or ``poisson`` with
``rate`` (requests/s) and optional ``max_concurrency``; ``throughput``: every request due at the
start, up to ``max_concurrency`` in flight), its ``metrics`` and ``requests.successful`` /
``errored`` / ``incomplete``: one ``GenerativeRequestStats`` per request with ``info.timings``
(Unix seconds): ``targeted_start`` (when the strategy scheduled it), ``request_start``,
``first_token_iteration``, ``last_token_iteration``, ``token_iterations``, ``request_end``.

Synchronous and concurrent benchmarks are concurrency levels (closed loop); constant, poisson
and throughput benchmarks are rate levels (open loop; throughput's offered rate is "all at
once"), keyed by position of the sorted rates, with each request's ``targeted_start`` as its
scheduled time. A report holding both kinds (``--profile sweep`` runs synchronous, throughput
and a set of constant rates) is imported as its rate levels by default, or as its concurrency
levels with ``load="concurrency"``; the benchmarks left out are named in a warning. Other
strategies (a trace replay) are skipped with a warning.

GuideLLM keeps only the first and last token times (it spreads the iterations in between evenly
when it needs them), so the import has TTFT and E2EL per request and no ITL (fidelity
``per_request``). Definitions line up with sweeper's: TTFT = first_token_iteration -
request_start, E2EL = last_token_iteration - request_start, and GuideLLM's
``inter_token_latency_ms`` = (last - first) / (output tokens - 1) is sweeper's TPOT. GuideLLM's
``time_per_output_token_ms`` ((last - start) / output tokens, first token included) and its
``request_latency`` (to ``request_end``) differ; docs/metrics.md has the table.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweeper.errors import ImportFormatError
from sweeper.importers._common import Imported, need, read_json
from sweeper.importers._openloop import (
    INF,
    Arrival,
    Load,
    cap_words,
    one_value,
    rate_keys,
    rate_words,
    rate_workload,
)
from sweeper.schema import RequestError, RequestTrace, Target, Workload
from sweeper.units import NS_PER_S

REPORT_FILE = "benchmarks.json"
WHAT = "a GuideLLM benchmarks.json ({metadata, benchmarks: [{config.strategy, requests}]})"
STATUSES = (("successful", "ok"), ("errored", "error"), ("incomplete", "cancelled"))
PERCENTILES = ("p50", "p90", "p95", "p99")
# GuideLLM metric -> sweeper level-frame metric (same definition)
SAME_METRICS = {"time_to_first_token_ms": "ttft_ms", "inter_token_latency_ms": "tpot_ms"}
CLOSED_LOOP = ("synchronous", "concurrent")
OPEN_LOOP = ("constant", "poisson", "throughput")
PROMPT_SOURCE = "GuideLLM data"

Item = tuple[str, dict[str, Any], str]  # (where, GenerativeRequestStats, status)


@dataclass
class _Bench:
    """One benchmark of a report: its level (C, or an offered rate) and its requests."""

    file: Path
    where: str
    strategy: dict[str, Any]
    load: Load
    level: float  # C, or requests/s (inf: all at once)
    items: list[Item]
    bench: dict[str, Any]

    @property
    def label(self) -> str:
        kind = self.strategy.get("type_")
        level = f"C={int(self.level)}" if self.load == "concurrency" else rate_words(self.level)
        return f"{self.file} {self.where} ({kind}, {level})"


def read_guidellm(paths: Sequence[Path], load: Load | None = None) -> Imported:
    """Read one or more GuideLLM reports as one sweep: concurrency levels (synchronous,
    concurrent) or rate levels (constant, poisson, throughput); ``load`` picks one kind where
    the reports hold both (default: the rate levels)."""
    reports = []
    for path in paths:
        file = path / REPORT_FILE if path.is_dir() else path
        if not file.is_file():
            raise ImportFormatError(f"no such file (expected {REPORT_FILE})", file)
        reports.append((file, _read_report(file)))
    warnings: list[str] = []
    benches: list[_Bench] = []
    version = None
    for file, report in reports:
        meta = report.get("metadata") or {}
        version = version or meta.get("guidellm_version")
        for index, bench in enumerate(report["benchmarks"]):
            where = f"benchmarks[{index}]"
            if not isinstance(bench, dict):
                raise ImportFormatError(f"expected an object; {WHAT}", file, where)
            strategy = _strategy(bench, file, where)
            level = _level(strategy, file, where)
            if level is None:
                warnings.append(
                    f"{file} {where}: strategy {strategy.get('type_')!r} has neither a fixed "
                    "concurrency nor an offered rate; skipped"
                )
                continue
            requests = need(bench, "requests", file, where, WHAT)
            items = _stats_list(requests, file, where)
            benches.append(_Bench(file, where, strategy, *level, items, bench))
    if not benches:
        raise ImportFormatError(
            "no benchmark in the report has a fixed concurrency (synchronous, concurrent) or an "
            "offered rate (constant, poisson, throughput)",
            reports[0][0],
        )
    kind, chosen, left_out = _choose(benches, load)
    warnings.extend(left_out)
    starts = [
        _timing(item, "request_start", b.file, where) for b in chosen for where, item, _ in b.items
    ]
    # the clock starts at the first send, or at an earlier time a rate level scheduled one for
    scheduled = _scheduled_times(chosen) if kind == "rate" else []
    origin_s = min([*starts, *scheduled])
    levels = _rate_levels if kind == "rate" else _concurrency_levels
    requests_out, summaries, workload, notes = levels(chosen, origin_s)
    warnings.extend(notes)
    model = _model(reports[0][1])
    return Imported(
        tool="guidellm",
        version=str(version) if version else None,
        fidelity="per_request",
        requests=requests_out,
        name=model.rsplit("/", 1)[-1] if model else reports[0][0].parent.name,
        origin_unix_ns=round(origin_s * NS_PER_S),
        summaries=summaries,
        files=[str(f) for f, _ in reports],
        target=Target(model=model),
        workload=workload,
        warnings=warnings,
        levels=list(workload.concurrency_levels),
    )


def _strategy(bench: dict[str, Any], path: Path, where: str) -> dict[str, Any]:
    config = bench.get("config") or bench.get("args")
    if not isinstance(config, dict) or not isinstance(config.get("strategy"), dict):
        raise ImportFormatError(f"missing key 'config.strategy'; expected {WHAT}", path, where)
    return dict(config["strategy"])


def _level(strategy: dict[str, Any], path: Path, where: str) -> tuple[Load, float] | None:
    """("concurrency", C) or ("rate", requests/s) of a strategy; None for any other kind."""
    kind = strategy.get("type_")
    if kind == "synchronous":
        return "concurrency", 1
    if kind == "concurrent":
        streams = strategy.get("streams")
        if isinstance(streams, bool) or not isinstance(streams, int) or streams < 1:
            raise ImportFormatError(
                f"concurrent strategy without a positive 'streams' ({streams!r})",
                path,
                f"{where}.config.strategy.streams",
            )
        return "concurrency", streams
    if kind == "throughput":
        return "rate", INF  # every request due at the start: GuideLLM's "as fast as possible"
    if kind in ("constant", "poisson"):
        rate = strategy.get("rate")
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate < INF:
            raise ImportFormatError(
                f"{kind} strategy without a positive 'rate' ({rate!r} requests/s)",
                path,
                f"{where}.config.strategy.rate",
            )
        return "rate", float(rate)
    return None


def _choose(benches: list[_Bench], load: Load | None) -> tuple[Load, list[_Bench], list[str]]:
    """The kind of level imported, its benchmarks, and a warning naming those left out."""
    rate = [b for b in benches if b.load == "rate"]
    concurrency = [b for b in benches if b.load == "concurrency"]
    kind: Load = load or ("rate" if rate else "concurrency")
    chosen = rate if kind == "rate" else concurrency
    if not chosen:
        raise ImportFormatError(
            f"--load {kind}: no {kind}-based benchmark in the report "
            f"({', '.join(b.label for b in benches)})",
            benches[0].file,
        )
    other = concurrency if kind == "rate" else rate
    if not other:
        return kind, chosen, []
    flag = "--load rate" if kind == "concurrency" else "--load concurrency"
    return (
        kind,
        chosen,
        [
            f"Left out: {', '.join(b.label for b in other)}; the report also holds {kind} "
            f"levels, imported as this sweep (import the others with {flag})."
        ],
    )


def _concurrency_levels(
    benches: list[_Bench], origin_s: float
) -> tuple[list[RequestTrace], dict[str, dict[str, float | int | str | None]], Workload, list[str]]:
    seen: dict[int, _Bench] = {}
    for b in benches:
        concurrency = int(b.level)
        if concurrency in seen:
            raise ImportFormatError(
                f"concurrency {concurrency} appears twice ({seen[concurrency].where} and "
                f"{b.where}); give one result per level",
                b.file,
            )
        seen[concurrency] = b
    requests: list[RequestTrace] = []
    summaries: dict[str, dict[str, float | int | str | None]] = {}
    for concurrency, b in sorted(seen.items()):
        for where, item, status in b.items:
            requests.append(_trace(item, status, concurrency, origin_s, b.file, where, None))
        summaries[str(concurrency)] = _summary(b.bench)
    workload = Workload(
        concurrency_levels=sorted(seen),
        requests_per_level={
            str(c): sum(1 for _, _, s in b.items if s == "ok") for c, b in seen.items()
        },
        prompt_source=PROMPT_SOURCE,
    )
    return requests, summaries, workload, []


def _rate_levels(
    benches: list[_Bench], origin_s: float
) -> tuple[list[RequestTrace], dict[str, dict[str, float | int | str | None]], Workload, list[str]]:
    seen: dict[float, _Bench] = {}
    for b in benches:
        if b.level in seen:
            raise ImportFormatError(
                f"rate {rate_words(b.level)} appears twice ({seen[b.level].where} and "
                f"{b.where}); give one result per level",
                b.file,
            )
        seen[b.level] = b
    keys = rate_keys(list(seen))
    notes: list[str] = []
    kinds = {b.strategy.get("type_") for b in benches if not math.isinf(b.level)}
    arrival: Arrival | None = None
    if len(kinds) == 1:
        arrival = "poisson" if "poisson" in kinds else "constant"
    same_cap, cap = one_value([_cap(b.strategy) for b in benches])
    if not same_cap:
        notes.append(
            "max_concurrency differs between levels ("
            + ", ".join(
                f"{rate_words(r)}: {cap_words(_cap(b.strategy))}" for r, b in sorted(seen.items())
            )
            + "); kept per level in the tool's summaries"
        )
    requests: list[RequestTrace] = []
    summaries: dict[str, dict[str, float | int | str | None]] = {}
    unscheduled = 0
    for rate, b in sorted(seen.items()):
        key = keys[rate]
        for where, item, status in b.items:
            scheduled = _scheduled(item)
            unscheduled += scheduled is None
            requests.append(_trace(item, status, key, origin_s, b.file, where, scheduled))
        summary = _summary(b.bench)
        if not same_cap:
            summary["max_concurrency"] = _cap(b.strategy)
        summaries[str(key)] = summary
    if unscheduled:
        notes.append(
            f"{unscheduled} requests of the rate levels have no targeted_start (when GuideLLM "
            "scheduled them): their client queue is unknown."
        )
    workload = rate_workload(
        {keys[rate]: rate for rate in seen},
        {keys[rate]: sum(1 for _, _, s in b.items if s == "ok") for rate, b in seen.items()},
        arrival=arrival,
        burstiness=1.0 if arrival == "poisson" else None,
        max_concurrency=cap if same_cap and isinstance(cap, int) else None,
        prompt_source=PROMPT_SOURCE,
    )
    return requests, summaries, workload, notes


def _cap(strategy: dict[str, Any]) -> int | None:
    cap = strategy.get("max_concurrency")
    return cap if isinstance(cap, int) and not isinstance(cap, bool) and cap >= 1 else None


def _scheduled_times(benches: list[_Bench]) -> list[float]:
    return [t for b in benches for _, item, _ in b.items if (t := _scheduled(item)) is not None]


def _read_report(path: Path) -> dict[str, Any]:
    data = read_json(path, WHAT)
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise ImportFormatError(f"missing key 'benchmarks' (a list); expected {WHAT}", path)
    return data


def _stats_list(requests: Any, path: Path, where: str) -> list[tuple[str, dict[str, Any], str]]:
    if not isinstance(requests, dict):
        raise ImportFormatError(f"'requests' is not an object; expected {WHAT}", path, where)
    out = []
    for key, status in STATUSES:
        items = requests.get(key) or []
        if not isinstance(items, list):
            raise ImportFormatError(f"'requests.{key}' is not a list", path, where)
        for index, item in enumerate(items):
            out.append((f"{where}.requests.{key}[{index}]", item, status))
    return out


# GuideLLM before 0.4 kept the times on the request itself, under other names.
_OLD_TIMING_NAMES = {
    "request_start": "start_time",
    "first_token_iteration": "first_token_time",
    "last_token_iteration": "last_token_time",
    "request_end": "end_time",
}


def _timing(item: Any, key: str, path: Path, where: str, required: bool = True) -> float:
    """One of a request's Unix-second timings: ``info.timings.<key>`` (GuideLLM 0.4+), else the
    older flat field (``start_time``, ``first_token_time``...)."""
    if not isinstance(item, dict):
        raise ImportFormatError(f"expected a request object; {WHAT}", path, where)
    timings = (item.get("info") or {}).get("timings")
    if isinstance(timings, dict):
        value, name = timings.get(key), f"info.timings.{key}"
    elif _OLD_TIMING_NAMES[key] in item:
        value, name = item.get(_OLD_TIMING_NAMES[key]), _OLD_TIMING_NAMES[key]
    else:
        raise ImportFormatError(f"missing key 'info.timings'; expected {WHAT}", path, where)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if required:
        raise ImportFormatError(f"missing key {name!r}; expected {WHAT}", path, where)
    return float("nan")


def _scheduled(item: dict[str, Any]) -> float | None:
    """When GuideLLM's strategy scheduled the request (Unix s): ``info.timings.targeted_start``,
    or before 0.4 ``scheduler_info.targeted_start_time`` (-1 there: never set); None if absent."""
    timings = (item.get("info") or {}).get("timings")
    if isinstance(timings, dict):
        value = timings.get("targeted_start")
    else:
        value = (item.get("scheduler_info") or {}).get("targeted_start_time")
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None


def _tokens(item: dict[str, Any], computed: str, metrics_key: str) -> int | None:
    value = item.get(computed)
    if isinstance(value, int):
        return value
    usage = item.get(metrics_key) or {}
    for key in ("total_tokens", "text_tokens"):
        if isinstance(usage.get(key), int):
            return int(usage[key])
    return None


def _trace(
    item: dict[str, Any],
    status: str,
    concurrency: int,
    origin_s: float,
    path: Path,
    where: str,
    scheduled_s: float | None,
) -> RequestTrace:
    start = _timing(item, "request_start", path, where)
    first = _timing(item, "first_token_iteration", path, where, required=status == "ok")
    last = _timing(item, "last_token_iteration", path, where, required=status == "ok")
    end = _timing(item, "request_end", path, where, required=False)
    out = _tokens(item, "output_tokens", "output_metrics")
    if out is None and status == "ok":
        iterations = ((item.get("info") or {}).get("timings") or {}).get("token_iterations")
        out = iterations if isinstance(iterations, int) and iterations > 0 else None
    error = None
    if status != "ok":
        message = str((item.get("info") or {}).get("error") or status)
        error = RequestError(
            kind="cancelled" if status == "cancelled" else "other", message=message[:500]
        )
    return RequestTrace(
        concurrency=concurrency,
        request_id=str(item.get("request_id") or where),
        send_ns=round((start - origin_s) * NS_PER_S),
        scheduled_ns=round((scheduled_s - origin_s) * NS_PER_S)
        if scheduled_s is not None
        else None,
        end_ns=round((end - start) * NS_PER_S) if end == end else None,
        ttft_ns=round((first - start) * NS_PER_S) if status == "ok" else None,
        e2el_ns=round((last - start) * NS_PER_S) if status == "ok" else None,
        prompt_tokens=_tokens(item, "prompt_tokens", "input_metrics"),
        completion_tokens=out if status == "ok" else None,
        status=status,
        error=error,
    )


def _summary(bench: dict[str, Any]) -> dict[str, float | int | str | None]:
    out: dict[str, float | int | str | None] = {}
    metrics = bench.get("metrics") or {}
    for name, ours in SAME_METRICS.items():
        successful = (metrics.get(name) or {}).get("successful") or {}
        if isinstance(successful.get("mean"), int | float):
            out[f"{ours}_mean"] = successful["mean"]
        percentiles = successful.get("percentiles") or {}
        for stat in PERCENTILES:
            if isinstance(percentiles.get(stat), int | float):
                out[f"{ours}_{stat}"] = percentiles[stat]
    duration = bench.get("duration")
    if isinstance(duration, int | float):
        out["guidellm_duration_s"] = duration
    rps = ((metrics.get("requests_per_second") or {}).get("successful") or {}).get("mean")
    if isinstance(rps, int | float):
        out["guidellm_requests_per_second_mean"] = rps
    return out


def _model(report: dict[str, Any]) -> str | None:
    args = report.get("args") or {}
    model = args.get("model")
    if isinstance(model, str):
        return model
    for bench in report.get("benchmarks") or []:
        backend = (
            ((bench.get("config") or {}).get("backend") or {}) if isinstance(bench, dict) else {}
        )
        if isinstance(backend.get("model"), str):
            return str(backend["model"])
    return None
