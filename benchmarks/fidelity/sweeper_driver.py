"""Record one level with sweeper's library call, as ``sweeper record --quiet`` does.

``python sweeper_driver.py '{"base_url": ..., "concurrency": 16, "requests": 32, ...}'``

Why not the ``sweeper`` command: the command imports every sub-command (site, pages, ...) at
start-up; the recorder needs none of them, and this keeps the measurement to what records.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from sweeper.record import RecordConfig, RequestCount, record_sweep
from sweeper.record.progress import NullProgress


def main() -> None:
    spec = json.loads(sys.argv[1])
    config = RecordConfig(
        base_url=spec["base_url"],
        model=spec["model"],
        concurrency=[spec["concurrency"]],
        requests_per_level=RequestCount(fixed=spec["requests"]),
        warmup=0,
        input_len=spec["input_len"],
        output_len=spec["output_len"],
        out=Path(spec["out"]),
        run_id=spec["run_id"],
        max_error_rate=1.0,
        workers=spec.get("workers", 1),
        http_client=spec.get("http_client", "raw"),
        ray=spec.get("ray"),
    )
    folder = record_sweep(config, progress=NullProgress())
    print(f"recorded {folder}")


if __name__ == "__main__":
    main()
