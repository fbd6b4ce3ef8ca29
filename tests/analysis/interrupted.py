"""An interrupted recording of ``sweeper record``, written by the real writer: C=1 done, C=2
stopped after 7 of its 16 requests and resumed after a minute's pause (optional), C=4 and C=8
never run. Shared by the analysis and report tests."""

from __future__ import annotations

from pathlib import Path

from sweeper.schema import LevelStatus, RequestTrace, Source
from sweeper.store import write_trace_set
from sweeper.testing.factories import SyntheticLevel, synthetic_manifest, synthetic_requests

LEVELS = [SyntheticLevel(1, 30, 10, requests=8), SyntheticLevel(2, 30, 10, requests=16)]
NEVER_RUN = [SyntheticLevel(4, 30, 10, requests=16), SyntheticLevel(8, 30, 10, requests=16)]


def write_interrupted_run(root: Path, run_id: str, *, kept: int = 7) -> Path:
    """C=2 holds its first ``kept`` requests; the manifest says ``incomplete``."""
    manifest = synthetic_manifest(run_id, LEVELS + NEVER_RUN, output_len=32)
    manifest.status = "incomplete"
    manifest.source = Source(tool="sweeper record", version="test")
    manifest.levels = [
        LevelStatus(concurrency=1, status="complete"),
        LevelStatus(
            concurrency=2,
            status="interrupted",
            message="interrupted (Ctrl-C); finish with --resume",
        ),
    ]
    requests = synthetic_requests(LEVELS, output_len=32)
    ones = [r for r in requests if r.concurrency == 1]
    twos = [r for r in requests if r.concurrency == 2][:kept]
    return write_trace_set(root / run_id, manifest, ones + twos)


def resumed_after_a_pause(
    requests: list[RequestTrace], concurrency: int, after: int, pause_ns: int
) -> list[RequestTrace]:
    """The requests of one level from the ``after``-th on moved ``pause_ns`` later (a resume)."""
    out = []
    seen = 0
    for r in requests:
        if r.concurrency == concurrency:
            if seen >= after:
                r = r.model_copy(update={"send_ns": r.send_ns + pause_ns})
            seen += 1
        out.append(r)
    return out
