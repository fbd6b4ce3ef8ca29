"""Configuration of the scripted server (:mod:`sweeper.testing.server`).

One frozen dataclass, :class:`ScriptedServerConfig`, holds everything: what the server says about
itself (model name, max_model_len, version), which timing model produces the tokens, the toy
tokenizer's output vocabulary, parameter rejection (to mimic servers that refuse ``ignore_eos``),
and the fault rules applied to requests that do not ask for a fault themselves.

Two timing models:

``schedule``
    Every request on its own: the first token ``ttft_ms`` after the request arrived, then one chunk
    every ``itl_ms`` carrying ``tokens_per_chunk`` tokens. Exact, independent of load; for timing
    tests and for measuring a client's fidelity.

``batching``
    A continuous-batching engine in the manner of vLLM's scheduler: a step loop whose step takes
    ``step_base_ms + step_per_seq_ms * decoding seqs + step_per_prefill_token_ms * prefill tokens``;
    at most ``max_num_seqs`` running; a KV pool of ``kv_capacity_tokens`` in blocks of
    ``block_size`` (admission waits when it is full, running sequences are preempted when a decode
    needs a block and none is free); prefill in chunks of at most ``max_num_batched_tokens`` per
    step shared with the decodes, so a long prompt delays everybody else's next token.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from sweeper.errors import ConfigError

TimingMode = Literal["schedule", "batching"]

DEFAULT_MODEL = "tiny"
DEFAULT_MAX_MODEL_LEN = 4096
DEFAULT_VERSION = "0.0.0+sweeper.scripted"
# Output words: ASCII, accented Latin and CJK so streamed text exercises multi-byte UTF-8.
DEFAULT_VOCABULARY: tuple[str, ...] = (
    "the", "quick", "brown", "fox", "héllo", "wörld", "naïve", "café",
    "世界", "你好", "令牌", "速度", "jumps", "over", "lazy", "dog",
)  # fmt: skip
# vLLM's CPU build uses 128-token blocks (ENGINE_NOTES.md); GPU builds use 16.
DEFAULT_BLOCK_SIZE = 16


@dataclass(frozen=True)
class FaultRule:
    """Apply fault ``spec`` (the same text as an ``X-Sweeper-Fault`` header) to a request with
    ``probability`` (drawn from the server's seeded generator, in arrival order), or to every
    ``every``-th request (1-based arrival count), whichever is given."""

    spec: str
    probability: float = 0.0
    every: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.probability <= 1.0:
            raise ConfigError(
                f"fault probability {self.probability} for {self.spec!r} is outside [0, 1]"
            )
        if self.every < 0:
            raise ConfigError(f"fault 'every' {self.every} for {self.spec!r} must be >= 0")


@dataclass(frozen=True)
class ScriptedServerConfig:
    """Everything the scripted server does; see the module docstring for the timing models."""

    host: str = "127.0.0.1"
    port: int = 0
    model: str = DEFAULT_MODEL
    max_model_len: int = DEFAULT_MAX_MODEL_LEN
    version: str = DEFAULT_VERSION
    mode: TimingMode = "schedule"
    # schedule mode
    ttft_ms: float = 20.0
    itl_ms: float = 10.0
    tokens_per_chunk: int = 1
    # batching mode
    step_base_ms: float = 5.0
    step_per_seq_ms: float = 0.05
    step_per_prefill_token_ms: float = 0.01
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    kv_capacity_tokens: int = 262_144
    block_size: int = DEFAULT_BLOCK_SIZE
    preemption: bool = True
    # generation
    natural_len: int | None = None
    vocabulary: tuple[str, ...] = DEFAULT_VOCABULARY
    # parameter rejection, like transformers serve (which answers 422)
    reject_params: tuple[str, ...] = ()
    reject_status: int = 400
    # faults applied to requests without an X-Sweeper-Fault header
    faults: tuple[FaultRule, ...] = ()
    seed: int = 0
    split_delay_ms: float = 1.0
    # how many requests' truth to keep (oldest dropped first); 0 keeps everything
    truth_limit: int = 0
    engine_label: str = "0"
    # /metrics also carries gauges valued NaN and +Inf (faults.py says which), as real pages can
    metrics_nonfinite: bool = False
    # vLLM's automatic prefix caching, as counted: a prompt's leading blocks (block_size toy
    # tokens each) that an earlier prompt or answer filled are hits; the LRU cache holds
    # num_blocks blocks. Off: every query misses (the counters are on /metrics either way).
    prefix_caching: bool = False
    extra: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        checks: list[tuple[bool, str]] = [
            (self.mode in ("schedule", "batching"), f"mode {self.mode!r}: use schedule|batching"),
            (self.max_model_len >= 1, f"max_model_len {self.max_model_len} must be >= 1"),
            (self.ttft_ms >= 0, f"ttft_ms {self.ttft_ms} must be >= 0"),
            (self.itl_ms >= 0, f"itl_ms {self.itl_ms} must be >= 0"),
            (self.tokens_per_chunk >= 1, f"tokens_per_chunk {self.tokens_per_chunk} must be >= 1"),
            (self.step_base_ms > 0, f"step_base_ms {self.step_base_ms} must be > 0"),
            (self.max_num_seqs >= 1, f"max_num_seqs {self.max_num_seqs} must be >= 1"),
            (
                self.max_num_batched_tokens >= 1,
                f"max_num_batched_tokens {self.max_num_batched_tokens} must be >= 1",
            ),
            (self.block_size >= 1, f"block_size {self.block_size} must be >= 1"),
            (
                self.kv_capacity_tokens >= self.block_size,
                f"kv_capacity_tokens {self.kv_capacity_tokens} is below one block "
                f"({self.block_size} tokens)",
            ),
            (
                self.mode != "batching"
                or self.kv_capacity_tokens // self.block_size * self.block_size
                >= self.max_model_len,
                f"kv_capacity_tokens {self.kv_capacity_tokens} holds less than one sequence of "
                f"max_model_len {self.max_model_len}; raise it or lower max_model_len",
            ),
            (len(self.vocabulary) > 0, "vocabulary must hold at least one word"),
            (
                all(w and not any(c.isspace() for c in w) for w in self.vocabulary),
                "vocabulary words must be non-empty and contain no whitespace",
            ),
            (400 <= self.reject_status < 500, f"reject_status {self.reject_status}: use a 4xx"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(f"invalid scripted-server config: {message}")

    @property
    def num_blocks(self) -> int:
        return self.kv_capacity_tokens // self.block_size

    def replace(self, **changes: object) -> ScriptedServerConfig:
        """A copy with ``changes`` applied (validated again)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]
