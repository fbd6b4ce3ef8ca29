"""How fast sweeper turns a trace set into metrics, and how big a trace set is on disk.

Builds, with the real writer (:func:`sweeper.testing.factories.write_synthetic_run`), the two
cases issue 3 names:

- one level of 640 requests x 256 output tokens (C = 64);
- a whole sweep of 1,332 requests (C = 1 ... 64, 256 output tokens each, as in the reference
  report's sweep);

then times, best of ``--repeat`` runs: loading (``store.load_trace_set``: read + validate every
line), computing (``request_frame`` + ``gap_frame`` + ``level_frame``) and the two together, and
prints bytes per output token on disk for ``requests.jsonl`` and ``requests.jsonl.gz``. It also
times two other ways of validating the same lines (whole-file ``TypeAdapter``, ``json.loads`` then
``model_validate``) beside the store's per-line ``model_validate_json``, to show whether the
reader is worth changing.

Run: ``.venv/bin/python benchmarks/metrics_bench.py [--repeat 5]``
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import TypeAdapter

from sweeper.analysis.frames import gap_frame, level_frame, request_frame
from sweeper.schema import REQUESTS_FILE, REQUESTS_FILE_GZ, RequestTrace
from sweeper.store import load_trace_set
from sweeper.testing.factories import SyntheticLevel, write_synthetic_run

OUTPUT_LEN = 256
INPUT_LEN = 1024
ONE_LEVEL = [SyntheticLevel(64, ttft_ms=400, itl_ms=25, requests=640, jitter_ms=3)]
# 1,332 requests from C = 1 to 64, with a tail opening at the top levels
SWEEP_REQUESTS = {1: 20, 2: 40, 4: 48, 8: 64, 16: 128, 24: 192, 32: 256, 48: 320, 64: 264}
SWEEP = [
    SyntheticLevel(
        c,
        ttft_ms=40 + 6 * c,
        itl_ms=16 + c / 4,
        requests=n,
        jitter_ms=2,
        stall_every=64 if c >= 32 else 0,
        stall_ms=120,
    )
    for c, n in SWEEP_REQUESTS.items()
]


def best_of(repeat: int, func: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return min(times)


def compute(folder: Path) -> None:
    ts = load_trace_set(folder)
    requests, gaps = request_frame(ts), gap_frame(ts)
    level_frame(ts, requests=requests, gaps=gaps)


def bench_case(name: str, levels: list[SyntheticLevel], root: Path, repeat: int) -> None:
    start = time.perf_counter()
    folder = write_synthetic_run(
        root, f"{name}-plain", levels, input_len=INPUT_LEN, output_len=OUTPUT_LEN
    )
    write_s = time.perf_counter() - start
    packed = write_synthetic_run(
        root, f"{name}-gz", levels, input_len=INPUT_LEN, output_len=OUTPUT_LEN, compress=True
    )
    ts = load_trace_set(folder)
    tokens = sum(r.completion_tokens or 0 for r in ts.requests)
    load_s = best_of(repeat, lambda: load_trace_set(folder))
    frames_s = best_of(
        repeat,
        lambda: level_frame(ts, requests=request_frame(ts), gaps=gap_frame(ts)),
    )
    total_s = best_of(repeat, lambda: compute(folder))
    total_gz_s = best_of(repeat, lambda: compute(packed))
    plain_bytes = (folder / REQUESTS_FILE).stat().st_size
    gz_bytes = (packed / REQUESTS_FILE_GZ).stat().st_size
    print(
        f"\n{name}: {len(ts.requests)} requests, {tokens:,} output tokens, {len(levels)} level(s)"
    )
    print(f"  write (real writer)          {write_s * 1000:8.1f} ms")
    print(f"  load  (read + validate)      {load_s * 1000:8.1f} ms")
    print(f"  compute (3 frames)           {frames_s * 1000:8.1f} ms")
    print(f"  load + compute               {total_s * 1000:8.1f} ms")
    print(f"  load + compute (.gz)         {total_gz_s * 1000:8.1f} ms")
    print(
        f"  requests.jsonl               {plain_bytes:>10,} B  {plain_bytes / tokens:6.2f} B/token"
    )
    print(f"  requests.jsonl.gz            {gz_bytes:>10,} B  {gz_bytes / tokens:6.2f} B/token")
    bench_readers(folder / REQUESTS_FILE, repeat)


def bench_readers(path: Path, repeat: int) -> None:
    data = path.read_bytes()
    lines = data.split(b"\n")[:-1]
    adapter = TypeAdapter(list[RequestTrace])
    whole = b"[" + b",".join(lines) + b"]"
    per_line = best_of(repeat, lambda: [RequestTrace.model_validate_json(x) for x in lines])
    as_array = best_of(repeat, lambda: adapter.validate_json(whole))
    via_json = best_of(repeat, lambda: [RequestTrace.model_validate(json.loads(x)) for x in lines])
    print("  validating the lines alone (file already in memory):")
    print(f"    per line model_validate_json (store.py)  {per_line * 1000:8.1f} ms")
    print(f"    whole file TypeAdapter(list)            {as_array * 1000:8.1f} ms")
    print(f"    json.loads + model_validate             {via_json * 1000:8.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="best of N timings (default 5)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sweeper-bench-") as tmp:
        root = Path(tmp)
        bench_case("level-640x256", ONE_LEVEL, root, args.repeat)
        bench_case("sweep-1332", SWEEP, root, args.repeat)


if __name__ == "__main__":
    main()
