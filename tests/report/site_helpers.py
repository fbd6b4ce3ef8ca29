"""Trace sets and build helpers shared by the site tests (imported by conftest.py and tests)."""

from __future__ import annotations

import copy
import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

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
STUDY = "study-demo"
STUDY_RUNS = {
    "--max-num-seqs 4": f"{STUDY}-max-num-seqs-4",
    "--max-num-seqs 8": f"{STUDY}-max-num-seqs-8",
}


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
    write_study(root)
    if broken:
        write_broken_trace_set(root)
    return root


def write_study(root: Path) -> Path:
    """A study of two configurations (``sweeper study``: its manifest and its runs, each labelled
    with the study and its flags), the second checking the first's advice; returns its folder."""
    from sweeper.study.model import (
        Advice,
        AdvisedChange,
        StudyConfiguration,
        StudyManifest,
        StudyRun,
    )
    from sweeper.study.model import (
        write_study as write_manifest,
    )

    kv = ServerConfig(
        kv_cache_tokens=Fact(value=2_000, source="metrics", detail="vllm:cache_config_info")
    )
    configurations = []
    for index, (flags, run_id) in enumerate(STUDY_RUNS.items(), start=1):
        slow = 1.0 if index == 1 else 0.8
        folder = write_synthetic_run(
            root,
            run_id,
            [SyntheticLevel(1, 40 * slow, 12 * slow), SyntheticLevel(4, 70 * slow, 14 * slow)],
            input_len=256,
            output_len=32,
            config=kv,
            labels={"study": STUDY, "flags": flags},
        )
        manifest = json.loads((folder / "manifest.json").read_text())
        manifest["model"]["name"] = "study-model"  # not in the other runs' comparison
        (folder / "manifest.json").write_text(json.dumps(manifest))
        configurations.append(StudyConfiguration(
            index=index, flags=flags, run_id=run_id, status="complete",
            runs=[StudyRun(run_id=run_id, status="complete")],
        ))  # fmt: skip
    change = AdvisedChange(
        finding="tail_cause", flag="--max-num-seqs", value=8, direction="larger",
        predicts=[{"metric": "ttft_p99_ms", "level": 4, "from": 70.0, "to": None, "direction": "lower"}],
        reason="tail_cause max_num_seqs", flags="--max-num-seqs 8",
    )  # fmt: skip
    study = StudyManifest(
        study_id=STUDY,
        template="server --port {port} {flags}",
        configurations=configurations,
        advice=Advice(
            run_id=STUDY_RUNS["--max-num-seqs 4"], baseline="--max-num-seqs 4", changes=[change]
        ),
    )
    write_manifest(root / STUDY, study)
    return root / STUDY


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


# A chart's spec and a run page's datasets, in a double- or a single-quoted attribute.
_CHART_ATTR = re.compile(r"""data-(spec|datasets)=(?:"([^"]*)"|'([^']*)')""")
VEGA_LITE_SCHEMA = "https://vega.github.io/schema/vega-lite/v6.json"


def page_specs(page: str) -> list[dict[str, Any]]:
    """Every chart of a page (Markdown or HTML) as the site's script draws it: a compact spec
    completed with the page's datasets, the ``$schema`` and the shared config
    (assets/sweeper-charts.js ``complete``)."""
    from sweeper.report.charts import SHARED_CONFIG

    found = [
        (
            m.group(1),
            json.loads(html.unescape(m.group(2) if m.group(2) is not None else m.group(3))),
        )
        for m in _CHART_ATTR.finditer(page)
    ]
    from sweeper.report.markup import expand_dataset

    datasets: dict[str, Any] = {}
    for kind, value in found:
        if kind == "datasets":
            datasets.update({name: expand_dataset(rows) for name, rows in value.items()})
    specs = []
    for kind, spec in found:
        if kind != "spec":
            continue
        spec.setdefault("$schema", VEGA_LITE_SCHEMA)
        spec.setdefault("config", copy.deepcopy(SHARED_CONFIG))
        own = spec.setdefault("datasets", {})
        for name in _data_names(spec):
            if name not in own and name in datasets:
                own[name] = datasets[name]
        specs.append(spec)
    return specs


def _data_names(value: Any) -> list[str]:
    if isinstance(value, dict):
        names = []
        for key, item in value.items():
            if key == "data" and isinstance(item, dict) and isinstance(item.get("name"), str):
                names.append(item["name"])
            elif key != "datasets":
                names += _data_names(item)
        return names
    if isinstance(value, list):
        return [name for item in value for name in _data_names(item)]
    return []


def without_charts(page: str) -> str:
    """A page with its charts' specs and datasets taken out (to look at its words alone)."""
    return _CHART_ATTR.sub("", page)
