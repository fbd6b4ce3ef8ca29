"""A run's report page, in English or Chinese: findings + charts -> Markdown with embedded Vega-Lite.

:func:`collect_run` reads everything a page needs from a trace set once (frames, findings, server
aggregates); :func:`render_run_page` writes it in one language. Words come from the Babel catalog
of the ``pages`` domain (``sweeper/locale/zh/LC_MESSAGES/pages.po``), numbers and dates from
:mod:`sweeper.i18n`. Each section that rests on a finding is written only when that finding
exists: a page never says what the data did not show.

Everything that comes from a trace set (model and GPU names, labels, run ids, log lines, commands)
goes through :func:`esc`, so a label ``<script>alert(1)</script>`` shows as text. Charts are
``<div class="sweeper-chart" data-spec="...">`` elements holding a complete Vega-Lite spec
(HTML-escaped JSON), drawn in the browser by ``sweeper/assets/sweeper-charts.js``.
"""

from __future__ import annotations

import html
import importlib
import importlib.util
import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from sweeper import charts
from sweeper.i18n import N_, fmt_date, fmt_fixed, fmt_number, fmt_percent, gettext
from sweeper.metrics import gpus_of, level_frame, request_frame
from sweeper.schema import Fact, fact_value
from sweeper.store import TraceSet

log = logging.getLogger("sweeper.pages")

DOMAIN = "pages"
GIB = 1024**3
# Finding ids of sweeper.findings (issue 4), in the order a page uses them.
FINDING_IDS = (
    "roofline",
    "scaling",
    "knee",
    "itl_tail",
    "tail_cause",
    "kv_ceiling",
    "memory_headroom",
    "recommended",
    "slo_table",
    "long_input",
    "client_health",
)
# Characters HTML or Markdown would act on, written as character references (one pass, so a
# reference is never escaped twice).
_ESCAPES = {c: f"&#{ord(c)};" for c in "\\`*_{}[]()#+-!|~:<>&\"'"}
_ESCAPES["\n"] = " "


def tr(lang: str, message: str) -> str:
    """A sentence of the pages in ``lang`` (extracted by ``pybabel extract -k tr:2``)."""
    return gettext(lang, DOMAIN, message)


def esc(value: object) -> str:
    """Text from a trace set, safe inside Markdown and HTML: HTML-escaped, and the characters
    Markdown would act on (links, emphasis, tables, code) written as character references."""
    return "".join(_ESCAPES.get(c, c) for c in str(value))


def chart_html(chart: Any) -> str:
    """One chart as a ``div`` carrying its complete Vega-Lite spec in an attribute (not an inline
    script: Material's instant navigation re-runs inline scripts without their type)."""
    # Validated against the schema by the tests; skipping it here halves the cost of a page.
    spec = chart.to_dict(validate=False) if hasattr(chart, "to_dict") else chart
    data = json.dumps(spec, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return f'<div class="sweeper-chart" data-spec="{html.escape(data, quote=True)}"></div>'


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


# ---------------------------------------------------------------------------------------------
# What a page rests on


@dataclass
class RunData:
    """Everything one run's page is written from, computed once for both languages."""

    ts: TraceSet
    levels: pd.DataFrame
    requests: pd.DataFrame
    findings: dict[str, Any] = field(default_factory=dict)
    server_levels: pd.DataFrame | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        return self.ts.run_id

    def finding(self, finding_id: str) -> Any | None:
        """The finding, or None when findings are not available or it was not written."""
        return self.findings.get(finding_id)

    def known(self, finding_id: str) -> Any | None:
        """The finding when the data supported it (not ``severity: unknown``)."""
        found = self.findings.get(finding_id)
        if found is None or getattr(found, "severity", None) == "unknown":
            return None
        return found


def _optional(module: str, name: str) -> Callable[..., Any] | None:
    """A function of a sibling module that may not exist yet in this version of sweeper."""
    if importlib.util.find_spec(module) is None:
        return None
    return getattr(importlib.import_module(module), name, None)


def collect_run(ts: TraceSet, *, slos: Sequence[Any] | None = None) -> RunData:
    """Frames, findings and server-side aggregates of one trace set."""
    requests = request_frame(ts)
    levels = level_frame(ts, requests=requests)
    run = RunData(ts=ts, levels=levels, requests=requests)
    # Findings and server aggregates are extras: when they fail, the page still publishes what
    # the measurements show and says what is missing.
    try:
        analyze = _optional("sweeper.findings", "analyze_run")
        if analyze is not None:
            run.findings = {f.id: f for f in analyze(ts, slos=slos)}
    except Exception as exc:
        log.warning("%s: findings could not be computed: %s: %s", ts.path, type(exc).__name__, exc)
        run.notes.append(f"findings could not be computed: {type(exc).__name__}: {exc}")
    try:
        server_frame = _optional("sweeper.server_metrics", "server_level_frame")
        if server_frame is not None and ts.metrics:
            run.server_levels = server_frame(ts)
    except Exception as exc:
        log.warning("%s: server metrics could not be summarised: %s: %s", ts.path, type(exc).__name__, exc)
        run.notes.append(f"server metrics could not be summarised: {type(exc).__name__}: {exc}")
    return run


# ---------------------------------------------------------------------------------------------
# Facts of a run (for titles, cards and the index)


def fact_text(fact: Fact | None) -> str | None:
    value = fact_value(fact)
    return None if value is None else str(value)


def gpu_title(ts: TraceSet, lang: str) -> str | None:
    """``2 × H100 · 80 GB`` or ``RTX 4090``; None when unknown."""
    hw = ts.manifest.hardware
    name = fact_text(hw.gpu_name)
    if name is None:
        return None
    count = fact_value(hw.gpu_count)
    text = f"{count} × {name}" if isinstance(count, int) and count > 1 else name
    memory = fact_value(hw.memory_gb)
    if _finite(memory):
        text += f" · {fmt_number(float(memory), lang, 0)} GB"  # type: ignore[arg-type]
    return text


def engine_title(ts: TraceSet) -> str | None:
    engine = ts.manifest.server.engine
    if engine is None:
        return None
    version = fact_text(ts.manifest.server.version)
    return f"{engine} {version}" if version else engine


def model_title(ts: TraceSet) -> str:
    m = ts.manifest
    return m.model.name or m.target.served_model_name or m.target.model or m.run_id


def run_title(ts: TraceSet, lang: str) -> str:
    """The page title as plain (unescaped) text: model · GPU · engine, leaving out what is unknown."""
    parts = [model_title(ts), gpu_title(ts, lang), engine_title(ts)]
    return " · ".join(p for p in parts if p)


def front_matter(title: str) -> str:
    """YAML front matter with the page title. MkDocs' templates do not escape titles, so the
    title is HTML-escaped here (the browser shows the characters, never runs them)."""
    return "---\ntitle: " + json.dumps(html.escape(title, quote=True), ensure_ascii=False) + "\n---"


def peak_level(levels: pd.DataFrame) -> pd.Series | None:
    valid = levels.dropna(subset=["output_throughput_tok_s"])
    if valid.empty:
        return None
    return valid.loc[valid["output_throughput_tok_s"].idxmax()]


def tokens_per_request(run: RunData) -> float | None:
    """Input + output tokens of one request: what the workload asked for, else what was measured."""
    wl = run.ts.manifest.workload
    if wl.input_len is not None and wl.output_len is not None:
        return float(wl.input_len + wl.output_len)
    prompt = run.levels["prompt_tokens_mean"].mean() if not run.levels.empty else float("nan")
    output = run.levels["output_tokens_mean"].mean() if not run.levels.empty else float("nan")
    total = float(prompt + output)
    return total if math.isfinite(total) and total > 0 else None


def kv_capacity_tokens(run: RunData) -> float | None:
    ceiling = run.known("kv_ceiling")
    if ceiling is not None and _finite(ceiling.numbers.get("capacity_tokens")):
        return float(ceiling.numbers["capacity_tokens"])
    value = fact_value(run.ts.manifest.server.config.kv_cache_tokens)
    return float(value) if _finite(value) and float(value) > 0 else None  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Markdown building blocks


def _cards(items: Sequence[tuple[str, str, str | None]], css: str = "sweeper-cards") -> str:
    """A row of cards: (label, value, note); everything already escaped."""
    cells = []
    for label, value, note in items:
        note_html = f'<span class="sweeper-card__note">{note}</span>' if note else ""
        cells.append(
            f'<div class="sweeper-card"><span class="sweeper-card__label">{label}</span>'
            f'<span class="sweeper-card__value">{value}</span>{note_html}</div>'
        )
    return f'<div class="{css}">' + "".join(cells) + "</div>"


def _figure(number: int, lang: str, title: str, chart: Any, caption: str) -> str:
    label = tr(lang, "Figure {number}").format(number=number)
    return (
        '<figure class="sweeper-figure">'
        f'<div class="sweeper-figure__title">{html.escape(label)} · {html.escape(title)}</div>'
        f"{chart_html(chart)}"
        f"<figcaption>{caption}</figcaption></figure>"
    )


def _finding_block(finding: Any, lang: str) -> str:
    """The finding's own sentence (written by sweeper.findings, in both languages)."""
    text = (getattr(finding, "text", None) or {}).get(lang) or ""
    severity = getattr(finding, "severity", "info")
    return f'<div class="sweeper-finding sweeper-finding--{esc(severity)}"><p>{esc(text)}</p></div>'


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _num(value: object, lang: str, digits: int = 1) -> str:
    return fmt_fixed(float(value), lang, digits) if _finite(value) else "–"  # type: ignore[arg-type]


def _chart_labels(lang: str, chart: str) -> dict[str, str]:
    return {key: tr(lang, text) for key, text in charts.LABEL_KEYS[chart].items()}


# ---------------------------------------------------------------------------------------------
# Sections


class _Page:
    """Collects one page's Markdown; numbers figures as they are added."""

    def __init__(self, run: RunData, lang: str):
        self.run = run
        self.lang = lang
        self.parts: list[str] = []
        self.figures = 0

    def add(self, *blocks: str) -> None:
        self.parts.extend(b for b in blocks if b)

    def heading(self, text: str, level: int = 2) -> None:
        self.add("#" * level + " " + text)

    def figure(self, title: str, chart: Any, caption: str) -> None:
        self.figures += 1
        self.add(_figure(self.figures, self.lang, title, chart, caption))

    def finding(self, finding_id: str) -> bool:
        found = self.run.finding(finding_id)
        if found is None:
            return False
        self.add(_finding_block(found, self.lang))
        return True

    def text(self) -> str:
        return "\n\n".join(self.parts) + "\n"


def _lede(page: _Page) -> None:
    run, lang = page.run, page.lang
    wl = run.ts.manifest.workload
    levels = run.levels
    total = int(levels["requests"].sum()) if not levels.empty else 0
    failed = int(levels["failed"].sum()) if not levels.empty else 0
    parts = []
    if wl.input_len is not None and wl.output_len is not None:
        parts.append(
            tr(lang, "Fixed {input_len} input / {output_len} output tokens.").format(
                input_len=fmt_number(wl.input_len, lang, 0), output_len=fmt_number(wl.output_len, lang, 0)
            )
        )
    if not levels.empty:
        parts.append(
            tr(lang, "Concurrency swept from {low} to {high}: {total} measured requests, {failed} failed.").format(
                low=int(levels["concurrency"].min()),
                high=int(levels["concurrency"].max()),
                total=fmt_number(total, lang, 0),
                failed=fmt_number(failed, lang, 0),
            )
        )
    parts.append(
        tr(lang, "Recorded on {date}.").format(date=fmt_date(run.ts.manifest.started_at, lang))
    )
    page.add('<p class="sweeper-lede">' + html.escape(" ".join(parts)) + "</p>")


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
            (tr(lang, "In / Out"), f"{fmt_number(m.workload.input_len, lang, 0)} / {fmt_number(m.workload.output_len, lang, 0)} tok", None)
        )
    kv_bytes = fact_value(cfg.kv_cache_memory_bytes)
    if _finite(kv_bytes):
        items.append((tr(lang, "KV pool"), f"{fmt_fixed(float(kv_bytes) / GIB, lang, 2)} GiB", None))  # type: ignore[arg-type]
    capacity = kv_capacity_tokens(run)
    if capacity is not None:
        items.append((tr(lang, "KV capacity"), f"{fmt_number(capacity, lang, 0)} tok", None))
    if not run.levels.empty:
        failed = int(run.levels["failed"].sum())
        total = int(run.levels["requests"].sum())
        items.append((tr(lang, "Failed requests"), f"{fmt_number(failed, lang, 0)} / {fmt_number(total, lang, 0)}", None))
    page.add(_cards(items, "sweeper-cards sweeper-cards--facts"))


def _headline(page: _Page) -> None:
    """Conclusion, recommended operating point and the headline numbers."""
    run, lang = page.run, page.lang
    page.heading(tr(lang, "Conclusion"))
    page.finding("knee")
    recommended = run.known("recommended")
    cards: list[tuple[str, str, str | None]] = []
    if recommended is not None:
        n = recommended.numbers
        value = f"C = {n.get('concurrency')}"
        if _finite(n.get("throughput_tok_s")):
            value += f" · {fmt_number(n['throughput_tok_s'], lang, 0)} tok/s"
        cards.append((tr(lang, "Recommended operating point"), esc(value), None))
    peak = peak_level(run.levels)
    if peak is not None:
        cards.append(
            (
                tr(lang, "Peak output throughput"),
                f"{fmt_number(peak['output_throughput_tok_s'], lang, 0)} tok/s",
                html.escape(tr(lang, "at C={concurrency}").format(concurrency=int(peak["concurrency"]))),
            )
        )
    roofline = run.known("roofline")
    if roofline is not None and _finite(roofline.numbers.get("ratio")):
        n = roofline.numbers
        cards.append(
            (
                tr(lang, "Single stream / roofline"),
                fmt_percent(n["ratio"], lang),
                html.escape(
                    tr(lang, "{measured} vs {ideal} tok/s").format(
                        measured=_num(n.get("measured_tok_s"), lang), ideal=_num(n.get("ideal_tok_s"), lang)
                    )
                ),
            )
        )
    scaling = run.known("scaling")
    if scaling is not None and _finite(scaling.numbers.get("speedup_max")):
        cards.append((tr(lang, "Speed-up at the top level"), f"{fmt_fixed(scaling.numbers['speedup_max'], lang, 1)} ×", None))
    tail = run.known("itl_tail")
    if tail is not None:
        ratios = _per_level(tail.numbers.get("ratio_p99_p50"))
        if ratios:
            worst_c, worst = max(ratios.items(), key=lambda kv: kv[1])
            cards.append(
                (
                    tr(lang, "Largest ITL p99 / p50"),
                    f"{fmt_fixed(worst, lang, 1)} ×",
                    html.escape(tr(lang, "at C={concurrency}").format(concurrency=worst_c)),
                )
            )
    ceiling = run.known("kv_ceiling")
    if ceiling is not None:
        occupancy = _per_level(ceiling.numbers.get("occupancy"))
        if occupancy:
            top_c = max(occupancy)
            note = None
            if _finite(ceiling.numbers.get("ceiling")):
                note = html.escape(
                    tr(lang, "real concurrency ceiling {ceiling}").format(ceiling=fmt_number(ceiling.numbers["ceiling"], lang, 0))
                )
            cards.append(
                (
                    tr(lang, "KV pool needed at C={concurrency}").format(concurrency=top_c),
                    fmt_percent(occupancy[top_c], lang),
                    note,
                )
            )
    page.add(_cards(cards, "sweeper-cards sweeper-cards--headline"))
    page.finding("recommended")


def _per_level(value: object) -> dict[int, float]:
    """A per-level number of a finding as {concurrency: value}: accepts a mapping keyed by the
    level (int or str) or a list of {"concurrency": C, "value": v} rows."""
    out: dict[int, float] = {}
    if isinstance(value, Mapping):
        for key, v in value.items():
            if _finite(v):
                out[int(key)] = float(v)
    elif isinstance(value, list):
        for row in value:
            if isinstance(row, Mapping) and _finite(row.get("value")) and row.get("concurrency") is not None:
                out[int(row["concurrency"])] = float(row["value"])
    return out


def _curve_sections(page: _Page) -> None:
    run, lang = page.run, page.lang
    levels = run.levels.dropna(subset=["output_throughput_tok_s"])
    if levels.empty:
        return
    page.heading(tr(lang, "Throughput against latency"))
    page.figure(
        tr(lang, "Throughput-latency trade-off"),
        charts.chart_throughput_latency(levels, _chart_labels(lang, "throughput_latency")),
        html.escape(
            tr(
                lang,
                "Each point is one concurrency level: output tokens per second against the p50 and p99 "
                "time to first token (log scale). The grey bands are common service levels for p99 TTFT.",
            )
        ),
    )
    page.heading(tr(lang, "Scaling: measured against ideal"))
    page.figure(
        tr(lang, "Scaling efficiency"),
        charts.chart_scaling(levels, _chart_labels(lang, "scaling")),
        html.escape(
            tr(
                lang,
                "Log-log axes: ideal linear scaling (the lowest level's rate per stream times C) is a straight "
                "line. The label at each point is its scaling efficiency, throughput / ideal.",
            )
        ),
    )
    page.finding("scaling")
    page.heading(tr(lang, "What each added slot buys"))
    page.figure(
        tr(lang, "Marginal throughput per added concurrency slot"),
        charts.chart_marginal_gain(levels, _chart_labels(lang, "marginal_gain")),
        html.escape(
            tr(
                lang,
                "Bar height = added throughput / added concurrency between two levels. The dashed line is "
                "the per-stream rate of the lowest level.",
            )
        ),
    )
    page.finding("roofline")


def _tail_sections(page: _Page) -> None:
    run, lang = page.run, page.lang
    levels = run.levels.dropna(subset=["itl_ms_p50"])
    if not levels.empty:
        page.heading(tr(lang, "The ITL tail"))
        page.figure(
            tr(lang, "ITL percentile split (log scale)"),
            charts.chart_itl_split(levels, _chart_labels(lang, "itl_split")),
            html.escape(
                tr(
                    lang,
                    "The shaded area spans p50 to p99 of the gaps between tokens. The mean sits between "
                    "them and stands for neither.",
                )
            ),
        )
        page.finding("itl_tail")
    has_cause = run.finding("tail_cause") is not None
    e2el = run.levels.dropna(subset=["e2el_ms_p50", "ttft_ms_p50"])
    if has_cause or not e2el.empty:
        page.heading(tr(lang, "Diagnosis"))
    if has_cause:
        page.heading(tr(lang, "Cause of the tail"), 3)
        page.finding("tail_cause")
    if not e2el.empty:
        page.heading(tr(lang, "Where the end-to-end time goes"), 3)
        page.figure(
            tr(lang, "E2EL breakdown at p50: first token vs decode"),
            charts.chart_e2el_breakdown(e2el, _chart_labels(lang, "e2el_breakdown")),
            html.escape(
                tr(lang, "Median end-to-end latency per level, split into time to first token and decoding time.")
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
    if run.server_levels is not None and "kv_usage_max" in run.server_levels.columns:
        observed = run.server_levels
    caption = tr(
        lang,
        "Bars: the KV cache each level needs, C × {tokens} tokens per request, as a share of the pool "
        "({capacity} tokens). The dashed line is the pool's capacity.",
    ).format(tokens=fmt_number(per_request, lang, 0), capacity=fmt_number(capacity, lang, 0))
    if observed is not None:
        caption += " " + tr(lang, "Diamonds: the highest KV usage the server reported during the level.")
    page.figure(
        tr(lang, "KV cache pool occupancy per level"),
        charts.chart_kv_occupancy(
            run.levels,
            _chart_labels(lang, "kv_occupancy"),
            capacity_tokens=capacity,
            tokens_per_request=per_request,
            observed=observed,
        ),
        html.escape(caption),
    )


def timeline_level(run: RunData) -> int | None:
    """The level whose requests the timeline shows: the recommended one, else the highest."""
    recommended = run.known("recommended")
    ok = run.requests[run.requests["status"] == "ok"].dropna(subset=["ttft_ms", "e2el_ms"])
    available = set(ok["concurrency"].astype(int))
    if recommended is not None and recommended.numbers.get("concurrency") in available:
        return int(recommended.numbers["concurrency"])
    return max(available) if available else None


def _timeline_section(page: _Page) -> None:
    run, lang = page.run, page.lang
    level = timeline_level(run)
    if level is None:
        return
    page.heading(tr(lang, "Requests at C={concurrency}, one bar each").format(concurrency=level))
    shown = min(
        charts.TIMELINE_MAX_REQUESTS,
        int(((run.requests["concurrency"] == level) & (run.requests["status"] == "ok")).sum()),
    )
    page.figure(
        tr(lang, "Request timeline at C={concurrency}").format(concurrency=level),
        charts.chart_request_timeline(run.requests, level, _chart_labels(lang, "request_timeline")),
        html.escape(
            tr(
                lang,
                "The first {shown} requests of the level in send order: waiting for the first token, then "
                "decoding; the tick marks the first token.",
            ).format(shown=shown)
        ),
    )


def _data_table(page: _Page) -> None:
    run, lang = page.run, page.lang
    levels = run.levels
    if levels.empty:
        return
    page.heading(tr(lang, "Measured results"))
    capacity = kv_capacity_tokens(run)
    per_request = tokens_per_request(run)
    first = levels.dropna(subset=["output_throughput_tok_s"]).head(1)
    per_stream = (
        float(first["output_throughput_tok_s"].iloc[0] / first["concurrency"].iloc[0]) if not first.empty else None
    )
    header = [
        tr(lang, "Concurrency"),
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
    with_kv = capacity is not None and per_request is not None
    if with_kv:
        header.append(tr(lang, "KV needed"))
    rows = []
    for _, row in levels.iterrows():
        c = int(row["concurrency"])
        efficiency = (
            fmt_percent(row["output_throughput_tok_s"] / (c * per_stream), lang)
            if per_stream and _finite(row["output_throughput_tok_s"])
            else "–"
        )
        cells = [
            str(c),
            fmt_number(int(row["requests"]), lang, 0),
            fmt_number(int(row["failed"]), lang, 0),
            _num(row["duration_s"], lang, 1),
            _num(row["output_throughput_tok_s"], lang, 1),
            _num(row["output_throughput_per_gpu_tok_s"], lang, 1),
            efficiency,
            _num(row["ttft_ms_p50"], lang),
            _num(row["ttft_ms_p99"], lang),
            _num(row["tpot_ms_p50"], lang, 2),
            _num(row["itl_ms_p50"], lang, 2),
            _num(row["itl_ms_p99"], lang, 2),
            _num(row["e2el_ms_p50"], lang),
        ]
        if with_kv:
            cells.append(fmt_percent(c * per_request / capacity, lang))  # type: ignore[operator]
        rows.append(cells)
    page.add(_table(header, rows))
    note = tr(lang, "Latencies in ms. Efficiency = throughput / (C × the lowest level's rate per stream).")
    if with_kv:
        note += " " + tr(lang, "KV needed = C × {tokens} / {capacity}.").format(
            tokens=fmt_number(per_request, lang, 0), capacity=fmt_number(capacity, lang, 0)  # type: ignore[arg-type]
        )
    gpus = gpus_of(run.ts)
    if gpus > 1:
        note += " " + tr(lang, "Per GPU divides by {gpus} GPUs.").format(gpus=gpus)
    page.add(f'<p class="sweeper-note">{html.escape(note)}</p>')


def _slo_section(page: _Page) -> None:
    run, lang = page.run, page.lang
    slo = run.finding("slo_table")
    if slo is None:
        return
    page.heading(tr(lang, "Choosing a level by service level"))
    page.finding("slo_table")
    rows = (slo.numbers or {}).get("rows") or []
    if not rows:
        return
    header = [tr(lang, "If the SLO is"), tr(lang, "Choose"), tr(lang, "Throughput (tok/s)"), "p99 TTFT (ms)", "p50 ITL (ms)"]
    body = []
    for row in rows:
        if not isinstance(row, Mapping):
            continue
        chosen = row.get("concurrency")
        mark = "**" if row.get("recommended") else ""
        body.append(
            [
                f"{mark}{esc(row.get('slo', ''))}{mark}",
                f"C={chosen}" if chosen is not None else tr(lang, "none meets it"),
                _num(row.get("throughput_tok_s"), lang),
                _num(row.get("ttft_ms_p99"), lang),
                _num(row.get("itl_ms_p50"), lang, 2),
            ]
        )
    page.add(_table(header, body))
    note = tr(lang, "Bold: the service levels the recommended operating point meets.")
    page.add(f'<p class="sweeper-note">{html.escape(note)}</p>')


def _more_findings(page: _Page) -> None:
    run, lang = page.run, page.lang
    if run.finding("long_input") is not None:
        page.heading(tr(lang, "Long inputs"))
        page.finding("long_input")
    if run.finding("client_health") is not None:
        page.heading(tr(lang, "Health of the recording client"))
        page.finding("client_health")


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
    "client_overload": N_(
        "The recording client itself was overloaded: record again with more workers or from a less busy host "
        "before trusting the tail."
    ),
}


def _next_steps(page: _Page) -> None:
    """What to change next, from what the findings concluded (never from guesses)."""
    run, lang = page.run, page.lang
    advice: list[str] = []
    recommended = run.known("recommended")
    step = recommended.numbers.get("next") if recommended is not None else None
    if isinstance(step, Mapping) and step.get("concurrency") is not None and _finite(step.get("throughput_gain")):
        text = tr(lang, "Going from C={c} to C={n} buys {gain} more throughput; p99 TTFT becomes {ttft} ms.").format(
            c=recommended.numbers.get("concurrency"),
            n=step["concurrency"],
            gain=fmt_percent(step["throughput_gain"], lang, 0),
            ttft=_num(step.get("ttft_p99_ms"), lang, 0),
        )
        advice.append(text)
    cause = run.known("tail_cause")
    key = cause.numbers.get("cause") if cause is not None else None
    if isinstance(key, str) and key in _CAUSE_ADVICE:
        advice.append(tr(lang, _CAUSE_ADVICE[key]))
    headroom = run.known("memory_headroom")
    suggested = headroom.numbers.get("suggested_kv_cache_memory_bytes") if headroom is not None else None
    if headroom is not None and _finite(suggested) and _finite(headroom.numbers.get("new_ceiling")):
        advice.append(
            tr(lang, "Start the server with --kv-cache-memory={bytes} ({gib} GiB): the concurrency ceiling rises to {ceiling}.").format(
                bytes=int(suggested),  # type: ignore[arg-type]
                gib=fmt_fixed(float(suggested) / GIB, lang, 2),  # type: ignore[arg-type]
                ceiling=fmt_number(headroom.numbers["new_ceiling"], lang, 0),
            )
        )
    ceiling = run.known("kv_ceiling")
    if ceiling is not None and _finite(ceiling.numbers.get("ceiling")):
        max_seqs = ceiling.numbers.get("max_num_seqs")
        if _finite(max_seqs) and float(max_seqs) > float(ceiling.numbers["ceiling"]):
            advice.append(
                tr(lang, "--max-num-seqs {max_seqs} is above what the KV cache holds ({ceiling}): levels above {ceiling} queue inside the server.").format(
                    max_seqs=int(max_seqs), ceiling=int(ceiling.numbers["ceiling"])  # type: ignore[arg-type]
                )
            )
    if advice:
        page.heading(tr(lang, "What to change next"))
        page.add("\n".join(f"- {esc(a)}" for a in advice))


def _how_recorded(page: _Page) -> None:
    run, lang = page.run, page.lang
    m = run.ts.manifest
    page.heading(tr(lang, "How it was recorded"))
    rows: list[list[str]] = []
    source = m.source.tool + (f" {m.source.version}" if m.source.version else "")
    rows.append([tr(lang, "Recorded by"), esc(source), ""])
    rows.append([tr(lang, "Run id"), esc(m.run_id), ""])
    rows.append([tr(lang, "Started"), esc(m.started_at.isoformat()), ""])
    if m.target.base_url:
        rows.append([tr(lang, "Endpoint"), esc(f"{m.target.base_url} ({m.target.endpoint})"), ""])
    if m.target.model:
        rows.append([tr(lang, "Model sent"), esc(m.target.model), ""])
    rows.append([tr(lang, "sweeper version"), esc(m.sweeper_version), ""])
    page.add(_table([tr(lang, "What"), tr(lang, "Value"), tr(lang, "Source")], rows).replace("---:", "---"))
    if m.source.command:
        page.add(tr(lang, "Command:"), "```text\n" + " ".join(m.source.command).replace("```", "'''") + "\n```")
    facts = _fact_rows(run)
    if facts:
        page.heading(tr(lang, "Server, hardware and model facts"), 3)
        page.add(
            _table([tr(lang, "Fact"), tr(lang, "Value"), tr(lang, "Source")], facts).replace("---:", "---"),
            '<p class="sweeper-note">'
            + html.escape(
                tr(
                    lang,
                    "Source: endpoint = an HTTP endpoint of the server, metrics = its Prometheus metrics, "
                    "log = its log, user = given on the command line, spec_table = sweeper's table of GPUs "
                    "and models, model_config = the model's config.json, derived = computed from other facts.",
                )
            )
            + "</p>",
        )
    wl = m.workload
    workload_rows = [
        [tr(lang, "Concurrency levels"), esc(", ".join(map(str, wl.concurrency_levels))), ""],
        [tr(lang, "Warm-up requests per level"), str(wl.warmup_per_level), ""],
    ]
    if wl.ignore_eos is not None:
        workload_rows.append(["ignore_eos", str(wl.ignore_eos).lower(), ""])
    if wl.prompt_source:
        workload_rows.append([tr(lang, "Prompts"), esc(wl.prompt_source), ""])
    if wl.seed is not None:
        workload_rows.append([tr(lang, "Seed"), str(wl.seed), ""])
    page.heading(tr(lang, "Workload"), 3)
    page.add(_table([tr(lang, "What"), tr(lang, "Value"), ""], workload_rows).replace("---:", "---"))
    if m.labels:
        page.heading(tr(lang, "Labels"), 3)
        page.add("\n".join(f"- **{esc(k)}**: {esc(v)}" for k, v in sorted(m.labels.items())))
    notes = [*m.warnings, *run.ts.problems, *run.notes]
    if notes:
        page.heading(tr(lang, "Warnings"), 3)
        page.add("\n".join(f"- {esc(n)}" for n in notes))


def _fact_rows(run: RunData) -> list[list[str]]:
    m = run.ts.manifest
    groups: list[tuple[str, Any]] = [("server", m.server.config), ("hardware", m.hardware), ("model", m.model)]
    rows: list[list[str]] = []
    if m.server.version is not None:
        rows.append(_fact_row("server.version", m.server.version))
    for prefix, model in groups:
        for name in type(model).model_fields:
            value = getattr(model, name)
            if isinstance(value, Fact):
                rows.append(_fact_row(f"{prefix}.{name}", value))
            elif name == "extra" and isinstance(value, dict):
                for key, fact in sorted(value.items()):
                    rows.append(_fact_row(f"{prefix}.{key}", fact))
    return rows


def _fact_row(name: str, fact: Fact) -> list[str]:
    source = fact.source + (f": {fact.detail}" if fact.detail else "")
    return [f"<code>{esc(name)}</code>", esc(fact.value), esc(source)]


# ---------------------------------------------------------------------------------------------
# The page


def render_run_page(run: RunData, lang: str) -> str:
    """The whole report page of one run in ``lang``, as Markdown (front matter included)."""
    page = _Page(run, lang)
    title = run_title(run.ts, lang)
    page.add(front_matter(run.run_id))
    kicker = tr(lang, "Concurrency sweep")
    page.add(f'<p class="sweeper-kicker">{html.escape(kicker)} · {esc(run.run_id)}</p>')
    page.heading(esc(title), 1)
    _lede(page)
    _fact_cards(page)
    _headline(page)
    _curve_sections(page)
    _tail_sections(page)
    _timeline_section(page)
    _more_findings(page)
    _data_table(page)
    _slo_section(page)
    _next_steps(page)
    _how_recorded(page)
    return page.text()
