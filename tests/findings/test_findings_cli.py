"""``sweeper findings`` through click's CliRunner, on trace sets written by the real writer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from sweeper.cli import cli
from sweeper.findings import FINDING_IDS, TAIL_CAUSES
from sweeper.schema import Fact, ServerConfig
from tests.findings.sim import write_simulated_run


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    config = ServerConfig(
        enable_chunked_prefill=Fact(value=True, source="log"),
        max_num_batched_tokens=Fact(value=256, source="log"),
        kv_cache_tokens=Fact(value=262_144, source="log"),
        max_num_seqs=Fact(value=256, source="user"),
    )
    return write_simulated_run(
        tmp_path_factory.mktemp("traces"), "sim-run", [1, 2, 4, 8], config=config
    )


def invoke(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_json_contract(run_dir: Path) -> None:
    doc = json.loads(invoke("findings", str(run_dir), "--format", "json"))
    assert doc["run_id"] == "sim-run"
    assert [f["id"] for f in doc["findings"]] == list(FINDING_IDS)
    by_id = {f["id"]: f for f in doc["findings"]}
    for f in doc["findings"]:
        assert f["severity"] in {"info", "notice", "warning", "critical", "unknown"}
        assert f["text"]["en"] and f["text"]["zh"]
        assert isinstance(f["levels"], list) and isinstance(f["numbers"], dict)
    assert by_id["tail_cause"]["numbers"]["cause"] in TAIL_CAUSES
    assert by_id["tail_cause"]["numbers"]["cause"] == "chunked_prefill"
    # capacity / (input + output) = 262,144 / (1,000 + 64)
    assert by_id["kv_ceiling"]["numbers"]["ceiling"] == 262_144 // 1_064


def test_text_in_chinese_with_run_id_lookup(run_dir: Path) -> None:
    out = invoke("findings", "sim-run", "--traces", str(run_dir.parent), "--lang", "zh")
    assert "[!! warning] tail_cause" in out
    assert (
        "chunked prefill" in out and "这不是抢占" not in out
    )  # no metrics: preemption not ruled out
    assert "真实并发上限" in out or "最多同时容纳" in out


def test_user_slo(run_dir: Path) -> None:
    doc = json.loads(
        invoke("findings", str(run_dir), "--format", "json", "--slo", "ttft_p99<=100s,itl_p50<=1s")
    )
    rec = next(f for f in doc["findings"] if f["id"] == "recommended")
    assert rec["numbers"]["slo_source"] == "user"
    assert rec["numbers"]["slo"] == ["ttft_p99<=100s", "itl_p50<=1s"]
    assert rec["numbers"]["concurrency"] == 8


def test_bad_slo_is_a_one_line_error(run_dir: Path) -> None:
    result = CliRunner().invoke(cli, ["findings", str(run_dir), "--slo", "ttft_p99<=2s,latency<3"])
    assert result.exit_code == 1
    assert "bad SLO term 'latency<3'" in result.output
    assert "Traceback" not in result.output


def test_unknown_run_is_a_one_line_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["findings", "nope", "--traces", str(tmp_path)])
    assert result.exit_code == 1
    assert "no trace set named 'nope'" in result.output
