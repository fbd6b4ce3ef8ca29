"""``sweeper import KIND PATH...``: another tool's results as a sweeper trace set.

One library call: :func:`sweeper.importers.import_run`.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import click

from sweeper.cli._common import check_writable_folder, friendly_errors, parse_labels
from sweeper.i18n import level_label
from sweeper.importers import IMPORTERS, Load, import_run
from sweeper.store import DEFAULT_TRACES_DIR, load_trace_set


@click.command("import")
@click.argument("kind", type=click.Choice(sorted(IMPORTERS)))
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--run-id", help="Name of the new trace set (default: <kind>-<name>-<date>).")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_TRACES_DIR,
    show_default=True,
    help="Folder the trace set is written under.",
)
@click.option(
    "--server-log",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The server's log: parsed for KV cache size, chunked prefill budget, memory... and "
    "copied into the trace set (replaces any server.log found beside AIPerf results).",
)
@click.option(
    "--gpu", help='GPU name, e.g. "H100 SXM" or "RTX 4090" (looked up in the spec table).'
)
@click.option("--gpu-count", type=click.IntRange(min=1), help="Number of GPUs serving the model.")
@click.option("--label", "labels", multiple=True, help="key=value, repeatable.")
@click.option("--gzip/--no-gzip", "compress", default=False, help="Write requests.jsonl.gz.")
@click.option(
    "--load",
    type=click.Choice(["concurrency", "rate"]),
    help="vllm-bench and guidellm: which levels to import where the files hold both "
    "concurrency levels and request-rate levels (a GuideLLM sweep report does). The others "
    "are named in a note. Default: guidellm imports the rate levels, vllm-bench refuses the mix.",
)
@friendly_errors
def import_command(
    kind: str,
    paths: tuple[Path, ...],
    run_id: str | None,
    out: Path,
    server_log: Path | None,
    gpu: str | None,
    gpu_count: int | None,
    labels: tuple[str, ...],
    compress: bool,
    load: str | None,
) -> None:
    """Import results of another benchmark tool (KIND) from PATH... as one trace set.

    \b
    KIND and what PATH is:
      aiperf      an AIPerf artifact folder (profile_export.jsonl ...), or a folder of them,
                  one per concurrency level
      vllm-bench  `vllm bench serve --save-result [--save-detailed]` JSON files, one per level
                  (--max-concurrency C, or --request-rate R)
      llmperf     LLMPerf result folders (*_individual_responses.json + *_summary.json)
      guidellm    GuideLLM benchmarks.json (concurrent / synchronous, or constant / poisson /
                  throughput strategies)
    \b
    Examples:
      sweeper import aiperf results/minimax-sweep/ --gpu MI355X --run-id minimax-mi355x
      sweeper import vllm-bench c1.json c8.json c64.json --server-log vllm.log
      sweeper import vllm-bench rate1.json rate4.json rate-inf.json
      sweeper import guidellm sweep/benchmarks.json --load concurrency
    """
    check_writable_folder(out)
    folder = import_run(
        kind,
        list(paths),
        run_id=run_id,
        out=out,
        server_log=server_log,
        gpu=gpu,
        gpu_count=gpu_count,
        labels=parse_labels(labels),
        compress=compress,
        load=cast("Load | None", load),
    )
    ts = load_trace_set(folder)
    source = ts.manifest.source
    workload = ts.manifest.workload
    keys = workload.concurrency_levels
    if workload.open_loop:
        levels = ("rates " if len(keys) > 1 else "rate ") + ", ".join(
            level_label(k, workload.offered_rate(k), "en") for k in keys
        )
    else:
        levels = "concurrency " + ", ".join(str(c) for c in keys)
    with_requests = set(ts.columns.concurrency.tolist())
    summary_only = [c for c in keys if c not in with_requests]
    only = (
        f" ({', '.join(level_label(c, workload.offered_rate(c), 'en') for c in summary_only)}: "
        "the tool's summary only)"
        if summary_only and with_requests
        else ""
    )
    click.echo(
        f"Imported {ts.count} requests ({source.tool} {source.version or ''}".rstrip()
        + f", fidelity {source.fidelity}) at {levels}{only} into {folder}"
    )
    for warning in ts.manifest.warnings:
        click.echo(f"Note: {warning}")
    click.echo(f"Next: sweeper summary {folder}")
