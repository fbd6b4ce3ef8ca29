"""Findings 2-3 of an open-loop run (``--request-rate``): scaling against the offered rate, and the
saturation rate, the knee of a rate sweep.

In an open loop the schedule sends whatever the server does, so the server's limit shows as
the rate it stops following: fewer requests completed per second than offered, a client queue
(requests sent after their scheduled time: a ``--max-concurrency`` cap full, or the client
behind), a server waiting queue, or latencies measured from the schedule that keep growing.
Each sign can mislead alone (a short level finishes few requests; prefills lengthen TTFT too),
so the finding names every sign it saw and says how sure it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sweeper.analysis.thresholds import Thresholds
from sweeper.findings._words import (
    Join,
    Level,
    Ms,
    Msg,
    Num,
    Pct,
    Text,
    num,
    per_level,
    times,
    tok_s,
    unknown,
)
from sweeper.findings.frames import RunFrames, streams
from sweeper.findings.levels import level_rates
from sweeper.findings.model import Finding
from sweeper.i18n import N_
from sweeper.units import finite

# ---------------------------------------------------------------------------------------------
# Rates of a level


def _level_requests(data: RunFrames, level: int) -> Any:
    req = data.requests
    if req is None or req.empty or "concurrency" not in req.columns:
        return None
    sel = req[(req["concurrency"] == level) & (req["phase"] == "measured")]
    return sel if len(sel) else None


def _rate(times_s: Any) -> float:
    """Events per second over a sorted series of times: (n - 1) / span; NaN under 3 events."""
    values = np.sort(np.asarray(times_s, dtype=float))
    values = values[np.isfinite(values)]
    if values.size < 3 or values[-1] <= values[0]:
        return math.nan
    return float((values.size - 1) / (values[-1] - values[0]))


def scheduled_rate(data: RunFrames, level: int) -> float:
    """Requests per second the schedule itself asked for at a level (a Poisson schedule's gaps
    make it differ from the offered rate); NaN where the trace has no scheduled times."""
    req = _level_requests(data, level)
    if req is None or "scheduled_s" not in req.columns:
        return math.nan
    return _rate(req["scheduled_s"])


def sent_rate(data: RunFrames, level: int) -> float:
    """Requests sent per second at a level (``achieved_rate_rps``, else from the send times)."""
    value = data.value(level, "achieved_rate_rps")
    if finite(value):
        return value
    req = _level_requests(data, level)
    return _rate(req["send_s"]) if req is not None else math.nan


def completed_rate(data: RunFrames, level: int) -> float:
    """Requests completed per second at a level, between its first and its last completion:
    unlike completed / duration it is not lowered by the drain after the last send (a short
    level would look saturated), and it falls below the offered rate when the server serves
    fewer than arrive. Where the trace has no request times (a tool's summaries), completed /
    (duration - the least loaded level's p50 E2EL): the duration without its drain."""
    req = _level_requests(data, level)
    if req is not None and "end_s" in req.columns:
        ok = req[req["status"] == "ok"]
        value = _rate(ok["end_s"])
        if finite(value):
            return value
    done, duration = data.value(level, "completed"), data.value(level, "duration_s")
    e2el = data.col("e2el_p50_ms")
    drain = float(e2el.min()) / 1e3 if e2el is not None else math.nan
    if finite(done) and finite(duration) and finite(drain) and duration - drain > 0:
        return done / (duration - drain)
    return data.value(level, "request_throughput_rps")


# ---------------------------------------------------------------------------------------------
# 3. The saturation rate


SIGNS = ("sent", "completed", "client_queue", "server_waiting", "latency_growth")
_SIGN_NAMES = {
    "sent": N_("the client sent fewer requests per second than offered"),
    "completed": N_("fewer requests completed per second than were sent"),
    "client_queue": N_("requests waited in the client before they were sent"),
    "server_waiting": N_("the server's waiting queue grew"),
    "latency_growth": N_("TTFT from the schedule grew"),
}


@dataclass
class _RateLevel:
    key: int
    offered: float
    scheduled: float  # the schedule's own rate over the level (Poisson gaps vary); NaN: unknown
    sent: float
    completed: float
    queue_p90: float
    waiting: float
    waiting_max: float
    ttft: float  # p50 TTFT from the schedule (from the send where the schedule is unknown)
    inflight_max: float = math.nan  # the most requests in flight, from the trace
    ttft_send: float = math.nan  # p50 TTFT from the send: the server's part alone
    signs: list[str] = field(default_factory=list)
    # The client's queue or shortfall without a full --max-concurrency: the recorder's own
    # lateness (a busy client), not the server's saturation.
    client_behind: bool = False

    @property
    def schedule(self) -> float:
        """Requests per second the schedule asked for: its own times, else the offered rate."""
        return self.scheduled if finite(self.scheduled) else self.offered

    @property
    def follow(self) -> float:
        """Completed per second against the requests sent per second (the arrivals the server
        saw), else against the schedule; NaN for all at once (no rate to follow)."""
        if not math.isfinite(self.offered):
            return math.nan
        arrivals = self.sent if finite(self.sent) else self.schedule
        return self.completed / arrivals if finite(arrivals) and arrivals > 0 else math.nan


def _rate_levels(data: RunFrames, th: Thresholds) -> list[_RateLevel]:
    rates = level_rates(data.manifest)
    out: list[_RateLevel] = []
    for c in data.concurrencies:
        ttft = data.value(c, "ttft_sched_p50_ms")
        out.append(
            _RateLevel(
                key=c,
                offered=rates.get(c, math.nan),
                scheduled=scheduled_rate(data, c),
                sent=sent_rate(data, c),
                completed=completed_rate(data, c),
                queue_p90=data.value(c, "client_queue_p90_ms"),
                waiting=data.server_value(c, "waiting_mean"),
                waiting_max=data.server_value(c, "waiting_max"),
                ttft=ttft if finite(ttft) else data.value(c, "ttft_p50_ms"),
                inflight_max=data.value(c, "inflight_max"),
                ttft_send=data.value(c, "ttft_p50_ms"),
            )
        )
    base = next((lv.ttft for lv in out if finite(lv.ttft) and lv.ttft > 0), math.nan)
    # Without request times the completion rate is the tool's completed / duration: the lowest
    # rate's own shortfall (failed requests, the drain after the last send) is the baseline.
    timed = data.requests is not None and not data.requests.empty
    follows = [lv.follow for lv in out if finite(lv.follow)]
    baseline = 1.0 if timed or not follows else min(1.0, follows[0])
    cap = data.manifest.workload.max_concurrency
    for lv in out:
        lv.signs = _signs(lv, base, baseline, th, cap)
    return out


def _cap_bound(lv: _RateLevel, cap: int | None) -> bool:
    """Whether a request of the level can have waited for a place under --max-concurrency: a
    cap was set and the trace saw it full (or cannot tell: an import without send times)."""
    if not cap:
        return False
    return not finite(lv.inflight_max) or lv.inflight_max >= cap


def _signs(
    lv: _RateLevel, base_ttft: float, baseline: float, th: Thresholds, cap: int | None
) -> list[str]:
    """The signs of saturation at one level. A client queue (or a shortfall of sends) is the
    server's only where the cap was full, so requests waited for a slot the server had not freed;
    without that it is the client's own lateness, kept apart in ``client_behind``."""
    signs = []
    frac = th.saturation_follow_fraction
    short = math.isfinite(lv.offered) and finite(lv.sent) and lv.sent < frac * lv.schedule
    queued = finite(lv.queue_p90) and lv.queue_p90 >= th.saturation_client_queue_ms
    slots = _cap_bound(lv, cap)
    if short and slots:
        signs.append("sent")
    if finite(lv.follow) and lv.follow < frac * baseline:
        signs.append("completed")
    if queued and slots:
        signs.append("client_queue")
    lv.client_behind = (short or queued) and not slots
    # A late client's wait is in TTFT from the schedule: judge the server by TTFT from the send.
    ttft = lv.ttft_send if lv.client_behind and finite(lv.ttft_send) else lv.ttft
    if finite(lv.waiting) and lv.waiting >= th.saturation_server_waiting:
        signs.append("server_waiting")
    if finite(ttft) and finite(base_ttft) and ttft >= th.saturation_latency_growth * base_ttft:
        signs.append("latency_growth")
    return signs


def saturation(data: RunFrames, th: Thresholds) -> Finding:
    """The knee of a rate sweep: the lowest offered rate the server no longer keeps up with."""
    uses = ["offered and achieved request rates per level", "client queue (sent - scheduled)"]
    levels = _rate_levels(data, th)
    if not levels or not any(finite(lv.completed) for lv in levels):
        text = Text().add(
            N_(
                "The saturation rate cannot be located: it needs the requests completed per "
                "second at each offered rate."
            )
        )
        return unknown("knee", text, ["request times per rate level"], uses)
    if any(finite(lv.waiting) for lv in levels):
        uses.append("server waiting queue per level (/metrics)")
    numbers = _saturation_numbers(data, levels, th)
    at = next((i for i, lv in enumerate(levels) if lv.signs), None)
    text = Text()
    if at is None:
        _unsaturated_words(text, levels, th)
        _client_behind_words(text, levels)
        return Finding(id="knee", severity="info", numbers=numbers, text=text.render(), data=uses)
    lv = levels[at]
    numbers.update(
        {
            "between": [levels[at - 1].key, lv.key] if at > 0 else None,
            "saturation_level": lv.key,
            "saturation_rate_rps": num(lv.offered, 4),
            "last_kept_rate_rps": num(levels[at - 1].offered, 4) if at > 0 else None,
            "evidence": list(lv.signs),
        }
    )
    if at > 0:
        text.add(
            N_("The server saturates between {a} and {b}: {signs}."),
            a=Level(levels[at - 1].key),
            b=Level(lv.key),
            signs=_sign_list(lv.signs),
        )
    else:
        text.add(
            N_("The server is saturated already at the lowest rate, {b}: {signs}."),
            b=Level(lv.key),
            signs=_sign_list(lv.signs),
        )
    _evidence_words(text, lv, levels[0], data.manifest.workload.max_concurrency)
    _capacity_words(text, levels, numbers)
    timed = data.requests is not None and not data.requests.empty
    _certainty_words(text, lv, timed=timed)
    _client_behind_words(text, levels)
    return Finding(
        id="knee",
        severity="notice",
        levels=[levels[at - 1].key, lv.key] if at > 0 else [lv.key],
        numbers=numbers,
        text=text.render(),
        data=uses,
    )


def _sign_list(signs: list[str]) -> Join:
    return Join([Msg(_SIGN_NAMES[s]) for s in signs])


def _saturation_numbers(
    data: RunFrames, levels: list[_RateLevel], th: Thresholds
) -> dict[str, Any]:
    best = max((lv for lv in levels if finite(lv.completed)), key=lambda lv: lv.completed)
    return {
        "between": None,
        "saturation_level": None,
        "saturation_rate_rps": None,
        "last_kept_rate_rps": None,
        "evidence": [],
        "capacity_rps": num(best.completed, 4),
        "capacity_level": best.key,
        "offered_rps": {str(lv.key): num(lv.offered, 4) for lv in levels},
        "sent_rps": {str(lv.key): num(lv.sent, 4) for lv in levels},
        "completed_rps": {str(lv.key): num(lv.completed, 4) for lv in levels},
        "client_queue_p90_ms": {str(lv.key): num(lv.queue_p90, 3) for lv in levels},
        "server_waiting_mean": {str(lv.key): num(lv.waiting, 3) for lv in levels},
        "signs": {str(lv.key): list(lv.signs) for lv in levels},
        "client_behind": [lv.key for lv in levels if lv.client_behind],
        "follow_fraction": th.saturation_follow_fraction,
    }


def _evidence_words(text: Text, lv: _RateLevel, low: _RateLevel, cap: int | None) -> None:
    """One sentence per sign seen at the saturated level, with its numbers (``cap``: the
    workload's --max-concurrency). The completion rate is not said twice where the client
    already sent fewer."""
    if "sent" in lv.signs and cap:  # "sent" is a sign only where the cap was full
        text.add(
            N_(
                "At {b} the client sent only {sent} req/s where its schedule asked for {sched}: "
                "requests waited for a place under --max-concurrency {cap}."
            ),
            b=Level(lv.key),
            sent=Num(lv.sent, 2),
            sched=Num(lv.schedule, 2),
            cap=Num(cap, 0),
        )
    elif "completed" in lv.signs:
        text.add(
            N_(
                "At {b} only {done} req/s completed (between its first and last completion) of "
                "the {arrived} req/s sent ({share})."
            ),
            b=Level(lv.key),
            done=Num(lv.completed, 2),
            arrived=Num(lv.sent if finite(lv.sent) else lv.schedule, 2),
            share=Pct(lv.follow, 0),
        )
    if "client_queue" in lv.signs:
        text.add(
            N_("Requests waited {q} in the client at p90 before they were sent."),
            q=Ms(lv.queue_p90),
        )
    if "server_waiting" in lv.signs:
        text.add(
            N_("The server's waiting queue held {w} requests on average (at most {wmax})."),
            w=Num(lv.waiting, 1),
            wmax=Num(lv.waiting_max, 0) if finite(lv.waiting_max) else "?",
        )
    if "latency_growth" in lv.signs:
        text.add(
            N_("p50 TTFT from the schedule is {t}, {x} the {low} level's {t0}."),
            t=Ms(lv.ttft),
            x=times(lv.ttft / low.ttft),
            low=Level(low.key),
            t0=Ms(low.ttft),
        )


def _capacity_words(text: Text, levels: list[_RateLevel], numbers: dict[str, Any]) -> None:
    best = max((lv for lv in levels if finite(lv.completed)), key=lambda lv: lv.completed)
    text.add(
        N_(
            "The most it completed is {cap} req/s (at {at}, between its first and last "
            "completion): offering more only lengthens the queue, and latency from the schedule "
            "grows with the length of the run."
        ),
        cap=Num(best.completed, 2),
        at=Level(best.key),
    )
    del numbers


def _client_behind_words(text: Text, levels: list[_RateLevel]) -> None:
    """Where requests went out late with no --max-concurrency slot to wait for: the recorder
    could not keep its schedule, which no level's saturation verdict may rest on."""
    behind = [lv for lv in levels if lv.client_behind]
    if not behind:
        return
    worst = max(behind, key=lambda lv: lv.queue_p90 if finite(lv.queue_p90) else -1.0)
    text.add(
        N_(
            "At {levels} requests went out late (p90 {q} after their scheduled time at {at}) "
            "with no --max-concurrency slot to wait for: the recorder itself fell behind its "
            "schedule (a busy client machine), so those waits are the client's, not the "
            "server's, and are not counted as saturation; record with --workers or on a less "
            "loaded machine."
        ),
        levels=Join([Level(lv.key) for lv in behind]),
        q=Ms(worst.queue_p90),
        at=Level(worst.key),
    )


def _certainty_words(text: Text, lv: _RateLevel, *, timed: bool) -> None:
    strong = [s for s in lv.signs if s != "latency_growth"]
    if len(lv.signs) >= 2 and strong:
        text.add(N_("Two or more signs agree, so the saturation is certain."))
    elif strong == ["completed"] and not timed:
        text.add(
            N_(
                "Only the completion rate says so, and without request times it is the tool's "
                "completed ÷ duration, which the drain after the last send also lowers on a short "
                "level: a guess until a recording with per-request times confirms it."
            )
        )
    elif strong == ["completed"]:
        text.add(
            N_(
                "Only the completion rate says so: a short level (few requests) or a burst near "
                "its end can lower it; the server's waiting queue (/metrics) or a longer level "
                "would settle it."
            )
        )
    elif strong:
        text.add(N_("One sign says so; a second (the server's /metrics) would make it certain."))
    else:
        text.add(
            N_(
                "Only the growth of TTFT says so, and long prefills also lengthen TTFT without a "
                "queue: the saturation is likely, not certain; the server's /metrics would settle it."
            )
        )


def _unsaturated_words(text: Text, levels: list[_RateLevel], th: Thresholds) -> None:
    top = levels[-1]
    follows = [lv.follow for lv in levels if finite(lv.follow)]
    text.add(
        N_(
            "The server keeps up with every offered rate up to {top}: at each level it completed "
            "at least {frac} of the requests sent per second, and no queue grew. Its saturation "
            "rate lies above the sweep: offer higher rates to find it."
        ),
        top=Level(top.key),
        frac=Pct(min(follows) if follows else th.saturation_follow_fraction, 0),
    )
    if not any(finite(lv.waiting) for lv in levels):
        text.add(
            N_(
                "Without the server's /metrics only the client's side is known: a server queue "
                "short enough not to show in the rates would go unseen."
            )
        )


# ---------------------------------------------------------------------------------------------
# 2. Scaling against the offered rate


def rate_scaling(data: RunFrames, th: Thresholds) -> Finding:
    """Throughput from the lowest to the highest offered rate, with the requests in flight
    (measured from the trace) and what each of them makes."""
    uses = ["output throughput per level (client)", "requests in flight (trace)"]
    tput = data.col("output_throughput_tok_s")
    cs = data.concurrencies
    if tput is None or len(cs) < 2:
        text = Text().add(
            N_("Scaling cannot be measured: it needs the output throughput of two or more levels.")
        )
        return unknown("scaling", text, ["output throughput at two or more levels"], uses)
    t = [float(x) for x in tput]
    n = [streams(data, c) for c in cs]
    per = [
        a / b if finite(a) and finite(b) and b > 0 else math.nan for a, b in zip(t, n, strict=True)
    ]
    i0 = next((i for i, v in enumerate(t) if finite(v) and v > 0), None)
    if i0 is None:
        text = Text().add(N_("Scaling cannot be measured: no level completed a request."))
        return unknown("scaling", text, ["output throughput"], uses)
    eff = [p / per[i0] if finite(p) and finite(per[i0]) and per[i0] > 0 else math.nan for p in per]
    speedup = t[-1] / t[i0]
    text = Text().add(
        N_("Throughput reaches {tput} tok/s at {top}, {speedup} the {low} level's {t0} tok/s."),
        tput=tok_s(t[-1]),
        top=Level(cs[-1]),
        speedup=times(speedup),
        low=Level(cs[i0]),
        t0=tok_s(t[i0]),
    )
    if finite(per[-1]) and finite(per[i0]):
        text.add(
            N_(
                "{n} requests were in flight on average at {top} (measured from the trace), each "
                "making {per} tok/s against {per0} tok/s at {low} ({eff})."
            ),
            n=Num(n[-1], 1),
            top=Level(cs[-1]),
            per=tok_s(per[-1]),
            per0=tok_s(per[i0]),
            low=Level(cs[i0]),
            eff=Pct(eff[-1], 0),
        )
    del th
    return Finding(
        id="scaling",
        severity="info",
        numbers={
            "efficiency": per_level(data, eff),
            "speedup_max": num(speedup, 3),
            "top_concurrency": cs[-1],
            "base_concurrency": cs[i0],
            "inflight_mean": per_level(data, n, 3),
            "per_request_tok_s": per_level(data, per, 3),
            "below_threshold_at": None,
        },
        text=text.render(),
        data=uses,
    )
