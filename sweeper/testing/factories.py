"""Synthetic trace sets with known timings, written by the real writer (:mod:`sweeper.store`).

Each level is described by its timing model; the factory lays requests out the way a closed-loop
sweep does (C streams, each sending its next request when the previous ends), so the derived
throughput, TTFT and ITL are known in advance.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from sweeper.schema import (
    ClockOrigin,
    Fact,
    LevelStatus,
    RequestTrace,
    RunManifest,
    Server,
    ServerConfig,
    Source,
    Target,
    Workload,
)
from sweeper.store import write_trace_set
from sweeper.version import __version__


@dataclass
class SyntheticLevel:
    """Timing of one level: every request gets ``ttft_ms``, then ``output_len - 1`` gaps of
    ``itl_ms``; ``stall_every`` / ``stall_ms`` insert a longer gap every N tokens (a tail)."""

    concurrency: int
    ttft_ms: float
    itl_ms: float
    requests: int | None = None
    stall_every: int = 0
    stall_ms: float = 0.0
    jitter_ms: float = 0.0
    failures: int = 0
    extra: dict[str, float] = field(default_factory=dict)


def synthetic_requests(
    levels: list[SyntheticLevel],
    *,
    input_len: int = 1024,
    output_len: int = 256,
    warmup: int = 0,
    seed: int = 0,
    gap_between_levels_ms: float = 100.0,
) -> list[RequestTrace]:
    rng = np.random.default_rng(seed)
    traces: list[RequestTrace] = []
    clock_ns = 0
    for spec in levels:
        c = spec.concurrency
        n = spec.requests if spec.requests is not None else max(4 * c, 8)
        stream_free = np.full(c, clock_ns, dtype=np.int64)
        total = warmup + n
        for i in range(total):
            s = int(np.argmin(stream_free))
            send = int(stream_free[s])
            phase = "warmup" if i < warmup else "measured"
            rid = f"c{c}-{i:05d}"
            failed = phase == "measured" and (i - warmup) < spec.failures
            if failed:
                end = 5_000_000
                traces.append(
                    RequestTrace(
                        concurrency=c,
                        request_id=rid,
                        phase="measured",
                        send_ns=send,
                        end_ns=end,
                        status="error",
                        error={
                            "kind": "http",
                            "http_status": 500,
                            "message": "Internal Server Error",
                        },
                    )
                )
                stream_free[s] = send + end
                continue
            gaps = np.full(output_len - 1, spec.itl_ms, dtype=float)
            if spec.jitter_ms:
                gaps += rng.uniform(-spec.jitter_ms, spec.jitter_ms, size=gaps.size)
            if spec.stall_every:
                gaps[spec.stall_every - 1 :: spec.stall_every] = spec.stall_ms
            offsets = np.concatenate([[spec.ttft_ms], spec.ttft_ms + np.cumsum(gaps)])
            chunk_ns = np.round(offsets * 1e6).astype(np.int64)
            traces.append(
                RequestTrace(
                    concurrency=c,
                    request_id=rid,
                    phase=phase,
                    send_ns=send,
                    end_ns=int(chunk_ns[-1]) + 100_000,
                    chunk_ns=chunk_ns.tolist(),
                    chunk_tokens=[1] * output_len,
                    prompt_tokens=input_len,
                    completion_tokens=output_len,
                    finish_reason="length",
                )
            )
            stream_free[s] = send + int(chunk_ns[-1]) + 100_000
        clock_ns = int(stream_free.max() + gap_between_levels_ms * 1e6)
    return traces


def synthetic_manifest(
    run_id: str,
    levels: list[SyntheticLevel],
    *,
    input_len: int = 1024,
    output_len: int = 256,
    warmup: int = 0,
    model: str = "tiny",
    config: ServerConfig | None = None,
    labels: dict[str, str] | None = None,
) -> RunManifest:
    return RunManifest(
        run_id=run_id,
        started_at=datetime(2026, 11, 29, 12, 0, tzinfo=UTC),
        ended_at=datetime(2026, 11, 29, 12, 30, tzinfo=UTC),
        status="complete",
        sweeper_version=__version__,
        source=Source(tool="synthetic", version=__version__),
        target=Target(base_url="http://127.0.0.1:8000", endpoint="completions", model=model),
        server=Server(
            engine="vllm",
            version=Fact(value="0.0-synthetic", source="user"),
            config=config or ServerConfig(),
        ),
        workload=Workload(
            input_len=input_len,
            output_len=output_len,
            concurrency_levels=[lv.concurrency for lv in levels],
            requests_per_level={
                str(lv.concurrency): lv.requests
                if lv.requests is not None
                else max(4 * lv.concurrency, 8)
                for lv in levels
            },
            warmup_per_level=warmup,
            ignore_eos=True,
        ),
        clock=ClockOrigin(origin_monotonic_ns=0, origin_unix_ns=1_764_417_600_000_000_000),
        levels=[LevelStatus(concurrency=lv.concurrency, status="complete") for lv in levels],
        labels=labels or {},
    )


def write_synthetic_run(
    root: Path | str,
    run_id: str,
    levels: list[SyntheticLevel],
    *,
    input_len: int = 1024,
    output_len: int = 256,
    warmup: int = 0,
    config: ServerConfig | None = None,
    labels: dict[str, str] | None = None,
    compress: bool = False,
    seed: int = 0,
) -> Path:
    """Write a synthetic trace set to ``root/run_id`` with the real writer; returns its folder."""
    manifest = synthetic_manifest(
        run_id,
        levels,
        input_len=input_len,
        output_len=output_len,
        warmup=warmup,
        config=config,
        labels=labels,
    )
    requests = synthetic_requests(
        levels, input_len=input_len, output_len=output_len, warmup=warmup, seed=seed
    )
    return write_trace_set(Path(root) / run_id, manifest, requests, compress=compress)


def synthetic_search_entries(
    pages: int, *, seed: int, sections: tuple[int, int] = (1, 6)
) -> list[dict[str, str]]:
    """A search index as mkdocs-static-i18n stacks it with ``reconfigure_search``: the English
    pages (a page entry and ``sections`` heading entries each, a range), then the Chinese build,
    where a page without a translation is the English one under ``zh/`` (a duplicate), a
    translated one has its own text, and some sections repeat an English title with other text."""
    rng = np.random.default_rng(seed)
    english = []
    for p in range(pages):
        english.append({"location": f"runs/r{p}/", "title": f"Run {p}", "text": f"run {p} text"})
        for s in range(int(rng.integers(sections[0], sections[1] + 1))):
            english.append(
                {"location": f"runs/r{p}/#s{s}", "title": f"Section {s}", "text": f"p{p} s{s}"}
            )
    english.append({"location": "", "title": "Home", "text": "welcome"})
    chinese = []
    for entry in english:
        kind = rng.random()
        zh = dict(entry, location=f"zh/{entry['location']}")
        if kind < 0.4:
            chinese.append(zh)  # not translated: the same title and text
        elif kind < 0.5:
            chinese.append(dict(zh, text=entry["text"] + " (其他)"))  # same title, other text
        else:
            chinese.append(dict(zh, title=entry["title"] + " 译", text="译文"))
    return english + chinese
