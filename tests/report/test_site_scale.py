"""A site for many runs: charts drawn once for both languages, one dataset block per run page
with its numbers rounded, the shared chart config in the site's script, pages rendered in worker
processes, the runs index grouped by model and GPU (sortable, filterable) and a navigation that
lists the groups, not every run."""

from __future__ import annotations

import gc
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sweeper.report import charts, site
from sweeper.report.markup import PageData, esc, round_rows
from sweeper.report.mkdocs_plugin import ASSETS_DIR, CHART_SCRIPT
from sweeper.report.pagecheck import page_defects
from sweeper.report.pages import render_run_page
from sweeper.report.run_report import collect_run
from sweeper.store import discover_trace_sets, load_trace_set
from sweeper.testing.factories import SyntheticLevel, write_synthetic_run
from tests.findings.openloop import write_rate_run
from tests.report.site_helpers import ROOT, page_specs, without_charts

SAMPLES = sorted(discover_trace_sets(ROOT / "traces"))


@pytest.mark.parametrize("folder", SAMPLES, ids=lambda p: p.name)
def test_a_chart_drawn_once_for_both_languages_gives_the_same_pages(folder: Path) -> None:
    """Drawn once with placeholders for its words and given each language's words after, a
    page is the page drawn in that language from the start (a rate run's level names differ
    between the languages: its charts are drawn again where their data differs)."""
    run = collect_run(load_trace_set(folder))
    for lang in ("en", "zh"):
        assert render_run_page(run, lang) == render_run_page(run, lang, shared=False), lang
    assert run.chart_specs  # the shared specs were used


def test_a_rate_run_in_both_languages_is_the_same_shared_or_not(tmp_path: Path) -> None:
    run = collect_run(load_trace_set(write_rate_run(tmp_path, "rate", [2.0, 8.0, float("inf")])))
    for lang in ("en", "zh"):
        assert render_run_page(run, lang) == render_run_page(run, lang, shared=False), lang


def test_a_run_page_holds_its_data_once_and_compact_specs() -> None:
    run = collect_run(load_trace_set(ROOT / "traces" / "small-vllm-cpu-default"))
    page = render_run_page(run, "en")
    assert page.count('class="sweeper-datasets"') == 1
    raw = re.findall(r"data-spec='([^']*)'", page)
    assert len(raw) == len(page_specs(page)) >= 6
    assert all("$schema" not in spec and '"config"' not in spec for spec in raw)
    assert "datasets" not in "".join(raw)
    # 15-digit floats are gone: latencies to 0.01 ms, times to 0.1 ms, shares to 6 digits
    data = re.search(r"data-datasets='([^']*)'", page)
    assert data is not None
    numbers = re.findall(r"(?<![\w.])-?\d+\.\d+", data.group(1))
    assert numbers and all(len(n.lstrip("-0.").replace(".", "")) <= 6 for n in numbers)
    # completed as the site's script completes them, every spec names data it has
    for spec in page_specs(page):
        assert spec["config"] == charts.SHARED_CONFIG and spec["datasets"]


def test_the_site_script_carries_the_shared_config() -> None:
    script = (ASSETS_DIR / CHART_SCRIPT).read_text()
    line = re.search(r"var SHARED_CONFIG = (\{.*\});", script)
    assert line is not None and json.loads(line.group(1)) == charts.SHARED_CONFIG


def test_numbers_are_rounded_to_what_they_mean() -> None:
    rows = round_rows(
        [
            {
                "ttft_ms": 38.123456789,
                "from_s": 1.23456789,
                "output_throughput_tok_s": 78.72199757068836,
                "efficiency": 0.987654321,
                "concurrency": 4,
                "series": "p50",
                "whole": 500.0,
                "needed_tokens": 123456.789,
            }
        ]
    )
    assert rows == [
        {
            "ttft_ms": 38.12,
            "from_s": 1.2346,
            "output_throughput_tok_s": 78.72,
            "efficiency": 0.9877,
            "concurrency": 4,
            "series": "p50",
            "whole": 500,
            "needed_tokens": 123456.79,
        }
    ]


def test_identical_datasets_are_kept_once_per_page() -> None:
    data = PageData()
    rows = [{"slo_ms": 500.0}]
    first = data.compact({"data": {"name": "a"}, "datasets": {"a": rows}})
    second = data.compact({"layer": [{"data": {"name": "b"}}], "datasets": {"b": list(rows)}})
    assert first["data"]["name"] == second["layer"][0]["data"]["name"] == "d1"
    assert data.datasets == {"d1": [{"slo_ms": 500}]}


def _runs(root: Path) -> Path:
    """Six runs on two models and two GPUs, one of them with a hostile model and GPU name."""
    hostile = "<img src=x onerror=alert(1)>"
    for i in range(6):
        folder = write_synthetic_run(
            root,
            f"run-{i}",
            [SyntheticLevel(1, 30 + i, 10), SyntheticLevel(4, 50 + i, 12)],
            output_len=16,
            labels={"team": f"t{i % 2}"},
            seed=i,
        )
        manifest = folder / "manifest.json"
        data = json.loads(manifest.read_text())
        data["model"]["name"] = hostile if i == 5 else f"model-{i % 2}"
        data["hardware"]["gpu_name"] = {"value": "H100" if i < 3 else "A10G", "source": "user"}
        manifest.write_text(json.dumps(data))
    return root


def test_the_index_groups_runs_by_model_and_gpu_with_sorting_and_filters(tmp_path: Path) -> None:
    pages = site.generate_pages(_runs(tmp_path))
    for lang in ("en", "zh"):
        index = pages[site.page_path("runs/index.md", lang)]
        assert page_defects(index) == []
        assert "<img" not in without_charts(index)  # the hostile name is text
        groups = re.findall(r"^## .* \{ \.sweeper-group #[a-z0-9-]+ \}$", index, re.M)
        assert len(groups) == 5  # (model-0, H100), (model-1, H100), (model-0, A10G), ...
        for key in ("date", "peak", "recommended"):
            assert f'data-sweeper-sort="{key}"' in index
        for facet in ("model", "gpu", "engine"):
            assert f'<select data-sweeper-facet="{facet}"' in index
        assert f'<option value="{esc("<img src=x onerror=alert(1)>")}">' in index
        # Every run once, linked by its URL (the table is HTML: Python-Markdown leaves it as is)
        assert index.count('<a data-sweeper-run href="run-') == 6
        assert index.count('href="run-0/"') == 1
        assert "search:\n  exclude: true" in index  # the run pages are what search finds
    nav = site.generated_nav(pages)
    assert nav[0] == "runs/index.md"
    assert not any(re.fullmatch(r"runs/run-\d/index\.md", p) for p in nav)
    group_pages = [p for p in nav if p.startswith("runs/groups/")]
    assert len(group_pages) == 5
    for path in group_pages:
        for lang in ("en", "zh"):
            page = pages[site.page_path(path, lang)]
            assert page_defects(page) == [] and 'href="../../run-' in page
    # A site without directory URLs links each run's index.html (as MkDocs would write it).
    files = site.generate_pages(_runs(tmp_path / "again"), directory_urls=False)
    for path, page in files.items():
        if path.startswith(("runs/index.", "runs/groups/")):
            assert 'href="run-' in page or 'href="../../run-' in page
            assert not re.search(r'data-sweeper-run href="[^"]*/"', page), path
            assert re.search(r'data-sweeper-run href="(\.\./\.\./)?run-\d/index\.html"', page)
    assert files["runs/run-0/index.md"] == pages["runs/run-0/index.md"]


def test_pages_rendered_in_worker_processes_are_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    traces = _runs(tmp_path / "traces")
    monkeypatch.setenv("SWEEPER_JOBS", "1")
    site._CACHE.clear()
    site._LAST.clear()
    serial = site.generate_pages(traces)
    monkeypatch.setenv("SWEEPER_JOBS", "2")
    site._CACHE.clear()
    site._LAST.clear()
    # The pool is forked only where no other thread runs: this process, if the suite left none.
    single = threading.active_count() == 1
    with caplog.at_level(logging.INFO, logger=site.log.name):
        parallel = site.generate_pages(traces, tmp_path / "cache")
    assert parallel == serial
    assert len(list((tmp_path / "cache").glob("*.pickle"))) == 6
    rendered_in_workers = "rendering 6 trace sets in 2 processes" in caplog.text
    assert rendered_in_workers == single


def _forget() -> None:
    """What a new process knows: only the disk's caches."""
    site._CACHE.clear()
    site._LAST.clear()
    site._TABLES.clear()


def _set_run(folder: Path, model: str, gpu: str, labels: dict[str, str] | None = None) -> None:
    manifest = folder / "manifest.json"
    data = json.loads(manifest.read_text())
    data["model"]["name"] = model
    data["hardware"]["gpu_name"] = {"value": gpu, "source": "user"}
    if labels is not None:
        data["labels"] = labels
    manifest.write_text(json.dumps(data))


def test_group_and_comparison_pages_are_rendered_only_when_their_runs_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    traces = _runs(tmp_path / "traces")
    cache = tmp_path / "cache"
    _forget()
    site.generate_pages(traces, cache)
    rendered: list[tuple[str, str, str]] = []
    group, comparison = site.render_group, site.render_comparison

    def counted_group(model: str, gpu: str, runs: list, lang: str) -> str:
        rendered.append(("group", model, lang))
        return group(model, gpu, runs, lang)

    def counted_comparison(model: str, runs: list, lang: str) -> str:
        rendered.append(("compare", model, lang))
        return comparison(model, runs, lang)

    monkeypatch.setattr(site, "render_group", counted_group)
    monkeypatch.setattr(site, "render_comparison", counted_comparison)
    steps = [
        # A new run of model-1 on H100: its group and model-1's comparison, nothing else.
        lambda: _set_run(
            write_synthetic_run(
                traces, "run-6", [SyntheticLevel(1, 40, 11)], output_len=16, seed=6
            ),
            "model-1",
            "H100",
        ),
        # A run's labels edited: the group and the comparison that show it.
        lambda: _set_run(traces / "run-2", "model-0", "H100", labels={"team": "edited"}),
    ]
    for step, model in zip(steps, ("model-1", "model-0"), strict=True):
        step()
        rendered.clear()
        _forget()
        kept = site.generate_pages(traces, cache)
        assert sorted(rendered) == [
            ("compare", model, "en"),
            ("compare", model, "zh"),
            ("group", model, "en"),
            ("group", model, "zh"),
        ]
        with monkeypatch.context() as fresh:
            fresh.setattr(site, "render_group", group)
            fresh.setattr(site, "render_comparison", comparison)
            _forget()
            assert kept == site.generate_pages(traces)  # every page rendered, no cache
        # 5 groups and 2 comparisons, in 2 languages: the replaced pages' files are gone.
        assert len(list((cache / site.TABLES_DIR).glob("*.md"))) == 14
    edited = [
        path for path, text in kept.items() if path.startswith(site.GROUPS_DIR) and "edited" in text
    ]
    assert len(edited) == 2  # the label is on model-0/H100's group page, in each language


def _children(pid: int) -> set[int]:
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.add(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_render_workers_end_when_the_build_is_killed(tmp_path: Path) -> None:
    """The build killed with SIGKILL mid-render (no handler of its own runs): its render workers
    end too (the kernel's PR_SET_PDEATHSIG at once; a worker's queue at its end of file after its
    run otherwise), none is left waiting for work from a build that is gone (a pool whose
    workers keep their queue's other end open, as ProcessPoolExecutor's do, leaves them)."""
    traces = _runs(tmp_path / "traces")
    probe = (
        "import logging, sys\n"
        "from pathlib import Path\n"
        "from sweeper.report import site\n"
        "logging.basicConfig(level=logging.INFO, stream=sys.stdout, format='%(message)s')\n"
        f"site.generate_pages(Path({str(traces)!r}))\n"
    )
    env = {**os.environ, "SWEEPER_JOBS": "2"}
    build = subprocess.Popen(
        [sys.executable, "-c", probe], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert build.stdout is not None
        for line in build.stdout:
            if "rendering 6 trace sets in 2 processes" in line:
                break
        else:
            pytest.fail("the build never started its render workers")
        deadline = time.monotonic() + 10
        while len(workers := _children(build.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(workers) >= 2, workers
        assert all(_alive(w) for w in workers)  # still rendering: six runs take seconds
        build.kill()
        build.wait(timeout=10)
        deadline = time.monotonic() + 10
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [w for w in workers if _alive(w)]
    finally:
        if build.poll() is None:
            build.kill()
            build.wait()
        if build.stdout is not None:
            build.stdout.close()


def test_a_bad_jobs_count_is_refused_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWEEPER_JOBS", "many")
    with pytest.raises(site.SweeperError, match=r"SWEEPER_JOBS='many'.*number of processes"):
        site.render_jobs()


def test_the_collector_is_paused_while_cached_reports_load_and_restored_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    traces = _runs(tmp_path / "traces")
    site.generate_pages(traces, tmp_path / "cache")  # every report on disk
    _forget()
    states: list[bool] = []
    lookup = site._lookup

    def watched(folder: Path, cache_dir: Path | None, fingerprint: str | None = None) -> tuple:
        states.append(gc.isenabled())
        return lookup(folder, cache_dir, fingerprint)

    monkeypatch.setattr(site, "_lookup", watched)
    assert gc.isenabled()
    site.generate_pages(traces, tmp_path / "cache")
    # The six reads from disk, each folder's once.
    assert states == [False] * 6
    assert gc.isenabled()
    with pytest.raises(KeyError), site.collector_paused():
        raise KeyError("a failed read")
    assert gc.isenabled()  # restored on an error too
    gc.disable()
    try:
        with site.collector_paused():
            pass
        assert not gc.isenabled()  # a collector paused by the caller stays paused
    finally:
        gc.enable()


# Run in a process of its own: the pool forks only where no other thread runs, and a build's
# collector state is process-wide.
_GC_PROBE = """
import gc, json, sys
from pathlib import Path
from mkdocs.config import load_config
from sweeper.report import site

def probe(folder):
    return site.RunEntry(folder, error=f"collector {'on' if gc.isenabled() else 'off'}")

site._render_slim = probe
folders = sorted(p for p in Path(sys.argv[1]).iterdir() if p.is_dir())
gc.disable()  # as the MkDocs plugin leaves it while it generates
site._render_all(folders, None)
workers = sorted({site._CACHE[f.absolute()][1].error for f in folders})
after_render = gc.isenabled()
gc.enable()
site._CACHE.clear()
config = load_config(sys.argv[2])
config.plugins.on_config(config)
print(json.dumps({"workers": workers, "after_render": after_render,
                  "frozen": gc.get_freeze_count(), "enabled": gc.isenabled()}))
"""


def test_render_workers_collect_and_a_build_sets_its_reports_aside(tmp_path: Path) -> None:
    traces = _runs(tmp_path / "traces")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text(f"site_name: gc\nplugins:\n  - sweeper:\n      traces_dir: {traces}\n")
    done = subprocess.run(
        [sys.executable, "-c", _GC_PROBE, str(traces), str(config)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "SWEEPER_JOBS": "2", "NO_MKDOCS_2_WARNING": "1"},
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    # Forked from a process whose collector was paused, each worker runs its own.
    assert found["workers"] == ["collector on"]
    assert found["after_render"] is False  # the caller's pause is left as it was
    # The plugin generated the pages with the collector paused, set them aside, and resumed.
    assert found["frozen"] > 10_000
    assert found["enabled"] is True
