"""Prompts from files: ShareGPT conversations, JSONL prompts, and Mooncake traces to replay.

``--dataset`` names where prompts come from: ``random`` (the seeded synthetic prompts of
:mod:`sweeper.record.workload`), ``sharegpt:FILE.json``, ``jsonl:FILE`` or ``mooncake:FILE``.
:func:`load_dataset` reads a file into :class:`DatasetItem` rows; a file that does not parse is
a :class:`~sweeper.errors.ConfigError` naming the file, the line (for a JSON list, the entry)
and the form expected. Entries that parse but cannot be a request (a ShareGPT conversation
with no human turn) are skipped, counted and said, never dropped silently.

Mooncake traces carry no text, only lengths and ``hash_ids``: ids of 512-token prefix blocks,
where two requests with the same id at a position share everything up to the end of that
block. :func:`build_block_prompt` turns them into text so that requests share exactly the
blocks their ids share, which is what exercises the server's prefix cache as the trace did.

:func:`sample_lengths` gives the varied lengths of ``--input-len-range`` /
``--output-len-range`` (uniform around the centre, as vLLM's random range ratio).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from sweeper.errors import ConfigError
from sweeper.record.workload import TokenCounter, fit_prompt

DATASET_KINDS = ("random", "sharegpt", "jsonl", "mooncake")
DATASET_FORMS = "random, sharegpt:FILE.json, jsonl:FILE.jsonl or mooncake:FILE.jsonl"
MOONCAKE_BLOCK_TOKENS = 512  # tokens per hash id in Mooncake's traces

# ShareGPT's "from" values. The real ShareGPT_V3 file says human/gpt; other dumps say
# user/assistant, and a few conversations came from other chatbots.
HUMAN_ROLES = frozenset({"human", "user"})
ANSWER_ROLES = frozenset({"gpt", "assistant", "chatgpt", "bard", "bing", "model"})

JSONL_FORM = (
    'one JSON object a line: {"prompt": "..."} or {"messages": [{"role": "user", '
    '"content": "..."}]}, optionally with "output_len": 128'
)
MOONCAKE_FORM = (
    'one JSON object a line: {"timestamp": 0, "input_length": 700, "output_length": 52, '
    '"hash_ids": [0, 1]} (timestamp in ms, never going back; input_length at most 512 tokens '
    "per hash id)"
)
SHAREGPT_FORM = (
    'a JSON list of {"id": "...", "conversations": [{"from": "human", "value": "..."}, '
    '{"from": "gpt", "value": "..."}]}'
)

# Words of the synthetic block texts (Mooncake replay): common words that are one token each
# in the usual vocabularies (and in the test models'), so a block's length can be set to the
# token. The same kind of words as workload's prompts.
BLOCK_WORDS = (
    "time", "year", "people", "way", "day", "man", "thing", "life", "child", "world", "school",
    "state", "family", "group", "country", "problem", "hand", "part", "place", "case", "week",
    "company", "system", "program", "question", "work", "number", "night", "point", "home",
    "water", "room", "mother", "area", "money", "story", "fact", "month", "right", "study",
    "book", "eye", "job", "word", "business", "issue", "side", "kind", "head", "house",
    "service", "friend", "father", "power", "hour", "game", "line", "end", "member", "law",
    "car", "city", "name", "team",
)  # fmt: skip


@dataclass(frozen=True)
class DatasetItem:
    """One request's worth of a dataset file; the fields its format does not have are None."""

    line: int  # 1-based line (JSONL) or 1-based entry of the JSON list (ShareGPT)
    prompt: str | None = None
    messages: tuple[dict[str, Any], ...] | None = None  # chat messages as given (role, content)
    answer_text: str | None = None  # ShareGPT: the answer that follows the first human turn
    output_len: int | None = None  # jsonl output_len, mooncake output_length
    input_len: int | None = None  # mooncake input_length
    timestamp_ms: float | None = None  # mooncake timestamp
    hash_ids: tuple[int, ...] = ()  # mooncake prefix blocks


@dataclass
class Dataset:
    """A loaded dataset file: the usable items, in file order, and what was skipped and why."""

    kind: str
    path: Path
    items: list[DatasetItem]
    sha256: str
    skipped_why: list[str] = field(default_factory=list)  # one line per skipped entry

    @property
    def skipped(self) -> int:
        return len(self.skipped_why)

    def skipped_summary(self, examples: int = 3) -> str | None:
        """``"12 entries of FILE skipped (entry 4: no human turn; ...)"``, or None."""
        if not self.skipped_why:
            return None
        shown = "; ".join(self.skipped_why[:examples])
        more = f"; {self.skipped - examples} more" if self.skipped > examples else ""
        noun = "entry" if self.skipped == 1 else "entries"
        return f"{self.skipped} {noun} of {self.path} skipped ({shown}{more})"


def parse_dataset_spec(text: str) -> tuple[str, Path | None]:
    """``"random"`` -> ``("random", None)``; ``"sharegpt:FILE.json"`` -> ``("sharegpt", Path)``.
    The file must exist; anything else is a ConfigError naming --dataset and the forms."""
    text = text.strip()
    if text == "random":
        return "random", None
    kind, sep, rest = text.partition(":")
    if not sep or kind not in DATASET_KINDS or kind == "random":
        raise ConfigError(
            f"--dataset {text!r} is not a dataset sweeper reads; pass one of {DATASET_FORMS}"
        )
    if not rest.strip():
        raise ConfigError(f"--dataset {text!r} names no file; pass {kind}:FILE")
    path = Path(rest.strip()).expanduser()
    if path.is_dir():
        raise ConfigError(
            f"--dataset {text!r}: {path} is a folder; pass a file, as one of {DATASET_FORMS}"
        )
    if not path.is_file():
        raise ConfigError(
            f"--dataset {text!r}: no file at {path}; pass an existing file, as one of "
            f"{DATASET_FORMS}"
        )
    return kind, path


def file_sha256(path: Path) -> str:
    """The file's SHA-256 (hex), read in chunks: a trace set says which file it was fed."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def load_dataset(kind: str, path: Path) -> Dataset:
    """Read a dataset file of ``kind`` (one of :data:`DATASET_KINDS` but random)."""
    path = Path(path)
    if kind == "sharegpt":
        dataset = _load_sharegpt(path)
    elif kind in ("jsonl", "mooncake"):
        dataset = _load_lines(kind, path)
    else:
        raise ConfigError(
            f"--dataset kind {kind!r} has no file to load; pass one of {DATASET_FORMS}"
        )
    if not dataset.items:
        why = dataset.skipped_summary()
        raise ConfigError(
            f"{path}: no requests in this {kind} dataset"
            + (f": all {why}" if why else " (the file is empty)")
        )
    return dataset


def _error(path: Path, where: str, problem: str, form: str) -> ConfigError:
    return ConfigError(f"{path}:{where}: {problem}; expected {form}")


# -- ShareGPT ------------------------------------------------------------------------------


def _load_sharegpt(path: Path) -> Dataset:
    # The real file is one JSON list (~650 MB); json has no streaming reader for that.
    raw = _read_bytes(path)
    sha = hashlib.sha256(raw).hexdigest()
    try:
        data = json.loads(raw)
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text ({e}); expected {SHAREGPT_FORM}") from None
    except json.JSONDecodeError as e:
        raise _error(path, f"{e.lineno}:{e.colno}", f"not JSON ({e.msg})", SHAREGPT_FORM) from None
    if not isinstance(data, list):
        raise ConfigError(
            f"{path}: the file is a JSON {type(data).__name__}, not a list; expected "
            f"{SHAREGPT_FORM}"
        )
    items: list[DatasetItem] = []
    skipped: list[str] = []
    for number, entry in enumerate(data, start=1):
        where = f" entry {number}"
        if not isinstance(entry, dict):
            raise _error(path, where, f"{_kind(entry)} is not an object", SHAREGPT_FORM)
        label = f"entry {number}" + (f" (id {entry['id']})" if "id" in entry else "")
        turns = entry.get("conversations")
        if turns is None:
            skipped.append(f"{label}: no conversations")
            continue
        if not isinstance(turns, list):
            raise _error(path, where, f'"conversations" is {_kind(turns)}', SHAREGPT_FORM)
        pair = _first_exchange(path, where, turns)
        if isinstance(pair, str):
            skipped.append(f"{label}: {pair}")
            continue
        prompt, answer = pair
        items.append(DatasetItem(line=number, prompt=prompt, answer_text=answer))
    return Dataset("sharegpt", path, items, sha, skipped)


def _first_exchange(path: Path, where: str, turns: list[Any]) -> tuple[str, str] | str:
    """The first human turn and the answer right after it, or why there is none. Only the
    turns read are checked: a malformed one deep in a long conversation is never used."""
    human: str | None = None
    for t, turn in enumerate(turns, start=1):
        if not (
            isinstance(turn, dict)
            and isinstance(turn.get("from"), str)
            and isinstance(turn.get("value"), str)
        ):
            raise _error(
                path,
                where,
                f"turn {t} is {_kind(turn)}, not an object with string from and value",
                SHAREGPT_FORM,
            )
        role, value = turn["from"].lower(), turn["value"]
        if human is None:
            if role in HUMAN_ROLES:
                human = value
            continue
        # vLLM's loader wants an answer too: its length is the request's output length.
        if role not in ANSWER_ROLES:
            break
        if not human.strip():
            return "the first human turn is empty"
        if not value.strip():
            return "the answer is empty (no output length to take)"
        return human, value
    return "no human turn" if human is None else "no answer after the first human turn"


# -- JSONL and Mooncake --------------------------------------------------------------------


def _load_lines(kind: str, path: Path) -> Dataset:
    form = JSONL_FORM if kind == "jsonl" else MOONCAKE_FORM
    digest = hashlib.sha256()
    items: list[DatasetItem] = []
    last: tuple[int, float] | None = None  # mooncake: (line, timestamp) of the previous item
    for number, obj in _json_lines(path, form, digest):
        if kind == "jsonl":
            items.append(_jsonl_item(path, number, obj))
            continue
        item = _mooncake_item(path, number, obj)
        assert item.timestamp_ms is not None
        if last is not None and item.timestamp_ms < last[1]:
            raise _error(
                path,
                str(number),
                f"timestamp {_num(item.timestamp_ms)} is before line {last[0]}'s "
                f"{_num(last[1])}: a trace replays in time order",
                "timestamps that never go back (sort the trace by timestamp)",
            )
        last = (number, item.timestamp_ms)
        items.append(item)
    return Dataset(kind, path, items, digest.hexdigest())


def _json_lines(path: Path, form: str, digest: Any) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line, streamed; hashes every byte read."""
    with _open(path) as f:
        for number, raw in enumerate(f, start=1):
            digest.update(raw)
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise _error(path, str(number), f"not UTF-8 text ({e.reason})", form) from None
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as e:
                raise _error(path, f"{number}:{e.colno}", f"not JSON ({e.msg})", form) from None
            if not isinstance(obj, dict):
                raise _error(path, str(number), f"{_kind(obj)} is not an object", form)
            yield number, obj


def _jsonl_item(path: Path, number: int, obj: dict[str, Any]) -> DatasetItem:
    where = str(number)
    prompt, messages = obj.get("prompt"), obj.get("messages")
    if (prompt is None) == (messages is None):
        has = "both" if prompt is not None else "neither"
        raise _error(path, where, f'the object has {has} of "prompt" and "messages"', JSONL_FORM)
    if prompt is not None and not (isinstance(prompt, str) and prompt.strip()):
        raise _error(
            path, where, f'"prompt" is {_kind(prompt)}, not a non-empty string', JSONL_FORM
        )
    chat: tuple[dict[str, Any], ...] | None = None
    if messages is not None:
        if not isinstance(messages, list) or not messages:
            raise _error(
                path, where, f'"messages" is {_kind(messages)}, not a non-empty list', JSONL_FORM
            )
        for m, message in enumerate(messages, start=1):
            ok = (
                isinstance(message, dict)
                and isinstance(message.get("role"), str)
                and isinstance(message.get("content"), str | list)
            )
            if not ok:
                raise _error(
                    path,
                    where,
                    f"message {m} is {_kind(message)}, not an object with a string role and "
                    "a content",
                    JSONL_FORM,
                )
        chat = tuple(dict(message) for message in messages)
    output_len = obj.get("output_len")
    if output_len is not None and not _positive_int(output_len):
        raise _error(
            path, where, f'"output_len" is {_kind(output_len)}, not an integer >= 1', JSONL_FORM
        )
    return DatasetItem(line=number, prompt=prompt, messages=chat, output_len=output_len)


def _mooncake_item(path: Path, number: int, obj: dict[str, Any]) -> DatasetItem:
    where = str(number)
    missing = [
        k for k in ("timestamp", "input_length", "output_length", "hash_ids") if k not in obj
    ]
    if missing:
        raise _error(path, where, "no " + ", ".join(f'"{k}"' for k in missing), MOONCAKE_FORM)
    timestamp = obj["timestamp"]
    ok = isinstance(timestamp, int | float) and not isinstance(timestamp, bool)
    if not ok or not math.isfinite(timestamp) or timestamp < 0:
        raise _error(
            path,
            where,
            f'"timestamp" is {_kind(timestamp)}, not a number of ms >= 0',
            MOONCAKE_FORM,
        )
    for key in ("input_length", "output_length"):
        if not _positive_int(obj[key]):
            raise _error(
                path, where, f'"{key}" is {_kind(obj[key])}, not an integer >= 1', MOONCAKE_FORM
            )
    hash_ids = obj["hash_ids"]
    if not isinstance(hash_ids, list) or not all(
        isinstance(h, int) and not isinstance(h, bool) for h in hash_ids
    ):
        raise _error(
            path, where, f'"hash_ids" is {_kind(hash_ids)}, not a list of integers', MOONCAKE_FORM
        )
    input_len = obj["input_length"]
    if input_len > MOONCAKE_BLOCK_TOKENS * len(hash_ids):
        raise _error(
            path,
            where,
            f'"input_length" {input_len} is more than {len(hash_ids)} hash ids of '
            f"{MOONCAKE_BLOCK_TOKENS} tokens hold ({MOONCAKE_BLOCK_TOKENS * len(hash_ids)})",
            MOONCAKE_FORM,
        )
    return DatasetItem(
        line=number,
        output_len=obj["output_length"],
        input_len=input_len,
        timestamp_ms=float(timestamp),
        hash_ids=tuple(hash_ids),
    )


def _open(path: Path) -> BinaryIO:
    try:
        return open(path, "rb")
    except OSError as e:
        raise ConfigError(f"{path}: cannot be read ({e.strerror})") from None


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise ConfigError(f"{path}: cannot be read ({e.strerror})") from None


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _kind(value: object) -> str:
    """A short description of a JSON value for an error: ``the string 'abc'``, ``a list``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {_num(value)}"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"the string {shown!r}"
    if isinstance(value, list):
        return "a list" if value else "an empty list"
    return "an object" if isinstance(value, dict) else type(value).__name__


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


# -- Varied lengths ------------------------------------------------------------------------


def sample_lengths(
    center: int, ratio: float, n: int, rng: random.Random, *, flag: str = "--input-len-range"
) -> list[int]:
    """``n`` integers uniform in ``[round(L(1-R)), round(L(1+R))]``, each at least 1;
    ``ratio`` 0 gives ``center`` every time (and draws nothing from ``rng``)."""
    if not (isinstance(ratio, int | float) and math.isfinite(ratio) and 0 <= ratio < 1):
        raise ConfigError(
            f"{flag} {ratio!r} is outside [0, 1): it is the fraction lengths vary either side "
            f"of the centre, e.g. {flag} 0.5 for lengths from half to 1.5 times it"
        )
    if center < 1:
        raise ConfigError(f"{flag} needs a centre length of at least 1 token, not {center}")
    if ratio == 0:
        return [center] * n
    low = max(1, round(center * (1 - ratio)))
    high = max(low, round(center * (1 + ratio)))
    return [rng.randint(low, high) for _ in range(n)]


# -- Mooncake blocks -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Block:
    words: tuple[str, ...]  # the block's text is " ".join(words[:fitted]); a cut, fewer words
    fitted: int


def _block_words(hash_id: int, seed: int, count: int) -> tuple[str, ...]:
    """The seeded words of one hash id's block. The first names the id, so no two blocks open
    alike, and every word after depends on the id too."""
    rng = random.Random(f"sweeper-block-{seed}-{hash_id}")
    first = f"{rng.choice(BLOCK_WORDS)}{hash_id}"
    return (first, *(rng.choice(BLOCK_WORDS) for _ in range(count - 1)))


def _join(*parts: str) -> str:
    return " ".join(p for p in parts if p)


async def _template_tokens(counter: TokenCounter, cache: dict[Any, Any]) -> int:
    """Tokens the counter adds to any text (chat template, BOS): one word counted alone and
    twice. Blocks are fitted alone, so each count carries them once."""
    key = ("template-tokens",)
    if key not in cache:
        one = await counter(BLOCK_WORDS[0])
        two = await counter(_join(BLOCK_WORDS[0], BLOCK_WORDS[0]))
        cache[key] = max(0, 2 * one - two)
    return int(cache[key])


async def build_block_prompt(
    hash_ids: list[int] | tuple[int, ...],
    input_len: int,
    counter: TokenCounter | None,
    *,
    block_tokens: int = MOONCAKE_BLOCK_TOKENS,
    seed: int = 0,
    cache: dict[Any, Any] | None = None,
) -> tuple[str, bool]:
    """A prompt of ``input_len`` tokens whose i-th block of ``block_tokens`` is the text of
    ``hash_ids[i]``: two requests that agree on their first j hash ids agree on the text of
    their first j blocks. The last block is cut to what is left of ``input_len`` (a prefix of
    that id's full block). Returns (text, exact): exact when the counter counts the whole
    prompt as ``input_len``. Without a counter, a word is taken for a token and exact is False.

    The counter's own tokens (chat template, BOS) are in every prompt; the first block makes
    room for them, so the later blocks line up with the server's view of the prompt (to within
    the template's tokens after the text). ``cache`` (any dict, kept across a replay) holds the
    fitted blocks' text: a trace reuses its ids heavily, and each block is fitted once. Build
    a replay's prompts before its schedule starts: a cold block costs a few counter calls.
    """
    if input_len < 1:
        raise ConfigError(
            f"a trace request's input length must be at least 1 token, not {input_len}"
        )
    if block_tokens < 1:
        raise ConfigError(f"blocks must be at least 1 token, not {block_tokens}")
    if input_len > block_tokens * len(hash_ids):
        raise ConfigError(
            f"input length {input_len} is more than {len(hash_ids)} hash ids of {block_tokens} "
            f"tokens hold ({block_tokens * len(hash_ids)})"
        )
    # A trace may list more ids than its length needs; the blocks past the length are empty.
    k = -(-input_len // block_tokens)
    ids = list(hash_ids[:k])
    rest = input_len - block_tokens * (k - 1)
    cache = {} if cache is None else cache
    room = block_tokens * 2 + 64  # words enough for any fit

    if counter is None:
        blocks = [" ".join(_block_words(h, seed, room)[:block_tokens]) for h in ids[:-1]]
        tail_words = _block_words(ids[-1], seed, room)[:rest]
        return _join(*blocks, " ".join(tail_words)), False

    template = await _template_tokens(counter, cache)

    async def fit(words: tuple[str, ...], target: int, first: bool, start: int) -> int:
        # A later block follows a space: counted with it, its first word splits as it will
        # in the prompt (byte-level BPEs fold the space into the word's token).
        lead = "" if first else " "
        _, n, _ = await fit_prompt(
            counter, lambda n: lead + " ".join(words[:n]), target, start=start, limit=len(words)
        )
        return n

    def hint_key(first: bool) -> tuple[Any, ...]:
        return ("fitted-words", seed, block_tokens, first)  # the last fit's words: a start

    async def whole_block(position: int, hash_id: int) -> str:
        # A hash id names a prefix, so it sits at one position; the key says which anyway.
        # Only the text is kept: a long trace has tens of thousands of ids.
        first = position == 0
        key = ("block", seed, block_tokens, hash_id, first)
        if key not in cache:
            words = _block_words(hash_id, seed, room)
            target = block_tokens if first else block_tokens + template
            n = await fit(words, target, first, cache.get(hint_key(first), block_tokens))
            cache[hint_key(first)] = n
            cache[key] = " ".join(words[:n])
        text: str = cache[key]
        return text

    head = _join(*[await whole_block(i, h) for i, h in enumerate(ids[:-1])])
    words = _block_words(ids[-1], seed, room)
    if rest == block_tokens:
        tail = await whole_block(k - 1, ids[-1])
    else:
        start = round(cache.get(hint_key(k == 1), block_tokens) * rest / block_tokens)
        n = await fit(words, rest + (template if k > 1 else 0), k == 1, start)
        tail = " ".join(words[:n])
    text = _join(head, tail)
    count = await counter(text)
    if count == input_len:
        return text, True
    # Words merging across a block boundary: refit the tail in place, counting the whole
    # prompt. Only the tail changes, so the blocks before it stay shared.
    text, _, exact = await fit_prompt(
        counter,
        lambda m: _join(head, " ".join(words[:m])),
        input_len,
        start=max(0, len(tail.split()) + input_len - count),
        limit=len(words),
    )
    if not text:
        # Shorter than the template itself: one word rather than an empty prompt.
        return words[0], False
    return text, exact
