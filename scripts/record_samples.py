"""Record the sample trace sets in ``traces/`` from the local vLLM (CPU build).

Three configurations, each a real vLLM started with its own flags and a sweep recorded with
``sweeper record --server-log``:

- ``small-vllm-cpu-default``: the small model (44 M parameters), default flags. (The tiny model
  streams so fast that on 2 cores vLLM's API server and the recorder fight for one core.)
- ``small-vllm-cpu-chunked-prefill``: the same model, ~1,000-token prompts and a 256-token
  chunked-prefill budget: decoding streams stall behind other requests' prefill chunks (the ITL
  tail opens with no preemption).
- ``small-vllm-cpu-preemption``: the same model with a 16-block KV pool (2,048 tokens) and
  ``--max-num-seqs 4``; 4 x (384 + 256) tokens do not fit: preemptions and a waiting queue.
- ``small-vllm-cpu-poisson``: an open loop: Poisson arrivals at 0.5 to 8 requests/s and all at
  once, at most 16 in flight, against ``--max-num-seqs 4``: the top rates saturate the server (its
  waiting queue, then the client's queue behind the cap).
- ``small-vllm-cpu-multi-turn``: conversations of 3 turns on the chat endpoint with
  ``--enable-prefix-caching``: later turns find their history in the server's prefix cache.

Run with the project's Python after ``make vllm models``::

    .venv/bin/python scripts/record_samples.py            # all three
    .venv/bin/python scripts/record_samples.py preemption  # one

Scrapes are 2 s apart and each trace set is compacted (``sweeper compact``) to keep it small enough
to commit (a vLLM scrape is ~40 KB).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from vllm_server import ROOT, VllmServer

SWEEPER = ROOT / ".venv" / "bin" / "sweeper"
TRACES = ROOT / "traces"
SCRAPE_INTERVAL_S = 2.0


@dataclass(frozen=True, kw_only=True)
class Sample:
    run_id: str
    model: str
    server_args: tuple[str, ...]
    input_len: int
    output_len: int
    levels: str  # --concurrency, or with --request-rate in ``load``: nothing
    requests_per_level: str  # a count, or Kx: K per stream (at least 8)
    note: str
    load: tuple[str, ...] = ()  # other record options (the workload): rates, sessions...


SAMPLES = {
    "default": Sample(
        run_id="small-vllm-cpu-default",
        model="small",
        server_args=(),
        input_len=256,
        output_len=128,
        levels="1,2,4,8,16",
        requests_per_level="1x",
        note="default flags",
    ),
    "chunked-prefill": Sample(
        run_id="small-vllm-cpu-chunked-prefill",
        model="small",
        server_args=("--max-num-batched-tokens", "256"),
        input_len=1000,
        output_len=64,
        levels="1,2,4,8",
        requests_per_level="8",
        note="chunked-prefill budget 256 tokens, 1,000-token prompts",
    ),
    "preemption": Sample(
        run_id="small-vllm-cpu-preemption",
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
        levels="1,2,4,8",
        requests_per_level="8",
        note="16-block KV pool, max-num-seqs 4",
    ),
    "poisson": Sample(
        run_id="small-vllm-cpu-poisson",
        model="small",
        server_args=("--max-num-seqs", "4"),
        input_len=256,
        output_len=64,
        levels="",
        requests_per_level="16",
        note="open loop: Poisson arrivals, max-num-seqs 4, at most 16 in flight",
        load=("--request-rate", "0.5,1,2,4,8,inf", "--max-concurrency", "16"),
    ),
    "multi-turn": Sample(
        run_id="small-vllm-cpu-multi-turn",
        model="small",
        server_args=("--enable-prefix-caching",),
        input_len=200,
        output_len=32,
        levels="2,4",
        requests_per_level="",
        note="conversations of 3 turns, prefix caching on",
        load=("--endpoint", "chat", "--sessions", "6", "--turns", "3", "--think-time-ms", "200"),
    ),
}


def record(name: str, sample: Sample, out: Path) -> Path:
    target = out / sample.run_id
    if target.exists():
        shutil.rmtree(target)
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "vllm.log"
        server = VllmServer(
            ROOT / ".models" / sample.model, extra_args=sample.server_args, log_path=log
        )
        with server:
            print(
                f"{name}: vLLM ready at {server.base_url} in {server.startup_s:.0f} s", flush=True
            )
            command = [
                str(SWEEPER), "record",
                "--base-url", server.base_url,
                "--input-len", str(sample.input_len),
                "--output-len", str(sample.output_len),
                *(["--concurrency", sample.levels] if sample.levels else []),
                *(
                    ["--requests-per-level", sample.requests_per_level]
                    if sample.requests_per_level
                    else []
                ),
                *sample.load,
                "--warmup", "1",
                "--scrape-interval", str(SCRAPE_INTERVAL_S),
                "--server-log", str(log),
                "--label", f"config={name}",
                "--label", f"note={sample.note}",
                "--label", "hardware=2-core CPU VM (vLLM CPU build)",
                "--out", str(out),
                "--run-id", sample.run_id,
                "--quiet",
            ]  # fmt: skip
            subprocess.run(command, check=True)
            # Committed with the site: gzipped (the metrics shrink ~16x), read as before.
            subprocess.run([str(SWEEPER), "compact", str(target)], check=True)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Record the sample trace sets from local vLLM.")
    parser.add_argument("names", nargs="*", help=f"some of {', '.join(SAMPLES)} (default: all)")
    parser.add_argument("--out", type=Path, default=TRACES)
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in SAMPLES]
    if unknown:
        parser.error(f"unknown sample {', '.join(unknown)}: choose from {', '.join(SAMPLES)}")
    for name in args.names or list(SAMPLES):
        path = record(name, SAMPLES[name], args.out)
        size = sum(f.stat().st_size for f in path.iterdir())
        print(f"{name}: {path} ({size / 1e6:.2f} MB)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
