"""vLLM-format Prometheus metrics for the scripted server, fed by its timing model.

Names, labels (``engine``, ``model_name``) and histogram buckets follow vLLM v1's ``/metrics``
(ENGINE_NOTES.md lists what a real vLLM 0.32 exposes), written by ``prometheus_client`` into a
registry of the server's own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from sweeper.testing.config import ServerConfig

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


@dataclass
class EngineState:
    """The gauges at scrape time."""

    running: int
    waiting: int
    kv_usage: float
    preemptions: int


class VllmMetrics:
    """The registry and the handles the server updates."""

    def __init__(self, config: ServerConfig, state: Callable[[], EngineState]) -> None:
        self._state = state
        self._preemptions_seen = 0
        self.registry = CollectorRegistry(auto_describe=True)
        labels = {"engine": config.engine_label, "model_name": config.model}
        reg = self.registry

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, LABELS, registry=reg)

        def counter(name: str, doc: str, extra: tuple[str, ...] = ()) -> Counter:
            return Counter(name, doc, (*LABELS, *extra), registry=reg)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, LABELS, buckets=buckets, registry=reg)

        self.running = gauge("vllm:num_requests_running", "Requests in the model batch").labels(
            **labels
        )
        self.waiting = gauge("vllm:num_requests_waiting", "Requests waiting").labels(**labels)
        self.kv_usage = gauge("vllm:kv_cache_usage_perc", "KV cache usage, 1 = full").labels(
            **labels
        )
        self.preemptions = counter("vllm:num_preemptions", "Preemptions").labels(**labels)
        self.prompt_tokens = counter("vllm:prompt_tokens", "Prefill tokens processed").labels(
            **labels
        )
        self.generation_tokens = counter("vllm:generation_tokens", "Tokens generated").labels(
            **labels
        )
        self._success = counter("vllm:request_success", "Finished requests", ("finished_reason",))
        self._labels = labels
        cache_info = Gauge(
            "vllm:cache_config_info",
            "Information of the KV cache configuration",
            (
                "block_size",
                "cache_dtype",
                "enable_prefix_caching",
                "gpu_memory_utilization",
                "kv_cache_max_concurrency",
                "kv_cache_size_tokens",
                "num_gpu_blocks",
                "engine",
            ),
            registry=reg,
        )
        cache_info.labels(
            block_size=str(config.block_size),
            cache_dtype="auto",
            enable_prefix_caching="False",
            gpu_memory_utilization="0.9",
            kv_cache_max_concurrency=f"{config.kv_capacity_tokens / config.max_model_len:.2f}",
            kv_cache_size_tokens=str(config.num_blocks * config.block_size),
            num_gpu_blocks=str(config.num_blocks),
            engine=config.engine_label,
        ).set(1)
        self.queue_time = histogram(
            "vllm:request_queue_time_seconds", "Time in WAITING", REQUEST_LATENCY_BUCKETS_S
        ).labels(**labels)
        self.prefill_time = histogram(
            "vllm:request_prefill_time_seconds", "Time in prefill", REQUEST_LATENCY_BUCKETS_S
        ).labels(**labels)
        self.decode_time = histogram(
            "vllm:request_decode_time_seconds", "Time in decode", REQUEST_LATENCY_BUCKETS_S
        ).labels(**labels)
        self.e2e_latency = histogram(
            "vllm:e2e_request_latency_seconds", "End-to-end latency", REQUEST_LATENCY_BUCKETS_S
        ).labels(**labels)
        self.ttft = histogram(
            "vllm:time_to_first_token_seconds", "Time to first token", TTFT_BUCKETS_S
        ).labels(**labels)
        self.itl = histogram(
            "vllm:inter_token_latency_seconds", "Inter-token latency", ITL_BUCKETS_S
        ).labels(**labels)
        self.iteration_tokens = histogram(
            "vllm:iteration_tokens_total", "Tokens per engine step", ITERATION_TOKEN_BUCKETS
        ).labels(**labels)

    def request_finished(self, reason: str) -> None:
        self._success.labels(**self._labels, finished_reason=reason).inc()

    def render(self) -> bytes:
        state = self._state()
        self.running.set(state.running)
        self.waiting.set(state.waiting)
        self.kv_usage.set(state.kv_usage)
        if state.preemptions > self._preemptions_seen:
            self.preemptions.inc(state.preemptions - self._preemptions_seen)
            self._preemptions_seen = state.preemptions
        return generate_latest(self.registry)
