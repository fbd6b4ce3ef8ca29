"""The columnar path gives the numbers the object path always gave (issue 15).

For every sample trace set in ``traces/`` and every real sweep the importers read
(``../shared/data``, imported here with sweeper's own importers, as tests/report/test_real_sweeps.py
does), the summary JSON (``sweeper summary --format json``'s payload, with and without a service
level) and the findings JSON are computed twice:

- the old way: the JSONL parsed into one object per request (``load_trace_set(cache="off")``) and
  the frames made from the objects (``requests_to_frame``, ``traces_to_gap_frame``: the code the
  frames always ran);
- the new way: the columnar cache written and read back (``cache="always"``, loaded twice), the
  frames read from the columns a level at a time;

and must be equal, as text. The frames themselves are compared too.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from sweeper.analysis.frames import (
    gap_frame,
    level_frame,
    request_frame,
    requests_to_frame,
    traces_to_gap_frame,
)
from sweeper.analysis.server_frames import server_level_frame
from sweeper.analysis.slo import parse_slos
from sweeper.analysis.summary import summarize
from sweeper.facts import complete_facts
from sweeper.facts.serverlog import parse_server_log
from sweeper.findings import analyze_run, findings_json
from sweeper.findings.analyze import analyze_frames
from sweeper.findings.frames import RunFrames
from sweeper.store import TraceSet, discover_trace_sets, load_trace_set
from sweeper.store.cache import remove_caches
from tests._peers import CORPUS, PEERS, require_peers, run_cli
from tests.report.test_real_sweeps import real_sweeps

ROOT = Path(__file__).resolve().parents[2]
SLO = "ttft_p99<=2s,itl_p50<=50ms"


def _text(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, allow_nan=False, sort_keys=True)


def _old_frames(ts: TraceSet) -> tuple[pd.DataFrame, pd.DataFrame]:
    return requests_to_frame(ts.measured()), traces_to_gap_frame(ts.requests)


def _old_findings(ts: TraceSet) -> str:
    """The findings JSON from the frames made of objects (what ``run_frames`` always built)."""
    requests, gaps = _old_frames(ts)
    levels = level_frame(ts, requests=requests, gaps=gaps)
    frames = RunFrames(
        complete_facts(ts.manifest),
        levels,
        server_level_frame(ts, requests=requests) if len(levels) else None,
        requests=requests,
        gaps=gaps,
        server_log_stats=len(parse_server_log(ts.server_log).stats) if ts.server_log else 0,
    )
    return _text(findings_json(ts.run_id, analyze_frames(frames)))


def assert_same_numbers(folder: Path) -> None:
    remove_caches(folder)  # (an import of a large sweep has written one already)
    old = load_trace_set(folder, cache="off")
    written = load_trace_set(folder, cache="always")
    cached = load_trace_set(folder, cache="always")
    assert written.cache.written is not None, written.cache
    assert cached.cache.read is not None, cached.cache
    assert old.cache.read is None and old.cache.written is None
    requests, gaps = _old_frames(old)
    slos = parse_slos(SLO)
    want = _text(summarize(old, levels=level_frame(old, requests=requests, gaps=gaps)))
    want_slo = _text(
        summarize(old, slos=slos, levels=level_frame(old, slos=slos, requests=requests, gaps=gaps))
    )
    want_findings = _old_findings(old)
    for new in (written, cached):
        assert not new.has_objects  # the summary below must not need the objects
        assert _text(summarize(new)) == want, folder.name
        assert _text(summarize(new, slos=slos)) == want_slo, folder.name
        assert not new.has_objects
        pd.testing.assert_frame_equal(request_frame(new), requests)
        pd.testing.assert_frame_equal(gap_frame(new), gaps)
        assert _text(findings_json(new.run_id, analyze_run(new))) == want_findings, folder.name
        assert new.problems == old.problems
        assert new.requests == old.requests  # the objects, made from the columns, are the same


SAMPLES = [p.name for p in discover_trace_sets(ROOT / "traces")]


@pytest.mark.parametrize("name", SAMPLES)
def test_every_sample_gives_the_same_numbers_from_its_cache(name: str, tmp_path: Path) -> None:
    folder = shutil.copytree(ROOT / "traces" / name, tmp_path / name)
    assert_same_numbers(folder)


def test_the_summary_command_prints_the_same_json_from_the_cache(tmp_path: Path) -> None:
    folder = shutil.copytree(ROOT / "traces" / SAMPLES[0], tmp_path / "s")
    before = run_cli("summary", str(folder), "--format", "json")
    run_cli("compact", str(folder))  # writes the cache
    assert load_trace_set(folder).cache.read is not None
    assert run_cli("summary", str(folder), "--format", "json") == before


@pytest.mark.slow
def test_every_real_sweep_gives_the_same_numbers_from_its_cache(tmp_path: Path) -> None:
    sweeps = real_sweeps()
    if not sweeps:
        message = f"no real sweep under {PEERS} or {CORPUS} (set SWEEPER_SHARED)"
        if require_peers():
            pytest.fail(message)
        pytest.skip(message)
    for kind, source in sweeps:
        run_cli("import", kind, str(source), "--out", str(tmp_path), "--run-id", source.name)
        assert_same_numbers(tmp_path / source.name)
