"""The workload of a sweep: concurrency levels, request counts, and prompts of exact length.

Prompts are deterministic (seeded) English-like text. Each request's prompt starts with a
prefix of its own, so no two requests share a cached prefix (the server's prefix cache would
otherwise skip their prefill and flatter TTFT), unless ``shared_prefix`` is asked for.

Exact length: a :class:`TokenCounter` (the server's ``/tokenize``, or a tokenizer the user
named) counts a candidate prompt's tokens as the server will see them, and
:func:`fit_prompt` adds or removes words until the count is exactly the target. Without a
counter the prompt is one word per token, approximately, and the recorder says so.
"""

from __future__ import annotations

import random
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sweeper.errors import ConfigError
from sweeper.i18n import level_label
from sweeper.schema import Workload

TokenCounter = Callable[[str], Awaitable[int]]
"""Counts the prompt tokens a request with this text would have (template and BOS included)."""

DEFAULT_LEVELS = (1, 2, 4, 8, 16, 32, 64)
DEFAULT_REQUESTS_FACTOR = 4  # measured requests per level: this many per stream...
MIN_REQUESTS_PER_LEVEL = 8  # ...but never fewer than this
# One client reaches one server address over at most 65,535 source ports: C streams are C
# connections, so no level can run more (and 20-digit levels broke the summary's integers).
MAX_CONCURRENCY = 65_535
MAX_REQUESTS_PER_LEVEL = 10_000_000  # counts far past any sweep, well inside every integer type
PREFIX_WORDS = 2  # words of the per-request unique prefix
MAX_FIT_ROUNDS = 12  # tokenize calls allowed per prompt before giving up on exactness

_WORDS = (
    "time", "year", "people", "way", "day", "man", "thing", "woman", "life", "child", "world",
    "school", "state", "family", "student", "group", "country", "problem", "hand", "part",
    "place", "case", "week", "company", "system", "program", "question", "work", "government",
    "number", "night", "point", "home", "water", "room", "mother", "area", "money", "story",
    "fact", "month", "lot", "right", "study", "book", "eye", "job", "word", "business", "issue",
    "side", "kind", "head", "house", "service", "friend", "father", "power", "hour", "game",
    "line", "end", "member", "law", "car", "city", "community", "name", "president", "team",
    "minute", "idea", "kid", "body", "information", "back", "parent", "face", "others", "level",
    "office", "door", "health", "person", "art", "war", "history", "party", "result", "change",
    "morning", "reason", "research", "girl", "guy", "moment", "air", "teacher", "force",
    "education", "foot", "boy", "age", "policy", "music", "market", "sense", "nation", "plan",
    "college", "interest", "death", "experience", "effect", "class", "control", "care", "field",
    "development", "role", "effort", "rate", "heart", "drug", "show", "leader", "light", "voice",
    "wife", "police", "mind", "price", "report", "decision", "son", "view", "relationship",
    "town", "road",
)  # fmt: skip


def parse_levels(text: str) -> list[int]:
    """``"1,2,4,8"`` -> ``[1, 2, 4, 8]``; each a positive integer, no repeats."""
    levels: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if not part.isdigit() or int(part) < 1:
            raise ConfigError(
                f"concurrency level {part!r} is not a positive integer "
                "(e.g. --concurrency 1,2,4,8,16)"
            )
        if int(part) > MAX_CONCURRENCY:
            raise ConfigError(
                f"concurrency level {part} is above the most a recorder can run, "
                f"{MAX_CONCURRENCY:,} (one connection per stream, one source port each)"
            )
        if int(part) in levels:
            raise ConfigError(f"concurrency level {part} is listed twice in {text!r}")
        levels.append(int(part))
    if not levels:
        raise ConfigError(f"no concurrency levels in {text!r} (e.g. --concurrency 1,2,4,8,16)")
    return levels


@dataclass(frozen=True)
class RequestCount:
    """Measured requests per level: a fixed number, or ``factor`` x the level (at least
    :data:`MIN_REQUESTS_PER_LEVEL`)."""

    fixed: int | None = None
    factor: int = DEFAULT_REQUESTS_FACTOR

    @classmethod
    def parse(cls, text: str) -> RequestCount:
        text = text.strip().lower()
        match = re.fullmatch(r"(\d+)x", text)
        number = int(match.group(1)) if match else int(text) if text.isdigit() else 0
        if number > MAX_REQUESTS_PER_LEVEL:
            raise ConfigError(
                f"--requests-per-level {text!r} is above {MAX_REQUESTS_PER_LEVEL:,} requests"
            )
        if match and number >= 1:
            return cls(fixed=None, factor=number)
        if text.isdigit() and number >= 1:
            return cls(fixed=number)
        raise ConfigError(
            f"--requests-per-level {text!r} is neither a count (e.g. 100) nor a multiple of the "
            "level (e.g. 4x)"
        )

    def for_level(self, concurrency: int) -> int:
        if self.fixed is not None:
            return self.fixed
        return max(self.factor * concurrency, MIN_REQUESTS_PER_LEVEL)

    def __str__(self) -> str:
        return str(self.fixed) if self.fixed is not None else f"{self.factor}x"


def short_levels(counts: dict[int, int]) -> str | None:
    """The levels that plan fewer measured requests than streams, as ``C=16 (8 requests)``, or
    None. Fewer than C requests cannot be C in flight at once: such a level would be labelled
    with a concurrency it never reached."""
    short = sorted((c, n) for c, n in counts.items() if n < c)
    if not short:
        return None
    return ", ".join(f"C={c} ({n} requests)" for c, n in short)


def check_request_counts(count: RequestCount, levels: list[int]) -> None:
    """Refuse ``--requests-per-level`` below a level: ConfigError naming the option, the levels
    short of requests and the minimum (the largest of them)."""
    counts = {c: count.for_level(c) for c in levels}
    short = short_levels(counts)
    if short is None:
        return
    need = max(c for c, n in counts.items() if n < c)
    raise ConfigError(
        f"--requests-per-level {count} is fewer measured requests than streams at {short}: a "
        f"level of C streams needs at least C, or it never runs C at once while labelled C; "
        f"pass --requests-per-level {need} or more, or a multiple of the level such as 4x"
    )


def request_id(level: int, index: int, *, open_loop: bool = False) -> str:
    """Stable ids, so a resumed run knows which requests it already has: ``c{C}-{index}`` at a
    concurrency level, ``r{key}-{index}`` at a rate level."""
    return f"{'r' if open_loop else 'c'}{level}-{index:05d}"


def level_name(workload: Workload, key: int, *, long: bool = False) -> str:
    """A level as the recorder names it: ``C=4`` / ``2 req/s`` / ``all at once`` (short), or
    ``concurrency 4`` / ``rate level 2 (2 req/s)`` (long, in warnings)."""
    rate = workload.offered_rate(key)
    if not long:
        return level_label(key, rate, "en")
    if rate is None:
        return f"concurrency {key}"
    return f"rate level {key} ({level_label(key, rate, 'en')})"


class PromptBuilder:
    """Seeded prompts; each request's text is a function of (seed, level, index) alone."""

    def __init__(
        self,
        input_len: int,
        *,
        seed: int = 0,
        counter: TokenCounter | None = None,
        shared_prefix: bool = False,
        max_len: int | None = None,
    ):
        if input_len < 1:
            raise ConfigError(f"--input-len {input_len} must be at least 1 token")
        self.input_len = input_len
        self.seed = seed
        self.counter = counter
        self.shared_prefix = shared_prefix
        rng = random.Random(f"sweeper-body-{seed}")
        # One body for every request; words enough for any fit.
        self._body = [rng.choice(_WORDS) for _ in range(max(input_len, max_len or 0) * 2 + 64)]
        self._fitted_words: int | None = None
        self._fitted_target = 0
        self.inexact = 0  # prompts that could not be fitted exactly

    def prefix(self, concurrency: int, index: int) -> list[str]:
        if self.shared_prefix:
            return []
        rng = random.Random(f"sweeper-prefix-{self.seed}-{concurrency}-{index}")
        return [f"{rng.choice(_WORDS)}{rng.randrange(10_000)}" for _ in range(PREFIX_WORDS)]

    def _text(self, prefix: list[str], words: int) -> str:
        return " ".join(prefix + self._body[: max(words, 0)])

    async def build(self, concurrency: int, index: int, *, target: int | None = None) -> str:
        """The prompt of request ``index`` at a level: ``target`` tokens (default: input_len)."""
        target = target or self.input_len
        prefix = self.prefix(concurrency, index)
        if len(self._body) < target * 2 + 64:  # a longer prompt than any before: more words
            rng = random.Random(f"sweeper-body-{self.seed}-{len(self._body)}")
            self._body += [rng.choice(_WORDS) for _ in range(target * 2 + 64 - len(self._body))]
        if self.counter is None:
            return self._text(prefix, target - len(prefix))
        # The last fit's words per token is the best first guess for this one.
        start = target
        if self._fitted_words is not None and self._fitted_target:
            start = round(self._fitted_words * target / self._fitted_target)
        text, words, exact = await fit_prompt(
            self.counter, lambda n: self._text(prefix, n), target, start=start,
            limit=len(self._body),
        )  # fmt: skip
        self._fitted_words, self._fitted_target = words, target
        if not exact:
            self.inexact += 1
        return text


def length_bounds(center: int, ratio: float) -> tuple[int, int]:
    """The lengths ``--input-len-range R`` draws from: [round(L(1-R)), round(L(1+R))], >= 1."""
    low = max(1, round(center * (1 - ratio)))
    return low, max(low, round(center * (1 + ratio)))


async def fit_prompt(
    counter: TokenCounter,
    make: Callable[[int], str],
    target: int,
    *,
    start: int,
    limit: int,
) -> tuple[str, int, bool]:
    """Find the word count ``n`` with ``counter(make(n)) == target``: step in proportion to
    the tokens per word seen so far (any tokenizer) and close in from both sides. Returns the text, n,
    and whether it is exact; when no n is exact (words merging at a boundary), the longest text
    under the target."""
    below: int | None = None  # largest n counted under the target
    above: int | None = None  # smallest n counted over it
    best: tuple[str, int] | None = None
    n = min(max(start, 0), limit)
    for _ in range(MAX_FIT_ROUNDS):
        text = make(n)
        count = await counter(text)
        if count == target:
            return text, n, True
        if count < target:
            below = n
            best = (text, n)
        else:
            above = n
        if below is not None and above is not None and above - below <= 1:
            break
        # Proportional step: a tokenizer may spend several tokens on a word, or merge words.
        guess = round(n * target / count) if n > 0 and count > 0 else n + (target - count)
        if below is not None:
            guess = max(guess, below + 1)
        if above is not None:
            guess = min(guess, above - 1)
        guess = min(max(guess, 0), limit)
        if guess == n:
            break
        n = guess
    if best is None:
        return make(0), 0, False
    return best[0], best[1], False


def completion_body(
    model: str,
    prompt: str,
    *,
    endpoint: str,
    output_len: int,
    ignore_eos: bool,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON body of one streamed request. ``stream_options`` asks for the final usage and
    for running usage on every chunk (per-chunk token counts)."""
    body: dict[str, Any] = {"model": model, "max_tokens": output_len, "stream": True}
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    if ignore_eos:
        body["ignore_eos"] = True
        body["min_tokens"] = output_len
    if extra:
        body.update(extra)
    return body
