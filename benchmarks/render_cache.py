"""Time a warm site build with each page's Markdown render from sweeper's render cache against
the same build with MkDocs rendering every page (the baseline, the cache folder removed), on one
tree, and check that both write the same site.

    .venv/bin/python benchmarks/render_cache.py                  # 200 runs
    .venv/bin/python benchmarks/render_cache.py --runs 100,1000

Per run count, in one temporary tree built as benchmarks/site_build.py builds it: a cold build
(no cache), one run added and a warm build (the other pages' renders from
.cache/sweeper/renders/), then that folder removed and the same warm build again (every page
rendered; Material's search entries come from their cache in both). Every HTML page of the two
warm builds must be byte-identical.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from site_build import Build, mkdocs_build, project_tree, write_runs

from sweeper.report.mkdocs_plugin import RENDER_CACHE


def _pages(site: Path) -> dict[str, str]:
    return {
        str(p.relative_to(site)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in site.rglob("*.html")
    }


def measure(runs: int) -> tuple[Build, Build, Build, int, bool]:
    with tempfile.TemporaryDirectory(prefix="sweeper-render-bench-") as tmp:
        work = Path(tmp)
        traces = project_tree(work, runs)
        cold = mkdocs_build(work, traces)
        write_runs(traces, runs + 1, start=runs)
        cached = mkdocs_build(work, traces)
        with_cache = _pages(work / "site")
        shutil.rmtree(work / RENDER_CACHE)
        rendered = mkdocs_build(work, traces)
        same = _pages(work / "site") == with_cache
    return cold, cached, rendered, len(with_cache), same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default="200", help="run counts, comma-separated")
    args = parser.parse_args()
    print("wall (CPU) seconds; warm: one run added to the cold build's tree")
    print(
        f"{'runs':>5} | {'pages':>6} | {'cold':>15} | {'warm, cache':>15} "
        f"| {'warm, rendered':>15} | {'saved':>6}"
    )
    for runs in (int(r) for r in args.runs.split(",")):
        cold, cached, rendered, pages, same = measure(runs)
        if not same:
            sys.exit(f"{runs} runs: the site built from the render cache differs from MkDocs' own")
        cells = [f"{b.wall:.1f} s ({b.cpu:.1f})" for b in (cold, cached, rendered)]
        saved = 1 - cached.cpu / rendered.cpu
        print(
            f"{runs:>5} | {pages:>6} | {cells[0]:>15} | {cells[1]:>15} | {cells[2]:>15} "
            f"| {saved:>5.0%}"
        )
    print("the same HTML pages with and without the render cache: yes")


if __name__ == "__main__":
    main()
