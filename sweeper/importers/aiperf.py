"""AIPerf results -> a trace set (per chunk).

Reads, per concurrency level, one AIPerf artifact folder:

- ``profile_export.jsonl``: one record per request. AIPerf 0.1.x keeps the send time in
  ``metadata.timestamp_ns`` and TTFT as ``metrics.ttft``; 0.8 (export schema 1.1) uses
  ``metadata.request_start_ns`` / ``request_end_ns`` and ``metrics.time_to_first_token``. Both
  give ``inter_chunk_latency`` (the list of gaps between content chunks, ms) and
  ``request_latency`` (send to last content chunk, ms), so every chunk's arrival is rebuilt as
  TTFT + the running sum of the gaps. Note AIPerf's names: its ``inter_token_latency`` is the
  per-request TPOT, its ``inter_chunk_latency`` is the per-gap ITL.
- ``profile_export_aiperf.json`` (optional): the run's settings (concurrency, model, endpoint,
  command) and AIPerf's own summary, kept in ``source.summaries`` so a report can set the two side
  by side.
- ``server_metrics_export.csv`` (optional, AIPerf 0.8): AIPerf's summary of the server's
  ``/metrics`` over the level, not a time series. ``vllm:cache_config_info`` becomes manifest
  facts (block size, GPU blocks, KV capacity, KV dtype...); counters and histograms become two
  ``server_metrics.jsonl`` samples bracketing the level (zero at its first send, the increase
  over the level at its last end), which is exactly what a counter delta needs; gauges, which
  AIPerf gives as avg / min / max / percentiles, are kept in ``source.summaries`` under
  ``server.<name>.<stat>``.
- ``server.log`` and ``vllm_command.txt`` (optional): the server's log and command line.

A folder holding such artifact folders (``conc1/``, ``conc2/``...) is one sweep.
AIPerf does not say how many tokens each chunk carried; a request's output tokens
(``output_sequence_length``, reasoning included, as AIPerf counts them) are spread evenly over
its chunks, and the manifest says so.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sweeper.errors import ImportFormatError
from sweeper.importers._aiperf_server import (
    SERVER_LOG_FILE,
    SERVER_METRICS_FILE,
    LevelFiles,
    bracket_samples,
    merge_server,
    read_server_metrics,
    read_vllm_command,
    with_scheme,
)
from sweeper.importers._common import (
    Imported,
    chunk_offsets_ns,
    iter_json_lines,
    level_from_name,
    need,
    read_json,
    spread_tokens,
)
from sweeper.redact import redact_argv
from sweeper.schema import (
    MetricSample,
    RequestError,
    RequestTrace,
    Target,
    Workload,
)

RECORDS_FILE = "profile_export.jsonl"
SUMMARY_FILE = "profile_export_aiperf.json"
VLLM_COMMAND_FILE = "vllm_command.txt"
WHAT = "an AIPerf profile_export.jsonl record ({metadata, metrics[, error]})"
CANCELLED_CODE = 499
HTTP_ERROR_MIN = 400

# AIPerf summary tag -> sweeper level-frame metric
_LATENCY_TAGS = {
    "ttft_ms": ("time_to_first_token", "ttft"),
    "e2el_ms": ("request_latency",),
    "tpot_ms": ("inter_token_latency",),
    "itl_ms": ("inter_chunk_latency",),
}
_SCALAR_TAGS = {
    "duration_s": "benchmark_duration",
    "output_throughput_tok_s": "output_token_throughput",
    "request_throughput_rps": "request_throughput",
    "total_token_throughput_tok_s": "total_token_throughput",
    "completed": "request_count",
    "failed": "error_request_count",
    "prompt_tokens_mean": "input_sequence_length",
    "output_tokens_mean": "output_sequence_length",
}
_STATS = {"mean": "avg", "p50": "p50", "p90": "p90", "p95": "p95", "p99": "p99"}


def read_aiperf(paths: Sequence[Path]) -> Imported:
    """Read AIPerf artifact folders (or their ``profile_export.jsonl``) as one sweep. A level
    folder with AIPerf's summary but no per-request records is kept as a summary-only level;
    a folder with neither is named in the warnings."""
    folders, skipped = _level_folders(paths)
    levels = [_read_level(folder) for folder in folders]
    seen: dict[int, Path] = {}
    for level in levels:
        if level.concurrency in seen:
            raise ImportFormatError(
                f"concurrency {level.concurrency} is also in {seen[level.concurrency]}; give one "
                "result per level",
                level.folder,
            )
        seen[level.concurrency] = level.folder
    starts = [r["send_unix_ns"] for lv in levels for r in lv.records]
    starts += [lv.window_unix_ns[0] for lv in levels if lv.summary_only and lv.window_unix_ns]
    if not any(lv.records for lv in levels) and not any(lv.summary for lv in levels):
        raise ImportFormatError(f"no request records in {RECORDS_FILE}", folders[0])
    origin = min(starts) if starts else 0
    requests: list[RequestTrace] = []
    metrics: list[MetricSample] = []
    summaries: dict[str, dict[str, float | int | str | None]] = {}
    server_urls: dict[int, str] = {}
    for level in sorted(levels, key=lambda lv: lv.concurrency):
        level_requests = [_to_trace(r, level.concurrency, origin) for r in level.records]
        requests.extend(level_requests)
        summaries[str(level.concurrency)] = level.summary
        if level.server_metrics is not None:
            samples = bracket_samples(level, level_requests, origin)
            metrics.extend(samples)
            if samples:
                server_urls[level.concurrency] = samples[0].url
    first = next((lv for lv in levels if lv.records), levels[0])
    imported = Imported(
        tool="aiperf",
        version=first.version,
        fidelity="per_chunk" if any(lv.records for lv in levels) else "summary",
        requests=requests,
        name=folders[0].name if len(folders) == 1 else _common_name(folders),
        origin_unix_ns=origin if starts else None,
        summaries=summaries,
        metrics=metrics,
        files=[
            str(lv.folder / (SUMMARY_FILE if lv.summary_only else RECORDS_FILE)) for lv in levels
        ],
        command=first.command,
        target=first.target,
        levels=[lv.concurrency for lv in levels],
        server_logs=[(lv.concurrency, lv.folder / SERVER_LOG_FILE) for lv in levels if lv.has_log],
    )
    imported.server = merge_server(levels, imported.warnings)
    imported.warnings.extend(_lost_warnings(levels, skipped))
    overlap = _overlapping_levels(requests)
    if overlap:
        servers = ", ".join(f"C={c}: {url}" for c, url in sorted(server_urls.items()))
        imported.warnings.append(
            f"levels ran at overlapping times ({overlap}), so on separate servers: a time window "
            "of one level also holds other levels' server samples and log lines; match "
            f"server_metrics.jsonl samples to levels by url and window ({servers})"
        )
    imported.workload = Workload(
        output_len=first.output_len,
        concurrency_levels=sorted(lv.concurrency for lv in levels),
        requests_per_level={str(lv.concurrency): _measured(lv) for lv in levels},
        ignore_eos=first.ignore_eos,
        seed=first.seed,
        prompt_source="AIPerf dataset",
    )
    if any(lv.spread for lv in levels):
        imported.warnings.append(
            "AIPerf records no token count per chunk: where a request's output tokens exceed its "
            "chunks, the tokens were spread evenly over the chunks (multi-token chunks are "
            "estimates)."
        )
    return imported


def _measured(level: LevelFiles) -> int:
    if level.summary_only:
        counts = (level.summary.get("completed"), level.summary.get("failed"))
        return int(sum(c for c in counts if isinstance(c, int | float)))
    return sum(1 for r in level.records if r["phase"] == "measured")


def _lost_warnings(levels: list[LevelFiles], skipped: list[Path]) -> list[str]:
    """What of the artifacts could not be imported whole, said once each: nothing is dropped
    without a word."""
    out = []
    summary_only = sorted(lv.concurrency for lv in levels if lv.summary_only)
    if summary_only:
        where = ", ".join(f"C={c}" for c in summary_only)
        out.append(
            f"{where}: only AIPerf's own summary ({SUMMARY_FILE}), no per-request records "
            f"({RECORDS_FILE}); these levels keep AIPerf's throughput and latency percentiles "
            "(basis tool_summary), and the analyses that need per-request or per-chunk data "
            "(ITL tail and its cause, per-request speed) leave them out"
        )
    for folder in skipped:
        out.append(f"skipped {folder}: neither {RECORDS_FILE} nor {SUMMARY_FILE} in it")
    return out


def _overlapping_levels(requests: list[RequestTrace]) -> str:
    """'C=1 and C=2, ...' for levels whose send-to-end windows overlap; '' when none do."""
    windows: dict[int, tuple[int, int]] = {}
    for r in requests:
        end = r.send_ns + (r.chunk_ns[-1] if r.chunk_ns else (r.end_ns or 0))
        lo, hi = windows.get(r.concurrency, (r.send_ns, end))
        windows[r.concurrency] = (min(lo, r.send_ns), max(hi, end))
    pairs = [
        f"C={a} and C={b}"
        for a, (a_lo, a_hi) in sorted(windows.items())
        for b, (b_lo, b_hi) in sorted(windows.items())
        if a < b and a_lo < b_hi and b_lo < a_hi
    ]
    return ", ".join(pairs)


def _common_name(folders: list[Path]) -> str:
    parents = {f.parent.name for f in folders}
    return parents.pop() if len(parents) == 1 else "sweep"


def _is_level(folder: Path) -> bool:
    return (folder / RECORDS_FILE).is_file() or (folder / SUMMARY_FILE).is_file()


def _level_folders(paths: Sequence[Path]) -> tuple[list[Path], list[Path]]:
    """The level folders to read, and the sub-folders skipped for holding neither file."""
    folders: list[Path] = []
    skipped: list[Path] = []
    for path in paths:
        if path.is_file():
            if path.name not in (RECORDS_FILE, SUMMARY_FILE):
                _refuse_file(path)
            folders.append(path.parent)
        elif _is_level(path):
            folders.append(path)
        elif path.is_dir():
            subs = sorted(p for p in path.iterdir() if p.is_dir())
            levels = [p for p in subs if _is_level(p)]
            if not levels:
                raise ImportFormatError(
                    f"no {RECORDS_FILE} nor {SUMMARY_FILE} here nor in its sub-folders; expected "
                    "an AIPerf artifact folder, or a folder of them (one per concurrency level)",
                    path,
                )
            folders.extend(levels)
            skipped.extend(p for p in subs if not _is_level(p))
        else:
            raise ImportFormatError("no such file or folder", path)
    return folders, skipped


def _refuse_file(path: Path) -> None:
    raise ImportFormatError(
        f"not an AIPerf file: expected {RECORDS_FILE} (or its folder), got {path.name!r}", path
    )


def _read_level(folder: Path) -> LevelFiles:
    level = LevelFiles(folder)
    settings: dict[str, Any] = {}
    summary_path = folder / SUMMARY_FILE
    if summary_path.is_file():
        settings = _read_summary(summary_path, level)
    records_path = folder / RECORDS_FILE
    if records_path.is_file():
        for number, obj in iter_json_lines(records_path, WHAT):
            level.records.append(_read_record(obj, records_path, number, level))
    if level.version is None:
        new_layout = any("request_start_ns" in r["raw_meta"] for r in level.records)
        level.version = "0.8+" if new_layout else "0.1.x"
    loadgen = settings.get("loadgen", {}) if isinstance(settings, dict) else {}
    concurrency = loadgen.get("concurrency") if isinstance(loadgen, dict) else None
    if not isinstance(concurrency, int):
        concurrency = level_from_name(folder.name)
    if not concurrency or concurrency < 1:
        raise ImportFormatError(
            f"cannot tell the concurrency: {SUMMARY_FILE} has no input_config.loadgen.concurrency "
            "and the folder name has no number (name level folders like conc8)",
            folder,
        )
    level.concurrency = concurrency
    if (folder / SERVER_METRICS_FILE).is_file():
        level.server_metrics = read_server_metrics(folder / SERVER_METRICS_FILE, level)
    if (folder / VLLM_COMMAND_FILE).is_file():
        read_vllm_command(folder / VLLM_COMMAND_FILE, level)
    return level


def _read_summary(path: Path, level: LevelFiles) -> dict[str, Any]:
    data = read_json(path, "AIPerf's profile_export_aiperf.json")
    if not isinstance(data, dict) or not ("records" in data or "request_count" in data):
        raise ImportFormatError(
            "not an AIPerf summary: expected 'records' (0.1.x) or per-metric keys such as "
            "'request_count' (0.8)",
            path,
        )
    tags = data["records"] if isinstance(data.get("records"), dict) else data
    version = data.get("aiperf_version")
    schema = data.get("schema_version")
    level.version = str(version) if version else None
    if level.version and schema:
        level.version += f" (export schema {schema})"
    for name, tag in _SCALAR_TAGS.items():
        entry = tags.get(tag)
        if isinstance(entry, dict) and isinstance(entry.get("avg"), int | float):
            level.summary[name] = entry["avg"]
    first, last = (tags.get(t) for t in ("min_request_timestamp", "max_response_timestamp"))
    if isinstance(first, dict) and isinstance(last, dict):
        start, end = first.get("avg"), last.get("avg")
        if isinstance(start, int | float) and isinstance(end, int | float) and end > start:
            level.window_unix_ns = (round(start), round(end))
    for metric, candidates in _LATENCY_TAGS.items():
        entry = next((tags[t] for t in candidates if isinstance(tags.get(t), dict)), None)
        if entry is None:
            continue
        for stat, key in _STATS.items():
            value = entry.get(key)
            if isinstance(value, int | float):
                level.summary[f"{metric}_{stat}"] = value
    config = data.get("input_config") or {}
    endpoint = config.get("endpoint") or {}
    names = endpoint.get("model_names") or []
    urls = endpoint.get("urls") or ([endpoint["url"]] if endpoint.get("url") else [])
    level.target = Target(
        base_url=with_scheme(urls[0]) if urls else None,
        endpoint="chat" if endpoint.get("type") == "chat" else "completions",
        model=names[0] if names else None,
    )
    command = config.get("cli_command")
    if isinstance(command, str):
        try:
            argv = shlex.split(command)
        except ValueError:
            argv = command.split()
        level.command = redact_argv(argv)  # --api-key X, -H 'Authorization: ...', URL passwords
    inputs = config.get("input") or {}
    osl = ((inputs.get("prompt") or {}).get("output_tokens") or {}).get("mean")
    level.output_len = osl if isinstance(osl, int) else None
    eos = (inputs.get("extra_inputs_parsed") or {}).get("ignore_eos")
    level.ignore_eos = eos if isinstance(eos, bool) else None
    seed = inputs.get("random_seed")
    level.seed = seed if isinstance(seed, int) else None
    return config


def _value(metrics: dict[str, Any], *names: str) -> Any:
    for name in names:
        entry = metrics.get(name)
        if isinstance(entry, dict) and "value" in entry:
            return entry["value"]
    return None


def _read_record(obj: dict[str, Any], path: Path, number: int, level: LevelFiles) -> dict[str, Any]:
    where = f"line {number}"
    meta = need(obj, "metadata", path, where, WHAT)
    metrics = need(obj, "metrics", path, where, WHAT)
    if not isinstance(meta, dict) or not isinstance(metrics, dict):
        raise ImportFormatError(
            f"'metadata' and 'metrics' must be objects; expected {WHAT}", path, where
        )
    send = meta.get("request_start_ns", meta.get("timestamp_ns"))
    if not isinstance(send, int):
        raise ImportFormatError(
            "missing key 'request_start_ns' (AIPerf 0.8) or 'timestamp_ns' (0.1.x) in metadata",
            path,
            where,
        )
    phase = meta.get("benchmark_phase", meta.get("credit_phase", "profiling"))
    error = obj.get("error")
    record: dict[str, Any] = {
        "raw_meta": meta,
        "id": str(meta.get("x_request_id") or f"{level.folder.name}-{number}"),
        "send_unix_ns": send,
        "phase": "warmup" if phase == "warmup" else "measured",
        "error": error if isinstance(error, dict) else None,
        "cancelled": bool(meta.get("was_cancelled")),
        "end_ns": (meta["request_end_ns"] - send)
        if isinstance(meta.get("request_end_ns"), int)
        else None,
        "prompt_tokens": _value(metrics, "input_sequence_length", "usage_prompt_tokens"),
        "output_tokens": _value(
            metrics, "output_sequence_length", "usage_completion_tokens", "output_token_count"
        ),
        "chunk_ns": [],
        "chunk_tokens": [],
        "e2el_ns": None,
    }
    if record["error"] is not None:
        return record
    ttft = _value(metrics, "time_to_first_token", "ttft")
    latency = _value(metrics, "request_latency")
    gaps = _value(metrics, "inter_chunk_latency")
    if ttft is None and latency is None:
        raise ImportFormatError(
            "a successful record without 'time_to_first_token' / 'ttft' nor 'request_latency' "
            f"in metrics; expected {WHAT}",
            path,
            where,
        )
    if ttft is not None:
        if gaps is None:
            gaps = []
        if not isinstance(gaps, list):
            raise ImportFormatError("'inter_chunk_latency' value is not a list", path, where)
        record["chunk_ns"] = chunk_offsets_ns(float(ttft), [float(g) for g in gaps])
        out = record["output_tokens"]
        count = len(record["chunk_ns"])
        total = int(out) if isinstance(out, int | float) else count
        record["chunk_tokens"] = spread_tokens(total, count)
        level.spread = level.spread or total > count
    elif isinstance(latency, int | float):
        record["e2el_ns"] = round(float(latency) * 1e6)
    return record


def _to_trace(record: dict[str, Any], concurrency: int, origin: int) -> RequestTrace:
    error = record["error"]
    status = "ok"
    request_error = None
    if error is not None or record["cancelled"]:
        code = error.get("code") if error else None
        kind_name = str(error.get("type", "")) if error else ""
        cancelled = record["cancelled"] or code == CANCELLED_CODE or "Cancel" in kind_name
        status = "cancelled" if cancelled else "error"
        http = code if isinstance(code, int) and code >= HTTP_ERROR_MIN else None
        request_error = RequestError(
            kind="cancelled" if cancelled else ("http" if http else "other"),
            http_status=http,
            message=f"{kind_name}: {error.get('message', '')}" if error else "cancelled by AIPerf",
        )
    prompt = record["prompt_tokens"]
    out = record["output_tokens"]
    return RequestTrace(
        concurrency=concurrency,
        request_id=record["id"],
        phase=record["phase"],
        send_ns=record["send_unix_ns"] - origin,
        end_ns=record["end_ns"],
        chunk_ns=record["chunk_ns"],
        chunk_tokens=record["chunk_tokens"],
        e2el_ns=record["e2el_ns"],
        prompt_tokens=int(prompt) if isinstance(prompt, int | float) else None,
        completion_tokens=int(out) if isinstance(out, int | float) and status == "ok" else None,
        status=status,
        error=request_error,
    )
