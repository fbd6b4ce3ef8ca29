"""Findings 8-9 of a rate run: the recommended operating point and the SLO table by goodput.

In an open loop a level's percentiles say how slow its requests were, not how many of the
offered requests a user would have accepted: a saturated level's throughput can be the highest
while most of its requests, counted from when they were scheduled, miss the service level.
Goodput (DistServe) counts the completed requests per second that meet every term
(:func:`sweeper.analysis.slo.requests_meeting`); a level is eligible when at least
``goodput_attainment`` of its measured requests met it, and the one with the most goodput wins.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sweeper.analysis.slo import requests_meeting
from sweeper.analysis.thresholds import DEFAULT_SLO_TABLE, Thresholds
from sweeper.findings._words import Level, Msg, Num, Pct, Text, num, slo_words, tok_s, unknown
from sweeper.findings.frames import RunFrames
from sweeper.findings.model import SLO, Finding, parse_slos, slo_label
from sweeper.i18n import N_
from sweeper.units import finite


@dataclass(frozen=True)
class Goodput:
    level: int
    rps: float  # requests per second meeting every term
    share: float  # of the level's measured requests
    met: int


def usable_terms(data: RunFrames, slos: Sequence[SLO]) -> tuple[list[SLO], list[SLO]]:
    """Terms that can be judged per request (ITL terms need per-chunk gaps), and the rest."""
    has_gaps = data.gaps is not None and not data.gaps.empty
    ok = [s for s in slos if s.metric != "itl" or has_gaps]
    return ok, [s for s in slos if s not in ok]


def level_goodput(data: RunFrames, slos: Sequence[SLO]) -> dict[int, Goodput]:
    """Goodput of each level with measured requests (empty without a request frame)."""
    req = data.requests
    if req is None or req.empty or not slos:
        return {}
    measured = req[req["phase"] == "measured"]
    gaps = data.gaps
    out: dict[int, Goodput] = {}
    for level, sel in measured.groupby("concurrency", sort=True):
        key = int(level)
        owner, itl = _gaps_of(gaps, key, list(sel["request_id"]))
        good = requests_meeting(sel, slos, gap_owner=owner, gap_itl_ms=itl)
        met = int(np.count_nonzero(good))
        duration = data.value(key, "duration_s")
        rps = met / duration if finite(duration) and duration > 0 else math.nan
        out[key] = Goodput(key, rps, met / len(sel) if len(sel) else math.nan, met)
    return out


def _gaps_of(gaps: Any, level: int, ids: list[str]) -> tuple[np.ndarray, np.ndarray]:
    if gaps is None or gaps.empty:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    sel = gaps[gaps["concurrency"] == level]
    position = {rid: i for i, rid in enumerate(ids)}
    owner = sel["request_id"].map(position)
    keep = owner.notna().to_numpy()
    return owner.to_numpy()[keep].astype(np.int64), sel["itl_ms"].to_numpy(dtype=float)[keep]


def choose_by_goodput(
    goodput: dict[int, Goodput], th: Thresholds, saturated_at: int | None = None
) -> int | None:
    """The level with the most goodput among those meeting the attainment; below the
    saturation level where one of those is (a saturated level's queue grows as long as it runs:
    a short level can meet the service level that a lasting load would not)."""
    eligible = [
        g
        for g in goodput.values()
        if finite(g.share) and g.share >= th.goodput_attainment and finite(g.rps)
    ]
    lasting = [g for g in eligible if saturated_at is None or g.level < saturated_at]
    pool = lasting or eligible
    return max(pool, key=lambda g: (g.rps, -g.level)).level if pool else None


# ---------------------------------------------------------------------------------------------
# 8. Recommended operating point


def recommended_rate(
    data: RunFrames,
    th: Thresholds,
    slos: Sequence[SLO] | None,
    default: Sequence[SLO],
    *,
    saturated_at: int | None = None,
) -> Finding:
    """The level with the most goodput; ``saturated_at``: the first saturated level (the knee
    finding), past which a level's queue grows as long as it runs."""
    given = list(slos) if slos else list(default)
    use, dropped = usable_terms(data, given)
    uses = ["per-request latencies (TTFT and E2EL from the schedule)", "level durations"]
    goodput = level_goodput(data, use) if use else {}
    if not goodput:
        text = Text().add(
            N_(
                "No operating point can be recommended: goodput needs the per-request times of "
                "the service level ({slo})."
            ),
            slo=slo_words(given),
        )
        return unknown("recommended", text, ["per-request times"], uses)
    numbers: dict[str, Any] = {
        "slo": [s.label for s in use],
        "slo_dropped": [s.label for s in dropped],
        "slo_source": "user" if slos else "default",
        "basis": "goodput",
        "attainment": th.goodput_attainment,
        "goodput_rps": {str(k): num(g.rps, 4) for k, g in goodput.items()},
        "slo_met_share": {str(k): num(g.share, 4) for k, g in goodput.items()},
    }
    c = choose_by_goodput(goodput, th, saturated_at)
    text = Text()
    if c is None:
        low = min(goodput)
        text.add(
            N_(
                "No rate meets {slo} for {att} of its requests: even at {c} only {share} of "
                "them met it."
            ),
            slo=slo_words(use),
            att=Pct(th.goodput_attainment, 0),
            c=Level(low),
            share=Pct(goodput[low].share, 0),
        )
        numbers["concurrency"] = None
        return Finding(
            id="recommended",
            severity="warning",
            numbers=numbers,
            text=text.render(),
            data=uses,
            missing=[s.label for s in dropped],
        )
    _run_at_rate_words(text, data, goodput[c], numbers)
    numbers["past_saturation"] = saturated_at is not None and c >= saturated_at
    if numbers["past_saturation"]:
        text.add(
            N_(
                "{c} is past the saturation rate, though: its queue grows for as long as it runs, "
                "so its requests met the level only because the level was short."
            ),
            c=Level(c),
        )
    if not numbers["past_saturation"] or c != data.concurrencies[-1]:
        _next_rate_words(text, data, goodput, c, numbers, th)
    text.add(
        N_(
            "Service level: {slo} for each request, TTFT and E2EL counted from when the schedule "
            "sent it (goodput){default}."
        ),
        slo=slo_words(use),
        default="" if slos else Msg(N_("; the default, give --slo for your own")),
    )
    return Finding(
        id="recommended",
        severity="notice" if numbers["past_saturation"] else "info",
        levels=[c],
        numbers=numbers,
        text=text.render(),
        data=uses,
        missing=[f"{s.label} (no such data)" for s in dropped],
    )


def _run_at_rate_words(text: Text, data: RunFrames, g: Goodput, numbers: dict[str, Any]) -> None:
    tput = data.value(g.level, "output_throughput_tok_s")
    numbers.update(
        {
            "concurrency": g.level,
            "goodput_at_rps": num(g.rps, 4),
            "share_at": num(g.share, 4),
            "throughput_tok_s": num(tput, 2),
            "ttft_p99_ms": num(data.value(g.level, "ttft_p99_ms"), 2),
            "ttft_sched_p99_ms": num(data.value(g.level, "ttft_sched_p99_ms"), 2),
            "itl_p50_ms": num(data.value(g.level, "itl_p50_ms"), 3),
        }
    )
    text.add(
        N_(
            "Run at {c}: {good} req/s meet the service level ({share} of the requests), "
            "{tput} tok/s."
        ),
        c=Level(g.level),
        good=Num(g.rps, 2),
        share=Pct(g.share, 0),
        tput=tok_s(tput) if finite(tput) else "?",
    )


def _next_rate_words(
    text: Text,
    data: RunFrames,
    goodput: dict[int, Goodput],
    c: int,
    numbers: dict[str, Any],
    th: Thresholds,
) -> None:
    cs = data.concurrencies
    i = cs.index(c)
    if i + 1 >= len(cs):
        text.add(
            N_("{c} is the highest rate swept: a higher one may still meet the service level."),
            c=Level(c),
        )
        return
    n = cs[i + 1]
    g = goodput.get(n)
    if g is None:
        return
    numbers["next"] = {
        "concurrency": n,
        "goodput_rps": num(g.rps, 4),
        "slo_met_share": num(g.share, 4),
        "throughput_gain": num(
            data.value(n, "output_throughput_tok_s") / data.value(c, "output_throughput_tok_s") - 1
        ),
        "ttft_p99_ms": num(data.value(n, "ttft_p99_ms"), 2),
    }
    if g.share >= th.goodput_attainment and g.rps > goodput[c].rps:
        text.add(
            N_(
                "{n} has more goodput in this sweep ({good} req/s, {share} meeting it) but is past "
                "the saturation rate: its queue grows for as long as it runs, and its requests met "
                "the level only because the level was short."
            ),
            n=Level(n),
            share=Pct(g.share, 0),
            good=Num(g.rps, 2),
        )
    else:
        text.add(
            N_("At {n} only {share} of the requests meet it: {good} req/s of goodput."),
            n=Level(n),
            share=Pct(g.share, 0),
            good=Num(g.rps, 2),
        )


# ---------------------------------------------------------------------------------------------
# 9. SLO table


def slo_table_rate(
    data: RunFrames,
    th: Thresholds,
    slos: Sequence[SLO] | None,
    rec: int | None,
    saturated_at: int | None = None,
) -> Finding:
    """For each common service level (and the user's), the rate to choose by goodput (below the
    saturation level where one meets it, as for the recommendation)."""
    uses = ["per-request latencies (TTFT and E2EL from the schedule)", "level durations"]
    sets: list[tuple[list[SLO], str]] = [(parse_slos(t), "default") for t in DEFAULT_SLO_TABLE]
    if slos:
        sets.append((list(slos), "user"))
    rows: list[dict[str, Any]] = []
    text = Text()
    for terms, origin in sets:
        use, dropped = usable_terms(data, terms)
        goodput = level_goodput(data, use) if not dropped else {}
        c = choose_by_goodput(goodput, th, saturated_at) if goodput else None
        g = goodput.get(c) if c is not None else None
        rows.append(
            {
                "slo": slo_label(terms),
                "source": origin,
                "concurrency": c,
                "recommended": c is not None and c == rec,
                "throughput_tok_s": num(data.value(c, "output_throughput_tok_s"), 2) if c else None,
                "ttft_p99_ms": num(data.value(c, "ttft_p99_ms"), 2) if c else None,
                "itl_p50_ms": num(data.value(c, "itl_p50_ms"), 3) if c else None,
                "goodput_rps": num(g.rps, 4) if g else None,
                "slo_met_share": num(g.share, 4) if g else None,
                "no_data": not goodput,
            }
        )
        if not goodput:
            continue
        if g is None:
            text.add(N_("{slo}: no rate meets it."), slo=slo_words(terms))
        else:
            text.add(
                N_("{slo}: {c}, {good} req/s of goodput ({share} meet it)."),
                slo=slo_words(terms),
                c=Level(g.level),
                good=Num(g.rps, 2),
                share=Pct(g.share, 0),
            )
    answered = [r for r in rows if not r["no_data"]]
    if not answered:
        text = Text().add(N_("No service level can be checked: the per-request times are missing."))
        return Finding(
            id="slo_table",
            severity="unknown",
            numbers={"rows": rows, "basis": "goodput"},
            text=text.render(),
            data=uses,
            missing=["per-request times"],
        )
    text.add(
        N_(
            "Each rate is chosen by goodput, among those where {att} of the requests met the level."
        ),
        att=Pct(th.goodput_attainment, 0),
    )
    return Finding(
        id="slo_table",
        severity="info",
        levels=sorted({r["concurrency"] for r in answered if r["concurrency"]}),
        numbers={"rows": rows, "basis": "goodput"},
        text=text.render(),
        data=uses,
        missing=[f"{r['slo']} (needs per-chunk timestamps)" for r in rows if r["no_data"]],
    )
