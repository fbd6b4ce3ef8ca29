"""Bad input: a file of another kind, a truncated file, a missing field. Each is one
ImportFormatError naming the file (and line or key) and what was expected, a one-line error from
the CLI, and nothing written into the traces folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from sweeper.cli import cli
from sweeper.errors import ImportFormatError
from sweeper.importers import import_run
from tests._peers import AIPERF_011, LLMPERF, peer


def nothing_written(out: Path) -> bool:
    return not out.exists() or not any(out.iterdir())


def copy_aiperf(tmp_path: Path) -> Path:
    folder = tmp_path / "aiperf"
    shutil.copytree(peer(AIPERF_011), folder)
    return folder


def test_llmperf_results_given_as_aiperf(tmp_path: Path) -> None:
    out = tmp_path / "traces"
    with pytest.raises(ImportFormatError, match=r"no profile_export\.jsonl"):
        import_run("aiperf", [peer(LLMPERF) / "c4"], out=out)
    assert nothing_written(out)


def test_aiperf_results_given_as_llmperf(tmp_path: Path) -> None:
    with pytest.raises(ImportFormatError, match=r"_individual_responses\.json"):
        import_run("llmperf", [peer(AIPERF_011) / "profile_export.jsonl"], out=tmp_path / "t")


def test_aiperf_summary_given_as_vllm_bench(tmp_path: Path) -> None:
    path = peer(AIPERF_011) / "profile_export_aiperf.json"
    with pytest.raises(ImportFormatError) as info:
        import_run("vllm-bench", [path], out=tmp_path / "t")
    assert str(path) in str(info.value) and "'duration'" in str(info.value)


def test_llmperf_file_given_as_guidellm(tmp_path: Path) -> None:
    path = next((peer(LLMPERF) / "c1").glob("*_summary.json"))
    with pytest.raises(ImportFormatError, match="'benchmarks'"):
        import_run("guidellm", [path], out=tmp_path / "t")


def test_truncated_aiperf_records_name_file_and_line(tmp_path: Path) -> None:
    folder = copy_aiperf(tmp_path)
    records = folder / "profile_export.jsonl"
    data = records.read_bytes()
    records.write_bytes(data[: len(data) - 2000])  # killed half-way through the last record
    out = tmp_path / "traces"
    with pytest.raises(ImportFormatError) as info:
        import_run("aiperf", [folder], out=out)
    lines = data[: len(data) - 2000].count(b"\n") + 1
    message = str(info.value)
    assert str(records) in message and f"line {lines}" in message and "truncated" in message
    assert nothing_written(out)


def test_missing_field_names_file_line_and_key(tmp_path: Path) -> None:
    folder = copy_aiperf(tmp_path)
    records = folder / "profile_export.jsonl"
    lines = records.read_text().splitlines()
    broken = json.loads(lines[20])
    del broken["metadata"]
    lines[20] = json.dumps(broken)
    records.write_text("\n".join(lines) + "\n")
    with pytest.raises(ImportFormatError) as info:
        import_run("aiperf", [folder], out=tmp_path / "t")
    assert "line 21" in str(info.value) and "'metadata'" in str(info.value)


def test_truncated_llmperf_json(tmp_path: Path) -> None:
    src = peer(LLMPERF) / "c2"
    level = tmp_path / "c2"
    shutil.copytree(src, level)
    responses = next(level.glob("*_individual_responses.json"))
    responses.write_text(responses.read_text()[:-300])
    with pytest.raises(ImportFormatError, match="truncated"):
        import_run("llmperf", [level], out=tmp_path / "t")


def test_cli_reports_one_line_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "traces"
    result = CliRunner().invoke(cli, ["import", "aiperf", str(peer(LLMPERF)), "--out", str(out)])
    assert result.exit_code == 1
    assert result.output.startswith("Error: ") and result.output.count("\n") == 1
    assert "Traceback" not in result.output
    assert nothing_written(out)


def test_existing_run_id_is_refused_and_kept(tmp_path: Path) -> None:
    out = tmp_path / "traces"
    first = import_run("llmperf", [peer(LLMPERF) / "c1"], out=out, run_id="same")
    before = (first / "manifest.json").read_text()
    with pytest.raises(Exception, match="already exists"):
        import_run("llmperf", [peer(LLMPERF) / "c2"], out=out, run_id="same")
    assert (first / "manifest.json").read_text() == before
    assert [p.name for p in out.iterdir()] == ["same"]


def test_cli_options_reach_the_manifest(tmp_path: Path) -> None:
    """--server-log is parsed and copied, --gpu / --gpu-count looked up, --label kept."""
    from sweeper.store import load_trace_set

    log = peer("aiperf-0.8-minimax-m2.5-fp8-mi355x-vllm-tp1") / "conc8" / "server.log"
    out = tmp_path / "traces"
    result = CliRunner().invoke(
        cli,
        [
            "import",
            "llmperf",
            str(peer(LLMPERF) / "c4"),
            "--out",
            str(out),
            "--run-id",
            "yi",
            "--server-log",
            str(log),
            "--gpu",
            "A10G",
            "--gpu-count",
            "4",
            "--label",
            "note=peer",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    ts = load_trace_set(out / "yi")
    assert ts.server_log == log.read_text(encoding="utf-8", errors="replace")
    config = ts.manifest.server.config
    assert config.kv_cache_tokens is not None and config.kv_cache_tokens.source == "log"
    assert ts.manifest.hardware.gpu_count is not None and ts.manifest.hardware.gpu_count.value == 4
    assert ts.manifest.labels == {"note": "peer"}
    assert ts.manifest.source.tool == "llmperf" and ts.manifest.source.fidelity == "per_request"


def test_import_out_under_a_file_is_one_line(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from sweeper.cli import cli

    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    result = CliRunner().invoke(
        cli, ["import", "aiperf", str(tmp_path), "--out", str(blocker / "traces")]
    )
    assert result.exit_code == 1
    assert f"--out {blocker / 'traces'} is under {blocker}, a file, not a folder" in result.output
    assert "Traceback" not in result.output


def test_build_out_under_a_file_is_one_line(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from sweeper.cli import cli

    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    (tmp_path / "traces").mkdir()
    result = CliRunner().invoke(
        cli, ["build", "--traces", str(tmp_path / "traces"), "--out", str(blocker / "md")]
    )
    assert result.exit_code == 1
    assert f"--out {blocker / 'md'} is under {blocker}, a file, not a folder" in result.output
