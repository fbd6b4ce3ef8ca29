"""Every finding of one run, in the order of DESIGN.md "Findings" (1-11).

::

    analyze_run(ts, slos=parse_slos("ttft_p99<=2s,itl_p50<=25ms"))  # a TraceSet
    analyze(RunFrames(manifest, levels, server, requests=requests))  # frames (tests, notebooks)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sweeper.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from sweeper.findings import capacity as cap
from sweeper.findings import cause, choice, goodput, openloop
from sweeper.findings import scaling as perf
from sweeper.findings._words import Text, named_levels, unknown
from sweeper.findings.frames import RunFrames, per_token, run_frames
from sweeper.findings.levels import level_rates, offered_numbers
from sweeper.findings.model import FINDING_IDS, SLO, Finding
from sweeper.findings.proposals import attach_proposals
from sweeper.i18n import N_
from sweeper.store import TraceSet


def analyze(
    data: RunFrames,
    *,
    slos: Sequence[SLO] | None = None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> list[Finding]:
    """Every finding, in the order of DESIGN.md (1-11). Where chunks carry several tokens, ITL is
    judged per token (:func:`~sweeper.findings.frames.per_token`). In a rate run (open loop) the
    levels are named by their offered rates, scaling is read against the offered rate and the
    knee is the saturation rate (:mod:`~sweeper.findings.openloop`); each finding's numbers then
    carry ``offered_rate_rps`` of its levels."""
    data = per_token(data)
    with named_levels(data):
        out = _analyze(data, slos, thresholds)
    attach_proposals(data, out)
    rates = level_rates(data.manifest)
    if rates:
        for f in out:
            if f.levels:
                f.numbers["offered_rate_rps"] = offered_numbers(f.levels, rates)
    return out


def _analyze(data: RunFrames, slos: Sequence[SLO] | None, thresholds: Thresholds) -> list[Finding]:
    out: list[Finding] = []
    rate_run = data.manifest.workload.open_loop
    scaling = openloop.rate_scaling if rate_run else perf.scaling
    knee = openloop.saturation if rate_run else perf.knee
    builders: list[tuple[str, Callable[[], Finding]]] = [
        ("roofline", lambda: perf.roofline(data, thresholds)),
        ("scaling", lambda: scaling(data, thresholds)),
        ("knee", lambda: knee(data, thresholds)),
        ("itl_tail", lambda: perf.itl_tail(data, thresholds)),
        ("tail_cause", lambda: cause.tail_cause(data, thresholds)),
        ("kv_ceiling", lambda: cap.kv_ceiling(data, thresholds)),
        ("memory_headroom", lambda: cap.memory_headroom(data, thresholds)),
        ("recommended", lambda: _recommended(data, thresholds, slos, rate_run, out)),
        ("slo_table", lambda: _slo_table(data, thresholds, slos, rate_run, out)),
        ("long_input", lambda: choice.long_input(data, thresholds, _cause(out))),
        ("client_health", lambda: cause.client_health(data, thresholds)),
    ]
    for fid, build in builders:
        try:
            out.append(build())
        except (ValueError, KeyError, TypeError, ZeroDivisionError, IndexError) as exc:
            # One finding that trips on odd data must not take the report down: say so instead.
            text = Text().add(
                N_("This finding could not be computed from this data ({error})."), error=exc
            )
            error = f"{type(exc).__name__}: {exc}"
            failed = unknown(fid, text, [error])
            failed.numbers["error"] = error  # the report shows it and a strict build fails on it
            out.append(failed)
    return out


def _recommended(
    data: RunFrames,
    th: Thresholds,
    slos: Sequence[SLO] | None,
    rate_run: bool,
    found: Sequence[Finding],
) -> Finding:
    """By goodput in a rate run (:mod:`~sweeper.findings.goodput`; checked against the
    saturation rate of the knee finding), else by the levels' own percentiles
    (:func:`~sweeper.findings.choice.recommended`)."""
    if not rate_run:
        return choice.recommended(data, th, slos)
    knee = next((f for f in found if f.id == "knee"), None)
    saturated = knee.numbers.get("saturation_level") if knee is not None else None
    return goodput.recommended_rate(
        data,
        th,
        slos,
        choice.default_recommend_slos(th),
        saturated_at=saturated if isinstance(saturated, int) else None,
    )


def _slo_table(
    data: RunFrames,
    th: Thresholds,
    slos: Sequence[SLO] | None,
    rate_run: bool,
    found: Sequence[Finding],
) -> Finding:
    if not rate_run:
        return choice.slo_table(data, th, slos)
    rec = next((f.numbers.get("concurrency") for f in found if f.id == "recommended"), None)
    saturated = next((f.numbers.get("saturation_level") for f in found if f.id == "knee"), None)
    return goodput.slo_table_rate(
        data,
        th,
        slos,
        rec if isinstance(rec, int) else None,
        saturated if isinstance(saturated, int) else None,
    )


def _cause(found: Sequence[Finding]) -> str | None:
    for f in found:
        if f.id == "tail_cause":
            return str(f.numbers.get("cause"))
    return None


def analyze_run(
    ts: TraceSet, *, slos: Sequence[SLO] | None = None, thresholds: Thresholds = DEFAULT_THRESHOLDS
) -> list[Finding]:
    """Every finding for one trace set (``slos``: the user's service level, all terms together)."""
    return analyze_frames(run_frames(ts), slos=slos, thresholds=thresholds)


def analyze_frames(
    data: RunFrames,
    *,
    slos: Sequence[SLO] | None = None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> list[Finding]:
    """:func:`analyze_run` on frames already computed by :func:`run_frames` (the site reuses them)."""
    if data.levels.empty:
        text = Text().add(N_("No measured request in this trace set: there is nothing to analyse."))
        return [unknown(fid, text, ["measured requests"]) for fid in FINDING_IDS]
    return analyze(data, slos=slos, thresholds=thresholds)
