"""SSE parsing and chunk reading: bytes split anywhere, comments, keep-alives, [DONE], usage."""

from __future__ import annotations

import json
import re

import pytest

from sweeper.record.sse import ChunkReader, SSEParser, StreamFormatError, StreamServerError


def _events(parts: list[bytes], parser: SSEParser | None = None) -> list[str]:
    parser = parser or SSEParser()
    out: list[str] = []
    for part in parts:
        out.extend(e.data for e in parser.feed(part))
    out.extend(e.data for e in parser.close())
    return out


def _chunk(text: str, **extra: object) -> str:
    return json.dumps({"choices": [{"index": 0, "text": text, **extra}]}, ensure_ascii=False)


STREAM = (
    f"data: {_chunk('héllo')}\n\n"
    ": keep-alive\n\n"
    "\n\n"
    f"data: {_chunk(' 世界')}\r\n\r\n"
    f"data: {_chunk('!', finish_reason='length')}\r\r"
    'data: {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 3}}\n\n'
    "data: [DONE]\n\n"
).encode()


def test_whole_stream_in_one_read() -> None:
    events = _events([STREAM])
    assert len(events) == 5
    assert json.loads(events[0])["choices"][0]["text"] == "héllo"
    assert events[-1] == "[DONE]"


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 64])
def test_split_at_every_size_gives_the_same_events(size: int) -> None:
    # Splits fall inside lines, inside CRLF pairs and inside multi-byte UTF-8 characters.
    parts = [STREAM[i : i + size] for i in range(0, len(STREAM), size)]
    assert _events(parts) == _events([STREAM])


def test_multibyte_character_split_across_reads() -> None:
    data = f"data: {_chunk('世')}\n\n".encode()
    cut = data.index("世".encode()) + 1  # inside the 3-byte character
    events = _events([data[:cut], data[cut:]])
    assert json.loads(events[0])["choices"][0]["text"] == "世"


def test_comments_and_blank_lines_are_not_events() -> None:
    parser = SSEParser()
    assert parser.feed(b": ping\n\n\n\n: another\n\n") == []
    assert parser.comments == 2


def test_multi_line_data_joined_and_event_name_kept() -> None:
    parser = SSEParser()
    events = parser.feed(b"event: error\ndata: a\ndata: b\n\n")
    assert [(e.event, e.data) for e in events] == [("error", "a\nb")]


def test_stream_without_final_blank_line_still_yields_last_event() -> None:
    assert _events([b'data: {"a": 1}']) == ['{"a": 1}']


def test_cr_at_end_of_read_then_lf() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: x\r") == []
    assert [e.data for e in parser.feed(b"\n\r\n")] == ["x"]


# ---------------------------------------------------------------------------------------------
# chunk reading


def test_continuous_usage_counts_tokens_per_chunk_and_skips_role_chunk() -> None:
    reader = ChunkReader(endpoint="chat")
    role = {
        "choices": [{"delta": {"role": "assistant", "content": ""}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 0},
    }
    tok1 = {
        "choices": [{"delta": {"content": ""}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1},
    }
    tok3 = {
        "choices": [{"delta": {"content": "abc"}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 4},
    }
    fin = {
        "choices": [{"delta": {"content": "d"}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 5},
    }
    last = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 5}}
    counts = [reader.read(json.dumps(c)).tokens for c in (role, tok1, tok3, fin, last)]
    # An empty-text chunk that the usage says carried a token is a token.
    assert counts == [0, 1, 3, 1, 0]
    assert reader.finish_reason == "length"
    assert reader.usage == {"prompt_tokens": 5, "completion_tokens": 5}


def test_token_ids_count_tokens() -> None:
    reader = ChunkReader()
    assert reader.read(json.dumps({"choices": [{"text": "ab", "token_ids": [1, 2]}]})).tokens == 2


def test_without_per_chunk_counts_each_content_chunk_is_one_token_never_text_length() -> None:
    reader = ChunkReader(endpoint="completions")
    assert reader.read(_chunk("a long piece of text")).tokens == 1
    assert reader.read(_chunk("")).tokens == 1  # a special / partial-UTF-8 token
    # A finish chunk with empty text carries nothing; final usage arrives in it (llama.cpp).
    fin = {
        "choices": [{"text": "", "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 2, "completion_tokens": 2},
    }
    assert reader.read(json.dumps(fin)).tokens == 0
    assert reader.usage == {"prompt_tokens": 2, "completion_tokens": 2}


def test_chat_role_only_chunk_with_null_or_absent_content_is_not_a_token() -> None:
    for delta in (
        {"role": "assistant"},
        {"role": "assistant", "content": None},
        {"role": "assistant", "content": ""},
    ):
        reader = ChunkReader(endpoint="chat")
        assert reader.read(json.dumps({"choices": [{"delta": delta}]})).tokens == 0
        assert reader.read(json.dumps({"choices": [{"delta": {"content": "x"}}]})).tokens == 1


def test_usage_only_last_chunk() -> None:
    reader = ChunkReader()
    info = reader.read('{"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 9}}')
    assert info.tokens == 0 and reader.usage == {"prompt_tokens": 7, "completion_tokens": 9}


def test_malformed_and_error_chunks_raise() -> None:
    with pytest.raises(StreamFormatError, match="not JSON"):
        ChunkReader().read('{"choices": [')
    with pytest.raises(StreamFormatError, match="not a JSON object"):
        ChunkReader().read("[1, 2]")
    with pytest.raises(StreamServerError, match="out of memory"):
        ChunkReader().read('{"error": {"message": "out of memory", "code": 500}}')


@pytest.mark.parametrize(
    ("value", "shown"),
    [("NaN", "NaN"), ("Infinity", "Infinity"), ('"many"', '"many"'), ("-1", "-1"),
     ("2.5", "2.5"), ("true", "true")],
)  # fmt: skip
def test_usage_counts_that_are_not_counts_are_malformed(value: str, shown: str) -> None:
    reader = ChunkReader()
    chunk = f'{{"choices":[],"usage":{{"prompt_tokens":3,"completion_tokens":{value}}}}}'
    with pytest.raises(StreamFormatError, match=re.escape(f"usage.completion_tokens={shown}")):
        reader.read(chunk)
    assert reader.usage is None  # the bad usage is not kept


def test_usage_counts_whole_floats_and_nulls_are_fine() -> None:
    reader = ChunkReader()
    reader.read('{"choices":[],"usage":{"prompt_tokens":3.0,"completion_tokens":null}}')
    assert reader.usage == {"prompt_tokens": 3.0, "completion_tokens": None}
