"""The scripted server's timing models: when each token of each request is produced.

Both models hand tokens to the request's writer as an async iterator of token counts, one item per
chunk to write. :func:`schedule_chunks` follows a fixed per-request schedule;
:class:`BatchingEngine` runs a continuous-batching step loop shared by all requests, in the manner
of vLLM's scheduler (running requests first, chunked prefill within a per-step token budget,
admission limited by ``max_num_seqs`` and free KV blocks, preemption by recompute of the most
recently admitted request when a decode needs a block that is not there). When a writer falls
behind the engine, the tokens it has not written yet go out together in its next chunk, as a real
server's API process does.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field

from sweeper.testing.config import ScriptedServerConfig
from sweeper.testing.truth import RequestTruth
from sweeper.units import NS_PER_MS, NS_PER_S


async def _sleep_until_ns(due_ns: int) -> None:
    delay_ns = due_ns - time.monotonic_ns()
    if delay_ns > 0:
        await asyncio.sleep(delay_ns / NS_PER_S)


async def schedule_chunks(
    config: ScriptedServerConfig, truth: RequestTruth, total_tokens: int
) -> AsyncGenerator[int, None]:
    """Fixed schedule: the first chunk (one token) ``ttft_ms`` after the request arrived, then a
    chunk of ``tokens_per_chunk`` tokens every ``itl_ms``. Deadlines are absolute, so a late timer
    never shifts the ones after it."""
    truth.admitted_ns = truth.received_ns
    due_ns = truth.received_ns + round(config.ttft_ms * NS_PER_MS)
    itl_ns = round(config.itl_ms * NS_PER_MS)
    produced = 0
    while produced < total_tokens:
        await _sleep_until_ns(due_ns)
        count = 1 if produced == 0 else min(config.tokens_per_chunk, total_tokens - produced)
        produced += count
        truth.due_ns.append(due_ns)
        if truth.first_token_ns is None:
            truth.first_token_ns = time.monotonic_ns()
        yield count
        due_ns += itl_ns


@dataclass(eq=False)
class Sequence:
    """One request inside the batching engine."""

    truth: RequestTruth
    prompt_len: int
    max_out: int
    generated: int = 0
    computed: int = 0  # tokens whose KV is in the cache
    blocks: int = 0
    pending: int = 0  # produced, not yet taken by the writer
    finished: bool = False
    aborted: bool = False
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def kv_len(self) -> int:
        """Tokens that need KV before the next token can be sampled: prompt + generated."""
        return self.prompt_len + self.generated


@dataclass
class StepStats:
    """What the engine did, for /metrics and tests."""

    steps: int = 0
    preemptions: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    last_step_tokens: int = 0


class BatchingEngine:
    """A continuous-batching step loop (see the module docstring and ``ScriptedServerConfig``)."""

    def __init__(
        self, config: ScriptedServerConfig, on_step: Callable[[int, int], None] | None = None
    ) -> None:
        self.config = config
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.free_blocks = config.num_blocks
        self.stats = StepStats()
        self._on_step = on_step
        self._work = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # -- public -----------------------------------------------------------------------------

    @property
    def kv_usage(self) -> float:
        return 1.0 - self.free_blocks / self.config.num_blocks

    async def generate(self, truth: RequestTruth, total_tokens: int) -> AsyncGenerator[int, None]:
        """Queue a request and yield the token counts it gets, as the engine produces them."""
        seq = Sequence(truth=truth, prompt_len=max(truth.prompt_tokens, 1), max_out=total_tokens)
        if total_tokens <= 0:
            return
        self.waiting.append(seq)
        self._ensure_running()
        self._work.set()
        try:
            while True:
                await seq.wake.wait()
                seq.wake.clear()
                if seq.pending:
                    count, seq.pending = seq.pending, 0
                    yield count
                if seq.finished and not seq.pending:
                    return
        finally:
            if not seq.finished:
                self._abort(seq)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    # -- the step loop ----------------------------------------------------------------------

    def _ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def _loop(self) -> None:
        config = self.config
        next_start_ns = time.monotonic_ns()
        while True:
            if not self.running and not self.waiting:
                self._work.clear()
                await self._work.wait()
                next_start_ns = time.monotonic_ns()
            plan = self._schedule()
            decodes = sum(1 for seq, count in plan if count == 1 and seq.computed > 0)
            prefill_tokens = sum(count for _, count in plan) - decodes
            step_ms = (
                config.step_base_ms
                + config.step_per_seq_ms * len(plan)
                + config.step_per_prefill_token_ms * prefill_tokens
            )
            # Absolute step boundaries: a late wake-up shortens the next sleep instead of drifting,
            # unless the loop is behind by more than a step (then it starts again from now).
            step_ns = round(step_ms * NS_PER_MS)
            now_ns = time.monotonic_ns()
            if now_ns - next_start_ns > step_ns:
                next_start_ns = now_ns
            next_start_ns += step_ns
            await _sleep_until_ns(next_start_ns)
            self._finish_step(plan, prefill_tokens)

    def _blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.config.block_size)

    def _allocate(self, seq: Sequence, tokens: int) -> bool:
        need = self._blocks_for(tokens) - seq.blocks
        if need <= 0:
            return True
        if need > self.free_blocks:
            return False
        self.free_blocks -= need
        seq.blocks += need
        return True

    def _release(self, seq: Sequence) -> None:
        self.free_blocks += seq.blocks
        seq.blocks = 0

    def _preempt(self, victim: Sequence) -> None:
        self._release(victim)
        victim.computed = 0
        victim.truth.preemptions += 1
        self.stats.preemptions += 1
        self.waiting.appendleft(victim)

    def _schedule(self) -> list[tuple[Sequence, int]]:
        """One step's batch: running sequences first (decode 1 token or the next prefill chunk),
        then new admissions while seats, KV blocks and the token budget last."""
        budget = self.config.max_num_batched_tokens
        plan: list[tuple[Sequence, int]] = []
        preempted = False
        index = 0
        while index < len(self.running) and budget > 0:
            seq = self.running[index]
            count = min(seq.kv_len - seq.computed, budget)
            while not self._allocate(seq, seq.computed + count):
                victim = self.running.pop()
                self._preempt(victim)
                preempted = True
                if victim is seq:
                    break
            else:
                plan.append((seq, count))
                budget -= count
                index += 1
                continue
            break
        if preempted:
            return plan
        while self.waiting and len(self.running) < self.config.max_num_seqs and budget > 0:
            seq = self.waiting[0]
            count = min(seq.kv_len - seq.computed, budget)
            # Without preemption, admission reserves the whole sequence so decodes never run out.
            reserve = (
                seq.computed + count if self.config.preemption else seq.prompt_len + seq.max_out
            )
            if not self._allocate(seq, reserve):
                break
            self.waiting.popleft()
            self.running.append(seq)
            if seq.truth.admitted_ns is None:
                seq.truth.admitted_ns = time.monotonic_ns()
            plan.append((seq, count))
            budget -= count
        return plan

    def _finish_step(self, plan: list[tuple[Sequence, int]], prefill_tokens: int) -> None:
        stats = self.stats
        stats.steps += 1
        stats.prompt_tokens += prefill_tokens
        stats.last_step_tokens = sum(count for _, count in plan)
        produced = 0
        for seq, count in plan:
            if seq.aborted or seq.finished or seq.blocks == 0:
                continue  # aborted or preempted during this step
            seq.computed += count
            if seq.computed < seq.kv_len:
                continue  # a prefill chunk that did not reach the end
            seq.generated += 1
            seq.pending += 1
            produced += 1
            if seq.truth.first_token_ns is None:
                seq.truth.first_token_ns = time.monotonic_ns()
            if seq.generated >= seq.max_out:
                seq.finished = True
                seq.truth.finished_ns = time.monotonic_ns()
                self.running.remove(seq)
                self._release(seq)
            seq.wake.set()
        stats.generation_tokens += produced
        if self._on_step is not None:
            self._on_step(stats.last_step_tokens, produced)

    def _abort(self, seq: Sequence) -> None:
        seq.aborted = True
        if seq in self.running:
            self.running.remove(seq)
        if seq in self.waiting:
            self.waiting.remove(seq)
        self._release(seq)
