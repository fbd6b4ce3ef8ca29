"""``sweeper summary RUN``: a trace set's numbers per level, as rich tables, JSON or CSV.

One library call: :func:`sweeper.analysis.summary.summarize` on :func:`sweeper.store.load_trace_set`.
"""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console

from sweeper.analysis.slo import parse_slos
from sweeper.analysis.summary import render_summary, summarize, summary_csv
from sweeper.cli._common import friendly_errors, load_run, traces_option


@click.command("summary")
@click.argument("run")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "csv"]),
    default="table",
    show_default=True,
    help="table: rich tables in the terminal; json: the stable contract (docs/summary-json.md); "
    "csv: one row per level.",
)
@click.option(
    "--slo",
    "slo",
    default=None,
    help="Your service level, all terms together, e.g. 'ttft_p99<=2s,itl_p50<=25ms' "
    "(metrics ttft/tpot/itl/e2el; stats mean/p50/p90/p95/p99; units ms/s/us): adds each "
    "level's goodput (requests/s meeting every term) and the share of requests that did.",
)
@traces_option()
@friendly_errors
def summary_command(run: str, fmt: str, slo: str | None, traces_dir: Path) -> None:
    """Print the per-level numbers of RUN (a trace-set folder, or a run id under --traces).

    \b
    Examples:
      sweeper summary qwen7b-4090-20261129
      sweeper summary traces/qwen7b-4090-20261129 --format json > summary.json
      sweeper summary qwen7b-4090-20261129 --slo 'ttft_p99<=2s,itl_p50<=25ms'
    """
    slos = parse_slos(slo) if slo else None
    ts = load_run(run, traces_dir)
    summary = summarize(ts, slos=slos)
    if fmt == "json":
        click.echo(json.dumps(summary, indent=2, allow_nan=False))
    elif fmt == "csv":
        click.echo(summary_csv(summary), nl=False)
    else:
        # An open loop's and a service level's columns need the room.
        wide = summary["load"] == "rate" or summary["slo"] is not None
        console = Console(width=max(Console().width, 140 if wide else 100))
        render_summary(summary, console)
