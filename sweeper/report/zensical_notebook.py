"""The notebooks of the docs for the Zensical build (:mod:`sweeper.report.zensical`): what
mkdocs-jupyter does inside ``mkdocs build`` (``execute: true``), done beforehand, each notebook
executed and converted to a Markdown page with its outputs, cached as JSON.

The cache key is what a notebook reads: the notebook itself, sweeper's code, and the trace sets
of its project's ``traces/`` (the folder of the ``mkdocs.yml`` above it, as the notebook finds
it), by their files' names, sizes and contents (``.sweeper-columns*`` caches left out: a cache
rewrite is no change of the data).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sweeper.errors import SweeperError
from sweeper.report import site
from sweeper.store import atomic_write

NOTEBOOK_SUFFIX = ".ipynb"
CACHE_FORMAT = 1
# Folders and files of a traces folder that are caches of its data, not data.
_CACHE_PREFIX = ".sweeper-columns"


def notebook_markdown(path: Path) -> dict[str, bytes]:
    """What mkdocs-jupyter does inside ``mkdocs build`` (``execute: true``, ``allow_errors:
    false``), done beforehand: the notebook executed in its own folder and converted to a
    Markdown page (``x.ipynb`` -> ``x.md``) with its output images beside it (``x_files/``).
    Raises :class:`SweeperError` naming the notebook when a cell fails."""
    import nbformat
    from nbclient.exceptions import CellExecutionError
    from nbconvert import MarkdownExporter
    from nbconvert.preprocessors import ExecutePreprocessor

    notebook = nbformat.read(path, as_version=4)
    try:
        ExecutePreprocessor(timeout=600).preprocess(
            notebook, {"metadata": {"path": str(path.parent)}}
        )
    except CellExecutionError as exc:
        plain = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip()  # the traceback's colours
        raise SweeperError(f"notebook {path} failed when executed: {plain}") from exc
    files_dir = f"{path.stem}_files"
    body, resources = MarkdownExporter().from_notebook_node(
        notebook, resources={"output_files_dir": files_dir}
    )
    out = {f"{path.stem}.md": body.encode("utf-8")}
    for name, data in (resources.get("outputs") or {}).items():
        out[name] = data if isinstance(data, bytes) else str(data).encode("utf-8")
    return out


def notebook_traces(notebook: Path) -> Path | None:
    """The traces folder a notebook of the docs reads: ``traces/`` beside the first
    ``mkdocs.yml`` in its folder or above (as ``find_traces()`` in the notebook looks)."""
    for folder in [notebook.parent, *notebook.parent.parents]:
        if (folder / "mkdocs.yml").exists():
            return folder / "traces"
    return None


def traces_fingerprint(traces: Path | None) -> str:
    """The files under ``traces`` by relative name, size and contents (SHA-256); the column
    caches (``.sweeper-columns*``) left out. A missing folder has a fingerprint of its own."""
    digest = hashlib.sha256()
    if traces is None or not traces.is_dir():
        digest.update(b"no traces")
        return digest.hexdigest()
    for path in sorted(traces.rglob("*")):
        relative = path.relative_to(traces)
        if any(part.startswith(_CACHE_PREFIX) for part in relative.parts) or not path.is_file():
            continue
        with path.open("rb") as fh:
            contents = hashlib.file_digest(fh, "sha256").hexdigest()
        digest.update(f"{relative.as_posix()}\0{path.stat().st_size}\0{contents}\n".encode())
    return digest.hexdigest()


def _cache_key(path: Path) -> str:
    digest = hashlib.sha256(path.read_bytes())
    digest.update(site.code_fingerprint(site.PACKAGE_DIR).encode())
    digest.update(traces_fingerprint(notebook_traces(path.resolve())).encode())
    return digest.hexdigest()[:20]


def _read_cached(cached: Path) -> dict[str, bytes] | None:
    """A cached conversion, or None when it is missing or not one (any corruption: rebuilt)."""
    try:
        data = json.loads(cached.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT:
            return None
        files = data["files"]
        if not isinstance(files, dict) or not files:
            return None
        return {str(name): base64.b64decode(text, validate=True) for name, text in files.items()}
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None


def _write_cached(cached: Path, converted: dict[str, bytes], stem: str) -> None:
    cached.parent.mkdir(parents=True, exist_ok=True)
    for old in cached.parent.glob(f"{stem}.*"):
        if old != cached:
            old.unlink(missing_ok=True)
    text = json.dumps(
        {
            "format": CACHE_FORMAT,
            "files": {n: base64.b64encode(d).decode("ascii") for n, d in converted.items()},
        }
    )
    with atomic_write(cached) as fh:
        fh.write(text.encode("utf-8"))


def notebook_pages(docs_dir: Path, cache: Path) -> dict[str, bytes]:
    """Every notebook of ``docs_dir`` as a Markdown page (:func:`notebook_markdown`), cached in
    ``cache`` (JSON, written atomically) by what the notebook reads (see the module's text)."""
    found: dict[str, bytes] = {}
    for path in sorted(docs_dir.rglob(f"*{NOTEBOOK_SUFFIX}")):
        relative = path.relative_to(docs_dir)
        if any(p.startswith(".") for p in relative.parts):
            continue
        stem = relative.as_posix().replace("/", "__")
        cached = cache / f"{stem}.{_cache_key(path)}.json"
        converted = _read_cached(cached)
        if converted is None:
            converted = notebook_markdown(path)
            _write_cached(cached, converted, stem)
        parent = relative.parent.as_posix()
        for name, data in converted.items():
            found[name if parent == "." else f"{parent}/{name}"] = data
    return found


_NOTEBOOK_LINK = re.compile(r"\]\(([^()\s]*?)\.ipynb((?:#[^()\s]*)?)\)")


def notebook_links(text: str, converted: Iterable[str]) -> str:
    """Links to ``x.ipynb`` made links to its Markdown page ``x.md`` when there is one (by
    file name: the notebooks of the site have distinct names)."""
    names = {Path(p).name for p in converted if p.endswith(".md")}

    def page(match: re.Match[str]) -> str:
        stem = match.group(1)
        if f"{Path(stem).name}.md" not in names:
            return match.group(0)
        return f"]({stem}.md{match.group(2)})"

    return _NOTEBOOK_LINK.sub(page, text)


def nav_notebooks(nav: list[Any], converted: set[str]) -> list[Any]:
    """Nav entries of notebooks made entries of their Markdown pages (those converted), or
    left out (those that are not)."""
    kept: list[Any] = []
    for item in nav:
        title, value = (
            next(iter(item.items())) if isinstance(item, dict) and len(item) == 1 else (None, item)
        )
        if isinstance(value, list):
            kept.append({title: nav_notebooks(value, converted)})
            continue
        if isinstance(value, str) and value.endswith(NOTEBOOK_SUFFIX):
            page = value.removesuffix(NOTEBOOK_SUFFIX) + ".md"
            if page not in converted:
                continue
            value = page
        kept.append(value if title is None else {title: value})
    return kept
