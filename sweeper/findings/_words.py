"""The building blocks of a finding's sentences: values rendered per language, and the
helpers that turn frames into the numbers of a finding's JSON.

A sentence is a gettext message (domain ``findings``, marked with ``N_``) whose named
placeholders are :class:`Value` objects, each rendered with Babel for English and Chinese.
Private to the findings package; the rule modules import its public names.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from sweeper.findings.frames import RunFrames
from sweeper.findings.levels import (
    LevelRates,
    level_in_sentence,
    level_rates,
    level_template,
    rate_placeholders,
)
from sweeper.findings.model import SLO, Finding
from sweeper.i18n import LANGUAGES, N_, fmt_number, fmt_percent, gettext, join_list
from sweeper.units import GIB, MS_PER_S, finite

DOMAIN = "findings"
SENTENCE_LEVELS = ("the all-at-once level",)

# The offered rates of the run being analysed (empty: a closed loop), so that every sentence
# names a rate level by its rate (:func:`format_message`) without each rule passing it on.
_RATES: ContextVar[LevelRates | None] = ContextVar("sweeper_findings_level_rates", default=None)


@contextmanager
def named_levels(data: RunFrames) -> Iterator[None]:
    """While analysing ``data``: its levels are named by their offered rates (a rate run)."""
    token = _RATES.set(level_rates(data.manifest))
    try:
        yield
    finally:
        _RATES.reset(token)


def rates_now() -> LevelRates:
    """The offered rates the sentences are written with now (empty: closed loop)."""
    return _RATES.get() or {}


class Value:
    """A value rendered per language."""

    def render(self, lang: str) -> str:
        raise NotImplementedError


@dataclass
class Num(Value):
    value: float
    digits: int = 1
    suffix: str = ""

    def render(self, lang: str) -> str:
        return fmt_number(self.value, lang, self.digits) + self.suffix


@dataclass
class Pct(Value):
    fraction: float
    digits: int = 1

    def render(self, lang: str) -> str:
        return fmt_percent(self.fraction, lang, self.digits)


@dataclass
class Ms(Value):
    """A duration: ms below 1 s, else seconds (``17.4 ms``, ``1.39 s`` / ``1.39 秒``)."""

    ms: float

    def render(self, lang: str) -> str:
        if abs(self.ms) >= MS_PER_S:
            unit = " 秒" if lang == "zh" else " s"
            return fmt_number(self.ms / MS_PER_S, lang, 2) + unit
        digits = 1 if abs(self.ms) >= 1 else 2
        return fmt_number(self.ms, lang, digits) + " ms"


@dataclass
class Msg(Value):
    """A nested message (translated, then formatted)."""

    msgid: str
    values: dict[str, Any] = field(default_factory=dict)

    def render(self, lang: str) -> str:
        return format_message(lang, self.msgid, self.values)


class Missing(Value):
    """What a finding lacks, each item a message of its own: ``a; b`` / ``a；b``."""

    def __init__(self, items: Sequence[str]) -> None:
        self.items = list(items)

    def render(self, lang: str) -> str:
        sep = "；" if lang == "zh" else "; "
        return sep.join(gettext(lang, DOMAIN, item) for item in self.items) or "?"


class Levels(Value):
    """``C=8, C=16`` / ``C=8、C=16`` (rate levels: ``2 req/s, 4 req/s``)."""

    def __init__(self, levels: Sequence[int]) -> None:
        self.levels = list(levels)

    def render(self, lang: str) -> str:
        rates = rates_now()
        return join_list(lang, [level_in_sentence(c, rates, lang) for c in self.levels])


@dataclass
class Level(Value):
    """One level by its whole name: ``C=16`` / ``4 req/s``."""

    key: int

    def render(self, lang: str) -> str:
        return level_in_sentence(self.key, rates_now(), lang)


class Share(Value):
    """A share in whole percent, ``<1%`` for a share above zero that would print as 0%."""

    def __init__(self, fraction: float) -> None:
        self.fraction = fraction

    def render(self, lang: str) -> str:
        if 0 < self.fraction < 0.005:
            return "<" + Pct(0.01, 0).render(lang)
        return Pct(self.fraction, 0).render(lang)


class Join(Value):
    """Rendered parts joined with the language's list separator."""

    def __init__(self, parts: Sequence[Value]) -> None:
        self.items = list(parts)

    def render(self, lang: str) -> str:
        return join_list(lang, [p.render(lang) for p in self.items])


@dataclass
class Times(Value):
    """A ratio: ``11.1×`` / ``11.1 倍``."""

    value: float

    def render(self, lang: str) -> str:
        return fmt_number(self.value, lang, 1) + (" 倍" if lang == "zh" else "×")


def times(value: float) -> Times:
    return Times(value)


def tok_s(value: float) -> Num:
    return Num(value, 1 if value < 100 else 0)


def gib(n_bytes: float) -> Num:
    return Num(n_bytes / GIB, 2)


def format_message(lang: str, msgid: str, values: dict[str, Any]) -> str:
    """The message in ``lang`` with its values; in a rate run a ``C={c}`` placeholder names the
    level by its rate (``4 req/s``: :mod:`sweeper.findings.levels`)."""
    rendered = {k: v.render(lang) if isinstance(v, Value) else str(v) for k, v in values.items()}
    template = gettext(lang, DOMAIN, msgid)
    rates = rates_now()
    if rates:
        for name in rate_placeholders(template):
            value = values.get(name)
            if isinstance(value, int | float) and not isinstance(value, bool):
                rendered[name] = level_in_sentence(int(value), rates, lang)
        template = level_template(template, rates)
    out = template.format(**rendered)
    # A sentence that starts with a level named in words: "The all-at-once level is ...".
    return out[:1].upper() + out[1:] if out.startswith(SENTENCE_LEVELS) else out


class Text:
    """Sentences collected in both languages (English joined by spaces, Chinese without)."""

    def __init__(self) -> None:
        self.parts: list[tuple[str, dict[str, Any]]] = []

    def add(self, msgid: str, **values: Any) -> Text:
        self.parts.append((msgid, values))
        return self

    def render(self) -> dict[str, str]:
        out = {}
        for lang in LANGUAGES:
            sep = "" if lang == "zh" else " "
            out[lang] = sep.join(format_message(lang, m, v) for m, v in self.parts)
        return out


def slo_words(slos: Sequence[SLO]) -> Value:
    """``p99 TTFT ≤ 2 s and p50 ITL ≤ 50 ms`` / ``p99 TTFT ≤ 2 秒且 p50 ITL ≤ 50 ms``."""

    class _Words(Value):
        def render(self, lang: str) -> str:
            joiner = gettext(lang, DOMAIN, N_(" and "))
            return joiner.join(
                f"{s.stat} {s.metric.upper()} ≤ {Ms(s.bound_ms).render(lang)}" for s in slos
            )

    return _Words()


def num(x: Any, digits: int = 4) -> float | int | None:
    """A JSON-safe number (NaN -> None); ``digits=0`` gives an int (counts, tokens, bytes)."""
    if not finite(x):
        return None
    if digits == 0:
        return round(float(x))
    return round(float(x), digits)


def per_level(
    data: RunFrames, values: pd.Series | Sequence[float] | None, digits: int = 4
) -> dict[str, float | None]:
    if values is None:
        return {}
    return {str(c): num(v, digits) for c, v in zip(data.concurrencies, list(values), strict=True)}


def unknown(fid: str, text: Text, missing: list[str], data: list[str] | None = None) -> Finding:
    return Finding(id=fid, severity="unknown", text=text.render(), missing=missing, data=data or [])


class SignedPct(Value):
    """A change in percent with its sign (``+9%``, ``-45%``)."""

    def __init__(self, fraction: float) -> None:
        self.fraction = fraction

    def render(self, lang: str) -> str:
        if not finite(self.fraction):
            return "?"
        sign = "+" if self.fraction >= 0 else ""
        return sign + Pct(self.fraction, 0).render(lang)


def signed_pct(fraction: float) -> SignedPct:
    return SignedPct(fraction)
