"""Docs that cannot drift: every importer kind and `sweeper import` option, every number
`sweeper summary` prints and every key of its JSON appear in both the English and the Chinese
pages (docs/import, docs/metrics, docs/summary-json)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweeper.analysis.frames import LATENCY_METRICS
from sweeper.analysis.summary import (
    ADDED_LEVEL_SCALARS,
    GOODPUT_SCALARS,
    LEVEL_SCALARS,
    RATE_LEVEL_SCALARS,
    SCHEDULE_METRICS,
)
from sweeper.cli.importing import import_command
from sweeper.importers import IMPORTERS

DOCS = Path(__file__).resolve().parents[2] / "docs"
LANGS = ("md", "zh.md")


def page(name: str, lang: str) -> str:
    return (DOCS / f"{name}.{lang}").read_text(encoding="utf-8")


@pytest.mark.parametrize("lang", LANGS)
def test_import_page_names_every_kind_and_option(lang: str) -> None:
    text = page("import", lang)
    for kind in IMPORTERS:
        assert f"`{kind}`" in text, kind
    for param in import_command.params:
        for opt in getattr(param, "opts", []):
            if opt.startswith("--"):
                assert opt in text, opt


@pytest.mark.parametrize("lang", LANGS)
def test_metrics_page_defines_every_printed_number(lang: str) -> None:
    text = page("metrics", lang)
    for key in (
        *LEVEL_SCALARS,
        *ADDED_LEVEL_SCALARS,
        *LATENCY_METRICS,
        "multi_token_gap_share",
        "goodput_rps",
        "basis",
    ):
        assert f"`{key}`" in text or f"`{key}" in text, key
    for tool in ("vLLM bench serve", "AIPerf", "GuideLLM", "LLMPerf"):
        assert tool in text


@pytest.mark.parametrize("lang", LANGS)
def test_summary_json_page_lists_every_key(lang: str) -> None:
    text = page("summary-json", lang)
    for key in (
        *LEVEL_SCALARS,
        *LATENCY_METRICS,
        "run_id",
        "summary_version",
        "source",
        "notes",
        "problems",
        "itl_available",
        "basis",
        "tool",
        *ADDED_LEVEL_SCALARS,
        "run_status",
        "complete",
        "missing_levels",
        "cut_short",
        "resume_command",
        "load",
        "slo",
        *RATE_LEVEL_SCALARS,
        *SCHEDULE_METRICS,
        *GOODPUT_SCALARS,
    ):
        assert f"`{key}" in text or f"`levels[].{key}" in text, key
    for metric, stats in SCHEDULE_METRICS.items():  # the CSV's flat columns
        for stat in stats:
            assert f"{metric}_{stat}" in text or stat not in (stats[0], stats[-1]), (metric, stat)
