"""Runs a reader most needs to understand get a page that says what happened: every request
failed, no measured request, a sweep stopped half-way, a level paused and resumed; and what a
card or the index shows when there is no value (no level meets the SLO), a model served from a
path, labels, counts of one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sweeper.report import site
from sweeper.report.pagecheck import page_defects
from sweeper.report.pages import render_run_page
from sweeper.report.run_report import collect_run, model_title
from sweeper.schema import RequestError, RequestTrace, Source
from sweeper.store import load_trace_set, write_trace_set
from sweeper.testing.factories import (
    SyntheticLevel,
    synthetic_manifest,
    synthetic_requests,
    write_synthetic_run,
)
from tests.analysis.interrupted import resumed_after_a_pause, write_interrupted_run

LANGS = ("en", "zh")


def _pages(folder: Path) -> dict[str, str]:
    run = collect_run(load_trace_set(folder))
    return {lang: render_run_page(run, lang) for lang in LANGS}


def _clean(pages: dict[str, str]) -> None:
    for lang, page in pages.items():
        assert page_defects(page) == [], lang


def test_a_run_whose_requests_all_failed_says_what_failed(tmp_path: Path) -> None:
    levels = [SyntheticLevel(1, 30, 10, requests=4), SyntheticLevel(2, 30, 10, requests=4)]
    manifest = synthetic_manifest("failed", levels, output_len=16)
    requests = [
        RequestTrace(
            concurrency=c,
            request_id=f"c{c}-{i}",
            send_ns=i * 10_000_000,
            end_ns=2_000_000,
            status="error",
            error=RequestError(
                kind="http" if i % 2 else "connect",
                http_status=503 if i % 2 else None,
                message="Service Unavailable: model None is loading" if i % 2 else "refused",
            ),
        )
        for c in (1, 2)
        for i in range(4)
    ]
    folder = write_trace_set(tmp_path / "failed", manifest, requests)
    pages = _pages(folder)
    en = pages["en"]
    assert '!!! failure "No request succeeded"' in en
    assert "All 8 measured requests failed" in en
    assert "## What failed" in en
    assert "| http | 503 | 4 | C=1, C=2 | <code>Service Unavailable&#58; model None" in en
    assert "| connect | – | 4 | C=1, C=2 | <code>refused</code> |" in en
    assert "没有成功的请求" in pages["zh"] and "## 失败了什么" in pages["zh"]
    _clean(pages)  # the server's own words ("model None") are quoted, not prose


def test_a_trace_set_with_no_measured_request_gets_a_page(tmp_path: Path) -> None:
    manifest = synthetic_manifest("nothing", [SyntheticLevel(1, 30, 10)])
    warmup = RequestTrace(
        concurrency=1,
        request_id="w",
        phase="warmup",
        send_ns=0,
        end_ns=1_000_000,
        chunk_ns=[500_000],
        chunk_tokens=[1],
        completion_tokens=1,
    )
    folder = write_trace_set(tmp_path / "nothing", manifest, [warmup])
    pages = _pages(folder)
    assert '!!! failure "No measured request"' in pages["en"]
    assert "Levels never measured&#58; C=1." in pages["en"]
    _clean(pages)
    index = site.generate_pages(tmp_path)["runs/index.md"]
    assert "(no measured request)" in index


def test_an_interrupted_run_says_what_is_missing_and_how_to_finish(tmp_path: Path) -> None:
    folder = write_interrupted_run(tmp_path / "traces", "cut")
    pages = _pages(folder)
    en = pages["en"]
    assert '!!! warning "This run is incomplete"' in en
    assert "Levels never measured&#58; C=4, C=8." in en
    assert "Cut short&#58; C=2 &#40;7 of 16 measured requests&#41;." in en
    command = f"sweeper record --resume --run-id cut --out {tmp_path / 'traces'}"
    assert f"<code>{site.esc(command)}</code>" in en
    assert "Incomplete: 2 of 4 planned levels measured." in en
    assert "这次运行未完成" in pages["zh"] and "从未测量的级别" in pages["zh"]
    _clean(pages)
    index = site.generate_pages(tmp_path / "traces")["runs/index.md"]
    assert '<a data-sweeper-run href="cut/">cut</a> (incomplete)' in index


def test_a_paused_level_is_named_and_measured_without_its_pause(tmp_path: Path) -> None:
    levels = [SyntheticLevel(1, 30, 10, requests=8), SyntheticLevel(2, 30, 10, requests=8)]
    manifest = synthetic_manifest("paused", levels, output_len=32)
    manifest.source = Source(tool="sweeper record", version="test")
    requests = resumed_after_a_pause(
        synthetic_requests(levels, output_len=32), 1, after=4, pause_ns=90_000_000_000
    )
    folder = write_trace_set(tmp_path / "paused", manifest, requests)
    pages = _pages(folder)
    assert "In flight (mean / max)" in pages["en"] and "| 1 | 1.0 / 1 |" in pages["en"]
    assert "C=1 stood still for 90 s with no request in flight" in pages["en"]
    assert "在途请求（均值 / 最大）" in pages["zh"]
    _clean(pages)


def test_no_level_meeting_the_slo_is_said_not_shown_as_none(tmp_path: Path) -> None:
    # ITL 80 ms: above the default p50 ITL <= 50 ms at every level.
    folder = write_synthetic_run(
        tmp_path, "slow", [SyntheticLevel(1, 30, 80), SyntheticLevel(2, 30, 85)], output_len=16
    )
    run = collect_run(load_trace_set(folder))
    assert run.known("recommended") is not None
    assert run.known("recommended").numbers["concurrency"] is None
    pages = {lang: render_run_page(run, lang) for lang in LANGS}
    assert "no level meets the SLO" in pages["en"] and "C = None" not in pages["en"]
    assert "没有满足 SLO 的级别" in pages["zh"]
    _clean(pages)
    index = site.generate_pages(tmp_path)
    assert "none meets the SLO" in index["runs/index.md"] and "C=None" not in index["runs/index.md"]
    assert page_defects(index["runs/index.zh.md"]) == []


@pytest.mark.parametrize(
    ("name", "title"),
    [
        ("/lustre/fsw/models/Kimi-K2.5-NVFP4", "Kimi-K2.5-NVFP4"),
        ("/models/qwen/", "qwen"),
        ("amd/Kimi-K2.5-MXFP4", "amd/Kimi-K2.5-MXFP4"),
        ("small", "small"),
    ],
)
def test_a_model_served_from_a_path_is_titled_by_its_name(
    tmp_path: Path, name: str, title: str
) -> None:
    folder = write_synthetic_run(tmp_path, "m", [SyntheticLevel(1, 30, 10)], output_len=16)
    ts = load_trace_set(folder)
    ts.manifest.model.name = name
    assert model_title(ts) == title
    run = collect_run(ts)
    page = render_run_page(run, "en")
    heading = next(line for line in page.splitlines() if line.startswith("# "))
    assert site.esc(title) in heading and (name == title or site.esc(name) not in heading)
    if name != title:  # the full path stays in "How it was recorded"
        assert f"| Model | {site.esc(name)} |" in page
    assert page_defects(page) == []


def test_labels_are_on_the_run_page_and_in_the_index_as_text(tmp_path: Path) -> None:
    evil = "<img src=x onerror=alert(1)>"
    write_synthetic_run(
        tmp_path,
        "labelled",
        [SyntheticLevel(1, 30, 10)],
        output_len=16,
        labels={"note": evil, "flags": "--max-num-seqs 4"},
    )
    write_synthetic_run(tmp_path, "plain", [SyntheticLevel(1, 30, 10)], output_len=16)
    pages = site.generate_pages(tmp_path)
    run_page, index = pages["runs/labelled/index.md"], pages["runs/index.md"]
    for page in (run_page, index, pages["runs/index.zh.md"]):
        assert evil not in page and site.esc(evil) in page
        assert (
            '<span class="sweeper-label" data-label="flags=&#45;&#45;max&#45;num&#45;seqs 4">'
            in page
        )
        assert page_defects(page) == []
    assert 'input type="search" data-sweeper-filter' in index
    assert '<th><span data-sweeper-col="labels">Labels</span></th></tr>' in index
    plain_row = next(line for line in index.splitlines() if 'href="plain/"' in line)
    assert plain_row.endswith("<td>–</td></tr>")


def test_counts_of_one_are_singular(tmp_path: Path) -> None:
    folder = write_synthetic_run(
        tmp_path, "one", [SyntheticLevel(1, 30, 10, requests=1)], output_len=16
    )
    run = collect_run(load_trace_set(folder))
    page = render_run_page(run, "en")
    assert "1 measured request, 0 failed" in page and "The first 1 request of" in page
    assert page_defects(page) == []


def test_the_page_check_finds_every_kind_of_defect() -> None:
    page = "\n".join(
        [
            "---",
            'title: "/lustre/models/Kimi · 8 × B200"',
            "---",
            '<div class="sweeper-card"><span class="sweeper-card__value">C = None</span></div>',
            '<div class="sweeper-card"><span class="sweeper-card__value"></span></div>',
            "<p>throughput nan tok/s, ratio inf, {placeholder} left, 1 requests.</p>",
            "<p>Fact(value=3, source='log') and {'a': 1} and np.float64(2.5)</p>",
            "| x | True |",
            '<p><a href="javascript:alert(1)">x</a><img src=x onerror="alert(1)"></p>',
            "<script>alert(1)</script>",
            '<div class="sweeper-chart" data-spec="'
            + json.dumps({"title": "C=None"}).replace('"', "&quot;")
            + '"></div>',
        ]
    )
    kinds = sorted({d.split(":")[0] for d in page_defects(page)})
    assert kinds == sorted(
        [
            "none",
            "nan",
            "inf",
            "placeholder",
            "plural",
            "repr",
            "markup",
            "empty_card",
            "path_title",
        ]
    )


def test_the_page_check_leaves_quoted_text_alone() -> None:
    page = (
        "<p>Concurrency swept from 1 to 8: 1 request, 2 requests; infinite patience, "
        "Nancy, nano, information.</p>\n"
        "<p>log: <code>speculative_config=None, {'model': 'x'}</code></p>\n"
        "```text\nsweeper record --label note=None\n```\n"
    )
    assert page_defects(page) == []


def test_a_built_html_page_is_read_from_its_article(tmp_path: Path) -> None:
    page = (
        "<html><head><title>Runs - sweeper</title><script>var x = null;</script></head>"
        "<body><nav>None</nav><article class='md-content__inner'>"
        "<h1>Runs</h1><p>C=None</p></article></body></html>"
    )
    assert page_defects(page) == ["none: C=None"]


def test_reports_can_be_rendered_again_from_the_slim_cache(tmp_path: Path) -> None:
    """The index reads the completeness and failures of a cached entry (no requests kept)."""
    folder = write_interrupted_run(tmp_path, "cut")
    entry = site.load_entry(folder, tmp_path / "cache")
    slim = site._read_cached(next((tmp_path / "cache").glob("*.pickle")))
    assert slim is not None and slim.run is not None and not slim.run.done.complete
    assert slim.run.requests.empty  # slim: the requests are not kept
    # rendered again from the cache alone, the index still marks the run incomplete
    assert "(incomplete)" in site.render_index([slim], {}, "en")
    assert entry.run is not None and "(incomplete)" in site.render_index([entry], {}, "en")


def test_terminal_escapes_from_a_server_log_never_reach_a_page(tmp_path: Path) -> None:
    """A log line that sets the terminal's title (ESC ] 0 ; ... BEL), colours, a carriage
    return, and escapes in a label and an error message: the page shows the text only."""
    title = "\x1b]0;pwned\x07"
    folder = write_synthetic_run(
        tmp_path,
        "esc",
        [SyntheticLevel(1, 30, 10, failures=1)],
        output_len=16,
        labels={"note": f"{title}\x1b[31mred\x1b[0m"},
    )
    log = (
        f"{title}INFO 11-30 07:50:36 [kv_cache_utils.py:2327] \x1b[1mGPU KV cache size: "
        "21,760 tokens\x1b[0m\r\n"
    )
    (folder / "server.log").write_text(log)
    ts = load_trace_set(folder)
    ts.manifest.model.name = f"tiny{title}"
    ts.manifest.warnings.append(f"a warning {title}with a bell\x07")
    for r in ts.requests:
        if r.error is not None:
            r.error.message = f"{title}upstream said \x1b[2Kno"
    run = collect_run(ts)
    for lang in LANGS:
        page = render_run_page(run, lang)
        assert "\x1b" not in page and "\x07" not in page and "pwned" not in page
        assert page_defects(page) == [], lang
        assert "upstream said no" in page and "red" in page
