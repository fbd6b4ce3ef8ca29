"""What a run's page rests on (sweeper.report.run_report): one rule for the tokens of a request,
shared with the findings, so the KV chart and the kv_ceiling finding never disagree."""

from __future__ import annotations

import shutil
from pathlib import Path

from sweeper.report import site
from sweeper.report.run_report import collect_run, tokens_per_request
from sweeper.schema import Fact, ServerConfig
from sweeper.store import load_trace_set, write_trace_set
from sweeper.testing.factories import SyntheticLevel, synthetic_manifest, synthetic_requests

LEVELS = [SyntheticLevel(1, 50, 10), SyntheticLevel(4, 60, 12)]


def _run_without_asked_lengths(root: Path) -> Path:
    """An imported-like run: the workload does not say the lengths, and the levels' measured
    prompt lengths differ (C=1: 1,000 tokens, C=4: 3,000), so a mean and a max disagree."""
    config = ServerConfig(kv_cache_tokens=Fact(value=40_000, source="log"))
    manifest = synthetic_manifest(
        "no-lengths", LEVELS, input_len=1000, output_len=64, config=config
    )
    manifest.workload.input_len = None
    manifest.workload.output_len = None
    requests = synthetic_requests(LEVELS, input_len=1000, output_len=64)
    for trace in requests:
        if trace.concurrency == 4:
            trace.prompt_tokens = 3000
    return write_trace_set(root / "no-lengths", manifest, requests)


def test_the_kv_chart_and_the_kv_ceiling_use_the_same_tokens_per_request(tmp_path: Path) -> None:
    run = collect_run(load_trace_set(_run_without_asked_lengths(tmp_path)))
    ceiling = run.known("kv_ceiling")
    assert ceiling is not None
    per_request = tokens_per_request(run)
    # The mean of the levels' measured lengths: (1,000 + 3,000) / 2 in, 64 out.
    assert per_request == 2000 + 64
    assert ceiling.numbers["tokens_per_request"] == per_request
    assert ceiling.numbers["ceiling"] == 40_000 // per_request


def test_a_change_anywhere_in_the_package_invalidates_cached_pages(tmp_path: Path) -> None:
    assert site.PACKAGE_DIR.name == "sweeper" and (site.PACKAGE_DIR / "findings").is_dir()
    package = tmp_path / "sweeper"
    shutil.copytree(site.PACKAGE_DIR, package, ignore=shutil.ignore_patterns("__pycache__"))
    before = site.code_fingerprint(package)
    assert site.code_fingerprint(package) == before
    for changed in ("findings/cause.py", "analysis/frames.py", "locale/zh/LC_MESSAGES/pages.po"):
        path = package / changed
        path.write_text(path.read_text() + "\n")
        after = site.code_fingerprint(package)
        assert after != before, changed
        before = after


def test_a_run_held_as_columns_gets_its_page_data_without_objects(tmp_path: Path) -> None:
    """A large trace set loaded as columns stays columns through a page's data: only the failed
    requests become objects (for the failures table), and the groups are those of the objects."""
    from sweeper.report.run_report import failure_groups
    from sweeper.testing.factories import write_synthetic_run

    levels = [SyntheticLevel(1, 50, 10, requests=12), SyntheticLevel(4, 60, 12, failures=3)]
    folder = write_synthetic_run(tmp_path, "failing", levels, output_len=32)
    ts = load_trace_set(folder, cache="always")
    assert not ts.has_objects
    data = collect_run(ts)
    assert not ts.has_objects
    groups = failure_groups(load_trace_set(folder, cache="off"))
    assert sum(g.count for g in groups) == 3
    assert groups == failure_groups(ts) == data.failures
