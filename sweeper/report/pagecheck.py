"""The page check: what a reader must never see on a generated page, in either language.

::

    for defect in page_defects(Path("site/runs/x/index.html").read_text()):
        print(defect)        # "none: ... C = None ..."

:func:`page_defects` takes a built HTML page (only its article, the part sweeper writes, and its
``<title>``) or the Markdown sweeper writes (front matter, text, the HTML blocks). It reads the text
a reader sees (character references decoded; code, pre and kbd left out: they quote a command, a
log line or a server's words as they are) and the words a chart shows (titles, legends, labels),
and returns one line per defect, ``"<kind>: <context>"``. The kinds:

- ``none``, ``nan``, ``inf``: Python's ``None``, a NaN or an infinity written as a value;
- ``placeholder``: a ``{name}`` a sentence was never formatted with;
- ``repr``: a Python repr (``Fact(value=...)``, ``np.float64(...)``, ``<... object at 0x...>``,
  ``{'key': ...}``, a cell holding ``True`` or ``False``);
- ``plural``: a count of one with a plural noun (``1 requests``);
- ``markup``: a script, an event handler or a ``javascript:`` link inside the article (text from
  a trace set must arrive as text);
- ``empty_card``: a card whose value is empty;
- ``path_title``: a title holding a local path (``/lustre/fsw/models/Kimi-K2.5``): the model's
  name is its last component;
- ``control``: a terminal escape sequence or another control character anywhere in the page,
  quoted text included (a server log's ``ESC]0;title BEL``).
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from typing import Any

from sweeper.report.markup import expand_dataset

__all__ = ["DEFECT_KINDS", "page_defects"]

DEFECT_KINDS = (
    "none",
    "nan",
    "inf",
    "placeholder",
    "repr",
    "plural",
    "markup",
    "empty_card",
    "path_title",
    "control",
)

# Elements whose text quotes something as it is (a command, a log line): not checked.
_QUOTING = frozenset({"code", "pre", "kbd", "samp", "script", "style", "template"})
_VOID = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}
)
_WORD_CHECKS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("none", re.compile(r"(?<![\w.'\"])None(?![\w'\"])")),
    ("nan", re.compile(r"(?<![\w.])[-+]?nan(?!\w)", re.IGNORECASE)),
    ("inf", re.compile(r"(?<![\w.])[-+]?(?:inf|infinity)(?!\w)", re.IGNORECASE)),
    ("placeholder", re.compile(r"\{[A-Za-z_][A-Za-z0-9_]*(?:[.:!][^{}\s]*)?\}")),
    (
        "repr",
        re.compile(
            r"<[\w.]+ object at 0x[0-9a-f]+>"
            r"|\b(?:np|numpy|pd)\.\w+\("
            r"|\b(?:Timestamp|Timedelta|datetime\.datetime|Decimal|array|dtype)\("
            r"|\b[A-Z][A-Za-z]+\((?:[a-z_]+=)"
            r"|\{'[^']*': "
            r"|\[np\."
        ),
    ),
)
# Nouns a page counts: "1 requests" is a defect, "1 request" is not.
_PLURAL_NOUNS = (
    "requests",
    "runs",
    "levels",
    "gaps",
    "tokens",
    "GPUs",
    "preemptions",
    "streams",
    "chunks",
    "failures",
    "errors",
    "seconds",
    "servers",
    "warnings",
    "files",
    "lines",
    "slots",
    "samples",
    "prompts",
    "messages",
    "times",
)
_PLURAL = re.compile(r"(?<![\d.,\w])1 (?:" + "|".join(_PLURAL_NOUNS) + r")\b")
_LOCAL_PATH = re.compile(r"(?:^|[\s(·])(?:/|~/|\./|[A-Za-z]:\\)[^\s/]+[/\\]")
_EVENT_ATTR = re.compile(r"^on[a-z]+$")
_UNSAFE_URL = re.compile(r"\s*(?:javascript|vbscript|data:text)", re.IGNORECASE)
_HEADINGS = frozenset({"h1", "h2", "h3", "h4"})
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_CONTEXT = 40


def page_defects(page: str) -> list[str]:
    """Every defect of one page (HTML or Markdown), one ``"<kind>: <context>"`` line each."""
    title, body = _split(page)
    parser = _Reader()
    parser.feed(body)
    parser.close()
    defects: list[str] = []
    texts = [*parser.texts, *parser.chart_texts]
    if title is not None:
        texts.append(title)
    for text in texts:
        defects.extend(_text_defects(text))
    defects.extend(parser.defects)
    for where, text in (("page", page), *(("text", t) for t in parser.all_texts)):
        found = _CONTROL.search(text)
        if found:
            defects.append(f"control: {where} holds {found.group()!r}")
            break
    for heading in [*parser.headings, *([title] if title is not None else [])]:
        if _LOCAL_PATH.search(heading):
            defects.append(f"path_title: {_clip(heading)}")
    return defects


def _split(page: str) -> tuple[str | None, str]:
    """(the page's title, the part sweeper writes) of a built page or of generated Markdown."""
    if re.search(r"<html[\s>]", page, re.IGNORECASE):
        match = re.search(r"<title>(.*?)</title>", page, re.DOTALL | re.IGNORECASE)
        title = html.unescape(match.group(1)) if match else None
        article = re.search(r"<article\b[^>]*>(.*)</article>", page, re.DOTALL | re.IGNORECASE)
        return title, article.group(1) if article else ""
    title = None
    front = re.match(r"---\n(.*?)\n---\n", page, re.DOTALL)
    if front:
        page = page[front.end() :]
        found = re.search(r"^title:\s*(.*)$", front.group(1), re.MULTILINE)
        if found:
            raw = found.group(1).strip()
            try:
                title = html.unescape(str(json.loads(raw)))
            except ValueError:
                title = html.unescape(raw)
    # Fenced blocks and inline code quote text as it is.
    page = re.sub(r"^```.*?^```", "", page, flags=re.DOTALL | re.MULTILINE)
    page = re.sub(r"`[^`\n]*`", "", page)
    return title, page


def _text_defects(text: str) -> Iterator[str]:
    for kind, pattern in _WORD_CHECKS:
        for match in pattern.finditer(text):
            yield f"{kind}: {_context(text, match)}"
    for match in _PLURAL.finditer(text):
        yield f"plural: {_context(text, match)}"
    if text.strip() in ("True", "False"):  # a table cell or card holding Python's bool
        yield f"repr: {text.strip()}"


def _context(text: str, match: re.Match[str]) -> str:
    start, end = max(0, match.start() - _CONTEXT), match.end() + _CONTEXT
    return _clip(text[start:end])


def _clip(text: str) -> str:
    return " ".join(text.split())[: 2 * _CONTEXT + 20]


class _Reader(HTMLParser):
    """The visible text of a page (outside quoting elements), its headings, the words of its
    charts, and the markup defects (scripts, handlers, empty cards)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.texts: list[str] = []
        self.all_texts: list[str] = []  # quoted text included (for control characters)
        self.chart_texts: list[str] = []
        self.headings: list[str] = []
        self.defects: list[str] = []
        self._stack: list[str] = []
        self._current: list[str] = []
        self._heading: list[str] | None = None
        self._card_value: list[str] | None = None
        self._card_depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._flush()
        values = dict(attrs)
        if tag == "script":
            self.defects.append(f"markup: <script> {_clip(str(values))}")
        for name, value in attrs:
            if _EVENT_ATTR.match(name):
                self.defects.append(f"markup: {name}= on <{tag}>")
            if name in ("href", "src", "action") and _UNSAFE_URL.match(value or ""):
                self.defects.append(f"markup: {name}={_clip(value or '')}")
            if name in ("title", "alt", "aria-label") and value:
                self.texts.append(value)
        spec = values.get("data-spec")
        if spec:
            self._chart(spec)
        datasets = values.get("data-datasets")  # a run page's one block of chart data
        if datasets:
            self._chart(datasets, key="datasets")
        if tag in _VOID:
            return
        self._stack.append(tag)
        if tag in _HEADINGS and self._heading is None:
            self._heading = []
        if "sweeper-card__value" in (values.get("class") or "").split():
            self._card_value = []
            self._card_depth = len(self._stack)

    def handle_endtag(self, tag: str) -> None:
        self._flush()
        if tag in _VOID or tag not in self._stack:
            return
        while self._stack:
            top = self._stack.pop()
            if self._card_value is not None and len(self._stack) < self._card_depth:
                if not "".join(self._card_value).strip():
                    self.defects.append("empty_card: a card with no value")
                self._card_value = None
            closes_heading = top in _HEADINGS and not any(t in _HEADINGS for t in self._stack)
            if closes_heading and self._heading is not None:
                self.headings.append(" ".join("".join(self._heading).split()))
                self._heading = None
            if top == tag:
                break

    def handle_data(self, data: str) -> None:
        self.all_texts.append(data)
        if any(tag in _QUOTING for tag in self._stack):
            return
        self._current.append(data)
        if self._heading is not None:
            self._heading.append(data)
        if self._card_value is not None:
            self._card_value.append(data)

    def close(self) -> None:
        super().close()
        self._flush()

    def _flush(self) -> None:
        """Text runs are checked per element, so a match never spans two cells."""
        if self._current:
            text = "".join(self._current)
            if text.strip():
                self.texts.append(text)
            self._current = []

    def _chart(self, spec_text: str, key: str | None = None) -> None:
        try:
            spec = json.loads(spec_text)
        except ValueError:
            self.defects.append("repr: a chart whose spec is not JSON")
            return
        self.chart_texts.extend(_chart_words({key: spec} if key else spec))


# Keys of a Vega-Lite spec whose strings a reader sees (the datasets' strings are labels too).
_SHOWN_KEYS = frozenset({"title", "text", "domain", "subtitle", "description", "labelExpr"})


def _chart_words(spec: Any, shown: bool = False) -> Iterator[str]:
    if isinstance(spec, dict):
        for key, value in spec.items():
            if key == "datasets" and isinstance(value, dict):
                for rows in value.values():
                    yield from _dataset_words(expand_dataset(rows))
            elif key not in ("$schema", "field", "format", "name", "type"):
                yield from _chart_words(value, shown or key in _SHOWN_KEYS)
    elif isinstance(spec, list):
        for item in spec:
            yield from _chart_words(item, shown)
    elif isinstance(spec, str) and shown:
        yield spec


def _dataset_words(rows: Any) -> Iterator[str]:
    if not isinstance(rows, list):
        return
    for row in rows:
        if isinstance(row, dict):
            for key, value in row.items():
                if isinstance(value, str) and key != "request_id":
                    yield value
