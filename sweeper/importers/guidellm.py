"""GuideLLM ``benchmarks.json`` -> a trace set (per request only).

GuideLLM's report (``GenerativeBenchmarksReport``: ``metadata.version`` 1, ``guidellm_version``)
holds ``benchmarks``, one per strategy it ran. Each has ``config.strategy`` (``type_``
``concurrent`` with ``streams``, or ``synchronous``: one stream), its ``metrics`` and
``requests.successful`` / ``errored`` / ``incomplete``: one ``GenerativeRequestStats`` per request
with ``info.timings`` (Unix seconds): ``request_start``, ``first_token_iteration``,
``last_token_iteration``, ``token_iterations``, ``request_end``.

GuideLLM keeps only the first and last token times (it spreads the iterations in between evenly
when it needs them), so the import has TTFT and E2EL per request and no ITL (fidelity
``per_request``). Definitions line up with sweeper's: TTFT = first_token_iteration -
request_start, E2EL = last_token_iteration - request_start, and GuideLLM's
``inter_token_latency_ms`` = (last - first) / (output tokens - 1) is sweeper's TPOT. GuideLLM's
``time_per_output_token_ms`` ((last - start) / output tokens, first token included) and its
``request_latency`` (to ``request_end``) differ; docs/metrics.md has the table. Rate-based
strategies (constant, poisson, throughput) have no fixed concurrency and are skipped with a
warning.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sweeper.errors import ImportFormatError
from sweeper.importers._common import Imported, need, read_json
from sweeper.schema import RequestError, RequestTrace, Target, Workload
from sweeper.units import NS_PER_S

REPORT_FILE = "benchmarks.json"
WHAT = "a GuideLLM benchmarks.json ({metadata, benchmarks: [{config.strategy, requests}]})"
STATUSES = (("successful", "ok"), ("errored", "error"), ("incomplete", "cancelled"))
PERCENTILES = ("p50", "p90", "p95", "p99")
# GuideLLM metric -> sweeper level-frame metric (same definition)
SAME_METRICS = {"time_to_first_token_ms": "ttft_ms", "inter_token_latency_ms": "tpot_ms"}


def read_guidellm(paths: Sequence[Path]) -> Imported:
    """Read one or more GuideLLM reports as one sweep (one level per concurrent strategy)."""
    reports = []
    for path in paths:
        file = path / REPORT_FILE if path.is_dir() else path
        if not file.is_file():
            raise ImportFormatError(f"no such file (expected {REPORT_FILE})", file)
        reports.append((file, _read_report(file)))
    warnings: list[str] = []
    levels: list[tuple[int, Path, list[tuple[str, dict[str, Any], str]], dict[str, Any]]] = []
    version = None
    for file, report in reports:
        meta = report.get("metadata") or {}
        version = version or meta.get("guidellm_version")
        for index, bench in enumerate(report["benchmarks"]):
            where = f"benchmarks[{index}]"
            if not isinstance(bench, dict):
                raise ImportFormatError(f"expected an object; {WHAT}", file, where)
            concurrency = _concurrency(bench, file, where)
            if concurrency is None:
                strategy = (bench.get("config") or bench.get("args") or {}).get("strategy") or {}
                warnings.append(
                    f"{file} {where}: strategy {strategy.get('type_')!r} has no fixed concurrency; skipped"
                )
                continue
            requests = need(bench, "requests", file, where, WHAT)
            levels.append((concurrency, file, _stats_list(requests, file, where), bench))
    if not levels:
        raise ImportFormatError(
            "no concurrent or synchronous benchmark in the report (rate-based runs have no "
            "concurrency to sweep)",
            reports[0][0],
        )
    seen: set[int] = set()
    for concurrency, file, _, _ in levels:
        if concurrency in seen:
            raise ImportFormatError(
                f"concurrency {concurrency} appears twice; give one result per level", file
            )
        seen.add(concurrency)
    starts = [
        _timing(item, "request_start", file, where)
        for _, file, items, _ in levels
        for where, item, _status in items
    ]
    origin_s = min(starts)
    requests_out: list[RequestTrace] = []
    summaries: dict[str, dict[str, float | int | str | None]] = {}
    for concurrency, file, items, bench in sorted(levels, key=lambda lv: lv[0]):
        for where, item, status in items:
            requests_out.append(_trace(item, status, concurrency, origin_s, file, where))
        summaries[str(concurrency)] = _summary(bench)
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
        workload=Workload(
            concurrency_levels=sorted(seen),
            requests_per_level={
                str(c): sum(1 for _, _, s in items if s == "ok") for c, _, items, _ in levels
            },
            prompt_source="GuideLLM data",
        ),
        warnings=warnings,
        levels=sorted(seen),
    )


def _read_report(path: Path) -> dict[str, Any]:
    data = read_json(path, WHAT)
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise ImportFormatError(f"missing key 'benchmarks' (a list); expected {WHAT}", path)
    return data


def _concurrency(bench: dict[str, Any], path: Path, where: str) -> int | None:
    config = bench.get("config") or bench.get("args")
    if not isinstance(config, dict) or not isinstance(config.get("strategy"), dict):
        raise ImportFormatError(f"missing key 'config.strategy'; expected {WHAT}", path, where)
    strategy = config["strategy"]
    kind = strategy.get("type_")
    if kind == "synchronous":
        return 1
    if kind == "concurrent":
        streams = strategy.get("streams")
        if not isinstance(streams, int) or streams < 1:
            raise ImportFormatError(
                f"concurrent strategy without a positive 'streams' ({streams!r})", path, where
            )
        return streams
    return None


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
    item: dict[str, Any], status: str, concurrency: int, origin_s: float, path: Path, where: str
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
