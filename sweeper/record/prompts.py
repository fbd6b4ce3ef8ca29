"""What each request of a level sends, and when a rate level's requests are due.

A :class:`PromptSource` turns (level, index) into a :class:`~sweeper.record.client.RequestSpec`:

- ``random`` (the default): the seeded prompts of :class:`~sweeper.record.workload.PromptBuilder`,
  of ``--input-len`` tokens, or of each request's own length with ``--input-len-range`` (and
  ``--output-len-range``), drawn from the seed, the level and the index (a resumed level asks
  the same).
- ``sharegpt:FILE`` / ``jsonl:FILE``: the file's prompts (or chat messages), sent as written, in
  a seeded order; each level takes the next ones, so no level repeats an earlier level's prompt
  (its prefix would be in the server's cache) unless the file runs out. ShareGPT's output
  length is its answer's length in tokens unless ``--output-len`` was given.
- ``mooncake:FILE``: the trace's requests in order, their prompts built so that requests sharing
  a hash id share that 512-token block (:func:`~sweeper.record.datasets.build_block_prompt`), due
  at their timestamps divided by ``--trace-speedup``.
- multi-turn (``--sessions``): each turn's new user message; :func:`compose_turn` puts the
  conversation so far in front of it just before it is sent.
"""

from __future__ import annotations

import asyncio
import math
import random
from dataclasses import dataclass, field
from typing import Any

from sweeper.errors import ConfigError
from sweeper.record.client import RequestSpec
from sweeper.record.config import RecordConfig
from sweeper.record.datasets import (
    Dataset,
    DatasetItem,
    build_block_prompt,
    load_dataset,
    parse_dataset_spec,
    sample_lengths,
)
from sweeper.record.schedule import arrival_offsets, arrival_rng
from sweeper.record.workload import PromptBuilder, TokenCounter, completion_body, request_id
from sweeper.schema import Workload
from sweeper.units import NS_PER_MS

FALLBACK_OUTPUT_LEN = 256


def asked_lengths(workload: Workload, key: int, index: int) -> tuple[int | None, int | None]:
    """(prompt, output) tokens request ``index`` of level ``key`` asks for where lengths vary
    per request (``--input-len-range`` / ``--output-len-range``); None: the workload's own."""
    out: list[int | None] = []
    for what, center, ratio, flag in (
        ("in", workload.input_len, workload.input_len_range, "--input-len-range"),
        ("out", workload.output_len, workload.output_len_range, "--output-len-range"),
    ):
        if center is None or not ratio:
            out.append(None)
            continue
        rng = random.Random(f"sweeper-{what}-len-{workload.seed or 0}-{key}-{index}")
        out.append(sample_lengths(center, ratio, 1, rng, flag=flag)[0])
    return out[0], out[1]


def session_of(workload: Workload, index: int, warmup: int) -> tuple[int, int] | None:
    """(session, turn), both 1-based, of a level's request ``index``; None for a warm-up or
    without sessions. Requests are numbered session by session, turn by turn."""
    if not workload.sessions or index < warmup:
        return None
    turns = workload.turns or 1
    return (index - warmup) // turns + 1, (index - warmup) % turns + 1


@dataclass
class PromptSource:
    """Builds the specs of a run's levels (see the module docstring)."""

    workload: Workload
    endpoint: str
    model: str
    run_id: str
    builder: PromptBuilder
    counter: TokenCounter | None = None
    dataset: Dataset | None = None
    output_given: bool = False  # --output-len given: it wins over a dataset's lengths
    max_model_len: int | None = None  # the server's: dataset prompts that do not fit are left out
    inexact: int = 0  # replayed prompts not built to their exact length
    too_long: int = 0  # dataset items left out: prompt + output past max_model_len
    _order: list[int] = field(default_factory=list)
    _fitting: list[int] = field(default_factory=list)  # items that fit, in the seeded order
    _scanned: int = 0  # of _order
    _scan_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _counts: dict[str, int] = field(default_factory=dict)
    _blocks: dict[Any, Any] = field(default_factory=dict)
    _overhead: int | None = None

    def __post_init__(self) -> None:
        if self.dataset is not None and self.dataset.kind != "mooncake":
            self._order = list(range(len(self.dataset.items)))
            random.Random(f"sweeper-dataset-{self.workload.seed or 0}").shuffle(self._order)

    def planned_total(self) -> int:
        """Requests the whole sweep sends (warm-up included)."""
        w = self.workload
        return sum(self._level_size(k) for k in w.concurrency_levels)

    def _level_size(self, key: int) -> int:
        w = self.workload
        warm = w.warmup_requests.get(str(key), w.warmup_per_level)
        return warm + w.requests_per_level.get(str(key), 0)

    async def _item(self, key: int, index: int) -> DatasetItem:
        """The dataset item of request ``index`` of level ``key``: the sweep's requests take
        the items that fit the server's context in the seeded order, level after level,
        starting again from the first when the file runs out."""
        assert self.dataset is not None
        levels = self.workload.concurrency_levels
        position = sum(self._level_size(k) for k in levels[: levels.index(key)]) + index
        async with self._scan_lock:  # specs are built concurrently; the scan is shared
            while len(self._fitting) <= position and self._scanned < len(self._order):
                candidate = self._order[self._scanned]
                self._scanned += 1
                if await self._fits(self.dataset.items[candidate]):
                    self._fitting.append(candidate)
                else:
                    self.too_long += 1
        if not self._fitting:
            raise ConfigError(
                f"--dataset {self.workload.dataset}: no prompt fits the server's "
                f"max_model_len {self.max_model_len} with its output length"
            )
        return self.dataset.items[self._fitting[position % len(self._fitting)]]

    async def _fits(self, item: DatasetItem) -> bool:
        """Whether the item's prompt and output fit ``max_model_len`` (unknown: yes), as
        ``vllm bench serve`` leaves out the ShareGPT entries that do not."""
        if self.max_model_len is None or self.counter is None or not item.prompt:
            return True
        output = await self._output_len(item) or 0
        return await self._count(item.prompt) + output <= self.max_model_len

    async def _count(self, text: str) -> int:
        assert self.counter is not None
        if text not in self._counts:
            self._counts[text] = await self.counter(text)
        return self._counts[text]

    def offsets(self, key: int, warmup: int) -> list[int]:
        """A rate level's due times (ns after its start) by measured index; [] closed loop."""
        w = self.workload
        rate = w.offered_rate(key)
        if rate is None:
            return []
        count = w.requests_per_level.get(str(key), 0)
        if w.arrival == "trace" and self.dataset is not None:
            stamps = [item.timestamp_ms or 0.0 for item in self.dataset.items[:count]]
            speedup = w.trace_speedup or 1.0
            return [round((t - stamps[0]) / speedup * NS_PER_MS) for t in stamps]
        sessions = w.sessions or 0  # a multi-turn level: the conversations arrive on schedule
        arrivals = arrival_offsets(
            sessions or count, rate, w.arrival or "poisson", w.burstiness or 1.0,
            arrival_rng(w.seed or 0, key, rate),
        )  # fmt: skip
        if not sessions:
            return arrivals
        turns = w.turns or 1
        return [arrivals[m // turns] for m in range(count)]

    async def spec(self, key: int, index: int, warmup: int) -> RequestSpec:
        """Request ``index`` of level ``key`` (indices below ``warmup`` are its warm-up)."""
        w = self.workload
        asked_in, asked_out = asked_lengths(w, key, index)
        messages: list[dict[str, Any]] | None = None
        kind = self.dataset.kind if self.dataset is not None else "random"
        if kind == "mooncake" and index >= warmup:
            item = self.dataset.items[index - warmup]  # type: ignore[union-attr]
            assert item.input_len is not None
            prompt, exact = await build_block_prompt(
                item.hash_ids, item.input_len, self.counter, seed=w.seed or 0, cache=self._blocks
            )
            self.inexact += not exact
            asked_in, asked_out = item.input_len, item.output_len
        elif kind in ("sharegpt", "jsonl"):
            item = await self._item(key, index)
            prompt = item.prompt or ""
            messages = list(item.messages) if item.messages is not None else None
            asked_in = await self._count(prompt) if self.counter and prompt else None
            asked_out = await self._output_len(item)
        else:
            prompt = await self.builder.build(key, index, target=asked_in)
        body = completion_body(
            self.model, prompt, endpoint=self.endpoint,
            output_len=asked_out or self._default_output_len(),
            ignore_eos=bool(w.ignore_eos),
        )  # fmt: skip
        if messages is not None:
            body["messages"] = messages
        phase = "warmup" if index < warmup else "measured"
        rid = request_id(key, index, open_loop=w.open_loop)
        spec = RequestSpec(rid, key, phase, body, header_id=f"{self.run_id}-{rid}")
        spec.asked_input_tokens, spec.asked_output_tokens = asked_in, asked_out
        turn = session_of(w, index, warmup)
        if turn is not None:
            spec.session, spec.turn = turn
            spec.keep_text = (spec.turn or 1) < (w.turns or 1)  # the next turn needs it
            if spec.turn != 1:
                spec.asked_input_tokens = None  # the history's length is the server's to count
        return spec

    def _default_output_len(self) -> int:
        """--output-len: the workload's, or where lengths vary the one the run was given (the
        first request's max_tokens in the manifest)."""
        given = self.workload.request_params.get("max_tokens")
        return (
            self.workload.output_len
            or (given if isinstance(given, int) else None)
            or (FALLBACK_OUTPUT_LEN)
        )

    async def _output_len(self, item: DatasetItem) -> int | None:
        """A dataset request's output length: its own (JSONL output_len), else --output-len
        where given, else (ShareGPT) its answer's tokens, else the workload's."""
        if item.output_len is not None:
            return item.output_len
        if self.output_given or item.answer_text is None:
            return self._default_output_len()
        if self.counter is None:
            return max(1, len(item.answer_text.split()))
        if self._overhead is None:  # what the counter adds to any text (template, BOS)
            one, two = await self.counter("time"), await self.counter("time time")
            self._overhead = max(0, 2 * one - two)
        return max(1, await self.counter(item.answer_text) - self._overhead)


def compose_turn(spec: RequestSpec, history: list[tuple[str, str]]) -> None:
    """Put the conversation so far (user message, answer as received) before this turn's new
    user message: chat messages, or (completions) one text that extends the last prompt and
    its answer, so the server sees the earlier turns as this prompt's prefix."""
    if not history:
        return
    body = spec.body
    if "messages" in body:
        new = body["messages"]
        earlier: list[dict[str, Any]] = []
        for user, answer in history:
            earlier += [
                {"role": "user", "content": user},
                {"role": "assistant", "content": answer},
            ]
        body["messages"] = earlier + new
    else:
        body["prompt"] = "".join(f"{user}{answer}\n" for user, answer in history) + body["prompt"]


def user_text(spec: RequestSpec) -> str:
    """This turn's own user message (before :func:`compose_turn`)."""
    if "messages" in spec.body:
        return str(spec.body["messages"][-1]["content"])
    return str(spec.body["prompt"])


def run_dataset(config: RecordConfig, workload: Workload | None = None) -> Dataset | None:
    """The run's dataset file, loaded (None: random prompts). A resumed run (``workload``: the
    run's) reads the file its manifest names and refuses one whose content changed since."""
    resumed = workload is not None and workload.dataset is not None
    text = workload.dataset or "random" if workload is not None and resumed else config.dataset
    kind, path = parse_dataset_spec(text)
    if path is None:
        return None
    dataset = load_dataset(kind, path)
    if workload is not None and workload.dataset_sha256 not in (None, dataset.sha256):
        raise ConfigError(
            f"--resume: {path} is not the file the run was recorded with (its SHA-256 changed); "
            "put the original back, or record a new run"
        )
    return dataset


def apply_dataset(workload: Workload, dataset: Dataset, config: RecordConfig) -> None:
    """What a new run's manifest says about its dataset: the file and its digest, lengths now
    the file's (None where they vary), and for a replay its one level: the trace's requests
    (``--requests-per-level N``: its first N), their offered rate and the speed-up."""
    workload.dataset, workload.dataset_sha256 = config.dataset, dataset.sha256
    workload.input_len = None
    if dataset.kind != "mooncake":
        answers = dataset.kind == "sharegpt" and not config.set_by_user("output_len")
        if answers or any(i.output_len for i in dataset.items):
            workload.output_len = None  # each request's own
        return
    count = min(config.requests_per_level.fixed or len(dataset.items), len(dataset.items))
    stamps = [item.timestamp_ms or 0.0 for item in dataset.items[:count]]
    span_s = (stamps[-1] - stamps[0]) / 1000 / config.trace_speedup
    workload.output_len = None
    workload.load, workload.arrival = "rate", "trace"
    workload.trace_speedup, workload.burstiness = config.trace_speedup, None
    workload.requests_per_level = {"1": count}
    workload.request_rates = {"1": (count - 1) / span_s if span_s > 0 else math.inf}
