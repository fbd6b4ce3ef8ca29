"""A run's report page, in English or Chinese: findings + charts -> Markdown with embedded Vega-Lite.

:func:`sweeper.report.run_report.collect_run` reads everything a page needs from a trace set once (frames,
findings, server aggregates); :func:`render_run_page` writes it in one language. Words come from the Babel catalog
of the ``pages`` domain (``sweeper/locale/zh/LC_MESSAGES/pages.po``), numbers and dates from
:mod:`sweeper.i18n`. Each section that rests on a finding (:mod:`sweeper.findings`) is written only
when that finding exists: a page never says what the data did not show. Everything that comes
from a trace set goes through :func:`sweeper.report.markup.esc`; the building blocks (cards, figures,
tables) are in :mod:`sweeper.report.markup`, the "How it was recorded" section in
:mod:`sweeper.report.provenance`.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

import pandas as pd

from sweeper.analysis.frames import gpus_of
from sweeper.findings.levels import level_name, level_rates, level_template, level_text
from sweeper.i18n import N_, fmt_date, fmt_fixed, fmt_number, fmt_percent, join_list
from sweeper.report import charts
from sweeper.report.advice import next_steps
from sweeper.report.markup import (
    PageData,
    cards,
    chart_labels,
    esc,
    figure_html,
    finding_block,
    front_matter,
    labels_html,
    num,
    shared_spec,
    table,
    tr,
    trn,
)
from sweeper.report.provenance import length_card, recorded_section, varied_lengths
from sweeper.report.rate_pages import (
    chart_levels,
    rate_data_table,
    rate_follow_section,
    turns_section,
)
from sweeper.report.run_report import (
    RunReport,
    engine_title,
    fact_text,
    gpu_title,
    kv_capacity_tokens,
    measured_levels,
    peak_level,
    per_level,
    per_stream_rate,
    run_title,
    tokens_per_request,
)
from sweeper.schema import fact_value
from sweeper.units import GIB, finite

__all__ = ["RunReport", "render_run_page", "timeline_level"]


# ---------------------------------------------------------------------------------------------
# Sections


class _Page:
    """Collects one page's Markdown; numbers figures as they are added."""

    def __init__(self, run: RunReport, lang: str, shared: bool = True):
        self.run = run
        self.lang = lang
        self.parts: list[str] = []
        self.figures = 0
        # Offered rate by level key in a rate run (levels named by their rate); empty otherwise.
        self.rates = level_rates(run.ts.manifest)
        # The page's one block of chart data, and the specs drawn once for both languages.
        self.datasets = PageData()
        self.memo = run.chart_specs if shared else None

    def name(self, level: int) -> str:
        """A level's name: ``C=16``, or ``4 req/s`` in a rate run."""
        return level_name(int(level), self.rates, self.lang)

    def tl(self, message: str) -> str:
        """A translated message whose ``C={x}`` placeholders take :meth:`lv` (a rate run's
        level is named by its rate; a closed loop's message is unchanged). Extracted with
        ``pybabel extract -k tl``."""
        return level_template(tr(self.lang, message), self.rates)

    def lv(self, level: int) -> str:
        """What a ``C={x}`` placeholder of :meth:`tl` takes: ``16`` or ``4 req/s``."""
        return level_text(int(level), self.rates, self.lang)

    def add(self, *blocks: str) -> None:
        self.parts.extend(b for b in blocks if b)

    def heading(self, text: str, level: int = 2) -> None:
        self.add("#" * level + " " + text)

    def figure(self, title: str, chart: Any, caption: str) -> None:
        """A numbered figure; ``caption`` is plain text (escaped here)."""
        self.figures += 1
        self.add(
            figure_html(self.figures, self.lang, title, chart, html.escape(caption), self.datasets)
        )

    def draw(
        self,
        key: str,
        draw: Any,
        *args: Any,
        labels: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> Any:
        """The spec of chart ``key`` (``draw(*args, labels, **kwargs)``) in this page's
        language, drawn once for both languages where its data is the same
        (:func:`sweeper.report.markup.shared_spec`)."""
        words = labels if labels is not None else chart_labels(self.lang, key)
        return shared_spec(self.memo, key, draw, args, words, kwargs)

    def finding(self, finding_id: str) -> bool:
        found = self.run.finding(finding_id)
        if found is None:
            return False
        self.add(finding_block(found, self.lang))
        return True

    def text(self) -> str:
        return "\n\n".join([*self.parts, *filter(None, [self.datasets.html()])]) + "\n"


def _findings_failed(page: _Page) -> None:
    """A failure box at the top when findings could not be computed: the reader must not take
    the missing sections for a clean bill of health."""
    errors = page.run.findings_errors
    if not errors:
        return
    lang = page.lang
    title = tr(lang, "Some findings could not be computed")
    body = tr(
        lang,
        "The measurements below are complete, but the sections these errors cut are missing. "
        "This is a bug in sweeper or data it does not understand; please report it with the "
        "trace set.",
    )
    lines = [f'!!! failure "{esc(title)}"', "", f"    {esc(body)}", ""]
    lines += [f"    - <code>{esc(error)}</code>" for error in errors]
    page.add("\n".join(lines))


def _status_boxes(page: _Page) -> None:
    """Boxes at the top for a run the reader must not take for a whole one: no measured request,
    no request that succeeded, a sweep stopped before it measured what it planned."""
    run, lang = page.run, page.lang
    levels = run.levels
    total = int(levels["requests"].sum()) if not levels.empty else 0
    completed = int(levels["completed"].sum()) if not levels.empty else 0
    if total == 0:
        body = tr(
            lang,
            "This trace set holds no measured request: nothing was timed, so there are no "
            "numbers or charts.",
        )
        page.add(_box("failure", tr(lang, "No measured request"), [esc(body)]))
    elif completed == 0:
        body = trn(
            lang,
            "The {total} measured request failed, so there is no throughput or latency to show. "
            "What failed is below.",
            "All {total} measured requests failed, so there is no throughput or latency to show. "
            "What failed is below.",
            total,
        ).format(total=fmt_number(total, lang, 0))
        page.add(_box("failure", tr(lang, "No request succeeded"), [esc(body)]))
    done = run.done
    if done.complete:
        return
    if done.run_status != "complete":
        first = tr(
            lang, "The sweep stopped before it measured everything it planned (status: {status})."
        ).format(status=done.run_status)
    else:
        first = tr(lang, "The trace set does not hold everything its sweep planned.")
    lines = [esc(first)]
    if done.missing_levels:
        never = join_list(lang, [page.name(c) for c in done.missing_levels])
        lines.append(esc(tr(lang, "Levels never measured: {levels}.").format(levels=never)))
    if done.cut_short:
        items = []
        for short in done.cut_short:
            if short.planned is not None:
                item = trn(
                    lang,
                    "C={c} ({measured} of {planned} measured request)",
                    "C={c} ({measured} of {planned} measured requests)",
                    short.planned,
                )
            else:
                item = trn(
                    lang,
                    "C={c} ({measured} measured request)",
                    "C={c} ({measured} measured requests)",
                    short.measured,
                )
            items.append(
                level_template(item, page.rates).format(
                    c=page.lv(short.concurrency),
                    measured=fmt_number(short.measured, lang, 0),
                    planned=fmt_number(short.planned or 0, lang, 0),
                )
            )
        lines.append(esc(tr(lang, "Cut short: {levels}.").format(levels=join_list(lang, items))))
    if done.resume_command:
        lines.append(esc(tr(lang, "Finish it with:")) + f" <code>{esc(done.resume_command)}</code>")
    else:
        lines.append(esc(tr(lang, "Import it again with every level's files to complete it.")))
    page.add(_box("warning", tr(lang, "This run is incomplete"), lines))


def _box(kind: str, title: str, paragraphs: list[str]) -> str:
    """An admonition (``!!! warning``) of escaped paragraphs."""
    lines = [f'!!! {kind} "{esc(title)}"']
    for paragraph in paragraphs:
        lines += ["", f"    {paragraph}"]
    return "\n".join(lines)


def _what_failed(page: _Page) -> None:
    """The failed requests by what failed: kind, HTTP status, how many, where, the first messages
    (quoted as the client or the server wrote them)."""
    run, lang = page.run, page.lang
    if not run.failures:
        return
    page.heading(tr(lang, "What failed"))
    rows = []
    for group in run.failures:
        what = group.kind or group.status
        if group.status == "cancelled":
            what = tr(lang, "cancelled")
        messages = "<br>".join(f"<code>{esc(m)}</code>" for m in group.messages) or "–"
        rows.append(
            [
                esc(what),
                str(group.http_status) if group.http_status is not None else "–",
                fmt_number(group.count, lang, 0),
                esc(join_list(lang, [page.name(c) for c in group.levels])),
                messages,
            ]
        )
    header = [
        tr(lang, "Error"),
        tr(lang, "HTTP status"),
        tr(lang, "Requests"),
        tr(lang, "Levels"),
        tr(lang, "First messages"),
    ]
    page.add(table([html.escape(h) for h in header], rows, numeric=False))


def _lede(page: _Page) -> None:
    run, lang = page.run, page.lang
    wl = run.ts.manifest.workload
    levels = run.levels
    total = int(levels["requests"].sum()) if not levels.empty else 0
    failed = int(levels["failed"].sum()) if not levels.empty else 0
    parts = []
    varied = varied_lengths(wl, lang)
    if varied is not None:
        parts.append(varied)
    elif wl.input_len is not None and wl.output_len is not None:
        parts.append(
            tr(lang, "Fixed {input_len} input / {output_len} output tokens.").format(
                input_len=fmt_number(wl.input_len, lang, 0),
                output_len=fmt_number(wl.output_len, lang, 0),
            )
        )
    if not levels.empty and page.rates:
        parts.append(
            trn(
                lang,
                "Offered rates swept from {low} to {high}: {total} measured request, {failed} "
                "failed.",
                "Offered rates swept from {low} to {high}: {total} measured requests, {failed} "
                "failed.",
                total,
            ).format(
                low=page.name(int(levels["concurrency"].min())),
                high=page.name(int(levels["concurrency"].max())),
                total=fmt_number(total, lang, 0),
                failed=fmt_number(failed, lang, 0),
            )
        )
    elif not levels.empty:
        parts.append(
            trn(
                lang,
                "Concurrency swept from {low} to {high}: {total} measured request, {failed} failed.",
                "Concurrency swept from {low} to {high}: {total} measured requests, {failed} failed.",
                total,
            ).format(
                low=int(levels["concurrency"].min()),
                high=int(levels["concurrency"].max()),
                total=fmt_number(total, lang, 0),
                failed=fmt_number(failed, lang, 0),
            )
        )
    if not run.done.complete:
        measured = len(run.done.planned_levels) - len(run.done.missing_levels)
        parts.append(
            trn(
                lang,
                "Incomplete: {measured} of {planned} planned level measured.",
                "Incomplete: {measured} of {planned} planned levels measured.",
                len(run.done.planned_levels),
            ).format(measured=measured, planned=len(run.done.planned_levels))
        )
    parts.append(
        tr(lang, "Recorded on {date}.").format(date=fmt_date(run.ts.manifest.started_at, lang))
    )
    page.add('<p class="sweeper-lede">' + html.escape(" ".join(parts)) + "</p>")
    labels = labels_html(run.ts.manifest.labels)
    if labels:
        page.add(f'<p class="sweeper-note">{html.escape(tr(lang, "Labels"))}: {labels}</p>')


def _fact_cards(page: _Page) -> None:
    run, lang = page.run, page.lang
    m = run.ts.manifest
    cfg = m.server.config
    items: list[tuple[str, str, str | None]] = []
    gpu = gpu_title(run.ts, lang)
    if gpu:
        items.append((tr(lang, "GPU"), esc(gpu), None))
    engine = engine_title(run.ts)
    if engine:
        items.append((tr(lang, "Engine"), esc(engine), None))
    dtype = fact_text(cfg.dtype) or fact_text(m.model.dtype)
    if dtype:
        items.append((tr(lang, "Dtype"), esc(dtype), None))
    if m.workload.input_len is not None and m.workload.output_len is not None:
        items.append(
            (
                tr(lang, "In / Out"),
                length_card(m.workload, lang),
                None,
            )
        )
    kv_bytes = fact_value(cfg.kv_cache_memory_bytes)
    if finite(kv_bytes):
        items.append((tr(lang, "KV pool"), f"{fmt_fixed(kv_bytes / GIB, lang, 2)} GiB", None))
    capacity = kv_capacity_tokens(run)
    if capacity is not None:
        items.append((tr(lang, "KV capacity"), f"{fmt_number(capacity, lang, 0)} tok", None))
    if not run.levels.empty:
        failed = int(run.levels["failed"].sum())
        total = int(run.levels["requests"].sum())
        items.append(
            (
                tr(lang, "Failed requests"),
                f"{fmt_number(failed, lang, 0)} / {fmt_number(total, lang, 0)}",
                None,
            )
        )
    page.add(cards(items, "sweeper-cards sweeper-cards--facts"))


def _headline(page: _Page) -> None:
    """Conclusion, recommended operating point and the headline numbers."""
    run, lang = page.run, page.lang
    page.heading(tr(lang, "Conclusion"))
    page.finding("knee")
    recommended = run.known("recommended")
    items: list[tuple[str, str, str | None]] = []
    if recommended is not None:
        items.append(_recommended_card(recommended.numbers, page))
    peak = peak_level(run.levels)
    if peak is not None:
        items.append(
            (
                tr(lang, "Peak output throughput"),
                f"{fmt_number(peak['output_throughput_tok_s'], lang, 0)} tok/s",
                html.escape(
                    page.tl("at C={concurrency}").format(
                        concurrency=page.lv(int(peak["concurrency"]))
                    )
                ),
            )
        )
    roofline = run.known("roofline")
    if roofline is not None and finite(roofline.numbers.get("ratio")):
        n = roofline.numbers
        items.append(
            (
                tr(lang, "Single stream / roofline"),
                fmt_percent(n["ratio"], lang),
                html.escape(
                    tr(lang, "{measured} vs {ideal} tok/s").format(
                        measured=num(n.get("measured_tok_s"), lang),
                        ideal=num(n.get("ideal_tok_s"), lang),
                    )
                ),
            )
        )
    scaling = run.known("scaling")
    if scaling is not None and finite(scaling.numbers.get("speedup_max")):
        items.append(
            (
                tr(
                    lang,
                    N_("Speed-up at the highest offered rate")
                    if page.rates
                    else N_("Speed-up at the top level"),
                ),
                f"{fmt_fixed(scaling.numbers['speedup_max'], lang, 1)} ×",
                None,
            )
        )
    tail = run.known("itl_tail")
    if tail is not None:
        ratios = per_level(tail.numbers.get("ratio_p99_p50"))
        if ratios:
            worst_c, worst = max(ratios.items(), key=lambda kv: kv[1])
            items.append(
                (
                    tr(lang, "Largest ITL p99 / p50"),
                    f"{fmt_fixed(worst, lang, 1)} ×",
                    html.escape(page.tl("at C={concurrency}").format(concurrency=page.lv(worst_c))),
                )
            )
    ceiling = run.known("kv_ceiling")
    if ceiling is not None:
        occupancy = per_level(ceiling.numbers.get("occupancy"))
        if occupancy:
            top_c = max(occupancy)
            note = None
            if finite(ceiling.numbers.get("ceiling")):
                note = html.escape(
                    tr(lang, "real concurrency ceiling {ceiling}").format(
                        ceiling=fmt_number(ceiling.numbers["ceiling"], lang, 0)
                    )
                )
            items.append(
                (
                    page.tl("KV pool needed at C={concurrency}").format(concurrency=page.lv(top_c)),
                    fmt_percent(occupancy[top_c], lang),
                    note,
                )
            )
    page.add(cards(items, "sweeper-cards sweeper-cards--headline"))
    page.finding("recommended")


def _recommended_card(numbers: Mapping[str, Any], page: _Page) -> tuple[str, str, str | None]:
    """The recommended operating point, or why there is none (no level meets the SLO)."""
    lang = page.lang
    label = tr(lang, "Recommended operating point")
    chosen = numbers.get("concurrency")
    if chosen is None:
        slo = numbers.get("slo")
        terms = [str(t) for t in slo] if isinstance(slo, list) else []
        note = (
            html.escape(tr(lang, "SLO: {slo}").format(slo=join_list(lang, terms)))
            if terms
            else None
        )
        return label, html.escape(tr(lang, "no level meets the SLO")), note
    value = page.name(chosen) if page.rates else f"C = {chosen}"
    if finite(numbers.get("throughput_tok_s")):
        value += f" · {fmt_number(numbers['throughput_tok_s'], lang, 0)} tok/s"
    return label, esc(value), None


def _curve_sections(page: _Page) -> None:
    run, lang = page.run, page.lang
    levels = measured_levels(chart_levels(run.levels, page.rates, lang))
    if levels.empty:
        return
    page.heading(tr(lang, "Throughput against latency"))
    caption = (
        tr(
            lang,
            "Each point is one offered rate: output tokens per second against the p50 and p99 "
            "time to first token (log scale, from the send). The grey bands are common service "
            "levels for p99 TTFT.",
        )
        if page.rates
        else tr(
            lang,
            "Each point is one concurrency level: output tokens per second against the p50 and p99 "
            "time to first token (log scale). The grey bands are common service levels for p99 TTFT.",
        )
    )
    page.figure(
        tr(lang, "Throughput-latency trade-off"),
        page.draw("throughput_latency", charts.chart_throughput_latency, levels),
        caption,
    )
    if page.rates:
        rate_follow_section(page, levels)
        page.finding("roofline")
        return
    page.heading(tr(lang, "Scaling: measured against ideal"))
    page.figure(
        tr(lang, "Scaling efficiency"),
        page.draw("scaling", charts.chart_scaling, levels),
        tr(
            lang,
            "Log-log axes: ideal linear scaling (the lowest level's rate per stream times C) is a straight "
            "line. The label at each point is its scaling efficiency, throughput / ideal.",
        ),
    )
    page.finding("scaling")
    page.heading(tr(lang, "What each added slot buys"))
    page.figure(
        tr(lang, "Marginal throughput per added concurrency slot"),
        page.draw("marginal_gain", charts.chart_marginal_gain, levels),
        tr(
            lang,
            "Bar height = added throughput / added concurrency between two levels. The dashed line is "
            "the per-stream rate of the lowest level.",
        ),
    )
    page.finding("roofline")


def _tail_sections(page: _Page) -> None:
    run, lang = page.run, page.lang
    with_names = chart_levels(run.levels, page.rates, lang)
    levels = with_names.dropna(subset=["itl_p50_ms"])
    if not levels.empty:
        page.heading(tr(lang, "The ITL tail"))
        page.figure(
            tr(lang, "ITL percentile split (log scale)"),
            page.draw("itl_split", charts.chart_itl_split, levels),
            tr(
                lang,
                "The shaded area spans p50 to p99 of the gaps between tokens. The mean sits between "
                "them and stands for neither.",
            ),
        )
        page.finding("itl_tail")
    has_cause = run.finding("tail_cause") is not None
    e2el = with_names.dropna(subset=["e2el_p50_ms", "ttft_p50_ms"])
    if has_cause or not e2el.empty:
        page.heading(tr(lang, "Diagnosis"))
    if has_cause:
        page.heading(tr(lang, "Cause of the tail"), 3)
        page.finding("tail_cause")
    if not e2el.empty:
        page.heading(tr(lang, "Where the end-to-end time goes"), 3)
        page.figure(
            tr(lang, "E2EL breakdown at p50: first token vs decode"),
            page.draw("e2el_breakdown", charts.chart_e2el_breakdown, e2el),
            tr(
                lang,
                N_(
                    "Median end-to-end latency per offered rate, split into time to first token "
                    "and decoding time."
                )
                if page.rates
                else N_(
                    "Median end-to-end latency per level, split into time to first token and "
                    "decoding time."
                ),
            ),
        )
    _kv_section(page)
    if run.finding("memory_headroom") is not None:
        page.heading(tr(lang, "Memory headroom"), 3)
        page.finding("memory_headroom")


def _kv_section(page: _Page) -> None:
    run, lang = page.run, page.lang
    capacity = kv_capacity_tokens(run)
    per_request = tokens_per_request(run)
    if run.finding("kv_ceiling") is None and capacity is None:
        return
    page.heading(tr(lang, "KV cache ceiling"), 3)
    page.finding("kv_ceiling")
    if capacity is None or per_request is None or run.levels.empty:
        return
    observed = None
    server = run.server_levels
    if server is not None and "kv_usage_max" in server and server["kv_usage_max"].notna().any():
        observed = server
    message = (
        N_(
            "Bars: the KV cache each level needs, the requests in flight (the mean measured from "
            "the trace) × {tokens} tokens per request, as a share of the pool ({capacity} tokens). "
            "The dashed line is the pool's capacity."
        )
        if page.rates
        else N_(
            "Bars: the KV cache each level needs, C × {tokens} tokens per request, as a share of "
            "the pool ({capacity} tokens). The dashed line is the pool's capacity."
        )
    )
    caption = tr(lang, message).format(
        tokens=fmt_number(per_request, lang, 0), capacity=fmt_number(capacity, lang, 0)
    )
    if observed is not None:
        caption += " " + tr(
            lang,
            N_("Diamonds: the highest KV usage the server reported at each offered rate.")
            if page.rates
            else N_("Diamonds: the highest KV usage the server reported during the level."),
        )
    page.figure(
        tr(
            lang,
            N_("KV cache pool occupancy per offered rate")
            if page.rates
            else N_("KV cache pool occupancy per level"),
        ),
        page.draw(
            "kv_occupancy",
            charts.chart_kv_occupancy,
            chart_levels(run.levels, page.rates, lang),
            capacity_tokens=capacity,
            tokens_per_request=per_request,
            observed=observed,
        ),
        caption,
    )


def timeline_level(run: RunReport) -> int | None:
    """The level whose requests the timeline shows: the recommended one, else the highest."""
    recommended = run.known("recommended")
    ok = run.requests[run.requests["status"] == "ok"].dropna(subset=["ttft_ms", "e2el_ms"])
    available = set(ok["concurrency"].astype(int))
    if recommended is not None and recommended.numbers.get("concurrency") in available:
        return int(recommended.numbers["concurrency"])
    return max(available) if available else None


def _timeline_section(page: _Page) -> None:
    run = page.run
    level = timeline_level(run)
    if level is None:
        return
    page.heading(
        page.tl("Requests at C={concurrency}, one bar each").format(concurrency=page.lv(level))
    )
    shown = min(
        charts.TIMELINE_MAX_REQUESTS,
        int(((run.requests["concurrency"] == level) & (run.requests["status"] == "ok")).sum()),
    )
    page.figure(
        page.tl("Request timeline at C={concurrency}").format(concurrency=page.lv(level)),
        page.draw(
            "request_timeline",
            charts.chart_request_timeline,
            run.requests,
            level,
            labels=_timeline_labels(page),
        ),
        _timeline_caption(page, shown) + _queue_note(page, level),
    )


def _timeline_caption(page: _Page, shown: int) -> str:
    if page.rates:
        return trn(
            page.lang,
            "The first {shown} request of the rate level in send order: waiting for the first "
            "token, then decoding; the tick marks the first token.",
            "The first {shown} requests of the rate level in send order: waiting for the first "
            "token, then decoding; the tick marks the first token.",
            shown,
        ).format(shown=shown)
    return trn(
        page.lang,
        "The first {shown} request of the level in send order: waiting for the first token, then "
        "decoding; the tick marks the first token.",
        "The first {shown} requests of the level in send order: waiting for the first token, then "
        "decoding; the tick marks the first token.",
        shown,
    ).format(shown=shown)


def _timeline_labels(page: _Page) -> dict[str, str]:
    labels = chart_labels(page.lang, "request_timeline")
    if page.rates:
        labels["x"] = tr(page.lang, "Seconds since the rate level started")
    return labels


def _queue_note(page: _Page, level: int) -> str:
    """In an open loop whose requests waited in the client: what the grey part of a bar is."""
    queue = page.run.requests.get("client_queue_ms")
    if queue is None:
        return ""
    at = page.run.requests["concurrency"] == level
    if not (pd.to_numeric(queue[at], errors="coerce") > 1e-3).any():
        return ""
    return " " + tr(
        page.lang,
        "Grey: the wait in the client, from when the schedule said to send to when the request "
        "was sent.",
    )


def _data_table(page: _Page) -> None:
    run, lang = page.run, page.lang
    levels = run.levels
    if levels.empty:
        return
    page.heading(tr(lang, "Measured results"))
    capacity = kv_capacity_tokens(run)
    per_request = tokens_per_request(run)
    if page.rates:
        pool = (capacity, per_request) if capacity is not None and per_request is not None else None
        rate_data_table(page, pool)
        return
    per_stream = per_stream_rate(levels)
    header = [
        tr(lang, "Concurrency"),
        tr(lang, "In flight (mean / max)"),
        tr(lang, "Requests"),
        tr(lang, "Failed"),
        tr(lang, "Duration (s)"),
        tr(lang, "Output tok/s"),
        tr(lang, "Per GPU tok/s"),
        tr(lang, "Efficiency"),
        "TTFT p50",
        "TTFT p99",
        "TPOT p50",
        "ITL p50",
        "ITL p99",
        "E2EL p50",
    ]
    kv = (capacity, per_request) if capacity is not None and per_request is not None else None
    if kv is not None:
        header.append(tr(lang, "KV needed"))
    rows = []
    for _, row in levels.iterrows():
        c = int(row["concurrency"])
        efficiency = (
            fmt_percent(row["output_throughput_tok_s"] / (c * per_stream), lang)
            if per_stream and finite(row["output_throughput_tok_s"])
            else "–"
        )
        cells = [
            str(c),
            _inflight(row, lang),
            fmt_number(int(row["requests"]), lang, 0),
            fmt_number(int(row["failed"]), lang, 0),
            num(row["duration_s"], lang, 1),
            num(row["output_throughput_tok_s"], lang, 1),
            num(row["output_throughput_per_gpu_tok_s"], lang, 1),
            efficiency,
            num(row["ttft_p50_ms"], lang),
            num(row["ttft_p99_ms"], lang),
            num(row["tpot_p50_ms"], lang, 2),
            num(row["itl_p50_ms"], lang, 2),
            num(row["itl_p99_ms"], lang, 2),
            num(row["e2el_p50_ms"], lang),
        ]
        if kv is not None:
            cells.append(fmt_percent(c * kv[1] / kv[0], lang))
        rows.append(cells)
    page.add(table(header, rows))
    note = tr(
        lang, "Latencies in ms. Efficiency = throughput / (C × the lowest level's rate per stream)."
    )
    note += " " + tr(
        lang,
        "In flight: the requests in flight during the level, measured from the trace (the "
        "time-weighted mean and the most at once), beside the nominal concurrency.",
    )
    paused = levels[pd.to_numeric(levels["paused_s"], errors="coerce") > 0]
    for _, row in paused.iterrows():
        note += " " + tr(
            lang,
            "C={concurrency} stood still for {seconds} s with no request in flight (interrupted "
            "and resumed): that pause is left out of its duration and throughput.",
        ).format(concurrency=int(row["concurrency"]), seconds=fmt_number(row["paused_s"], lang, 1))
    if kv is not None:
        note += " " + tr(lang, "KV needed = C × {tokens} / {capacity}.").format(
            tokens=fmt_number(kv[1], lang, 0), capacity=fmt_number(kv[0], lang, 0)
        )
    gpus = gpus_of(run.ts)
    if gpus > 1:
        note += " " + tr(lang, "Per GPU divides by {gpus} GPUs.").format(gpus=gpus)
    page.add(f'<p class="sweeper-note">{html.escape(note)}</p>')


def _inflight(row: pd.Series, lang: str) -> str:
    """``3.9 / 4``: the mean and the most requests in flight during a level, or a dash."""
    mean, top = row.get("inflight_mean"), row.get("inflight_max")
    if not finite(mean) or not finite(top):
        return "–"
    return f"{fmt_fixed(mean, lang, 1)} / {fmt_number(int(top), lang, 0)}"


def _slo_section(page: _Page) -> None:
    run, lang = page.run, page.lang
    slo = run.finding("slo_table")
    if slo is None:
        return
    page.heading(
        tr(
            lang,
            N_("Choosing an offered rate by service level")
            if page.rates
            else N_("Choosing a level by service level"),
        )
    )
    page.finding("slo_table")
    rows = (slo.numbers or {}).get("rows") or []
    if not rows:
        return
    header = [
        tr(lang, "If the SLO is"),
        tr(lang, "Choose"),
        tr(lang, "Throughput (tok/s)"),
        "p99 TTFT (ms)",
        "p50 ITL (ms)",
    ]
    if page.rates:
        header += [tr(lang, "Goodput (req/s)"), tr(lang, "Met")]
    body = []
    for row in rows:
        if not isinstance(row, Mapping):
            continue
        chosen = row.get("concurrency")
        mark = "**" if row.get("recommended") else ""
        cells = [
            f"{mark}{esc(row.get('slo', ''))}{mark}",
            page.name(chosen) if chosen is not None else tr(lang, "none meets it"),
            num(row.get("throughput_tok_s"), lang),
            num(row.get("ttft_p99_ms"), lang),
            num(row.get("itl_p50_ms"), lang, 2),
        ]
        if page.rates:
            share = row.get("slo_met_share")
            cells += [
                num(row.get("goodput_rps"), lang, 2),
                fmt_percent(share, lang, 0) if finite(share) else "–",
            ]
        body.append(cells)
    page.add(table(header, body))
    note = tr(lang, "Bold: the service levels the recommended operating point meets.")
    if page.rates:
        note += " " + tr(
            lang,
            "Each rate is chosen by goodput: the completed requests per second that met the service "
            "level, TTFT and E2EL counted from the schedule; Met: the share of its requests that did.",
        )
    page.add(f'<p class="sweeper-note">{html.escape(note)}</p>')


def _more_findings(page: _Page) -> None:
    run, lang = page.run, page.lang
    if run.finding("long_input") is not None:
        page.heading(tr(lang, "Long inputs"))
        page.finding("long_input")
    if run.finding("client_health") is not None:
        page.heading(tr(lang, "Health of the recording client"))
        page.finding("client_health")


# ---------------------------------------------------------------------------------------------
# The page


def render_run_page(run: RunReport, lang: str, *, shared: bool = True) -> str:
    """The whole report page of one run in ``lang``, as Markdown (front matter included).
    ``shared``: draw each chart once for both languages where its data is the same (the pages
    are the same either way; a test compares them)."""
    page = _Page(run, lang, shared)
    title = run_title(run.ts, lang)
    page.add(front_matter(run.run_id))
    kicker = tr(lang, "Request-rate sweep") if page.rates else tr(lang, "Concurrency sweep")
    page.add(f'<p class="sweeper-kicker">{html.escape(kicker)} · {esc(run.run_id)}</p>')
    page.heading(esc(title), 1)
    _findings_failed(page)
    _status_boxes(page)
    _lede(page)
    _fact_cards(page)
    succeeded = not run.levels.empty and int(run.levels["completed"].sum()) > 0
    if not succeeded:
        _what_failed(page)
    _headline(page)
    _curve_sections(page)
    _tail_sections(page)
    _timeline_section(page)
    turns_section(page)
    _more_findings(page)
    _data_table(page)
    if succeeded:
        _what_failed(page)
    _slo_section(page)
    advice = next_steps(run, lang)
    if advice:
        page.heading(tr(lang, "What to change next"))
        page.add("\n".join(f"- {esc(line)}" for line in advice))
    page.add(*recorded_section(run.ts, lang))
    return page.text()
