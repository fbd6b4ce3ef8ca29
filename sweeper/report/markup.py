"""Building blocks of the generated pages: words, escaping, cards, figures, tables.

Words go through the Babel catalog of the ``pages`` domain (:func:`tr`); everything that comes
from a trace set goes through :func:`esc`, which writes every character HTML or Markdown would act
on as a character reference, so a label ``<script>alert(1)</script>`` or ``[x](javascript:...)``
shows as text. A chart is a ``<div class="sweeper-chart" data-spec="...">`` holding its complete
Vega-Lite spec as HTML-escaped JSON (:func:`chart_html`), drawn by ``assets/sweeper-charts.js``.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from typing import Any

from sweeper.facts.serverlog import strip_terminal
from sweeper.findings import Finding
from sweeper.i18n import fmt_fixed, gettext, ngettext
from sweeper.report import charts
from sweeper.units import finite

DOMAIN = "pages"

# Characters HTML or Markdown would act on, written as character references (one pass, so a
# reference is never escaped twice).
_ESCAPES = {c: f"&#{ord(c)};" for c in "\\`*_{}[]()#+-!|~:<>&\"'"}
_ESCAPES["\n"] = " "


def tr(lang: str, message: str) -> str:
    """A sentence of the pages in ``lang`` (extracted by ``pybabel extract -k tr:2 -k trn:2,3
    -k tl -k N_``; ``tl`` is a page's level-naming :meth:`tr`)."""
    return gettext(lang, DOMAIN, message)


def trn(lang: str, singular: str, plural: str, n: int) -> str:
    """A sentence with a count in ``lang``: the singular or the plural form for ``n`` (Babel's
    ngettext; extracted with ``-k trn:2,3``). The count is still formatted by the caller."""
    return ngettext(lang, DOMAIN, singular, plural, n)


def labels_html(labels: Mapping[str, str]) -> str:
    """A run's labels (``--label key=value``) as chips, escaped: a label holding markup is text.
    Each chip carries ``key=value`` for the runs index's filter."""
    chips = [
        f'<span class="sweeper-label" data-label="{esc(f"{k}={v}")}">'
        f"<b>{esc(k)}</b>={esc(v)}</span>"
        for k, v in sorted(labels.items())
    ]
    return '<span class="sweeper-labels">' + " ".join(chips) + "</span>" if chips else ""


def esc(value: object) -> str:
    """Text from a trace set, safe inside Markdown and HTML: terminal escape sequences (a
    title-setting ``ESC]0;...BEL``, colours) and other control characters removed, HTML-escaped,
    and the characters Markdown would act on (links, emphasis, tables, code) written as
    character references."""
    text = strip_terminal(str(value)).replace("\r", "")  # a page's text is one line
    return "".join(_ESCAPES.get(c, c) for c in text)


def chart_html(chart: Any) -> str:
    """One chart as a ``div`` carrying its complete Vega-Lite spec in an attribute (not an inline
    script: Material's instant navigation re-runs inline scripts without their type)."""
    # Validated against the schema by the tests; skipping it here halves the cost of a page.
    spec = chart.to_dict(validate=False) if hasattr(chart, "to_dict") else chart
    data = json.dumps(spec, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return f'<div class="sweeper-chart" data-spec="{html.escape(data, quote=True)}"></div>'


def front_matter(title: str) -> str:
    """YAML front matter with the page title. MkDocs' templates do not escape titles, so the
    title is HTML-escaped here (the browser shows the characters, never runs them)."""
    return "---\ntitle: " + json.dumps(html.escape(title, quote=True), ensure_ascii=False) + "\n---"


def cards(items: Sequence[tuple[str, str, str | None]], css: str = "sweeper-cards") -> str:
    """A row of cards: (label, value, note); everything already escaped. No cards: nothing."""
    if not items:
        return ""
    cells = []
    for label, value, note in items:
        note_html = f'<span class="sweeper-card__note">{note}</span>' if note else ""
        cells.append(
            f'<div class="sweeper-card"><span class="sweeper-card__label">{label}</span>'
            f'<span class="sweeper-card__value">{value}</span>{note_html}</div>'
        )
    return f'<div class="{css}">' + "".join(cells) + "</div>"


def figure_html(number: int, lang: str, title: str, chart: Any, caption: str) -> str:
    """A numbered figure: title, the chart, its caption (already escaped)."""
    label = tr(lang, "Figure {number}").format(number=number)
    return (
        '<figure class="sweeper-figure">'
        f'<div class="sweeper-figure__title">{html.escape(label)} · {html.escape(title)}</div>'
        f"{chart_html(chart)}"
        f"<figcaption>{caption}</figcaption></figure>"
    )


def finding_block(finding: Finding, lang: str) -> str:
    """The finding's own sentence (written by sweeper.findings, in both languages)."""
    text = finding.text.get(lang, "")
    severity = finding.severity
    return f'<div class="sweeper-finding sweeper-finding--{esc(severity)}"><p>{esc(text)}</p></div>'


def table(header: Sequence[str], rows: Sequence[Sequence[str]], *, numeric: bool = True) -> str:
    """A Markdown table; cells already escaped. ``numeric``: columns aligned right."""
    rule = "---:" if numeric else "---"
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(rule for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def num(value: object, lang: str, digits: int = 1) -> str:
    """A number with ``digits`` decimals in ``lang``, or a dash when there is none."""
    return fmt_fixed(float(value), lang, digits) if finite(value) else "–"


def chart_labels(lang: str, chart: str) -> dict[str, str]:
    """The labels of one chart of :mod:`sweeper.report.charts`, translated."""
    return {key: tr(lang, text) for key, text in charts.LABEL_KEYS[chart].items()}
