"""Prompts from files, multi-turn conversations and trace replay, recorded against the scripted
server over loopback (its toy tokenizer: one token a word, so every length can be checked)."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import httpx
import pytest

from sweeper.errors import ConfigError, ErrorRateExceeded
from sweeper.record import RecordConfig, RequestCount, record_sweep
from sweeper.record.datasets import file_sha256
from sweeper.schema import RequestTrace
from sweeper.store import load_trace_set
from sweeper.testing.server import FaultRule, ServerThread, run_server

NS_PER_MS = 1_000_000
STALL_MS = 250  # the most a shared machine may delay a due request here
ANSWERS = ["a b c", "d e f g h", "i j", "k l m n", "o p q r s t u"]


def _config(base_url: str, out: Path, **changes: object) -> RecordConfig:
    config = RecordConfig(
        base_url=base_url, input_len=12, output_len=4, concurrency=[1, 2], warmup=0,
        requests_per_level=RequestCount(fixed=3), out=out, run_id="w", scrape_interval_s=0.1,
    )  # fmt: skip
    for key, value in changes.items():
        setattr(config, key, value)
    return config


def _sharegpt(path: Path) -> Path:
    entries = [
        {"id": f"s{i}", "conversations": [
            {"from": "human", "value": f"question {i} " + "word " * (5 + i)},
            {"from": "gpt", "value": answer},
        ]}
        for i, answer in enumerate(ANSWERS)
    ]  # fmt: skip
    entries.append({"id": "none", "conversations": [{"from": "gpt", "value": "no question"}]})
    path.write_text(json.dumps(entries))
    return path


def _truths(server: ServerThread, ts_run: str, requests: list[RequestTrace]) -> list[dict]:
    return [server.truth(f"{ts_run}-{r.request_id}") or {} for r in requests]


def test_sharegpt_prompts_and_answer_lengths(server: ServerThread, tmp_path: Path) -> None:
    """The first human turns are sent as written, each level taking the next ones in a seeded
    order; the output length is the answer's; an entry without a human turn is skipped and
    said; 6 requests from 5 prompts repeat, which is said too."""
    data = _sharegpt(tmp_path / "sg.json")
    folder = record_sweep(
        _config(server.base_url, tmp_path, dataset=f"sharegpt:{data}", given=frozenset({"dataset"}))
    )
    ts = load_trace_set(folder)
    workload = ts.manifest.workload
    assert workload.dataset == f"sharegpt:{data}"
    assert workload.dataset_sha256 == file_sha256(data)
    assert (workload.input_len, workload.output_len) == (None, None)
    lengths = {len(a.split()) for a in ANSWERS}
    prompts = {7 + i for i in range(5)}  # "question i" + 5 + i words
    for r in ts.requests:
        assert r.status == "ok" and r.completion_tokens in lengths
        assert r.asked_output_tokens == r.completion_tokens
        assert r.prompt_tokens == r.asked_input_tokens and r.prompt_tokens in prompts
    first_five = [r.prompt_tokens for r in ts.requests][:5]
    assert len(set(first_five)) == 5  # no prompt repeats before the file runs out
    warnings = ts.manifest.warnings
    assert any("1 entry of" in w and "skipped" in w for w in warnings), warnings
    assert any("has 5 prompts and the sweep sends 6" in w for w in warnings), warnings


def test_output_len_given_wins_over_the_answers(server: ServerThread, tmp_path: Path) -> None:
    data = _sharegpt(tmp_path / "sg.json")
    config = _config(server.base_url, tmp_path, dataset=f"sharegpt:{data}", output_len=6,
                     given=frozenset({"output_len", "dataset"}))  # fmt: skip
    ts = load_trace_set(record_sweep(config))
    assert ts.manifest.workload.output_len == 6
    assert {r.completion_tokens for r in ts.requests} == {6}


def test_jsonl_messages_need_the_chat_endpoint(server: ServerThread, tmp_path: Path) -> None:
    data = tmp_path / "p.jsonl"
    lines = [
        {"messages": [{"role": "system", "content": "be brief"},
                      {"role": "user", "content": "one two three"}], "output_len": 5},
        {"prompt": "four five six seven"},
    ]  # fmt: skip
    data.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    with pytest.raises(ConfigError, match="add --endpoint chat"):
        record_sweep(_config(server.base_url, tmp_path, dataset=f"jsonl:{data}", run_id="j1"))
    ts = load_trace_set(
        record_sweep(
            _config(server.base_url, tmp_path, dataset=f"jsonl:{data}", endpoint="chat",
                    concurrency=[1], requests_per_level=RequestCount(fixed=2), run_id="j2")
        )
    )  # fmt: skip
    got = sorted((r.prompt_tokens, r.completion_tokens) for r in ts.requests)
    assert got == [(4, 4), (5, 5)]  # messages: 2 + 3 words; output_len 5, else --output-len 4


def _turn_prompts(requests: list[RequestTrace]) -> dict[tuple[int, int], int]:
    return {(r.session or 0, r.turn or 0): r.prompt_tokens or 0 for r in requests}


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_multi_turn_history_grows_and_hits_the_prefix_cache(tmp_path: Path, endpoint: str) -> None:
    """3 conversations of 3 turns over 2 streams: turn t sends t user messages of 12 tokens and
    the t-1 answers of 4 (as received), so the server finds the earlier turns cached."""
    with run_server(ttft_ms=1, itl_ms=1, prefix_caching=True, block_size=4) as srv:
        folder = record_sweep(
            _config(srv.base_url, tmp_path, endpoint=endpoint, concurrency=[2], sessions=3,
                    turns=3, requests_per_level=RequestCount(), warmup=1)
        )  # fmt: skip
        ts = load_trace_set(folder)
        truths = _truths(srv, ts.run_id, [r for r in ts.requests if r.turn])
        metrics = httpx.get(f"{srv.base_url}/metrics").text
    workload = ts.manifest.workload
    assert (workload.sessions, workload.turns, workload.requests_per_level) == (3, 3, {"2": 9})
    measured = [r for r in ts.requests if r.phase == "measured"]
    assert [r.request_id for r in measured] == [f"c2-{i:05d}" for i in range(1, 10)] or sorted(
        r.request_id for r in measured
    ) == [f"c2-{i:05d}" for i in range(1, 10)]
    prompts = _turn_prompts(measured)
    assert sorted(prompts) == [(s, t) for s in (1, 2, 3) for t in (1, 2, 3)]
    for (_, turn), tokens in prompts.items():
        assert tokens == 12 * turn + 4 * (turn - 1), prompts
    assert all(r.status == "ok" and r.completion_tokens == 4 for r in measured)
    cached = [t["cached_tokens"] for t in truths]
    assert min(c for c, r in zip(cached, measured, strict=False) if r.turn == 3) > 0
    assert "vllm:prefix_cache_hits_total" in metrics
    assert not [w for w in ts.manifest.warnings if "tokens" in w], ts.manifest.warnings


def test_open_loop_turns_follow_the_previous_answer_plus_think_time(tmp_path: Path) -> None:
    with run_server(ttft_ms=5, itl_ms=1) as srv:
        folder = record_sweep(
            _config(srv.base_url, tmp_path, endpoint="chat", concurrency=RecordConfig().concurrency,
                    request_rate=[math.inf], sessions=2, turns=3, think_time_ms=40.0,
                    requests_per_level=RequestCount(), metrics_urls=[])
        )  # fmt: skip
    ts = load_trace_set(folder)
    by_session = itertools.groupby(
        sorted((r for r in ts.requests if r.session), key=lambda r: (r.session, r.turn)),
        key=lambda r: r.session,
    )
    for _, turns_iter in by_session:
        turns = list(turns_iter)
        assert [r.turn for r in turns] == [1, 2, 3]
        for before, after in itertools.pairwise(turns):
            end = before.send_ns + (before.end_ns or 0)
            assert after.scheduled_ns == end + 40 * NS_PER_MS
            assert 0 <= after.send_ns - (after.scheduled_ns or 0) < STALL_MS * NS_PER_MS


def _trace(path: Path, rows: list[tuple[int, int, int, list[int]]]) -> Path:
    lines = [
        {"timestamp": t, "input_length": n, "output_length": o, "hash_ids": h}
        for t, n, o, h in rows
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return path


def test_a_mooncake_trace_replays_on_its_timestamps_sharing_its_blocks(tmp_path: Path) -> None:
    rows = [
        (0, 600, 4, [0, 1]), (100, 700, 3, [0, 2]), (100, 300, 5, [3]),
        (250, 600, 4, [0, 1]), (400, 200, 2, [4]), (500, 520, 4, [0, 5]),
    ]  # fmt: skip
    data = _trace(tmp_path / "t.jsonl", rows)
    with run_server(ttft_ms=2, itl_ms=1, prefix_caching=True) as srv:
        folder = record_sweep(
            _config(srv.base_url, tmp_path, dataset=f"mooncake:{data}", trace_speedup=2.0,
                    concurrency=RecordConfig().concurrency, requests_per_level=RequestCount())
        )  # fmt: skip
        ts = load_trace_set(folder)
        truths = {r.request_id: srv.truth(f"{ts.run_id}-{r.request_id}") for r in ts.requests}
    workload = ts.manifest.workload
    assert (workload.load, workload.arrival, workload.trace_speedup) == ("rate", "trace", 2.0)
    assert workload.concurrency_levels == [1] and workload.requests_per_level == {"1": 6}
    assert workload.request_rates == {"1": pytest.approx(5 / 0.25)}
    assert workload.warmup_requests == {"1": 0}
    requests = sorted(ts.requests, key=lambda r: r.request_id)
    assert [r.request_id for r in requests] == [f"r1-{i:05d}" for i in range(6)]
    due = [r.scheduled_ns or 0 for r in requests]
    assert [(d - due[0]) // NS_PER_MS for d in due] == [0, 50, 50, 125, 200, 250]
    for r, (_, n, o, _) in zip(requests, rows, strict=True):
        assert (r.asked_input_tokens, r.prompt_tokens, r.completion_tokens) == (n, n, o)
        assert 0 <= r.send_ns - (r.scheduled_ns or 0) < STALL_MS * NS_PER_MS
    cached = [truths[r.request_id]["cached_tokens"] for r in requests]  # type: ignore[index]
    assert cached[0] == 0 and cached[2] == 0 and cached[4] == 0  # nothing shared before
    assert cached[1] >= 496 and cached[3] >= 592 and cached[5] >= 496  # block 0 (and 1) shared


def test_a_replay_says_which_requests_the_server_cannot_hold(tmp_path: Path) -> None:
    data = _trace(tmp_path / "t.jsonl", [(0, 600, 4, [0, 1]), (10, 90, 4, [2]), (20, 40, 2, [3])])
    with run_server(ttft_ms=1, itl_ms=1, max_model_len=128) as srv:
        folder = record_sweep(
            _config(srv.base_url, tmp_path, dataset=f"mooncake:{data}", max_error_rate=1.0,
                    concurrency=RecordConfig().concurrency, requests_per_level=RequestCount(),
                    metrics_urls=[])
        )  # fmt: skip
    ts = load_trace_set(folder)
    assert [r.status for r in sorted(ts.requests, key=lambda r: r.request_id)] == [
        "error", "ok", "ok",
    ]  # fmt: skip
    assert any("1 of the trace's 3 requests ask for more tokens than the server's max_model_len "
               "128" in w for w in ts.manifest.warnings), ts.manifest.warnings  # fmt: skip


def test_a_trace_going_back_in_time_is_refused_with_its_line(tmp_path: Path) -> None:
    data = _trace(tmp_path / "back.jsonl", [(0, 10, 2, [0]), (50, 10, 2, [1]), (40, 10, 2, [2])])
    config = _config("http://127.0.0.1:9", tmp_path, dataset=f"mooncake:{data}",
                     concurrency=RecordConfig().concurrency)  # fmt: skip
    with pytest.raises(ConfigError, match=r"back\.jsonl:3: timestamp 40 is before line 2"):
        record_sweep(config)


def test_workload_options_that_cannot_work_together_are_refused(tmp_path: Path) -> None:
    data = _trace(tmp_path / "t.jsonl", [(0, 10, 2, [0])])
    cases = [
        ({"trace_speedup": 2.0}, "--trace-speedup applies to a replay"),
        ({"sessions": 2}, "--sessions N and --turns K go together"),
        ({"think_time_ms": 5.0}, "--think-time-ms applies to --sessions"),
        (
            {"sessions": 1, "turns": 2, "requests_per_level": RequestCount()},
            "--sessions 1 is fewer conversations than streams at C=2",
        ),
        ({"dataset": f"mooncake:{data}", "request_rate": [2.0]}, "leave out --request-rate"),
        ({"dataset": f"mooncake:{data}", "trace_speedup": 0.0}, "--trace-speedup 0 must be"),
        ({"dataset": "sharegpt:/no/such.json"}, "no file at /no/such.json"),
    ]
    for changes, message in cases:
        config = _config("http://x", tmp_path, **changes)
        if "concurrency" not in changes and "dataset" in changes:
            config.concurrency = RecordConfig().concurrency
        with pytest.raises(ConfigError, match=message):
            config.check()


def test_a_multi_turn_level_resumes_the_turns_it_lacks(tmp_path: Path) -> None:
    """Every 5th request fails and the error rate stops the level; resumed, the turns not
    sent yet go out (their conversations' earlier answers are not in the trace set, so the
    history starts again from what is sent now), each turn once."""
    with (
        run_server(ttft_ms=1, itl_ms=1, faults=(FaultRule("http_500", every=5),)) as bad,
        pytest.raises(ErrorRateExceeded),
    ):
        record_sweep(
            _config(bad.base_url, tmp_path, endpoint="chat", concurrency=[2], sessions=4,
                    turns=3, requests_per_level=RequestCount(), max_error_rate=0.05,
                    metrics_urls=[])
        )  # fmt: skip
    before = {r.request_id for r in load_trace_set(tmp_path / "w").requests}
    assert len(before) < 12
    with run_server(ttft_ms=1, itl_ms=1) as healthy:
        record_sweep(
            RecordConfig(base_url=healthy.base_url, out=tmp_path, run_id="w", resume=True,
                         max_error_rate=1.0, metrics_urls=[])
        )  # fmt: skip
    ts = load_trace_set(tmp_path / "w")
    assert ts.manifest.status == "complete"
    assert sorted(r.request_id for r in ts.requests) == [f"c2-{i:05d}" for i in range(12)]
    assert sorted((r.session, r.turn) for r in ts.requests) == [
        (s, t) for s in (1, 2, 3, 4) for t in (1, 2, 3)
    ]


@pytest.mark.parametrize("rate", [None, 50.0])
def test_workers_run_whole_conversations(process_server: object, tmp_path: Path, rate) -> None:
    """With --workers 2 each conversation runs in one worker, its turns in order, its history
    growing as in one process (closed loop, and open loop where later turns follow the
    previous answer)."""
    base_url = process_server.base_url  # type: ignore[attr-defined]
    changes: dict[str, object] = {"request_rate": [rate]} if rate else {"concurrency": [2]}
    if rate:
        changes["concurrency"] = RecordConfig().concurrency
    folder = record_sweep(
        _config(base_url, tmp_path, endpoint="chat", sessions=4, turns=3, workers=2,
                requests_per_level=RequestCount(), metrics_urls=[], **changes)
    )  # fmt: skip
    ts = load_trace_set(folder)
    measured = [r for r in ts.requests if r.phase == "measured"]
    assert len(measured) == 12 and {r.worker for r in measured} == {0, 1}
    for session in (1, 2, 3, 4):
        turns = sorted((r for r in measured if r.session == session), key=lambda r: r.turn or 0)
        assert len({r.worker for r in turns}) == 1  # one worker holds the history
        assert [r.prompt_tokens for r in turns] == [12, 28, 44]  # 12 t + 4 (t - 1)
        assert all(b.send_ns >= a.send_ns + (a.end_ns or 0) for a, b in itertools.pairwise(turns))


def test_dataset_prompts_that_do_not_fit_the_context_are_left_out(tmp_path: Path) -> None:
    """max_model_len 12: of the five ShareGPT entries only two fit with their answers (7 + 3,
    9 + 2 tokens); the sweep's six requests take those two in turn, and the manifest says three
    were left out (as vllm bench serve leaves them out), instead of six HTTP 400s."""
    data = _sharegpt(tmp_path / "sg.json")
    with run_server(ttft_ms=1, itl_ms=1, max_model_len=12) as srv:
        folder = record_sweep(
            _config(srv.base_url, tmp_path, dataset=f"sharegpt:{data}",
                    given=frozenset({"dataset"}), metrics_urls=[])
        )  # fmt: skip
    ts = load_trace_set(folder)
    assert all(r.status == "ok" for r in ts.requests)
    assert {(r.prompt_tokens, r.completion_tokens) for r in ts.requests} == {(7, 3), (9, 2)}
    assert any("3 prompts of --dataset" in w and "max_model_len 12" in w
               for w in ts.manifest.warnings), ts.manifest.warnings  # fmt: skip
