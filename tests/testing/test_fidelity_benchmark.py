"""Smoke test of benchmarks/recorder_fidelity.py: a tiny sweeper-only run, checked for sense.

The full benchmark (every peer, up to 1024 streams) is not part of the suite; this runs the same
code path end to end at two small levels."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "recorder_fidelity.py"


@pytest.mark.slow
def test_quick_sweeper_run(tmp_path: Path) -> None:
    out = tmp_path / "fidelity.json"
    result = subprocess.run(
        [
            sys.executable,
            SCRIPT,
            "--quick",
            "--levels",
            "1,4",
            "--output-len",
            "8",
            "--itl-ms",
            "5",
            "--ttft-ms",
            "10",
            "--out",
            out,
            "--keep",
            tmp_path / "work",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "Fidelity at 5 ms per token" in result.stdout
    data = json.loads(out.read_text())
    rows = data["rows"]
    assert [(r["tool"], r["concurrency"]) for r in rows] == [("sweeper", 1), ("sweeper", 4)]
    for row in rows:
        assert row["error"] is None
        assert row["truth_requests"] == row["requests"] == 32
        assert row["truth_chunks"] == 32 * 8
        # sweeper matched every chunk to a server write, on the same clock (never before it)
        assert row["delivery"]["chunks"] == 32 * 8
        assert row["delivery"]["negative"] == 0
        assert 4 < row["truth_itl_p50_ms"] < 7  # the server's own 5 ms schedule
        assert row["tool_itl_p50_ms"] > 0 and row["tool_ttft_p50_ms"] > 0
        assert "loop_lag" in row and isinstance(row["flagged"], bool)
        assert row["cpu_us_per_token"] > 0
        if sys.platform == "linux":  # the raw client's chunk times are the kernel's
            assert row["stamps"]["source"] == "kernel"
            assert row["stamps"]["chunks"] == 32 * 8
    assert set(data["summary"]["sustained_tok_s"]["itl"]["sweeper"]) == {
        "best",
        "contiguous",
        "strict",
    }
    assert all(isinstance(c["agrees"], bool) for c in data["summary"]["self_check"])


def _benchmark_module() -> object:
    """benchmarks/recorder_fidelity.py as a module (it imports its ``fidelity`` package from
    its own folder)."""
    import importlib.util

    sys.path.insert(0, str(SCRIPT.parent))
    try:
        spec = importlib.util.spec_from_file_location("recorder_fidelity", SCRIPT)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return module


def _row(tool: str, concurrency: int, tok_s: float, ttft_err: float, cpu: float) -> dict:
    return {
        "tool": tool, "itl_ms": 10.0, "concurrency": concurrency, "error": None,
        "token_rate": tok_s, "err_ttft_p99_ms": ttft_err, "err_itl_p99_ms": 0.1,
        "cpu_us_per_token": cpu,
    }  # fmt: skip


def test_the_summary_sets_sweeper_against_vllm_bench_level_by_level() -> None:
    """Issue 17's ratios: per level both ran, sweeper's token rate over vllm bench's, each
    one's TTFT p99 error (the goal: rate ratio >= 1 and |TTFT p99 error| no larger), ITL p99
    error and CPU per token; a level only one tool ran is left out."""
    bench = _benchmark_module()
    rows = [
        _row("sweeper", 256, 20_000, 100.0, 14.0),
        _row("vllm bench", 256, 16_000, 300.0, 31.0),
        _row("sweeper", 512, 18_000, 900.0, 13.0),
        _row("vllm bench", 512, 20_000, 400.0, 30.0),
        _row("sweeper", 1024, 18_000, 900.0, 13.0),
    ]
    items = bench.versus(rows)  # type: ignore[attr-defined]
    assert [(i["concurrency"], i["goal"]) for i in items] == [(256, True), (512, False)]
    first = items[0]
    assert first["tok_s_ratio"] == 1.25
    assert first["ttft_p99_error_ms"] == (100.0, 300.0)
    assert first["cpu_us_per_token"] == (14.0, 31.0)
    assert bench.summarize(rows)["versus"] == items  # type: ignore[attr-defined]


def test_a_child_that_exits_keeps_its_cpu_in_the_tree_total() -> None:
    """The CPU total of a tool's process tree never falls when a child exits: a live-only sum
    did, and a level's CPU per token came out negative (CI, 2026-12-03: -5.4 us)."""
    import psutil

    sys.path.insert(0, str(SCRIPT.parent))
    try:
        from fidelity.tools import TreeCpu
    finally:
        sys.path.remove(str(SCRIPT.parent))
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"
    parent = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess, sys, time; "
         f"subprocess.run([sys.executable, '-c', {burn!r}]); time.sleep(1.0)"]
    )  # fmt: skip
    try:
        root = psutil.Process(parent.pid)  # made once: the parent may exit between two samples
        tree = TreeCpu()
        totals = []
        while parent.poll() is None:
            totals.append(tree.sample(root))
            time.sleep(0.02)
    finally:
        parent.kill()
        parent.wait()
    assert totals == sorted(totals)
    assert totals[-1] >= 0.25  # the child's burn, counted after it exited
