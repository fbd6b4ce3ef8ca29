"""vLLM-format Prometheus metrics for the scripted server, fed by its timing model.

Names, labels (``engine``, ``model_name``) and histogram buckets follow vLLM v1's ``/metrics``
(ENGINE_NOTES.md lists what a real vLLM 0.32 exposes). The server updates plain numbers on its hot
path (a bisect and two additions per observation, a tenth of what ``prometheus_client``'s own
metric objects cost, measured); a custom collector turns them into families at scrape time and
``prometheus_client`` writes the text format.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from sweeper.testing.config import ScriptedServerConfig

# vLLM v1's bucket boundaries (seconds), from vllm/v1/metrics/loggers.py.
TTFT_BUCKETS_S = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS_S = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
)  # fmt: skip
REQUEST_LATENCY_BUCKETS_S = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
LABELS = ("engine", "model_name")
# ScriptedServerConfig.metrics_nonfinite: gauges whose values are not finite.
NONFINITE_GAUGES = (
    (
        "vllm:spec_decode_draft_acceptance_rate",
        "Speculative token acceptance rate",
        float("nan"),
    ),
    (
        "vllm:spec_decode_mean_acceptance_length",
        "Mean accepted tokens per draft",
        float("inf"),
    ),
)


@dataclass
class EngineState:
    """The gauges at scrape time."""

    running: int
    waiting: int
    kv_usage: float
    preemptions: int


class Histogram:
    """Bucket counts (non-cumulative), sum and count of observations."""

    __slots__ = ("bounds", "counts", "doc", "name", "total")

    def __init__(self, name: str, doc: str, bounds: tuple[float, ...]) -> None:
        self.name = name
        self.doc = doc
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def family(self, labels: list[str]) -> HistogramMetricFamily:
        family = HistogramMetricFamily(self.name, self.doc, labels=LABELS)
        cumulative = 0
        buckets: list[tuple[str, float]] = []
        for bound, count in zip([*self.bounds, float("inf")], self.counts, strict=True):
            cumulative += count
            buckets.append(("+Inf" if bound == float("inf") else repr(float(bound)), cumulative))
        family.add_metric(labels, buckets, self.total)
        return family


class VllmMetrics:
    """What the server counts, and the collector that exposes it in vLLM's names."""

    def __init__(self, config: ScriptedServerConfig, state: Callable[[], EngineState]) -> None:
        self._config = config
        self._state = state
        self._labels = [config.engine_label, config.model]
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.prefix_queries = 0  # prompt tokens looked up in the prefix cache
        self.prefix_hits = 0  # of them, found
        self.finished: dict[str, int] = {}
        self.queue_time = Histogram(
            "vllm:request_queue_time_seconds", "Time in WAITING", REQUEST_LATENCY_BUCKETS_S
        )
        self.prefill_time = Histogram(
            "vllm:request_prefill_time_seconds", "Time in prefill", REQUEST_LATENCY_BUCKETS_S
        )
        self.decode_time = Histogram(
            "vllm:request_decode_time_seconds", "Time in decode", REQUEST_LATENCY_BUCKETS_S
        )
        self.e2e_latency = Histogram(
            "vllm:e2e_request_latency_seconds", "End-to-end latency", REQUEST_LATENCY_BUCKETS_S
        )
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds", "Time to first token", TTFT_BUCKETS_S
        )
        self.itl = Histogram(
            "vllm:inter_token_latency_seconds", "Inter-token latency", ITL_BUCKETS_S
        )
        self.iteration_tokens = Histogram(
            "vllm:iteration_tokens_total", "Tokens per engine step", ITERATION_TOKEN_BUCKETS
        )
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def request_finished(self, reason: str) -> None:
        self.finished[reason] = self.finished.get(reason, 0) + 1

    def collect(self) -> Iterator[Metric]:
        labels = self._labels
        state = self._state()
        for name, doc, value in (
            ("vllm:num_requests_running", "Requests in the model batch", state.running),
            ("vllm:num_requests_waiting", "Requests waiting", state.waiting),
            ("vllm:kv_cache_usage_perc", "KV cache usage, 1 = full", state.kv_usage),
        ):
            gauge = GaugeMetricFamily(name, doc, labels=LABELS)
            gauge.add_metric(labels, value)
            yield gauge
        for name, doc, value in (
            ("vllm:num_preemptions", "Preemptions", state.preemptions),
            ("vllm:prompt_tokens", "Prefill tokens processed", self.prompt_tokens),
            ("vllm:generation_tokens", "Tokens generated", self.generation_tokens),
            ("vllm:prefix_cache_queries", "Prefix cache queries, in tokens", self.prefix_queries),
            ("vllm:prefix_cache_hits", "Prefix cache hits, in tokens", self.prefix_hits),
        ):
            counter = CounterMetricFamily(name, doc, labels=LABELS)
            counter.add_metric(labels, value)
            yield counter
        success = CounterMetricFamily(
            "vllm:request_success", "Finished requests", labels=(*LABELS, "finished_reason")
        )
        for reason, count in sorted(self.finished.items()):
            success.add_metric([*labels, reason], count)
        yield success
        yield self._cache_info()
        if self._config.metrics_nonfinite:
            # An idle spec-decode acceptance rate is 0/0 on a real vLLM page; a mean of nothing
            # divided by zero comes out +Inf.
            for name, doc, value in NONFINITE_GAUGES:
                gauge = GaugeMetricFamily(name, doc, labels=LABELS)
                gauge.add_metric(labels, value)
                yield gauge
        for histogram in (
            self.queue_time,
            self.prefill_time,
            self.decode_time,
            self.e2e_latency,
            self.ttft,
            self.itl,
            self.iteration_tokens,
        ):
            yield histogram.family(labels)

    def _cache_info(self) -> GaugeMetricFamily:
        config = self._config
        info = {
            "block_size": str(config.block_size),
            "cache_dtype": "auto",
            "enable_prefix_caching": str(config.prefix_caching),
            "gpu_memory_utilization": "0.9",
            "kv_cache_max_concurrency": f"{config.kv_capacity_tokens / config.max_model_len:.2f}",
            "kv_cache_size_tokens": str(config.num_blocks * config.block_size),
            "num_gpu_blocks": str(config.num_blocks),
            "engine": config.engine_label,
        }
        family = GaugeMetricFamily(
            "vllm:cache_config_info", "Information of the KV cache configuration", labels=list(info)
        )
        family.add_metric(list(info.values()), 1)
        return family

    def render(self) -> bytes:
        return generate_latest(self.registry)


class PrefixCache:
    """Blocks of token ids, each named by a hash of itself and every block before it (vLLM's
    scheme: a block is reused only under the same prefix), kept least recently used first."""

    def __init__(self, block_size: int, capacity_blocks: int) -> None:
        self.block_size = block_size
        self.capacity = capacity_blocks
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def _hashes(self, ids: list[int]) -> list[int]:
        out: list[int] = []
        previous = 0
        for start in range(0, len(ids) - self.block_size + 1, self.block_size):
            previous = hash((previous, tuple(ids[start : start + self.block_size])))
            out.append(previous)
        return out

    def lookup(self, ids: list[int]) -> int:
        """Tokens of ``ids`` in leading blocks already cached."""
        hits = 0
        for block in self._hashes(ids):
            if block not in self._blocks:
                break
            self._blocks.move_to_end(block)
            hits += self.block_size
        return hits

    def insert(self, ids: list[int]) -> None:
        for block in self._hashes(ids):
            self._blocks[block] = None
            self._blocks.move_to_end(block)
        while len(self._blocks) > self.capacity:
            self._blocks.popitem(last=False)
