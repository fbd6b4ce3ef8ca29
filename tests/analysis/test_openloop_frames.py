"""The open-loop, goodput and multi-turn columns of the frames (DESIGN.md "Metrics"; issue 12),
on trace sets written by the real writer with hand-chosen timings (tests/analysis/openloop.py):
every expected value below is worked out from the table in :func:`rate_sweep`'s docstring."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sweeper.analysis.frames import (
    REQUEST_COLUMNS,
    TURN_COLUMNS,
    level_frame,
    request_frame,
    turn_frame,
)
from sweeper.analysis.slo import SLO, gap_stat, parse_slos, requests_meeting
from sweeper.schema import LevelAttempt, LevelStatus
from sweeper.store import TraceSet
from tests.analysis.openloop import MS, multi_turn, open_trace, rate_sweep, write_rate_run

DURATION_1 = 1.550  # level 1: first send (0 ms) to d's last chunk (1500 + 50 ms)


@pytest.fixture
def sweep(tmp_path: Path) -> TraceSet:
    return rate_sweep(tmp_path / "rates")


def test_request_frame_has_the_schedule(sweep: TraceSet) -> None:
    frame = request_frame(sweep).set_index("request_id")
    assert list(request_frame(sweep).columns[: len(REQUEST_COLUMNS)]) == REQUEST_COLUMNS
    b = frame.loc["r1-00001"]
    assert b["scheduled_s"] == pytest.approx(0.5)
    assert b["client_queue_ms"] == pytest.approx(40)
    assert b["ttft_ms"] == pytest.approx(120) and b["ttft_sched_ms"] == pytest.approx(160)
    assert b["e2el_ms"] == pytest.approx(130) and b["e2el_sched_ms"] == pytest.approx(170)
    assert b["asked_output_tokens"] == 4 and np.isnan(b["asked_input_tokens"])
    assert np.isnan(b["session"]) and np.isnan(b["turn"])
    x = frame.loc["r1-00002"]  # failed: queued like the others, never timed
    assert x["client_queue_ms"] == pytest.approx(60)
    assert np.isnan(x["ttft_sched_ms"]) and np.isnan(x["e2el_sched_ms"])


def test_closed_loop_requests_have_no_schedule(tmp_path: Path) -> None:
    frame = request_frame(multi_turn(tmp_path / "mt"))
    for column in ("scheduled_s", "client_queue_ms", "ttft_sched_ms", "e2el_sched_ms"):
        assert frame[column].isna().all(), column
    assert frame["session"].tolist() == [0, 1, 0, 1, 2]
    assert frame["turn"].tolist() == [1, 1, 2, 2, 2]


def test_level_frame_open_loop_columns(sweep: TraceSet) -> None:
    levels = level_frame(sweep).set_index("concurrency")
    one, two = levels.loc[1], levels.loc[2]
    assert one["offered_rate_rps"] == 2.0 and two["offered_rate_rps"] == float("inf")
    assert one["achieved_rate_rps"] == pytest.approx(3 / 1.5)  # 4 sends over 0 .. 1500 ms
    assert two["achieved_rate_rps"] == pytest.approx(1 / 0.005)  # 2 sends 5 ms apart
    queue = [0, 40, 60, 0]  # failed x included: it waited too
    assert one["client_queue_mean_ms"] == pytest.approx(25)
    assert one["client_queue_p50_ms"] == pytest.approx(20)
    assert one["client_queue_p90_ms"] == pytest.approx(np.percentile(queue, 90))  # 54
    assert one["client_queue_p99_ms"] == pytest.approx(59.4)
    assert one["ttft_sched_mean_ms"] == pytest.approx((100 + 160 + 50) / 3)
    assert one["ttft_sched_p50_ms"] == pytest.approx(100)
    assert one["ttft_sched_p99_ms"] == pytest.approx(100 + 0.98 * 60)
    assert one["e2el_sched_p50_ms"] == pytest.approx(130)
    assert one["e2el_sched_p95_ms"] == pytest.approx(130 + 0.9 * 40)
    assert one["ttft_mean_ms"] == pytest.approx((100 + 120 + 50) / 3)  # from the send, as today
    assert one["duration_s"] == pytest.approx(DURATION_1)
    assert two["client_queue_mean_ms"] == pytest.approx(2.5)
    assert two["ttft_sched_mean_ms"] == pytest.approx((40 + 65) / 2)


def test_open_loop_idle_time_is_not_a_pause(tmp_path: Path) -> None:
    """At 0.1 req/s a level idles ~10 s between 50 ms requests: that is the schedule, not a
    stopped recorder, so it stays in the duration."""
    requests = [open_trace(f"r1-{i:05d}", 1, i * 10_000, i * 10_000, [40, 50]) for i in range(3)]
    row = level_frame(write_rate_run(tmp_path / "slow", requests, [0.1])).iloc[0]
    assert row["duration_s"] == pytest.approx(20.050)
    assert np.isnan(row["paused_s"])
    assert row["achieved_rate_rps"] == pytest.approx(0.1)


def test_closed_loop_levels_have_an_achieved_rate_and_no_schedule(tmp_path: Path) -> None:
    row = level_frame(multi_turn(tmp_path / "mt")).iloc[0]
    assert np.isnan(row["offered_rate_rps"])
    assert row["achieved_rate_rps"] == pytest.approx(4 / 0.3)  # 5 sends over 0 .. 300 ms
    for column in ("client_queue_p99_ms", "ttft_sched_p50_ms", "e2el_sched_mean_ms"):
        assert np.isnan(row[column]), column


def test_mismatches_compare_each_request_with_what_it_asked(sweep: TraceSet) -> None:
    one = level_frame(sweep).set_index("concurrency").loc[1]
    # a asked 3 got 3; b asked 4 got 2; d asked 2 got 1; x failed (not compared)
    assert one["output_len_mismatches"] == 2
    assert one["input_len_mismatches"] == 0  # no per-request ask: the workload's 100
    two = level_frame(sweep).set_index("concurrency").loc[2]
    assert np.isnan(two["output_len_mismatches"])  # nothing asked, no fixed length


@pytest.mark.parametrize(
    ("slo", "good"),
    [
        # TTFT from the schedule: b's 120 ms from its send is 160 ms from its schedule
        ("ttft_p99<=150ms", 2),
        ("ttft_p50<=10s", 3),  # everything completed; the failed x never counts
        ("e2el_p99<=150ms", 2),  # b: 130 ms from the send, 170 from the schedule
        ("tpot_p99<=12ms", 2),  # a 15 ms, b 10 ms, d one token (nothing to judge)
        ("itl_p50<=12ms", 2),  # a's own gaps 10, 20: p50 15; b's 10; d has none
        ("itl_p99<=25ms", 3),  # a's p99 19.9
        ("itl_mean<=14ms", 2),  # a's mean 15
        ("ttft_p99<=150ms,tpot_p99<=12ms", 1),  # only d meets both
    ],
)
def test_goodput_counts_requests_meeting_every_term(sweep: TraceSet, slo: str, good: int) -> None:
    one = level_frame(sweep, slos=parse_slos(slo)).set_index("concurrency").loc[1]
    assert one["goodput_rps"] == pytest.approx(good / DURATION_1)
    assert one["slo_met_share"] == pytest.approx(good / 4)


def test_goodput_of_every_level_and_the_older_mapping(sweep: TraceSet) -> None:
    levels = level_frame(sweep, slos=parse_slos("ttft_p99<=60ms")).set_index("concurrency")
    assert levels.loc[2, "goodput_rps"] == pytest.approx(1 / 0.075)  # only the one sent at once
    assert levels.loc[2, "slo_met_share"] == pytest.approx(0.5)
    mapped = level_frame(sweep, slos={"ttft_ms": 150}).set_index("concurrency")
    assert mapped.loc[1, "goodput_rps"] == pytest.approx(2 / DURATION_1)
    assert "goodput_rps" not in level_frame(sweep).columns


def test_a_failed_request_never_counts_as_good(tmp_path: Path) -> None:
    requests = [open_trace("r1-00000", 1, 0, 0, None), open_trace("r1-00001", 1, 0, 0, [10])]
    ts = write_rate_run(tmp_path / "f", requests, [1.0])
    frame = request_frame(ts)
    met = requests_meeting(frame, parse_slos("ttft_p99<=1s,tpot_p99<=1s,itl_p99<=1s"))
    assert met.tolist() == [False, True]


def test_gap_stat_is_each_requests_own_percentile() -> None:
    owner = np.array([1, 0, 1, 1, 0, 2])
    itl = np.array([30.0, 5.0, 10.0, 20.0, 15.0, 7.0])
    assert gap_stat(owner, itl, 4, "mean")[:3].tolist() == [10, 20, 7]
    p90 = gap_stat(owner, itl, 4, "p90")
    assert p90[:3] == pytest.approx([14, 28, 7])
    assert np.isnan(p90[3])  # request 3 has no gap


def test_itl_terms_need_chunk_times(tmp_path: Path) -> None:
    """A per-request import has no gaps: an itl term cannot be judged, so no goodput."""
    req = open_trace("r1-00000", 1, 0, 0, [10, 20])
    ts = write_rate_run(
        tmp_path / "p",
        [
            req.model_copy(
                update={
                    "chunk_ns": [],
                    "chunk_tokens": [],
                    "ttft_ns": 10 * 10**6,
                    "e2el_ns": 20 * 10**6,
                }
            )
        ],
        [1.0],
    )
    row = level_frame(ts, slos=[SLO(metric="itl", stat="p50", bound_ms=1e6)]).iloc[0]
    assert np.isnan(row["goodput_rps"]) and np.isnan(row["slo_met_share"])


def test_turn_frame(tmp_path: Path) -> None:
    turns = turn_frame(request_frame(multi_turn(tmp_path / "mt")))
    assert list(turns.columns) == TURN_COLUMNS
    assert turns[["concurrency", "turn", "requests"]].values.tolist() == [[2, 1, 2], [2, 2, 3]]
    assert turns["ttft_mean_ms"].tolist() == pytest.approx([90, 40])
    assert turns["ttft_p50_ms"].tolist() == pytest.approx([90, 40])
    assert turns["ttft_p90_ms"].tolist() == pytest.approx([98, 48])


def test_turn_frame_is_empty_without_turns(sweep: TraceSet) -> None:
    turns = turn_frame(request_frame(sweep))
    assert turns.empty and list(turns.columns) == TURN_COLUMNS


def test_an_open_loop_level_meets_a_latency_slo_from_the_schedule(tmp_path: Path) -> None:
    """Requests that queued 500 ms in the client have a 50 ms TTFT from their send and 550 ms from
    their schedule: the user waited from the schedule, so ``ttft_p99<=200ms`` is not met (issue
    12); a closed loop (no schedule) is judged from the send as before."""
    requests = [open_trace(f"r1-{i:05d}", 1, i * 100, i * 100 + 500, [50, 60]) for i in range(4)]
    row = level_frame(write_rate_run(tmp_path / "queued", requests, [10.0])).iloc[0]
    assert row["ttft_p99_ms"] == pytest.approx(50)
    assert row["ttft_sched_p99_ms"] == pytest.approx(550)
    for text, column in (
        ("ttft_p99<=200ms", "ttft_sched_p99_ms"),
        ("e2el_p50<=200ms", "e2el_sched_p50_ms"),
    ):
        (term,) = parse_slos(text)
        assert term.column_for(row) == column
        assert not term.met(row)
        assert term.column == column.replace("_sched", "")  # the send's column, for callers
    (itl,) = parse_slos("itl_p50<=20ms")
    assert itl.column_for(row) == "itl_p50_ms" and itl.met(row)
    closed = level_frame(multi_turn(tmp_path / "mt")).iloc[0]
    (ttft,) = parse_slos("ttft_p99<=200ms")
    assert ttft.column_for(closed) == "ttft_p99_ms" and ttft.met(closed)


def test_a_resumed_rate_level_leaves_the_stop_between_its_attempts_out(tmp_path: Path) -> None:
    """Ctrl-C at 0.7 s and --resume 5 s later (its missing requests' offsets shifted to the
    resume): duration, achieved rate and goodput are those of the level recorded without the
    gap; an open loop's idle time between arrivals is still not searched for pauses."""

    def level(path: Path, gap_ms: float, attempts: list[LevelAttempt]) -> pd.Series:
        starts = [0, 500, 700 + gap_ms, 1200 + gap_ms]
        requests = [open_trace(f"r1-{i:05d}", 1, t, t, [50, 60]) for i, t in enumerate(starts)]
        ts = write_rate_run(path, requests, [2.0])
        ts.manifest.levels = [LevelStatus(concurrency=1, status="complete", attempts=attempts)]
        return level_frame(ts, slos=parse_slos("ttft_p99<=1s")).iloc[0]

    whole = level(tmp_path / "whole", 0, [LevelAttempt(start_ns=0, end_ns=1_260 * MS)])
    resumed = level(
        tmp_path / "resumed",
        5_000,
        [
            LevelAttempt(start_ns=0, end_ns=700 * MS, outcome="interrupted"),
            LevelAttempt(start_ns=5_700 * MS, end_ns=6_260 * MS, outcome="complete"),
        ],
    )
    assert whole["duration_s"] == pytest.approx(1.26)
    assert resumed["paused_s"] == pytest.approx(5.0)
    for column in ("duration_s", "achieved_rate_rps", "goodput_rps", "request_throughput_rps"):
        assert resumed[column] == pytest.approx(whole[column]), column
    assert resumed["achieved_rate_rps"] == pytest.approx(3 / 1.2)
    assert resumed["goodput_rps"] == pytest.approx(4 / 1.26)
