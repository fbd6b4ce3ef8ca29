"""Where one recorder process's time goes, per level, against the scripted server.

    python benchmarks/fidelity/profile_recorder.py --levels 256,512            # timings only
    python benchmarks/fidelity/profile_recorder.py --levels 256 --py-spy out/  # + py-spy profile

For each level it records with sweeper's library call (``sweeper_driver.py``, as the fidelity
benchmark does) and splits every measured request's life, on the shared CLOCK_MONOTONIC, into:

- **gap**: the previous request of the closed loop ended (its last chunk's kernel receive time)
  until this one was stamped as sent (``send_ns``). In a closed loop of C streams the k-th request
  to end frees the stream that sends request C + k (the queue is FIFO), so gaps pair the sorted
  ends with the sorted sends.
- **send -> received**: ``send_ns`` until the server had read the request (truth ``received_ns``):
  building the request, taking or opening a connection, writing it, the server's accept.
- **first write -> first stamp**: the server's first content write until the recorder's first
  chunk stamp (kernel receive time): the wire, and a merged read.

With ``--py-spy`` (``pip install py-spy`` into .venv) the recorder runs under ``py-spy record``
and the self time per function is printed (the top 25), with CPU µs per token.
"""

from __future__ import annotations

import collections
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import click
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fidelity.stats import truth_stats
from fidelity.tools import SWEEPER_DRIVER, SWEEPER_PYTHON, quiet_env, run_process
from sweeper.store import load_trace_set
from sweeper.testing.server import spawn_server

PY_SPY = SWEEPER_PYTHON.parent / "py-spy"
# The driver, with the sweeper package of another tree (the editable install's finder removed).
TREE_RUNNER = (
    "import runpy, sys; "
    "sys.meta_path = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]; "
    "sys.path.insert(0, {tree!r}); sys.argv = [{driver!r}, *sys.argv[1:]]; "
    "runpy.run_path({driver!r}, run_name='__main__')"
)


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def split_times(trace_dir: Path, truths: dict[str, dict[str, Any]], streams: int) -> dict[str, Any]:
    trace = load_trace_set(trace_dir)
    manifest = trace.manifest
    origin = manifest.clock.origin_monotonic_ns if manifest.clock else 0
    reqs = [r for r in trace.requests if r.status == "ok" and r.chunk_ns]
    sends = sorted(origin + r.send_ns for r in reqs)
    ends = sorted(origin + r.send_ns + r.end_ns for r in reqs)
    gaps = [(s - e) / 1e6 for s, e in zip(sends[streams:], ends, strict=False)]
    to_server, first, ttft_err = [], [], []
    for r in reqs:
        truth = truths.get(f"{manifest.run_id}-{r.request_id}")
        if truth is None or not truth["content_ns"]:
            continue
        send = origin + r.send_ns
        to_server.append((truth["received_ns"] - send) / 1e6)
        first.append((send + r.chunk_ns[0] - truth["content_ns"][0]) / 1e6)
        ttft_err.append((r.chunk_ns[0] - (truth["content_ns"][0] - truth["received_ns"])) / 1e6)
    tokens = sum(sum(r.chunk_tokens) for r in reqs)
    span = (max(ends) - min(sends)) / 1e9 if reqs else float("nan")
    out: dict[str, Any] = {"requests": len(reqs), "tok_s": tokens / span, "tokens": tokens}
    for name, values in (
        ("gap_ms", gaps),
        ("send_to_received_ms", to_server),
        ("first_write_to_stamp_ms", first),
        ("ttft_error_ms", ttft_err),
    ):
        out[name] = {q: round(pct(values, q), 3) for q in (50, 90, 99)} | {
            "max": round(max(values), 3) if values else None
        }
    return out


def top_functions(raw: Path, limit: int = 25) -> list[tuple[str, int]]:
    """Self samples per function from py-spy's ``--format raw`` (collapsed stacks)."""
    self_counts: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        self_counts[re.sub(r":\d+\)$", ")", stack.split(";")[-1])] += int(count)  # by function
    return self_counts.most_common(limit)


@click.command()
@click.option("--levels", default="256,512", show_default=True)
@click.option("--requests-factor", default=2.0, show_default=True)
@click.option("--py-spy", "spy_dir", type=click.Path(path_type=Path), default=None)
@click.option("--rate", default=250, show_default=True, help="py-spy samples per second.")
@click.option("--out", type=click.Path(path_type=Path), default=Path("/tmp/sweeper-profile"))
@click.option("--tree", "trees", multiple=True, type=click.Path(path_type=Path), help="Run the "
              "sweeper package of this source tree instead (e.g. `git archive HEAD sweeper` "
              "unpacked): before/after, alternating per level; `.` is this checkout.")  # fmt: skip
@click.option("--repeat", default=1, show_default=True)
def main(
    levels: str,
    requests_factor: float,
    spy_dir: Path | None,
    rate: int,
    out: Path,
    trees: tuple[Path, ...],
    repeat: int,
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with spawn_server(ttft_ms=20.0, itl_ms=10.0, max_model_len=8192) as server:
        for level, tree, attempt in [
            (int(v), t, a)
            for v in levels.split(",")
            for a in range(repeat)
            for t in trees or [None]
        ]:
            run_id = f"profile-c{level}-{time.time_ns()}"
            spec = {
                "base_url": server.base_url, "model": "tiny", "concurrency": level,
                "requests": max(32, int(requests_factor * level)), "input_len": 32,
                "output_len": 64, "out": str(out), "run_id": run_id,
            }  # fmt: skip
            command = [str(SWEEPER_PYTHON), str(SWEEPER_DRIVER), json.dumps(spec)]
            if tree is not None and tree != Path("."):
                command[1:2] = ["-c", TREE_RUNNER.format(tree=str(tree.resolve()),
                                                        driver=str(SWEEPER_DRIVER))]  # fmt: skip
            raw = None
            if spy_dir is not None:
                spy_dir.mkdir(parents=True, exist_ok=True)
                raw = spy_dir / f"c{level}.txt"
                command = [str(PY_SPY), "record", "-r", str(rate), "--format", "raw", "-o",
                           str(raw), "--", *command]  # fmt: skip
            start = time.monotonic_ns()
            child = run_process(command, out / f"{run_id}.log", 600.0, quiet_env())
            if child.code != 0:
                raise SystemExit(child.tail)
            listed = server.truths(start, time.monotonic_ns())
            truths = {t["request_id"]: t for t in listed}
            figures = split_times(out / run_id, truths, level)
            truth = truth_stats(listed)
            # CPU over the streaming (first request in to last token out), as the benchmark.
            figures["cpu_us_per_token"] = round(
                child.cpu_between(truth.start_ns, truth.end_ns) * 1e6 / figures["tokens"], 2
            )
            server.reset()
            name = f"C={level}" + (f" {tree} #{attempt + 1}" if trees else "")
            print(f"{name}: {json.dumps(figures)}")
            if raw is not None:
                samples = top_functions(raw)
                total = sum(
                    int(x.rpartition(" ")[2]) for x in raw.read_text().splitlines() if x.strip()
                )
                print(f"  py-spy: {total} samples; CPU us/token ~ "
                      f"{total / rate * 1e6 / figures['tokens']:.1f} (whole process, start-up too)")  # fmt: skip
                for name, count in samples:
                    print(f"  {count / total:6.1%}  {name}")


if __name__ == "__main__":
    main()
