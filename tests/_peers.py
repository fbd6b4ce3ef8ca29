"""Where the peer data sets live, and helpers to import them through the real CLI (shared by the
importers, findings and serverlog tests).

The data (real results of AIPerf and LLMPerf, see ../shared/data/peers/README.md) is read at test
time from ``$SWEEPER_SHARED/data/peers`` (default: ``../shared`` beside the repository), never
copied into the repository. Without it the oracle tests are skipped, except where the data is
known to be there (``.ci/run`` sets ``SWEEPER_REQUIRE_PEERS=1``): there a missing data set is a
failure. A GitHub checkout has no shared folder, so the workflow does not set it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sweeper.cli import cli

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("SWEEPER_SHARED", ROOT / ".." / "shared")).resolve()
PEERS = SHARED / "data" / "peers"
CORPUS = SHARED / "data" / "corpus"

AIPERF_011 = "aiperf-0.1.1-gpt-oss-20b-c100"
AIPERF_08 = "aiperf-0.8-minimax-m2.5-fp8-mi355x-vllm-tp1"
LLMPERF = "llmperf-yi-1.5-34b-4xa10g-vllm"


KIMI = "aiperf-0.8-kimi-k2.5-fp4-mi355x-vllm-tp4"
QWEN35 = "aiperf-0.8-qwen3.5-fp8-mi355x-sglang-tp4"


def corpus(name: str) -> Path:
    """The folder of one corpus sweep (../shared/data/corpus), or skip (fail under CI)."""
    return peer(name, root=CORPUS)


def peer(name: str, *, root: Path = PEERS) -> Path:
    """The folder of one peer data set, or skip (fail under CI) when it is not there."""
    path = root / name
    if not path.is_dir():
        message = f"peer data set {path} not found (set SWEEPER_SHARED to the shared folder)"
        if require_peers():
            pytest.fail(message)
        pytest.skip(message)
    return path


def require_peers() -> bool:
    """Whether a missing peer data set must fail the tests rather than skip them."""
    return bool(os.environ.get("SWEEPER_REQUIRE_PEERS"))


def run_cli(*args: str) -> str:
    """Run ``sweeper ARGS`` through click's CliRunner; fail with its output unless it exits 0."""
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def import_and_summarize(
    kind: str, paths: list[Path], out: Path, run_id: str, *extra: str
) -> dict[str, Any]:
    """``sweeper import`` then ``sweeper summary --format json``: the parsed summary."""
    run_cli("import", kind, *map(str, paths), "--out", str(out), "--run-id", run_id, *extra)
    return json.loads(run_cli("summary", str(out / run_id), "--format", "json"))


def level(summary: dict[str, Any], concurrency: int) -> dict[str, Any]:
    return next(lv for lv in summary["levels"] if lv["concurrency"] == concurrency)
