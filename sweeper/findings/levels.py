"""How a level is named: ``C=16`` in a closed loop, its offered rate (``4 req/s`` / ``4 请求/秒``,
``all at once``) in an open loop (:func:`sweeper.i18n.level_label`).

A level keeps its integer key everywhere (frames, ``Finding.levels``, JSON); only the words
change. A message written for closed loops says ``C={c}``; for a rate run :func:`level_template`
turns that placeholder into ``{c}`` and the caller passes :func:`level_text` (the rate's label),
so every sentence, heading and table of a closed-loop run stays exactly as it was.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from sweeper.i18n import level_label
from sweeper.schema import RunManifest, Workload

LevelRates = Mapping[int, float]
"""Offered requests/s by level key (inf: all at once); empty for a closed loop."""

_C_PLACEHOLDER = re.compile(r"C=\{(\w+)\}")


def level_rates(source: RunManifest | Workload) -> dict[int, float]:
    """The offered rate of each level of an open-loop run by its key; empty for a closed loop."""
    wl = source.workload if isinstance(source, RunManifest) else source
    if not wl.open_loop:
        return {}
    out: dict[int, float] = {}
    for key, rate in wl.request_rates.items():
        try:
            out[int(key)] = float(rate)
        except (TypeError, ValueError):
            continue
    return out


def level_template(template: str, rates: LevelRates) -> str:
    """``template`` with ``C={name}`` as ``{name}`` where levels are rates (the caller then passes
    :func:`level_text`); unchanged for a closed loop."""
    return _C_PLACEHOLDER.sub(r"{\1}", template) if rates else template


def rate_placeholders(template: str) -> list[str]:
    """The names of the ``C={name}`` placeholders of a message."""
    return _C_PLACEHOLDER.findall(template)


def level_text(key: int, rates: LevelRates, lang: str) -> str:
    """The level as the text after ``C=`` in a closed loop (``16``), or a rate level as a
    sentence names it (``4 req/s``; the all-at-once level as such: "at the all-at-once level"
    reads where "at all at once" would not): what :func:`level_template`'s placeholder takes."""
    if not rates:
        return str(key)
    rate = rates.get(int(key))
    if rate is None:
        return f"#{key}"
    if math.isinf(rate):
        return "“全部同时发送”档" if lang == "zh" else "the all-at-once level"
    return level_label(int(key), rate, lang)


def level_name(key: int, rates: LevelRates, lang: str) -> str:
    """The level's name in a table, a chart or a list: ``C=16``, ``4 req/s``, ``all at once``."""
    if not rates:
        return f"C={key}"
    rate = rates.get(int(key))
    return level_label(int(key), rate, lang) if rate is not None else f"#{key}"


def level_in_sentence(key: int, rates: LevelRates, lang: str) -> str:
    """The level's name inside a sentence: ``C=16``, ``4 req/s``, ``the all-at-once level``."""
    return f"C={key}" if not rates else level_text(key, rates, lang)


def offered_numbers(levels: list[int], rates: LevelRates) -> dict[str, float | None]:
    """``{"<key>": offered req/s}`` of the given levels (None: all at once, as JSON has no inf)."""
    out: dict[str, float | None] = {}
    for key in levels:
        rate = rates.get(int(key))
        if rate is not None:
            out[str(key)] = rate if math.isfinite(rate) else None
    return out
