"""Findings 5 and 11: the cause of the ITL tail, and the recorder's own health.

The cause is read from data, in this order: the recorder's own lag (client overload), the
server's preemption counter, chunked prefill (the setting, or the stall signature of
:mod:`sweeper.analysis.tail_signature` in the trace), a full KV cache with a waiting queue (admission), and
the running count at max_num_seqs. What is missing for a verdict is named.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sweeper.analysis.tail_signature import (
    PREEMPTION,
    PREFILL,
    UNEXPLAINED,
    GapAttribution,
    StallSignature,
    stall_signature,
)
from sweeper.analysis.thresholds import Thresholds
from sweeper.findings._words import (
    Levels,
    Missing,
    Ms,
    Msg,
    Num,
    Pct,
    Share,
    Text,
    num,
    times,
    unknown,
)
from sweeper.findings.frames import RunFrames, itl_percentiles
from sweeper.findings.model import Finding
from sweeper.findings.scaling import tail_levels
from sweeper.i18n import N_
from sweeper.schema import StampCheck
from sweeper.units import finite

# ---------------------------------------------------------------------------------------------
# 5. The cause of the tail
#
# The evidence is gathered once (:class:`_TailEvidence`); then each rule of TAIL_RULES, in order,
# either explains the tail (returns the finding) or passes (returns None). When none explains
# it, the finding names what is missing for a verdict.


@dataclass(frozen=True, kw_only=True)
class _TailEvidence:
    """What every tail rule reads, computed once for the run."""

    data: RunFrames
    th: Thresholds
    opened: list[int]  # the tail levels the server side is asked about
    client_levels: list[int]  # tail levels the recorder's own lag can account for
    lone_levels: list[int]  # tail levels of a lone stream: no other request to be stalled by
    chunked: Any  # server.config.enable_chunked_prefill
    budget: Any  # server.config.max_num_batched_tokens
    max_seqs: Any  # server.config.max_num_seqs
    preempt: float  # preemptions during the tail levels (all levels when none opened)
    waiting: float
    running: float
    kv: float
    lag: float
    sigs: list[StallSignature]
    sync: float
    overlap: float
    overlap_normal: float
    strong: bool  # most signatures are strong
    # Each long gap of the tail levels blamed on what the evidence shows (None: no per-chunk
    # gaps); ``leading`` is the cause holding most of the time they add, when it holds enough.
    attribution: list[GapAttribution] | None
    leading: str | None
    numbers: dict[str, Any]  # the finding's numbers; the rule that answers sets "cause"
    uses: list[str]
    missing: list[str]

    @property
    def chunked_on(self) -> bool:
        chunked = self.chunked
        return chunked is True or (isinstance(chunked, str) and chunked.lower() == "true")


def tail_cause(data: RunFrames, th: Thresholds) -> Finding:
    ev = _tail_evidence(data, th)
    for rule in TAIL_RULES:
        if (found := rule(ev)) is not None:
            return found
    return _cause_unknown(ev)


def _tail_evidence(data: RunFrames, th: Thresholds) -> _TailEvidence:
    all_opened = tail_levels(data, th)
    # Levels whose tail the recorder's own lag can account for are set aside; the server-side
    # cause is read from the rest. Only when none is left is the recorder the cause.
    client_levels = [c for c in all_opened if _client_explains(data, c, th)]
    client_preempt = _sum_server(data, client_levels, "preemptions_delta")
    if finite(client_preempt) and client_preempt > 0:
        client_levels = []  # the server's preemption counter is harder evidence than the lag
    # A lone stream's tail (C=1) has no scheduling cause: with no other request in flight
    # there is nothing to preempt it, no other prefill to wait for, no queue. Its long gaps are
    # the engine's own step time or the machine's; blaming them on the loaded levels' cause, or
    # letting them hide it (a busy host gives C=1 a 3x p99 as easily as a queue does), is wrong.
    lone_levels = [c for c in all_opened if c not in client_levels and _lone_stream(data, c)]
    opened = [c for c in all_opened if c not in client_levels and c not in lone_levels]
    cfg = "server.config."
    chunked = data.fact(cfg + "enable_chunked_prefill")
    budget = data.fact(cfg + "max_num_batched_tokens")
    max_seqs = data.fact(cfg + "max_num_seqs")
    levels = opened or data.concurrencies
    preempt = _sum_server(data, levels, "preemptions_delta")
    waiting = _max_server(data, levels, "waiting_max")
    running = _max_server(data, levels, "running_max")
    kv = _max_server(data, levels, "kv_usage_max")
    lag = _max_lag(data, client_levels or levels, th)
    sigs = [s for c in opened if (s := _signature(data, c, th)) is not None]
    sync = _weighted(sigs, "synchronized_share")
    overlap = _weighted(sigs, "prefill_overlap_share")
    overlap_normal = _weighted(sigs, "prefill_overlap_share_normal")
    strong = bool(sigs) and sum(s.strong(th) for s in sigs) * 2 >= len(sigs)
    attribution = _attribute(data, opened, th)
    numbers: dict[str, Any] = {
        "cause": "unknown",
        "levels": opened,
        "client_levels": client_levels,
        "lone_levels": lone_levels,
        "preemptions_delta": num(preempt, 0),
        "waiting_max": num(waiting, 1),
        "running_max": num(running, 1),
        "kv_usage_max": num(kv),
        "max_num_seqs": max_seqs,
        "chunked_prefill": chunked,
        "max_num_batched_tokens": budget,
        "synchronized_gap_share": num(sync),
        "prefill_overlap_share": num(overlap),
        "prefill_overlap_share_normal_gaps": num(overlap_normal),
        "stalls": int(sum(s.stalls for s in sigs)) if sigs else None,
        "client_lag_p99_ms": num(lag, 3),
        "attribution": _attribution_numbers(attribution),
    }
    return _TailEvidence(
        data=data,
        th=th,
        opened=opened,
        client_levels=client_levels,
        lone_levels=lone_levels,
        chunked=chunked,
        budget=budget,
        max_seqs=max_seqs,
        preempt=preempt,
        waiting=waiting,
        running=running,
        kv=kv,
        lag=lag,
        sigs=sigs,
        sync=sync,
        overlap=overlap,
        overlap_normal=overlap_normal,
        strong=strong,
        attribution=attribution,
        leading=_leading(attribution, th),
        numbers=numbers,
        uses=_cause_data(data, chunked, bool(sigs)),
        missing=_cause_missing(data, preempt, chunked, bool(sigs) or not opened),
    )


def _attribute(
    data: RunFrames, opened: Sequence[int], th: Thresholds
) -> list[GapAttribution] | None:
    """The long gaps of each tail level blamed on a cause, with the level's own server's
    preemption count (levels on separate servers each have theirs)."""
    if data.requests is None or data.gaps is None or data.gaps.empty:
        return None
    found = [a for c in opened if (a := data.attribution(c, th)) is not None]
    return found if any(a.long_gaps for a in found) else None


def _shares(
    attribution: Sequence[GapAttribution],
) -> tuple[int, dict[str, float], dict[str, float]]:
    """All long gaps; per cause, the share of them and the share of the time they add."""
    gaps = sum(a.long_gaps for a in attribution)
    excess = sum(a.total_excess_ms for a in attribution)
    by_count = {k: sum(a.gaps[k] for a in attribution) / gaps if gaps else 0.0 for k in _CAUSES}
    by_time = {
        k: sum(a.excess_ms[k] for a in attribution) / excess if excess > 0 else 0.0 for k in _CAUSES
    }
    return gaps, by_count, by_time


_CAUSES = (PREFILL, PREEMPTION, UNEXPLAINED)


def _leading(attribution: Sequence[GapAttribution] | None, th: Thresholds) -> str | None:
    """The explained cause holding the most of the time the long gaps add, when it holds at
    least ``cause_min_time_share`` of it (gaps no cause explains, e.g. a lone stream's jitter on
    a loaded machine, are stated but are no cause)."""
    if not attribution:
        return None
    _, _, by_time = _shares(attribution)
    best = max((PREFILL, PREEMPTION), key=lambda k: by_time[k])
    return best if by_time[best] >= th.cause_min_time_share else None


def _attribution_numbers(attribution: Sequence[GapAttribution] | None) -> dict[str, Any] | None:
    """The JSON of the attribution: totals and per level, counts and shares of the added time."""
    if not attribution:
        return None
    gaps, by_count, by_time = _shares(attribution)
    return {
        "long_gaps": gaps,
        "gap_share": {k: num(v) for k, v in by_count.items()},
        "time_share": {k: num(v) for k, v in by_time.items()},
        "levels": {
            str(a.concurrency): {
                "long_gaps": a.long_gaps,
                "preemptions": a.preemptions,
                "gaps": dict(a.gaps),
                "time_share": {
                    k: num(v / a.total_excess_ms) if a.total_excess_ms > 0 else None
                    for k, v in a.excess_ms.items()
                },
            }
            for a in attribution
        },
    }


_LEAD_WORDS = {
    PREFILL: N_(
        "By the trace, other requests' prefills explain {share} of the {n} long gaps at {where} "
        "({time} of the time they add)."
    ),
    PREEMPTION: N_(
        "By the trace, the preempted streams' stalls, and the other streams' during their "
        "recompute, explain {share} of the {n} long gaps at {where} ({time} of the time they add)."
    ),
}


def _attribution_words(ev: _TailEvidence, text: Text, cause: str) -> None:
    """The shares: the cause named first (when it is one the trace can weigh), then every other
    contributor with its own, so a cause is never blamed beyond what it explains."""
    if not ev.attribution:
        return
    gaps, by_count, by_time = _shares(ev.attribution)
    where = Levels([a.concurrency for a in ev.attribution if a.long_gaps])
    lead = {"chunked_prefill": PREFILL, "preemption": PREEMPTION}.get(cause)
    if lead is not None and ev.leading == lead:
        text.add(
            _LEAD_WORDS[lead],
            share=Share(by_count[lead]),
            n=Num(gaps, 0),
            where=where,
            time=Share(by_time[lead]),
        )
    else:
        lead = None
        text.add(
            N_("By the trace, the {n} long gaps at {where} split as follows."),
            n=Num(gaps, 0),
            where=where,
        )
    if lead != PREFILL and by_count[PREFILL] > 0:
        text.add(
            N_("Other requests' prefills explain {share} of them ({time} of the time they add)."),
            share=Share(by_count[PREFILL]),
            time=Share(by_time[PREFILL]),
        )
    preempted = [a.concurrency for a in ev.attribution if a.preemptions > 0]
    if lead != PREEMPTION and preempted:
        text.add(
            N_(
                "{count} preemptions, counted at {where} by those levels' own servers, explain "
                "{share} ({time} of the time)."
            ),
            count=Num(sum(a.preemptions for a in ev.attribution), 0),
            where=Levels(preempted),
            share=Share(by_count[PREEMPTION]),
            time=Share(by_time[PREEMPTION]),
        )
    if by_count[UNEXPLAINED] > 0:
        text.add(
            N_("{share} of them ({time} of the time) fit no cause."),
            share=Share(by_count[UNEXPLAINED]),
            time=Share(by_time[UNEXPLAINED]),
        )
    without = [c for c in ev.opened if c not in {a.concurrency for a in ev.attribution}]
    if without:
        text.add(
            N_(
                "{where}: no per-chunk times (only the tool's own summary), so their tail is "
                "measured but not attributed."
            ),
            where=Levels(without),
        )


def _answer(ev: _TailEvidence, cause: str, severity: str, text: Text) -> Finding:
    """The finding of the rule that explains the tail."""
    ev.numbers["cause"] = cause
    if cause in ("kv_admission", "max_num_seqs", "unknown"):
        _attribution_words(ev, text, cause)  # the named causes say theirs after their own words
    # The levels set aside before the server side was asked: each is a cause when it is all
    # there is, and any other answer says why they were left out.
    set_aside = (
        (
            ev.client_levels,
            "client_overload",
            N_(
                "The tail at {where} is left out: the recorder's own event-loop lag there can "
                "account for it."
            ),
        ),
        (
            ev.lone_levels,
            "lone_stream",
            N_(
                "The tail at {where} is left out: a lone stream's, with no other request in flight "
                "to stall it, so no scheduling cause can reach it."
            ),
        ),
    )
    for levels, their_cause, words in set_aside:
        if levels and cause != their_cause:
            text.add(words, where=Levels(levels))
    return Finding(
        id="tail_cause",
        severity=severity,
        levels=ev.opened or ev.client_levels or (ev.lone_levels if cause == "lone_stream" else []),
        numbers=ev.numbers,
        text=text.render(),
        data=ev.uses,
        missing=ev.missing,
    )


def _no_timestamps(ev: _TailEvidence) -> Finding | None:
    if itl_percentiles(ev.data) is not None:
        return None
    text = Text().add(
        N_("The cause of an ITL tail cannot be told: there are no per-token timestamps.")
    )
    ev.numbers["cause"] = "unknown"
    return Finding(
        id="tail_cause",
        severity="unknown",
        numbers=ev.numbers,
        text=text.render(),
        data=ev.uses,
        missing=[N_("per-chunk timestamps (ITL)"), *ev.missing],
    )


def _client_overload(ev: _TailEvidence) -> Finding | None:
    if not ev.client_levels or ev.opened:
        return None
    text = Text().add(
        N_(
            "The tail at {where} comes from the recorder itself: its event loop was {lag} late at p99, enough to "
            "delay the chunks it timestamps. Record again with more --workers or on a less loaded machine."
        ),
        where=Levels(ev.client_levels),
        lag=Ms(ev.lag),
    )
    return _answer(ev, "client_overload", "warning", text)


def _preempted_without_tail(ev: _TailEvidence) -> Finding | None:
    if ev.opened:
        return None
    all_preempt = _sum_server(ev.data, ev.data.concurrencies, "preemptions_delta")
    if not (finite(all_preempt) and all_preempt > 0):
        return None
    # No tail, but the server did preempt: worth saying, it is where the tail will come from.
    ev.numbers["preemptions_delta"] = num(all_preempt, 0)
    preempted = [
        c for c in ev.data.concurrencies if ev.data.server_value(c, "preemptions_delta") > 0
    ]
    if ev.lone_levels:
        message = N_(
            "No ITL tail opened where streams share the server, but the server preempted {n} "
            "requests during {where} (vllm:num_preemptions_total): the KV cache is short for "
            "this load, and its stalls are in the longest gaps, short of the p99."
        )
    else:
        message = N_(
            "No ITL tail opened, but the server preempted {n} requests "
            "(vllm:num_preemptions_total): the KV cache is short for this load."
        )
    text = Text().add(message, n=Num(all_preempt, 0), where=Levels(preempted))
    return _answer(ev, "preemption", "notice", text)


def _lone_stream(data: RunFrames, concurrency: int) -> bool:
    """At most one request was in flight at this level (measured from the send and end times;
    a closed loop of one where they are not the recording's own), and the server preempted
    nothing there: a preemption with one request of ours in flight means other traffic shared
    the server, and the level is not alone after all."""
    inflight = data.value(concurrency, "inflight_max")
    if finite(inflight):
        alone = inflight <= 1
    else:
        alone = concurrency == 1 and not finite(data.value(concurrency, "offered_rate_rps"))
    preempted = data.server_value(concurrency, "preemptions_delta")
    return alone and not (finite(preempted) and preempted > 0)


def _lone_stream_tail(ev: _TailEvidence) -> Finding | None:
    if ev.opened or not ev.lone_levels:
        return None
    text = Text().add(
        N_(
            "The tail at {where} is a lone stream's: with no other request in flight, no "
            "preemption, other request's prefill, KV admission or max_num_seqs cap can reach it. "
            "Its long gaps are the engine's own step time or the machine's (another process on "
            "the host, a pause in the server's Python, the GPU's clocks)."
        ),
        where=Levels(ev.lone_levels),
    )
    return _answer(ev, "lone_stream", "notice", text)


def _no_tail(ev: _TailEvidence) -> Finding | None:
    if ev.opened:
        return None
    text = Text().add(N_("No ITL tail opened, so there is no tail to explain."))
    return _answer(ev, "none", "info", text)


def _preemption(ev: _TailEvidence) -> Finding | None:
    if not (finite(ev.preempt) and ev.preempt > 0):
        return None
    if ev.attribution is not None and ev.leading != PREEMPTION:
        return None  # counted, but the trace shows it explains too little of the tail
    preempted = [a.concurrency for a in ev.attribution or [] if a.preemptions > 0]
    text = Text().add(
        N_(
            "It is preemption: the server preempted {n} requests during {where} (vllm:num_preemptions_total)."
        ),
        n=Num(ev.preempt, 0),
        where=Levels(preempted or ev.opened),
    )
    _attribution_words(ev, text, "preemption")
    if finite(ev.waiting) and finite(ev.kv):
        text.add(
            N_("The waiting queue reached {w} and the KV cache was {kv} full."),
            w=Num(ev.waiting, 0),
            kv=Pct(ev.kv),
        )
    text.add(
        N_(
            "A preempted request gives up its KV cache and is recomputed later, so its stream stalls."
        )
    )
    return _answer(ev, "preemption", "warning", text)


def _chunked_prefill(ev: _TailEvidence) -> Finding | None:
    if ev.attribution is not None:
        if ev.leading != PREFILL:
            return None
    elif not (ev.chunked_on or ev.strong):
        return None
    text = Text()
    _not_preemption_words(ev, text)
    _prefill_words(ev, text)
    _attribution_words(ev, text, "chunked_prefill")
    if ev.sigs:
        _signature_words(ev, text)
    _p90_words(ev, text)
    return _answer(ev, "chunked_prefill", "warning", text)


def _not_preemption_words(ev: _TailEvidence, text: Text) -> None:
    if finite(ev.preempt) and ev.preempt > 0:
        return  # there were preemptions: the shares below say how little of the tail they explain
    if finite(ev.preempt) and finite(ev.waiting):
        text.add(
            N_(
                "This is not preemption: the server counted 0 preemptions during {where}, and the waiting "
                "queue held at most {w} requests."
            ),
            where=Levels(ev.opened),
            w=Num(ev.waiting, 0),
        )
    elif finite(ev.preempt):
        text.add(
            N_("This is not preemption: the server counted 0 preemptions during {where}."),
            where=Levels(ev.opened),
        )


def _prefill_words(ev: _TailEvidence, text: Text) -> None:
    if ev.chunked_on:
        budget_words = (
            Msg(N_(" with a budget of {n} tokens per step"), {"n": Num(float(ev.budget), 0)})
            if finite(ev.budget)
            else ""
        )
        text.add(
            N_(
                "It is chunked prefill (enable_chunked_prefill=True{budget}): new requests' prefills are cut "
                "into chunks and batched with the streams already decoding, so each of those streams waits "
                "for the chunk to be computed."
            ),
            budget=budget_words,
        )
    else:
        text.add(
            N_(
                "It has the signature of prefill interference: new requests' prefills run in the same steps "
                "as the streams already decoding, and each of those streams waits for them."
            )
        )


def _signature_words(ev: _TailEvidence, text: Text) -> None:
    th = ev.th
    values = {
        "n": Num(ev.numbers["stalls"], 0),
        "k": times(th.long_gap_factor),
        "overlap": Pct(ev.overlap, 0),
        "normal": Pct(ev.overlap_normal, 0) if finite(ev.overlap_normal) else "?",
    }
    if finite(ev.sync):
        text.add(
            N_(
                "The trace shows it: {sync} of the {n} long gaps (over {k} the p50 ITL) stall most of "
                "the streams at once, and {overlap} of them fall inside another request's prefill "
                "(against {normal} of ordinary gaps)."
            ),
            sync=Pct(ev.sync, 0),
            **values,
        )
    else:
        # No other stream decoded through any long gap (at C=2 the other one is often the request
        # prefilling): whether the stalls are shared cannot be told, so no share is quoted.
        text.add(
            N_(
                "The trace shows it: {overlap} of the {n} long gaps (over {k} the p50 ITL) fall inside "
                "another request's prefill (against {normal} of ordinary gaps). Whether they stall the "
                "other streams at once cannot be told: no other stream was decoding through them."
            ),
            **values,
        )
    if ev.chunked_on and not ev.strong:
        # The setting says chunked prefill, the timing only partly agrees: say so.
        text.add(
            N_(
                "The stall timing only partly matches: fewer than {share} of the long gaps are "
                "shared across streams or fall in a prefill, so part of the tail may have "
                "another cause."
            ),
            share=Pct(th.sync_signature_share, 0),
        )


def _p90_words(ev: _TailEvidence, text: Text) -> None:
    itl = itl_percentiles(ev.data)
    top = ev.data.concurrencies[-1]
    p90_top = itl[1][-1] if itl else math.nan
    p50_top = itl[0][-1] if itl else math.nan
    if finite(p90_top) and finite(p50_top) and p90_top >= ev.th.long_gap_factor * p50_top:
        text.add(
            N_(
                "At C={c} even p90 ITL is {p90}: more than one gap in ten waits on another request's prefill."
            ),
            c=top,
            p90=Ms(p90_top),
        )


def _kv_admission(ev: _TailEvidence) -> Finding | None:
    kv, waiting = ev.kv, ev.waiting
    if not (finite(kv) and kv >= ev.th.kv_full_fraction and finite(waiting) and waiting > 0):
        return None
    if not (finite(ev.preempt) and ev.preempt == 0):
        # preempted, or no counter to tell: "no preemption" would claim what is not known
        message = N_(
            "The KV cache is full: usage reached {kv} with {w} requests waiting, so new requests "
            "are admitted only as others finish and free their KV blocks."
        )
    else:
        message = N_(
            "The KV cache is full: usage reached {kv} with {w} requests waiting and no preemption, so new "
            "requests are admitted only as others finish and free their KV blocks."
        )
    text = Text().add(message, kv=Pct(kv), w=Num(waiting, 0))
    return _answer(ev, "kv_admission", "warning", text)


def _max_num_seqs(ev: _TailEvidence) -> Finding | None:
    max_seqs, running, waiting = ev.max_seqs, ev.running, ev.waiting
    at_cap = finite(max_seqs) and finite(running) and running >= float(max_seqs)
    if not (at_cap and finite(waiting) and waiting > 0):
        return None
    text = Text().add(
        N_(
            "The scheduler's cap is reached: {r} requests running = max_num_seqs {m}, with {w} waiting; new "
            "requests start only as others finish."
        ),
        r=Num(running, 0),
        m=Num(float(max_seqs), 0),
        w=Num(waiting, 0),
    )
    return _answer(ev, "max_num_seqs", "warning", text)


def _cause_unknown(ev: _TailEvidence) -> Finding:
    """No rule explains the tail: say what is missing for a verdict."""
    text = Text().add(
        N_("The cause of the tail at {where} cannot be told from this data: missing {missing}."),
        where=Levels(ev.opened),
        missing=Missing(ev.missing),
    )
    return _answer(ev, "unknown", "unknown", text)


TailRule = Callable[[_TailEvidence], Finding | None]
TAIL_RULES: tuple[TailRule, ...] = (
    _no_timestamps,
    _client_overload,
    _preempted_without_tail,
    _lone_stream_tail,
    _no_tail,
    _preemption,
    _chunked_prefill,
    _kv_admission,
    _max_num_seqs,
)
"""The tail rules in the order they are asked; the first that answers explains the tail."""


def _cause_data(data: RunFrames, chunked: Any, has_signature: bool) -> list[str]:
    """What the tail-cause finding rests on, for its ``data`` list."""
    uses = ["ITL percentiles per level"]
    server = data.server
    if server is not None and "scrapes" in server and server["scrapes"].fillna(0).sum() > 0:
        uses.append("server /metrics: preemptions, waiting, running, KV usage")
    gauges = server.get("gauge_source") if server is not None else None
    if gauges is not None and gauges.astype(str).str.contains("log").any():
        uses.append("server log: periodic Running / Waiting / KV usage lines")
    if chunked is not None:
        uses.append("server config: enable_chunked_prefill / max_num_batched_tokens")
    if has_signature:
        uses.append("stall timing across streams (gap and request frames)")
    return uses


def _cause_missing(data: RunFrames, preempt: float, chunked: Any, timing_known: bool) -> list[str]:
    """What would tell the cause and is not there (messages, translated in the text)."""
    missing: list[str] = []
    if not finite(preempt):
        missing.append(N_("the preemption counter (scrape /metrics: vllm:num_preemptions_total)"))
    if chunked is None:
        missing.append(
            N_("the chunked-prefill setting (--server-log, or --max-num-batched-tokens)")
        )
    server = data.server
    if (
        server is not None
        and "window_overlap" in server
        and server["window_overlap"].eq(True).any()
    ):
        missing.append(N_("server metrics per level (the levels overlap in time)"))
    if not timing_known:
        missing.append(N_("per-chunk timestamps of the tail levels (stall timing)"))
    return missing


def _sum_server(data: RunFrames, levels: Sequence[int], name: str) -> float:
    vals = [data.server_value(c, name) for c in levels]
    vals = [v for v in vals if finite(v)]
    return float(sum(vals)) if vals else math.nan


def _max_server(data: RunFrames, levels: Sequence[int], name: str) -> float:
    vals = [v for c in levels if finite(v := data.server_value(c, name))]
    return float(max(vals)) if vals else math.nan


def _kernel_checks(data: RunFrames) -> dict[int, StampCheck]:
    """The levels whose chunk times are the kernel's receive times, with their stamp check."""
    return {c.concurrency: c for c in data.manifest.client.stamp_checks if c.source == "kernel"}


def _merged_share(check: StampCheck) -> float:
    return check.merged_chunks / check.chunks if check.chunks else 0.0


def _loop_lags(data: RunFrames) -> dict[int, float]:
    """Each level's event-loop lag, p99 ms, as the recorder measured it."""
    return {lag.concurrency: lag.p99_ms for lag in data.manifest.client.loop_lag}


def _lag_by_level(data: RunFrames, th: Thresholds) -> dict[int, float]:
    """How far the recorder may have moved each level's chunk times (ms, p99). Stamped when read,
    that is its event-loop lag. With kernel receive times a late loop moves only the chunks that
    shared a read with the next one: none that matter (0) while they stay under
    ``client_merged_share``, else up to the reads' p99 delay."""
    lags = _loop_lags(data)
    for c, check in _kernel_checks(data).items():
        delay = check.read_delay_p99_ms if check.read_delay_p99_ms is not None else math.nan
        lags[c] = delay if _merged_share(check) > th.client_merged_share else 0.0
    return lags


def _max_lag(data: RunFrames, levels: Sequence[int], th: Thresholds) -> float:
    lags = _lag_by_level(data, th)
    vals = [lags[c] for c in levels if c in lags]
    return float(max(vals)) if vals else math.nan


def _client_distorted(data: RunFrames, concurrency: int, th: Thresholds) -> bool:
    """The recorder's own timing may have moved this level's ITL: by the rules its self-check
    warned with while recording (:meth:`Thresholds.stamps_distorted`,
    :meth:`Thresholds.loop_lag_distorts`)."""
    check = _kernel_checks(data).get(concurrency)
    if check is not None:
        return th.stamps_distorted(check)
    lag = _lag_by_level(data, th).get(concurrency)
    return lag is not None and th.loop_lag_distorts(lag, data.chunk_gap(concurrency, "p50"))


def _client_explains(data: RunFrames, concurrency: int, th: Thresholds) -> bool:
    """The recorder distorted ITL at this level and by enough to account for its tail (at
    least ``client_lag_tail_fraction`` of p99 - p50 ITL): a few ms of lag cannot make a 100 ms
    stall."""
    lag = _lag_by_level(data, th).get(concurrency, math.nan)
    excess = data.chunk_gap(concurrency, "p99") - data.chunk_gap(concurrency, "p50")
    return (
        _client_distorted(data, concurrency, th)
        and finite(excess)
        and lag >= th.client_lag_tail_fraction * excess
    )


def _signature(data: RunFrames, concurrency: int, th: Thresholds) -> StallSignature | None:
    if data.requests is None or data.gaps is None or data.gaps.empty:
        return None
    return stall_signature(concurrency, data.requests, data.gaps, th)


def _weighted(sigs: Sequence[StallSignature], attr: str) -> float:
    pairs = [
        (getattr(s, attr), s.stalls) for s in sigs if finite(getattr(s, attr)) and s.stalls > 0
    ]
    total = sum(w for _, w in pairs)
    return float(sum(v * w for v, w in pairs) / total) if total else math.nan


# ---------------------------------------------------------------------------------------------
# 11. Client health


def client_health(data: RunFrames, th: Thresholds) -> Finding:
    lags = _lag_by_level(data, th)
    kernel = _kernel_checks(data)
    uses = [
        "recorder event-loop lag per level (manifest.client.loop_lag)",
        "recorder stamp checks per level (manifest.client.stamp_checks)",
    ]
    if not lags:
        tool = data.manifest.source.tool
        text = Text().add(
            N_(
                "Whether the client distorted the timings cannot be checked: the trace set ({tool}) has no "
                "measurement of the recorder's own event-loop lag."
            ),
            tool=tool,
        )
        return unknown("client_health", text, ["manifest.client.loop_lag"], uses)
    bad = [c for c in data.concurrencies if c in lags and _client_distorted(data, c, th)]
    loop_lags = _loop_lags(data)
    worst_c = max(loop_lags or lags, key=lambda k: (loop_lags or lags)[k])
    numbers: dict[str, Any] = {
        "lag_p99_ms": {str(c): num(v, 3) for c, v in sorted(loop_lags.items())},
        "distorted_levels": bad,
        "worst_lag_p99_ms": num((loop_lags or lags)[worst_c], 3),
        "worst_at": worst_c,
        "stamps": "kernel" if kernel and set(kernel) >= set(lags) else "read",
        "merged_share": {str(c): num(_merged_share(k)) for c, k in sorted(kernel.items())},
        "read_delay_p99_ms": {
            str(c): num(k.read_delay_p99_ms, 3) for c, k in sorted(kernel.items())
        },
    }
    text = Text()
    kernel_bad = [c for c in bad if c in kernel]
    loop_bad = [c for c in bad if c not in kernel]
    if kernel_bad:
        text.add(
            N_(
                "The recorder read late at {where}: up to {share} of the chunks there shared a socket read with "
                "the next chunk of their stream while reads waited up to {lag} at p99; those chunks carry the "
                "later chunk's time, so ITL percentiles there may be off by up to that much. Record with more "
                "--workers or on a less loaded machine."
            ),
            where=Levels(kernel_bad),
            share=Pct(max(_merged_share(kernel[c]) for c in kernel_bad)),
            lag=Ms(max(lags[c] for c in kernel_bad)),
        )
    if loop_bad:
        text.add(
            N_(
                "The recorder lagged at {where}: its event loop ran up to {lag} late at p99, comparable to the ITL "
                "it measures; ITL percentiles there are inflated. Record with more --workers or on a less loaded "
                "machine."
            ),
            where=Levels(loop_bad),
            lag=Ms(max(lags[c] for c in loop_bad)),
        )
    if bad:
        return Finding(
            id="client_health",
            severity="warning",
            levels=bad,
            numbers=numbers,
            text=text.render(),
            data=uses,
        )
    if kernel and set(kernel) >= set(lags):
        worst_k = max(kernel, key=lambda c: _merged_share(kernel[c]))
        delays = [k.read_delay_p99_ms for k in kernel.values() if k.read_delay_p99_ms is not None]
        text.add(
            N_(
                "The recorder kept up: chunk times are the kernel's receive times, which a busy recorder "
                "cannot delay. At most {share} of a level's chunks (C={c}) shared a socket read with the next "
                "chunk of their stream and so carry its time, and reads waited at most {delay} at p99: too few or "
                "too short to move the ITL percentiles."
            ),
            share=Pct(_merged_share(kernel[worst_k]), 2),
            c=worst_k,
            delay=Ms(max(delays, default=0.0)),
        )
        return Finding(
            id="client_health", severity="info", numbers=numbers, text=text.render(), data=uses
        )
    # Levels stamped when read: their loop lag is what reached the stamps.
    read_lags = {c: v for c, v in lags.items() if c not in kernel}
    worst_read = max(read_lags, key=lambda c: read_lags[c])
    text.add(
        N_(
            "The recorder kept up: its event-loop lag stayed at or under {lag} at p99 (worst at C={c}), small against "
            "the gaps it measured."
        ),
        lag=Ms(read_lags[worst_read]),
        c=worst_read,
    )
    return Finding(
        id="client_health", severity="info", numbers=numbers, text=text.render(), data=uses
    )
