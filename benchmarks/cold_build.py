"""Time a cold site build (no cache) with this working tree's sweeper against the same build
with sweeper at a baseline commit, on one tree, alternating, and check that both write the
same site.

    .venv/bin/python benchmarks/cold_build.py --baseline 81c5546             # 200 runs, twice
    .venv/bin/python benchmarks/cold_build.py --baseline 81c5546 --runs 1000

The tree is built as benchmarks/site_build.py builds it (synthetic runs of 6 levels, 5 models,
the project's mkdocs.yml and docs/). The baseline's code is a ``git worktree`` of the commit,
put first on ``PYTHONPATH`` (the virtual environment and its packages are the same), so only
sweeper's code differs. Each build gets a fresh copy of the tree: no page, render, HTML or
search cache, the notebook executed. Builds alternate (baseline, current, baseline, ...) so a
machine that gets busier costs both alike. Per build: wall and CPU seconds (the build and its
render workers), the seconds the plugin spent generating sweeper's pages, peak RSS. Then every
HTML page of the last two builds is compared: they must be byte-identical.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from site_build import MIB, ROOT, Build, html_digests, mkdocs_build, project_tree


def _worktree(commit: str, folder: Path) -> Path:
    """A checkout of ``commit`` in ``folder`` (its sweeper package is the baseline)."""
    done = subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(folder), commit],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        sys.exit(f"git worktree add {commit} failed: {done.stderr.strip()}")
    return folder


def _build(tree: Path, work: Path, pythonpath: str | None) -> Build:
    """A cold build of a fresh copy of ``tree`` in ``work``, importing sweeper from
    ``pythonpath`` (None: this working tree)."""
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(tree, work, symlinks=True)
    env = {"PYTHONPATH": pythonpath or ""}  # an empty PYTHONPATH adds nothing to the path
    # The code the build will import, checked: a wrong path would compare a commit with itself.
    found = subprocess.run(
        [sys.executable, "-c", "import sweeper; print(sweeper.__file__)"],
        cwd=work,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    expected = Path(pythonpath) if pythonpath is not None else ROOT
    if not Path(found).resolve().is_relative_to(expected.resolve()):
        sys.exit(f"the build would import {found}, not sweeper from {expected}")
    return mkdocs_build(work, work / "traces", env)


def _row(label: str, builds: list[Build]) -> str:
    def cell(values: list[float]) -> str:
        return " / ".join(f"{v:.1f}" for v in values)

    gens = [b.generation for b in builds if b.generation is not None]
    return (
        f"| {label} | {cell([b.wall for b in builds])} s | {cell([b.cpu for b in builds])} s "
        f"| {cell(gens) + ' s' if gens else 'n/a'} | {max(b.rss for b in builds) / MIB:.0f} MiB |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", required=True, help="the commit to compare against")
    parser.add_argument("--runs", type=int, default=200, help="runs in the tree (default 200)")
    parser.add_argument("--repeat", type=int, default=2, help="builds of each (default 2)")
    args = parser.parse_args()
    if args.runs < 1 or args.repeat < 1:
        parser.error("--runs and --repeat must be at least 1")
    with tempfile.TemporaryDirectory(prefix="sweeper-cold-") as tmp:
        root = Path(tmp)
        baseline = _worktree(args.baseline, root / "baseline")
        try:
            tree = root / "tree"
            project_tree(tree, args.runs)
            builds: dict[str, list[Build]] = {"baseline": [], "current": []}
            for i in range(args.repeat):
                for label, path in (("baseline", str(baseline)), ("current", None)):
                    build = _build(tree, root / f"build-{label}", path)
                    builds[label].append(build)
                    print(f"  {label} #{i + 1}: {build.wall:.1f} s", file=sys.stderr, flush=True)
            same = html_digests(root / "build-baseline" / "site") == html_digests(
                root / "build-current" / "site"
            )
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(baseline)],
                capture_output=True,
            )
    print(f"Cold `mkdocs build --strict` of {args.runs} runs, {args.repeat} builds each")
    print("| code | wall | CPU | generating sweeper's pages | peak RSS |")
    print("|---|---:|---:|---:|---:|")
    print(_row(f"baseline ({args.baseline})", builds["baseline"]))
    print(_row("current", builds["current"]))
    walls = {k: statistics.median(b.wall for b in v) for k, v in builds.items()}
    cpus = {k: statistics.median(b.cpu for b in v) for k, v in builds.items()}
    print(
        f"current / baseline: wall {walls['current'] / walls['baseline']:.2f}, "
        f"CPU {cpus['current'] / cpus['baseline']:.2f} (medians)"
    )
    print(f"the two sites' HTML pages byte-identical: {'yes' if same else 'NO'}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
