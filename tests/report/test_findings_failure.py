"""A findings failure is never a quiet gap: the page says what failed, `sweeper build` exits 1 and
`mkdocs build --strict` fails, while the measurements are still published.

The failure is injected by replacing one rule with a function that raises: no real data is known
to crash a rule today, and a test of the error path needs one that does."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from mkdocs.commands.build import build
from mkdocs.config import load_config
from mkdocs.exceptions import Abort

from sweeper.cli import cli
from sweeper.findings import scaling
from sweeper.report import run_report
from sweeper.report.markup import esc
from sweeper.report.pages import render_run_page
from sweeper.report.run_report import collect_run
from sweeper.store import load_trace_set
from sweeper.testing.factories import SyntheticLevel, write_synthetic_run

LEVELS = [SyntheticLevel(1, 50, 10), SyntheticLevel(2, 55, 11), SyntheticLevel(4, 70, 12)]


def _broken_rule(*_: object) -> None:
    raise ValueError("injected: the knee rule tripped")


def _broken_analysis(*_: object, **__: object) -> None:
    raise RuntimeError("injected: the analysis tripped")


@pytest.fixture
def run_folder(tmp_path: Path) -> Path:
    return write_synthetic_run(tmp_path / "traces", "failing-findings", LEVELS, output_len=32)


def test_a_rule_that_raises_is_named_on_the_page(
    run_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scaling, "knee", _broken_rule)
    run = collect_run(load_trace_set(run_folder))
    assert run.findings_errors == ["knee: ValueError: injected: the knee rule tripped"]
    assert run.findings["scaling"].severity != "unknown"  # the other rules still ran
    for lang, title in (("en", "Some findings could not be computed"), ("zh", "部分结论未能算出")):
        page = render_run_page(run, lang)
        assert f'!!! failure "{title}"' in page
        assert esc("knee: ValueError: injected: the knee rule tripped") in page


def test_an_analysis_that_raises_still_publishes_the_measurements(
    run_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_report, "analyze_frames", _broken_analysis)
    run = collect_run(load_trace_set(run_folder))
    assert run.findings == {}
    assert run.findings_errors == ["RuntimeError: injected: the analysis tripped"]
    page = render_run_page(run, "en")
    assert esc("RuntimeError: injected: the analysis tripped") in page
    assert "Measured results" in page


def test_sweeper_build_exits_1_on_failed_findings(
    run_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scaling, "knee", _broken_rule)
    out = tmp_path / "md"
    result = CliRunner().invoke(
        cli, ["build", "--traces", str(run_folder.parent), "--out", str(out)]
    )
    assert result.exit_code == 1, result.output
    assert "findings failed: knee: ValueError" in result.output
    assert (out / "runs" / "failing-findings" / "index.md").exists()  # written all the same


def _minimal_site(root: Path, traces: Path) -> Path:
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "index.md").write_text("# Home\n")
    config = root / "mkdocs.yml"
    config.write_text(
        "site_name: t\nsite_url: http://127.0.0.1/\ntheme:\n  name: material\n  font: false\n"
        f"plugins:\n  - sweeper:\n      traces_dir: {traces}\n"
    )
    return config


def test_mkdocs_strict_fails_on_failed_findings(
    run_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _minimal_site(tmp_path / "site-src", run_folder.parent)
    site_dir = tmp_path / "site"
    build(load_config(str(config), strict=True, site_dir=str(site_dir)))  # healthy: no warning
    assert (site_dir / "runs" / "failing-findings" / "index.html").exists()
    monkeypatch.setattr(scaling, "knee", _broken_rule)
    (run_folder / "manifest.json").touch()  # a new fingerprint: the page is made anew
    with pytest.raises(Abort, match="strict mode"):
        build(load_config(str(config), strict=True, site_dir=str(site_dir)))
