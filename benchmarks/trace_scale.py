"""How load + summary scale with the chunks of a trace set: time and peak memory at 1 M, 10 M
(and, on request, 100 M) chunks, today's loader beside the columnar one, in the same run.

For each size it writes a trace set with the real writer (:func:`sweeper.store.write_trace_set`,
requests made as ``sweeper.testing.factories`` lays them out: a closed loop per level, 8 levels
C = 1 ... 128, 256 tokens a request, a tail of stalls and jitter), then runs, each in a fresh
Python process whose own peak RSS (``ru_maxrss`` from ``wait4``) is read:

- ``baseline``: today's loader (the JSONL parsed into one object per request and chunk,
  ``load_trace_set(cache="off")``) and the frames made from the objects
  (``requests_to_frame``, ``traces_to_gap_frame``), then ``summarize`` and the JSON;
- ``first``: ``sweeper summary --format json`` with no cache yet (it parses the JSONL into
  columns and writes the cache);
- ``cached``: ``sweeper summary --format json`` again (it reads the cache).

It checks that the three JSON outputs are equal and prints the times (load + summary, and the
whole process with its imports; wall clock and CPU, which a loaded machine disturbs less), the
peak RSS and the ratios to the baseline. The baseline is
skipped where its estimated memory (:mod:`sweeper.store.memory`) exceeds what is available.

Run: ``.venv/bin/python benchmarks/trace_scale.py [--chunks 1e6,1e7,1e8] [--out DIR] [--keep]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from sweeper.schema import RequestTrace
from sweeper.store import memory, requests_files, write_trace_set
from sweeper.store.cache import remove_caches
from sweeper.testing.factories import SyntheticLevel, synthetic_manifest

LEVELS = (1, 2, 4, 8, 16, 32, 64, 128)
TOKENS = 256
INPUT_LEN = 1024

CHILD = r"""
import io, json, resource, sys, time, contextlib
mode, folder = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
c0 = time.process_time()
if mode == "baseline":
    from sweeper.analysis.frames import level_frame, requests_to_frame, traces_to_gap_frame
    from sweeper.analysis.summary import summarize
    from sweeper.store import load_trace_set
    t1, c1 = time.perf_counter(), time.process_time()
    ts = load_trace_set(folder, cache="off")
    levels = level_frame(
        ts, requests=requests_to_frame(ts.measured()), gaps=traces_to_gap_frame(ts.requests)
    )
    text = json.dumps(summarize(ts, levels=levels), indent=2, allow_nan=False)
else:
    from sweeper.cli import cli
    t1, c1 = time.perf_counter(), time.process_time()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            cli(["summary", folder, "--format", "json"], standalone_mode=False)
        except SystemExit:
            pass
    text = out.getvalue()
t2, c2 = time.perf_counter(), time.process_time()
print(json.dumps({"imports_s": t1 - t0, "work_s": t2 - t1, "work_cpu_s": c2 - c1,
                  "summary": json.loads(text)}))
"""


def requests(n_per_level: int, seed: int = 0) -> Iterator[RequestTrace]:
    """A closed loop per level (as ``synthetic_requests`` lays them out), made one at a time so
    that writing 100 M chunks never holds them all."""
    rng = np.random.default_rng(seed)
    clock = 0
    for c in LEVELS:
        free = np.full(c, clock, dtype=np.int64)
        ttft, itl = 20_000_000 + 2_000_000 * c, 8_000_000 + 250_000 * c
        for i in range(n_per_level):
            s = int(np.argmin(free))
            send = int(free[s])
            gaps = np.full(TOKENS, itl, dtype=np.int64)
            gaps[0] = ttft
            gaps += rng.integers(0, 1_000_000, TOKENS)
            gaps[rng.integers(1, TOKENS, 2)] += 30 * itl  # a stall or two: a tail to find
            times = np.cumsum(gaps)
            end = int(times[-1]) + 200_000
            yield RequestTrace(
                concurrency=c,
                request_id=f"c{c}-{i:06d}",
                send_ns=send,
                end_ns=end,
                chunk_ns=times.tolist(),
                chunk_tokens=[1] * TOKENS,
                prompt_tokens=INPUT_LEN,
                completion_tokens=TOKENS,
                finish_reason="length",
            )
            free[s] = send + end
        clock = int(free.max()) + 100_000_000


def make_trace_set(root: Path, chunks: int) -> Path:
    per_level = max(1, round(chunks / (len(LEVELS) * TOKENS)))
    folder = root / f"scale-{chunks:.0e}".replace("+", "")
    if folder.exists():
        return folder
    levels = [SyntheticLevel(c, 0, 0, requests=per_level) for c in LEVELS]
    manifest = synthetic_manifest(folder.name, levels, input_len=INPUT_LEN, output_len=TOKENS)
    start = time.perf_counter()
    write_trace_set(folder, manifest, requests(per_level))
    size = sum(p.stat().st_size for p in requests_files(folder))
    print(
        f"  wrote {folder.name}: {per_level * len(LEVELS):,} requests, "
        f"{per_level * len(LEVELS) * TOKENS:,} chunks, {size / 1e6:,.0f} MB of JSONL "
        f"in {time.perf_counter() - start:.1f} s",
        flush=True,
    )
    return folder


def run_child(mode: str, folder: Path) -> dict:
    """One measurement in a fresh process: its times, its own peak RSS (reaped with
    ``wait4``, so no other child is counted), its summary."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, mode, str(folder)], stdout=subprocess.PIPE, stderr=err
        )
        assert proc.stdout is not None
        out = proc.stdout.read()
        proc.stdout.close()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            err.seek(0)
            raise SystemExit(f"{mode} on {folder.name} failed:\n{err.read().decode()[-3000:]}")
    result = json.loads(out.decode().strip().splitlines()[-1])
    result["wall_s"] = wall
    result["rss_bytes"] = usage.ru_maxrss * 1024  # KiB on Linux
    result["cpu_s"] = usage.ru_utime + usage.ru_stime  # the whole process, imports included
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", default="1e6,1e7", help="sizes, e.g. 1e6,1e7,1e8")
    parser.add_argument("--out", type=Path, default=None, help="where the trace sets go")
    parser.add_argument("--keep", action="store_true", help="keep the generated trace sets")
    parser.add_argument(
        "--no-baseline", action="store_true", help="skip today's loader (it needs ~216 B a chunk)"
    )
    args = parser.parse_args()
    sizes = [int(float(x)) for x in args.chunks.split(",") if x.strip()]
    root = args.out or Path(tempfile.mkdtemp(prefix="trace-scale-"))
    root.mkdir(parents=True, exist_ok=True)
    print(f"load average before: {os.getloadavg()}; {os.cpu_count()} CPUs")
    rows = []
    try:
        for chunks in sizes:
            folder = make_trace_set(root, chunks)
            remove_caches(folder)
            size = memory.measure(requests_files(folder))
            results: dict[str, dict] = {}
            need = memory.objects_need(size)
            if args.no_baseline:
                print("  baseline: skipped (--no-baseline)")
            elif need > memory.available_bytes():
                print(f"  baseline: skipped, needs ~{memory.gib(need)}")
            else:
                results["baseline"] = run_child("baseline", folder)
            results["first"] = run_child("first", folder)
            results["cached"] = run_child("cached", folder)
            summaries = [json.dumps(r.pop("summary"), sort_keys=True) for r in results.values()]
            same = all(s == summaries[0] for s in summaries)
            for mode, r in results.items():
                rows.append((chunks, mode, r))
                base = results.get("baseline")
                ratio = (
                    f"  x{base['work_s'] / r['work_s']:.1f} faster "
                    f"(CPU x{base['work_cpu_s'] / r['work_cpu_s']:.1f}), "
                    f"x{base['rss_bytes'] / r['rss_bytes']:.1f} less memory"
                    if base and mode != "baseline"
                    else ""
                )
                print(
                    f"{chunks:>12,} chunks  {mode:<8}  load+summary {r['work_s']:6.2f} s "
                    f"({r['work_cpu_s']:6.2f} s CPU)  whole process {r['wall_s']:6.2f} s "
                    f"({r['cpu_s']:6.2f} s CPU)  "
                    f"peak RSS {r['rss_bytes'] / 1e6:7,.0f} MB{ratio}",
                    flush=True,
                )
            print(f"  summaries equal: {same}")
            if not same:
                raise SystemExit("the summaries differ")
    finally:
        print(f"load average after: {os.getloadavg()}")
        if not args.keep and args.out is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
