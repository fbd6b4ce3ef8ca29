"""The "How it was recorded" section of a run's page: tool, command, versions, workload, labels,
warnings, and every server, hardware and model fact with where it came from (endpoint, metrics,
log, user...)."""

from __future__ import annotations

import html
from typing import Any

from sweeper.i18n import DEFAULT_LANGUAGE
from sweeper.report.markup import esc, table, tr
from sweeper.report.run_report import model_full_name, model_title
from sweeper.schema import Fact
from sweeper.store import TraceSet


def recorded_section(ts: TraceSet, lang: str) -> list[str]:
    """The section as Markdown blocks (headings included)."""
    m = ts.manifest
    blocks = ["## " + tr(lang, "How it was recorded")]
    source = m.source.tool + (f" {m.source.version}" if m.source.version else "")
    rows = [[tr(lang, "Recorded by"), esc(source)], [tr(lang, "Run id"), esc(m.run_id)]]
    rows.append([tr(lang, "Started"), esc(m.started_at.isoformat())])
    if m.target.base_url:
        rows.append([tr(lang, "Endpoint"), esc(f"{m.target.base_url} ({m.target.endpoint})")])
    full = model_full_name(ts)
    if full != model_title(ts) and full != m.target.model:  # the title shows a path's last part
        rows.append([tr(lang, "Model"), esc(full)])
    if m.target.model:
        rows.append([tr(lang, "Model sent"), esc(m.target.model)])
    rows.append([tr(lang, "sweeper version"), esc(m.sweeper_version)])
    blocks.append(table([tr(lang, "What"), tr(lang, "Value")], rows, numeric=False))
    if m.source.command:
        command = " ".join(m.source.command).replace("```", "'''")
        blocks += [tr(lang, "Command:"), f"```text\n{command}\n```"]
    facts = fact_rows(ts)
    if facts:
        legend = tr(
            lang,
            "Source: endpoint = an HTTP endpoint of the server, metrics = its Prometheus metrics, "
            "log = its log, user = given on the command line, spec_table = sweeper's table of GPUs "
            "and models, model_config = the model's config.json, derived = computed from other facts.",
        )
        blocks += [
            "### " + tr(lang, "Server, hardware and model facts"),
            table([tr(lang, "Fact"), tr(lang, "Value"), tr(lang, "Source")], facts, numeric=False),
            f'<p class="sweeper-note">{html.escape(legend)}</p>',
        ]
    wl = m.workload
    workload = [
        [tr(lang, "Concurrency levels"), esc(", ".join(map(str, wl.concurrency_levels)))],
        [tr(lang, "Warm-up requests per level"), str(wl.warmup_per_level)],
    ]
    if wl.ignore_eos is not None:
        workload.append(["ignore_eos", str(wl.ignore_eos).lower()])
    if wl.prompt_source:
        workload.append([tr(lang, "Prompts"), esc(wl.prompt_source)])
    if wl.seed is not None:
        workload.append([tr(lang, "Seed"), str(wl.seed)])
    blocks += [
        "### " + tr(lang, "Workload"),
        table([tr(lang, "What"), tr(lang, "Value")], workload, numeric=False),
    ]
    if m.labels:
        labels = "\n".join(f"- **{esc(k)}**: {esc(v)}" for k, v in sorted(m.labels.items()))
        blocks += ["### " + tr(lang, "Labels"), labels]
    warnings = [*m.warnings, *ts.problems]
    if warnings:
        blocks.append("### " + tr(lang, "Warnings"))
        if lang != DEFAULT_LANGUAGE:  # free text from the recorder, importers and the reader
            blocks.append(tr(lang, "As the recorder or importer wrote them, in English:"))
        blocks.append("\n".join(f"- {esc(n)}" for n in warnings))
    return blocks


def fact_rows(ts: TraceSet) -> list[list[str]]:
    """One row per known fact of the manifest: name, value, source (with its detail)."""
    m = ts.manifest
    groups: list[tuple[str, Any]] = [
        ("server", m.server.config),
        ("hardware", m.hardware),
        ("model", m.model),
    ]
    rows: list[list[str]] = []
    if m.server.version is not None:
        rows.append(_fact_row("server.version", m.server.version))
    for prefix, model in groups:
        for name in type(model).model_fields:
            value = getattr(model, name)
            if isinstance(value, Fact):
                rows.append(_fact_row(f"{prefix}.{name}", value))
            elif name == "extra" and isinstance(value, dict):
                for key, fact in sorted(value.items()):
                    rows.append(_fact_row(f"{prefix}.{key}", fact))
    return rows


def _fact_row(name: str, fact: Fact) -> list[str]:
    # The detail quotes where the fact was read (a log line, a metric) as it was written.
    source = esc(fact.source) + (f": <code>{esc(fact.detail)}</code>" if fact.detail else "")
    return [f"<code>{esc(name)}</code>", esc(value_text(fact.value)), source]


def value_text(value: object) -> str:
    """A fact's value as a reader writes it, not as Python does: ``true`` / ``false`` (as the
    workload table writes ``ignore_eos``), a dash for nothing."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
