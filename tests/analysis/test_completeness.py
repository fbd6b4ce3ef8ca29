"""A run that did not measure what it planned says so: the levels never run, the levels cut
short, and (for sweeper's own recordings) the command that finishes it."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from click.testing import CliRunner

from sweeper.analysis.completeness import completeness
from sweeper.cli import cli
from sweeper.schema import LevelStatus, Source
from sweeper.store import TraceSet, load_trace_set
from sweeper.testing.factories import SyntheticLevel, write_synthetic_run
from tests.analysis.interrupted import write_interrupted_run


def test_a_finished_sweep_is_complete(tmp_path: Path) -> None:
    folder = write_synthetic_run(
        tmp_path, "done", [SyntheticLevel(1, 30, 10), SyntheticLevel(2, 30, 10)]
    )
    done = completeness(load_trace_set(folder))
    assert done.complete and done.missing_levels == [] and done.cut_short == []
    assert done.resume_command is None


def test_an_interrupted_recording_names_its_gaps_and_how_to_finish(tmp_path: Path) -> None:
    ts: TraceSet = load_trace_set(write_interrupted_run(tmp_path / "traces", "cut"))
    done = completeness(ts)
    assert not done.complete and done.run_status == "incomplete"
    assert done.missing_levels == [4, 8]
    [short] = done.cut_short
    assert (short.concurrency, short.measured, short.planned, short.status) == (
        2,
        7,
        16,
        "interrupted",
    )
    assert shlex.split(done.resume_command or "") == [
        "sweeper",
        "record",
        "--resume",
        "--run-id",
        "cut",
        "--out",
        str(tmp_path / "traces"),
    ]
    sentence = done.sentence()
    assert "C=4, C=8" in sentence and "C=2 cut short (7 of 16" in sentence
    assert "sweeper record --resume --run-id cut" in sentence


def test_an_import_is_never_told_to_resume(tmp_path: Path) -> None:
    folder = write_interrupted_run(tmp_path, "imp")
    ts = load_trace_set(folder)
    ts.manifest.source = Source(tool="aiperf")
    done = completeness(ts)
    assert not done.complete and done.resume_command is None


def test_a_level_marked_complete_with_fewer_requests_than_planned_is_cut_short(
    tmp_path: Path,
) -> None:
    folder = write_synthetic_run(tmp_path, "few", [SyntheticLevel(1, 30, 10, requests=8)])
    ts = load_trace_set(folder)
    ts.manifest.workload.requests_per_level["1"] = 10
    ts.manifest.levels = [LevelStatus(concurrency=1, status="complete")]
    assert completeness(ts).complete  # another tool's plan is what it wrote
    ts.manifest.source = Source(tool="sweeper record")  # sweeper's own: 2 requests are missing
    [short] = completeness(ts).cut_short
    assert (short.measured, short.planned) == (8, 10)


def test_findings_say_first_that_the_run_is_incomplete(tmp_path: Path) -> None:
    folder = write_interrupted_run(tmp_path / "traces", "cut")
    text = CliRunner().invoke(cli, ["findings", str(folder)], catch_exceptions=False)
    assert text.exit_code == 0, text.output
    assert text.output.startswith("[!! incomplete] run\nThis run is incomplete")
    assert "sweeper record --resume --run-id cut" in text.output.splitlines()[1]
    as_json = CliRunner().invoke(cli, ["findings", str(folder), "--format", "json"])
    assert as_json.exit_code == 0
    assert "Warning: This run is incomplete" in as_json.stderr
    assert json.loads(as_json.stdout)["run_id"] == "cut"
