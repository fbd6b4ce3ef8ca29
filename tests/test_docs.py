"""Docs that cannot drift: every CLI command and every chart appears in the English docs and in
the Chinese docs (as sqlite-utils' tests/test_docs.py does for its commands)."""

from __future__ import annotations

import functools
import inspect
from pathlib import Path

import pytest

from sweeper.cli import COMMANDS
from sweeper.report import charts

DOCS = Path(__file__).resolve().parent.parent / "docs"
GENERATED = ("runs", "compare")


@functools.cache
def _docs(lang: str) -> str:
    pages = []
    for path in sorted(DOCS.rglob("*.md")):
        if path.relative_to(DOCS).parts[0] in GENERATED:
            continue
        is_zh = path.name.endswith(".zh.md")
        if is_zh == (lang == "zh"):
            pages.append(path.read_text(encoding="utf-8"))
    return "\n".join(pages)


CHART_FUNCTIONS = sorted(
    name
    for name, obj in inspect.getmembers(charts, inspect.isfunction)
    if name.startswith("chart_")
)


def test_every_chart_of_the_pages_is_a_function() -> None:
    assert {f"chart_{n}" for n in charts.RUN_CHARTS + charts.COMPARE_CHARTS} == set(CHART_FUNCTIONS)


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_is_documented(lang: str, command: str) -> None:
    assert f"sweeper {command}" in _docs(lang), (
        f"`sweeper {command}` is missing from the {lang} docs"
    )


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("function", CHART_FUNCTIONS)
def test_every_chart_is_documented(lang: str, function: str) -> None:
    assert function in _docs(lang), (
        f"`{function}` is missing from the {lang} docs (docs/charts*.md)"
    )


def test_every_english_page_has_a_chinese_page() -> None:
    for path in sorted(DOCS.glob("*.md")):
        if not path.name.endswith(".zh.md"):
            assert path.with_name(path.stem + ".zh.md").exists(), f"{path.name} has no Chinese page"
