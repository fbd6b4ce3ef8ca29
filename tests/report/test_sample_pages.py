"""The run pages of the recorded sample runs the reviewer read: a multi-turn run with prefix
caching and an open-loop Poisson rate sweep, rendered in both languages."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweeper.report.pagecheck import page_defects
from sweeper.report.pages import RunReport, render_run_page
from sweeper.report.run_report import collect_run
from sweeper.store import load_trace_set
from tests.report.site_helpers import page_specs

TRACES = Path(__file__).resolve().parents[2] / "traces"
SAMPLES = ("small-vllm-cpu-multi-turn", "small-vllm-cpu-poisson")


@pytest.fixture(scope="module")
def runs() -> dict[str, RunReport]:
    return {name: collect_run(load_trace_set(TRACES / name)) for name in SAMPLES}


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("name", SAMPLES)
def test_sample_page_has_no_defect(runs: dict[str, RunReport], name: str, lang: str) -> None:
    assert page_defects(render_run_page(runs[name], lang)) == []


def _rate_follow_values(page: str) -> list[dict]:
    for spec in page_specs(page):
        values = [row for ds in spec.get("datasets", {}).values() for row in ds]
        if any(row.get("kind") == "sent_rps" for row in values):
            return values
    raise AssertionError("no rate_follow chart")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_rate_page_leaves_the_burst_sent_rate_out(runs: dict[str, RunReport], lang: str) -> None:
    run = runs["small-vllm-cpu-poisson"]
    page = render_run_page(run, lang)
    values = _rate_follow_values(page)
    top = int(run.levels["concurrency"].max())  # the all-at-once level
    kinds = {row["kind"] for row in values if row["concurrency"] == top}
    assert kinds == {"completed_rps"}  # its completed point stays, its 2,167 req/s sent does not
    assert max(row["rps"] for row in values) < 100
    burst = "burst" if lang == "en" else "一次发出"
    assert f"| {burst} |" in page
    assert "2,167" not in page


def test_rate_table_completes_at_the_summary_rate(runs: dict[str, RunReport]) -> None:
    # 4 req/s: 16 completed in 7.52 s, 2.13 req/s, as the summary and goodput count it.
    page = render_run_page(runs["small-vllm-cpu-poisson"], "en")
    row = next(line for line in page.splitlines() if line.startswith("| 4 req/s |"))
    assert row.split(" | ")[2] == "2.13"


def test_zh_rate_page_calls_a_level_a_rate_not_a_concurrency(runs: dict[str, RunReport]) -> None:
    page = render_run_page(runs["small-vllm-cpu-poisson"], "zh")
    for words in (
        "按 SLO 反查速率",
        "最高速率级别的吞吐增益",
        "各速率级别的 KV cache 池占用",
        "菱形：各速率级别期间服务端报告的最高 KV 占用。",
        "各速率级别的中位端到端延迟",
        "该速率级别开始后的秒数",  # the timeline's axis, in its spec
        "该速率级别按发送顺序的前 16 条请求",
    ):
        assert words in page, words
    assert "并发点" not in page and "反查并发" not in page


def test_zh_closed_loop_page_keeps_its_concurrency_words(runs: dict[str, RunReport]) -> None:
    page = render_run_page(runs["small-vllm-cpu-multi-turn"], "zh")
    assert "按 SLO 反查并发" in page and "各并发点的 KV cache 池占用" in page
    assert "速率级别" not in page


def test_the_command_block_can_be_copied_into_a_shell(runs: dict[str, RunReport]) -> None:
    import shlex

    run = runs["small-vllm-cpu-poisson"]
    page = render_run_page(run, "en")
    block = page.split("```text\n", 1)[1].split("\n```", 1)[0]
    assert "--label 'hardware=2-core CPU VM (vLLM CPU build)'" in block
    assert shlex.split(block) == run.ts.manifest.source.command
