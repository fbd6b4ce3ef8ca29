"""Findings 8-10: the recommended operating point, the SLO table, and why per-request speed drops
with concurrency (the long-input question)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from sweeper.analysis.tail_signature import PREEMPTION, PREFILL, UNEXPLAINED
from sweeper.analysis.thresholds import DEFAULT_SLO_TABLE, Thresholds
from sweeper.findings._words import (
    Join,
    Ms,
    Msg,
    Num,
    Pct,
    Text,
    num,
    per_level,
    signed_pct,
    slo_words,
    times,
    tok_s,
    unknown,
)
from sweeper.findings.frames import RunFrames, single_stream
from sweeper.findings.goodput import level_goodput, usable_terms
from sweeper.findings.model import SLO, Finding, parse_slos, slo_label
from sweeper.findings.scaling import tail_levels
from sweeper.i18n import N_
from sweeper.units import finite

# ---------------------------------------------------------------------------------------------
# 8. Recommended operating point, 9. SLO table


def default_recommend_slos(th: Thresholds) -> list[SLO]:
    return [
        SLO(metric="ttft", stat="p99", bound_ms=th.recommend_ttft_p99_ms),
        SLO(metric="itl", stat="p50", bound_ms=th.recommend_itl_p50_ms),
    ]


def _usable_slos(data: RunFrames, slos: Sequence[SLO]) -> tuple[list[SLO], list[SLO]]:
    """Terms whose column exists (ITL terms vanish on per-request data), and the rest."""
    ok: list[SLO] = []
    dropped: list[SLO] = []
    for s in slos:
        (ok if data.col(s.column) is not None else dropped).append(s)
    return ok, dropped


def choose_level(data: RunFrames, slos: Sequence[SLO]) -> int | None:
    """The highest-throughput level meeting every term."""
    best, best_t = None, -math.inf
    for _, row in data.levels.iterrows():
        t = row.get("output_throughput_tok_s")
        if not finite(t) or not all(s.met(row) for s in slos):
            continue
        if float(t) > best_t:
            best, best_t = int(row["concurrency"]), float(t)
    return best


def recommended(data: RunFrames, th: Thresholds, slos: Sequence[SLO] | None) -> Finding:
    given = list(slos) if slos else default_recommend_slos(th)
    use, dropped = _usable_slos(data, given)
    uses = ["throughput and latency percentiles per level (client)"]
    base = single_stream(data)
    if base is None or not use:
        return _cannot_recommend(given, dropped, uses)
    c = choose_level(data, use)
    numbers: dict[str, Any] = {
        "slo": [s.label for s in use],
        "slo_dropped": [s.label for s in dropped],
        "slo_source": "user" if slos else "default",
    }
    if c is None:
        return _no_level_meets(data, use, dropped, numbers, uses)
    tput = data.value(c, "output_throughput_tok_s")
    speedup = tput / base.tok_s
    itl1 = data.value(base.concurrency, "itl_p50_ms")
    numbers.update(_operating_point_numbers(data, c, tput, speedup))
    text = Text()
    _run_at_words(text, data, c, tput, speedup, itl1)
    _next_level_words(text, numbers, data, th, use, c, tput)
    if slos:
        text.add(N_("Service level: {slo}."), slo=slo_words(use))
        _goodput_words(text, numbers, data, use, c)
    else:
        text.add(
            N_("Service level: {slo} (the default; give --slo for your own)."), slo=slo_words(use)
        )
    return Finding(
        id="recommended",
        severity="info",
        levels=[c],
        numbers=numbers,
        text=text.render(),
        data=uses,
        missing=[f"{s.label} (no such data)" for s in dropped],
    )


def _goodput_words(
    text: Text, numbers: dict[str, Any], data: RunFrames, use: Sequence[SLO], c: int
) -> None:
    """With the user's --slo, the goodput of each level beside the choice by percentiles: the
    completed requests per second that met every term, each request judged on its own."""
    goodput = level_goodput(data, usable_terms(data, use)[0])
    if c not in goodput or not finite(goodput[c].rps):
        return
    numbers["goodput_rps"] = {str(k): num(g.rps, 4) for k, g in goodput.items()}
    numbers["slo_met_share"] = {str(k): num(g.share, 4) for k, g in goodput.items()}
    text.add(
        N_("Judged per request, {share} of the requests at C={c} met it: {good} req/s of goodput."),
        share=Pct(goodput[c].share, 0),
        c=c,
        good=Num(goodput[c].rps, 2),
    )


def _cannot_recommend(given: Sequence[SLO], dropped: Sequence[SLO], uses: list[str]) -> Finding:
    text = Text().add(
        N_(
            "No operating point can be recommended: it needs throughput and the latencies of the "
            "service level ({slo})."
        ),
        slo=slo_words(given),
    )
    return unknown(
        "recommended",
        text,
        [f"level_frame.{s.column}" for s in dropped] or ["throughput"],
        uses,
    )


def _no_level_meets(
    data: RunFrames,
    use: Sequence[SLO],
    dropped: Sequence[SLO],
    numbers: dict[str, Any],
    uses: list[str],
) -> Finding:
    low = data.concurrencies[0]
    text = Text().add(
        N_("No level meets {slo}: even C={c} has p99 TTFT {ttft} and p50 ITL {itl}."),
        slo=slo_words(use),
        c=low,
        ttft=_ms_or_q(data.value(low, "ttft_p99_ms")),
        itl=_ms_or_q(data.value(low, "itl_p50_ms")),
    )
    numbers.update({"concurrency": None})
    return Finding(
        id="recommended",
        severity="warning",
        numbers=numbers,
        text=text.render(),
        data=uses,
        missing=[s.label for s in dropped],
    )


def _operating_point_numbers(
    data: RunFrames, c: int, tput: float, speedup: float
) -> dict[str, Any]:
    v = lambda name: data.value(c, name)  # noqa: E731
    return {
        "concurrency": c,
        "throughput_tok_s": num(tput, 2),
        "speedup": num(speedup, 3),
        "ttft_p50_ms": num(v("ttft_p50_ms"), 2),
        "ttft_p99_ms": num(v("ttft_p99_ms"), 2),
        "itl_p50_ms": num(v("itl_p50_ms"), 3),
        "itl_p99_ms": num(v("itl_p99_ms"), 3),
        "tpot_p50_ms": num(v("tpot_p50_ms"), 3),
        "e2el_p50_ms": num(v("e2el_p50_ms"), 1),
    }


def _run_at_words(
    text: Text, data: RunFrames, c: int, tput: float, speedup: float, itl1: float
) -> None:
    """The recommendation itself: level, throughput, and its ITL against a single stream's."""
    itl = data.value(c, "itl_p50_ms")
    ttft = _ms_or_q(data.value(c, "ttft_p99_ms"))
    if finite(itl) and finite(itl1) and itl < itl1 * 1.005:
        # Not slower than one stream (to the percent shown): "-3% slower" would read wrong.
        text.add(
            N_(
                "Run at C={c}: {tput} tok/s, {speedup} a single stream, with p50 ITL {itl} (no slower "
                "than a single stream) and p99 TTFT {ttft}."
            ),
            c=c,
            tput=tok_s(tput),
            speedup=times(speedup),
            itl=Ms(itl),
            ttft=ttft,
        )
    elif finite(itl) and finite(itl1) and itl1 > 0:
        text.add(
            N_(
                "Run at C={c}: {tput} tok/s, {speedup} a single stream, with p50 ITL {itl} ({slower} slower than "
                "a single stream) and p99 TTFT {ttft}."
            ),
            c=c,
            tput=tok_s(tput),
            speedup=times(speedup),
            itl=Ms(itl),
            slower=Pct(itl / itl1 - 1, 0),
            ttft=ttft,
        )
    else:
        text.add(
            N_("Run at C={c}: {tput} tok/s, {speedup} a single stream, with p99 TTFT {ttft}."),
            c=c,
            tput=tok_s(tput),
            speedup=times(speedup),
            ttft=ttft,
        )


def _next_level_words(
    text: Text,
    numbers: dict[str, Any],
    data: RunFrames,
    th: Thresholds,
    use: Sequence[SLO],
    c: int,
    tput: float,
) -> None:
    """What the next level up would gain and cost (``numbers["next"]``)."""
    cs = data.concurrencies
    i = cs.index(c)
    if i + 1 >= len(cs):
        text.add(
            N_(
                "C={c} is the highest level swept: throughput may keep growing beyond it within the same service "
                "level."
            ),
            c=c,
        )
        return
    n = cs[i + 1]
    gain = data.value(n, "output_throughput_tok_s") / tput - 1
    t0, t1 = data.value(c, "ttft_p99_ms"), data.value(n, "ttft_p99_ms")
    breaks = [s.label for s in use if not s.met(data.levels.iloc[i + 1])]
    numbers["next"] = {
        "concurrency": n,
        "throughput_gain": num(gain),
        "ttft_p99_ms": num(t1, 2),
        "ttft_p99_ratio": num(t1 / t0 if finite(t0) and t0 > 0 else math.nan, 3),
        "itl_p50_ms": num(data.value(n, "itl_p50_ms"), 3),
        "breaks": breaks,
    }
    if not (finite(t0) and finite(t1) and t0 > 0):
        return
    ratio = t1 / t0
    lo, hi = th.ttft_doubling_band
    if lo <= ratio <= hi:
        text.add(
            N_(
                "Going up to C={n} gains {gain} more throughput, at the cost of p99 TTFT doubling to {t1}."
            ),
            n=n,
            gain=Pct(gain, 0),
            t1=Ms(t1),
        )
    else:
        text.add(
            N_(
                "Going up to C={n} gains {gain} more throughput, at the cost of p99 TTFT going to {t1} "
                "({ratio})."
            ),
            n=n,
            gain=Pct(gain, 0),
            t1=Ms(t1),
            ratio=times(ratio),
        )


def _ms_or_q(ms: float) -> Any:
    return Ms(ms) if finite(ms) else "?"


def slo_table(data: RunFrames, th: Thresholds, slos: Sequence[SLO] | None) -> Finding:
    uses = ["throughput and latency percentiles per level (client)"]
    sets: list[tuple[list[SLO], str]] = [
        (parse_slos(term), "default") for term in DEFAULT_SLO_TABLE
    ]
    if slos:
        sets.append((list(slos), "user"))
    rec = choose_level(
        data, _usable_slos(data, list(slos) if slos else default_recommend_slos(th))[0]
    )
    rows: list[dict[str, Any]] = []
    text = Text()
    for terms, origin in sets:
        use, dropped = _usable_slos(data, terms)
        if dropped:
            rows.append(
                {
                    "slo": slo_label(terms),
                    "source": origin,
                    "concurrency": None,
                    "throughput_tok_s": None,
                    "ttft_p99_ms": None,
                    "itl_p50_ms": None,
                    "recommended": False,
                    "no_data": True,
                }
            )
            continue
        c = choose_level(data, use)
        row = {
            "slo": slo_label(terms),
            "source": origin,
            "concurrency": c,
            "recommended": c is not None and c == rec,
            "throughput_tok_s": num(data.value(c, "output_throughput_tok_s"), 2) if c else None,
            "ttft_p99_ms": num(data.value(c, "ttft_p99_ms"), 2) if c else None,
            "itl_p50_ms": num(data.value(c, "itl_p50_ms"), 3) if c else None,
            "no_data": False,
        }
        rows.append(row)
        if c is None:
            text.add(N_("{slo}: no level meets it."), slo=slo_words(terms))
        else:
            text.add(
                N_("{slo}: C={c}, {tput} tok/s."),
                slo=slo_words(terms),
                c=c,
                tput=tok_s(data.value(c, "output_throughput_tok_s")),
            )
    answered = [r for r in rows if not r["no_data"]]
    if not answered:
        text = Text().add(
            N_("No service level can be checked: the latency percentiles are missing.")
        )
        return Finding(
            id="slo_table",
            severity="unknown",
            numbers={"rows": rows},
            text=text.render(),
            data=uses,
            missing=["latency percentiles per level"],
        )
    missing = [f"{r['slo']} (needs per-chunk timestamps)" for r in rows if r["no_data"]]
    return Finding(
        id="slo_table",
        severity="info",
        levels=sorted({r["concurrency"] for r in answered if r["concurrency"]}),
        numbers={"rows": rows},
        text=text.render(),
        data=uses,
        missing=missing,
    )


# ---------------------------------------------------------------------------------------------
# 10. Long inputs: why per-request speed drops


def long_input(data: RunFrames, th: Thresholds, tail_cause: str | None = None) -> Finding:
    """Why per-request speed drops; ``tail_cause`` (the tail_cause finding's cause) names the
    long stalls inside decoding."""
    uses = ["per-request generation speed and E2EL split per level (client)"]
    gen = data.col("gen_mean_tok_s")
    per_gpu = data.col("output_throughput_per_gpu_tok_s")
    cs = data.concurrencies
    if gen is None or len(cs) < 2:
        text = Text().add(
            N_(
                "Per-request speed across levels cannot be compared: it needs per-request times at two "
                "or more levels."
            )
        )
        return unknown(
            "long_input", text, ["per-request TTFT and E2EL at two or more levels"], uses
        )
    base_c = cs[0]
    g0 = float(gen.iloc[0])
    drops, i = _largest_drop(gen, g0)
    c = cs[i]
    prompt = data.value(c, "prompt_tokens_mean")
    # Where the tail opened, its long gaps are blamed as the tail-cause finding blames them;
    # elsewhere the stalls are the ordinary spread of the gaps, named after the tail's cause.
    shares = _stall_shares(data, c, th) if c in tail_levels(data, th) else None
    parts = _attribution(data, base_c, c, tail_cause, shares)
    server_used = parts.pop("_server")
    if server_used:
        uses.append("server queue / prefill / decode histograms")
    numbers: dict[str, Any] = {
        "gen_tok_s": per_level(data, gen, 3),
        "per_gpu_tok_s": per_level(data, per_gpu, 3),
        "base_concurrency": base_c,
        "concurrency": c,
        "speed_drop": num(drops[i]),
        "prompt_tokens_mean": num(prompt, 1),
        "long_input": bool(finite(prompt) and prompt >= th.long_input_tokens),
        "added_s": num(parts.get("added_s"), 4),
        "attribution": {k: num(v, 4) for k, v in parts.items() if k != "added_s"},
        "attribution_source": "server" if server_used else "client",
    }
    text = Text()
    if per_gpu is not None:
        falls = N_(
            "Per-request generation speed (output tokens ÷ E2EL) falls from {g0} tok/s at C={c0} to {g1} "
            "tok/s at C={c1} ({drop}), while throughput per GPU goes from {p0} to {p1} tok/s."
        )
        rises = N_(
            "Per-request generation speed (output tokens ÷ E2EL) rises from {g0} tok/s at C={c0} to {g1} "
            "tok/s at C={c1} ({drop}), while throughput per GPU goes from {p0} to {p1} tok/s."
        )
        text.add(
            rises if drops[i] < 0 else falls,
            g0=tok_s(g0),
            c0=base_c,
            g1=tok_s(float(gen.iloc[i])),
            c1=c,
            drop=signed_pct(-drops[i]),
            p0=tok_s(float(per_gpu.iloc[0])),
            p1=tok_s(float(per_gpu.iloc[i])),
        )
    if finite(prompt):
        out_tokens = data.value(c, "output_tokens_mean")
        text.add(
            N_("Requests carry {p} prompt tokens on average for {o} output tokens."),
            p=Num(prompt, 0),
            o=Num(out_tokens, 0) if finite(out_tokens) else "?",
        )
    dominant = _added_time_words(text, c, parts, advise=drops[i] >= th.speed_drop_notice)
    if dominant is not None:
        numbers["dominant"] = dominant
    if per_gpu is not None:
        _plateau_words(text, data, gen, per_gpu, th)
    return Finding(
        id="long_input",
        severity="notice" if drops[i] >= th.speed_drop_notice else "info",
        levels=[base_c, c],
        numbers=numbers,
        text=text.render(),
        data=uses,
        missing=[] if server_used else ["server queue/prefill/decode histograms (/metrics)"],
    )


def _largest_drop(gen: pd.Series, g0: float) -> tuple[list[float], int]:
    """Each level's drop in per-request speed from the first level's, and the level to explain:
    the largest drop (the top level when no level is slower than the first)."""
    drops = [(g0 - float(g)) / g0 if finite(g) and g0 > 0 else -math.inf for g in gen]
    i = int(np.argmax(drops))
    if i == 0:
        i = len(drops) - 1
    return drops, i


_PART_NAMES = {
    "queueing": N_("queueing"),
    "prefill_interference": N_("prefill interference"),
    "decode_slowdown": N_("slower decode steps"),
    "waiting_for_first_token": N_("waiting for the first token (queue + prefill)"),
    "decode_total": N_("slower decoding"),
    "preemption_stalls": N_("stalls from preemption"),
    "decode_stalls": N_("long stalls in decoding"),
}
_ADVICE = {
    "queueing": N_(
        "Requests wait for a slot (KV cache or max_num_seqs is full): more concurrency only adds "
        "waiting."
    ),
    "waiting_for_first_token": N_(
        "Most of the added time passes before the first token (queueing or "
        "prefill): scrape the server's /metrics to tell the two apart."
    ),
    "prefill_interference": N_(
        "Other requests' prefills slow the streams that are decoding: each prefill chunk "
        "shares a step with them; a larger --max-num-batched-tokens shortens each "
        "prefill, fewer concurrent long prompts or a separate prefill pool remove the "
        "interference."
    ),
    "decode_slowdown": N_(
        "Each decode step is slower with more streams (more KV cache read per step): the "
        "cost of batching, not a fault."
    ),
    "decode_total": N_(
        "The time goes into decoding; without per-token timestamps it cannot be split into "
        "prefill stalls and slower steps."
    ),
    "preemption_stalls": N_(
        "Preempted requests lose their KV cache and are recomputed: a larger KV cache or "
        "fewer concurrent requests avoid it."
    ),
    "decode_stalls": N_(
        "Long stalls interrupt decoding; the tail-cause finding says what is known of them."
    ),
}
"""What to do about each part of the added time, said when the speed drop is large enough."""


def _added_time_words(text: Text, c: int, parts: dict[str, Any], *, advise: bool) -> str | None:
    """Where each request's added time at C=c goes, as shares (and, with ``advise``, what to do
    about the largest); returns the largest part's name, None when no time was added."""
    added = parts.get("added_s", math.nan)
    shares = {k: v for k, v in parts.items() if k != "added_s"}
    if not (finite(added) and added > 0 and shares):
        return None
    pos = {k: max(v, 0.0) for k, v in shares.items() if finite(v)}
    total = sum(pos.values()) or 1.0
    share_words = [
        Msg(N_("{share} {what}"), {"share": Pct(v / total, 0), "what": Msg(_PART_NAMES[k])})
        for k, v in sorted(pos.items(), key=lambda kv: -kv[1])
    ]
    text.add(
        N_("Each request takes {added} longer at C={c}: {parts}."),
        added=Ms(added * 1e3),
        c=c,
        parts=Join(share_words),
    )
    dominant = max(pos, key=lambda k: pos[k])
    if advise:
        text.add(_ADVICE[dominant])
    return dominant


def _plateau_words(
    text: Text, data: RunFrames, gen: pd.Series, per_gpu: pd.Series, th: Thresholds
) -> None:
    """Speed flat between the two top levels while throughput grows: the server had room."""
    cs = data.concurrencies
    ga, gb = float(gen.iloc[-2]), float(gen.iloc[-1])
    ta, tb = float(per_gpu.iloc[-2]), float(per_gpu.iloc[-1])
    if (
        finite(ga)
        and finite(gb)
        and ga > 0
        and abs(gb / ga - 1) < th.plateau_speed_change
        and finite(ta)
        and ta > 0
        and tb / ta - 1 > th.plateau_throughput_gain
    ):
        text.add(
            N_(
                "From C={a} to C={b} per-request speed barely changes ({ga} → {gb} tok/s) while throughput "
                "per GPU grows {gain}: at C={a} the server was not saturated."
            ),
            a=cs[-2],
            b=cs[-1],
            ga=tok_s(ga),
            gb=tok_s(gb),
            gain=Pct(tb / ta - 1, 0),
        )


_STALL_KEY = {"chunked_prefill": "prefill_interference", "preemption": "preemption_stalls"}
_LEAST_PART = 0.005  # a cause holding less of the stall time than this is not listed
_STALL_PARTS = {
    PREFILL: "prefill_interference",
    PREEMPTION: "preemption_stalls",
    UNEXPLAINED: "decode_stalls",
}


def _stall_shares(data: RunFrames, concurrency: int, th: Thresholds) -> dict[str, float] | None:
    """How the time the long gaps add at one level splits between their causes, by the same
    attribution as the tail-cause finding; None without per-chunk gaps there."""
    found = data.attribution(concurrency, th)
    if found is None or found.total_excess_ms <= 0:
        return None
    return {k: v / found.total_excess_ms for k, v in found.excess_ms.items()}


def _attribution(
    data: RunFrames,
    c0: int,
    c1: int,
    tail_cause: str | None,
    stall_shares: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Where the added time per request goes, between levels c0 and c1 (seconds): queueing and
    own prefill (server histograms) or the wait for the first token (client), slower decode
    steps (the median gap grew) and long stalls (the mean gap grew beyond the median). The
    stalls are split by what the long gaps at c1 are blamed on (``stall_shares``, the tail-cause
    attribution), else named after the tail's cause."""
    v = data.value
    e0, e1 = v(c0, "e2el_mean_ms"), v(c1, "e2el_mean_ms")
    added = (e1 - e0) / 1e3 if finite(e0) and finite(e1) else math.nan
    out: dict[str, Any] = {"added_s": added, "_server": False}
    tokens = v(c1, "output_tokens_mean")
    steps = tokens - 1 if finite(tokens) else math.nan
    itl0, itl1 = v(c0, "itl_p50_ms"), v(c1, "itl_p50_ms")
    tp0, tp1 = v(c0, "tpot_mean_ms"), v(c1, "tpot_mean_ms")
    sq0, sq1 = (
        data.server_value(c0, "queue_time_mean_ms"),
        data.server_value(c1, "queue_time_mean_ms"),
    )
    sp0, sp1 = (
        data.server_value(c0, "prefill_time_mean_ms"),
        data.server_value(c1, "prefill_time_mean_ms"),
    )
    if all(finite(x) for x in (sq0, sq1, sp0, sp1)):
        out["_server"] = True
        out["queueing"] = (sq1 - sq0) / 1e3
        own_prefill = (sp1 - sp0) / 1e3
    else:
        t0, t1 = v(c0, "ttft_mean_ms"), v(c1, "ttft_mean_ms")
        if finite(t0) and finite(t1):
            out["waiting_for_first_token"] = (t1 - t0) / 1e3
        own_prefill = 0.0
    if all(finite(x) for x in (itl0, itl1, tp0, tp1, steps)):
        slower_steps = (itl1 - itl0) * steps / 1e3
        stalls = ((tp1 - itl1) - (tp0 - itl0)) * steps / 1e3
        out["decode_slowdown"] = slower_steps
        if stall_shares is not None:
            for cause, share in stall_shares.items():
                if share >= _LEAST_PART:
                    key = _STALL_PARTS[cause]
                    out[key] = out.get(key, 0.0) + stalls * share
        else:
            out[_STALL_KEY.get(tail_cause or "", "decode_stalls")] = stalls
        if own_prefill:
            out["prefill_interference"] = out.get("prefill_interference", 0.0) + own_prefill
    elif all(finite(x) for x in (tp0, tp1, steps)):
        out["decode_total"] = (tp1 - tp0) * steps / 1e3
        if own_prefill:
            out["prefill_interference"] = own_prefill
    return out
