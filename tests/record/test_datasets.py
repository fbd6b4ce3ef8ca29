"""Dataset files (ShareGPT, JSONL, Mooncake), varied lengths, and Mooncake's shared blocks."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest

from sweeper.errors import ConfigError
from sweeper.record.datasets import (
    DATASET_KINDS,
    DatasetItem,
    build_block_prompt,
    file_sha256,
    load_dataset,
    parse_dataset_spec,
    sample_lengths,
)

# A ShareGPT_V3-like snippet: ids, human/gpt turns, a conversation opened by the model (no
# human turn), one with only a question, and other dumps' user/assistant roles.
SHAREGPT = [
    {
        "id": "QWJhYvA_0",
        "conversations": [
            {"from": "human", "value": "Summarize the main ideas of Jeff Walker's Product Launch"},
            {"from": "gpt", "value": "Here are the main ideas of the Product Launch Formula:\n1."},
            {"from": "human", "value": "Summarize the main ideas of Brendon Burchard's book"},
            {"from": "gpt", "value": "Experts Academy is a program that teaches..."},
        ],
    },
    {
        "id": "i6IyJda_0",
        "conversations": [
            {"from": "gpt", "value": "How can I help you today?"},
            {"from": "gpt", "value": "Anything else?"},
        ],
    },
    {"id": "A5AbcES_0", "conversations": [{"from": "human", "value": "What is a monad?"}]},
    {
        "id": "hRPPgZT_0",
        "conversations": [
            {"from": "system", "value": "You are terse."},
            {"from": "user", "value": "Write a haiku about rust"},
            {"from": "assistant", "value": "Borrowed, not owned: / the checker keeps its watch"},
        ],
    },
    {"id": "empty_0", "conversations": []},
]


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def moon(ts: float, n_in: int, n_out: int, ids: list[int]) -> str:
    return json.dumps(
        {"timestamp": ts, "input_length": n_in, "output_length": n_out, "hash_ids": ids}
    )


# -- --dataset -----------------------------------------------------------------------------


def test_parse_dataset_spec(tmp_path: Path) -> None:
    file = write(tmp_path / "d.jsonl", ['{"prompt": "hi"}'])
    assert DATASET_KINDS == ("random", "sharegpt", "jsonl", "mooncake")
    assert parse_dataset_spec("random") == ("random", None)
    assert parse_dataset_spec(f"jsonl:{file}") == ("jsonl", file)
    assert parse_dataset_spec(f" mooncake:{file} ") == ("mooncake", file)
    for bad in ("sharegtp:x.json", "random:x", "x.json", ""):
        with pytest.raises(ConfigError, match=r"--dataset .*sharegpt:FILE\.json"):
            parse_dataset_spec(bad)
    with pytest.raises(ConfigError, match=r"--dataset 'jsonl:' names no file"):
        parse_dataset_spec("jsonl:")
    with pytest.raises(
        ConfigError,
        match=r"--dataset .*no file at .*missing\.json; pass an existing file, as one of random",
    ):
        parse_dataset_spec(f"sharegpt:{tmp_path / 'missing.json'}")
    with pytest.raises(
        ConfigError,
        match=r"--dataset .* is a folder; pass a file, as one of random, sharegpt:FILE\.json",
    ):
        parse_dataset_spec(f"mooncake:{tmp_path}")


# -- ShareGPT ------------------------------------------------------------------------------


def test_sharegpt_first_human_turn_and_its_answer(tmp_path: Path) -> None:
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(SHAREGPT, indent=2), encoding="utf-8")
    ds = load_dataset("sharegpt", path)
    assert ds.items == [
        DatasetItem(
            line=1,
            prompt="Summarize the main ideas of Jeff Walker's Product Launch",
            answer_text="Here are the main ideas of the Product Launch Formula:\n1.",
        ),
        DatasetItem(
            line=4,
            prompt="Write a haiku about rust",
            answer_text="Borrowed, not owned: / the checker keeps its watch",
        ),
    ]
    # Skipped entries are counted and each says why.
    assert ds.skipped == 3
    assert ds.skipped_why == [
        "entry 2 (id i6IyJda_0): no human turn",
        "entry 3 (id A5AbcES_0): no answer after the first human turn",
        "entry 5 (id empty_0): no human turn",
    ]
    summary = ds.skipped_summary(examples=2)
    assert summary is not None and summary.startswith(f"3 entries of {path} skipped (entry 2")
    assert "; 1 more)" in summary
    assert ds.sha256 == hashlib.sha256(path.read_bytes()).hexdigest() == file_sha256(path)
    assert ds.path == path and ds.kind == "sharegpt"


def test_sharegpt_errors_name_file_and_place(tmp_path: Path) -> None:
    path = tmp_path / "sg.json"
    path.write_text('[\n  {"id": "a", "conversations": []},\n  {"id": "b",,}\n]', "utf-8")
    with pytest.raises(ConfigError, match=rf"{path}:3:14: not JSON .*expected a JSON list"):
        load_dataset("sharegpt", path)
    path.write_text('{"conversations": []}', "utf-8")
    with pytest.raises(ConfigError, match=rf"{path}: the file is a JSON dict, not a list"):
        load_dataset("sharegpt", path)
    path.write_text(json.dumps([SHAREGPT[0], "hello"]), "utf-8")
    with pytest.raises(ConfigError, match=rf"{path}: entry 2: the string 'hello' is not an obj"):
        load_dataset("sharegpt", path)
    path.write_text(json.dumps([{"conversations": [{"from": "human", "value": 3}]}]), "utf-8")
    with pytest.raises(ConfigError, match=rf"{path}: entry 1: turn 1 is an object, not"):
        load_dataset("sharegpt", path)
    path.write_text(json.dumps([{"conversations": {"from": "human"}}]), "utf-8")
    with pytest.raises(ConfigError, match=rf'{path}: entry 1: "conversations" is an object'):
        load_dataset("sharegpt", path)


def test_sharegpt_reads_only_the_turns_it_uses(tmp_path: Path) -> None:
    human = {"from": "human", "value": "Hi"}
    entries = [
        {"conversations": [human, {"from": "gpt", "value": "Hello"}, {"from": 1}, "junk"]},
        {"conversations": [{"from": "human", "value": " "}, {"from": "gpt", "value": "What?"}]},
        {"conversations": [human, {"from": "gpt", "value": ""}]},
        {"conversations": [human, {"from": "human", "value": "Hello?"}]},
        {"id": 7, "items": []},
    ]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(entries), "utf-8")
    ds = load_dataset("sharegpt", path)
    assert ds.items == [DatasetItem(line=1, prompt="Hi", answer_text="Hello")]
    assert ds.skipped_why == [
        "entry 2: the first human turn is empty",
        "entry 3: the answer is empty (no output length to take)",
        "entry 4: no answer after the first human turn",
        "entry 5 (id 7): no conversations",
    ]


def test_sharegpt_with_nothing_usable_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(SHAREGPT[1:3]), "utf-8")
    with pytest.raises(ConfigError, match=r"no requests .*all 2 entries .* skipped .*no human"):
        load_dataset("sharegpt", path)
    path.write_text("[]", "utf-8")
    with pytest.raises(ConfigError, match=r"no requests in this sharegpt dataset \(the file is"):
        load_dataset("sharegpt", path)


# -- JSONL ---------------------------------------------------------------------------------


def test_jsonl_prompts_messages_and_output_len(tmp_path: Path) -> None:
    messages = [
        {"role": "system", "content": "Answer in one line."},
        {"role": "user", "content": "Why is the sky blue?"},
    ]
    path = write(
        tmp_path / "d.jsonl",
        [
            json.dumps({"prompt": "Tell me a story.", "output_len": 64, "id": "kept-aside"}),
            "",
            json.dumps({"messages": messages}),
            "   ",
            json.dumps({"prompt": "Short one."}),
        ],
    )
    ds = load_dataset("jsonl", path)
    assert ds.items == [
        DatasetItem(line=1, prompt="Tell me a story.", output_len=64),
        DatasetItem(line=3, messages=tuple(messages)),
        DatasetItem(line=5, prompt="Short one."),
    ]
    assert ds.skipped == 0 and ds.skipped_summary() is None
    assert ds.sha256 == file_sha256(path)


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('{"prompt": "a", ', r":2:\d+: not JSON \(Expecting"),
        ("[1, 2]", r":2: a list is not an object"),
        ('{"output_len": 3}', r':2: the object has neither of "prompt" and "messages"'),
        ('{"prompt": "a", "messages": []}', r':2: the object has both of "prompt"'),
        ('{"prompt": ""}', r":2: \"prompt\" is the string '', not a non-empty string"),
        ('{"prompt": "a", "output_len": 0}', r':2: "output_len" is the number 0, not an int'),
        ('{"prompt": "a", "output_len": true}', r':2: "output_len" is the boolean true'),
        ('{"prompt": "a", "output_len": 2.5}', r':2: "output_len" is the number 2.5'),
        ('{"messages": []}', r':2: "messages" is an empty list, not a non-empty list'),
        ('{"messages": [{"content": "x"}]}', r":2: message 1 is an object, not an object with"),
    ],
)
def test_jsonl_errors_name_file_line_and_form(tmp_path: Path, line: str, problem: str) -> None:
    path = write(tmp_path / "bad.jsonl", ['{"prompt": "fine"}', line])
    with pytest.raises(ConfigError, match=rf"{path}{problem}.*; expected one JSON object a line"):
        load_dataset("jsonl", path)


def test_jsonl_not_utf8_and_empty(tmp_path: Path) -> None:
    path = tmp_path / "bin.jsonl"
    path.write_bytes(b'{"prompt": "ok"}\n{"prompt": "\xff"}\n')
    with pytest.raises(ConfigError, match=rf"{path}:2: not UTF-8"):
        load_dataset("jsonl", path)
    path.write_text("\n\n", "utf-8")
    with pytest.raises(ConfigError, match=rf"{path}: no requests .* \(the file is empty\)"):
        load_dataset("jsonl", path)
    with pytest.raises(ConfigError, match="no file to load"):
        load_dataset("random", path)


# -- Mooncake ------------------------------------------------------------------------------


def test_mooncake_rows(tmp_path: Path) -> None:
    path = write(
        tmp_path / "trace.jsonl",
        [moon(0, 700, 52, [0, 1]), moon(0, 512, 10, [0]), "", moon(27482.5, 1025, 3, [0, 1, 2])],
    )
    ds = load_dataset("mooncake", path)
    assert ds.items == [
        DatasetItem(line=1, output_len=52, input_len=700, timestamp_ms=0.0, hash_ids=(0, 1)),
        DatasetItem(line=2, output_len=10, input_len=512, timestamp_ms=0.0, hash_ids=(0,)),
        DatasetItem(line=4, output_len=3, input_len=1025, timestamp_ms=27482.5, hash_ids=(0, 1, 2)),
    ]


def test_mooncake_timestamps_going_back_are_refused(tmp_path: Path) -> None:
    path = write(
        tmp_path / "trace.jsonl",
        [moon(10, 5, 5, [1]), moon(3000, 5, 5, [2]), moon(2999, 5, 5, [3])],
    )
    with pytest.raises(
        ConfigError, match=rf"{path}:3: timestamp 2999 is before line 2's 3000.*sort the trace"
    ):
        load_dataset("mooncake", path)


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('{"timestamp": 0, "input_length": 5}', r':2: no "output_length", "hash_ids"'),
        (moon(-1, 5, 5, [1]), r':2: "timestamp" is the number -1, not a number of ms >= 0'),
        (
            '{"timestamp": "0", "input_length": 1, "output_length": 1, "hash_ids": [1]}',
            r':2: "timestamp" is the string',
        ),
        (moon(1, 0, 5, [1]), r':2: "input_length" is the number 0, not an integer >= 1'),
        (moon(1, 5, 1.5, [1]), r':2: "output_length" is the number 1.5'),
        (moon(1, 5, 5, ["a"]), r':2: "hash_ids" is a list, not a list of integers'),
        (
            moon(1, 1025, 5, [1, 2]),
            r':2: "input_length" 1025 is more than 2 hash ids of 512 .*1024',
        ),
        (moon(1, 1, 5, []), r':2: "input_length" 1 is more than 0 hash ids'),
        ("3", r":2: the number 3 is not an object"),
    ],
)
def test_mooncake_errors_name_file_line_and_form(tmp_path: Path, line: str, problem: str) -> None:
    path = write(tmp_path / "trace.jsonl", [moon(0, 5, 5, [9]), line])
    with pytest.raises(ConfigError, match=rf"{path}{problem}.*; expected one JSON object a line"):
        load_dataset("mooncake", path)


# -- Varied lengths ------------------------------------------------------------------------


def test_sample_lengths_bounds_and_determinism() -> None:
    lengths = sample_lengths(100, 0.5, 2000, random.Random(7))
    assert min(lengths) == 50 and max(lengths) == 150
    assert lengths == sample_lengths(100, 0.5, 2000, random.Random(7))
    assert lengths != sample_lengths(100, 0.5, 2000, random.Random(8))
    assert sample_lengths(100, 0, 5, random.Random(0)) == [100] * 5
    # Never below one token, however wide the range around a short centre.
    assert set(sample_lengths(1, 0.99, 200, random.Random(0))) == {1, 2}
    assert sample_lengths(10, 0.5, 0, random.Random(0)) == []
    for bad in (1, 1.5, -0.1, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match=r"--output-len-range .* outside \[0, 1\)"):
            sample_lengths(100, bad, 3, random.Random(0), flag="--output-len-range")
    with pytest.raises(ConfigError, match="--input-len-range needs a centre"):
        sample_lengths(0, 0.5, 3, random.Random(0))


# -- Mooncake blocks -----------------------------------------------------------------------


async def count_words(text: str) -> int:
    return len(text.split())


async def count_double(text: str) -> int:
    return 2 * len(text.split())


async def count_chat(text: str) -> int:
    """A chat template's 3 tokens, and words with digits (the blocks' first) as three, as a
    BPE splits numbers."""
    return 3 + sum(3 if any(c.isdigit() for c in w) else 1 for w in text.split())


def first_difference(a: str, b: str) -> tuple[int, str, str]:
    """The index of the first word where a and b differ, and the two words."""
    wa, wb = a.split(), b.split()
    i = next(i for i, (x, y) in enumerate(zip(wa, wb, strict=False)) if x != y)
    return i, wa[i], wb[i]


@pytest.mark.parametrize("counter", [count_words, count_double, count_chat])
async def test_block_prompts_are_exact_and_share_exactly_their_blocks(counter) -> None:
    cache: dict = {}
    block = 16
    a, exact_a = await build_block_prompt([1, 2, 3], 40, counter, block_tokens=block, cache=cache)
    b, exact_b = await build_block_prompt([1, 2, 4], 44, counter, block_tokens=block, cache=cache)
    c, exact_c = await build_block_prompt([5, 2, 3], 40, counter, block_tokens=block, cache=cache)
    assert exact_a and exact_b and exact_c
    assert await counter(a) == 40 and await counter(b) == 44 and await counter(c) == 40
    # a and b share blocks 1 and 2 and part ways where block 3 opens (its word names the id).
    at, word_a, word_b = first_difference(a, b)
    assert word_a.endswith("3") and word_b.endswith("4")
    assert at > 0 and a.split()[at - 1] == b.split()[at - 1]
    # The first two blocks, cut where a prompt of two blocks ends, open the three-block ones.
    two, exact = await build_block_prompt([1, 2], 2 * block, counter, block_tokens=block)
    assert exact and a.startswith(two) and b.startswith(two)
    # c's first id differs: nothing shared, though it has a's later ids.
    assert first_difference(a, c)[0] == 0
    # The same ids give the same text, cached or not; another seed, another text.
    again, _ = await build_block_prompt([1, 2, 3], 40, counter, block_tokens=block)
    assert again == a
    other, _ = await build_block_prompt([1, 2, 3], 40, counter, block_tokens=block, seed=1)
    assert other.split()[1:4] != a.split()[1:4]


async def test_block_prompt_first_block_makes_room_for_the_template() -> None:
    # With 3 template tokens, the first block holds 13 of the 16 and the later ones 16.
    text, exact = await build_block_prompt([1, 2], 32, count_chat, block_tokens=16)
    one, _ = await build_block_prompt([1], 16, count_chat, block_tokens=16)
    assert exact and text.startswith(one + " ") and await count_chat(one) == 16
    assert await count_chat(text[len(one) :]) == 16 + 3


async def test_block_prompt_cut_last_block_is_a_prefix_of_the_full_one() -> None:
    full, _ = await build_block_prompt([7, 8], 32, count_words, block_tokens=16)
    cut, exact = await build_block_prompt([7, 8], 20, count_words, block_tokens=16)
    assert exact and full.startswith(cut) and len(cut.split()) == 20
    # More ids than the length needs: the extra blocks are simply empty.
    short, exact = await build_block_prompt([7, 8, 9], 10, count_words, block_tokens=16)
    assert exact and cut.startswith(short)


async def test_block_prompt_reuses_its_cache() -> None:
    calls = 0

    async def counting(text: str) -> int:
        nonlocal calls
        calls += 1
        return len(text.split())

    cache: dict = {}
    await build_block_prompt(list(range(10)), 160, counting, block_tokens=16, cache=cache)
    first = calls
    calls = 0
    _, exact = await build_block_prompt(
        list(range(10)), 160, counting, block_tokens=16, cache=cache
    )
    assert exact and calls == 1 < first  # only the final whole-prompt check


async def test_block_prompt_not_exact_when_it_cannot_be() -> None:
    # Two tokens a word cannot make an odd count: the closest under it, said to be inexact.
    text, exact = await build_block_prompt([1, 2], 31, count_double, block_tokens=16)
    assert not exact and await count_double(text) == 30
    # No counter: one word a token, never called exact.
    text, exact = await build_block_prompt([1, 2], 20, None, block_tokens=16)
    assert not exact and len(text.split()) == 20
    assert text.startswith((await build_block_prompt([1], 16, None, block_tokens=16))[0])


async def test_block_prompt_never_empty() -> None:
    # One token asked, three taken by the template: one word, said to be inexact.
    text, exact = await build_block_prompt([4], 1, count_chat, block_tokens=16)
    assert text == "people4" and not exact


async def test_block_prompt_refuses_impossible_lengths() -> None:
    with pytest.raises(ConfigError, match="more than 2 hash ids of 16 tokens hold"):
        await build_block_prompt([1, 2], 33, count_words, block_tokens=16)
    with pytest.raises(ConfigError, match="at least 1 token"):
        await build_block_prompt([1], 0, count_words, block_tokens=16)
