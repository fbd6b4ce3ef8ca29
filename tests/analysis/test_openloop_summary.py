"""`sweeper summary` of open-loop runs and with `--slo` (issue 12): the JSON keys, the CSV
columns and the table, on the hand-made rate sweep of tests/analysis/openloop.py (its docstring
has the table every number below follows from)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from sweeper.analysis.completeness import completeness
from sweeper.cli import cli
from sweeper.schema import LevelStatus
from sweeper.store import load_trace_set
from sweeper.testing.factories import SyntheticLevel, write_synthetic_run
from tests.analysis.openloop import open_trace, rate_sweep, write_rate_run

DURATION_1 = 1.550


def invoke(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return rate_sweep(tmp_path / "rates").path


def test_rate_levels_in_the_json(run: Path) -> None:
    summary = json.loads(
        invoke("summary", str(run), "--format", "json", "--slo", "ttft_p99<=150ms")
    )
    assert summary["load"] == "rate" and summary["slo"] == "ttft_p99<=150ms"
    one, two = summary["levels"]
    assert (one["level"], one["concurrency"]) == (1, None)  # a rate level is not C streams
    assert (two["level"], two["concurrency"]) == (2, None)
    assert one["offered_rate_rps"] == 2.0 and two["offered_rate_rps"] == "inf"
    assert one["achieved_rate_rps"] == pytest.approx(2.0)
    assert one["client_queue_ms"] == pytest.approx(
        {"mean": 25.0, "p50": 20.0, "p90": 54.0, "p99": 59.4}
    )
    assert set(one["ttft_sched_ms"]) == set(one["ttft_ms"]) == set(one["e2el_sched_ms"])
    assert one["ttft_sched_ms"]["p50"] == pytest.approx(100)
    assert one["e2el_sched_ms"]["mean"] == pytest.approx((130 + 170 + 50) / 3)
    assert one["goodput_rps"] == pytest.approx(2 / DURATION_1)
    assert one["slo_met_share"] == pytest.approx(0.5)


def test_goodput_is_null_without_slo(run: Path) -> None:
    summary = json.loads(invoke("summary", str(run), "--format", "json"))
    assert summary["slo"] is None
    assert all(
        lv["goodput_rps"] is None and lv["slo_met_share"] is None for lv in summary["levels"]
    )


def test_a_closed_loop_run_gains_only_the_new_keys(tmp_path: Path) -> None:
    folder = write_synthetic_run(tmp_path, "closed", [SyntheticLevel(2, 40, 10)], output_len=8)
    summary = json.loads(
        invoke("summary", str(folder), "--format", "json", "--slo", "e2el_p99<=1s")
    )
    assert summary["load"] == "concurrency" and summary["slo"] == "e2el_p99<=1s"
    (lv,) = summary["levels"]
    assert lv["concurrency"] == lv["level"] == 2
    assert lv["offered_rate_rps"] is None
    assert lv["client_queue_ms"] == dict.fromkeys(("mean", "p50", "p90", "p99"))
    assert set(lv["ttft_sched_ms"].values()) == {None}
    assert lv["achieved_rate_rps"] > 0
    # every request: TTFT 40 ms + 7 gaps of 10 ms = E2EL 110 ms, within 1 s
    assert lv["goodput_rps"] == pytest.approx(lv["request_throughput_rps"])
    assert lv["slo_met_share"] == 1.0


def test_csv_of_a_rate_run(run: Path) -> None:
    text = invoke("summary", str(run), "--format", "csv", "--slo", "ttft_p99<=150ms")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [r["level"] for r in rows] == ["1", "2"]
    assert [r["concurrency"] for r in rows] == ["", ""]
    assert [r["offered_rate_rps"] for r in rows] == ["2.0", "inf"]
    assert float(rows[0]["client_queue_ms_p99"]) == pytest.approx(59.4)
    assert float(rows[0]["ttft_sched_ms_p50"]) == pytest.approx(100)
    assert float(rows[0]["goodput_rps"]) == pytest.approx(2 / DURATION_1)


def test_table_names_rate_levels_by_their_rate(run: Path) -> None:
    text = invoke("summary", str(run), "--slo", "ttft_p99<=150ms")
    assert "2 req/s" in text and "all at once" in text and "C=1" not in text
    for header in ("offered", "achieved", "queue p99", "goodput"):
        assert header in text, header
    assert "2 req/s: latency (ms)" in text and "TTFT (sched)" in text


def test_a_bad_slo_is_a_one_line_error(run: Path) -> None:
    result = CliRunner().invoke(cli, ["summary", str(run), "--slo", "ttft<=2s"])
    assert result.exit_code == 1 and "bad SLO term" in result.output


def test_an_incomplete_rate_run_names_levels_by_rate(tmp_path: Path) -> None:
    requests = [open_trace(f"r1-{i:05d}", 1, i * 100, i * 100, [10, 20]) for i in range(3)]
    ts = write_rate_run(tmp_path / "cut", requests, [2.0, 8.0, float("inf")])
    ts.manifest.status = "incomplete"
    ts.manifest.levels = [LevelStatus(concurrency=1, status="interrupted")]
    sentence = completeness(ts).sentence()
    assert "levels never measured: 8 req/s, all at once" in sentence
    assert "2 req/s cut short (3 of 3 measured requests" in sentence
    assert "C=" not in sentence
    summary = json.loads(invoke("summary", str(ts.path), "--format", "json"))
    assert summary["missing_levels"] == [2, 3]  # level keys
    assert any("8 req/s" in note for note in summary["notes"])
    assert load_trace_set(ts.path).manifest.workload.load == "rate"
