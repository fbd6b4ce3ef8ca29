"""Real sweeps recorded once per session from a real vLLM (CPU build), shared by the e2e tests.

Each configuration starts vLLM once (``vllm_server`` in ``tests/conftest.py``), snapshots what the
server itself says (``/metrics`` before and after, its log), records a small sweep through the
``sweeper record`` command in a subprocess, and stops. Three configurations:

- ``default``: the tiny model, default flags: token counts, offsets, facts, scrapes.
- ``preemption``: the small model, a KV pool of 16 blocks (2,048 tokens) and ``--max-num-seqs 4`` with 8 streams
  of long generations: the scheduler must preempt and queue.
- ``chunked``: the larger random model, ~1,000-token prompts and a 256-token chunked-prefill
  budget: decoding streams stall behind other requests' prefill chunks, with no preemption.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sweeper.store import TraceSet, load_trace_set

SWEEPER = Path(sys.executable).parent / "sweeper"
RECORD_TIMEOUT_S = 600


@dataclass(frozen=True, kw_only=True)
class Sweep:
    """What a configuration asks of vLLM and of ``sweeper record``."""

    name: str
    model: str
    server_args: tuple[str, ...]
    input_len: int
    output_len: int
    levels: tuple[int, ...]
    requests_per_level: int
    warmup: int = 1
    scrape_interval_s: float = 1.0


SWEEPS = {
    "default": Sweep(
        name="default",
        model="tiny",
        server_args=(),
        input_len=128,
        output_len=64,
        levels=(1, 4),
        requests_per_level=8,
        scrape_interval_s=0.5,
    ),
    # The small model: the tiny one streams so fast that vLLM's API server saturates its core and
    # answers /metrics seconds late, so the waiting queue could go unseen. 4 x (384 + 256) tokens
    # do not fit in 16 blocks x 128 = 2,048: the scheduler must preempt.
    "preemption": Sweep(
        name="preemption",
        model="small",
        server_args=(
            "--max-num-seqs",
            "4",
            "--num-gpu-blocks-override",
            "16",
            "--max-model-len",
            "1024",
        ),
        input_len=384,
        output_len=256,
        levels=(1, 8),
        # 12 requests, 3 at a time: the queue lasts about 3 rounds of 256 tokens, long enough for
        # scrapes to see it even when the API server answers some of them seconds late.
        requests_per_level=12,
        scrape_interval_s=0.5,
    ),
    "chunked": Sweep(
        name="chunked",
        model="small",
        server_args=("--max-num-batched-tokens", "256"),
        input_len=1000,
        output_len=64,
        levels=(1, 4, 8),
        requests_per_level=8,
    ),
}


@dataclass
class Recorded:
    """A recorded sweep and the server's own account of the same time."""

    sweep: Sweep
    run_dir: Path
    trace: TraceSet
    base_url: str
    metrics_before: str
    metrics_after: str
    log_text: str
    command: list[str]
    stdout: str
    record_s: float
    timings: dict[str, float] = field(default_factory=dict)


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


def record_command(sweep: Sweep, base_url: str, out: Path, log_path: Path) -> list[str]:
    return [
        str(SWEEPER),
        "record",
        "--base-url",
        base_url,
        "--input-len",
        str(sweep.input_len),
        "--output-len",
        str(sweep.output_len),
        "--concurrency",
        ",".join(map(str, sweep.levels)),
        "--requests-per-level",
        str(sweep.requests_per_level),
        "--warmup",
        str(sweep.warmup),
        "--scrape-interval",
        str(sweep.scrape_interval_s),
        "--server-log",
        str(log_path),
        "--label",
        f"config={sweep.name}",
        "--out",
        str(out),
        "--run-id",
        f"{sweep.model}-vllm-cpu-{sweep.name}",
        "--quiet",
    ]


def record_sweep(vllm_server: Callable[..., object], sweep: Sweep, out: Path) -> Recorded:
    started = time.monotonic()
    server = vllm_server(sweep.name, model=sweep.model, args=sweep.server_args)
    startup_s = time.monotonic() - started
    base_url: str = server.base_url  # type: ignore[attr-defined]
    before = fetch(base_url + "/metrics")
    command = record_command(sweep, base_url, out, server.log_path)  # type: ignore[attr-defined]
    began = time.monotonic()
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=RECORD_TIMEOUT_S, check=False
    )
    record_s = time.monotonic() - began
    if done.returncode != 0:
        pytest.fail(
            f"sweeper record exited {done.returncode} for {sweep.name}:\n{done.stdout}\n{done.stderr}",
            pytrace=False,
        )
    after = fetch(base_url + "/metrics")
    run_dir = out / f"{sweep.model}-vllm-cpu-{sweep.name}"
    return Recorded(
        sweep=sweep,
        run_dir=run_dir,
        trace=load_trace_set(run_dir),
        base_url=base_url,
        metrics_before=before,
        metrics_after=after,
        log_text=server.log_text(),  # type: ignore[attr-defined]
        command=command,
        stdout=done.stdout + done.stderr,
        record_s=record_s,
        timings={"startup_s": startup_s, "record_s": record_s},
    )


@pytest.fixture(scope="session")
def e2e_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the sweeps go: a temporary folder, or $SWEEPER_E2E_OUT to keep them for a look."""
    keep = os.environ.get("SWEEPER_E2E_OUT")
    if keep:
        out = Path(keep)
        for sweep in SWEEPS.values():
            shutil.rmtree(out / f"{sweep.model}-vllm-cpu-{sweep.name}", ignore_errors=True)
        out.mkdir(parents=True, exist_ok=True)
        return out
    return tmp_path_factory.mktemp("traces")


@pytest.fixture(scope="session")
def recorded_default(vllm_server: Callable[..., object], e2e_out: Path) -> Recorded:
    return record_sweep(vllm_server, SWEEPS["default"], e2e_out)


@pytest.fixture(scope="session")
def recorded_preemption(vllm_server: Callable[..., object], e2e_out: Path) -> Recorded:
    return record_sweep(vllm_server, SWEEPS["preemption"], e2e_out)


@pytest.fixture(scope="session")
def recorded_chunked(vllm_server: Callable[..., object], e2e_out: Path) -> Recorded:
    return record_sweep(vllm_server, SWEEPS["chunked"], e2e_out)
