"""LLMPerf results -> a trace set (per request only).

LLMPerf (``token_benchmark_ray.py``) writes per level ``<name>_individual_responses.json`` (a
list of requests: ``ttft_s``, ``end_to_end_latency_s``, ``number_input_tokens``,
``number_output_tokens``, ``error_code``, ``error_msg``...) and ``<name>_summary.json``
(``num_concurrent_requests``, quantiles of each metric, ``results_num_completed_requests_per_min``,
``results_mean_output_throughput_token_per_s``...). A folder per level, or a folder of such
folders, is one sweep.

What LLMPerf does not keep, sweeper cannot show:

- no chunk times: TTFT and end-to-end latency per request only (fidelity ``per_request``; ITL is
  unknown). LLMPerf's own ``inter_token_latency_s`` is end-to-end latency / output tokens (the
  first token's wait included), which is neither vLLM's ITL nor its TPOT; it is kept in
  ``source.summaries`` as ``llmperf_inter_token_latency_ms_*``.
- no send times: requests are laid out as a closed loop of C streams in file order
  (``send_times="reconstructed"``), and a level's duration is LLMPerf's own (completed requests /
  its completed-requests-per-minute), so throughput agrees with LLMPerf's.
- output tokens are counted by LLMPerf's tokenizer on the client, not the server's usage.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sweeper.errors import ImportFormatError
from sweeper.importers._common import (
    Imported,
    closed_loop_sends,
    level_from_name,
    need,
    need_number,
    read_json,
)
from sweeper.schema import RequestError, RequestTrace, Target, Workload
from sweeper.units import MS_PER_S, NS_PER_S

RESPONSES_SUFFIX = "_individual_responses.json"
SUMMARY_SUFFIX = "_summary.json"
WHAT = "an LLMPerf *_individual_responses.json (a list of {ttft_s, end_to_end_latency_s, ...})"
S_PER_MIN = 60.0
LATENCIES = {"ttft_ms": "results_ttft_s", "e2el_ms": "results_end_to_end_latency_s"}
STATS = {
    "mean": "mean",
    "p50": "quantiles_p50",
    "p90": "quantiles_p90",
    "p95": "quantiles_p95",
    "p99": "quantiles_p99",
}


def read_llmperf(paths: Sequence[Path]) -> Imported:
    """Read LLMPerf result folders (or ``*_individual_responses.json`` files) as one sweep."""
    files, skipped = _response_files(paths)
    requests: list[RequestTrace] = []
    summaries: dict[str, dict[str, float | int | str | None]] = {}
    model = version = None
    input_len = output_len = None
    per_level: dict[str, int] = {}
    clock_ns = 0
    seen: dict[int, Path] = {}
    for path in files:
        summary_path = path.with_name(path.name.removesuffix(RESPONSES_SUFFIX) + SUMMARY_SUFFIX)
        summary = _read_summary(summary_path) if summary_path.is_file() else {}
        concurrency = summary.get("num_concurrent_requests")
        if not isinstance(concurrency, int):
            concurrency = level_from_name(path.parent.name)
        if not concurrency or concurrency < 1:
            raise ImportFormatError(
                "cannot tell the concurrency: no *_summary.json with num_concurrent_requests "
                "beside it and no number in the folder name (name level folders like c8)",
                path,
            )
        if concurrency in seen:
            raise ImportFormatError(
                f"concurrency {concurrency} is also in {seen[concurrency]}; give one result per level",
                path,
            )
        seen[concurrency] = path
        model = model or summary.get("model")
        version = version or summary.get("version")
        input_len = input_len or summary.get("mean_input_tokens")
        output_len = output_len or summary.get("mean_output_tokens")
        level_requests = _read_responses(path, concurrency, clock_ns)
        requests.extend(level_requests)
        per_level[str(concurrency)] = len(level_requests)
        summaries[str(concurrency)] = _level_summary(summary)
        ends = [r.send_ns + (r.e2el_ns or r.end_ns or 0) for r in level_requests]
        clock_ns = max(ends, default=clock_ns) + NS_PER_S  # levels one second apart
    imported = Imported(
        tool="llmperf",
        version=f"summary format {version}" if version else None,
        fidelity="per_request",
        requests=requests,
        name=files[0].parent.parent.name if len(files) > 1 else files[0].parent.name,
        send_times="reconstructed",
        summaries=summaries,
        files=[str(f) for f in files],
        target=Target(endpoint="chat", model=model if isinstance(model, str) else None),
        workload=Workload(
            input_len=input_len if isinstance(input_len, int) else None,
            output_len=output_len if isinstance(output_len, int) else None,
            concurrency_levels=sorted(seen),
            requests_per_level=per_level,
            prompt_source="LLMPerf",
        ),
        levels=sorted(seen),
    )
    imported.warnings.extend(
        f"skipped {folder}: no *{RESPONSES_SUFFIX} in it (an LLMPerf level keeps its requests "
        "there)"
        for folder in skipped
    )
    imported.warnings.append(
        "LLMPerf keeps no send times: requests were laid out as a closed loop of C streams in "
        "file order; per-level duration and throughput are LLMPerf's own."
    )
    imported.warnings.append(
        "LLMPerf counts output tokens with its own tokenizer on the client, not from the "
        "server's usage."
    )
    return imported


def _response_files(paths: Sequence[Path]) -> tuple[list[Path], list[Path]]:
    """The responses files to read, and the level sub-folders skipped for holding none."""
    files: list[Path] = []
    skipped: list[Path] = []
    for path in paths:
        if path.is_file():
            if not path.name.endswith(RESPONSES_SUFFIX):
                raise ImportFormatError(
                    f"not an LLMPerf responses file: expected a name ending in {RESPONSES_SUFFIX}",
                    path,
                )
            files.append(path)
        elif path.is_dir():
            here = sorted(path.glob(f"*{RESPONSES_SUFFIX}"))
            if not here:
                here = sorted(path.glob(f"*/*{RESPONSES_SUFFIX}"))
                with_files = {f.parent for f in here}
                skipped += sorted(p for p in path.iterdir() if p.is_dir() and p not in with_files)
            if not here:
                raise ImportFormatError(
                    f"no *{RESPONSES_SUFFIX} here nor in its sub-folders; expected an LLMPerf "
                    "result folder, or a folder of them (one per concurrency level)",
                    path,
                )
            files.extend(here)
        else:
            raise ImportFormatError("no such file or folder", path)
    return files, skipped


def _read_summary(path: Path) -> dict[str, Any]:
    data = read_json(path, "an LLMPerf *_summary.json")
    if not isinstance(data, dict) or "results_ttft_s_mean" not in data:
        raise ImportFormatError("not an LLMPerf summary: missing key 'results_ttft_s_mean'", path)
    return data


def _level_summary(summary: dict[str, Any]) -> dict[str, float | int | str | None]:
    out: dict[str, float | int | str | None] = {}
    if not summary:
        return out
    for metric, prefix in LATENCIES.items():
        for stat, suffix in STATS.items():
            value = summary.get(f"{prefix}_{suffix}")
            if isinstance(value, int | float):
                out[f"{metric}_{stat}"] = value * MS_PER_S
    for stat, suffix in STATS.items():
        value = summary.get(f"results_inter_token_latency_s_{suffix}")
        if isinstance(value, int | float):
            out[f"llmperf_inter_token_latency_ms_{stat}"] = value * MS_PER_S
    completed = summary.get("results_num_completed_requests")
    per_min = summary.get("results_num_completed_requests_per_min")
    if isinstance(completed, int | float):
        out["completed"] = int(completed)
    if isinstance(completed, int | float) and isinstance(per_min, int | float) and per_min > 0:
        out["duration_s"] = completed / (per_min / S_PER_MIN)
        out["request_throughput_rps"] = per_min / S_PER_MIN
    errors = summary.get("results_number_errors")
    if isinstance(errors, int | float):
        out["failed"] = int(errors)
    throughput = summary.get("results_mean_output_throughput_token_per_s")
    if isinstance(throughput, int | float):
        out["output_throughput_tok_s"] = throughput
    return out


def _read_responses(path: Path, concurrency: int, start_ns: int) -> list[RequestTrace]:
    data = read_json(path, WHAT)
    if not isinstance(data, list):
        raise ImportFormatError(f"expected a JSON list; {WHAT}", path)
    rows = []
    for index, item in enumerate(data):
        where = f"item {index}"
        if not isinstance(item, dict):
            raise ImportFormatError(f"expected an object; {WHAT}", path, where)
        error_code = need(item, "error_code", path, where, WHAT)
        failed = error_code not in (None, "", 0)
        ttft = 0.0 if failed else need_number(item, "ttft_s", path, where, WHAT)
        e2el = (
            need_number(item, "end_to_end_latency_s", path, where, WHAT)
            if not failed
            else float(item.get("end_to_end_latency_s") or 0.0)
        )
        rows.append((item, failed, ttft, e2el))
    sends = closed_loop_sends(
        [round(e2el * NS_PER_S) for _, _, _, e2el in rows], concurrency, start_ns
    )
    traces = []
    for index, ((item, failed, ttft, e2el), send) in enumerate(zip(rows, sends, strict=True)):
        prompt = item.get("number_input_tokens")
        out = item.get("number_output_tokens")
        code = item.get("error_code")
        traces.append(
            RequestTrace(
                concurrency=concurrency,
                request_id=f"c{concurrency}-{index:05d}",
                send_ns=send,
                end_ns=round(e2el * NS_PER_S),
                ttft_ns=None if failed else round(ttft * NS_PER_S),
                e2el_ns=None if failed else round(e2el * NS_PER_S),
                prompt_tokens=int(prompt) if isinstance(prompt, int | float) else None,
                completion_tokens=int(out) if isinstance(out, int | float) and not failed else None,
                status="error" if failed else "ok",
                error=RequestError(
                    kind="http" if isinstance(code, int) else "other",
                    http_status=code if isinstance(code, int) else None,
                    message=str(item.get("error_msg") or ""),
                )
                if failed
                else None,
            )
        )
    return traces
