"""Time the Chinese word segmentation of Material's search plugin on a built site's index:
jieba on every run of Han characters (the plugin's own, the baseline) against the memo sweeper
installs (sweeper.report.search_index.MemoJieba: each distinct run cut once), and check that
both give the same words.

    .venv/bin/python benchmarks/search_segment.py               # a site of 100 runs
    .venv/bin/python benchmarks/search_segment.py --runs 20,200

A site of N synthetic runs is built as benchmarks/site_build.py builds it (the project's
docs beside them). The index's entries, with the plugin's zero-width spaces taken out, are what
the plugin segmented (less the Chinese entries it dropped as repeats of English ones), in its
order: each title and text goes through the plugin's own ``SearchIndex._segment_chinese``, once
with jieba and once with the memo. The build's CPU is printed beside them for scale.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import jieba
from material.plugins.search import plugin as material_search

sys.path.insert(0, str(Path(__file__).resolve().parent))
from site_build import ROOT, mkdocs_build, write_runs

from sweeper.report.search_index import MemoJieba

jieba.setLogLevel(60)  # its "Building prefix dict" lines


def built_texts(runs: int) -> tuple[list[str], float]:
    """The unsegmented titles and texts of a built site of ``runs`` runs, and the build's CPU."""
    with tempfile.TemporaryDirectory(prefix="sweeper-segment-bench-") as tmp:
        work = Path(tmp)
        write_runs(work / "traces", runs)
        shutil.copy(ROOT / "mkdocs.yml", work / "mkdocs.yml")
        shutil.copytree(
            ROOT / "docs", work / "docs", ignore=shutil.ignore_patterns("runs", "compare")
        )
        build = mkdocs_build(work, work / "traces")
        index = json.loads((work / "site" / "search" / "search_index.json").read_text())
    texts = [e[key].replace("\u200b", "") for e in index["docs"] for key in ("title", "text")]
    return texts, build.cpu


def segment_all(texts: list[str], cut_with: object) -> tuple[float, list[str]]:
    material_search.jieba = cut_with  # type: ignore[attr-defined]
    index = material_search.SearchIndex()
    began = time.process_time()
    out = [index._segment_chinese(t) for t in texts]
    return time.process_time() - began, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default="100", help="run counts, comma-separated")
    args = parser.parse_args()
    jieba.initialize()  # the dictionary's load is neither's cost
    print("CPU seconds; the build's CPU for scale (the memo was on in it)")
    print(
        f"{'runs':>5} | {'strings':>8} | {'build':>7} | {'jieba':>7} | {'memo':>7} | {'ratio':>6}"
    )
    for runs in (int(r) for r in args.runs.split(",")):
        texts, build_cpu = built_texts(runs)
        plain_s, plain = segment_all(texts, jieba)
        memo_s, memo = segment_all(texts, MemoJieba(jieba))
        if memo != plain:
            sys.exit(f"{runs} runs: the memo's words differ from jieba's")
        print(
            f"{runs:>5} | {len(texts):>8} | {build_cpu:>5.1f} s | {plain_s:>5.2f} s | "
            f"{memo_s:>5.2f} s | {plain_s / memo_s:>5.1f}x"
        )


if __name__ == "__main__":
    main()
