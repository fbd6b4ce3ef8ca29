"""A real recording stopped half-way and resumed, end to end: ``sweeper record`` against the
scripted server over loopback is cancelled during C=2 (as Ctrl-C does); ``summary``,
``findings`` and the page say the run is incomplete, which levels are missing and the command
that finishes it; that command, run after a pause, finishes it, and the pause is not counted in
the level's duration."""

from __future__ import annotations

import asyncio
import json
import shlex
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from sweeper.cli import cli
from sweeper.record import RecordConfig, RequestCount
from sweeper.record.recorder import arecord_sweep
from sweeper.report.pagecheck import page_defects
from sweeper.report.pages import render_run_page
from sweeper.report.run_report import collect_run
from sweeper.store import load_trace_set
from sweeper.testing.server import run_server

PAUSE_S = 1.5


def _invoke(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def _interrupt(config: RecordConfig, folder: Path, after: int) -> None:
    async def run() -> None:
        task = asyncio.create_task(arecord_sweep(config))
        requests = folder / "requests.jsonl"
        while not (requests.exists() and requests.read_text().count('"concurrency":2') >= after):
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())


def test_an_interrupted_recording_says_so_until_it_is_resumed(tmp_path: Path) -> None:
    out = tmp_path / "traces"
    folder = out / "cut"
    with run_server(ttft_ms=1, itl_ms=20) as server:
        config = RecordConfig(
            base_url=server.base_url, input_len=8, output_len=6, concurrency=[1, 2, 4],
            warmup=0, requests_per_level=RequestCount(fixed=8), out=out, run_id="cut",
            scrape_interval_s=0.05,
        )  # fmt: skip
        _interrupt(config, folder, after=3)

        summary = json.loads(_invoke("summary", str(folder), "--format", "json"))
        assert summary["complete"] is False and summary["missing_levels"] == [4]
        [short] = summary["cut_short"]
        assert (short["concurrency"], short["status"]) == (2, "interrupted")
        assert short["measured"] < 8
        command = summary["resume_command"]
        assert command == f"sweeper record --resume --run-id cut --out {out}"
        findings = _invoke("findings", str(folder))
        assert findings.startswith("[!! incomplete] run") and command in findings
        run = collect_run(load_trace_set(folder))
        for lang in ("en", "zh"):
            page = render_run_page(run, lang)
            assert "sweeper-cards" in page and page_defects(page) == [], lang
        assert "This run is incomplete" in render_run_page(run, "en")

        time.sleep(PAUSE_S)
        words = shlex.split(command)
        assert words[:3] == ["sweeper", "record", "--resume"]
        result = CliRunner().invoke(cli, words[1:], catch_exceptions=False)
        assert result.exit_code == 0, result.output

    summary = json.loads(_invoke("summary", str(folder), "--format", "json"))
    assert summary["complete"] is True and summary["resume_command"] is None
    level = next(lv for lv in summary["levels"] if lv["concurrency"] == 2)
    assert level["requests"] == 8
    assert level["paused_s"] >= PAUSE_S  # left out of the duration
    assert level["inflight_max"] <= 2
    page = render_run_page(collect_run(load_trace_set(folder)), "en")
    assert "This run is incomplete" not in page and "C=2 stood still for" in page
    assert page_defects(page) == []
