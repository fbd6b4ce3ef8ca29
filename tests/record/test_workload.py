"""Levels, request counts, and prompts of exact length."""

from __future__ import annotations

import pytest

from sweeper.errors import ConfigError
from sweeper.record.workload import (
    MIN_REQUESTS_PER_LEVEL,
    PromptBuilder,
    RequestCount,
    completion_body,
    fit_prompt,
    parse_levels,
)


def test_parse_levels() -> None:
    assert parse_levels("1, 2,4,64") == [1, 2, 4, 64]
    for bad in ("0", "1,x", "", "2,2"):
        with pytest.raises(ConfigError):
            parse_levels(bad)


def test_request_count() -> None:
    assert RequestCount.parse("100").for_level(64) == 100
    assert RequestCount.parse("4x").for_level(16) == 64
    assert RequestCount.parse("4x").for_level(1) == MIN_REQUESTS_PER_LEVEL
    with pytest.raises(ConfigError, match=r"e\.g\. 4x"):
        RequestCount.parse("lots")


async def test_prompts_are_exact_deterministic_and_unique() -> None:
    # A counter that is not one-word-one-token: long words count double, plus 2 template tokens.
    calls = 0

    async def count(text: str) -> int:
        nonlocal calls
        calls += 1
        return 2 + sum(2 if len(w) > 7 else 1 for w in text.split())

    builder = PromptBuilder(300, seed=7, counter=count)
    prompts = [await builder.build(4, i) for i in range(20)]
    assert [await count(p) for p in prompts] == [300] * 20
    assert builder.inexact == 0
    assert calls < 20 * 6 + 20  # a few counts per prompt, not a search over every length
    assert len({p.split()[0] for p in prompts}) == 20  # a unique first word: no shared prefix
    again = PromptBuilder(300, seed=7, counter=count)
    assert await again.build(4, 3) == prompts[3]
    shared = PromptBuilder(300, seed=7, counter=count, shared_prefix=True)
    assert await shared.build(4, 1) == await shared.build(8, 2)


async def test_fit_prompt_reports_an_impossible_target() -> None:
    async def even(text: str) -> int:  # only even counts exist
        return 2 * len(text.split())

    text, words, exact = await fit_prompt(
        even, lambda n: " ".join(["w"] * n), 11, start=3, limit=100
    )
    assert not exact and words == 5 and await even(text) == 10


def test_completion_body_asks_for_exact_length_and_per_chunk_usage() -> None:
    body = completion_body("m", "hi", endpoint="chat", output_len=8, ignore_eos=True)
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert body["max_tokens"] == body["min_tokens"] == 8 and body["ignore_eos"] is True
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    plain = completion_body("m", "hi", endpoint="completions", output_len=8, ignore_eos=False)
    assert plain["prompt"] == "hi" and "ignore_eos" not in plain and "min_tokens" not in plain


async def test_fit_prompt_converges_when_words_cost_several_tokens() -> None:
    # A subword tokenizer on rare words: 3 tokens a word, plus a BOS token. Stepping by the
    # token difference alone overshoots and bounces; the proportional step lands in a few counts.
    calls = 0

    async def subword(text: str) -> int:
        nonlocal calls
        calls += 1
        return 1 + 3 * len(text.split())

    text, words, exact = await fit_prompt(
        subword, lambda n: " ".join(["rare"] * n), 1000, start=1000, limit=5000
    )
    assert exact and await subword(text) == 1000 and words == 333
    assert calls <= 6
