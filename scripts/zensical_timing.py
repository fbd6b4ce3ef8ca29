"""MkDocs against Zensical on the same tree: the figures of docs/site.md's Zensical section.

::

    .venv/bin/python scripts/zensical_timing.py                 # traces/, 3 rounds
    .venv/bin/python scripts/zensical_timing.py --traces DIR --rounds 5
    .venv/bin/python scripts/zensical_timing.py --runs 50          # 50 synthetic runs instead

Copies mkdocs.yml, docs/ and the sweeper package to a temporary folder (the working tree is not
touched, and an edit there while this runs changes nothing), renders the
report pages once (the page cache both engines read is then warm, so what is timed is the
engine), then, each round, in separate processes as a user runs them:

- ``mkdocs build`` (both languages: mkdocs-static-i18n builds the second inside the same run);
- ``python -m sweeper.report.zensical`` with a fresh work folder (Zensical's own cache cold; the
  executed notebook is cached beside the page cache, warm from the warm-up);
- the same again (Zensical's cache warm: nothing changed).

Prints each round's wall time and the medians, the ratio mkdocs / Zensical, and the machine's
load average before and after (the figures are only comparable on an idle machine).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


ENGINE_LINE = re.compile(r"zensical build: en ([\d.]+) s, zh ([\d.]+) s")
engine_seconds: list[float] = []  # the `zensical build` processes alone (both languages at once)


def _timed(command: list[str], cwd: Path, env: dict[str, str]) -> float:
    started = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed (exit {result.returncode}):\n{result.stderr[-3000:]}")
    if match := ENGINE_LINE.search(result.stdout):
        engine_seconds.append(max(float(match[1]), float(match[2])))
    return seconds


def _synthetic_runs(root: Path, runs: int) -> None:
    from sweeper.testing.factories import SyntheticLevel, write_synthetic_run

    for i in range(runs):
        levels = [
            SyntheticLevel(c, ttft_ms=30 + 8 * c, itl_ms=12 + 0.3 * c + i % 3, stall_every=20)
            for c in (1, 2, 4, 8, 16, 32)
        ]
        write_synthetic_run(root, f"timing-{i:03d}", levels, output_len=64, seed=i)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=Path, default=ROOT / "traces")
    parser.add_argument(
        "--runs",
        type=int,
        default=0,
        help="instead of --traces, this many synthetic runs of 6 levels (the real writer)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="sweeper-zensical-timing-") as tmp:
        work = Path(tmp)
        traces = args.traces.resolve()
        if args.runs:
            traces = work / "traces"
            _synthetic_runs(traces, args.runs)
        shutil.copy(ROOT / "mkdocs.yml", work / "mkdocs.yml")
        shutil.copytree(
            ROOT / "docs",
            work / "docs",
            ignore=shutil.ignore_patterns("runs", "compare", "groups", ".sweeper-generated"),
        )
        # A frozen copy of sweeper: the page cache is keyed by sweeper's code, and an edit in the
        # working tree while this runs would make a round re-render every page.
        shutil.copytree(
            ROOT / "sweeper", work / "pkg" / "sweeper", ignore=shutil.ignore_patterns("__pycache__")
        )
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                [str(work / "pkg"), *filter(None, [os.environ.get("PYTHONPATH")])]
            ),
            "NO_MKDOCS_2_WARNING": "1",
            "SWEEPER_TRACES_DIR": str(traces),
            "SITE_URL": "http://127.0.0.1:8000/",
        }
        python = sys.executable
        mkdocs = [python, "-m", "mkdocs", "build", "-q", "-f", "mkdocs.yml", "-d", "site-mkdocs"]

        def zensical(work_dir: str) -> list[str]:
            return [
                python, "-m", "sweeper.report.zensical", "--config", "mkdocs.yml",
                "--traces", str(traces), "--out", "site-zensical", "--work", work_dir,
            ]  # fmt: skip

        warmup = _timed(mkdocs, work, env)  # renders every page into the shared page cache
        # ... and executes the notebook into its cache (mkdocs-jupyter executes it every build)
        z_warmup = _timed(zensical("zwork"), work, env)
        print(
            f"warm-up (pages rendered into the cache): mkdocs build {warmup:.1f} s, "
            f"zensical {z_warmup:.1f} s"
        )
        names = ("mkdocs", "zensical_cold", "engine_cold", "zensical_warm", "engine_warm")
        rows: dict[str, list[float]] = {name: [] for name in names}
        for round_number in range(1, args.rounds + 1):
            rows["mkdocs"].append(_timed(mkdocs, work, env))
            shutil.rmtree(work / "zwork", ignore_errors=True)
            rows["zensical_cold"].append(_timed(zensical("zwork"), work, env))
            rows["engine_cold"].append(engine_seconds[-1])
            rows["zensical_warm"].append(_timed(zensical("zwork"), work, env))
            rows["engine_warm"].append(engine_seconds[-1])
            print(
                f"round {round_number}: mkdocs build {rows['mkdocs'][-1]:.1f} s, "
                f"zensical (cold cache) {rows['zensical_cold'][-1]:.1f} s "
                f"(of which zensical build {rows['engine_cold'][-1]:.1f} s), "
                f"zensical (warm cache) {rows['zensical_warm'][-1]:.1f} s "
                f"(of which zensical build {rows['engine_warm'][-1]:.1f} s)"
            )
        runs = sum(1 for p in traces.iterdir() if p.is_dir() and not p.name.startswith("."))
        sizes = {
            name: sum(p.stat().st_size for p in (work / name).rglob("*") if p.is_file())
            for name in ("site-mkdocs", "site-zensical")
        }
    medians = {name: statistics.median(values) for name, values in rows.items()}
    where = f"{runs} synthetic runs" if args.runs else f"{runs} trace folders of {traces}"
    print(f"\n{where}, en + zh, page cache warm; median of {args.rounds}:")
    print(f"  mkdocs build                      {medians['mkdocs']:6.1f} s")
    print(
        f"  zensical, its cache cold          {medians['zensical_cold']:6.1f} s"
        f"   (mkdocs / zensical = {medians['mkdocs'] / medians['zensical_cold']:.1f})"
    )
    print(
        f"  zensical, its cache warm          {medians['zensical_warm']:6.1f} s"
        f"   (mkdocs / zensical = {medians['mkdocs'] / medians['zensical_warm']:.1f})"
    )
    print(
        f"  of which the zensical build processes (en and zh at once): cold "
        f"{medians['engine_cold']:.1f} s, warm {medians['engine_warm']:.1f} s; the rest is "
        "sweeper (imports, pages from the cache, the docs trees, the copy into the site folder)"
    )
    print(
        f"  site size: mkdocs {sizes['site-mkdocs'] / 2**20:.1f} MiB, "
        f"zensical {sizes['site-zensical'] / 2**20:.1f} MiB"
    )
    load_after = os.getloadavg()
    print(
        f"load average (1, 5, 15 min) before {load_before[0]:.2f} {load_before[1]:.2f} "
        f"{load_before[2]:.2f}, after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f} "
        f"on {os.cpu_count()} CPUs"
    )


if __name__ == "__main__":
    main()
