"""Time a warm site build with Material's search entries from sweeper's cache against the same
build with Material parsing every page (the baseline, the cache file removed), on one tree, and
check that both give the same search index.

    .venv/bin/python benchmarks/search_cache.py                  # 200 runs
    .venv/bin/python benchmarks/search_cache.py --runs 100,1000

Per run count, in one temporary tree built as benchmarks/site_build.py builds it: a cold build
(no cache), one run added and a warm build (the other pages' search entries from
.cache/sweeper/search-entries.json), then the cache file removed and the same warm build again
(every page parsed by Material's search plugin). The two indexes must be byte-identical.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from site_build import Build, mkdocs_build, project_tree, write_runs

from sweeper.report.mkdocs_plugin import SEARCH_CACHE

INDEX = Path("site") / "search" / "search_index.json"


def measure(runs: int) -> tuple[Build, Build, Build, bool]:
    with tempfile.TemporaryDirectory(prefix="sweeper-search-bench-") as tmp:
        work = Path(tmp)
        traces = project_tree(work, runs)
        cold = mkdocs_build(work, traces)
        write_runs(traces, runs + 1, start=runs)
        cached = mkdocs_build(work, traces)
        with_cache = (work / INDEX).read_bytes()
        (work / SEARCH_CACHE).unlink()
        parsed = mkdocs_build(work, traces)
        same = (work / INDEX).read_bytes() == with_cache
    return cold, cached, parsed, same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default="200", help="run counts, comma-separated")
    args = parser.parse_args()
    print("wall (CPU) seconds; warm: one run added to the cold build's tree")
    print(f"{'runs':>5} | {'cold':>15} | {'warm, cache':>15} | {'warm, parsed':>15} | {'saved':>6}")
    for runs in (int(r) for r in args.runs.split(",")):
        cold, cached, parsed, same = measure(runs)
        if not same:
            sys.exit(f"{runs} runs: the index from the cache differs from Material's own")
        cells = [f"{b.wall:.1f} s ({b.cpu:.1f})" for b in (cold, cached, parsed)]
        saved = 1 - cached.cpu / parsed.cpu
        print(f"{runs:>5} | {cells[0]:>15} | {cells[1]:>15} | {cells[2]:>15} | {saved:>5.0%}")
    print("the same search index with and without the cache: yes")


if __name__ == "__main__":
    main()
