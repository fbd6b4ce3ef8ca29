"""The run pages of the recorded sample runs the reviewer read: a multi-turn run with prefix
caching and an open-loop Poisson rate sweep, rendered in both languages."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweeper.report.pagecheck import page_defects
from sweeper.report.pages import RunReport, render_run_page
from sweeper.report.run_report import collect_run
from sweeper.store import load_trace_set

TRACES = Path(__file__).resolve().parents[2] / "traces"
SAMPLES = ("small-vllm-cpu-multi-turn", "small-vllm-cpu-poisson")


@pytest.fixture(scope="module")
def runs() -> dict[str, RunReport]:
    return {name: collect_run(load_trace_set(TRACES / name)) for name in SAMPLES}


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("name", SAMPLES)
def test_sample_page_has_no_defect(runs: dict[str, RunReport], name: str, lang: str) -> None:
    assert page_defects(render_run_page(runs[name], lang)) == []
