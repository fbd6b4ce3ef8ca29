"""Findings of the recorded sample runs under traces/ that the synthetic runs do not reach:
multi-turn conversations with prefix caching, an open-loop rate sweep."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweeper.findings import Finding, analyze_run
from sweeper.store import load_trace_set

TRACES = Path(__file__).resolve().parents[2] / "traces"
MULTI_TURN = TRACES / "small-vllm-cpu-multi-turn"


@pytest.fixture(scope="module")
def multi_turn() -> dict[str, Finding]:
    return {f.id: f for f in analyze_run(load_trace_set(MULTI_TURN))}


def test_tail_cause_quotes_no_share_it_cannot_compute(multi_turn: dict[str, Finding]) -> None:
    # No other stream decoded through any long gap: the synchronized share is undefined.
    cause = multi_turn["tail_cause"]
    assert cause.numbers["synchronized_gap_share"] is None
    for lang in ("en", "zh"):
        assert "NaN" not in cause.text[lang], cause.text[lang]
    assert "cannot be told: no other stream was decoding through them" in cause.text["en"]
    assert "100% of the 15 long gaps" in cause.text["en"]


def test_kv_need_of_a_conversation_is_its_measured_prompt(
    multi_turn: dict[str, Finding],
) -> None:
    # 200 new tokens a turn, but turns 2 and 3 carry the history (~440 prompt tokens on average).
    ceiling = multi_turn["kv_ceiling"]
    assert 400 < ceiling.numbers["tokens_per_request"] < 500
    assert "each later turn of a conversation carries the whole history" in ceiling.text["en"]
    assert "对话的后续每一轮都带着此前的全部历史" in ceiling.text["zh"]


def test_zh_says_a_change_that_is_a_fall_neutrally(multi_turn: dict[str, Finding]) -> None:
    # p50 ITL falls from C=2 to C=4 (-11%) and per-request speed falls too: no word for a rise.
    itl, speed = multi_turn["itl_tail"].text["zh"], multi_turn["long_input"].text["zh"]
    assert "p50 ITL 从 19.4 ms 变为 17.2 ms（-11%）" in itl
    assert "涨" not in itl
    assert "从 C=2 的 30.3 tok/s 变为 C=4 的 25.5 tok/s（-16%）" in speed
