"""The real GPU sweeps of ../shared/data/corpus, imported as a new user would: every level kept.

Some levels kept only AIPerf's summary (profile_export_aiperf.json) and lost their per-request
records: they are imported as summary-only levels (basis ``tool_summary``) whose numbers are
AIPerf's own, named in what the import prints and in the manifest's warnings."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests._peers import KIMI, QWEN35, corpus, level, run_cli


def _levels_on_disk(folder: Path) -> dict[int, bool]:
    """concurrency -> whether the level kept its per-request records."""
    out = {}
    for sub in folder.iterdir():
        if (sub / "profile_export_aiperf.json").is_file():
            config = json.loads((sub / "profile_export_aiperf.json").read_text())["input_config"]
            out[config["loadgen"]["concurrency"]] = (sub / "profile_export.jsonl").is_file()
    return out


@pytest.mark.parametrize("name", [KIMI, QWEN35])
def test_every_level_is_kept(name: str, tmp_path: Path) -> None:
    folder = corpus(name)
    on_disk = _levels_on_disk(folder)
    assert not all(on_disk.values()), "the corpus sweep should have summary-only levels"
    printed = run_cli("import", "aiperf", str(folder), "--out", str(tmp_path), "--run-id", "r")
    summary = json.loads(run_cli("summary", str(tmp_path / "r"), "--format", "json"))
    assert [lv["concurrency"] for lv in summary["levels"]] == sorted(on_disk)
    summary_only = sorted(c for c, has_records in on_disk.items() if not has_records)
    where = ", ".join(f"C={c}" for c in summary_only)
    assert f"{where}: the tool's summary only" in printed
    assert f"Note: {where}: only AIPerf's own summary" in printed
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert any(w.startswith(f"{where}: only AIPerf's own summary") for w in manifest["warnings"])
    for concurrency, has_records in on_disk.items():
        row = level(summary, concurrency)
        if has_records:
            assert row["basis"] == "requests"
            continue
        tags = json.loads(
            (folder / f"conc{concurrency}" / "profile_export_aiperf.json").read_text()
        )
        assert row["basis"] == "tool_summary"
        assert row["output_throughput_tok_s"] == tags["output_token_throughput"]["avg"]
        assert row["duration_s"] == tags["benchmark_duration"]["avg"]
        assert row["ttft_ms"]["p99"] == tags["time_to_first_token"]["p99"]
        assert row["completed"] == tags["request_count"]["avg"]


def test_a_folder_with_neither_file_is_named(tmp_path: Path) -> None:

    source = corpus(QWEN35)
    sweep = tmp_path / "sweep"
    for sub in ("conc8", "conc16"):
        shutil.copytree(source / sub, sweep / sub)
    (sweep / "notes").mkdir()
    (sweep / "notes" / "README").write_text("not a level")
    printed = run_cli("import", "aiperf", str(sweep), "--out", str(tmp_path), "--run-id", "r")
    assert f"Note: skipped {sweep / 'notes'}: neither profile_export.jsonl nor" in printed
    assert "at concurrency 8, 16 (C=16: the tool's summary only)" in printed


def test_an_llmperf_level_folder_without_responses_is_named(tmp_path: Path) -> None:
    from tests._peers import LLMPERF, peer

    sweep = tmp_path / "sweep"
    shutil.copytree(peer(LLMPERF) / "c1", sweep / "c1")
    (sweep / "c2").mkdir()
    for summary in (peer(LLMPERF) / "c2").glob("*_summary.json"):
        shutil.copy(summary, sweep / "c2")
    printed = run_cli("import", "llmperf", str(sweep), "--out", str(tmp_path), "--run-id", "r")
    assert f"Note: skipped {sweep / 'c2'}: no *_individual_responses.json in it" in printed
