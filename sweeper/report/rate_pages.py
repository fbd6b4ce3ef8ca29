"""The parts of a run's page that only rate sweeps and multi-turn sessions have: the levels as
chart data named by their offered rate, the offered-against-achieved section, and TTFT by turn
with the server's prefix-cache hit rate.

A page (:class:`sweeper.report.pages`'s) is passed in; nothing here changes a closed-loop page
without turns: :func:`chart_levels` gives its frame back as it is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Protocol

import pandas as pd

from sweeper.analysis.frames import turn_frame
from sweeper.findings.levels import LevelRates, level_name
from sweeper.i18n import fmt_fixed, fmt_number, fmt_percent, join_list
from sweeper.report import charts
from sweeper.report.markup import esc, num, table, tr
from sweeper.report.run_report import RunReport
from sweeper.units import finite


class PageLike(Protocol):
    run: RunReport
    lang: str

    @property
    def rates(self) -> LevelRates: ...

    def add(self, *blocks: str) -> None: ...
    def heading(self, text: str, level: int = 2) -> None: ...
    def figure(self, title: str, chart: Any, caption: str) -> None: ...
    def draw(self, key: str, draw: Any, *args: Any, labels: Any = None, **kwargs: Any) -> Any: ...
    def finding(self, finding_id: str) -> bool: ...
    def name(self, level: int) -> str: ...


def chart_levels(levels: pd.DataFrame, rates: LevelRates, lang: str) -> pd.DataFrame:
    """The level frame as the charts read it: a rate run's levels get ``level_label`` (their
    name in ``lang``) and ``rate_x`` (where the offered rate is drawn); a closed loop's frame is
    returned as it is."""
    if not rates or levels.empty:
        return levels
    keys = [int(c) for c in levels["concurrency"]]
    offered = [rates.get(k, math.nan) for k in keys]
    return levels.assign(
        **{
            charts.RATE_LABEL: [level_name(k, rates, lang) for k in keys],
            charts.RATE_X: charts.rate_positions(offered),
        }
    )


def _rate_frame(page: PageLike, levels: pd.DataFrame) -> pd.DataFrame:
    """Offered, sent and completed requests per second per level. Sent: the knee finding's, else
    the level frame's achieved rate; ``burst`` marks the all-at-once level, whose sent rate is
    only how fast one burst left the client. Completed: the level frame's
    ``request_throughput_rps`` (completed ÷ duration_s), the rate the summary and goodput use."""
    knee = page.run.finding("knee")
    given = knee.numbers.get("sent_rps") if knee is not None else None

    def sent(row: pd.Series) -> float:
        value = given.get(str(int(row["concurrency"]))) if isinstance(given, Mapping) else None
        if not finite(value):
            value = row.get("achieved_rate_rps")
        return float(value) if finite(value) else math.nan

    offered = [page.rates.get(int(c), math.nan) for c in levels["concurrency"]]
    completed = levels.get("request_throughput_rps", pd.Series(math.nan, index=levels.index))
    return pd.DataFrame(
        {
            "concurrency": levels["concurrency"].to_numpy(),
            charts.RATE_LABEL: levels[charts.RATE_LABEL].to_numpy(),
            charts.RATE_X: levels[charts.RATE_X].to_numpy(),
            "offered_rps": [r if math.isfinite(r) else math.nan for r in offered],
            "sent_rps": [sent(row) for _, row in levels.iterrows()],
            "completed_rps": pd.to_numeric(completed, errors="coerce").to_numpy(dtype=float),
            "burst": [math.isinf(r) for r in offered],
        }
    )


def rate_follow_section(page: PageLike, levels: pd.DataFrame) -> None:
    """Offered against achieved rate, and the scaling finding of a rate sweep."""
    lang = page.lang
    page.heading(tr(lang, "Offered against achieved rate"))
    frame = _rate_frame(page, levels)
    # The all-at-once level's sent rate (thousands per second: one burst) would stretch the log
    # axis over everything else; its completed point stays.
    frame.loc[frame["burst"], "sent_rps"] = math.nan
    if frame[["sent_rps", "completed_rps"]].notna().any().any():
        page.figure(
            tr(lang, "Requests per second: offered, sent, completed"),
            page.draw("rate_follow", charts.chart_rate_follow, frame),
            tr(
                lang,
                "Log-log axes. The dashed diagonal is the offered rate; sent is what the client "
                "sent per second, completed what the server finished per second (completed "
                "requests ÷ the level's duration, as in the summary). Where completed leaves the "
                "diagonal, the server has saturated; all at once is drawn at the right end, with "
                "no sent point: it sends everything in one burst.",
            ),
        )
    page.finding("scaling")
    page.heading(tr(lang, "Latency against offered rate"))
    page.figure(
        tr(lang, "TTFT from the schedule against the offered rate"),
        page.draw("rate_latency", charts.chart_rate_latency, levels),
        tr(
            lang,
            "Log-log axes. TTFT counted from when the schedule said to send (what a user waits, "
            "the client's queue included): flat while the server keeps up, rising steeply past "
            "its saturation rate.",
        ),
    )


# ---------------------------------------------------------------------------------------------
# Multi-turn sessions


def turns_section(page: PageLike) -> None:
    """TTFT by turn (when the trace has turns) with the prefix-cache hit rate per level."""
    run, lang = page.run, page.lang
    turns = turn_frame(run.requests) if "turn" in run.requests.columns else pd.DataFrame()
    if turns.empty or turns["turn"].nunique() < 2:
        return
    turns = turns.assign(**{charts.RATE_LABEL: [page.name(int(c)) for c in turns["concurrency"]]})
    page.heading(tr(lang, "Multi-turn sessions: TTFT by turn"))
    page.figure(
        tr(lang, "p50 TTFT of each turn of a conversation"),
        page.draw("ttft_by_turn", charts.chart_ttft_by_turn, turns),
        tr(
            lang,
            "Each later turn resends the conversation so far (the previous answers and a new user "
            "message): a prefix cache that keeps that history lets a later turn skip most of its "
            "prefill, so its TTFT stays low although its prompt is longer.",
        ),
    )
    words, severity = turn_words(page, turns)
    page.add(f'<div class="sweeper-finding sweeper-finding--{severity}"><p>{esc(words)}</p></div>')


def _later_vs_first(turns: pd.DataFrame, level: int) -> tuple[float, float]:
    rows = turns[turns["concurrency"] == level]
    first = rows.loc[rows["turn"] == 1, "ttft_p50_ms"]
    later = rows.loc[rows["turn"] > 1, "ttft_p50_ms"].dropna()
    f = float(first.iloc[0]) if len(first) and finite(first.iloc[0]) else math.nan
    return f, float(later.mean()) if len(later) else math.nan


def turn_words(page: PageLike, turns: pd.DataFrame) -> tuple[str, str]:
    """Later turns' TTFT against turn 1's per level, and what the server's prefix cache did;
    with the box's severity (``notice`` when the cache served nothing: prefix caching off?)."""
    lang = page.lang
    parts = []
    for level in sorted({int(c) for c in turns["concurrency"]}):
        first, later = _later_vs_first(turns, level)
        if finite(first) and finite(later) and first > 0:
            parts.append(
                tr(
                    lang,
                    "{level}: later turns {later} ms at p50 against {first} ms for turn 1 ({change})",
                ).format(
                    level=page.name(level),
                    later=_ms(later, lang),
                    first=_ms(first, lang),
                    change=_signed(later / first - 1, lang),
                )
            )
    sentences = []
    if parts:
        joined = ("；" if lang == "zh" else "; ").join(parts)
        sentences.append(tr(lang, "TTFT by turn: {parts}.").format(parts=joined))
    cache, off = _prefix_cache_words(page, sorted({int(c) for c in turns["concurrency"]}))
    sentences.append(cache)
    return ("" if lang == "zh" else " ").join(s for s in sentences if s), (
        "notice" if off else "info"
    )


def _prefix_cache_words(page: PageLike, levels: list[int]) -> tuple[str, bool]:
    """The server's prefix-cache hit rate per level in words, and whether it was 0 everywhere."""
    lang = page.lang
    server = page.run.server_levels
    hits: dict[int, float] = {}
    if server is not None and "prefix_cache_hit_rate" in server.columns:
        for _, row in server.iterrows():
            value = row.get("prefix_cache_hit_rate")
            if int(row["concurrency"]) in levels and finite(value):
                hits[int(row["concurrency"])] = float(value)
    if not hits:
        unknown = tr(
            lang,
            "The server's prefix-cache hit rate is unknown (no /metrics scraped, or the server "
            "exports no prefix-cache counters): whether later turns reused the history cannot be "
            "told.",
        )
        return unknown, False
    if all(h == 0 for h in hits.values()):
        off = tr(
            lang,
            "The server's prefix cache served none of the prompt tokens, although later turns "
            "resend the whole conversation: prefix caching looks off (vLLM: "
            "--enable-prefix-caching), so every turn pays its full prefill again.",
        )
        return off, True
    listed = join_list(
        lang, [f"{page.name(c)} {fmt_percent(h, lang, 1)}" for c, h in sorted(hits.items())]
    )
    served = tr(lang, "The server's prefix cache served this share of the prompt tokens: {hits}.")
    return served.format(hits=listed), False


def _ms(value: float, lang: str) -> str:
    return fmt_number(value, lang, 1)


def _signed(fraction: float, lang: str) -> str:
    sign = "+" if fraction >= 0 else ""
    return sign + fmt_percent(fraction, lang, 0)


# ---------------------------------------------------------------------------------------------
# The measured results of a rate sweep


def rate_data_table(page: PageLike, kv: tuple[float, float] | None) -> None:
    """The table of a rate sweep: per offered rate what was sent, completed and queued, beside
    the latencies (``kv``: pool capacity and tokens per request, for the KV need)."""
    run, lang = page.run, page.lang
    levels = chart_levels(run.levels, page.rates, lang)
    rates = _rate_frame(page, levels).set_index("concurrency")
    header = [
        tr(lang, "Offered rate"),
        tr(lang, "Sent req/s"),
        tr(lang, "Completed req/s"),
        tr(lang, "Client queue p90"),
        tr(lang, "In flight (mean / max)"),
        tr(lang, "Requests"),
        tr(lang, "Failed"),
        tr(lang, "Output tok/s"),
        "TTFT p50",
        "TTFT p99",
        tr(lang, "TTFT p99 from schedule"),
        "ITL p50",
        "ITL p99",
        "E2EL p50",
    ]
    if kv is not None:
        header.append(tr(lang, "KV needed"))
    rows = []
    for _, row in levels.iterrows():
        c = int(row["concurrency"])
        cells = [
            esc(row[charts.RATE_LABEL]),
            tr(lang, "burst") if rates.loc[c, "burst"] else num(rates.loc[c, "sent_rps"], lang, 2),
            num(rates.loc[c, "completed_rps"], lang, 2),
            num(row.get("client_queue_p90_ms"), lang),
            _inflight(row, lang),
            fmt_number(int(row["requests"]), lang, 0),
            fmt_number(int(row["failed"]), lang, 0),
            num(row["output_throughput_tok_s"], lang, 1),
            num(row["ttft_p50_ms"], lang),
            num(row["ttft_p99_ms"], lang),
            num(row.get("ttft_sched_p99_ms"), lang),
            num(row["itl_p50_ms"], lang, 2),
            num(row["itl_p99_ms"], lang, 2),
            num(row["e2el_p50_ms"], lang),
        ]
        if kv is not None:
            inflight = row.get("inflight_mean")
            cells.append(fmt_percent(inflight * kv[1] / kv[0], lang) if finite(inflight) else "–")
        rows.append(cells)
    page.add(table(header, rows))
    note = tr(
        lang,
        "Latencies in ms, from when each request was sent; TTFT p99 from schedule counts from when "
        "the schedule said to send it (what a user waits). Client queue: sent − scheduled. "
        "Completed req/s: completed requests ÷ the level's duration, as in the summary and "
        "goodput. Burst: the all-at-once level sends every request at once, so it has no sent "
        "rate.",
    )
    note += " " + tr(
        lang,
        "In flight: the requests in flight during the level, measured from the trace (the "
        "time-weighted mean and the most at once).",
    )
    if kv is not None:
        note += " " + tr(lang, "KV needed = mean in flight × {tokens} / {capacity}.").format(
            tokens=fmt_number(kv[1], lang, 0), capacity=fmt_number(kv[0], lang, 0)
        )
    page.add(f'<p class="sweeper-note">{esc(note)}</p>')


def _inflight(row: pd.Series, lang: str) -> str:
    mean, top = row.get("inflight_mean"), row.get("inflight_max")
    if not finite(mean) or not finite(top):
        return "–"
    return f"{fmt_fixed(mean, lang, 1)} / {fmt_number(int(top), lang, 0)}"
