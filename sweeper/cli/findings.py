"""``sweeper findings RUN``: why the curve bends, in English or Chinese, as text or JSON.

One library call: :func:`sweeper.findings.analyze_run` on :func:`sweeper.store.load_trace_set`.
The JSON is the contract documented in docs/findings.md.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from sweeper.analysis.completeness import completeness
from sweeper.cli._common import friendly_errors, load_run, traces_option
from sweeper.findings import analyze_run, findings_json, parse_slos
from sweeper.i18n import LANGUAGES, N_, gettext

_SEVERITY_MARK = {"info": "·", "notice": "!", "warning": "!!", "critical": "!!!", "unknown": "?"}


@click.command("findings")
@click.argument("run")
@click.option(
    "--lang",
    type=click.Choice(LANGUAGES),
    default="en",
    show_default=True,
    help="Language of the text.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="text: one paragraph per finding; json: the stable contract (docs/findings.md), both languages.",
)
@click.option(
    "--slo",
    "slo",
    default=None,
    help="Your service level, all terms together, e.g. 'ttft_p99<=2s,itl_p50<=25ms' "
    "(metrics ttft/tpot/itl/e2el; stats mean/p50/p90/p95/p99; units ms/s/us).",
)
@traces_option()
@friendly_errors
def findings_command(run: str, lang: str, fmt: str, slo: str | None, traces_dir: Path) -> None:
    """Write the findings of RUN (a trace-set folder, or a run id under --traces).

    \b
    Examples:
      sweeper findings qwen7b-4090-20261129 --lang zh
      sweeper findings traces/qwen7b-4090-20261129 --slo "ttft_p99<=2s,itl_p50<=25ms"
      sweeper findings qwen7b-4090-20261129 --format json > findings.json
    """
    slos = parse_slos(slo) if slo else None
    ts = load_run(run, traces_dir)
    found = analyze_run(ts, slos=slos)
    done = completeness(ts)
    if fmt == "json":
        click.echo(
            json.dumps(
                findings_json(ts.run_id, found), indent=2, ensure_ascii=False, allow_nan=False
            )
        )
        if not done.complete:
            click.echo(f"Warning: {done.sentence()}", err=True)
        return
    if not done.complete:
        # First, so no finding below reads as the whole sweep's.
        click.echo(click.style("[!! incomplete] run", bold=True))
        click.echo(done.sentence())
        click.echo()
    for f in found:
        head = f"[{_SEVERITY_MARK[f.severity]} {f.severity}] {f.id}"
        click.echo(click.style(head, bold=True))
        click.echo(f.text[lang])
        if f.missing:
            label = gettext(lang, "findings", N_("Missing: {items}")).format(
                items="; ".join(f.missing)
            )
            click.echo(click.style(label, dim=True))
        click.echo()
    for problem in ts.problems:
        click.echo(f"Warning: {problem}", err=True)
