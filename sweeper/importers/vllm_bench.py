"""``vllm bench serve`` result JSON -> a trace set.

``vllm bench serve --save-result`` writes one JSON per run: the settings (``backend``,
``model_id``, ``num_prompts``, ``request_rate`` (a number, or ``"inf"``), ``burstiness``,
``max_concurrency`` (null without ``--max-concurrency``), ``ramp_up_strategy`` when the rate
ramps), the aggregates (``duration`` s, ``completed``, ``failed``, ``request_throughput``,
``output_throughput``, ``mean_ttft_ms`` / ``median_ttft_ms`` / ``p99_ttft_ms`` and the same for
``tpot``, ``itl``, ``e2el``), and with ``--save-detailed`` the per-request lists, in the order
the schedule released the requests: ``ttfts`` (s), ``itls`` (a list of gaps in s per request),
``input_lens``, ``output_lens``, ``errors`` ("" for success) and, in recent versions,
``start_times`` (perf_counter s when the request was sent), ``latencies`` and ``queue_times``
(s the request waited for a ``--max-concurrency`` slot after the schedule released it).

Several files are one sweep, of one of two kinds:

- **concurrency levels** (closed loop): ``request_rate`` inf with ``--max-concurrency C``: all
  requests released at once, C in flight; the level is C.
- **rate levels** (open loop): a finite ``request_rate`` (with or without a cap), and
  ``request_rate`` inf without a cap ("all at once"); an inf run with the same cap as the rate
  runs is that sweep's top level. Levels are keyed by position of the sorted rates.

Files of both kinds are refused unless ``load`` says which kind to import: ``"rate"`` takes every
file as a rate level, ``"concurrency"`` the concurrency levels only (the others are named in a
warning). A ramp-up run (``ramp_up_strategy``) has no one offered rate and is refused.

- With ``--save-detailed``: fidelity ``per_chunk``; chunk arrivals are TTFT + the running sum of
  the gaps (vLLM stores the gaps, not the times). A rate level's scheduled time per request is
  the send time less ``queue_times``; without ``queue_times`` it is the send time when no cap was
  set (vLLM sends each request as it is released), the rate alone fixes it for ``inf`` and
  constant arrivals (``burstiness`` inf), and it is unknown for capped random arrivals.
  Without ``start_times`` (older vLLM) concurrency levels are laid out as a closed loop of C
  streams, rate levels on their offered schedule where it is fixed by the rate (else evenly at
  the rate, said so); the level's duration is then vLLM's own.
- Without it: fidelity ``summary``; the level's numbers are vLLM's own, kept in
  ``source.summaries`` (``sweeper summary`` shows them; nothing can be recomputed).

vLLM's ``duration`` is the whole benchmark's wall time (first request scheduled to the last
finished); sweeper's is first send to last content chunk, so it is a little shorter and
throughput a little higher when send times are known (docs/metrics.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
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
from sweeper.importers._openloop import (
    INF,
    Load,
    arrival_of,
    cap_words,
    capped_sends_ns,
    known_arrivals_ns,
    mean_arrivals_ns,
    one_value,
    rate_keys,
    rate_words,
    rate_workload,
)
from sweeper.schema import RequestError, RequestTrace, Target, Workload
from sweeper.units import MS_PER_S, NS_PER_S

WHAT = "a `vllm bench serve` result JSON (keys duration, completed, mean_ttft_ms, ...)"
DETAIL_KEYS = ("ttfts", "itls", "input_lens", "output_lens")
METRICS = {"ttft_ms": "ttft", "tpot_ms": "tpot", "itl_ms": "itl", "e2el_ms": "e2el"}
PERCENTILE_STATS = ("p90", "p95", "p99")
# An inf-rate level releases every request at once: task creation takes milliseconds, not this.
TRACE_SPREAD_NS = NS_PER_S
PROMPT_SOURCE = "vllm bench serve dataset"
SPREAD_NOTE = (
    "vllm bench serve records no token count per chunk: each request's output tokens "
    "were spread evenly over its chunks."
)


@dataclass
class _Run:
    """One result file and the load it was run under."""

    path: Path
    data: dict[str, Any]
    rate: float  # offered requests/s; inf: all released at once
    cap: int | None  # --max-concurrency
    burstiness: float | None

    @property
    def label(self) -> str:
        return f"{self.path} ({rate_words(self.rate)}, max_concurrency {self.cap})"


@dataclass
class _Request:
    chunk_ns: list[int]
    duration_ns: int
    prompt_tokens: int | None
    output_tokens: int | None
    error: str
    start_s: float | None
    queue_s: float | None


@dataclass
class _Sweep:
    requests: list[RequestTrace] = field(default_factory=list)
    summaries: dict[str, dict[str, float | int | str | None]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def read_vllm_bench(paths: Sequence[Path], load: Load | None = None) -> Imported:
    """Read ``vllm bench serve`` result files (or folders of them) as one sweep; ``load`` picks
    the concurrency-based or the rate-based runs when the files hold both."""
    files = _files(paths)
    runs = [_run(path, _read_result(path)) for path in files]
    detailed = [all(key in run.data for key in DETAIL_KEYS) for run in runs]
    if any(detailed) and not all(detailed):
        plain = [str(run.path) for run, d in zip(runs, detailed, strict=True) if not d]
        raise ImportFormatError(
            "some files were saved with --save-detailed and some without "
            f"({', '.join(plain)}); import them as separate runs"
        )
    per_chunk = all(detailed)
    kind, chosen, left_out = _choose(runs, load)
    has_starts = per_chunk and all(isinstance(run.data.get("start_times"), list) for run in chosen)
    if kind == "concurrency":
        sweep, workload = _concurrency_sweep(chosen, per_chunk, has_starts)
    else:
        sweep, workload = _rate_sweep(chosen, per_chunk, has_starts)
    first = chosen[0].data
    model = first.get("model_id")
    return Imported(
        tool="vllm-bench",
        version=str(first["vllm_version"]) if first.get("vllm_version") else None,
        fidelity="per_chunk" if per_chunk else "summary",
        requests=sweep.requests,
        name=str(model).rsplit("/", 1)[-1] if model else chosen[0].path.stem,
        send_times="measured" if has_starts or not per_chunk else "reconstructed",
        summaries=sweep.summaries,
        files=[str(run.path) for run in chosen],
        target=Target(
            endpoint="chat" if "chat" in str(first.get("backend", "")) else "completions",
            model=str(model) if model else None,
        ),
        workload=workload,
        warnings=left_out + sweep.warnings,
        levels=list(workload.concurrency_levels),
    )


# ---------------------------------------------------------------------------------------------
# files and their load


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


def _run(path: Path, data: dict[str, Any]) -> _Run:
    if data.get("ramp_up_strategy") is not None:
        raise ImportFormatError(
            f"a ramp-up run ({data['ramp_up_strategy']} from {data.get('ramp_up_start_rps')} "
            f"to {data.get('ramp_up_end_rps')} req/s) has no one offered rate; import runs "
            "made with a fixed --request-rate",
            path,
            "key ramp_up_strategy",
        )
    cap = data.get("max_concurrency")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
        raise ImportFormatError(
            f"max_concurrency is {cap!r}, expected a positive integer or null",
            path,
            "key max_concurrency",
        )
    burstiness = _positive(data, "burstiness", path, default=None)
    return _Run(path, data, _positive(data, "request_rate", path, default=INF), cap, burstiness)


def _positive(data: dict[str, Any], key: str, path: Path, default: float | None) -> Any:
    """A positive number, ``"inf"`` / Infinity as infinity, absent as ``default`` (vLLM's
    default request rate is inf)."""
    if key not in data or data[key] is None:
        return default
    value = data[key]
    if isinstance(value, str) and value.strip().lower() in ("inf", "infinity"):
        return INF
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ImportFormatError(
            f'{key} is {value!r}, expected a positive number or "inf"', path, f"key {key}"
        )
    return float(value)


def _choose(runs: list[_Run], load: Load | None) -> tuple[Load, list[_Run], list[str]]:
    """Split the runs into concurrency levels and rate levels; return the kind imported, its
    runs and a warning naming each run left out. Every run is a rate level under ``--load
    rate`` (request_rate inf with a cap of C: all at once, C at a time); only the capped inf
    runs are concurrency levels."""
    finite_caps = {run.cap for run in runs if not math.isinf(run.rate)}
    shared_cap = next(iter(finite_caps)) if len(finite_caps) == 1 else None

    def open_loop(run: _Run) -> bool:
        # an inf run with the rate runs' own cap is the top of that rate sweep
        return not math.isinf(run.rate) or run.cap is None or run.cap == shared_cap

    rate = [run for run in runs if open_loop(run)]
    concurrency = [run for run in runs if not open_loop(run)]
    if load is None:
        if rate and concurrency:
            raise ImportFormatError(
                "these files mix closed-loop concurrency levels (request_rate inf with "
                f"--max-concurrency: {', '.join(r.label for r in concurrency)}) and open-loop "
                f"rate levels ({', '.join(r.label for r in rate)}); import them as separate "
                "runs, or pass --load rate to import every file as a rate level, or --load "
                "concurrency to import only the concurrency levels"
            )
        return ("rate", rate, []) if rate else ("concurrency", concurrency, [])
    if load == "rate":
        return "rate", runs, []
    if not concurrency:
        raise ImportFormatError(
            "--load concurrency: none of these files is a concurrency level (request_rate inf "
            f"with --max-concurrency C): {', '.join(r.label for r in runs)}"
        )
    left_out = [f"Left out (--load concurrency): {', '.join(r.label for r in rate)}."]
    return "concurrency", concurrency, left_out if rate else []


# ---------------------------------------------------------------------------------------------
# the two kinds of sweep


def _concurrency_sweep(
    runs: list[_Run], per_chunk: bool, has_starts: bool
) -> tuple[_Sweep, Workload]:
    sweep = _Sweep()
    seen: dict[int, Path] = {}
    origin = _origin(runs, with_queue=False) if has_starts else 0.0
    clock_ns = 0
    for run in sorted(runs, key=lambda r: r.cap or 0):
        concurrency = run.cap or 0
        if concurrency in seen:
            raise ImportFormatError(
                f"max_concurrency {concurrency} is also in {seen[concurrency]}; give one result "
                "per level",
                run.path,
            )
        seen[concurrency] = run.path
        sweep.summaries[str(concurrency)] = _level_summary(run.data)
        if not per_chunk:
            continue
        parsed = _parse(run)
        if has_starts:
            sends = [round((_start(r) - origin) * NS_PER_S) for r in parsed]
        else:
            sends = closed_loop_sends([r.duration_ns for r in parsed], concurrency, clock_ns)
        level = _traces(parsed, concurrency, f"c{concurrency}", sends, None)
        sweep.requests.extend(level)
        clock_ns = _after(level, clock_ns)
    if per_chunk:
        sweep.warnings.append(SPREAD_NOTE)
    if per_chunk and not has_starts:
        sweep.warnings.append(
            "This vllm bench serve version kept no start_times: requests were laid out as a "
            "closed loop of C streams; per-level duration and throughput are vLLM's own."
        )
    workload = Workload(
        concurrency_levels=sorted(seen),
        requests_per_level={str(run.cap): int(_count(run.data)) for run in runs},
        prompt_source=PROMPT_SOURCE,
    )
    return sweep, workload


def _rate_sweep(runs: list[_Run], per_chunk: bool, has_starts: bool) -> tuple[_Sweep, Workload]:
    sweep = _Sweep()
    seen: dict[float, Path] = {}
    for run in runs:
        if run.rate in seen:
            raise ImportFormatError(
                f"request_rate {rate_words(run.rate)} is also in {seen[run.rate]}; give one "
                "result per level",
                run.path,
            )
        seen[run.rate] = run.path
    keys = rate_keys(list(seen))
    random_arrivals = [run for run in runs if not math.isinf(run.rate)]
    same_burst, burstiness = (
        one_value([run.burstiness for run in random_arrivals]) if random_arrivals else (True, None)
    )
    same_cap, cap = one_value([run.cap for run in runs])
    if not same_burst:
        sweep.warnings.append(
            "burstiness differs between levels ("
            + ", ".join(
                f"{rate_words(r.rate)}: {'not given' if r.burstiness is None else r.burstiness}"
                for r in sorted(random_arrivals, key=lambda r: r.rate)
            )
            + "); kept per level in the tool's summaries"
        )
    if not same_cap:
        sweep.warnings.append(
            "max_concurrency differs between levels ("
            + ", ".join(
                f"{rate_words(r.rate)}: {cap_words(r.cap)}"
                for r in sorted(runs, key=lambda r: r.rate)
            )
            + "); kept per level in the tool's summaries"
        )
    origin = _origin(runs, with_queue=True) if has_starts else 0.0
    clock_ns = 0
    unscheduled: list[str] = []
    for run in sorted(runs, key=lambda r: r.rate):
        key = keys[run.rate]
        summary = _level_summary(run.data)
        if not same_burst and run.burstiness is not None:
            # as vLLM writes it; a summary number must be finite
            summary["burstiness"] = "inf" if math.isinf(run.burstiness) else run.burstiness
        if not same_cap:
            summary["max_concurrency"] = run.cap
        sweep.summaries[str(key)] = summary
        if not per_chunk:
            continue
        parsed = _parse(run)
        if has_starts:
            sends, scheduled = _measured_schedule(run, parsed, origin)
        else:
            sends, scheduled = _laid_out_schedule(run, parsed, clock_ns)
        if scheduled is None:
            unscheduled.append(rate_words(run.rate))
        elif (
            scheduled and math.isinf(run.rate) and max(scheduled) - min(scheduled) > TRACE_SPREAD_NS
        ):
            sweep.warnings.append(
                f"{run.path}: request_rate is inf, yet its requests were released over "
                f"{(max(scheduled) - min(scheduled)) / NS_PER_S:.1f} s (a timed_trace replay, "
                "which vLLM does not name in its result?): the level is labelled all at once; "
                "its scheduled times are vLLM's own."
            )
        level = _traces(parsed, key, f"r{key}", sends, scheduled)
        sweep.requests.extend(level)
        clock_ns = _after(level, clock_ns)
    if per_chunk:
        sweep.warnings.append(SPREAD_NOTE)
        sweep.warnings.extend(_schedule_notes(has_starts, unscheduled))
    arrival = arrival_of(burstiness) if same_burst and isinstance(burstiness, float) else None
    workload = rate_workload(
        {keys[run.rate]: run.rate for run in runs},
        {keys[run.rate]: int(_count(run.data)) for run in runs},
        arrival=arrival,
        burstiness=burstiness if same_burst and isinstance(burstiness, float) else None,
        max_concurrency=cap if same_cap and isinstance(cap, int) else None,
        prompt_source=PROMPT_SOURCE,
    )
    return sweep, workload


def _measured_schedule(
    run: _Run, parsed: list[_Request], origin: float
) -> tuple[list[int], list[int] | None]:
    """Send times from ``start_times``; scheduled times from ``queue_times`` (send less the
    wait for a slot), else from what the run's settings fix, else unknown (None)."""
    sends = [round((_start(r) - origin) * NS_PER_S) for r in parsed]
    if parsed and all(r.queue_s is not None for r in parsed):
        return sends, [round((_start(r) - (r.queue_s or 0.0) - origin) * NS_PER_S) for r in parsed]
    if run.cap is None:
        # nothing held the requests back: each was sent as the schedule released it
        return sends, list(sends)
    arrivals = known_arrivals_ns(len(parsed), run.rate, arrival_of(run.burstiness))
    if arrivals is None or not sends:
        return sends, None
    # The first request never waits for a slot: the schedule starts at its send. vLLM never
    # sends early, so a request sent before its rebuilt time (by the first one's own lateness,
    # microseconds) was due when it was sent.
    return sends, [min(sends[0] + a, send) for a, send in zip(arrivals, sends, strict=True)]


def _laid_out_schedule(
    run: _Run, parsed: list[_Request], clock_ns: int
) -> tuple[list[int], list[int] | None]:
    """No send times kept: requests arrive on the offered schedule (or, for random arrivals
    whose draws were not saved, evenly at the rate) and wait for a slot under a cap."""
    durations = [r.duration_ns for r in parsed]
    known = known_arrivals_ns(len(parsed), run.rate, arrival_of(run.burstiness))
    arrivals = known if known is not None else mean_arrivals_ns(len(parsed), run.rate)
    sends = [clock_ns + s for s in capped_sends_ns(arrivals, durations, run.cap)]
    scheduled = [clock_ns + a for a in known] if known is not None else None
    return sends, scheduled


def _schedule_notes(has_starts: bool, unscheduled: list[str]) -> list[str]:
    notes = []
    if not has_starts:
        notes.append(
            "This vllm bench serve version kept no start_times: each rate level's requests were "
            "laid out on its offered schedule and sent when one of the max_concurrency slots was "
            "free; per-level duration and throughput are vLLM's own."
        )
    if unscheduled and not has_starts:
        notes.append(
            f"{', '.join(unscheduled)}: vLLM drew random arrival gaps and did not save them, so "
            "these requests were laid out evenly at the offered rate and have no scheduled time "
            "(no client queue)."
        )
    elif unscheduled:
        notes.append(
            f"{', '.join(unscheduled)}: this vllm bench serve version kept no queue_times, so "
            "under --max-concurrency the random arrivals' scheduled times are unknown (no client "
            "queue)."
        )
    return notes


# ---------------------------------------------------------------------------------------------
# one level


def _origin(runs: list[_Run], *, with_queue: bool) -> float:
    """The earliest send of any run (or, ``with_queue``, release: a rate level's scheduled
    time, before the send where ``queue_times`` say a request waited for a slot)."""
    earliest: list[float] = []
    for run in runs:
        starts = run.data["start_times"]
        queues = (run.data.get("queue_times") or []) if with_queue else []
        if isinstance(starts, list):
            earliest.extend(s for s in starts if isinstance(s, int | float))
            earliest.extend(
                s - q
                for s, q in zip(starts, queues, strict=False)
                if isinstance(s, int | float) and isinstance(q, int | float)
            )
    return min(earliest, default=0.0)


def _start(request: _Request) -> float:
    return request.start_s if request.start_s is not None else 0.0


def _after(level: list[RequestTrace], clock_ns: int) -> int:
    """Where the next laid-out level starts: a second after this one's last end."""
    ends = [r.send_ns + (r.end_ns or 0) for r in level]
    return max(ends, default=clock_ns) + NS_PER_S


def _count(data: dict[str, Any]) -> float:
    completed = data.get("completed") or 0
    failed = data.get("failed") or 0
    return float(completed) + float(failed)


def _level_summary(data: dict[str, Any]) -> dict[str, float | int | str | None]:
    out: dict[str, float | int | str | None] = {}
    for name, key in (
        ("duration_s", "duration"),
        ("completed", "completed"),
        ("failed", "failed"),
        ("request_throughput_rps", "request_throughput"),
        ("output_throughput_tok_s", "output_throughput"),
        ("total_token_throughput_tok_s", "total_token_throughput"),
        ("goodput_rps", "request_goodput"),
    ):
        value = data.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[name] = value
    for metric, short in {**METRICS, "client_queue_ms": "client_queue_time"}.items():
        for stat, key in (("mean", f"mean_{short}_ms"), ("p50", f"median_{short}_ms")):
            if isinstance(data.get(key), int | float):
                out[f"{metric}_{stat}"] = data[key]
        for stat in PERCENTILE_STATS:
            key = f"{stat}_{short}_ms"
            if isinstance(data.get(key), int | float):
                out[f"{metric}_{stat}"] = data[key]
    return out


def _parse(run: _Run) -> list[_Request]:
    path, data = run.path, run.data
    ttfts = need_list(data, "ttfts", path, "top level", WHAT)
    itls = need_list(data, "itls", path, "top level", WHAT)
    input_lens = need_list(data, "input_lens", path, "top level", WHAT)
    output_lens = need_list(data, "output_lens", path, "top level", WHAT)
    errors = data.get("errors") or [""] * len(ttfts)
    lists: dict[str, list[Any]] = {
        "ttfts": ttfts,
        "itls": itls,
        "input_lens": input_lens,
        "output_lens": output_lens,
        "errors": errors,
    }
    for optional in ("latencies", "start_times", "queue_times"):
        if data.get(optional) is not None:
            lists[optional] = need_list(data, optional, path, "top level", WHAT)
    lengths = {key: len(value) for key, value in lists.items()}
    if len(set(lengths.values())) != 1:
        raise ImportFormatError(
            f"per-request lists differ in length ({lengths}); the file may be cut or edited", path
        )
    latencies = lists.get("latencies")
    starts = lists.get("start_times")
    queues = lists.get("queue_times")
    out = []
    for index, (ttft, gaps) in enumerate(zip(ttfts, itls, strict=True)):
        if not isinstance(ttft, int | float) or not isinstance(gaps, list):
            raise ImportFormatError(
                "expected a number in ttfts and a list in itls", path, f"request {index}"
            )
        error = str(errors[index] or "")
        offsets = [] if error else chunk_offsets_ns(ttft * MS_PER_S, [g * MS_PER_S for g in gaps])
        latency = latencies[index] if latencies is not None else None
        if isinstance(latency, int | float) and not isinstance(latency, bool):
            duration = round(latency * NS_PER_S)
        else:
            duration = offsets[-1] if offsets else 0
        start = _number(starts, index, path, "start_times")
        out.append(
            _Request(
                chunk_ns=offsets,
                duration_ns=duration,
                prompt_tokens=int(input_lens[index])
                if isinstance(input_lens[index], int | float)
                else None,
                output_tokens=int(output_lens[index])
                if isinstance(output_lens[index], int | float)
                else None,
                error=error,
                start_s=start,
                queue_s=_number(queues, index, path, "queue_times", required=False),
            )
        )
    return out


def _number(
    values: list[Any] | None, index: int, path: Path, key: str, required: bool = True
) -> float | None:
    if values is None:
        return None
    value = values[index]
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    if not required and value is None:
        return None
    raise ImportFormatError(f"{key}[{index}] is {value!r}, expected a number", path, f"key {key}")


def _traces(
    parsed: list[_Request],
    key: int,
    prefix: str,
    sends: list[int],
    scheduled: list[int] | None,
) -> list[RequestTrace]:
    traces = []
    for index, request in enumerate(parsed):
        failed = bool(request.error)
        out = request.output_tokens
        traces.append(
            RequestTrace(
                concurrency=key,
                request_id=f"{prefix}-{index:05d}",
                send_ns=sends[index],
                scheduled_ns=scheduled[index] if scheduled is not None else None,
                end_ns=request.duration_ns,
                chunk_ns=request.chunk_ns,
                chunk_tokens=spread_tokens(out or 0, len(request.chunk_ns))
                if request.chunk_ns
                else [],
                prompt_tokens=request.prompt_tokens,
                completion_tokens=out if not failed else None,
                status="error" if failed else "ok",
                error=RequestError(kind="other", message=request.error[:500]) if failed else None,
            )
        )
    return traces
