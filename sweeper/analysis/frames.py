"""Trace sets -> tidy pandas frames: per request, per gap (ITL) and per level.

Definitions (DESIGN.md "Metrics", the same words as ``vllm bench serve``; docs/metrics.md sets
them beside AIPerf's, GuideLLM's and LLMPerf's):

- TTFT: first content chunk arrival - send. E2EL: last content chunk arrival - send.
- TPOT (per request): (E2EL - TTFT) / (output tokens - 1), for requests with 2+ output tokens.
- ITL: every gap between consecutive content chunks, pooled over the measured requests of a level.
  A chunk carrying k > 1 tokens is one gap; ``tokens`` keeps k so a per-token view is possible.
- Output throughput: measured output tokens / (last measured end - first measured send), where
  "end" is the last content chunk (the stream end for a request that sent none), less the pauses
  (in sweeper's own recordings, spans with nothing in flight, longer than 1 s and 10x the
  level's median request: a level interrupted and resumed; :func:`running_time`).
- Generation speed: output tokens / E2EL; decode speed: (output tokens - 1) / (E2EL - TTFT).
- Percentiles: linear interpolation (numpy's default).

Warm-up requests are excluded; failed requests are counted, never timed. Output tokens come from
the server's usage (``completion_tokens``), falling back to the sum of per-chunk counts.

Imported trace sets may carry less than a recording: ``per_request`` fidelity has TTFT and E2EL
but no chunks (so no ITL); ``summary`` fidelity has no requests at all and its level rows come
from the tool's own numbers (``manifest.source.summaries``); ``send_times="reconstructed"`` means
the tool never said when requests were sent, so a level's duration (and the throughputs) come
from the tool's summary too. The column ``basis`` of the level frame says which.

Everything is computed with numpy over flat arrays read from the trace set's columns
(:class:`~sweeper.store.RequestColumns`: no Python object per chunk), and :func:`level_frame`
reads one level's gaps at a time instead of the whole run's gap frame: 10 M chunks summarize in
~1-2 s and under 400 MB (``benchmarks/trace_scale.py``, docs/trace-schema.md).
:func:`requests_to_frame` and :func:`traces_to_gap_frame` make the same frames from request
objects.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, pairwise

import numpy as np
import pandas as pd

from sweeper.analysis.slo import SLO, as_slos, requests_meeting
from sweeper.schema import (
    RECORDER_TOOL,
    LevelStatus,
    RequestTrace,
    RunManifest,
    Workload,
    fact_value,
)
from sweeper.store import RequestColumns, TraceSet
from sweeper.store.columns import chunk_gather
from sweeper.units import NS_PER_MS, NS_PER_S, finite

PERCENTILES = (50, 90, 95, 99)
STAT_NAMES = ("mean", "p50", "p90", "p95", "p99")
# The latencies by their names in the summary JSON (``levels[].ttft_ms.p99``) and CSV
# (``ttft_ms_p99``); the level frame names each statistic ``<metric>_<stat>_<unit>``
# (``ttft_p99_ms``), like every other column: :func:`latency_column`.
LATENCY_METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms")
REQUEST_COLUMNS = [
    "concurrency",
    "request_id",
    "phase",
    "status",
    "error_kind",
    "http_status",
    "send_s",
    "end_s",
    "ttft_ms",
    "e2el_ms",
    "tpot_ms",
    "prompt_tokens",
    "output_tokens",
    "chunks",
    "decode_tok_s",
    "gen_tok_s",
    # added after the first contract (never renamed or removed):
    "finish_reason",
    "multi_token_chunks",
    # open loop, multi-turn and varied lengths (NaN where a request has none):
    "scheduled_s",
    "client_queue_ms",
    "ttft_sched_ms",
    "e2el_sched_ms",
    "session",
    "turn",
    "asked_input_tokens",
    "asked_output_tokens",
]
TURN_COLUMNS = ["concurrency", "turn", "requests", "ttft_mean_ms", "ttft_p50_ms", "ttft_p90_ms"]

GAP_COLUMNS = ["concurrency", "request_id", "at_s", "itl_ms", "tokens", "gap_index"]

# Values a tool's own summary can supply (fidelity "summary", or reconstructed send times): the
# keys of ``Source.summaries[str(C)]`` on disk, named as in the summary CSV; SUMMARY_COLUMNS
# gives the level-frame column of each.
SUMMARY_KEYS = (
    "requests",
    "completed",
    "failed",
    "duration_s",
    "output_throughput_tok_s",
    "request_throughput_rps",
    "total_token_throughput_tok_s",
    *(f"{m}_{s}" for m in LATENCY_METRICS for s in STAT_NAMES),
    "prompt_tokens_mean",
    "output_tokens_mean",
)

BASIS_REQUESTS = "requests"
BASIS_TOOL_DURATION = "requests+tool_duration"
BASIS_TOOL_SUMMARY = "tool_summary"

_NAN = float("nan")


def latency_column(metric: str, stat: str) -> str:
    """The level-frame column of one latency statistic: ``("ttft_ms", "p99")`` -> ``ttft_p99_ms``."""
    name, unit = metric.rsplit("_", 1)
    return f"{name}_{stat}_{unit}"


SUMMARY_COLUMNS = {
    **{key: key for key in SUMMARY_KEYS},
    **{f"{m}_{s}": latency_column(m, s) for m in LATENCY_METRICS for s in STAT_NAMES},
}


def stats(values: np.ndarray) -> dict[str, float]:
    """Mean and p50 / p90 / p95 / p99 (linear interpolation) of the finite values; NaN if none."""
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return dict.fromkeys(STAT_NAMES, _NAN)
    out = {"mean": float(values.mean())}
    for p, q in zip(PERCENTILES, np.percentile(values, PERCENTILES), strict=True):
        out[f"p{p}"] = float(q)
    return out


def request_frame(ts: TraceSet, *, include_warmup: bool = False) -> pd.DataFrame:
    """One row per request. Latencies in ms; ``send_s`` / ``end_s`` in s since the run's origin.

    Read from the trace set's columns (:class:`~sweeper.store.RequestColumns`): no Python object
    per chunk; the same frame as :func:`requests_to_frame` of the request objects."""
    cols = ts.columns
    keep = np.ones(len(cols), dtype=bool) if include_warmup else cols.is_("phase", "measured")
    return columns_to_frame(cols, np.flatnonzero(keep))


def columns_to_frame(cols: RequestColumns, rows: np.ndarray) -> pd.DataFrame:
    """The request frame of the requests at ``rows`` of ``cols`` (see :func:`request_frame`)."""
    n = int(rows.size)
    if n == 0:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in REQUEST_COLUMNS})
    counts = cols.chunk_counts
    starts = cols.chunk_start[:-1]
    chunks = counts[rows]
    has = chunks > 0
    first_at = starts[rows]
    last_at = first_at + chunks - 1
    size = cols.chunks
    if size:
        first_ns = cols.chunk_ns[np.clip(first_at, 0, size - 1)].astype(float)
        last_ns = cols.chunk_ns[np.clip(last_at, 0, size - 1)].astype(float)
    else:
        first_ns = last_ns = np.zeros(n)
    first_chunk = np.where(has, first_ns, cols.optional("ttft_ns")[rows])
    last_chunk = np.where(has, last_ns, cols.optional("e2el_ns")[rows])
    chunk_out = cols.token_sum[rows].astype(float)
    multi = cols.multi_chunks[rows]
    usage_out = cols.optional("completion_tokens")[rows]
    text = cols.text
    picks = rows.tolist()
    status = [text["status"][i] for i in picks]
    errors = [text["error"][i] for i in picks]
    return _request_table(
        concurrency=cols.concurrency[rows].astype(np.int64),
        request_id=[text["request_id"][i] for i in picks],
        phase=[text["phase"][i] for i in picks],
        status=status,
        error_kind=[e["kind"] if e else None for e in errors],
        http_status=[e.get("http_status") if e else None for e in errors],
        finish_reason=[text["finish_reason"][i] for i in picks],
        chunks=chunks.astype(np.int64),
        first_chunk=first_chunk,
        last_chunk=last_chunk,
        usage_out=usage_out,
        chunk_out=chunk_out,
        multi=multi.astype(np.int64),
        prompt_tokens=cols.optional("prompt_tokens")[rows],
        end_ns=cols.optional("end_ns")[rows],
        send_ns=cols.send_ns[rows].astype(float),
        ok=np.fromiter((v == "ok" for v in status), dtype=bool, count=n),
        scheduled_ns=cols.optional("scheduled_ns")[rows],
        session=cols.optional("session")[rows],
        turn=cols.optional("turn")[rows],
        asked_input=cols.optional("asked_input_tokens")[rows],
        asked_output=cols.optional("asked_output_tokens")[rows],
    )


def requests_to_frame(rows: Sequence[RequestTrace]) -> pd.DataFrame:
    """The request frame of any list of traces (see :func:`request_frame`): one pass per
    attribute over the objects, then numpy on flat arrays (how sweeper always built it)."""
    n = len(rows)
    if n == 0:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in REQUEST_COLUMNS})
    errors = [r.error for r in rows]
    return _request_table(
        concurrency=np.fromiter((r.concurrency for r in rows), dtype=np.int64, count=n),
        request_id=[r.request_id for r in rows],
        phase=[r.phase for r in rows],
        status=[r.status for r in rows],
        error_kind=[e.kind if e else None for e in errors],
        http_status=[e.http_status if e else None for e in errors],
        finish_reason=[r.finish_reason for r in rows],
        chunks=np.fromiter((len(r.chunk_ns) for r in rows), dtype=np.int64, count=n),
        first_chunk=np.fromiter(
            (r.chunk_ns[0] if r.chunk_ns else _or_nan(r.ttft_ns) for r in rows),
            dtype=float,
            count=n,
        ),
        last_chunk=np.fromiter(
            (r.chunk_ns[-1] if r.chunk_ns else _or_nan(r.e2el_ns) for r in rows),
            dtype=float,
            count=n,
        ),
        usage_out=np.fromiter((_or_nan(r.completion_tokens) for r in rows), dtype=float, count=n),
        chunk_out=np.fromiter((sum(r.chunk_tokens) for r in rows), dtype=float, count=n),
        multi=np.fromiter(
            (sum(1 for k in r.chunk_tokens if k > 1) for r in rows), dtype=np.int64, count=n
        ),
        prompt_tokens=np.fromiter((_or_nan(r.prompt_tokens) for r in rows), dtype=float, count=n),
        end_ns=np.fromiter((_or_nan(r.end_ns) for r in rows), dtype=float, count=n),
        send_ns=np.fromiter((r.send_ns for r in rows), dtype=float, count=n),
        ok=np.fromiter((r.status == "ok" for r in rows), dtype=bool, count=n),
        scheduled_ns=_optional([r.scheduled_ns for r in rows]),
        session=_optional([r.session for r in rows]),
        turn=_optional([r.turn for r in rows]),
        asked_input=_optional([r.asked_input_tokens for r in rows]),
        asked_output=_optional([r.asked_output_tokens for r in rows]),
    )


def _request_table(
    *,
    concurrency: np.ndarray,
    request_id: list[str],
    phase: list[str],
    status: list[str],
    error_kind: list[str | None],
    http_status: list[int | None],
    finish_reason: list[str | None],
    chunks: np.ndarray,
    first_chunk: np.ndarray,
    last_chunk: np.ndarray,
    usage_out: np.ndarray,
    chunk_out: np.ndarray,
    multi: np.ndarray,
    prompt_tokens: np.ndarray,
    end_ns: np.ndarray,
    send_ns: np.ndarray,
    ok: np.ndarray,
    scheduled_ns: np.ndarray,
    session: np.ndarray,
    turn: np.ndarray,
    asked_input: np.ndarray,
    asked_output: np.ndarray,
) -> pd.DataFrame:
    """The request frame from each request's raw facts (floats: NaN where absent)."""
    out_tokens = np.where(np.isnan(usage_out) & (chunks > 0), chunk_out, usage_out)
    # Failed requests are counted, never timed.
    ttft_ns = np.where(ok, first_chunk, _NAN)
    e2el_ns = np.where(ok, last_chunk, _NAN)
    # A request's end on the run clock: its last content chunk, else its stream end.
    end_rel = np.where(np.isnan(last_chunk), end_ns, last_chunk)
    decode_ns = e2el_ns - ttft_ns
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot_ms = np.where(out_tokens > 1, decode_ns / (out_tokens - 1) / NS_PER_MS, _NAN)
        decode_tok_s = np.where(
            (out_tokens > 1) & (decode_ns > 0), (out_tokens - 1) / (decode_ns / NS_PER_S), _NAN
        )
        gen_tok_s = np.where(e2el_ns > 0, out_tokens / (e2el_ns / NS_PER_S), _NAN)
    # Open loop: the user waited from when the schedule said to send, not from the actual send.
    queue_ms = (send_ns - scheduled_ns) / NS_PER_MS
    return pd.DataFrame(
        {
            "concurrency": concurrency,
            "request_id": request_id,
            "phase": phase,
            "status": status,
            "error_kind": error_kind,
            "http_status": http_status,
            "send_s": send_ns / NS_PER_S,
            "end_s": (send_ns + end_rel) / NS_PER_S,
            "ttft_ms": ttft_ns / NS_PER_MS,
            "e2el_ms": e2el_ns / NS_PER_MS,
            "tpot_ms": tpot_ms,
            "prompt_tokens": prompt_tokens,
            "output_tokens": out_tokens,
            "chunks": chunks,
            "decode_tok_s": decode_tok_s,
            "gen_tok_s": gen_tok_s,
            "finish_reason": finish_reason,
            "multi_token_chunks": multi,
            "scheduled_s": scheduled_ns / NS_PER_S,
            "client_queue_ms": queue_ms,
            "ttft_sched_ms": queue_ms + ttft_ns / NS_PER_MS,
            "e2el_sched_ms": queue_ms + e2el_ns / NS_PER_MS,
            "session": session,
            "turn": turn,
            "asked_input_tokens": asked_input,
            "asked_output_tokens": asked_output,
        }
    )


def _or_nan(value: int | None) -> float:
    return _NAN if value is None else float(value)


def _optional(values: list[int | None]) -> np.ndarray:
    """An optional field of every request as floats, NaN where absent. Most runs set a field on
    every request or on none (a closed loop has no schedule): both cost one C-speed pass."""
    missing = values.count(None)
    if missing == len(values):
        return np.full(len(values), _NAN)
    if missing == 0:
        return np.asarray(values, dtype=float)
    return np.fromiter((_or_nan(v) for v in values), dtype=float, count=len(values))


def gap_frame(ts: TraceSet) -> pd.DataFrame:
    """One row per gap between consecutive content chunks of a measured, successful request.

    ``at_s`` is the arrival of the chunk that ends the gap (s since the run's origin),
    ``tokens`` the number of tokens that chunk carried, ``gap_index`` its place in the request
    (1 = the gap after the first chunk). Read from the trace set's columns; the same frame as
    :func:`traces_to_gap_frame` of the request objects.
    """
    cols = ts.columns
    rows = np.flatnonzero(_timed(cols))
    if rows.size == 0:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in GAP_COLUMNS})
    gather = chunk_gather(cols.chunk_start[:-1], cols.chunk_counts, rows)
    return _gap_table(
        cols.chunk_counts[rows],
        cols.chunk_ns[gather],
        cols.chunk_tokens[gather].astype(np.int64),
        cols.send_ns[rows],
        cols.concurrency[rows].astype(np.int64),
        np.array([cols.text["request_id"][i] for i in rows.tolist()], dtype=object),
    )


def traces_to_gap_frame(rows: Sequence[RequestTrace]) -> pd.DataFrame:
    """The gap frame of a list of request objects (see :func:`gap_frame`)."""
    rows = [r for r in rows if r.phase == "measured" and r.status == "ok" and len(r.chunk_ns) > 1]
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in GAP_COLUMNS})
    lengths = np.fromiter((len(r.chunk_ns) for r in rows), dtype=np.int64, count=len(rows))
    total = int(lengths.sum())
    # chain.from_iterable walks the per-request lists in C: no Python frame per chunk.
    offsets = np.fromiter(chain.from_iterable(r.chunk_ns for r in rows), np.int64, total)
    tokens = np.fromiter(chain.from_iterable(r.chunk_tokens for r in rows), np.int64, total)
    return _gap_table(
        lengths,
        offsets,
        tokens,
        np.fromiter((r.send_ns for r in rows), dtype=np.int64, count=len(rows)),
        np.fromiter((r.concurrency for r in rows), dtype=np.int64, count=len(rows)),
        np.array([r.request_id for r in rows], dtype=object),
    )


def _timed(cols: RequestColumns) -> np.ndarray:
    """Requests whose gaps count: measured, successful, with two chunks or more."""
    measured = cols.is_("phase", "measured")
    return measured & cols.is_("status", "ok") & (cols.chunk_counts > 1)


def _gap_table(
    lengths: np.ndarray,
    offsets: np.ndarray,
    tokens: np.ndarray,
    send: np.ndarray,
    conc: np.ndarray,
    rid: np.ndarray,
) -> pd.DataFrame:
    """The gap frame of requests given as their chunk counts (``lengths``), their chunks one
    request after another (``offsets``, ``tokens``) and one entry each (``send``...)."""
    owner = np.repeat(np.arange(lengths.size), lengths)
    starts = np.cumsum(lengths) - lengths
    position = np.arange(offsets.size) - starts[owner]
    keep = position > 0  # every chunk but a request's first ends a gap
    diffs = np.diff(offsets, prepend=0)
    gap_owner = owner[keep]
    return pd.DataFrame(
        {
            "concurrency": conc[gap_owner],
            "request_id": rid[gap_owner],
            "at_s": (send[gap_owner] + offsets[keep]) / NS_PER_S,
            "itl_ms": diffs[keep] / NS_PER_MS,
            "tokens": tokens[keep],
            "gap_index": position[keep],
        }
    )


@dataclass(frozen=True)
class LevelGaps:
    """The gaps of one level's timed requests (see :func:`gap_frame`), in the frame's order."""

    itl_ms: np.ndarray
    tokens: np.ndarray
    request_id: np.ndarray


def level_gaps(cols: RequestColumns, level: int, timed: np.ndarray | None = None) -> LevelGaps:
    """One level's gaps straight from the columns, without the whole run's gap frame: the
    rows of :func:`gap_frame` at that level (a level at a time: memory for its chunks only)."""
    timed = _timed(cols) if timed is None else timed
    rows = np.flatnonzero(timed & (cols.concurrency == level))
    if rows.size == 0:
        return LevelGaps(np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=object))
    counts = cols.chunk_counts
    gather = chunk_gather(cols.chunk_start[:-1], counts, rows)
    offsets = cols.chunk_ns[gather]
    lengths = counts[rows]
    first = np.cumsum(lengths) - lengths  # each request's first chunk: it ends no gap
    keep = np.ones(offsets.size, dtype=bool)
    keep[first] = False
    diffs = np.diff(offsets, prepend=0)
    rid = np.array([cols.text["request_id"][i] for i in rows.tolist()], dtype=object)
    return LevelGaps(
        itl_ms=diffs[keep] / NS_PER_MS,
        tokens=cols.chunk_tokens[gather][keep].astype(np.int64),
        request_id=np.repeat(rid, lengths - 1),
    )


def lengths_vary(workload: Workload) -> str | None:
    """Why one request's tokens are not the workload's asked lengths, or None where they are:
    ``"turns"`` (a conversation's later turns carry its whole history), ``"varied"`` (lengths
    drawn from a range, a dataset or a replayed trace, or not recorded)."""
    if (workload.turns or 0) > 1:
        return "turns"
    if (
        workload.input_len is None
        or (workload.input_len_range or 0) > 0
        or (workload.output_len_range or 0) > 0
        or (workload.dataset is not None and workload.dataset != "random")
        or workload.arrival == "trace"
    ):
        return "varied"
    return None


def request_tokens(workload: Workload, levels: pd.DataFrame) -> tuple[float | None, float | None]:
    """Input and output tokens of one request: as the workload asked where every request asks
    the same (:func:`lengths_vary` is None), else the mean over the levels of what was measured
    (a level's ``prompt_tokens_mean`` / ``output_tokens_mean``), the asked length only where
    nothing was measured. The mean, not the largest: the KV pool holds many requests at once, so
    what fits is set by the typical one. None where neither is known."""

    def measured(column: str) -> float | None:
        if column not in levels.columns:
            return None
        value = pd.to_numeric(levels[column], errors="coerce").mean()
        return float(value) if finite(value) and value > 0 else None

    asked_in = float(workload.input_len) if workload.input_len else None
    asked_out = float(workload.output_len) if workload.output_len else None
    vary = lengths_vary(workload) is not None
    inp = measured("prompt_tokens_mean") if vary or asked_in is None else None
    out = measured("output_tokens_mean") if vary or asked_out is None else None
    return (asked_in if inp is None else inp), (asked_out if out is None else out)


def gpus_of(ts: TraceSet | RunManifest) -> int:
    """TP x PP x DP from the manifest (or the GPU count), at least 1."""
    manifest = ts.manifest if isinstance(ts, TraceSet) else ts
    cfg = manifest.server.config
    product = 1
    for f in (cfg.tensor_parallel_size, cfg.pipeline_parallel_size, cfg.data_parallel_size):
        v = fact_value(f)
        if isinstance(v, int | float) and not isinstance(v, bool) and v >= 1:
            product *= int(v)
    if product == 1:
        count = fact_value(manifest.hardware.gpu_count)
        if isinstance(count, int | float) and not isinstance(count, bool) and count >= 1:
            product = int(count)
    return product


def level_frame(
    ts: TraceSet,
    *,
    slos: Sequence[SLO] | Mapping[str, float] | None = None,
    requests: pd.DataFrame | None = None,
    gaps: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per level (its key: C, or a rate level's position), sorted by key.

    Columns: concurrency (the key), requests, completed, failed, duration_s,
    output_throughput_tok_s, request_throughput_rps, total_token_throughput_tok_s,
    output_throughput_per_gpu_tok_s, ``<metric>_<stat>_ms`` for metric in ttft / tpot / itl /
    e2el and stat in mean / p50 / p90 / p95 / p99 (``ttft_p99_ms``), decode_mean_tok_s /
    decode_p50_tok_s, gen_mean_tok_s / gen_p50_tok_s, prompt_tokens_mean,
    output_tokens_mean, multi_token_gap_share.
    Added since: cancelled, output_tokens_total, prompt_tokens_total, gaps, basis (``requests``,
    ``requests+tool_duration`` or ``tool_summary``: where the row's numbers come from), and
    output_len_mismatches / input_len_mismatches (completed requests whose server-reported token
    count differs from what was asked: the request's own asked length where lengths vary, else
    the workload's fixed one; NaN when nothing was asked),
    paused_s (spans with no request in flight left out of duration_s, in sweeper's own
    closed-loop recordings, and the stops between a resumed open-loop level's attempts; NaN
    for other tools' and for open loops recorded in one go: :func:`running_time`),
    inflight_mean (the time-weighted mean of requests in flight over duration_s) and
    inflight_max (NaN for both where the send times are not the recording's own).
    Open loop: offered_rate_rps (the level's rate; inf: all at once; NaN for concurrency
    levels), achieved_rate_rps ((measured requests - 1) / (last send - first send), every level;
    NaN under 2 requests or where send times were reconstructed), ``client_queue_{mean,p50,p90,
    p99}_ms`` (send - scheduled), ``ttft_sched_<stat>_ms`` and ``e2el_sched_<stat>_ms``
    (TTFT / E2EL from the schedule; NaN for all of these in a closed loop).
    With ``slos`` (:class:`~sweeper.analysis.slo.SLO` terms, or the older mapping
    ``{"ttft_ms": 500}`` of per-request bounds): goodput_rps (completed requests per second of
    duration_s meeting every term, :func:`~sweeper.analysis.slo.requests_meeting`) and
    slo_met_share (those requests / the level's measured requests, failures included); NaN for
    both where a term cannot be judged (an itl term on a level without chunk times).
    """
    req = request_frame(ts) if requests is None else requests
    terms = as_slos(slos)
    source = ts.manifest.source
    asked = ts.manifest.workload
    n_gpu = gpus_of(ts)
    rows: list[dict[str, float | int | str]] = []
    per_level = _gaps_by_level(ts, gaps)
    for conc, grp in req.groupby("concurrency", sort=True):
        level = int(conc)
        found = per_level(level)
        row = _level_row(
            level,
            grp,
            found.itl_ms,
            found.tokens,
            tool=source.summaries.get(str(level), {}),
            tool_duration=source.send_times == "reconstructed",
            # An open loop idles between arrivals by design: no span of it is a pause.
            closed_loop=source.tool == RECORDER_TOOL and not asked.open_loop,
            breaks=attempt_breaks(ts.manifest.level(level)),
        )
        ok = grp[grp["status"] == "ok"]
        row["output_len_mismatches"] = _mismatches(
            ok["output_tokens"], _asked(ok, "asked_output_tokens", asked.output_len)
        )
        row["input_len_mismatches"] = _mismatches(
            ok["prompt_tokens"], _asked(ok, "asked_input_tokens", asked.input_len)
        )
        row.update(
            _schedule_columns(
                grp,
                ok,
                sends_known=source.send_times != "reconstructed",
                breaks=attempt_breaks(ts.manifest.level(level)),
            )
        )
        if terms:
            row.update(
                _goodput_columns(
                    grp, terms, found.request_id, found.itl_ms, float(row["duration_s"])
                )
            )
        rows.append(row)
    seen = {int(r["concurrency"]) for r in rows}
    for key, summary in source.summaries.items():
        if int(key) not in seen:
            rows.append(_summary_row(int(key), summary))
    if not rows:
        return pd.DataFrame(columns=["concurrency", "requests", "completed", "failed"])
    frame = pd.DataFrame(rows).sort_values("concurrency", kind="stable").reset_index(drop=True)
    frame["output_throughput_per_gpu_tok_s"] = frame["output_throughput_tok_s"] / n_gpu
    for column in (*SCHEDULE_COLUMNS, *(GOODPUT_COLUMNS if terms else ())):
        if column not in frame.columns:  # every row from a tool's summary
            frame[column] = _NAN
    rates = [asked.offered_rate(int(k)) for k in frame["concurrency"]]
    frame["offered_rate_rps"] = [_NAN if r is None else float(r) for r in rates]
    return frame


def _gaps_by_level(ts: TraceSet, gaps: pd.DataFrame | None) -> Callable[[int], LevelGaps]:
    """Each level's gaps: cut from ``gaps`` when given (a gap frame already made), else read
    from the columns one level at a time (no gap frame of the whole run in memory)."""
    if gaps is None:
        cols = ts.columns
        timed = _timed(cols)
        return lambda level: level_gaps(cols, level, timed)
    conc = gaps["concurrency"].to_numpy()
    itl = gaps["itl_ms"].to_numpy(dtype=float)
    tokens = gaps["tokens"].to_numpy()
    rid = gaps["request_id"].to_numpy()

    def cut(level: int) -> LevelGaps:
        in_level = conc == level
        return LevelGaps(itl[in_level], tokens[in_level], rid[in_level])

    return cut


QUEUE_STATS = ("mean", "p50", "p90", "p99")
SCHEDULE_COLUMNS = (
    "offered_rate_rps",
    "achieved_rate_rps",
    *(f"client_queue_{s}_ms" for s in QUEUE_STATS),
    *(latency_column("ttft_sched_ms", s) for s in STAT_NAMES),
    *(latency_column("e2el_sched_ms", s) for s in STAT_NAMES),
)
GOODPUT_COLUMNS = ("goodput_rps", "slo_met_share")


def _schedule_columns(
    grp: pd.DataFrame,
    ok: pd.DataFrame,
    *,
    sends_known: bool,
    breaks: Sequence[tuple[float, float]] = (),
) -> dict[str, float]:
    """The achieved rate of a level and, in an open loop, its client queue and the latencies
    from the schedule (NaN in a closed loop: no request has a scheduled time). The spans
    between the level's attempts (``breaks``: the recorder stopped) are not sending time."""
    sends = grp["send_s"].to_numpy(dtype=float)
    sends = sends[np.isfinite(sends)]
    span = float(sends.max() - sends.min()) if sends.size >= 2 else 0.0
    if span > 0:
        first, last = float(sends.min()), float(sends.max())
        span -= sum(max(0.0, min(b, last) - max(a, first)) for a, b in breaks)
    row = {"achieved_rate_rps": (sends.size - 1) / span if sends_known and span > 0 else _NAN}
    queue = stats(_values(grp, "client_queue_ms"))
    for stat in QUEUE_STATS:
        row[f"client_queue_{stat}_ms"] = queue[stat]
    for metric in ("ttft_sched_ms", "e2el_sched_ms"):
        for stat, value in stats(_values(ok, metric)).items():
            row[latency_column(metric, stat)] = value
    return row


def _goodput_columns(
    grp: pd.DataFrame,
    terms: Sequence[SLO],
    gap_rid: np.ndarray,
    gap_itl: np.ndarray,
    duration: float,
) -> dict[str, float]:
    """goodput_rps and slo_met_share of one level (see :func:`level_frame`)."""
    owner = None
    if any(t.metric == "itl" for t in terms):
        if gap_itl.size == 0 and (grp["chunks"].to_numpy() == 0).any():
            return dict.fromkeys(GOODPUT_COLUMNS, _NAN)  # no chunk times: ITL unknown
        row_of = pd.Series(np.arange(len(grp)), index=grp["request_id"].to_numpy())
        row_of = row_of[~row_of.index.duplicated()]
        owner = row_of.reindex(gap_rid).fillna(-1).to_numpy(dtype=np.int64)
    good = int(requests_meeting(grp, terms, gap_owner=owner, gap_itl_ms=gap_itl).sum())
    return {
        "goodput_rps": good / duration if finite(duration) and duration > 0 else _NAN,
        "slo_met_share": good / len(grp) if len(grp) else _NAN,
    }


def _values(frame: pd.DataFrame, column: str) -> np.ndarray:
    if column not in frame.columns:  # a request frame built before the column existed
        return np.zeros(0)
    return frame[column].to_numpy(dtype=float)


def _asked(ok: pd.DataFrame, column: str, fixed: int | None) -> np.ndarray:
    """What each completed request asked for: its own length where lengths vary, else the
    workload's fixed one (NaN where neither)."""
    own = _values(ok, column)
    if own.size != len(ok):
        own = np.full(len(ok), _NAN)
    return np.where(np.isfinite(own), own, _NAN if fixed is None else float(fixed))


def turn_frame(requests: pd.DataFrame) -> pd.DataFrame:
    """TTFT by turn of a multi-turn run: one row per (level, turn) with the requests of that
    turn and the mean / p50 / p90 TTFT (from the send: what the server's prefix cache changes)
    of the completed ones. ``requests`` is :func:`request_frame`; empty without turns."""
    if "turn" not in requests.columns:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in TURN_COLUMNS})
    with_turn = requests[np.isfinite(requests["turn"].to_numpy(dtype=float))]
    if with_turn.empty:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in TURN_COLUMNS})
    rows = []
    for (conc, turn), grp in with_turn.groupby(["concurrency", "turn"], sort=True):
        ttft = stats(grp.loc[grp["status"] == "ok", "ttft_ms"].to_numpy(dtype=float))
        rows.append(
            {
                "concurrency": int(conc),
                "turn": int(turn),
                "requests": len(grp),
                "ttft_mean_ms": ttft["mean"],
                "ttft_p50_ms": ttft["p50"],
                "ttft_p90_ms": ttft["p90"],
            }
        )
    return pd.DataFrame(rows, columns=TURN_COLUMNS)


# A span with no request of a level in flight is a pause (an interrupted level resumed later, a
# stopped client) when it is longer than both of these; it is left out of the level's duration.
PAUSE_MIN_S = 1.0
PAUSE_MEDIAN_FACTOR = 10.0


@dataclass(frozen=True)
class RunningTime:
    """How a level's requests filled its time: the pauses left out of its duration, the time
    requests were in flight (summed over requests) and the most in flight at once."""

    paused_s: float
    busy_s: float
    inflight_max: int


def attempt_breaks(level: LevelStatus | None) -> list[tuple[float, float]]:
    """The spans (s from the origin) between the attempts a level was recorded in: it stopped
    (Ctrl-C, a crash) at the end of one and went on at the start of the next (``--resume``)."""
    attempts = sorted(level.attempts, key=lambda a: a.start_ns) if level is not None else []
    return [
        (a.end_ns / NS_PER_S, b.start_ns / NS_PER_S)
        for a, b in pairwise(attempts)
        if a.end_ns is not None and b.start_ns > a.end_ns
    ]


def running_time(
    sends: np.ndarray,
    ends: np.ndarray,
    *,
    pauses: bool = True,
    breaks: Sequence[tuple[float, float]] = (),
) -> RunningTime:
    """The pauses and the in-flight concurrency of one level's requests (send to end, in s).

    A pause is a span where no request was in flight, longer than :data:`PAUSE_MIN_S` and than
    :data:`PAUSE_MEDIAN_FACTOR` times the level's median request duration. Only ``sweeper
    record``'s closed loops are searched for pauses (``pauses``): each stream sends its next
    request as soon as the previous one ends, so nothing in flight means the recorder stopped
    (an interrupted level, resumed later). Where the manifest says when the recorder stopped
    and went on (``breaks``: :func:`attempt_breaks`), the idle time inside those spans is a
    pause however short, in an open loop too (its idle time between arrivals is the schedule,
    but not the recorder's stop between attempts). Another tool's idle time (a trace replayed with its users' delays) is
    its workload, and stays in the duration as the tool counted it."""
    valid = np.isfinite(sends) & np.isfinite(ends)
    start, end = sends[valid], np.maximum(ends[valid], sends[valid])
    if start.size == 0:
        return RunningTime(0.0, 0.0, 0)
    order = np.argsort(start, kind="stable")
    start, end = start[order], end[order]
    reach = np.maximum.accumulate(end)  # the latest end among requests sent so far
    idle = start[1:] - reach[:-1]
    bound = max(PAUSE_MIN_S, PAUSE_MEDIAN_FACTOR * float(np.median(end - start)))
    paused = 0.0
    if idle.size and (pauses or breaks):
        # Only closed loops are searched for long idle spans; the breaks count in every loop.
        long = idle > bound if pauses else np.zeros(idle.size, dtype=bool)
        paused = float(idle[long].sum())
        for first, last in breaks:  # the short idle spans, as far as they lie in a break
            overlap = np.minimum(start[1:], last) - np.maximum(reach[:-1], first)
            paused += float(np.clip(overlap[~long & (idle > 0)], 0, None).sum())
    # Ends sort before sends at the same time: a stream's next request does not overlap its last.
    times = np.concatenate([end, start])
    steps = np.concatenate([np.full(end.size, -1), np.ones(start.size, dtype=np.int64)])
    at = np.lexsort((steps, times))
    inflight = int(np.cumsum(steps[at]).max())
    return RunningTime(paused, float((end - start).sum()), inflight)


def _mismatches(tokens: pd.Series, asked: np.ndarray) -> float:
    """Completed requests whose server-reported token count differs from what was asked
    (``asked``: per request, NaN where nothing was asked; NaN when no request can be compared:
    nothing asked, or the server reported no usage)."""
    values = tokens.to_numpy(dtype=float)
    both = np.isfinite(values) & np.isfinite(asked)
    if not both.any():
        return _NAN
    return float((values[both] != asked[both]).sum())


def _level_row(
    level: int,
    grp: pd.DataFrame,
    itl_ms: np.ndarray,
    gap_tokens: np.ndarray,
    *,
    tool: Mapping[str, float | int | str | None],
    tool_duration: bool,
    closed_loop: bool,
    breaks: Sequence[tuple[float, float]] = (),
) -> dict[str, float | int | str]:
    ok_mask = (grp["status"] == "ok").to_numpy()
    ok = grp[ok_mask]
    basis = BASIS_REQUESTS
    tool_value = tool.get("duration_s")
    if tool_duration and isinstance(tool_value, int | float):
        duration = float(tool_value)
        basis = BASIS_TOOL_DURATION
    else:
        start = float(grp["send_s"].min())
        ends = grp["end_s"].to_numpy(dtype=float)
        end = float(np.nanmax(ends)) if np.isfinite(ends).any() else _NAN
        duration = end - start if np.isfinite(end) else _NAN
    sends = grp["send_s"].to_numpy(dtype=float)
    ends_s = grp["end_s"].to_numpy(dtype=float)
    running = running_time(sends, ends_s, pauses=closed_loop, breaks=breaks)
    if running.paused_s > 0:
        duration -= running.paused_s
    out_tok = float(np.nansum(ok["output_tokens"].to_numpy(dtype=float)))
    in_tok = float(np.nansum(ok["prompt_tokens"].to_numpy(dtype=float)))
    has_time = duration > 0
    row: dict[str, float | int | str] = {
        "concurrency": level,
        "requests": len(grp),
        "completed": int(ok_mask.sum()),
        "failed": int((~ok_mask).sum()),
        "cancelled": int((grp["status"] == "cancelled").sum()),
        "duration_s": duration,
        "output_throughput_tok_s": out_tok / duration if has_time else _NAN,
        "request_throughput_rps": ok_mask.sum() / duration if has_time else _NAN,
        "total_token_throughput_tok_s": (out_tok + in_tok) / duration if has_time else _NAN,
        "output_tokens_total": out_tok,
        "prompt_tokens_total": in_tok,
        "paused_s": running.paused_s if closed_loop or breaks else _NAN,
        "inflight_mean": running.busy_s / duration
        if has_time and basis == BASIS_REQUESTS
        else _NAN,
        "inflight_max": float(running.inflight_max) if basis == BASIS_REQUESTS else _NAN,
    }
    for metric in ("ttft_ms", "tpot_ms", "e2el_ms"):
        for stat, value in stats(ok[metric].to_numpy(dtype=float)).items():
            row[latency_column(metric, stat)] = value
    itl_stats = stats(itl_ms)
    for stat, value in itl_stats.items():
        row[latency_column("itl_ms", stat)] = value
    row["gaps"] = int(itl_ms.size)
    row["multi_token_gap_share"] = float((gap_tokens > 1).mean()) if gap_tokens.size else _NAN
    # Per token: a gap ending in a chunk of k tokens is k tokens' wait of gap / k each (a server
    # streaming every N tokens sends ~N a chunk: its inter-chunk latency is N tokens' worth).
    tokens = np.maximum(np.nan_to_num(gap_tokens.astype(float), nan=1.0), 1.0)
    row["tokens_per_chunk_mean"] = float(tokens.mean()) if tokens.size else _NAN
    if tokens.size and bool((tokens == 1.0).all()):
        per_token = itl_stats  # x / 1 is x: the same numbers, so the same statistics
    else:
        per_token = stats(np.repeat(itl_ms / tokens, tokens.astype(int)))
    for stat, value in per_token.items():
        row[latency_column("token_itl_ms", stat)] = value
    for speed in ("decode", "gen"):
        s = stats(ok[f"{speed}_tok_s"].to_numpy(dtype=float))
        row[f"{speed}_mean_tok_s"] = s["mean"]
        row[f"{speed}_p50_tok_s"] = s["p50"]
    row["prompt_tokens_mean"] = float(ok["prompt_tokens"].mean()) if len(ok) else _NAN
    row["output_tokens_mean"] = float(ok["output_tokens"].mean()) if len(ok) else _NAN
    row["basis"] = basis
    return row


def _summary_row(
    level: int, summary: Mapping[str, float | int | str | None]
) -> dict[str, float | int | str]:
    """A level known only from the tool's own summary (fidelity ``summary``)."""
    row: dict[str, float | int | str] = {"concurrency": level}
    for key in SUMMARY_KEYS:
        value = summary.get(key)
        row[SUMMARY_COLUMNS[key]] = float(value) if isinstance(value, int | float) else _NAN
    for key in ("requests", "completed", "failed"):
        value = summary.get(key)
        row[key] = int(value) if isinstance(value, int | float) else 0
    if not summary.get("requests"):
        row["requests"] = int(row["completed"]) + int(row["failed"])
    row["cancelled"] = 0
    row["basis"] = BASIS_TOOL_SUMMARY
    return row
