"""Smoke test of benchmarks/recorder_fidelity.py: a tiny sweeper-only run, checked for sense.

The full benchmark (every peer, up to 1024 streams) is not part of the suite; this runs the same
code path end to end at two small levels."""

from __future__ import annotations

import json
import subprocess
import sys
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
        if sys.platform == "linux":  # the raw client's chunk times are the kernel's
            assert row["stamps"]["source"] == "kernel"
            assert row["stamps"]["chunks"] == 32 * 8
    assert set(data["summary"]["sustained_tok_s"]["itl"]["sweeper"]) == {
        "best",
        "contiguous",
        "strict",
    }
    assert all(isinstance(c["agrees"], bool) for c in data["summary"]["self_check"])
