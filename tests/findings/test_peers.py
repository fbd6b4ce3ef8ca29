"""Findings on the peers' real data sets (../shared/data/peers), imported with ``sweeper import``:
they run without error and say what they cannot conclude."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests._peers import AIPERF_011, AIPERF_08, LLMPERF, peer, run_cli


def findings_of(kind: str, name: str, out: Path, *extra: str) -> dict[str, dict[str, Any]]:
    run_cli("import", kind, str(peer(name)), "--out", str(out), "--run-id", name[:60], *extra)
    doc = json.loads(run_cli("findings", str(out / name[:60]), "--format", "json"))
    found = {f["id"]: f for f in doc["findings"]}
    for f in found.values():
        assert "could not be computed" not in f["text"]["en"], f  # no rule tripped over the data
        if f["severity"] == "unknown":
            assert f["missing"], f  # an unknown always says what it lacks
    return found


@pytest.fixture(scope="module")
def llmperf(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return findings_of("llmperf", LLMPERF, tmp_path_factory.mktemp("t"))


@pytest.fixture(scope="module")
def aiperf_011(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return findings_of("aiperf", AIPERF_011, tmp_path_factory.mktemp("t"))


@pytest.fixture(scope="module")
def aiperf_08(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return findings_of("aiperf", AIPERF_08, tmp_path_factory.mktemp("t"), "--gpu", "MI355X")


def test_llmperf_per_request_only(llmperf: dict[str, dict[str, Any]]) -> None:
    # Per-request sums only: no ITL, so no tail and no cause; no server data; no GPU given.
    assert llmperf["itl_tail"]["severity"] == "unknown"
    assert "per-request" in llmperf["itl_tail"]["text"]["en"]
    assert llmperf["tail_cause"]["numbers"]["cause"] == "unknown"
    assert llmperf["kv_ceiling"]["severity"] == "unknown"
    assert llmperf["client_health"]["severity"] == "unknown"
    assert any("--gpu" in m for m in llmperf["roofline"]["missing"])
    # What it can say: the curve (1 to 64, 4xA10G) and per-request speed.
    assert llmperf["knee"]["numbers"]["between"] is not None
    assert llmperf["scaling"]["numbers"]["speedup_max"] > 1
    assert llmperf["long_input"]["numbers"]["speed_drop"] > 0.5
    # The ITL service levels are dropped (no data), the TTFT one is kept.
    assert llmperf["recommended"]["numbers"]["slo_dropped"] == ["itl_p50<=50ms"]


def test_aiperf_011_one_level(aiperf_011: dict[str, dict[str, Any]]) -> None:
    # One level (C=100): no single stream, no curve.
    for fid in ("scaling", "knee", "long_input"):
        assert aiperf_011[fid]["severity"] == "unknown"
    assert "concurrency-1" in " ".join(aiperf_011["roofline"]["missing"])
    assert aiperf_011["itl_tail"]["numbers"]["opens_at"] == 100
    # The trace alone shows the stalls are shared and sit in other requests' prefills; the missing
    # preemption counter is named.
    cause = aiperf_011["tail_cause"]
    assert cause["numbers"]["synchronized_gap_share"] > 0.5
    assert any("preemption" in m for m in cause["missing"])


def test_aiperf_08_sweep_with_server_data(aiperf_08: dict[str, dict[str, Any]]) -> None:
    # The vLLM log gives the KV pool (480,800 tokens) and chunked prefill; the MI355X and
    # MiniMax-M2.5 tables give the roofline.
    assert aiperf_08["kv_ceiling"]["numbers"]["capacity_tokens"] == 480_800
    assert aiperf_08["tail_cause"]["numbers"]["chunked_prefill"] is True
    assert aiperf_08["tail_cause"]["numbers"]["cause"] in {"preemption", "chunked_prefill"}
    assert aiperf_08["roofline"]["numbers"]["bandwidth_gb_s"] == 8000
    assert aiperf_08["itl_tail"]["numbers"]["opens_at"] == 8
    assert aiperf_08["long_input"]["numbers"]["long_input"] is True
    assert aiperf_08["long_input"]["numbers"]["attribution_source"] == "server"
