"""Build a site of N synthetic runs with ``mkdocs build --strict`` and print the build time and
the page weight.

    .venv/bin/python benchmarks/site_build.py            # 50 runs
    .venv/bin/python benchmarks/site_build.py --runs 10

The runs are written by the real writer (sweeper.testing.factories) with 6 levels each, on 5
models (so comparison pages are built too), into a temporary folder; the project's mkdocs.yml and
docs/ are copied beside them, so the working tree is not touched. Two builds are timed (wall and
CPU time; the machine may be shared): the first renders every page and executes the notebook, the
second finds the pages in .cache/sweeper/pages and the notebook in mkdocs-jupyter's cache (a
`mkdocs build` after one trace set changed costs about this plus one run).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sweeper.schema import Fact, ServerConfig
from sweeper.testing.factories import SyntheticLevel, write_synthetic_run

ROOT = Path(__file__).resolve().parent.parent
MODELS = 5
LEVELS = (1, 2, 4, 8, 16, 32)
OUTPUT_LEN = 64
KIB = 1024
MIB = 1024 * 1024


def write_runs(root: Path, runs: int) -> None:
    for i in range(runs):
        levels = [
            SyntheticLevel(
                c,
                ttft_ms=30 + 8 * c,
                itl_ms=12 + 0.3 * c + i % 3,
                stall_every=20 if c >= 8 else 0,
                stall_ms=90,
            )
            for c in LEVELS
        ]
        config = ServerConfig(kv_cache_tokens=Fact(value=40_000 + 1000 * i, source="log"))
        folder = write_synthetic_run(
            root, f"bench-{i:03d}", levels, output_len=OUTPUT_LEN, config=config, seed=i
        )
        manifest = folder / "manifest.json"
        manifest.write_text(
            manifest.read_text().replace('"name": null', f'"name": "model-{i % MODELS}"', 1)
        )


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def build(work: Path, traces: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one `mkdocs build --strict`; the CPU time does not depend
    on how busy the machine is."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "SWEEPER_TRACES_DIR": str(traces)}
    cpu = _children_cpu_s()
    start = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-q",
            "-f",
            str(work / "mkdocs.yml"),
            "-d",
            str(work / "site"),
        ],
        cwd=work,
        env=env,
        check=True,
    )
    return time.perf_counter() - start, _children_cpu_s() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sweeper-site-bench-") as tmp:
        work = Path(tmp)
        traces = work / "traces"
        write_runs(traces, args.runs)
        shutil.copy(ROOT / "mkdocs.yml", work / "mkdocs.yml")
        shutil.copytree(
            ROOT / "docs", work / "docs", ignore=shutil.ignore_patterns("runs", "compare")
        )
        first = build(work, traces)
        second = build(work, traces)
        site = work / "site"
        files = [p for p in site.rglob("*") if p.is_file()]
        run_pages = sorted((site / "runs").glob("bench-*/index.html")) + sorted(
            (site / "zh" / "runs").glob("bench-*/index.html")
        )
        sizes = [p.stat().st_size for p in run_pages]
        print(f"runs: {args.runs} ({len(LEVELS)} levels each, {MODELS} models), languages: en + zh")
        print(f"build 1 (render every page): {first[0]:.1f} s wall, {first[1]:.1f} s CPU")
        print(f"build 2 (pages cached):      {second[0]:.1f} s wall, {second[1]:.1f} s CPU")
        print(f"site: {len(files)} files, {sum(p.stat().st_size for p in files) / MIB:.1f} MiB")
        print(
            f"run page HTML: median {statistics.median(sizes) / KIB:.0f} KiB, max {max(sizes) / KIB:.0f} KiB ({len(sizes)} pages)"
        )
        bundle = site / "assets" / "sweeper" / "vega-bundle.js"
        print(
            f"vega bundle (loaded once, cached by the browser): {bundle.stat().st_size / KIB:.0f} KiB"
        )


if __name__ == "__main__":
    main()
