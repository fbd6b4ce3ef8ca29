"""Findings 1-4 (DESIGN.md "Findings"): the roofline, scaling, the knee and the ITL tail, plus the
helpers the other rule modules share.

One function per finding id, each reading :class:`~sweeper.findings.RunData` and the named
thresholds of :mod:`sweeper.analysis.thresholds`. Every sentence is an English gettext message (marked
with ``N_``) formatted with named placeholders; the Chinese is in the ``findings`` catalog.
"""

from __future__ import annotations

import math
from typing import Any

from sweeper.analysis.thresholds import Thresholds
from sweeper.findings._words import (
    Missing,
    Ms,
    Msg,
    Num,
    Pct,
    Text,
    num,
    per_level,
    signed_pct,
    times,
    tok_s,
    unknown,
)
from sweeper.findings.frames import (
    RunFrames,
    itl_percentiles,
    request_lengths,
    single_stream,
    stream_interval,
)
from sweeper.findings.model import Finding
from sweeper.i18n import N_
from sweeper.units import GB, finite

# ---------------------------------------------------------------------------------------------
# 1. Single stream vs the memory-bandwidth roofline


def roofline(data: RunFrames, th: Thresholds) -> Finding:
    uses = [
        "C=1 output throughput (client)",
        "hardware.memory_bandwidth_gb_s",
        "model.weight_bytes",
        "model.kv_bytes_per_token",
        "workload input/output lengths",
    ]
    bw = data.fact("hardware.memory_bandwidth_gb_s")
    weight = data.fact("model.weight_bytes")
    kv = data.fact("model.kv_bytes_per_token")
    missing = _roofline_missing(data, bw, weight, th)
    if missing:
        text = Text().add(
            N_(
                "The single stream cannot be compared with the memory-bandwidth roofline: missing {missing}."
            ),
            missing=Missing(missing),
        )
        return unknown("roofline", text, missing, uses)
    tp = data.fact("server.config.tensor_parallel_size")
    tp = int(tp) if finite(tp) and tp >= 1 else 1
    weight_read, context, per_token = _bytes_per_token(data, th, float(weight), kv)
    ideal = tp * float(bw) * GB / per_token
    # The roofline bounds decoding: compare the single stream's decode speed (its TTFT left out,
    # which matters for long prompts), else its output throughput.
    throughput = data.value(1, "output_throughput_tok_s")
    decode = data.value(1, "decode_mean_tok_s")
    measured = decode if finite(decode) else throughput
    ratio = measured / ideal
    text = Text().add(
        _ROOFLINE_DECODE if finite(decode) else _ROOFLINE_THROUGHPUT,
        measured=tok_s(measured),
        tput=tok_s(throughput),
        ratio=Pct(ratio),
        ideal=tok_s(ideal),
        bw=Num(tp * float(bw), 0),
        gb=Num(per_token / GB, 2),
        ctx=Num(context, 0),
    )
    if data.manifest.workload.open_loop:
        text.add(
            N_(
                "In this rate sweep the lowest rate, C={c}, kept {n} requests in flight on average: "
                "it stands for the single stream."
            ),
            c=1,
            n=Num(data.value(1, "inflight_mean"), 2),
        )
    return Finding(
        id="roofline",
        severity=_roofline_verdict(text, ratio, th),
        levels=[1],
        numbers={
            "ideal_tok_s": num(ideal, 2),
            "measured_tok_s": num(measured, 2),
            "throughput_tok_s": num(throughput, 2),
            "ratio": num(ratio),
            "decode_tok_s": num(decode, 2),
            "bandwidth_gb_s": num(tp * float(bw), 1),
            "bytes_per_token": num(per_token, 0),
            "weight_bytes_read": num(weight_read, 0),
            "context_tokens": num(context, 1),
            "tensor_parallel": tp,
        },
        text=text.render(),
        data=uses,
        missing=[]
        if finite(kv)
        else ["model.kv_bytes_per_token (the KV read per step is left out)"],
    )


def _roofline_missing(data: RunFrames, bw: Any, weight: Any, th: Thresholds) -> list[str]:
    missing = []
    if not finite(bw):
        missing.append(N_("the GPU's memory bandwidth (give --gpu)"))
    if not finite(weight):
        missing.append(N_("the model's weight bytes (give --model or --model-config)"))
    inflight = data.value(1, "inflight_mean")
    if data.manifest.workload.open_loop and not (
        finite(inflight) and inflight <= th.rate_single_stream_inflight
    ):
        missing.append(
            N_(
                "a single stream (the lowest rate of this rate sweep kept more than one request "
                "in flight: record a concurrency-1 level)"
            )
        )
    elif 1 not in data.concurrencies:
        missing.append(N_("a concurrency-1 level (the single stream)"))
    elif not finite(data.value(1, "output_throughput_tok_s")) and not finite(
        data.value(1, "decode_mean_tok_s")
    ):
        # a C=1 level whose requests all failed: no speed to set against the roofline
        missing.append(N_("the single stream's measured speed (C=1 completed no request)"))
    return missing


def _bytes_per_token(
    data: RunFrames, th: Thresholds, weight: float, kv: Any
) -> tuple[float, float, float]:
    """What one decode step reads: the weights (a mixture of experts: only its active experts)
    and the KV cache of the mean context; returns (weight bytes read, context tokens, bytes)."""
    total = data.fact("model.parameters")
    active = data.fact("model.active_parameters")
    weight_read = weight
    if finite(active) and finite(total) and total > 0:
        weight_read *= float(active) / float(total)
    inp, out = request_lengths(data)
    context = (inp or 0.0) + th.context_output_fraction * (out or 0.0)
    kv_read = context * float(kv) if finite(kv) else 0.0
    return weight_read, context, weight_read + kv_read


_ROOFLINE_DECODE = N_(
    "A single stream decodes at {measured} tok/s ({tput} tok/s counting its TTFT), {ratio} of the "
    "memory-bandwidth roofline of {ideal} tok/s ({bw} GB/s ÷ {gb} GB read per token: the weights "
    "plus the KV cache of a {ctx}-token context)."
)
_ROOFLINE_THROUGHPUT = N_(
    "A single stream makes {measured} tok/s, {ratio} of the memory-bandwidth roofline of {ideal} tok/s "
    "({bw} GB/s ÷ {gb} GB read per token: the weights plus the KV cache of a {ctx}-token context)."
)


def _roofline_verdict(text: Text, ratio: float, th: Thresholds) -> str:
    """What the ratio to the roofline means (a sentence), and the finding's severity."""
    if ratio >= th.roofline_close:
        text.add(
            N_(
                "Decoding is already bound by memory bandwidth: a single stream cannot get much faster "
                "on this GPU; more throughput has to come from concurrency."
            )
        )
        return "info"
    if ratio >= th.roofline_far:
        text.add(
            N_(
                "A single stream leaves part of the bandwidth unused: per-step overheads (scheduling, "
                "sampling, kernel launches) cost about as much as reading the weights."
            )
        )
        return "notice"
    text.add(
        N_(
            "A single stream is far from the bandwidth limit: something other than reading the weights "
            "(CPU, scheduling, kernel launches, the network) limits each decode step."
        )
    )
    return "warning"


# ---------------------------------------------------------------------------------------------
# 2. Scaling efficiency


def scaling(data: RunFrames, th: Thresholds) -> Finding:
    uses = ["output throughput per level (client)"]
    base = single_stream(data)
    tput = data.col("output_throughput_tok_s")
    if base is None or tput is None or len(data.concurrencies) < 2:
        text = Text().add(
            N_("Scaling cannot be measured: it needs the output throughput of two or more levels.")
        )
        return unknown("scaling", text, ["output throughput at two or more levels"], uses)
    eff = [float(t) / (c * base.tok_s) for c, t in zip(data.concurrencies, tput, strict=True)]
    top = data.concurrencies[-1]
    speedup = float(tput.iloc[-1]) / base.tok_s
    below = next(
        (
            c
            for c, e in zip(data.concurrencies, eff, strict=True)
            if finite(e) and e < th.scaling_efficiency_min
        ),
        None,
    )
    text = Text().add(
        N_(
            "Throughput reaches {tput} tok/s at C={top}: {speedup} a single stream for {top}× the concurrency, "
            "a scaling efficiency of {eff}."
        ),
        tput=tok_s(float(tput.iloc[-1])),
        top=top,
        speedup=times(speedup),
        eff=Pct(eff[-1]),
    )
    if below is not None:
        text.add(
            N_("Efficiency (throughput ÷ (C × {base} tok/s)) falls below {thr} from C={c}."),
            base=tok_s(base.tok_s),
            thr=Pct(th.scaling_efficiency_min, 0),
            c=below,
        )
    else:
        text.add(
            N_(
                "Efficiency stays at or above {thr} at every level: the sweep has not reached the limit."
            ),
            thr=Pct(th.scaling_efficiency_min, 0),
        )
    if base.concurrency != 1:
        text.add(
            N_("There is no C=1 level: the single-stream rate is estimated from C={c}."),
            c=base.concurrency,
        )
    return Finding(
        id="scaling",
        severity="notice" if below is not None else "info",
        levels=[below] if below is not None else [],
        numbers={
            "efficiency": per_level(data, eff),
            "speedup_max": num(speedup, 3),
            "top_concurrency": top,
            "single_stream_tok_s": num(base.tok_s, 3),
            "base_concurrency": base.concurrency,
            "below_threshold_at": below,
        },
        text=text.render(),
        data=uses,
    )


# ---------------------------------------------------------------------------------------------
# 3. Marginal gain per slot: the knee


def knee(data: RunFrames, th: Thresholds) -> Finding:
    uses = ["output throughput per level (client)"]
    base = single_stream(data)
    tput = data.col("output_throughput_tok_s")
    cs = data.concurrencies
    if base is None or tput is None or len(cs) < 2:
        text = Text().add(
            N_("The knee cannot be located: it needs the output throughput of two or more levels.")
        )
        return unknown("knee", text, ["output throughput at two or more levels"], uses)
    t = [float(x) for x in tput]
    gains = [(t[i + 1] - t[i]) / (cs[i + 1] - cs[i]) for i in range(len(cs) - 1)]
    limit = th.knee_marginal_fraction * base.tok_s
    at = next((i for i, g in enumerate(gains) if finite(g) and g < limit), None)
    marginal = {f"{cs[i]}-{cs[i + 1]}": num(g, 3) for i, g in enumerate(gains)}
    first_gain = (t[0] - 0.0) / cs[0]
    text = Text()
    if at is None:
        text.add(
            N_(
                "No knee within the sweep: every added concurrency slot up to C={top} still brings at least "
                "{frac} of the single stream's {base} tok/s (the last step: {last} tok/s per slot). "
                "Sweep higher to find it."
            ),
            top=cs[-1],
            frac=Pct(th.knee_marginal_fraction, 0),
            base=tok_s(base.tok_s),
            last=tok_s(gains[-1]),
        )
        return Finding(
            id="knee",
            severity="info",
            levels=[],
            numbers={
                "between": None,
                "marginal_tok_s_per_slot": marginal,
                "single_stream_tok_s": num(base.tok_s, 3),
                "threshold_tok_s": num(limit, 3),
            },
            text=text.render(),
            data=uses,
        )
    a, b = cs[at], cs[at + 1]
    text.add(
        N_(
            "The knee lies between C={a} and C={b}: from C={a} to C={b} each added concurrency slot brings "
            "{gain} tok/s, less than {frac} of the single stream's {base} tok/s."
        ),
        a=a,
        b=b,
        gain=tok_s(gains[at]),
        frac=Pct(th.knee_marginal_fraction, 0),
        base=tok_s(base.tok_s),
    )
    if at > 0:
        text.add(N_("Before it a slot still brought {gain} tok/s."), gain=tok_s(gains[at - 1]))
    if at < len(gains) - 1 and gains[-1] < 0:
        text.add(
            N_("By the last step, C={y} to C={z}, throughput falls: {gain} tok/s per added slot."),
            y=cs[-2],
            z=cs[-1],
            gain=tok_s(gains[-1]),
        )
    elif at < len(gains) - 1:
        text.add(
            N_(
                "By the last step, C={y} to C={z}, a slot brings only {gain} tok/s ({share} of the first)."
            ),
            y=cs[-2],
            z=cs[-1],
            gain=tok_s(gains[-1]),
            share=Pct(gains[-1] / first_gain if first_gain else math.nan, 0),
        )
    return Finding(
        id="knee",
        severity="notice",
        levels=[a, b],
        numbers={
            "between": [a, b],
            "marginal_tok_s_per_slot": marginal,
            "gain_at_knee_tok_s": num(gains[at], 3),
            "single_stream_tok_s": num(base.tok_s, 3),
            "threshold_tok_s": num(limit, 3),
        },
        text=text.render(),
        data=uses,
    )


# ---------------------------------------------------------------------------------------------
# 4. ITL tail


def _per_token_words(data: RunFrames, text: Text) -> None:
    """Where chunks carry several tokens, say that ITL (here, in the SLOs and in the operating
    point) is per token, and what the gap between chunks is."""
    if not data.itl_per_token:
        return
    interval = stream_interval(data)
    top = data.concurrencies[-1]
    text.add(
        N_(
            "Chunks carry ~{n} tokens{interval}, so ITL here, in the service levels and in the "
            "operating point is per token (each gap divided by the tokens its chunk carried); "
            "between chunks p50 is {chunk} at C={c}."
        ),
        n=Num(data.tokens_per_chunk, 0),
        interval=Msg(N_(" (server stream interval {k})"), {"k": Num(interval, 0)})
        if finite(interval)
        else "",
        chunk=Ms(data.chunk_gap(top, "p50")),
        c=top,
    )


def tail_levels(data: RunFrames, th: Thresholds) -> list[int]:
    itl = itl_percentiles(data)
    if itl is None:
        return []
    p50, _, p99 = itl
    return [
        c
        for c, a, b in zip(data.concurrencies, p50, p99, strict=True)
        if finite(a) and finite(b) and a > 0 and b / a >= th.itl_tail_ratio
    ]


def itl_tail(data: RunFrames, th: Thresholds) -> Finding:
    uses = ["per-token chunk arrival times (ITL percentiles per level)"]
    itl = itl_percentiles(data)
    if itl is None:
        text = Text().add(
            N_(
                "The ITL tail cannot be measured: ITL needs per-token (per-chunk) timestamps, and this "
                "trace set has per-request times only."
            )
        )
        return unknown("itl_tail", text, ["per-chunk timestamps (ITL)"], uses)
    p50, _, p99 = itl
    cs = data.concurrencies
    ratio = [
        b / a if finite(a) and finite(b) and a > 0 else math.nan
        for a, b in zip(p50, p99, strict=True)
    ]
    ratios = [(r, c) for r, c in zip(ratio, cs, strict=True) if finite(r)]
    if not ratios:
        text = Text().add(N_("The ITL tail cannot be measured: no level has ITL percentiles."))
        return unknown("itl_tail", text, ["ITL percentiles"], uses)
    max_ratio, max_at = max(ratios)
    opened = tail_levels(data, th)
    opens_at = opened[0] if opened else None
    i_first = next(i for i, v in enumerate(p50) if finite(v))
    i_last = max(i for i, v in enumerate(p50) if finite(v))
    text = Text()
    if opens_at is not None:
        i = cs.index(opens_at)
        if i > 0 and finite(p99[i - 1]):
            text.add(
                N_(
                    "The ITL tail opens at C={c}: p99 ITL jumps from {prev} at C={pc} to {p99} ({jump} in one "
                    "step) while p50 ITL is {p50}."
                ),
                c=opens_at,
                prev=Ms(p99[i - 1]),
                pc=cs[i - 1],
                p99=Ms(p99[i]),
                jump=times(p99[i] / p99[i - 1]),
                p50=Ms(p50[i]),
            )
        else:
            text.add(
                N_(
                    "The ITL tail is open from the first level, C={c}: p99 ITL {p99} against a p50 of {p50}."
                ),
                c=opens_at,
                p99=Ms(p99[i]),
                p50=Ms(p50[i]),
            )
    else:
        text.add(
            N_("The ITL tail stays closed: p99 ITL stays under {thr} the p50 at every level."),
            thr=times(th.itl_tail_ratio),
        )
    if i_last == i_first:
        text.add(N_("p99/p50 is {ratio}, which a mean hides."), ratio=times(max_ratio))
    else:
        text.add(
            N_(
                "From C={a} to C={b}, p50 ITL goes from {p50a} to {p50b} ({change}); the largest p99/p50 ratio is "
                "{ratio} at C={at}, which a mean hides."
            ),
            a=cs[i_first],
            b=cs[i_last],
            p50a=Ms(p50[i_first]),
            p50b=Ms(p50[i_last]),
            change=signed_pct(p50[i_last] / p50[i_first] - 1),
            ratio=times(max_ratio),
            at=max_at,
        )
    _per_token_words(data, text)
    return Finding(
        id="itl_tail",
        severity="warning" if opens_at is not None else "info",
        levels=opened,
        numbers={
            "ratio_p99_p50": per_level(data, ratio, 3),
            "opens_at": opens_at,
            "max_ratio": num(max_ratio, 3),
            "max_ratio_at": max_at,
            "itl_p50_ms": per_level(data, p50, 3),
            "itl_p99_ms": per_level(data, p99, 3),
            "threshold_ratio": th.itl_tail_ratio,
            "itl_basis": "per_token" if data.itl_per_token else "per_chunk",
            "tokens_per_chunk": num(data.tokens_per_chunk, 2),
            "stream_interval": num(stream_interval(data), 0),
        },
        text=text.render(),
        data=uses,
    )
