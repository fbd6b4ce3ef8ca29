"""Fingerprint the report pages of a site build, to show that a change moved code and nothing else.

Builds the site with ``mkdocs build --strict`` from a traces folder (default: the sample runs in
traces/) into a temporary folder, then hashes every generated report page (runs/ and compare/, in
both languages) and, with ``--markdown``, the Markdown that ``sweeper build`` writes for them.

    python scripts/site_snapshot.py --out /tmp/before.json      # before the change
    python scripts/site_snapshot.py --against /tmp/before.json  # after: lists every page that differs

Exit status 1 when ``--against`` finds a page added, removed or changed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GENERATED = ("runs", "compare")
PAGE_CACHE = Path(".cache") / "sweeper" / "pages"


def _hashes(folder: Path, suffixes: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for top in GENERATED:
        for lang_root in (folder, folder / "zh"):
            base = lang_root / top
            if not base.is_dir():
                continue
            for path in sorted(base.rglob("*")):
                if path.is_file() and path.suffix in suffixes:
                    rel = path.relative_to(folder).as_posix()
                    out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def snapshot(traces: Path) -> dict[str, dict[str, str]]:
    env = {**os.environ, "SWEEPER_TRACES_DIR": str(traces)}
    # Pages cached by an earlier build would hide what the code renders now.
    shutil.rmtree(ROOT / PAGE_CACHE, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="sweeper-snapshot-") as tmp:
        site_dir = Path(tmp) / "site"
        md_dir = Path(tmp) / "md"
        bin_dir = Path(sys.executable).parent
        subprocess.run(
            [str(bin_dir / "mkdocs"), "build", "--strict", "--quiet", "-d", str(site_dir)],
            cwd=ROOT,
            env=env,
            check=True,
        )
        subprocess.run(
            [str(bin_dir / "sweeper"), "build", "--traces", str(traces), "--out", str(md_dir)],
            cwd=ROOT,
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        return {
            "html": _hashes(site_dir, (".html",)),
            "markdown": {
                path: digest
                for path, digest in _hashes(md_dir, (".md",)).items()
                if not path.startswith("zh/")
            },
        }


def compare(old: dict[str, dict[str, str]], new: dict[str, dict[str, str]]) -> list[str]:
    problems = []
    for kind in ("html", "markdown"):
        before, after = old.get(kind, {}), new.get(kind, {})
        problems += [f"{kind}: {p} is gone" for p in sorted(set(before) - set(after))]
        problems += [f"{kind}: {p} is new" for p in sorted(set(after) - set(before))]
        problems += [
            f"{kind}: {p} differs"
            for p in sorted(set(before) & set(after))
            if before[p] != after[p]
        ]
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=Path, default=ROOT / "traces")
    parser.add_argument("--out", type=Path, help="write the fingerprints here (JSON)")
    parser.add_argument("--against", type=Path, help="compare with fingerprints written earlier")
    args = parser.parse_args()
    shot = snapshot(args.traces.resolve())
    if args.out:
        args.out.write_text(json.dumps(shot, indent=1, sort_keys=True) + "\n")
    counts = {kind: len(pages) for kind, pages in shot.items()}
    print(f"{counts['html']} HTML pages, {counts['markdown']} Markdown pages fingerprinted")
    if args.against:
        problems = compare(json.loads(args.against.read_text()), shot)
        for line in problems:
            print(line)
        print("identical" if not problems else f"{len(problems)} pages differ")
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
