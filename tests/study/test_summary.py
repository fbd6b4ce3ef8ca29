"""``sweeper study summary`` on a study recorded from two scripted-server configurations: the
JSON contract (docs/study.md), the Pareto frontier, ``best`` per SLO, CSV and the table; and the
pure pieces (the frontier, the t-intervals) on numbers worked by hand."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from sweeper.study import render_study_page
from sweeper.study.stats import difference_interval, indistinguishable, mean_interval, t95
from sweeper.study.summary import pareto
from tests.study.helpers import invoke, study_args

SEQS_1, SEQS_4 = "--max-num-seqs 1", "--max-num-seqs 4"


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("summary")
    result = invoke(study_args(out, "cmp", SEQS_1, SEQS_4))
    assert result.exit_code == 0, result.output
    return out


def _summary(out: Path, *args: str) -> dict:
    result = invoke(["study", "summary", "cmp", "--out", str(out), "--format", "json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_json_has_each_configuration_with_its_run_summary_levels(out: Path) -> None:
    summary = _summary(out)
    assert summary["study_id"] == "cmp"
    assert [c["flags"] for c in summary["configs"]] == [SEQS_1, SEQS_4]
    for config in summary["configs"]:
        assert config["run_id"] == "cmp-" + config["flags"].strip("-").replace(" ", "-")
        assert [lv["concurrency"] for lv in config["levels"]] == [1, 2]
        level = config["levels"][1]
        # The summary level object of `sweeper summary --format json`, with its run id.
        assert level["run_id"] == config["run_id"]
        assert set(level["ttft_ms"]) == {"mean", "p50", "p90", "p95", "p99"}
        assert level["completed"] == 4
        assert set(level["goodput"]) == set(summary["slos"])
    assert summary["interval"] is None and summary["indistinguishable"] == []


def test_one_stream_at_a_time_queues_the_second(out: Path) -> None:
    summary = _summary(out)
    one, four = (c["levels"][1] for c in summary["configs"])
    assert four["output_throughput_tok_s"] > one["output_throughput_tok_s"]
    assert four["ttft_ms"]["p99"] < one["ttft_ms"]["p99"]


def test_pareto_and_best(out: Path) -> None:
    summary = _summary(out, "--slo", "ttft_p99<=10s", "--slo", "ttft_p99<=0.1ms")
    assert summary["slos"] == ["ttft_p99<=10s", "ttft_p99<=0.1ms"]
    front = summary["pareto"][0]
    assert (front["x"], front["y"], front["x_better"]) == (
        "ttft_p99_ms", "output_throughput_per_gpu_tok_s", "lower"
    )  # fmt: skip
    # --max-num-seqs 4 at C=2 beats --max-num-seqs 1 at C=2 on both axes.
    assert {"flags": SEQS_1, "concurrency": 2} not in [
        {"flags": p["flags"], "concurrency": p["concurrency"]} for p in front["points"]
    ]
    assert {p["flags"] for p in front["points"]} >= {SEQS_4}
    assert summary["pareto"][1]["x"] == "tokens_per_user_tok_s"
    best = summary["best"]["ttft_p99<=10s"]
    assert (best["flags"], best["concurrency"]) == (SEQS_4, 2)
    assert best["goodput_rps"] > 0 and best["run_id"] == "cmp-max-num-seqs-4"
    assert summary["best"]["ttft_p99<=0.1ms"] is None  # no level meets it


def test_diffs_against_the_first_configuration(out: Path) -> None:
    diffs = _summary(out)["diffs"]
    assert [(d["a"], d["b"], d["concurrency"]) for d in diffs] == [
        (SEQS_1, SEQS_4, 1), (SEQS_1, SEQS_4, 2)
    ]  # fmt: skip
    ttft = diffs[1]["metrics"]["ttft_ms.p99"]
    assert ttft["change_pct"] == pytest.approx((ttft["b"] - ttft["a"]) / ttft["a"] * 100)
    assert ttft["change_pct"] < 0  # four slots: the second stream no longer waits
    assert ttft["significant"] is None  # one run each: nothing to judge the noise by
    assert set(diffs[0]["metrics"]) == {
        "output_throughput_tok_s", "ttft_ms.p99", "itl_ms.p99", "e2el_ms.p99"
    }  # fmt: skip


def test_csv_and_table(out: Path) -> None:
    result = invoke(["study", "summary", "cmp", "--out", str(out), "--format", "csv"])
    rows = list(csv.DictReader(io.StringIO(result.output)))
    assert [(r["flags"], r["concurrency"]) for r in rows] == [
        (SEQS_1, "1"), (SEQS_1, "2"), (SEQS_4, "1"), (SEQS_4, "2")
    ]  # fmt: skip
    assert "goodput_rps[ttft_p99<=2s]" in rows[0]
    table = invoke(["study", "summary", "cmp", "--out", str(out)])
    assert table.exit_code == 0
    assert "Best per SLO" in table.output and SEQS_4 in table.output


def test_a_missing_study_is_one_line() -> None:
    result = invoke(["study", "summary", "nope", "--out", "/nonexistent"])
    assert result.exit_code == 1
    assert "no study at" in result.output


def test_pareto_keeps_the_undominated() -> None:
    points = [
        {"flags": "a", "x": 1.0, "y": 10.0},
        {"flags": "b", "x": 2.0, "y": 20.0},
        {"flags": "c", "x": 3.0, "y": 15.0},  # b is faster and lower: c is dominated
        {"flags": "d", "x": 4.0, "y": 30.0},
    ]
    assert [p["flags"] for p in pareto(points, "x", "y", x_lower=True)] == ["a", "b", "d"]
    assert [p["flags"] for p in pareto(points, "x", "y", x_lower=False)] == ["d"]


def test_t_intervals() -> None:
    assert t95(1) == 12.706 and t95(9) == 2.262
    assert t95(60) == pytest.approx(2.000, abs=0.002)
    assert t95(1000) == pytest.approx(1.962, abs=0.002)
    got = mean_interval([10.0, 12.0, 14.0])  # sd 2, n 3: half width 4.303 * 2 / sqrt(3)
    assert got["mean"] == 12.0
    assert got["high"] - got["mean"] == pytest.approx(4.303 * 2 / 3**0.5)
    assert mean_interval([5.0])["low"] is None
    assert indistinguishable([10.0, 11.0, 12.0], [10.5, 11.5, 12.5]) is True
    assert indistinguishable([10.0, 10.1, 10.2], [20.0, 20.1, 20.2]) is False
    assert indistinguishable([1.0], [2.0, 3.0]) is None
    diff = difference_interval([1.0, 2.0], [3.0, 4.0])
    assert diff is not None and diff[0] == 2.0


def test_study_page_in_both_languages(out: Path) -> None:
    summary = _summary(out, "--slo", "ttft_p99<=10s")
    en = render_study_page(summary, "en", run_link=lambda run_id: f"../runs/{run_id}.md")
    assert en.startswith("# Study cmp\n")
    assert "[cmp-max-num-seqs-4](../runs/cmp-max-num-seqs-4.md)" in en
    assert "| `--max-num-seqs 4` | C=2 |" in en
    assert "## Best per service level" in en and "`ttft_p99<=10s`" in en
    zh = render_study_page(summary, "zh")
    assert zh.startswith("# 对比实验 cmp\n")
    assert "各服务等级的最佳选择" in zh and "帕累托前沿" in zh and "完成" in zh
    assert "## Against `--max-num-seqs 1`" in en and "record with --repeats" in en
    assert "## 与 `--max-num-seqs 1` 对比" in zh


def test_study_charts_are_valid_vega_lite(out: Path) -> None:
    from sweeper.study.charts import chart_study_curves, chart_study_pareto

    summary = _summary(out)
    curves = chart_study_curves(summary).to_dict()  # validated against the Vega-Lite schema
    line = curves["layer"][0]
    assert line["encoding"]["color"]["field"] == "config"
    assert line["encoding"]["y"]["scale"] == {"type": "log"}
    assert {row["config"] for row in curves["datasets"][line["data"]["name"]]} == {SEQS_1, SEQS_4}
    pareto_chart = chart_study_pareto(summary).to_dict()
    front = pareto_chart["layer"][0]
    front_rows = pareto_chart["datasets"][front["data"]["name"]]
    assert len(front_rows) == len(summary["pareto"][0]["points"])
    page = render_study_page(summary, "zh")
    assert page.count('class="sweeper-chart"') == 2 and "帕累托前沿" in page
    assert 'class="sweeper-chart"' not in render_study_page(summary, "en", charts=False)


def test_a_rate_level_is_judged_from_the_schedule_not_the_send() -> None:
    # 50 ms from the send, but the requests queued 750 ms in the client: from the schedule
    # (what its users waited) the level misses ttft_p99<=200ms; a closed-loop point (no schedule
    # columns) is judged on its TTFT as before.
    import pandas as pd

    from sweeper.analysis.slo import parse_slos
    from sweeper.study.search import meets_all
    from sweeper.study.summary import best_points

    slos = parse_slos("ttft_p99<=200ms")
    queued = {"flags": "--a", "run_id": "r", "level": 2, "request_rate": 8.0,
              "ttft_p99_ms": 50.0, "ttft_sched_p99_ms": 800.0, "goodput": {"x": 5.0},
              "output_throughput_tok_s": 100.0}  # fmt: skip
    closed = {"flags": "--b", "run_id": "c", "level": 4, "concurrency": 4,
              "ttft_p99_ms": 150.0, "ttft_sched_p99_ms": None, "goodput": {"x": 3.0},
              "output_throughput_tok_s": 80.0}  # fmt: skip
    best = best_points([queued, closed], [("x", slos)])
    assert best["x"] is not None and best["x"]["run_id"] == "c"
    assert best_points([queued], [("x", slos)])["x"] is None
    assert not meets_all(pd.Series({"ttft_p99_ms": 50.0, "ttft_sched_p99_ms": 800.0}), slos)
    assert meets_all(pd.Series({"ttft_p99_ms": 150.0}), slos)
