"""Time the search index's duplicate removal at a site's size: mkdocs-static-i18n's own
(``reconfigure_search_duplicates``, the baseline: for each English entry a scan of every Chinese
one, and ``list.remove``) against sweeper's one pass (sweeper.report.search_index), on the same
index, and check that both keep the same entries.

    .venv/bin/python benchmarks/search_dedupe.py                 # 100, 200 and 1000 runs
    .venv/bin/python benchmarks/search_dedupe.py --runs 100,3000 --sections 23

The index is synthetic (sweeper.testing.factories.synthetic_search_entries): per run page one
page entry and ``--sections`` heading entries (a built sweeper site has ~23 per run page and
language: count the ``docs`` of site/search/search_index.json), in English and Chinese, 40% of
the Chinese entries the English ones (untranslated) and so duplicates.
"""

from __future__ import annotations

import argparse
import copy
import time
from types import SimpleNamespace
from typing import Any

from mkdocs_static_i18n.reconfigure import ExtendedPlugin

from sweeper.report.search_index import remove_duplicates
from sweeper.testing.factories import synthetic_search_entries

LANGUAGES = ["en", "zh"]


def _timed(fn: Any, entries: list[dict[str, str]]) -> tuple[float, list[dict[str, str]]]:
    began = time.process_time()
    fn(entries)
    return time.process_time() - began, entries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default="100,200,1000", help="run pages, comma-separated")
    parser.add_argument("--sections", type=int, default=23, help="heading entries per page")
    args = parser.parse_args()
    plugin = SimpleNamespace(build_languages=LANGUAGES)
    print(f"{args.sections} heading entries a run page, en + zh; CPU seconds")
    print(f"{'runs':>6} | {'entries':>8} | {'i18n 1.3.1':>10} | {'sweeper':>8} | {'ratio':>7}")
    for runs in (int(r) for r in args.runs.split(",")):
        index = synthetic_search_entries(runs, seed=runs, sections=(args.sections,) * 2)
        theirs_s, theirs = _timed(
            lambda e: ExtendedPlugin.reconfigure_search_duplicates(plugin, e),
            copy.deepcopy(index),
        )
        ours_s, ours = _timed(lambda e: remove_duplicates(e, LANGUAGES), copy.deepcopy(index))
        if ours != theirs:
            raise SystemExit(f"{runs} runs: the two kept different entries")
        ratio = theirs_s / ours_s if ours_s > 0 else float("inf")
        print(
            f"{runs:>6} | {len(index):>8,} | {theirs_s:>9.2f}s | {ours_s:>7.3f}s | {ratio:>6.0f}x"
        )


if __name__ == "__main__":
    main()
