"""``sweeper study run STUDY_ID --from-advice RUN_ID``: the flag changes a run's findings propose
(``Finding.proposals``) recorded beside the run's own flags, on the run's own workload, and
each prediction checked against what was measured.

- :func:`advice_from_run`: the baseline and one configuration per proposal with a value (the
  baseline's flags with that flag set), as the study manifest's ``advice``;
- :func:`workload_options`: the run's workload as ``sweeper record`` options (levels, lengths,
  requests per level, warmup, endpoint, rates and arrivals of a rate run), so the study
  re-records the same sweep;
- :func:`check_advice`: each prediction against the measurement, with a verdict
  (``confirmed``, ``not_confirmed``, ``inconclusive``: inside the noise, ``not_measured``).

Verdicts: the KV ceiling is confirmed when the new server's ceiling (its KV pool against the
same requests) reaches the predicted one; "no preemptions" when the new server counted none
(inconclusive when the baseline, re-recorded, counted none either); a latency that should fall
is compared with the baseline's at the same level in the same study: with repeats, by Welch's
95% interval of the difference (inside it: inconclusive), without, a change under
:data:`NOISE_FRACTION` is inconclusive.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sweeper.findings import analyze_run, finding, run_frames
from sweeper.schema import MANIFEST_FILE, RunManifest
from sweeper.store import TraceSet, load_trace_set
from sweeper.study.configs import normalize_flags
from sweeper.study.model import Advice, AdvisedChange

NOISE_FRACTION = 0.10
VERDICTS = ("confirmed", "not_confirmed", "inconclusive", "not_measured")
# A prediction's metric -> the summary's diff key (latencies compared in the study's diffs).
_DIFF_KEYS = {"itl_p99_ms": "itl_ms.p99", "ttft_p99_ms": "ttft_ms.p99"}


def with_flag(flags: str, flag: str, value: int) -> str:
    """``flags`` with ``flag`` set to ``value``: an earlier ``flag X`` or ``flag=X`` changed in
    place, else ``flag value`` added at the end."""
    words = shlex.split(flags)
    for i, word in enumerate(words):
        if word == flag and i + 1 < len(words):
            words[i + 1] = str(value)
            break
        if word.startswith(flag + "="):
            words[i] = f"{flag}={value}"
            break
    else:
        words += [flag, str(value)]
    return normalize_flags(shlex.join(words))


def run_flags(manifest: RunManifest) -> str | None:
    """The server flags a run was recorded with, where a study recorded it (label ``flags``)."""
    flags = (manifest.labels or {}).get("flags")
    return normalize_flags(flags) if isinstance(flags, str) else None


def advice_from_run(ts: TraceSet, baseline: str) -> Advice:
    """The run's proposals as configurations beside ``baseline`` (duplicates and changes that
    leave the flags as they are dropped)."""
    advice = Advice(run_id=ts.run_id, baseline=normalize_flags(baseline))
    seen = {advice.baseline}
    for f in analyze_run(ts):
        for p in f.proposals:
            if p.value is None:
                advice.not_tried.append(
                    {"finding": f.id, "flag": p.flag, "direction": p.direction, "reason": p.reason}
                )
                continue
            flags = with_flag(advice.baseline, p.flag, p.value)
            if flags in seen:
                continue
            seen.add(flags)
            advice.changes.append(
                AdvisedChange(
                    finding=f.id,
                    flag=p.flag,
                    value=p.value,
                    direction=p.direction,
                    predicts=[pred.model_dump(by_alias=True) for pred in p.predicts],
                    reason=p.reason,
                    flags=flags,
                )
            )
    return advice


def _count_option(counts: dict[str, int], levels: Sequence[int], rate: bool) -> str | None:
    """``--requests-per-level`` as the run had it: a count, or a multiple of C (``4x``)."""
    values = [counts.get(str(c)) for c in levels]
    if not values or any(v is None for v in values):
        return None
    known = [int(v) for v in values if v is not None]
    if len(set(known)) == 1:
        return str(known[0])
    multiples = {v / c for v, c in zip(known, levels, strict=True)}
    if not rate and len(multiples) == 1 and float(next(iter(multiples))).is_integer():
        return f"{int(next(iter(multiples)))}x"
    return str(max(known))


def workload_options(manifest: RunManifest) -> dict[str, Any]:
    """The run's workload as record options (by their parameter names), to record it again."""
    w = manifest.workload.model_dump()
    out: dict[str, Any] = {}
    for name in ("input_len", "output_len", "seed", "ignore_eos"):
        if w.get(name) is not None:
            out[name] = w[name]
    for name in ("input_len_range", "output_len_range", "sessions", "turns", "think_time_ms",
                 "trace_speedup", "shared_prefix"):  # fmt: skip
        if w.get(name) is not None:
            out[name] = w[name]
    if w.get("dataset") not in (None, "random"):
        out["dataset"] = w["dataset"]  # a file the run read must still be there
    levels = [int(c) for c in w.get("concurrency_levels") or []]
    rates = w.get("request_rates") or {}
    if rates:
        values = [rates[str(c)] for c in levels if str(c) in rates]
        out["request_rate"] = ",".join(
            "inf" if not math.isfinite(float(v)) else f"{float(v):g}" for v in values
        )
        for name in ("arrival", "burstiness", "max_concurrency"):
            if w.get(name) is not None:
                out[name] = w[name]
        if w.get("duration_s") is not None:
            out["duration"] = w["duration_s"]
    else:
        out["concurrency"] = ",".join(str(c) for c in levels)
    if w.get("sessions") is None and w.get("duration_s") is None:
        count = _count_option(w.get("requests_per_level") or {}, levels, bool(rates))
        if count is not None:
            out["requests_per_level"] = count
    if w.get("warmup_per_level") is not None:
        out["warmup"] = str(w["warmup_per_level"])
    if manifest.target.endpoint:
        out["endpoint"] = manifest.target.endpoint
    return out


def _first_run(config: dict[str, Any]) -> str | None:
    runs = [r for r in config.get("runs", []) if r.get("kind") == "sweep"]
    return runs[0]["run_id"] if runs else None


class _Measured:
    """What the study's trace sets say, per run id (read once)."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.cache: dict[str, TraceSet | None] = {}

    def trace_set(self, run_id: str | None) -> TraceSet | None:
        if run_id is None:
            return None
        if run_id not in self.cache:
            folder = self.out / run_id
            self.cache[run_id] = (
                load_trace_set(folder) if (folder / MANIFEST_FILE).exists() else None
            )
        return self.cache[run_id]

    def ceiling(self, run_id: str | None) -> float | None:
        ts = self.trace_set(run_id)
        if ts is None:
            return None
        value = finding(analyze_run(ts), "kv_ceiling").numbers.get("ceiling")
        return float(value) if isinstance(value, int | float) else None

    def preemptions(self, run_id: str | None) -> float | None:
        ts = self.trace_set(run_id)
        if ts is None:
            return None
        data = run_frames(ts)
        counts = [data.server_value(c, "preemptions_delta") for c in data.concurrencies]
        known = [v for v in counts if math.isfinite(v)]
        return float(sum(known)) if known else None


def _latency_verdict(
    pred: dict[str, Any], change_flags: str, diffs: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    key = _DIFF_KEYS[pred["metric"]]
    diff = next(
        (d for d in diffs if d["b"] == change_flags and d.get("concurrency") == pred.get("level")),
        None,
    )
    item = diff["metrics"].get(key) if diff is not None else None
    if item is None or item.get("b") is None:
        return {"baseline": None, "measured": None, "verdict": "not_measured"}
    out: dict[str, Any] = {"baseline": item.get("a"), "measured": item["b"]}
    lower = pred["direction"] == "lower"
    significant, change = item.get("significant"), item.get("change_pct")
    if change is None:
        out["verdict"] = "not_measured"
    elif significant is False or (significant is None and abs(change) < 100 * NOISE_FRACTION):
        out["verdict"] = "inconclusive"
    else:
        out["verdict"] = "confirmed" if (change < 0) == lower else "not_confirmed"
    return out


def _ceiling_verdict(pred: dict[str, Any], baseline: Any, measured: Any) -> str:
    if measured is None:
        return "not_measured"
    target = pred.get("to")
    if target is not None:
        return "confirmed" if measured >= target else "not_confirmed"
    start = baseline if baseline is not None else pred.get("from")
    return "confirmed" if start is not None and measured > start else "not_confirmed"


def _preemption_verdict(pred: dict[str, Any], baseline: Any, measured: Any) -> str:
    if measured is None:
        return "not_measured"
    target = pred.get("to") or 0.0
    if measured <= target:
        return "inconclusive" if baseline is not None and baseline <= target else "confirmed"
    return "not_confirmed"


def check_advice(
    advice: Advice, configs: Sequence[dict[str, Any]], diffs: Sequence[dict[str, Any]], out: Path
) -> list[dict[str, Any]]:
    """One entry per prediction of each change tried: what it predicted (``from`` the advised
    run, ``to``), the baseline re-recorded, the change's measurement and the verdict."""
    by_flags = {c["flags"]: c for c in configs}
    measured = _Measured(out)
    base_run = _first_run(by_flags.get(advice.baseline, {}))
    checks = []
    for change in advice.changes:
        config = by_flags.get(change.flags, {})
        run_id = _first_run(config) if config.get("status") == "complete" else None
        for pred in change.predicts:
            entry: dict[str, Any] = {
                "finding": change.finding,
                "flag": change.flag,
                "value": change.value,
                "flags": change.flags,
                "run_id": run_id,
                **{k: pred.get(k) for k in ("metric", "level", "from", "to", "direction")},
            }
            metric = pred["metric"]
            if metric in _DIFF_KEYS:
                entry.update(_latency_verdict(pred, change.flags, diffs))
                if run_id is None:
                    entry.update(measured=None, verdict="not_measured")
            else:
                read = measured.ceiling if metric == "kv_ceiling" else measured.preemptions
                base, value = read(base_run), read(run_id)
                judge = _ceiling_verdict if metric == "kv_ceiling" else _preemption_verdict
                entry.update(baseline=base, measured=value, verdict=judge(pred, base, value))
            checks.append(entry)
    return checks
