"""Every finding of one run, in the order of DESIGN.md "Findings" (1-11).

::

    analyze_run(ts, slos=parse_slos("ttft_p99<=2s,itl_p50<=25ms"))  # a TraceSet
    analyze(RunFrames(manifest, levels, server, requests=requests))  # frames (tests, notebooks)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sweeper.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from sweeper.findings import capacity as cap
from sweeper.findings import cause, choice
from sweeper.findings import scaling as perf
from sweeper.findings._words import Text, unknown
from sweeper.findings.frames import RunFrames, per_token, run_frames
from sweeper.findings.model import FINDING_IDS, SLO, Finding
from sweeper.i18n import N_
from sweeper.store import TraceSet


def analyze(
    data: RunFrames,
    *,
    slos: Sequence[SLO] | None = None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> list[Finding]:
    """Every finding, in the order of DESIGN.md (1-11). Where chunks carry several tokens, ITL is
    judged per token (:func:`~sweeper.findings.frames.per_token`)."""
    data = per_token(data)
    out: list[Finding] = []
    builders: list[tuple[str, Callable[[], Finding]]] = [
        ("roofline", lambda: perf.roofline(data, thresholds)),
        ("scaling", lambda: perf.scaling(data, thresholds)),
        ("knee", lambda: perf.knee(data, thresholds)),
        ("itl_tail", lambda: perf.itl_tail(data, thresholds)),
        ("tail_cause", lambda: cause.tail_cause(data, thresholds)),
        ("kv_ceiling", lambda: cap.kv_ceiling(data, thresholds)),
        ("memory_headroom", lambda: cap.memory_headroom(data, thresholds)),
        ("recommended", lambda: choice.recommended(data, thresholds, slos)),
        ("slo_table", lambda: choice.slo_table(data, thresholds, slos)),
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
