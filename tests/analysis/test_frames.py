"""The metric definitions (DESIGN.md "Metrics"), on trace sets written by the real writer with
timings chosen here, so every expected value follows from the definition, not from the code."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sweeper.analysis.frames import (
    GAP_COLUMNS,
    REQUEST_COLUMNS,
    gap_frame,
    level_frame,
    request_frame,
    request_tokens,
)
from sweeper.schema import (
    Fact,
    LevelAttempt,
    LevelStatus,
    RequestError,
    RequestTrace,
    ServerConfig,
    Source,
    Workload,
)
from sweeper.store import TraceSet, load_trace_set, write_trace_set
from sweeper.testing.factories import (
    SyntheticLevel,
    synthetic_manifest,
    synthetic_requests,
    write_synthetic_run,
)
from sweeper.units import NS_PER_S
from tests.analysis.interrupted import resumed_after_a_pause

MS = 1_000_000  # ns


def trace(
    rid: str,
    send_ms: float,
    chunks_ms: list[float],
    tokens: list[int] | None = None,
    *,
    concurrency: int = 2,
    phase: str = "measured",
    completion: int | None = None,
) -> RequestTrace:
    tokens = tokens or [1] * len(chunks_ms)
    return RequestTrace(
        concurrency=concurrency,
        request_id=rid,
        phase=phase,  # type: ignore[arg-type]
        send_ns=round(send_ms * MS),
        end_ns=round(chunks_ms[-1] * MS) + MS,
        chunk_ns=[round(c * MS) for c in chunks_ms],
        chunk_tokens=tokens,
        prompt_tokens=100,
        completion_tokens=sum(tokens) if completion is None else completion,
        finish_reason="length",
    )


def write_set(tmp_path: Path, requests: list[RequestTrace], **manifest: object) -> TraceSet:
    m = synthetic_manifest("m", [SyntheticLevel(2, 1, 1)])
    for key, value in manifest.items():
        setattr(m, key, value)
    return load_trace_set(write_trace_set(tmp_path / "m", m, requests))


@pytest.fixture
def hand_made(tmp_path: Path) -> TraceSet:
    return write_set(
        tmp_path,
        [
            # warm-up: excluded from everything
            trace("w", 0, [5, 6, 7], phase="warmup"),
            # sent at 10 ms: TTFT 100, gaps 10, 30 (a 2-token chunk), 20 -> E2EL 160, 5 tokens
            trace("a", 10, [100, 110, 140, 160], [1, 1, 2, 1]),
            # sent at 20 ms: TTFT 50, gaps 40 -> E2EL 90, 2 tokens
            trace("b", 20, [50, 90]),
            RequestTrace(
                concurrency=2,
                request_id="x",
                send_ns=30 * MS,
                end_ns=400 * MS,
                status="error",
                error=RequestError(kind="http", http_status=503, message="busy"),
            ),
        ],
    )


def test_request_frame_definitions(hand_made: TraceSet) -> None:
    frame = request_frame(hand_made).set_index("request_id")
    assert list(request_frame(hand_made).columns[: len(REQUEST_COLUMNS)]) == REQUEST_COLUMNS
    assert "w" not in frame.index  # warm-up excluded
    a = frame.loc["a"]
    assert a["ttft_ms"] == 100 and a["e2el_ms"] == 160
    assert a["tpot_ms"] == pytest.approx((160 - 100) / (5 - 1))
    assert a["decode_tok_s"] == pytest.approx((5 - 1) / 0.060)
    assert a["gen_tok_s"] == pytest.approx(5 / 0.160)
    assert a["chunks"] == 4 and a["multi_token_chunks"] == 1
    assert a["send_s"] == pytest.approx(0.010) and a["end_s"] == pytest.approx(0.170)
    x = frame.loc["x"]  # failed: counted, never timed
    assert np.isnan(x["ttft_ms"]) and np.isnan(x["e2el_ms"]) and x["error_kind"] == "http"
    assert x["end_s"] == pytest.approx(0.430)  # its stream end still bounds the window


def test_gap_frame_pools_chunk_gaps_with_token_counts(hand_made: TraceSet) -> None:
    gaps = gap_frame(hand_made)
    assert list(gaps.columns) == GAP_COLUMNS
    assert sorted(gaps["itl_ms"].round(9)) == [10, 20, 30, 40]
    two = gaps[gaps["tokens"] == 2].iloc[0]  # a 2-token chunk is one gap, its count kept
    assert two["itl_ms"] == pytest.approx(30) and two["request_id"] == "a" and two["gap_index"] == 2
    assert two["at_s"] == pytest.approx(0.150)


def test_level_frame_definitions(hand_made: TraceSet) -> None:
    row = level_frame(hand_made, slos={"ttft_ms": 60}).iloc[0]
    assert (row["requests"], row["completed"], row["failed"]) == (3, 2, 1)
    # window: first measured send (10 ms) to the last end (x's stream end at 430 ms)
    assert row["duration_s"] == pytest.approx(0.420)
    assert row["output_throughput_tok_s"] == pytest.approx(7 / 0.420)
    assert row["request_throughput_rps"] == pytest.approx(2 / 0.420)
    assert row["total_token_throughput_tok_s"] == pytest.approx((7 + 200) / 0.420)
    assert row["ttft_mean_ms"] == pytest.approx(75)
    assert row["ttft_p50_ms"] == pytest.approx(np.percentile([100, 50], 50))
    assert row["ttft_p99_ms"] == pytest.approx(np.percentile([100, 50], 99))
    assert row["itl_mean_ms"] == pytest.approx(25)
    assert row["itl_p90_ms"] == pytest.approx(np.percentile([10, 30, 20, 40], 90))
    assert row["tpot_mean_ms"] == pytest.approx((15 + 40) / 2)
    assert row["multi_token_gap_share"] == pytest.approx(0.25)
    assert row["goodput_rps"] == pytest.approx(1 / 0.420)  # only b meets TTFT <= 60 ms
    assert row["basis"] == "requests"


def test_in_flight_concurrency_is_measured_from_the_trace(hand_made: TraceSet) -> None:
    row = level_frame(hand_made).iloc[0]
    # a: 10-170 ms, b: 20-110 ms, x (failed): 30-430 ms; all three in flight at 30 ms
    assert row["inflight_max"] == 3
    assert row["inflight_mean"] == pytest.approx((0.160 + 0.090 + 0.400) / 0.420)
    assert np.isnan(row["paused_s"])  # not sweeper's own recording: no pause is looked for


def _recorded(tmp_path: Path, requests: list[RequestTrace]) -> pd.Series:
    source = Source(tool="sweeper record", version="test")
    return level_frame(write_set(tmp_path, requests, source=source)).iloc[0]


def test_a_pause_in_a_resumed_level_is_left_out_of_its_duration(tmp_path: Path) -> None:
    """C=1 interrupted after two requests and resumed a minute later: the level ran 3 s, not 63."""
    chunks = [500 + 10 * i for i in range(50)]  # TTFT 500 ms, 50 tokens, ends at 990 ms
    requests = [
        trace("a", 0, chunks, concurrency=1),
        trace("b", 1_000, chunks, concurrency=1),
        trace("c", 62_000, chunks, concurrency=1),
    ]
    row = _recorded(tmp_path, requests)
    assert row["paused_s"] == pytest.approx(60.01)
    assert row["duration_s"] == pytest.approx(62.99 - 60.01)
    assert row["output_throughput_tok_s"] == pytest.approx(150 / 2.98)
    assert row["inflight_max"] == 1 and row["inflight_mean"] == pytest.approx(3 * 0.99 / 2.98)


def test_short_idle_spans_are_not_pauses(tmp_path: Path) -> None:
    """Idle for 0.9 s (under 1 s), and for 5 s where requests take 1 s (under 10x): kept."""
    chunks = [500 + 10 * i for i in range(50)]
    requests = [
        trace("a", 0, chunks, concurrency=1),
        trace("b", 1_890, chunks, concurrency=1),
        trace("c", 7_880, chunks, concurrency=1),
    ]
    row = _recorded(tmp_path, requests)
    assert row["paused_s"] == 0
    assert row["duration_s"] == pytest.approx(8.87)


def test_an_imported_tools_idle_time_stays_in_its_duration(tmp_path: Path) -> None:
    """A replayed trace's users wait between turns: the tool counted that time, so does sweeper."""
    chunks = [500 + 10 * i for i in range(50)]
    requests = [trace("a", 0, chunks, concurrency=1), trace("b", 62_000, chunks, concurrency=1)]
    ts = write_set(tmp_path, requests, source=Source(tool="aiperf", fidelity="per_chunk"))
    assert level_frame(ts).iloc[0]["duration_s"] == pytest.approx(62.99)


def test_per_gpu_throughput_divides_by_parallel_size(tmp_path: Path) -> None:
    config = ServerConfig(
        tensor_parallel_size=Fact(value=2, source="user"),
        data_parallel_size=Fact(value=2, source="user"),
    )
    folder = write_synthetic_run(
        tmp_path, "r", [SyntheticLevel(4, 50, 10)], output_len=32, config=config
    )
    row = level_frame(load_trace_set(folder)).iloc[0]
    assert row["output_throughput_per_gpu_tok_s"] == pytest.approx(
        row["output_throughput_tok_s"] / 4
    )


def test_synthetic_sweep_has_the_timings_it_was_built_with(tmp_path: Path) -> None:
    levels = [
        SyntheticLevel(1, 40, 10),
        SyntheticLevel(8, 120, 20, stall_every=32, stall_ms=200, failures=2),
    ]
    folder = write_synthetic_run(tmp_path, "s", levels, output_len=128, warmup=2)
    frame = level_frame(load_trace_set(folder)).set_index("concurrency")
    assert frame.loc[1, "ttft_p50_ms"] == pytest.approx(40)
    assert frame.loc[1, "itl_p99_ms"] == pytest.approx(10)
    assert frame.loc[8, "failed"] == 2
    assert frame.loc[8, "itl_p50_ms"] == pytest.approx(20)
    assert frame.loc[8, "itl_p99_ms"] == pytest.approx(200)  # the tail: 1 gap in 32
    # 127 gaps per request, every 32nd a stall: gaps 32, 64, 96 -> 3 stalls
    assert frame.loc[8, "tpot_mean_ms"] == pytest.approx((124 * 20 + 3 * 200) / 127, rel=1e-6)


def test_per_request_fidelity_has_no_itl(tmp_path: Path) -> None:
    ts = write_set(
        tmp_path,
        [
            RequestTrace(
                concurrency=1,
                request_id=str(i),
                send_ns=i * 1000 * MS,
                ttft_ns=200 * MS,
                e2el_ns=900 * MS,
                end_ns=900 * MS,
                completion_tokens=8,
                prompt_tokens=10,
            )
            for i in range(4)
        ],
        source=Source(tool="llmperf", fidelity="per_request"),
    )
    row = level_frame(ts).iloc[0]
    assert row["ttft_mean_ms"] == pytest.approx(200) and row["e2el_p50_ms"] == pytest.approx(900)
    assert row["tpot_mean_ms"] == pytest.approx(100)
    assert np.isnan(row["itl_p50_ms"]) and row["gaps"] == 0
    assert row["duration_s"] == pytest.approx(3.9)


def test_reconstructed_send_times_take_the_tools_duration(tmp_path: Path) -> None:
    source = Source(
        tool="llmperf",
        fidelity="per_request",
        send_times="reconstructed",
        summaries={"1": {"duration_s": 10.0}},
    )
    ts = write_set(
        tmp_path,
        [
            RequestTrace(
                concurrency=1,
                request_id="a",
                send_ns=0,
                ttft_ns=MS,
                e2el_ns=2 * MS,
                completion_tokens=50,
            )
        ],
        source=source,
    )
    row = level_frame(ts).iloc[0]
    assert row["duration_s"] == 10.0 and row["output_throughput_tok_s"] == pytest.approx(5.0)
    assert row["basis"] == "requests+tool_duration"


def test_summary_only_levels_come_from_the_tool(tmp_path: Path) -> None:
    source = Source(
        tool="vllm-bench",
        fidelity="summary",
        summaries={"4": {"completed": 10, "failed": 1, "duration_s": 2.0, "ttft_ms_mean": 33.0}},
    )
    ts = write_set(tmp_path, [], source=source)
    frame = level_frame(ts)
    row = frame.iloc[0]
    assert row["concurrency"] == 4 and row["requests"] == 11 and row["ttft_mean_ms"] == 33.0
    assert np.isnan(row["itl_p50_ms"]) and row["basis"] == "tool_summary"


def test_empty_trace_set_gives_empty_frames(tmp_path: Path) -> None:
    ts = write_set(tmp_path, [])
    assert request_frame(ts).empty and gap_frame(ts).empty
    assert isinstance(level_frame(ts), pd.DataFrame) and level_frame(ts).empty


def test_gzip_trace_set_reads_the_same(tmp_path: Path) -> None:
    levels = [SyntheticLevel(2, 30, 5)]
    plain = level_frame(load_trace_set(write_synthetic_run(tmp_path, "p", levels, output_len=16)))
    packed = level_frame(
        load_trace_set(write_synthetic_run(tmp_path, "z", levels, output_len=16, compress=True))
    )
    pd.testing.assert_frame_equal(plain, packed)


def test_token_count_mismatch_with_what_was_asked_is_reported(tmp_path: Path) -> None:
    """Token counts come from the server's usage; a request that got fewer than asked shows."""
    requests = [trace(str(i), i * 200, [10, 20, 30, 40]) for i in range(3)]
    requests.append(trace("short", 900, [10, 20], completion=2))
    ts = write_set(tmp_path, requests)
    ts.manifest.workload.output_len = 4
    ts.manifest.workload.input_len = 100
    row = level_frame(ts).iloc[0]
    assert row["output_len_mismatches"] == 1 and row["input_len_mismatches"] == 0
    ts.manifest.workload.output_len = None
    assert np.isnan(level_frame(ts).iloc[0]["output_len_mismatches"])


def test_a_level_resumed_after_a_pause_has_the_throughput_of_one_that_was_not(
    tmp_path: Path,
) -> None:
    """The C=1 of issue 16: interrupted half-way, resumed two minutes later."""
    levels = [SyntheticLevel(1, 30, 10, requests=8)]
    manifest = synthetic_manifest("whole", levels, output_len=32)
    manifest.source = Source(tool="sweeper record", version="test")
    requests = synthetic_requests(levels, output_len=32)
    whole = level_frame(load_trace_set(write_trace_set(tmp_path / "whole", manifest, requests)))
    paused = resumed_after_a_pause(requests, 1, after=4, pause_ns=120 * NS_PER_S)
    manifest.run_id = "paused"
    cut = level_frame(load_trace_set(write_trace_set(tmp_path / "paused", manifest, paused)))
    assert cut.iloc[0]["paused_s"] == pytest.approx(120, abs=0.01)
    assert cut.iloc[0]["output_throughput_tok_s"] == pytest.approx(
        whole.iloc[0]["output_throughput_tok_s"], rel=1e-3
    )


def test_a_short_pause_between_two_attempts_of_a_level_is_left_out(tmp_path: Path) -> None:
    """Ctrl-C and --resume five seconds later: under the 10x rule (requests of 1 s), but the
    manifest's attempts say the recorder stopped at 2.0 s and went on at 6.5 s."""
    chunks = [500 + 10 * i for i in range(50)]
    requests = [
        trace("a", 0, chunks, concurrency=1),
        trace("b", 1_000, chunks, concurrency=1),
        trace("c", 7_000, chunks, concurrency=1),
    ]
    ts = write_set(tmp_path, requests, source=Source(tool="sweeper record", version="test"))
    ts.manifest.levels = [
        LevelStatus(
            concurrency=1,
            status="complete",
            attempts=[
                LevelAttempt(start_ns=0, end_ns=2_000 * MS, outcome="interrupted"),
                LevelAttempt(start_ns=6_500 * MS, end_ns=8_000 * MS, outcome="complete"),
            ],
        )
    ]
    row = level_frame(ts).iloc[0]
    assert row["paused_s"] == pytest.approx(4.5)  # 2.0 -> 6.5 of the idle 1.99 -> 7.0
    assert row["duration_s"] == pytest.approx(7.99 - 4.5)


_MEASURED = pd.DataFrame({"prompt_tokens_mean": [300.0, 500.0], "output_tokens_mean": [30.0, 34.0]})


@pytest.mark.parametrize(
    ("workload", "expected"),
    [
        # Every request asks the same: the asked lengths, whatever was measured.
        (Workload(input_len=200, output_len=32), (200.0, 32.0)),
        # Later turns carry the whole history: the measured means.
        (Workload(input_len=200, output_len=32, turns=3), (400.0, 32.0)),
        (Workload(input_len=200, output_len=32, input_len_range=0.5), (400.0, 32.0)),
        (Workload(input_len=200, output_len=32, dataset="sharegpt:x.json"), (400.0, 32.0)),
        (Workload(input_len=None, output_len=32), (400.0, 32.0)),
        (Workload(input_len=None, output_len=None), (400.0, 32.0)),
    ],
)
def test_request_tokens_are_measured_where_requests_differ(
    workload: Workload, expected: tuple[float, float]
) -> None:
    assert request_tokens(workload, _MEASURED) == expected


def test_request_tokens_fall_back_to_the_asked_lengths_where_nothing_was_measured() -> None:
    workload = Workload(input_len=200, output_len=32, turns=3)
    assert request_tokens(workload, pd.DataFrame({"concurrency": [1]})) == (200.0, 32.0)
