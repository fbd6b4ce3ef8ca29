"""Findings of rate sweeps (open loop): levels named by their offered rate, the saturation rate as
the knee, scaling against the offered rate, goodput for the operating point and the SLO table,
the KV need from the requests in flight."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweeper.findings import analyze_run, finding, findings_json
from sweeper.store import load_trace_set
from tests.findings.openloop import ToyServer, write_rate_run

SATURATING = [2.0, 4.0, 8.0, 16.0, 32.0]  # the toy server completes ~11 req/s at most


@pytest.fixture(scope="module")
def saturating(tmp_path_factory: pytest.TempPathFactory) -> list:
    root = tmp_path_factory.mktemp("rate")
    return analyze_run(load_trace_set(write_rate_run(root, "rate-sat", SATURATING)))


def test_the_knee_is_the_saturation_rate(saturating: list) -> None:
    knee = finding(saturating, "knee")
    assert ToyServer().capacity_rps == pytest.approx(11.1, abs=0.1)
    assert knee.severity == "notice"
    assert knee.levels == [3, 4]  # keys: between 8 and 16 req/s
    n = knee.numbers
    assert n["saturation_level"] == 4 and n["saturation_rate_rps"] == 16.0
    assert n["last_kept_rate_rps"] == 8.0
    assert "completed" in n["evidence"]
    assert n["capacity_rps"] == pytest.approx(11.1, rel=0.1)
    assert n["offered_rate_rps"] == {"3": 8.0, "4": 16.0}
    en = knee.text["en"]
    assert en.startswith("The server saturates between 8 req/s and 16 req/s")
    assert "signs agree" in en  # completion rate and TTFT from the schedule
    assert "在 8 请求/秒 与 16 请求/秒 之间饱和" in knee.text["zh"]


def test_goodput_picks_the_point_below_saturation(saturating: list) -> None:
    rec = finding(saturating, "recommended")
    assert rec.numbers["basis"] == "goodput"
    assert rec.numbers["concurrency"] == 3  # 8 req/s
    # 16 req/s met the SLO in this short sweep, with more goodput, but it is saturated
    assert rec.numbers["next"]["goodput_rps"] > rec.numbers["goodput_at_rps"]
    assert "Run at 8 req/s" in rec.text["en"] and "past the saturation rate" in rec.text["en"]
    table = finding(saturating, "slo_table")
    assert table.numbers["basis"] == "goodput"
    assert {r["concurrency"] for r in table.numbers["rows"]} == {3}
    assert all(r["goodput_rps"] and r["slo_met_share"] >= 0.9 for r in table.numbers["rows"])


def test_no_level_is_named_by_its_key(saturating: list) -> None:
    for f in saturating:
        for lang in ("en", "zh"):
            assert "C=" not in f.text[lang], (f.id, f.text[lang])
            assert "nan" not in f.text[lang].lower().replace("nanosec", ""), f.id
    scaling = finding(saturating, "scaling")
    assert scaling.text["en"].startswith("Throughput reaches")
    assert "at 32 req/s" in scaling.text["en"]
    assert findings_json("rate-sat", saturating)["findings"]  # JSON-safe


def test_a_sweep_that_keeps_up_says_so(tmp_path: Path) -> None:
    found = analyze_run(load_trace_set(write_rate_run(tmp_path, "rate-ok", [1.0, 2.0, 4.0])))
    knee = finding(found, "knee")
    assert knee.severity == "info" and knee.levels == []
    assert knee.numbers["saturation_level"] is None
    assert knee.text["en"].startswith("The server keeps up with every offered rate up to 4 req/s")
    assert "/metrics" in knee.text["en"]  # no server queue was measured: said
    rec = finding(found, "recommended")
    assert rec.numbers["concurrency"] == 3
    assert "highest rate swept" in rec.text["en"]


def test_all_at_once_is_named(tmp_path: Path) -> None:
    found = analyze_run(
        load_trace_set(write_rate_run(tmp_path, "rate-inf", [2.0, 4.0, float("inf")]))
    )
    knee = finding(found, "knee")
    assert knee.numbers["saturation_level"] == 3
    assert "between 4 req/s and the all-at-once level" in knee.text["en"]
    assert "“全部同时发送”档" in knee.text["zh"]
    assert "likely, not certain" in knee.text["en"]  # TTFT growth alone
    assert knee.numbers["offered_rate_rps"]["3"] is None  # JSON has no inf


def test_kv_need_is_the_requests_in_flight(tmp_path: Path) -> None:
    path = write_rate_run(tmp_path, "rate-kv", SATURATING, kv_cache_tokens=4 * 288)
    found = analyze_run(load_trace_set(path))
    kv = finding(found, "kv_ceiling")
    occupancy = kv.numbers["occupancy"]
    # 288 tokens a request, a pool of four: the need follows the requests in flight, not the key
    assert occupancy["1"] < 0.5 and occupancy["5"] > 1.0
    assert "requests in flight" in kv.text["en"] and "C=" not in kv.text["en"]


def test_the_client_queue_and_the_server_queue_are_named(tmp_path: Path) -> None:
    # --max-concurrency 4 = the server's slots: past ~11 req/s requests wait in the client
    capped = analyze_run(
        load_trace_set(write_rate_run(tmp_path, "capped", SATURATING, client_cap=4))
    )
    knee = finding(capped, "knee")
    assert knee.numbers["saturation_level"] == 4
    assert {"sent", "client_queue"} <= set(knee.numbers["evidence"])
    assert "the client sent only" in knee.text["en"] and "in the client at p90" in knee.text["en"]
    assert "server_waiting" not in knee.numbers["evidence"]  # no scrapes: not claimed
    # no cap, the server's gauges scraped: the server's waiting queue says it too
    scraped = analyze_run(
        load_trace_set(write_rate_run(tmp_path, "scraped", SATURATING, scrape=True))
    )
    knee = finding(scraped, "knee")
    assert knee.numbers["saturation_level"] == 4
    assert {"completed", "server_waiting"} <= set(knee.numbers["evidence"])
    assert "The server's waiting queue held" in knee.text["en"]
    assert knee.numbers["server_waiting_mean"]["1"] == 0.0


def test_a_sweep_that_keeps_up_with_scrapes_claims_no_more(tmp_path: Path) -> None:
    found = analyze_run(
        load_trace_set(write_rate_run(tmp_path, "ok", [1.0, 2.0, 4.0], scrape=True))
    )
    knee = finding(found, "knee")
    assert knee.numbers["saturation_level"] is None
    assert "/metrics" not in knee.text["en"]  # the server's side was seen


def test_a_rate_run_without_in_flight_counts_invents_none(tmp_path: Path) -> None:
    """An import's rate levels: send times not the recording's own, so no requests in flight and
    no request times: every finding still reads, none with a NaN in it."""
    from dataclasses import replace

    from sweeper.findings import analyze
    from sweeper.findings.frames import run_frames

    path = write_rate_run(tmp_path, "imported", SATURATING, kv_cache_tokens=4 * 288)
    data = run_frames(load_trace_set(path))
    levels = data.levels.assign(inflight_mean=float("nan"), inflight_max=float("nan"))
    found = analyze(replace(data, levels=levels, requests=None, gaps=None))
    for f in found:
        assert "error" not in f.numbers, f.numbers.get("error")
        for lang in ("en", "zh"):
            assert "nan" not in f.text[lang].lower(), (f.id, f.text[lang])
            assert "C=" not in f.text[lang], (f.id, f.text[lang])
    assert "occupancy is unknown" in finding(found, "kv_ceiling").text["en"]
    assert finding(found, "knee").numbers["saturation_level"] is not None


def test_a_closed_loop_with_an_slo_adds_goodput_beside_its_choice(tmp_path: Path) -> None:
    from sweeper.findings import parse_slos
    from sweeper.testing.factories import SyntheticLevel, write_synthetic_run

    levels = [SyntheticLevel(1, 40, 10), SyntheticLevel(4, 80, 12), SyntheticLevel(8, 200, 15)]
    ts = load_trace_set(write_synthetic_run(tmp_path, "closed", levels))
    slos = parse_slos("ttft_p99<=150ms,itl_p50<=20ms")
    rec = finding(analyze_run(ts, slos=slos), "recommended")
    assert rec.numbers["concurrency"] == 4  # still chosen by the levels' percentiles
    assert rec.numbers["slo_met_share"] == {"1": 1.0, "4": 1.0, "8": 0.0}
    assert rec.numbers["goodput_rps"]["4"] > rec.numbers["goodput_rps"]["1"] > 0
    assert "100% of the requests at C=4 met it" in rec.text["en"]
    # without --slo a closed loop says what it said before
    assert "goodput" not in finding(analyze_run(ts), "recommended").text["en"]


def test_the_tail_of_a_rate_sweep_is_read_per_rate(tmp_path: Path) -> None:
    server = ToyServer(stall_every=8, stall_ms=120.0)  # stalls once requests queue
    found = analyze_run(load_trace_set(write_rate_run(tmp_path, "tail", SATURATING, server=server)))
    tail = finding(found, "itl_tail")
    assert tail.numbers["opens_at"] == 4  # 16 req/s, where requests start to queue
    assert tail.text["en"].startswith("The ITL tail opens at 16 req/s")
    cause = finding(found, "tail_cause")
    assert cause.severity != "unknown" or cause.missing  # a verdict, or what it lacks
    for f in (tail, cause):
        assert "C=" not in f.text["en"] and "C=" not in f.text["zh"]


def test_a_single_rate_past_saturation_is_not_called_safe(tmp_path: Path) -> None:
    found = analyze_run(load_trace_set(write_rate_run(tmp_path, "one", [20.0])))
    knee = finding(found, "knee")
    assert knee.text["en"].startswith(
        "The server is saturated already at the lowest rate, 20 req/s"
    )
    rec = finding(found, "recommended")
    assert rec.severity == "notice" and rec.numbers["past_saturation"] is True
    assert "past the saturation rate" in rec.text["en"]
    assert "highest rate swept" not in rec.text["en"]


def test_summary_only_rates_are_a_guess_and_sentences_start_with_a_capital(
    tmp_path: Path,
) -> None:
    from tests.importers.test_vllm_bench_rates import INF, import_files, rate_result, write

    rates = (1.0, 4.0, 16.0, INF)
    summaries = [write(tmp_path / f"s-{r}.json", rate_result(r, detailed=False)) for r in rates]
    _, ts = import_files(tmp_path, *summaries)
    knee = finding(analyze_run(ts), "knee")
    # completed / duration of a 1 s level at 16 req/s: the drain alone lowers it below 90%
    assert knee.numbers["saturation_level"] == 3 and knee.numbers["evidence"] == ["completed"]
    assert "a guess until a recording with per-request times" in knee.text["en"]
    # per-chunk files of the same runs: nothing saturates, the top level is named in words
    (tmp_path / "chunks").mkdir()
    files = [write(tmp_path / "chunks" / f"c-{r}.json", rate_result(r)) for r in rates]
    _, ts = import_files(tmp_path / "chunks", *files)
    found = analyze_run(ts)
    assert finding(found, "knee").numbers["saturation_level"] is None
    assert (
        "The all-at-once level is the highest rate swept"
        in finding(found, "recommended").text["en"]
    )


@pytest.mark.parametrize("seed", range(6))
def test_poisson_gaps_are_not_taken_for_saturation(tmp_path: Path, seed: int) -> None:
    """A Poisson schedule's own rate over 40 requests differs from the offered one by ~16%: the
    completions are judged against the requests actually sent, not the nominal rate."""
    # (8 req/s is too close to the ~11 req/s the server completes: a draw can outrun it)
    path = write_rate_run(tmp_path, "poisson", [1.0, 2.0, 4.0, 6.0], poisson_seed=seed)
    assert finding(analyze_run(load_trace_set(path)), "knee").numbers["saturation_level"] is None
    path = write_rate_run(tmp_path, "poisson-sat", SATURATING, poisson_seed=seed)
    knee = finding(analyze_run(load_trace_set(path)), "knee")
    # 16 req/s; a draw of 8 req/s that outran the ~11 req/s the server completes is saturated too
    assert knee.numbers["saturation_level"] in (3, 4, 5)
    assert "completed" in knee.numbers["evidence"]


def test_a_late_client_is_not_the_servers_saturation(tmp_path: Path) -> None:
    # A sweep the server keeps up with; at 2 req/s the recorder sent every request 300 ms late
    # with few in flight and no cap: the client's own lateness (a busy machine), not saturation.
    ts = load_trace_set(write_rate_run(tmp_path, "late", [1.0, 2.0, 4.0], scrape=True))
    for trace in ts.requests:
        if trace.concurrency == 2 and trace.scheduled_ns is not None:
            trace.scheduled_ns -= 300_000_000
    knee = finding(analyze_run(ts), "knee")
    assert knee.numbers["saturation_level"] is None
    assert "client_queue" not in knee.numbers["signs"]["2"]
    assert knee.numbers["client_behind"] == [2]
    assert "the recorder itself fell behind its schedule" in knee.text["en"]
    assert "录制端自己跟不上发送计划" in knee.text["zh"]
