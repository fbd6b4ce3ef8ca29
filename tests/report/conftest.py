"""Fixtures of the site tests: trace sets written by the real writer, and one built site.

``site_traces`` holds three synthetic runs (two of the same model, so a comparison page is made;
one with a KV capacity, a label carrying ``<script>`` and a model name with Markdown in it) and a
broken folder whose manifest is not JSON. ``built_site`` runs ``mkdocs build --strict`` once per
session on a copy of the project's mkdocs.yml and docs/ (so the working tree's docs/ is not
touched), laid out like a mike deployment (``/dev/`` + ``versions.json``) and served over loopback.
It builds the same runs without the broken folder: a strict build fails on a trace set left out
of the site (test_site_build.py builds the broken folder on its own to show that).
"""

from __future__ import annotations

import functools
import http.server
import json
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sweeper.store import discover_trace_sets
from tests.report.site_helpers import (
    ROOT,
    VERSION,
    copy_project_site,
    mkdocs_build,
    write_site_traces,
)


@pytest.fixture(scope="session")
def site_traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The synthetic trace sets, plus every sample trace set committed in traces/."""
    return _with_samples(write_site_traces(tmp_path_factory.mktemp("traces")))


@pytest.fixture(scope="session")
def readable_traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``site_traces`` without the broken folder: what a strict build must publish whole."""
    return _with_samples(write_site_traces(tmp_path_factory.mktemp("readable"), broken=False))


def _with_samples(root: Path) -> Path:
    for folder in discover_trace_sets(ROOT / "traces"):
        shutil.copytree(folder, root / folder.name)
    return root


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@dataclass
class BuiltSite:
    root: Path  # what the server serves: versions.json + dev/
    site_dir: Path  # the build (root / "dev")
    base_url: str  # http://127.0.0.1:<port>/dev/
    log: str  # mkdocs' output


@pytest.fixture(scope="session")
def built_site(
    tmp_path_factory: pytest.TempPathFactory, readable_traces: Path
) -> Iterator[BuiltSite]:
    work = tmp_path_factory.mktemp("site")
    serve_root = work / "public"
    serve_root.mkdir()
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(serve_root))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base_url = f"http://127.0.0.1:{server.server_port}/{VERSION}/"
    try:
        config = copy_project_site(work)
        site_dir = serve_root / VERSION
        result = mkdocs_build(config, site_dir, readable_traces, base_url)
        assert result.returncode == 0, (
            f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
        )
        # What mike writes beside each version: Material's version selector reads it.
        (serve_root / "versions.json").write_text(
            json.dumps([{"version": VERSION, "title": VERSION, "aliases": ["latest"]}])
        )
        yield BuiltSite(serve_root, site_dir, base_url, result.stdout + result.stderr)
    finally:
        server.shutdown()
        server.server_close()
