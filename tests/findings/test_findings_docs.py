"""docs/findings.md and docs/findings.zh.md cannot drift: every finding id, JSON number key,
threshold, tail cause, GPU and model of the tables appears in both."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from sweeper.analysis.thresholds import Thresholds
from sweeper.facts.hardware import GPU_SPECS, MODEL_SPECS
from sweeper.findings import FINDING_IDS, TAIL_CAUSES, analyze
from tests.findings.reference import reference_frames

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = [DOCS / "findings.md", DOCS / "findings.zh.md"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_page_names_everything(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    names = [f"`{fid}`" for fid in FINDING_IDS]
    names += [f"`{f.name}`" for f in fields(Thresholds)]
    names += [f"`{cause}`" for cause in TAIL_CAUSES]
    names += [f"| {g.name} |" for g in GPU_SPECS] + [f"| {m.name} |" for m in MODEL_SPECS]
    for f in analyze(reference_frames()):
        names += [f"`{key}`" for key in f.numbers]
    missing = sorted({n for n in names if n not in text})
    assert missing == []
