"""``vllm bench serve`` result JSON -> a trace set.

``vllm bench serve --save-result`` writes one JSON per run: the settings (``backend``,
``model_id``, ``max_concurrency``, ``request_rate``, ``num_prompts``...), the aggregates
(``duration`` s, ``completed``, ``failed``, ``request_throughput``, ``output_throughput``,
``mean_ttft_ms`` / ``median_ttft_ms`` / ``p99_ttft_ms`` and the same for ``tpot``, ``itl``,
``e2el``), and with ``--save-detailed`` the per-request lists ``ttfts`` (s), ``itls`` (a list of
gaps in s per request), ``input_lens``, ``output_lens``, ``errors`` ("" for success) and, in
recent versions, ``start_times`` and ``latencies``. One file is one level (its
``max_concurrency``); several files are one sweep.

- With ``--save-detailed``: fidelity ``per_chunk``; chunk arrivals are TTFT + the running sum of
  the gaps (vLLM stores the gaps, not the times). Without ``start_times`` (older vLLM) the
  requests are laid out as a closed loop of C streams and the level's duration is vLLM's own.
- Without it: fidelity ``summary``; the level's numbers are vLLM's own, kept in
  ``source.summaries`` (``sweeper summary`` shows them; nothing can be recomputed).

vLLM's ``duration`` is the whole benchmark's wall time (first request scheduled to the last
finished); sweeper's is first send to last content chunk, so it is a little shorter and
throughput a little higher when send times are known (docs/metrics.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sweeper.errors import ImportFormatError
from sweeper.importers._common import (
    Imported,
    chunk_offsets_ns,
    closed_loop_sends,
    need,
    need_list,
    read_json,
    spread_tokens,
)
from sweeper.schema import RequestError, RequestTrace, Target, Workload
from sweeper.units import MS_PER_S, NS_PER_S

WHAT = "a `vllm bench serve` result JSON (keys duration, completed, mean_ttft_ms, ...)"
DETAIL_KEYS = ("ttfts", "itls", "input_lens", "output_lens")
METRICS = {"ttft_ms": "ttft", "tpot_ms": "tpot", "itl_ms": "itl", "e2el_ms": "e2el"}
PERCENTILE_STATS = ("p90", "p95", "p99")


def read_vllm_bench(paths: Sequence[Path]) -> Imported:
    """Read ``vllm bench serve`` result files (or folders of them) as one sweep."""
    files = _files(paths)
    runs = [(path, _read_result(path)) for path in files]
    detailed = [all(key in data for key in DETAIL_KEYS) for _, data in runs]
    if any(detailed) and not all(detailed):
        plain = [str(p) for (p, _), d in zip(runs, detailed, strict=True) if not d]
        raise ImportFormatError(
            "some files were saved with --save-detailed and some without "
            f"({', '.join(plain)}); import them as separate runs"
        )
    per_chunk = all(detailed)
    has_starts = per_chunk and all("start_times" in data for _, data in runs)
    requests: list[RequestTrace] = []
    summaries: dict[str, dict[str, float | int | str | None]] = {}
    seen: dict[int, Path] = {}
    origin = min(min(data["start_times"]) for _, data in runs) if has_starts else 0.0
    clock_ns = 0
    for path, data in sorted(runs, key=lambda run: _concurrency(*run)):
        concurrency = _concurrency(path, data)
        if concurrency in seen:
            raise ImportFormatError(
                f"max_concurrency {concurrency} is also in {seen[concurrency]}; give one result per level",
                path,
            )
        seen[concurrency] = path
        summaries[str(concurrency)] = _level_summary(data)
        if per_chunk:
            level = _requests(path, data, concurrency, origin if has_starts else None, clock_ns)
            requests.extend(level)
            ends = [r.send_ns + (r.end_ns or 0) for r in level]
            clock_ns = max(ends, default=clock_ns) + NS_PER_S
    first = runs[0][1]
    model = first.get("model_id")
    imported = Imported(
        tool="vllm-bench",
        version=str(first["vllm_version"]) if first.get("vllm_version") else None,
        fidelity="per_chunk" if per_chunk else "summary",
        requests=requests,
        name=str(model).rsplit("/", 1)[-1] if model else files[0].stem,
        send_times="measured" if has_starts or not per_chunk else "reconstructed",
        summaries=summaries,
        files=[str(f) for f in files],
        target=Target(
            endpoint="chat" if "chat" in str(first.get("backend", "")) else "completions",
            model=str(model) if model else None,
        ),
        workload=Workload(
            concurrency_levels=sorted(seen),
            requests_per_level={
                str(c): int(_count(d)) for c, d in ((_concurrency(p, d), d) for p, d in runs)
            },
            prompt_source="vllm bench serve dataset",
        ),
        levels=sorted(seen),
    )
    if per_chunk:
        imported.warnings.append(
            "vllm bench serve records no token count per chunk: each request's output tokens "
            "were spread evenly over its chunks."
        )
    if per_chunk and not has_starts:
        imported.warnings.append(
            "This vllm bench serve version kept no start_times: requests were laid out as a "
            "closed loop of C streams; per-level duration and throughput are vLLM's own."
        )
    return imported


def _files(paths: Sequence[Path]) -> list[Path]:
    files: list[Path] = []
    for path in paths:
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            found = sorted(path.glob("*.json"))
            if not found:
                raise ImportFormatError("no *.json result files in this folder", path)
            files.extend(found)
        else:
            raise ImportFormatError("no such file or folder", path)
    return files


def _read_result(path: Path) -> dict[str, Any]:
    data = read_json(path, WHAT)
    if not isinstance(data, dict):
        raise ImportFormatError(f"expected a JSON object; {WHAT}", path)
    for key in ("duration", "completed"):
        need(data, key, path, "top level", WHAT)
    return data


def _count(data: dict[str, Any]) -> float:
    completed = data.get("completed") or 0
    failed = data.get("failed") or 0
    return float(completed) + float(failed)


def _concurrency(path: Path, data: dict[str, Any]) -> int:
    value = data.get("max_concurrency")
    if isinstance(value, int) and value >= 1:
        return value
    raise ImportFormatError(
        f"max_concurrency is {value!r}: sweeper groups runs by concurrency, so import runs made "
        "with --max-concurrency N",
        path,
        "key max_concurrency",
    )


def _level_summary(data: dict[str, Any]) -> dict[str, float | int | str | None]:
    out: dict[str, float | int | str | None] = {}
    for name, key in (
        ("duration_s", "duration"),
        ("completed", "completed"),
        ("failed", "failed"),
        ("request_throughput_rps", "request_throughput"),
        ("output_throughput_tok_s", "output_throughput"),
        ("total_token_throughput_tok_s", "total_token_throughput"),
    ):
        value = data.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[name] = value
    for metric, short in METRICS.items():
        for stat, key in (("mean", f"mean_{short}_ms"), ("p50", f"median_{short}_ms")):
            if isinstance(data.get(key), int | float):
                out[f"{metric}_{stat}"] = data[key]
        for stat in PERCENTILE_STATS:
            key = f"{stat}_{short}_ms"
            if isinstance(data.get(key), int | float):
                out[f"{metric}_{stat}"] = data[key]
    return out


def _requests(
    path: Path, data: dict[str, Any], concurrency: int, origin_s: float | None, clock_ns: int
) -> list[RequestTrace]:
    ttfts = need_list(data, "ttfts", path, "top level", WHAT)
    itls = need_list(data, "itls", path, "top level", WHAT)
    input_lens = need_list(data, "input_lens", path, "top level", WHAT)
    output_lens = need_list(data, "output_lens", path, "top level", WHAT)
    errors = data.get("errors") or [""] * len(ttfts)
    latencies = data.get("latencies")
    starts = data.get("start_times")
    lists = {
        "ttfts": ttfts,
        "itls": itls,
        "input_lens": input_lens,
        "output_lens": output_lens,
        "errors": errors,
    }
    if latencies is not None:
        lists["latencies"] = latencies
    if starts is not None:
        lists["start_times"] = starts
    lengths = {key: len(value) for key, value in lists.items()}
    if len(set(lengths.values())) != 1:
        raise ImportFormatError(
            f"per-request lists differ in length ({lengths}); the file may be cut or edited", path
        )
    chunks: list[list[int]] = []
    durations: list[int] = []
    for index, (ttft, gaps) in enumerate(zip(ttfts, itls, strict=True)):
        if not isinstance(ttft, int | float) or not isinstance(gaps, list):
            raise ImportFormatError(
                "expected a number in ttfts and a list in itls", path, f"request {index}"
            )
        offsets = (
            chunk_offsets_ns(ttft * MS_PER_S, [g * MS_PER_S for g in gaps])
            if not errors[index]
            else []
        )
        chunks.append(offsets)
        if latencies is not None and isinstance(latencies[index], int | float):
            durations.append(round(latencies[index] * NS_PER_S))
        else:
            durations.append(offsets[-1] if offsets else 0)
    if origin_s is not None and starts is not None:
        sends = [round((s - origin_s) * NS_PER_S) for s in starts]
    else:
        sends = closed_loop_sends(durations, concurrency, clock_ns)
    traces = []
    for index, offsets in enumerate(chunks):
        failed = bool(errors[index])
        out = output_lens[index]
        traces.append(
            RequestTrace(
                concurrency=concurrency,
                request_id=f"c{concurrency}-{index:05d}",
                send_ns=sends[index],
                end_ns=durations[index],
                chunk_ns=offsets,
                chunk_tokens=spread_tokens(int(out), len(offsets)) if offsets else [],
                prompt_tokens=int(input_lens[index])
                if isinstance(input_lens[index], int | float)
                else None,
                completion_tokens=int(out) if isinstance(out, int | float) and not failed else None,
                status="error" if failed else "ok",
                error=RequestError(kind="other", message=str(errors[index])[:500])
                if failed
                else None,
            )
        )
    return traces
