"""benchmarks/read_path.py runs the recorder's real body path and checks what it counted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "read_path.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False
    )


def test_it_prints_a_row_per_stream_count_against_one_stream() -> None:
    result = _run("--streams", "1,3", "--tokens", "5", "--rounds", "2")
    assert result.returncode == 0, result.stderr
    rows = {
        int(m[1]): (float(m[2]), float(m[3]), float(m[4]))
        for m in re.finditer(r"^\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)x$", result.stdout, re.M)
    }
    assert sorted(rows) == [1, 3], result.stdout
    for low, median, ratio in rows.values():
        assert 0 < low <= median
        assert ratio > 0


def test_bad_counts_are_refused_with_the_options_named() -> None:
    result = _run("--streams", "0")
    assert result.returncode == 2
    assert "--streams" in result.stderr
