"""``sweeper build``: write the report pages (Markdown, en + zh) of every trace set to a folder.

One library call: :func:`sweeper.report.site.build_pages`. ``mkdocs build`` / ``mkdocs serve`` do the
same generation on their own (the sweeper MkDocs plugin); this command is for people who want the
Markdown files, e.g. to publish them with another tool.
"""

from __future__ import annotations

from pathlib import Path

import click

from sweeper.cli._common import check_writable_folder, friendly_errors, traces_option
from sweeper.report.site import GENERATED_DIRS, LINK_STYLES, build_pages, load_entries


@click.command("build")
@traces_option("The folder of trace sets to publish.")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("docs"),
    show_default=True,
    help="Where the Markdown goes (runs/ and compare/ are created in it and owned by sweeper).",
)
@click.option(
    "--links",
    type=click.Choice(LINK_STYLES),
    default="site",
    show_default=True,
    help="site: links as a site built from the folder serves them (run/; MkDocs, Zensical). "
    "files: links to the Markdown files (run/index.md, run/index.zh.md on the Chinese pages), "
    "to read the pages on GitHub or in an editor.",
)
@friendly_errors
def build_command(traces_dir: Path, out_dir: Path, links: str) -> None:
    """Write the report pages of every trace set as Markdown (en + zh).

    Per trace set runs/<run-id>/index.md (English) and index.zh.md (Chinese), the index of runs
    (runs/index.md, a table per model and GPU), one page per model and GPU (runs/groups/) and one
    comparison page per model (compare/), with embedded Vega-Lite charts.

    \b
    Examples:
      sweeper build                       # traces/ -> docs/runs/, docs/compare/
      sweeper build --traces my-runs --out /tmp/pages
      sweeper build --out pages --links files   # to read on GitHub
    """
    check_writable_folder(out_dir)
    pages = build_pages(traces_dir, out_dir, links=links)
    entries = load_entries(traces_dir)
    click.echo(
        f"wrote {len(pages)} pages to {', '.join(str(out_dir / d) for d in GENERATED_DIRS)} "
        f"from {traces_dir}"
    )
    # A trace set left out of the site, or findings that failed (as `mkdocs build --strict`
    # does): the pages are written (the index names what was left out), and the exit status
    # says they are not whole.
    problems = [problem for entry in entries for problem in entry.problems()]
    for problem in problems:
        click.echo(f"error: {problem}", err=True)
    if problems:
        raise SystemExit(1)
