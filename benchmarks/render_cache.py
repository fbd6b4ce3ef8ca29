"""Time a warm site build with each page's Markdown render and HTML from sweeper's caches
against the same build with MkDocs rendering every page (the baseline, the cache folders
removed), on one tree, and check that every build writes the same site.

    .venv/bin/python benchmarks/render_cache.py                  # 200 runs
    .venv/bin/python benchmarks/render_cache.py --runs 100,1000

Per run count, in one temporary tree built as benchmarks/site_build.py builds it: a cold build
(no cache), one run added and a warm build (the other pages' Markdown renders from
.cache/sweeper/renders/ and their HTML from .cache/sweeper/html/), then the HTML folder removed
and the same warm build again (the theme renders every page: the render cache alone), then both
folders removed and the same build once more (every page rendered by Python-Markdown and the
theme, the baseline; Material's search entries come from their cache in all three). Every HTML
page of the three warm builds must be byte-identical.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from site_build import Build, html_digests, mkdocs_build, project_tree, write_runs

from sweeper.report.mkdocs_plugin import HTML_CACHE, RENDER_CACHE


def measure(runs: int) -> tuple[list[Build], int, bool]:
    """The cold build and the three warm ones (both caches, the render cache alone, none), the
    pages, and whether the three warm builds wrote the same HTML."""
    with tempfile.TemporaryDirectory(prefix="sweeper-render-bench-") as tmp:
        work = Path(tmp)
        traces = project_tree(work, runs)
        cold = mkdocs_build(work, traces)
        write_runs(traces, runs + 1, start=runs)
        cached = mkdocs_build(work, traces)
        with_cache = html_digests(work / "site")
        shutil.rmtree(work / HTML_CACHE)
        themed = mkdocs_build(work, traces)
        same = html_digests(work / "site") == with_cache
        shutil.rmtree(work / HTML_CACHE)
        shutil.rmtree(work / RENDER_CACHE)
        rendered = mkdocs_build(work, traces)
        same = same and html_digests(work / "site") == with_cache
    return [cold, cached, themed, rendered], len(with_cache), same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default="200", help="run counts, comma-separated")
    args = parser.parse_args()
    print("wall (CPU) seconds; warm: one run added to the cold build's tree")
    print(
        f"{'runs':>5} | {'pages':>6} | {'cold':>15} | {'warm, caches':>15} "
        f"| {'warm, no HTML':>15} | {'warm, rendered':>15} | {'saved':>6}"
    )
    for runs in (int(r) for r in args.runs.split(",")):
        builds, pages, same = measure(runs)
        if not same:
            sys.exit(f"{runs} runs: the site built from the caches differs from MkDocs' own")
        cells = [f"{b.wall:.1f} s ({b.cpu:.1f})" for b in builds]
        saved = 1 - builds[1].cpu / builds[3].cpu
        print(
            f"{runs:>5} | {pages:>6} | "
            + " | ".join(f"{c:>15}" for c in cells)
            + f" | {saved:>5.0%}"
        )
    print("the same HTML pages with both caches, the render cache alone and none: yes")


if __name__ == "__main__":
    main()
