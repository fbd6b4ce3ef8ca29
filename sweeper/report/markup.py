"""Building blocks of the generated pages: words, escaping, cards, figures, tables.

Words go through the Babel catalog of the ``pages`` domain (:func:`tr`); everything that comes
from a trace set goes through :func:`esc`, which writes every character HTML or Markdown would act
on as a character reference, so a label ``<script>alert(1)</script>`` or ``[x](javascript:...)``
shows as text. A chart is a ``<div class="sweeper-chart" data-spec="...">`` holding its complete
Vega-Lite spec as HTML-escaped JSON (:func:`chart_html`), drawn by ``assets/sweeper-charts.js``.
"""

from __future__ import annotations

import hashlib
import html
import json
import pickle
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd

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


def chart_html(chart: Any, datasets: PageData | None = None) -> str:
    """One chart as a ``div`` carrying its Vega-Lite spec in an attribute (not an inline
    script: Material's instant navigation re-runs inline scripts without their type).

    Without ``datasets`` the spec is complete (``$schema``, config and data inline). With a
    page's :class:`PageData`, the spec is compact: its data moves into the page's one dataset
    block (shared by every chart of the page, numbers rounded by :func:`round_rows`), and the
    ``$schema`` and the shared config (:data:`sweeper.report.charts.SHARED_CONFIG`) are left to
    the site's script, which puts them back before drawing."""
    # Validated against the schema by the tests; skipping it here halves the cost of a page.
    spec = chart.to_dict(validate=False) if hasattr(chart, "to_dict") else chart
    if datasets is None:
        data = json.dumps(spec, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        return f'<div class="sweeper-chart" data-spec="{html.escape(data, quote=True)}"></div>'
    data = _json(datasets.compact(spec))
    return f"<div class=\"sweeper-chart\" data-spec='{attr_json(data)}'></div>"


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def attr_json(text: str) -> str:
    """JSON for a single-quoted HTML attribute: ``&``, ``'``, ``<`` and ``>`` as references
    (the double quotes JSON is made of stay as they are, a third of the weight of ``&quot;``)."""
    return (
        text.replace("&", "&amp;").replace("'", "&#39;").replace("<", "&lt;").replace(">", "&gt;")
    )


# Decimals kept per kind of number in a chart's data, by the column's name (what the number
# means: latencies in ms to 0.01 ms, times in s to 0.1 ms, rates to 0.01 a second); anything
# else to 0.01 (below 1: 4 significant digits, a share shown as 12.3%). A tooltip shows at most
# one decimal of any of them.
_DECIMALS = (("_ms", 2), ("tok_s", 2), ("_rps", 2), ("rps", 2), ("_per_slot", 2), ("_s", 4))


def _round(key: str, value: float) -> float | int:
    if value != value or value in (float("inf"), float("-inf")):
        return value  # refused by json.dumps(allow_nan=False), as before
    for suffix, digits in _DECIMALS:
        if key.endswith(suffix):
            value = round(value, digits)
            break
    else:  # counts and sizes to 0.01, shares and ratios below 1 to 4 significant digits
        value = round(value, 2) if abs(value) >= 1 else float(f"{value:.4g}")
    return int(value) if value.is_integer() and abs(value) < 2**53 else value


def round_rows(rows: list[Any]) -> list[Any]:
    """A dataset's rows with their floats rounded to what they mean (:data:`_DECIMALS`)."""
    out = []
    for row in rows:
        if isinstance(row, dict):
            row = {k: _round(k, v) if isinstance(v, float) else v for k, v in row.items()}
        out.append(row)
    return out


class PageData:
    """The datasets of one page's charts: each distinct dataset once (``d1``, ``d2``...), written
    as one ``<div class="sweeper-datasets" hidden data-datasets='...'>`` by :meth:`html`."""

    def __init__(self) -> None:
        self.datasets: dict[str, list[Any]] = {}
        self._ids: dict[str, str] = {}

    def add(self, rows: list[Any]) -> str:
        rows = round_rows(rows)
        key = _json(rows)
        name = self._ids.get(key)
        if name is None:
            name = f"d{len(self._ids) + 1}"
            self._ids[key] = name
            self.datasets[name] = rows
        return name

    def compact(self, spec: dict[str, Any]) -> dict[str, Any]:
        """``spec`` without its datasets (moved here), ``$schema`` and the shared config."""
        spec = dict(spec)
        names = {old: self.add(rows) for old, rows in (spec.pop("datasets", None) or {}).items()}
        spec.pop("$schema", None)
        if spec.get("config") == charts.SHARED_CONFIG:
            del spec["config"]
        return _renamed(spec, names)

    def html(self) -> str:
        """The page's datasets, each as columns and rows (:func:`columnar`): the names of the
        fields are written once a dataset, not once a row."""
        if not self.datasets:
            return ""
        data = {name: columnar(rows) for name, rows in self.datasets.items()}
        return f"<div class=\"sweeper-datasets\" hidden data-datasets='{attr_json(_json(data))}'></div>"


def columnar(rows: list[Any]) -> Any:
    """``[{"a": 1, "b": 2}, {"a": 3, "b": 4}]`` as ``{"columns": ["a", "b"], "rows": [[1, 2],
    [3, 4]]}`` when every row has the same fields (else the rows as they are);
    :func:`expand_dataset` (and the site's script) turns it back."""
    if not rows or not all(isinstance(row, dict) for row in rows):
        return rows
    columns = list(rows[0])
    if any(list(row) != columns for row in rows):
        return rows
    return {"columns": columns, "rows": [list(row.values()) for row in rows]}


def expand_dataset(data: Any) -> list[Any]:
    """A dataset of a page's data block as rows (the inverse of :func:`columnar`)."""
    if isinstance(data, dict) and isinstance(data.get("columns"), list):
        columns = data["columns"]
        return [dict(zip(columns, row, strict=True)) for row in data.get("rows") or []]
    return data if isinstance(data, list) else []


def _renamed(value: Any, names: Mapping[str, str]) -> Any:
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k == "data" and isinstance(v, dict) and v.get("name") in names:
                out[k] = {**v, "name": names[v["name"]]}
            else:
                out[k] = _renamed(v, names)
        return out
    if isinstance(value, list):
        return [_renamed(v, names) for v in value]
    return value


# Labels of a chart drawn once for both languages: a placeholder per label key, swapped for the
# words of each language in the finished spec (private-use characters: never in a label).
_TOKEN = "\ue000{}\ue001"
_TOKEN_RE = re.compile("\ue000([^\ue000\ue001]*)\ue001")


def shared_spec(
    memo: dict[Any, Any] | None,
    key: str,
    draw: Callable[..., Any],
    args: Sequence[Any],
    labels: Mapping[str, str],
    kwargs: Mapping[str, Any],
) -> Any:
    """The spec of ``draw(*args, labels, **kwargs)``. With a ``memo`` shared by the languages of
    one run, the chart is drawn once, with placeholders for its labels, and each language gets
    a copy with its words: where the data differs between the languages (a rate run's level
    names), the data's fingerprint differs too and the chart is drawn again."""
    if memo is None:
        return draw(*args, labels, **kwargs)
    fingerprint = (
        key,
        tuple(labels),
        *map(_fingerprint, args),
        *sorted((k, _fingerprint(v)) for k, v in kwargs.items()),
    )
    spec = memo.get(fingerprint)
    if spec is None:
        tokens = {k: _TOKEN.format(k) for k in labels}
        chart = draw(*args, tokens, **kwargs)
        spec = chart.to_dict(validate=False) if hasattr(chart, "to_dict") else chart
        memo[fingerprint] = spec
    return _with_labels(spec, labels)


def _fingerprint(value: Any) -> Any:
    """What tells a chart's data apart: a frame's pickle (columns, dtypes, index and values;
    40 times cheaper than pandas' row hashes), any other argument's repr. Equal frames may
    pickle differently (shared objects are written once), which only draws a chart again."""
    if isinstance(value, pd.DataFrame | pd.Series):
        return ("frame", hashlib.sha1(pickle.dumps(value, protocol=5)).hexdigest())
    return repr(value)


def _with_labels(value: Any, labels: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        if "\ue000" not in value:
            return value
        return _TOKEN_RE.sub(lambda m: labels.get(m.group(1), m.group(0)), value)
    if isinstance(value, dict):
        return {k: _with_labels(v, labels) for k, v in value.items()}
    if isinstance(value, list):
        return [_with_labels(v, labels) for v in value]
    return value


def front_matter(title: str, *, searched: bool = True) -> str:
    """YAML front matter with the page title. MkDocs' templates do not escape titles, so the
    title is HTML-escaped here (the browser shows the characters, never runs them).
    ``searched=False`` leaves the page out of the site's search (Material and Zensical read
    ``search: exclude``)."""
    title_line = "title: " + json.dumps(html.escape(title, quote=True), ensure_ascii=False)
    exclude = "" if searched else "\nsearch:\n  exclude: true"
    return f"---\n{title_line}{exclude}\n---"


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


def figure_html(
    number: int, lang: str, title: str, chart: Any, caption: str, datasets: PageData | None = None
) -> str:
    """A numbered figure: title, the chart (compact with a page's ``datasets``), its caption
    (already escaped)."""
    label = tr(lang, "Figure {number}").format(number=number)
    return (
        '<figure class="sweeper-figure">'
        f'<div class="sweeper-figure__title">{html.escape(label)} · {html.escape(title)}</div>'
        f"{chart_html(chart, datasets)}"
        f"<figcaption>{caption}</figcaption></figure>"
    )


def finding_block(finding: Finding, lang: str) -> str:
    """The finding's own sentence (written by sweeper.findings, in both languages)."""
    text = finding.text.get(lang, "")
    severity = finding.severity
    return f'<div class="sweeper-finding sweeper-finding--{esc(severity)}"><p>{esc(text)}</p></div>'


def html_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A table as an HTML block; cells already escaped. Python-Markdown passes the block
    through untouched, so a table of a thousand rows costs its Markdown render nothing (its
    links are therefore written as the URLs they lead to, not as ``.md`` paths)."""
    lines = [
        "<table>",
        "<thead>",
        "<tr>" + "".join(f"<th>{cell}</th>" for cell in header) + "</tr>",
    ]
    lines += ["</thead>", "<tbody>"]
    lines += ["<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows]
    lines += ["</tbody>", "</table>"]
    return "\n".join(lines)


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
