"""Trace sets and build helpers shared by the site tests (imported by conftest.py and tests)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from sweeper.schema import Fact, ServerConfig
from sweeper.testing.factories import SyntheticLevel, write_synthetic_run

ROOT = Path(__file__).resolve().parents[2]
XSS = "<script>alert(1)</script>"
MARKDOWN_MODEL = "evil[link](javascript:alert(2))*model*"
RUN_A = "synthetic-a"
RUN_B = "synthetic-b"
RUN_XSS = "synthetic-xss"
BROKEN = "broken-run"
VERSION = "dev"


def write_site_traces(root: Path, *, broken: bool = True) -> Path:
    """The trace sets every site test uses (with ``broken``, a folder whose manifest is not
    JSON); returns ``root``."""
    kv = ServerConfig(
        kv_cache_tokens=Fact(value=20_000, source="log", detail="GPU KV cache size: 20,000 tokens"),
        max_num_seqs=Fact(value=128, source="endpoint"),
        enable_chunked_prefill=Fact(value=True, source="log"),
    )
    write_synthetic_run(
        root,
        RUN_A,
        [
            SyntheticLevel(1, 50, 16),
            SyntheticLevel(2, 60, 16.5),
            SyntheticLevel(4, 80, 17, stall_every=50, stall_ms=100),
            SyntheticLevel(8, 150, 18, stall_every=20, stall_ms=120),
        ],
        output_len=64,
        config=kv,
        labels={"note": XSS},
    )
    write_synthetic_run(
        root,
        RUN_B,
        [SyntheticLevel(1, 40, 12), SyntheticLevel(4, 60, 13), SyntheticLevel(8, 90, 14)],
        output_len=48,
    )
    xss = write_synthetic_run(
        root, RUN_XSS, [SyntheticLevel(1, 30, 10), SyntheticLevel(2, 35, 11)], output_len=32
    )
    manifest = json.loads((xss / "manifest.json").read_text())
    manifest["model"]["name"] = MARKDOWN_MODEL + XSS
    manifest["labels"] = {XSS: XSS}
    (xss / "manifest.json").write_text(json.dumps(manifest))
    if broken:
        write_broken_trace_set(root)
    return root


def write_broken_trace_set(root: Path) -> Path:
    """A folder that looks like a trace set and cannot be read (its manifest is not JSON)."""
    (root / BROKEN).mkdir()
    (root / BROKEN / "manifest.json").write_text("{not json")
    return root / BROKEN


def copy_project_site(dest: Path) -> Path:
    """mkdocs.yml + docs/ (without generated pages) copied to ``dest``; returns the config path."""
    shutil.copy(ROOT / "mkdocs.yml", dest / "mkdocs.yml")
    shutil.copytree(
        ROOT / "docs",
        dest / "docs",
        ignore=shutil.ignore_patterns("runs", "compare", ".sweeper-generated"),
    )
    return dest / "mkdocs.yml"


def mkdocs_build(
    config: Path, site_dir: Path, traces: Path, site_url: str, *, strict: bool = True
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "NO_MKDOCS_2_WARNING": "1",
        "SWEEPER_TRACES_DIR": str(traces),
        "SITE_URL": site_url,
    }
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            *(["--strict"] if strict else []),
            "-f",
            str(config),
            "-d",
            str(site_dir),
        ],
        cwd=config.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
