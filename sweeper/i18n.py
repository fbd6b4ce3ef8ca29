"""Words and numbers in each language of the reports (en, zh).

Sentences are gettext messages in Babel catalogs: ``sweeper/locale/<lang>/LC_MESSAGES/<domain>.po``
(the .po files are the source; they are compiled in memory when first used, so there is no build
step). Numbers, percentages and dates go through Babel's locale data.

Each module that writes sentences uses its own domain (``findings``, ``pages``) so catalogs can
be extracted and kept separately::

    pybabel extract -k _ -k N_ -o sweeper/locale/findings.pot sweeper/findings/*.py
    pybabel update -i sweeper/locale/findings.pot -d sweeper/locale -D findings -l zh
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from datetime import datetime
from functools import cache
from pathlib import Path

from babel import Locale
from babel.dates import format_date
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po
from babel.numbers import format_decimal, format_percent
from babel.support import NullTranslations, Translations

LANGUAGES = ("en", "zh")
DEFAULT_LANGUAGE = "en"
_LOCALES = {"en": "en", "zh": "zh_Hans_CN"}
LOCALE_DIR = Path(__file__).parent / "locale"


def check_language(lang: str) -> str:
    if lang not in LANGUAGES:
        raise ValueError(f"unknown language {lang!r}; sweeper writes {', '.join(LANGUAGES)}")
    return lang


def babel_locale(lang: str) -> Locale:
    return Locale.parse(_LOCALES[check_language(lang)])


@cache
def translations(lang: str, domain: str) -> NullTranslations:
    """The catalog of ``domain`` in ``lang`` (English is the source language: identity)."""
    check_language(lang)
    po = LOCALE_DIR / lang / "LC_MESSAGES" / f"{domain}.po"
    if lang == DEFAULT_LANGUAGE or not po.exists():
        return NullTranslations()
    with po.open("rb") as fh:
        catalog = read_po(fh, locale=_LOCALES[lang], domain=domain)
    buf = io.BytesIO()
    write_mo(buf, catalog, use_fuzzy=False)
    buf.seek(0)
    return Translations(buf, domain=domain)


def gettext(lang: str, domain: str, message: str) -> str:
    return translations(lang, domain).gettext(message)


def ngettext(lang: str, domain: str, singular: str, plural: str, n: int) -> str:
    return translations(lang, domain).ngettext(singular, plural, n)


def join_list(lang: str, items: Sequence[str]) -> str:
    """Items of a list in a sentence: ``a, b`` / ``a、b`` (the Chinese enumeration comma)."""
    return ("、" if check_language(lang) == "zh" else ", ").join(items)


def N_(message: str) -> str:
    """Mark a message for extraction without translating it here."""
    return message


def fmt_number(value: float | int, lang: str, digits: int = 1) -> str:
    """A decimal with at most ``digits`` fraction digits, grouped as the language writes it."""
    pattern = "#,##0" + ("." + "#" * digits if digits > 0 else "")
    return format_decimal(value, format=pattern, locale=babel_locale(lang))


def fmt_fixed(value: float | int, lang: str, digits: int = 1) -> str:
    """A decimal with exactly ``digits`` fraction digits (``17.4``, ``1,332.0``)."""
    pattern = "#,##0" + ("." + "0" * digits if digits > 0 else "")
    return format_decimal(value, format=pattern, locale=babel_locale(lang))


def fmt_percent(fraction: float, lang: str, digits: int = 1) -> str:
    pattern = "#,##0" + ("." + "0" * digits if digits > 0 else "") + "%"
    return format_percent(fraction, format=pattern, locale=babel_locale(lang))


def fmt_date(value: datetime, lang: str) -> str:
    return format_date(value, format="long", locale=babel_locale(lang))


def level_label(level: int, rate_rps: float | None, lang: str) -> str:
    """A level as a reader names it: ``C=16`` (closed loop), or its offered rate, ``4 req/s`` /
    ``4 请求/秒`` (open loop; ``inf``: everything sent at once)."""
    if rate_rps is None:
        return f"C={level}"
    zh = check_language(lang) == "zh"
    if rate_rps == float("inf"):
        return "全部同时发送" if zh else "all at once"
    return f"{fmt_number(rate_rps, lang, 2)} " + ("请求/秒" if zh else "req/s")
