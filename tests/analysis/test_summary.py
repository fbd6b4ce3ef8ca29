"""`sweeper summary RUN`: the JSON contract (docs/summary-json.md), CSV, the rich tables, run-id
resolution and errors; through click's CliRunner on trace sets written by the real writer."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from sweeper.analysis.frames import latency_column, level_frame
from sweeper.cli import cli
from sweeper.schema import RequestTrace, Source
from sweeper.store import load_trace_set, write_trace_set
from sweeper.testing.factories import SyntheticLevel, synthetic_manifest, write_synthetic_run
from tests.analysis.interrupted import write_interrupted_run

STATS = {"mean", "p50", "p90", "p95", "p99"}
CONTRACT_LEVEL_KEYS = {
    "concurrency",
    "completed",
    "failed",
    "duration_s",
    "output_throughput_tok_s",
    "request_throughput_rps",
    "ttft_ms",
    "tpot_ms",
    "itl_ms",
    "e2el_ms",
}
LEVELS = [
    SyntheticLevel(1, 40, 10),
    SyntheticLevel(4, 90, 15, failures=1, stall_every=8, stall_ms=60),
]


def invoke(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return write_synthetic_run(tmp_path / "traces", "demo-run", LEVELS, output_len=64, warmup=1)


def test_json_contract(run: Path) -> None:
    summary = json.loads(invoke("summary", str(run), "--format", "json"))
    assert summary["run_id"] == "demo-run"
    assert [lv["concurrency"] for lv in summary["levels"]] == [1, 4]
    frame = level_frame(load_trace_set(run)).set_index("concurrency")
    for lv in summary["levels"]:
        assert set(lv) >= CONTRACT_LEVEL_KEYS
        for metric in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"):
            assert set(lv[metric]) == STATS
            for stat in STATS:
                assert lv[metric][stat] == pytest.approx(
                    frame.loc[lv["concurrency"], latency_column(metric, stat)]
                )
        assert isinstance(lv["completed"], int) and isinstance(lv["failed"], int)
        assert lv["output_throughput_tok_s"] == pytest.approx(
            frame.loc[lv["concurrency"], "output_throughput_tok_s"]
        )
    assert summary["levels"][1]["failed"] == 1


def test_run_id_is_resolved_under_traces(run: Path) -> None:
    by_id = invoke("summary", "demo-run", "--traces", str(run.parent), "--format", "json")
    assert json.loads(by_id) == json.loads(invoke("summary", str(run), "--format", "json"))


def test_nan_is_null_and_per_request_runs_say_why(tmp_path: Path) -> None:
    manifest = synthetic_manifest("pr", [SyntheticLevel(2, 1, 1)])
    manifest.source = Source(tool="llmperf", fidelity="per_request")
    requests = [
        RequestTrace(
            concurrency=2,
            request_id=str(i),
            send_ns=i * 10**9,
            ttft_ns=10**8,
            e2el_ns=5 * 10**8,
            completion_tokens=10,
        )
        for i in range(3)
    ]
    folder = write_trace_set(tmp_path / "pr", manifest, requests)
    text = invoke("summary", str(folder), "--format", "json")
    assert "NaN" not in text
    summary = json.loads(text)
    assert summary["levels"][0]["itl_ms"] == dict.fromkeys(STATS)
    assert summary["levels"][0]["itl_available"] is False
    assert any("per_request" in note for note in summary["notes"])
    table = invoke("summary", str(folder))
    assert "ITL (n/a)" in table and "per-request times only" in " ".join(table.split())


def test_csv_has_one_row_per_level(run: Path) -> None:
    rows = list(csv.DictReader(io.StringIO(invoke("summary", str(run), "--format", "csv"))))
    summary = json.loads(invoke("summary", str(run), "--format", "json"))
    assert [int(r["concurrency"]) for r in rows] == [1, 4]
    for row, lv in zip(rows, summary["levels"], strict=True):
        assert math.isclose(float(row["itl_ms_p99"]), lv["itl_ms"]["p99"], rel_tol=1e-12)
        assert int(row["failed"]) == lv["failed"]


def test_table_shows_every_level(run: Path) -> None:
    text = invoke("summary", str(run))
    assert "demo-run" in text and "C = 1: latency (ms)" in text and "C = 4: latency (ms)" in text
    for label in ("TTFT", "TPOT", "ITL", "E2EL"):
        assert label in text


def test_unknown_run_is_one_line_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["summary", "nope", "--traces", str(tmp_path)])
    assert result.exit_code == 1
    assert result.output.startswith("Error: ") and "nope" in result.output


def test_truncated_last_line_is_reported_not_fatal(run: Path) -> None:
    requests = run / "requests.jsonl"
    data = requests.read_bytes()
    requests.write_bytes(data[:-40])  # a recorder killed while writing its last line
    summary = json.loads(invoke("summary", str(run), "--format", "json"))
    assert len(summary["problems"]) == 1 and "truncated" in summary["problems"][0]
    assert "truncated" in invoke("summary", str(run))


def test_a_complete_run_says_so_with_its_in_flight_concurrency(run: Path) -> None:
    summary = json.loads(invoke("summary", str(run), "--format", "json"))
    assert summary["run_status"] == "complete" and summary["complete"] is True
    assert summary["missing_levels"] == [] and summary["cut_short"] == []
    assert summary["resume_command"] is None
    for lv in summary["levels"]:
        assert lv["inflight_max"] == lv["concurrency"] and isinstance(lv["inflight_max"], int)
        assert 0 < lv["inflight_mean"] <= lv["concurrency"]
        assert lv["paused_s"] is None  # not sweeper's own recording


def test_an_interrupted_run_is_incomplete_in_every_format(tmp_path: Path) -> None:
    folder = write_interrupted_run(tmp_path / "traces", "cut")
    summary = json.loads(invoke("summary", str(folder), "--format", "json"))
    assert summary["complete"] is False and summary["run_status"] == "incomplete"
    assert summary["missing_levels"] == [4, 8]
    assert summary["cut_short"] == [
        {"concurrency": 2, "measured": 7, "planned": 16, "status": "interrupted"}
    ]
    command = f"sweeper record --resume --run-id cut --out {tmp_path / 'traces'}"
    assert summary["resume_command"] == command
    assert any("C=4, C=8" in note and command in note for note in summary["notes"])
    table = " ".join(invoke("summary", str(folder)).split())
    assert "Incomplete:" in table and "C=2 cut short (7 of 16" in table
    assert "--resume --run-id cut" in table


def test_csv_keeps_its_columns_and_adds_the_new_ones_last(run: Path) -> None:
    header = invoke("summary", str(run), "--format", "csv").splitlines()[0].split(",")
    at = header.index("basis")
    assert header[at : at + 4] == ["basis", "paused_s", "inflight_mean", "inflight_max"]
    assert header[at + 4 : at + 7] == ["level", "offered_rate_rps", "achieved_rate_rps"]
    assert header[at + 7] == "client_queue_ms_mean" and header[-1] == "slo_met_share"
