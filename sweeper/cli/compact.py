"""``sweeper compact RUN...``: gzip finished trace sets in place.

One library call per run: :func:`sweeper.store.compact_trace_set`.
"""

from __future__ import annotations

from pathlib import Path

import click
from babel.numbers import format_decimal

from sweeper.cli._common import traces_option
from sweeper.errors import SweeperError
from sweeper.store import CACHE_DIR, compact_trace_set, resolve_run


def _size(n: int) -> str:
    for unit, scale in (("MB", 1_000_000), ("kB", 1_000)):
        if n >= scale:
            return f"{format_decimal(n / scale, '#,##0.0', locale='en')} {unit}"
    return f"{n} B"


@click.command("compact", short_help="Gzip finished trace sets in place (~16x smaller metrics).")
@click.argument("runs", nargs=-1, required=True, metavar="RUN...")
@traces_option()
def compact_command(runs: tuple[str, ...], traces_dir: Path) -> None:
    """Gzip the request and metrics files of each RUN (a trace-set folder, or a run id under
    --traces) into requests.jsonl.gz and server_metrics.jsonl.gz. Every sweeper command and the
    site read them as before; a vLLM metrics file (~40 KB a scrape) shrinks about 16 times,
    which matters for trace sets kept in git. Then it writes the run's columnar cache
    (.sweeper-columns/: every chunk as arrays, checked against the JSONL's SHA-256), so the next
    summary or build reads arrays instead of parsing every line (docs/trace-schema.md). Runs
    still being recorded are refused.

    \b
    Examples:
      sweeper compact qwen7b-4090-20261129
      sweeper compact traces/*/
    """
    failed = 0
    for run in runs:  # one bad run does not stop the others
        try:
            folder = resolve_run(run, traces_dir)
            written = compact_trace_set(folder)
        except SweeperError as exc:
            click.echo(f"Error: {exc}", err=True)
            failed += 1
            continue
        if not written:
            click.echo(f"{folder}: already compact")
        for item in written:
            if item.name == f"{CACHE_DIR}/":  # the columnar cache: a copy, not a replacement
                click.echo(f"{folder}: {item.name} written, {_size(item.after)}: {item.notes[0]}")
                continue
            click.echo(f"{folder}: {item.name} {_size(item.before)} -> {_size(item.after)}")
            for note in item.notes:
                click.echo(f"  note: {note} (kept in the manifest's warnings)", err=True)
    if failed:
        raise click.ClickException(f"{failed} of {len(runs)} runs not compacted (see above)")
