"""Trace sets -> tidy pandas frames: per request, per gap (ITL) and per level.

Definitions (DESIGN.md "Metrics", the same words as ``vllm bench serve``):

- TTFT: first content chunk arrival - send. E2EL: last content chunk arrival - send.
- TPOT (per request): (E2EL - TTFT) / (output tokens - 1), for requests with 2+ output tokens.
- ITL: every gap between consecutive content chunks, pooled over the measured requests of a level.
  A chunk carrying k > 1 tokens is one gap; ``tokens`` keeps k so a per-token view is possible.
- Output throughput: measured output tokens / (last measured end - first measured send).
- Generation speed: output tokens / E2EL; decode speed: (output tokens - 1) / (E2EL - TTFT).
- Percentiles: linear interpolation (numpy's default).

Warm-up requests are excluded; failed requests are counted, never timed. Output tokens come from
the server's usage (``completion_tokens``), falling back to the sum of per-chunk counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from sweeper.schema import RequestTrace, fact_value
from sweeper.store import TraceSet

PERCENTILES = (50, 90, 95, 99)
STAT_NAMES = ("mean", "p50", "p90", "p95", "p99")
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
]

GAP_COLUMNS = ["concurrency", "request_id", "at_s", "itl_ms", "tokens"]


def _stats(values: np.ndarray) -> dict[str, float]:
    values = values[~np.isnan(values)]
    if values.size == 0:
        return {name: float("nan") for name in STAT_NAMES}
    out = {"mean": float(values.mean())}
    for p, q in zip(PERCENTILES, np.percentile(values, PERCENTILES), strict=True):
        out[f"p{p}"] = float(q)
    return out


def request_frame(ts: TraceSet, *, include_warmup: bool = False) -> pd.DataFrame:
    """One row per request. Times in ms (latencies) or s since the run's origin (send_s, end_s)."""
    rows = [r for r in ts.requests if include_warmup or r.phase == "measured"]
    return requests_to_frame(rows)


def requests_to_frame(rows: Sequence[RequestTrace]) -> pd.DataFrame:
    n = len(rows)
    if n == 0:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in REQUEST_COLUMNS})
    nan = float("nan")
    ttft_ns = np.full(n, nan)
    e2el_ns = np.full(n, nan)
    end_ns = np.full(n, nan)
    out_tokens = np.full(n, nan)
    prompt_tokens = np.full(n, nan)
    chunks = np.zeros(n, dtype=np.int64)
    send_ns = np.empty(n, dtype=np.float64)
    for i, r in enumerate(rows):
        send_ns[i] = r.send_ns
        chunks[i] = len(r.chunk_ns)
        if r.chunk_ns:
            ttft_ns[i] = r.chunk_ns[0]
            e2el_ns[i] = r.chunk_ns[-1]
        else:
            if r.ttft_ns is not None:
                ttft_ns[i] = r.ttft_ns
            if r.e2el_ns is not None:
                e2el_ns[i] = r.e2el_ns
        if r.completion_tokens is not None:
            out_tokens[i] = r.completion_tokens
        elif r.chunk_tokens:
            out_tokens[i] = sum(r.chunk_tokens)
        if r.prompt_tokens is not None:
            prompt_tokens[i] = r.prompt_tokens
        if r.end_ns is not None:
            end_ns[i] = r.end_ns
    ok = np.array([r.status == "ok" for r in rows])
    # Failed requests are counted, never timed.
    ttft_ns[~ok] = nan
    e2el_ns[~ok] = nan
    end_rel = np.where(np.isnan(e2el_ns), end_ns, e2el_ns)
    decode_ns = e2el_ns - ttft_ns
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot_ms = np.where(out_tokens > 1, decode_ns / (out_tokens - 1) / 1e6, nan)
        decode_tok_s = np.where((out_tokens > 1) & (decode_ns > 0), (out_tokens - 1) / (decode_ns / 1e9), nan)
        gen_tok_s = np.where(e2el_ns > 0, out_tokens / (e2el_ns / 1e9), nan)
    frame = pd.DataFrame(
        {
            "concurrency": np.array([r.concurrency for r in rows], dtype=np.int64),
            "request_id": [r.request_id for r in rows],
            "phase": [r.phase for r in rows],
            "status": [r.status for r in rows],
            "error_kind": [r.error.kind if r.error else None for r in rows],
            "http_status": [r.error.http_status if r.error else None for r in rows],
            "send_s": send_ns / 1e9,
            "end_s": (send_ns + end_rel) / 1e9,
            "ttft_ms": ttft_ns / 1e6,
            "e2el_ms": e2el_ns / 1e6,
            "tpot_ms": tpot_ms,
            "prompt_tokens": prompt_tokens,
            "output_tokens": out_tokens,
            "chunks": chunks,
            "decode_tok_s": decode_tok_s,
            "gen_tok_s": gen_tok_s,
        }
    )
    return frame


def gap_frame(ts: TraceSet) -> pd.DataFrame:
    """One row per gap between consecutive content chunks of a measured, successful request."""
    rows = [r for r in ts.requests if r.phase == "measured" and r.status == "ok" and len(r.chunk_ns) > 1]
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in GAP_COLUMNS})
    lengths = np.array([len(r.chunk_ns) for r in rows])
    offsets = np.concatenate([np.asarray(r.chunk_ns, dtype=np.int64) for r in rows])
    tokens = np.concatenate([np.asarray(r.chunk_tokens, dtype=np.int64) for r in rows])
    owner = np.repeat(np.arange(len(rows)), lengths)
    send = np.array([r.send_ns for r in rows], dtype=np.int64)[owner]
    diffs = np.diff(offsets)
    keep = owner[1:] == owner[:-1]  # drop the step from one request's last chunk to the next's first
    idx = np.nonzero(keep)[0] + 1
    conc = np.array([r.concurrency for r in rows], dtype=np.int64)[owner]
    rid = np.array([r.request_id for r in rows], dtype=object)[owner]
    return pd.DataFrame(
        {
            "concurrency": conc[idx],
            "request_id": rid[idx],
            "at_s": (send[idx] + offsets[idx]) / 1e9,
            "itl_ms": diffs[keep] / 1e6,
            "tokens": tokens[idx],
        }
    )


def gpus_of(ts: TraceSet) -> int:
    """TP x PP x DP from the manifest (or the GPU count), at least 1."""
    cfg = ts.manifest.server.config
    product = 1
    for f in (cfg.tensor_parallel_size, cfg.pipeline_parallel_size, cfg.data_parallel_size):
        v = fact_value(f)
        if isinstance(v, int | float) and v >= 1:
            product *= int(v)
    if product == 1:
        count = fact_value(ts.manifest.hardware.gpu_count)
        if isinstance(count, int | float) and count >= 1:
            product = int(count)
    return product


def level_frame(
    ts: TraceSet,
    *,
    slos: Mapping[str, float] | None = None,
    requests: pd.DataFrame | None = None,
    gaps: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per concurrency level, sorted by concurrency.

    Columns: concurrency, requests, completed, failed, duration_s, output_throughput_tok_s,
    request_throughput_rps, total_token_throughput_tok_s, output_throughput_per_gpu_tok_s,
    ``<metric>_<stat>`` for metric in ttft_ms / tpot_ms / itl_ms / e2el_ms and stat in mean / p50 /
    p90 / p95 / p99, decode_tok_s_mean / _p50, gen_tok_s_mean / _p50, prompt_tokens_mean,
    output_tokens_mean, multi_token_gap_share, and goodput_rps when ``slos`` is given
    (e.g. ``{"ttft_ms": 500, "tpot_ms": 50}``: a request counts when every value is <= its bound).
    """
    req = request_frame(ts) if requests is None else requests
    gap = gap_frame(ts) if gaps is None else gaps
    n_gpu = gpus_of(ts)
    rows = []
    for conc, grp in req.groupby("concurrency", sort=True):
        ok = grp[grp["status"] == "ok"]
        start = grp["send_s"].min()
        end = np.nanmax(grp["end_s"].to_numpy()) if grp["end_s"].notna().any() else float("nan")
        duration = float(end - start) if np.isfinite(end) else float("nan")
        out_tok = float(ok["output_tokens"].sum())
        in_tok = float(ok["prompt_tokens"].sum())
        row: dict[str, float | int] = {
            "concurrency": int(conc),  # type: ignore[call-overload]
            "requests": len(grp),
            "completed": len(ok),
            "failed": len(grp) - len(ok),
            "duration_s": duration,
            "output_throughput_tok_s": out_tok / duration if duration > 0 else float("nan"),
            "request_throughput_rps": len(ok) / duration if duration > 0 else float("nan"),
            "total_token_throughput_tok_s": (out_tok + in_tok) / duration if duration > 0 else float("nan"),
        }
        row["output_throughput_per_gpu_tok_s"] = row["output_throughput_tok_s"] / n_gpu
        for metric in ("ttft_ms", "tpot_ms", "e2el_ms"):
            for stat, value in _stats(ok[metric].to_numpy(dtype=float)).items():
                row[f"{metric}_{stat}"] = value
        g = gap[gap["concurrency"] == conc]
        for stat, value in _stats(g["itl_ms"].to_numpy(dtype=float)).items():
            row[f"itl_ms_{stat}"] = value
        row["multi_token_gap_share"] = float((g["tokens"] > 1).mean()) if len(g) else float("nan")
        for metric in ("decode_tok_s", "gen_tok_s"):
            s = _stats(ok[metric].to_numpy(dtype=float))
            row[f"{metric}_mean"] = s["mean"]
            row[f"{metric}_p50"] = s["p50"]
        row["prompt_tokens_mean"] = float(ok["prompt_tokens"].mean()) if len(ok) else float("nan")
        row["output_tokens_mean"] = float(ok["output_tokens"].mean()) if len(ok) else float("nan")
        if slos:
            good = np.ones(len(ok), dtype=bool)
            for metric, bound in slos.items():
                good &= ok[metric].to_numpy(dtype=float) <= bound
            row["goodput_rps"] = float(good.sum()) / duration if duration > 0 else float("nan")
        rows.append(row)
    return pd.DataFrame(rows)
