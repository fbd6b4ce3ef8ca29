"""What to change next: the advice a run's findings support (never guesses).

Each line rests on a finding of :mod:`sweeper.findings`: the cost of the next level up
(``recommended``), the cause of the ITL tail (``tail_cause``), the server's own suggestion for the
KV cache (``memory_headroom``), and a ``--max-num-seqs`` above the KV ceiling (``kv_ceiling``).
"""

from __future__ import annotations

from collections.abc import Mapping

from sweeper.findings.levels import level_rates, level_template, level_text
from sweeper.i18n import N_, fmt_fixed, fmt_number, fmt_percent
from sweeper.report.markup import num, tr
from sweeper.report.run_report import RunReport
from sweeper.units import GIB, finite

# What to change next, by the cause sweeper.findings named for the ITL tail.
_CAUSE_ADVICE = {
    "chunked_prefill": N_(
        "The tail comes from chunked prefill: a larger --max-num-batched-tokens cuts long prompts into "
        "fewer chunks (fewer, longer stalls); a lower concurrency gives each decode step fewer prefills to wait for."
    ),
    "preemption": N_(
        "Requests are preempted because the KV cache runs out: keep concurrency at or below the KV ceiling "
        "(--max-num-seqs), or give the KV cache more memory."
    ),
    "kv_admission": N_(
        "Requests wait for KV cache space before they start: keep concurrency at or below the KV ceiling, or "
        "give the KV cache more memory."
    ),
    "max_num_seqs": N_(
        "Requests queue behind --max-num-seqs: raise it if the KV cache has room, or stop the sweep at that level."
    ),
    "lone_stream": N_(
        "The lone stream's tail has no scheduling cause: record that level again on an idle host; if it "
        "stays, it is the engine's own decode step, for a profiler to explain."
    ),
    "client_overload": N_(
        "The recording client itself was overloaded: record again with more workers or from a less busy host "
        "before trusting the tail."
    ),
}


def next_steps(run: RunReport, lang: str) -> list[str]:
    """The advice lines (plain text, not escaped), in ``lang``; empty when no finding supports one."""
    advice: list[str] = []
    saturation = _saturation_advice(run, lang)
    if saturation is not None:
        advice.append(saturation)
    else:
        advice += _next_level_advice(run, lang)
    cause = run.known("tail_cause")
    key = cause.numbers.get("cause") if cause is not None else None
    if isinstance(key, str) and key in _CAUSE_ADVICE:
        advice.append(tr(lang, _CAUSE_ADVICE[key]))
    headroom = run.known("memory_headroom")
    if headroom is not None:
        suggested = headroom.numbers.get("suggested_kv_cache_memory_bytes")
        new_ceiling = headroom.numbers.get("new_ceiling")
        if finite(suggested) and finite(new_ceiling):
            text = tr(
                lang,
                "Start the server with --kv-cache-memory={bytes} ({gib} GiB): "
                "the concurrency ceiling rises to {ceiling}.",
            )
            advice.append(
                text.format(
                    bytes=int(suggested),
                    gib=fmt_fixed(suggested / GIB, lang, 2),
                    ceiling=fmt_number(new_ceiling, lang, 0),
                )
            )
    ceiling = run.known("kv_ceiling")
    if ceiling is not None:
        limit = ceiling.numbers.get("ceiling")
        max_seqs = ceiling.numbers.get("max_num_seqs")
        if finite(limit) and finite(max_seqs) and max_seqs > limit:
            text = tr(
                lang,
                "--max-num-seqs {max_seqs} is above what the KV cache holds ({ceiling}): "
                "levels above {ceiling} queue inside the server.",
            )
            advice.append(text.format(max_seqs=int(max_seqs), ceiling=int(limit)))
    return advice


def _next_level_advice(run: RunReport, lang: str) -> list[str]:
    """What the next level up buys and costs (``recommended.next``)."""
    recommended = run.known("recommended")
    step = recommended.numbers.get("next") if recommended is not None else None
    if not (
        recommended is not None
        and isinstance(step, Mapping)
        and step.get("concurrency") is not None
        and finite(step.get("throughput_gain"))
    ):
        return []
    rates = level_rates(run.ts.manifest)
    text = level_template(
        tr(
            lang,
            "Going from C={c} to C={n} buys {gain} more throughput; p99 TTFT becomes {ttft} ms.",
        ),
        rates,
    )
    chosen = recommended.numbers.get("concurrency")
    return [
        text.format(
            c=level_text(int(chosen), rates, lang) if chosen is not None else "?",
            n=level_text(int(step["concurrency"]), rates, lang),
            gain=fmt_percent(step["throughput_gain"], lang, 0),
            ttft=num(step.get("ttft_p99_ms"), lang, 0),
        )
    ]


def _saturation_advice(run: RunReport, lang: str) -> str | None:
    """A rate sweep that saturated: what the server can take, instead of what the next rate
    up buys (its queue would grow for as long as the load lasts)."""
    knee = run.known("knee")
    rates = level_rates(run.ts.manifest)
    if not rates or knee is None or knee.numbers.get("saturation_level") is None:
        return None
    capacity = knee.numbers.get("capacity_rps")
    kept = knee.numbers.get("between")
    if not finite(capacity):
        return None
    if isinstance(kept, list) and kept:
        text = tr(
            lang,
            "Keep the offered load at or below {safe}: past it the server, which completes at "
            "most {cap} req/s, queues requests for as long as the load lasts; more load needs "
            "more capacity (another replica, a larger GPU), not a higher rate.",
        )
        return text.format(
            safe=level_text(int(kept[0]), rates, lang), cap=fmt_number(capacity, lang, 1)
        )
    text = tr(
        lang,
        "Even the lowest offered rate saturates the server, which completes at most {cap} req/s: "
        "sweep lower rates to find what it sustains.",
    )
    return text.format(cap=fmt_number(capacity, lang, 1))
