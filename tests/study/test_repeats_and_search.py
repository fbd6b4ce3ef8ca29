"""``--repeats N`` (N runs per configuration, intervals across them, pairs inside the noise) and
``--find-max`` (bisecting concurrency for the highest level meeting an SLO, each probe a run of
its own) against the scripted server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sweeper.i18n import fmt_number
from sweeper.study import render_study_page
from sweeper.study.search import bracket
from tests.study.helpers import invoke, read_json, study_args


def test_repeats_give_runs_r1_to_rn_and_t_intervals(tmp_path: Path) -> None:
    result = invoke(study_args(tmp_path, "rep", "--max-num-seqs 2", extra=("--repeats", "2")))
    assert result.exit_code == 0, result.output
    configuration = read_json(tmp_path / "rep" / "study.json")["configurations"][0]
    assert [r["run_id"] for r in configuration["runs"]] == [
        "rep-max-num-seqs-2-r1", "rep-max-num-seqs-2-r2"
    ]  # fmt: skip
    assert configuration["run_id"] == "rep-max-num-seqs-2-r1"
    labels = json.loads((tmp_path / "rep-max-num-seqs-2-r2" / "manifest.json").read_text())
    assert labels["labels"]["repeat"] == "2"
    done = invoke(["study", "summary", "rep", "--out", str(tmp_path), "--format", "json"])
    summary = json.loads(done.output)
    assert summary["interval"] == "t95_across_repeats"
    config = summary["configs"][0]
    assert [r["run_id"] for r in config["repeats"]] == [
        "rep-max-num-seqs-2-r1", "rep-max-num-seqs-2-r2"
    ]  # fmt: skip
    interval = config["intervals"][1]
    assert (interval["concurrency"], interval["n"]) == (2, 2)
    throughput = interval["output_throughput_tok_s"]
    assert throughput["low"] <= throughput["mean"] <= throughput["high"]
    assert set(interval["ttft_ms"]["p99"]) == {"n", "mean", "low", "high", "sd"}
    # Points are the means over the repeats.
    point = next(p for p in summary["points"] if p["concurrency"] == 2)
    assert point["n"] == 2
    assert point["output_throughput_tok_s"] == pytest.approx(throughput["mean"])
    for pair in summary["indistinguishable"]:
        assert pair["kind"] == "levels" and "are not distinguishable at" in pair["text"]
    assert summary["diffs"] == []  # one configuration
    page = render_study_page(summary, "en")
    assert "95% Student t-interval" in page
    low, high = (fmt_number(throughput[k], "en", 1) for k in ("low", "high"))
    assert f"[{low}, {high}]" in page


def test_find_max_bisects_to_the_limit_and_keeps_every_probe(tmp_path: Path) -> None:
    # Two sequences at a time, 48 steps of 10 ms a request: from C=3 on, a request waits for a
    # slot (~500 ms) and its TTFT passes 150 ms by far; at C=1, 2 it is a step or two (10-20
    # ms), far under (measured: p99 22 ms at C=2, 496 ms at C=3): a 100 ms stall flips neither.
    args = study_args(
        tmp_path, "max", "--max-num-seqs 2 --step-base-ms 10",
        extra=("--find-max", "--slo", "ttft_p99<=150ms", "--tolerance", "0.1"),
    )  # fmt: skip
    args[args.index("--concurrency") + 1] = "1,8"
    args[args.index("--output-len") + 1] = "48"
    args[args.index("--requests-per-level") + 1] = "8"
    result = invoke(args)
    assert result.exit_code == 0, result.output
    configuration = read_json(tmp_path / "max" / "study.json")["configurations"][0]
    search = configuration["find_max"]
    assert search["slo"] == "ttft_p99<=150ms"
    assert (search["meets"], search["fails"], search["done"]) == (2, 3, True)
    assert search["probes"] == [4, 2, 3]
    base = configuration["run_id"]
    probes = [r for r in configuration["runs"] if r["kind"] == "probe"]
    assert [r["run_id"] for r in probes] == [f"{base}-max-c4", f"{base}-max-c2", f"{base}-max-c3"]
    assert all(r["status"] == "complete" for r in probes)
    summary = json.loads(
        invoke(["study", "summary", "max", "--out", str(tmp_path), "--format", "json"]).output
    )
    levels = summary["configs"][0]["levels"]
    assert [lv["concurrency"] for lv in levels] == [1, 2, 3, 4, 8]  # every probe is a level
    assert levels[2]["run_id"] == f"{base}-max-c3"
    assert "`--max-num-seqs 2 --step-base-ms 10`: meets at C=2, fails at C=3." in (
        render_study_page(summary, "en")
    )
    assert "C=2 满足，C=3 不满足" in render_study_page(summary, "zh")
    # Resumed, nothing is probed again.
    again = invoke(["study", "run", "max", "--resume", "--out", str(tmp_path)])
    assert "complete, skipped" in again.output and "probes" not in again.output


def test_bracket() -> None:
    assert bracket({1: True, 8: False}).next_probe == 4
    assert bracket({1: True, 2: True, 3: False, 4: False, 8: False}).next_probe is None
    found = bracket({1: True, 8: True})
    assert (found.meets, found.fails, found.next_probe) == (8, None, None)
    found = bracket({1: False, 8: False})
    assert (found.meets, found.next_probe) == (None, None)
    assert bracket({100: True, 105: False}, tolerance=0.1).next_probe is None
    assert bracket({1.0: True, 2.0: False}, integer=False).next_probe == 1.5


def test_find_max_over_request_rates(tmp_path: Path) -> None:
    # One sequence at a time, ~80 ms a request (4 steps of 20 ms): above ~12 req/s requests
    # queue, and at 64 req/s the last of 8 waits for the 7 before it (~500 ms); at 2 req/s the
    # TTFT is a step (~25 ms), far under the SLO on a loaded machine too.
    args = study_args(
        tmp_path, "rate", "--max-num-seqs 1 --step-base-ms 20",
        extra=("--find-max", "--slo", "ttft_p99<=200ms", "--tolerance", "0.25"),
    )  # fmt: skip
    at = args.index("--concurrency")
    args[at : at + 2] = ["--request-rate", "2,64", "--arrival", "constant"]
    args[args.index("--requests-per-level") + 1] = "8"
    args[args.index("--output-len") + 1] = "4"
    result = invoke(args)
    assert result.exit_code == 0, result.output
    search = read_json(tmp_path / "rate" / "study.json")["configurations"][0]["find_max"]
    assert search["done"] and search["probes"][0] == 33.0  # the middle of 2 and 64
    assert search["meets"] is not None and search["fails"] is not None
    assert search["fails"] - search["meets"] <= 0.25 * search["meets"]
    assert 2 <= search["meets"] < search["fails"] <= 64
    summary = json.loads(
        invoke(["study", "summary", "rate", "--out", str(tmp_path), "--format", "json"]).output
    )
    rates = [lv["offered_rate_rps"] for lv in summary["configs"][0]["levels"]]
    assert rates == sorted(rates) and len(rates) == 2 + len(search["probes"])
    assert all(p["concurrency"] is None for p in summary["configs"][0]["levels"])
