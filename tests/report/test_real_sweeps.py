"""The page check over real sites: the sample runs, every real GPU sweep under ../shared/data
(peers and corpus, imported here with sweeper's own importers), and the runs a reader most needs
explained (every request failed, none measured, a sweep stopped half-way, a level paused), built
by ``mkdocs build --strict`` in both languages. Any ``None``, ``nan``, ``inf``, ``{placeholder}``,
Python repr, "1 requests", script, empty card, path title or control character fails it.

The shared data is read in place (never copied into the repository); without it the real sweeps
are skipped, or fail where ``SWEEPER_REQUIRE_PEERS`` says it must be there (tests/_peers.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sweeper.analysis.summary import summarize
from sweeper.importers import IMPORTERS
from sweeper.report.pagecheck import page_defects
from sweeper.schema import RequestError, RequestTrace, Source
from sweeper.store import discover_trace_sets, load_trace_set, write_trace_set
from sweeper.testing.factories import SyntheticLevel, synthetic_manifest, synthetic_requests
from tests._peers import CORPUS, PEERS, require_peers, run_cli
from tests.analysis.interrupted import resumed_after_a_pause, write_interrupted_run
from tests.report.site_helpers import ROOT, copy_project_site, mkdocs_build

pytestmark = pytest.mark.slow

GENERATED = ("runs", "compare")
# The most a run page may weigh as MkDocs builds it (HTML; its charts' data is inline, once).
MAX_RUN_PAGE_KIB = 100


def real_sweeps() -> list[tuple[str, Path]]:
    """(importer kind, folder) of every data set under the peers and the corpus, the kind read
    from the folder's name (``aiperf-0.8-...``, ``llmperf-...``, ``vllm-bench-...``)."""
    found = []
    for root in (PEERS, CORPUS):
        if not root.is_dir():
            continue
        for folder in sorted(p for p in root.iterdir() if p.is_dir()):
            kind = next(
                (k for k in sorted(IMPORTERS, key=len, reverse=True) if folder.name.startswith(k)),
                None,
            )
            if kind is not None:
                found.append((kind, folder))
    return found


def _write_hard_runs(root: Path) -> None:
    """Every request failed; a sweep stopped half-way; a level paused for a minute and resumed."""
    levels = [SyntheticLevel(1, 30, 10, requests=4), SyntheticLevel(2, 30, 10, requests=4)]
    failed = [
        RequestTrace(
            concurrency=c,
            request_id=f"c{c}-{i}",
            send_ns=i * 10_000_000,
            end_ns=2_000_000,
            status="error",
            error=RequestError(kind="http", http_status=429, message="Too Many Requests"),
        )
        for c in (1, 2)
        for i in range(4)
    ]
    write_trace_set(root / "all-failed", synthetic_manifest("all-failed", levels), failed)
    write_interrupted_run(root, "interrupted")
    manifest = synthetic_manifest("paused", levels, output_len=32)
    manifest.source = Source(tool="sweeper record", version="test")
    requests = resumed_after_a_pause(
        synthetic_requests(levels, output_len=32), 1, after=2, pause_ns=60_000_000_000
    )
    write_trace_set(root / "paused", manifest, requests)


@pytest.fixture(scope="module")
def real_traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    sweeps = real_sweeps()
    if not sweeps:
        message = f"no real sweep under {PEERS} or {CORPUS} (set SWEEPER_SHARED)"
        if require_peers():
            pytest.fail(message)
        pytest.skip(message)
    traces = tmp_path_factory.mktemp("real-traces")
    for kind, folder in sweeps:
        run_cli("import", kind, str(folder), "--out", str(traces), "--run-id", folder.name)
    for folder in discover_trace_sets(ROOT / "traces"):
        shutil.copytree(folder, traces / folder.name)
    _write_hard_runs(traces)
    return traces


@pytest.fixture(scope="module")
def real_build(tmp_path_factory: pytest.TempPathFactory, real_traces: Path) -> Path:
    """The project's site built from ``real_traces``; returns the folder holding ``docs/``
    (the Markdown the plugin generated) and ``site/`` (the HTML)."""
    work = tmp_path_factory.mktemp("real-site")
    result = mkdocs_build(copy_project_site(work), work / "site", real_traces, "http://127.0.0.1/")
    assert result.returncode == 0, (
        f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    )
    return work


@pytest.fixture(scope="module")
def real_site(real_build: Path) -> Path:
    return real_build / "site"


def test_every_real_sweep_is_summarized_whole(real_traces: Path) -> None:
    """Its summary is JSON (no NaN) and complete; the findings run inside the strict build,
    which fails on any that could not be computed."""
    for kind, folder in real_sweeps():
        summary = summarize(load_trace_set(real_traces / folder.name))
        assert summary["levels"], folder.name
        json.dumps(summary, allow_nan=False)
        assert summary["complete"], (kind, folder.name, summary["notes"])


def test_every_built_page_is_clean_in_both_languages(real_site: Path, real_traces: Path) -> None:
    pages = [
        path
        for lang_root in (real_site, real_site / "zh")
        for top in GENERATED
        for path in sorted((lang_root / top).rglob("*.html"))
    ]
    runs = {folder.name for folder in discover_trace_sets(real_traces)}
    built = {p.parent.name for p in pages if p.parent.parent.name == "runs"}
    assert runs <= built, runs - built  # no run left out
    assert any(p.parts[-3:-1] == ("zh", "runs") for p in pages)
    defects = {
        str(path.relative_to(real_site)): found
        for path in pages
        if (found := page_defects(path.read_text(encoding="utf-8")))
    }
    assert defects == {}, json.dumps(defects, indent=1, ensure_ascii=False)


def test_every_generated_markdown_page_is_clean(real_build: Path) -> None:
    """The Markdown the plugin wrote (what ``sweeper build`` writes too), both languages."""
    docs = real_build / "docs"
    pages = [p for top in GENERATED for p in sorted((docs / top).rglob("*.md"))]
    assert any(p.name == "index.zh.md" for p in pages)
    defects = {
        str(path.relative_to(docs)): found
        for path in pages
        if (found := page_defects(path.read_text(encoding="utf-8")))
    }
    assert defects == {}, json.dumps(defects, indent=1, ensure_ascii=False)


def test_the_hard_runs_are_published_and_say_what_happened(real_site: Path) -> None:
    failed = (real_site / "runs" / "all-failed" / "index.html").read_text()
    assert "No request succeeded" in failed and "Too Many Requests" in failed
    cut = (real_site / "zh" / "runs" / "interrupted" / "index.html").read_text()
    assert "这次运行未完成" in cut and "--resume --run-id interrupted" in cut.replace("&#45;", "-")
    paused = (real_site / "runs" / "paused" / "index.html").read_text()
    assert "C=1 stood still for 60 s" in paused


def test_every_run_page_weighs_at_most_100_kib(real_site: Path, real_traces: Path) -> None:
    """Every run page of the sample runs, the hard runs and the real sweeps (a 6-level AIPerf
    sweep of ../shared/data/peers among them), in both languages, as MkDocs built it."""
    runs = {folder.name for folder in discover_trace_sets(real_traces)}
    pages = [
        page
        for lang_root in (real_site, real_site / "zh")
        for page in sorted((lang_root / "runs").glob("*/index.html"))
        if page.parent.name in runs
    ]
    assert {p.parent.name for p in pages} == runs
    six_levels = [
        folder.name
        for kind, folder in real_sweeps()
        if kind.startswith("aiperf")
        and folder.parent == PEERS
        and len(summarize(load_trace_set(real_traces / folder.name))["levels"]) >= 6
    ]
    assert six_levels, "no AIPerf sweep of 6 levels or more under the peers"
    weights = {str(p.relative_to(real_site)): p.stat().st_size / 1024 for p in pages}
    heavy = {page: f"{kib:.1f} KiB" for page, kib in weights.items() if kib > MAX_RUN_PAGE_KIB}
    assert heavy == {}, heavy
    for name in six_levels:
        assert f"runs/{name}/index.html" in weights and f"zh/runs/{name}/index.html" in weights
