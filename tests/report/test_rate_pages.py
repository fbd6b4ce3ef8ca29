"""The page of a rate sweep (open loop) and of multi-turn sessions, in both languages: levels named
by their offered rate (never ``C=``), the saturation rate in the conclusion, offered against
achieved rate, goodput in the SLO table, TTFT by turn with the prefix-cache hit rate."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sweeper.report.pagecheck import page_defects
from sweeper.report.pages import render_run_page
from sweeper.report.run_report import collect_run
from sweeper.store import load_trace_set
from tests.findings.openloop import write_rate_run, write_session_run
from tests.report.site_helpers import page_specs, without_charts

RATES = [2.0, 4.0, 8.0, 16.0, 32.0, float("inf")]


def _specs(page: str) -> list[dict]:
    return page_specs(page)


@pytest.fixture(scope="module")
def rate_pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("rate-pages")
    run = collect_run(load_trace_set(write_rate_run(root, "rate-sat", RATES, kv_cache_tokens=2000)))
    assert run.findings_errors == []
    return {lang: render_run_page(run, lang) for lang in ("en", "zh")}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_rate_page_names_levels_by_rate_and_has_no_defect(rate_pages, lang: str) -> None:
    page = rate_pages[lang]
    assert page_defects(page) == []
    assert "C=" not in page and "C = " not in page
    assert not re.search(r"\b(None|nan|NaN)\b", without_charts(page))
    unit = "req/s" if lang == "en" else "请求/秒"
    assert f"8 {unit}" in page and ("all at once" if lang == "en" else "全部同时发送") in page


def test_the_rate_page_says_where_it_saturates_and_what_to_run(rate_pages) -> None:
    page = rate_pages["en"]
    assert "Request-rate sweep" in page
    assert "The server saturates between 8 req/s and 16 req/s" in page
    assert '<span class="sweeper-card__value">8 req/s · 245 tok/s</span>' in page
    assert "Offered against achieved rate" in page
    assert "| Offered rate | Sent req/s | Completed req/s |" in page
    assert "Goodput (req/s)" in page  # the SLO table chooses by goodput
    # the advice: what the server takes, not what the next (saturated) rate buys
    assert "- Keep the offered load at or below 8 req/s" in page
    assert "Going from 8 req/s" not in page
    assert "请求速率扫描" in rate_pages["zh"] and "计划速率与实际速率" in rate_pages["zh"]


def test_the_rate_charts_put_the_offered_rate_on_the_x_axis(rate_pages) -> None:
    specs = _specs(rate_pages["en"])
    rate_axes = [
        layer["encoding"]["x"]
        for spec in specs
        for layer in spec.get("layer", [spec])
        if layer.get("encoding", {}).get("x", {}).get("field") == "rate_x"
    ]
    assert rate_axes  # the rate-follow and ITL charts
    assert all("'all at once'" in x["axis"]["labelExpr"] for x in rate_axes)
    # no chart calls a rate level by its key
    assert "C=" not in json.dumps(specs, ensure_ascii=False)
    zh = json.dumps(_specs(rate_pages["zh"]), ensure_ascii=False)
    assert "全部同时发送" in zh and "计划速率" in zh


@pytest.mark.parametrize(("hit_rate", "words"), [(0.0, "prefix caching looks off"), (0.6, "60.0%")])
def test_multi_turn_pages_show_ttft_by_turn_and_the_hit_rate(
    tmp_path: Path, hit_rate: float, words: str
) -> None:
    run = collect_run(load_trace_set(write_session_run(tmp_path, "turns", hit_rate=hit_rate)))
    pages = {lang: render_run_page(run, lang) for lang in ("en", "zh")}
    en = pages["en"]
    assert "Multi-turn sessions: TTFT by turn" in en and words in en
    assert "later turns 15 ms at p50 against 50 ms for turn 1" in en
    turn_charts = [
        s for s in _specs(en) if s.get("encoding", {}).get("x", {}).get("field") == "turn"
    ]
    assert len(turn_charts) == 1
    assert "多轮会话：各轮的 TTFT" in pages["zh"]
    for page in pages.values():
        assert page_defects(page) == []
        assert "C=" not in page


def test_a_page_without_turns_has_no_turn_section(tmp_path: Path) -> None:
    run = collect_run(load_trace_set(write_rate_run(tmp_path, "flat", [1.0, 2.0])))
    assert "TTFT by turn" not in render_run_page(run, "en")


def test_how_it_was_recorded_says_the_workload_in_words() -> None:
    from sweeper.report.provenance import workload_rows
    from sweeper.schema import Workload

    wl = Workload(
        input_len=1000,
        output_len=200,
        concurrency_levels=[1, 2],
        load="rate",
        request_rates={"1": 2.0, "2": float("inf")},
        arrival="gamma",
        burstiness=0.5,
        max_concurrency=64,
        duration_s=60,
        dataset="sharegpt:conversations.json",
        dataset_sha256="0123456789abcdef" * 4,
        input_len_range=0.5,
        output_len_range=0.1,
        sessions=8,
        turns=4,
        think_time_ms=500,
    )
    en = dict(workload_rows(wl, "en"))
    assert en["Load"].startswith("open loop")
    assert en["Arrivals"].startswith("gamma, burstiness 0.5&#58; burstier than Poisson")
    assert (
        en["Concurrency cap"]
        == "at most 64 requests in flight &#40;&#45;&#45;max&#45;concurrency&#41;"
    )
    assert "conversations.json" in en["Dataset"] and "sha256 0123456789ab" in en["Dataset"]
    assert en["Input lengths"].startswith("500 to 1,500 tokens")
    assert en["Sessions"].startswith("8 conversations of 4 turns") and "500 ms" in en["Sessions"]
    zh = dict(workload_rows(wl, "zh"))
    assert zh["负载方式"].startswith("开环") and "gamma，突发度 0.5" in zh["到达方式"]
    replay = Workload(load="rate", request_rates={"1": 3.5}, arrival="trace", trace_speedup=2.0)
    assert "2× as fast" in dict(workload_rows(replay, "en"))["Arrivals"]
    # a closed loop of fixed-length random prompts: the table stays as it was
    assert (
        workload_rows(Workload(concurrency_levels=[1, 4], input_len=128, output_len=64), "en") == []
    )


def test_the_runs_index_names_a_rate_run_by_its_rates(tmp_path: Path) -> None:
    from sweeper.report.site import generate_pages

    write_rate_run(tmp_path, "rate-sat", RATES)
    pages = generate_pages(tmp_path)
    index = pages["runs/index.md"]
    row = next(line for line in index.splitlines() if "rate&#45;sat" in line)
    assert "(all at once)" in row and "8 req/s</span></td></tr>" in row and "C=" not in row
    assert "8 请求/秒" in pages["runs/index.zh.md"]


def test_a_comparison_with_a_rate_run_names_its_levels(tmp_path: Path) -> None:
    from sweeper.report.site import generate_pages

    write_rate_run(tmp_path, "rate-sat", RATES)
    write_session_run(tmp_path, "turns")
    pages = generate_pages(tmp_path)
    compare = next(
        v for k, v in pages.items() if k.startswith("compare/") and k.endswith("index.md")
    )
    assert "a point per level" in compare
    data = json.dumps(_specs(compare), ensure_ascii=False)
    assert '"level_label": "8 req/s"' in data
    assert "C=" not in data


def test_the_timeline_of_a_capped_rate_level_shows_the_client_queue(tmp_path: Path) -> None:
    from sweeper.report import charts

    path = write_rate_run(tmp_path, "capped", [16.0, 32.0], client_cap=4)
    run = collect_run(load_trace_set(path))
    spec = charts.chart_request_timeline(run.requests, 2).to_dict()
    parts = {r["part"] for rows in spec["datasets"].values() for r in rows if "part" in r}
    assert "Waiting in the client (scheduled to sent)" in parts
    assert "Grey: the wait in the client" in render_run_page(run, "en")
    # a level sent on schedule has no such part, and its page no such note
    calm_run = collect_run(load_trace_set(write_rate_run(tmp_path, "calm", [2.0], client_cap=4)))
    calm = charts.chart_request_timeline(calm_run.requests, 1).to_dict()
    calm_parts = {r["part"] for rows in calm["datasets"].values() for r in rows if "part" in r}
    assert calm_parts == {"Waiting for the first token", "Decode"}
    assert "Grey: the wait" not in render_run_page(calm_run, "en")


@pytest.mark.parametrize(
    "options",
    [{}, {"cap": 2}, {"detailed": False}],
    ids=["per-chunk", "capped", "summary-only"],
)
def test_imported_vllm_bench_rate_runs_publish_clean_pages(tmp_path: Path, options: dict) -> None:
    """`vllm bench serve --request-rate` files imported as rate levels (per chunk, with the
    client's semaphore, or summaries only): both pages read without defects, None/NaN or C=."""
    from tests.importers.test_vllm_bench_rates import INF, import_files, rate_result, write

    files = [
        write(tmp_path / f"openai-{r}qps.json", rate_result(r, **options)) for r in (1.0, 4.0, INF)
    ]
    _, ts = import_files(tmp_path, *files)
    run = collect_run(ts)
    assert run.findings_errors == []
    for lang in ("en", "zh"):
        page = render_run_page(run, lang)
        assert page_defects(page) == [], lang
        assert "C=" not in page
        assert not re.search(r"\b(None|nan|NaN)\b", without_charts(page))


@pytest.mark.parametrize("kind", ["constant", "poisson"])
def test_imported_guidellm_rate_sweeps_publish_clean_pages(tmp_path: Path, kind: str) -> None:
    from tests.importers.test_guidellm_rates import import_report, sweep_report

    path, _ = sweep_report(tmp_path, kind)
    _, ts = import_report(tmp_path, path)
    run = collect_run(ts)
    assert run.findings_errors == []
    for lang in ("en", "zh"):
        page = render_run_page(run, lang)
        # The importer's own warnings are quoted as it wrote them, in English: the closed-loop
        # benchmark it left out (C=1), a per-level fact with None in it (the importer's words).
        body = page.split("### Warnings")[0].split("### 警告")[0]
        assert page_defects(body) == [], lang
        assert "C=" not in body
        assert not re.search(r"\b(None|nan|NaN)\b", without_charts(body))


def test_varied_lengths_are_not_called_fixed() -> None:
    from sweeper.report.provenance import length_card, varied_lengths
    from sweeper.schema import Workload

    ranged = Workload(input_len=1000, output_len=100, input_len_range=0.5)
    assert varied_lengths(ranged, "en") == "Lengths vary: 500–1,500 input / 100 output tokens."
    assert length_card(ranged, "zh") == "500–1,500 / 100 tok"
    assert varied_lengths(Workload(dataset="sharegpt:x.json"), "en").startswith("Prompts from")
    assert varied_lengths(Workload(input_len=128, output_len=64), "en") is None  # "Fixed ..."
