"""Build sites of N synthetic runs and print, per run count, the cold and warm build times
(MkDocs, and Zensical beside it when sweeper.report.zensical can build), sweeper's share of the
MkDocs build (page generation), the build's peak memory and the run pages' weight.

    .venv/bin/python benchmarks/site_build.py                   # 10 and 100 runs
    .venv/bin/python benchmarks/site_build.py --runs 10,100,1000

The runs are written by the real writer (sweeper.testing.factories) with 6 levels each, on 5
models (so comparison pages are built too), into a temporary folder; the project's mkdocs.yml and
docs/ are copied beside them, so the working tree is not touched. Per run count:

- cold: ``mkdocs build --strict`` with no page cache (every page rendered, the notebook executed);
- warm: one run added, then ``mkdocs build --strict`` again: the other pages come from
  .cache/sweeper/pages and the notebook from mkdocs-jupyter's cache (what recording one more run
  costs);
- gen: the seconds of the build spent generating sweeper's pages (the plugin's log line), the
  rest is MkDocs' own;
- RSS: the build process's peak resident memory (os.wait4);
- run page: the HTML of each run page as built by MkDocs (en + zh), median and max KiB; the
  charts' data is inline (one block per page), so there is no per-page data file.

Wall times depend on how busy the machine is (run ``uptime`` beside them); CPU seconds less so.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from sweeper.schema import Fact, ServerConfig
from sweeper.testing.factories import SyntheticLevel, write_synthetic_run

ROOT = Path(__file__).resolve().parent.parent
MODELS = 5
LEVELS = (1, 2, 4, 8, 16, 32)
OUTPUT_LEN = 64
KIB = 1024
MIB = 1024 * 1024


def write_runs(root: Path, runs: int, start: int = 0) -> None:
    for i in range(start, runs):
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


def project_tree(work: Path, runs: int) -> Path:
    """``runs`` synthetic runs in ``work/traces`` (returned), the project's mkdocs.yml and docs/
    (without generated pages) beside them."""
    traces = work / "traces"
    write_runs(traces, runs)
    shutil.copy(ROOT / "mkdocs.yml", work / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", work / "docs", ignore=shutil.ignore_patterns("runs", "compare"))
    return traces


def _run(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, int, str]:
    """(wall s, CPU s, peak RSS bytes, stderr) of one command, which must succeed."""
    start = time.perf_counter()
    process = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    assert process.stderr is not None
    err = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        sys.exit(f"{' '.join(command)} failed (exit {process.returncode}):\n{err[-4000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * KIB, err


def html_digests(site: Path) -> dict[str, str]:
    """Every HTML page of a built site: relative path -> sha256 (to compare two builds)."""
    return {
        str(p.relative_to(site)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in site.rglob("*.html")
    }


GENERATED = re.compile(r"sweeper: generated (\d+) pages in ([\d.]+) s")


@dataclass
class Build:
    wall: float
    cpu: float
    rss: int
    generation: float | None = None


def mkdocs_build(work: Path, traces: Path, env: dict[str, str] | None = None) -> Build:
    """One ``mkdocs build --strict`` (INFO on, for the plugin's timing line); ``env``: variables
    set for it on top of this process's."""
    env = {
        **os.environ,
        "NO_MKDOCS_2_WARNING": "1",
        "SWEEPER_TRACES_DIR": str(traces),
        **(env or {}),
    }
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(work / "mkdocs.yml")]
    wall, cpu, rss, err = _run([*command, "-d", str(work / "site")], work, env)
    found = GENERATED.search(err)
    return Build(wall, cpu, rss, float(found.group(2)) if found else None)


ZENSICAL_SCRIPT = """
import sys
from pathlib import Path
from sweeper.report.zensical import build
build(Path(sys.argv[1]), traces_dir=Path(sys.argv[2]), config_file=Path(sys.argv[3]),
      work_dir=Path(sys.argv[4]))
"""


def zensical_available() -> str | None:
    """None when sweeper.report.zensical has a build(site_dir, ...) and Zensical is installed,
    else why not (printed in the table's zensical column as n/a)."""
    try:
        module = importlib.import_module("sweeper.report.zensical")
    except ImportError as exc:
        return f"sweeper.report.zensical cannot be imported ({exc})"
    if not callable(getattr(module, "build", None)):
        return "sweeper.report.zensical has no build(site_dir, ...)"
    try:
        importlib.import_module("zensical")
    except ImportError:
        return "Zensical is not installed in this environment"
    return None


def zensical_build(work: Path, traces: Path) -> Build:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    wall, cpu, rss, _ = _run(
        [
            sys.executable,
            "-c",
            ZENSICAL_SCRIPT,
            str(work / "site-zensical"),
            str(traces),
            str(work / "mkdocs.yml"),
            str(work / ".cache" / "sweeper" / "zensical"),
        ],
        work,
        env,
    )
    return Build(wall, cpu, rss)


def page_weights(site: Path) -> list[int]:
    pages = sorted((site / "runs").glob("bench-*/index.html")) + sorted(
        (site / "zh" / "runs").glob("bench-*/index.html")
    )
    return [p.stat().st_size for p in pages]


@dataclass
class Row:
    runs: int
    cold: Build
    warm: Build
    zensical_cold: Build | None
    zensical_warm: Build | None
    sizes: list[int]
    site_mib: float


def measure(runs: int, zensical: bool) -> Row:
    with tempfile.TemporaryDirectory(prefix="sweeper-site-bench-") as tmp:
        work = Path(tmp)
        traces = project_tree(work, runs)
        cold = mkdocs_build(work, traces)
        z_cold = zensical_build(work, traces) if zensical else None
        write_runs(traces, runs + 1, start=runs)  # one more run: what a new recording costs
        warm = mkdocs_build(work, traces)
        z_warm = zensical_build(work, traces) if zensical else None
        site = work / "site"
        files = [p for p in site.rglob("*") if p.is_file()]
        return Row(
            runs,
            cold,
            warm,
            z_cold,
            z_warm,
            page_weights(site),
            sum(p.stat().st_size for p in files) / MIB,
        )


def _s(build: Build | None, why: str | None) -> str:
    return "n/a" if build is None else f"{build.wall:.1f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--runs", default="10,100", help="run counts, comma-separated (default 10,100)"
    )
    args = parser.parse_args()
    try:
        counts = [int(n) for n in args.runs.split(",") if n.strip()]
    except ValueError:
        sys.exit(f"--runs {args.runs!r}: give run counts separated by commas, e.g. 10,100,1000")
    if not counts or min(counts) < 1:
        sys.exit(f"--runs {args.runs!r}: every run count must be at least 1")
    why = zensical_available()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    print(
        f"{len(LEVELS)} levels a run, {MODELS} models, en + zh; cold: no cache; "
        "warm: one run added, cache warm"
    )
    header = (
        f"{'runs':>5} | {'cold':>8} | {'gen':>7} | {'warm +1':>8} | {'gen':>7} | "
        f"{'zensical cold':>13} | {'zensical warm':>13} | {'peak RSS':>9} | "
        f"{'run page median':>15} | {'max':>8} | {'site':>9}"
    )
    print(header)
    print("-" * len(header), flush=True)
    for n in counts:
        row = measure(n, why is None)

        def gen(build: Build) -> str:
            return f"{build.generation:.1f} s" if build.generation is not None else "?"

        rss = max(b.rss for b in (row.cold, row.warm, row.zensical_cold, row.zensical_warm) if b)
        print(
            f"{n:>5} | {row.cold.wall:>6.1f} s | {gen(row.cold):>7} | {row.warm.wall:>6.1f} s | "
            f"{gen(row.warm):>7} | {_s(row.zensical_cold, why):>13} | "
            f"{_s(row.zensical_warm, why):>13} | {rss / MIB:>5.0f} MiB | "
            f"{statistics.median(row.sizes) / KIB:>11.1f} KiB | {max(row.sizes) / KIB:>4.1f} KiB | "
            f"{row.site_mib:>5.1f} MiB",
            flush=True,
        )
        print(
            f"      CPU: cold {row.cold.cpu:.1f} s, warm {row.warm.cpu:.1f} s; "
            f"per run (cold, wall): {row.cold.wall / n:.3f} s",
            flush=True,
        )
    if why is not None:
        print(f"zensical: n/a: {why}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
