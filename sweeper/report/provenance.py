"""The "How it was recorded" section of a run's page: tool, command, versions, workload, labels,
warnings, and every server, hardware and model fact with where it came from (endpoint, metrics,
log, user...)."""

from __future__ import annotations

import html
import shlex
from typing import Any

from sweeper.findings.levels import level_name, level_rates
from sweeper.i18n import DEFAULT_LANGUAGE, N_, fmt_number, join_list
from sweeper.report.markup import esc, table, tr
from sweeper.report.run_report import model_full_name, model_title
from sweeper.schema import Fact, Workload
from sweeper.store import TraceSet
from sweeper.units import NS_PER_MS


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
        # Quoted as a shell needs it (its secrets were masked when it was recorded), so that a
        # label with spaces can be copied and run again.
        command = shlex.join(m.source.command).replace("```", "'''")
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
    if wl.open_loop:
        rates = level_rates(wl)
        names = [level_name(k, rates, lang) for k in sorted(rates)]
        workload = [[tr(lang, "Offered rates"), esc(join_list(lang, names))]]
    else:
        workload = [
            [tr(lang, "Concurrency levels"), esc(", ".join(map(str, wl.concurrency_levels)))]
        ]
    warmup = (
        N_("Warm-up requests per rate level") if wl.open_loop else N_("Warm-up requests per level")
    )
    workload.append([tr(lang, warmup), str(wl.warmup_per_level)])
    workload += workload_rows(wl, lang)
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
    blocks += client_blocks(ts, lang)
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


def client_blocks(ts: TraceSet, lang: str) -> list[str]:
    """Where the requests were sent from, where that was more than one process: the workers,
    and (``--ray``) the cluster's nodes and each worker's clock against the driver's."""
    client = ts.manifest.client
    if client.mode not in ("workers", "ray"):
        return []
    if client.mode == "workers":
        what = tr(lang, "{n} recorder processes on one host").format(n=client.workers)
    else:
        what = tr(lang, "{n} Ray workers on {nodes} nodes").format(
            n=client.workers, nodes=len(client.nodes)
        )
    rows = [[tr(lang, "Sent from"), esc(what)]]
    if client.host:
        rows.append([tr(lang, "Driver host"), esc(client.host)])
    if client.ray_address:
        rows.append([tr(lang, "Ray cluster"), esc(client.ray_address)])
    blocks = [
        "### " + tr(lang, "The client"),
        table([tr(lang, "What"), tr(lang, "Value")], rows, numeric=False),
    ]
    if client.nodes:
        node_rows = [
            [
                esc(node.host or "–"),
                f"<code>{esc((node.node_id or '–')[:12])}</code>",
                esc(node.address or "–"),
                fmt_number(node.cpus, lang, digits=0) if node.cpus is not None else "–",
                esc(", ".join(map(str, node.workers))),
            ]
            for node in client.nodes
        ]
        blocks.append(
            table(
                [
                    tr(lang, "Node"),
                    tr(lang, "Ray node id"),
                    tr(lang, "Address"),
                    "CPUs",
                    tr(lang, "Workers"),
                ],
                node_rows,
                numeric=False,
            )
        )
    if client.clock_offsets:
        blocks += _offset_blocks(ts, lang)
    if client.lost_workers:
        blocks.append("\n".join(f"- {esc(text)}" for text in client.lost_workers))
    return blocks


def _offset_blocks(ts: TraceSet, lang: str) -> list[str]:
    """Per worker: its clock offset to the driver's (largest over the run's measures) and the
    uncertainty of the measures."""
    by_worker: dict[int, list[Any]] = {}
    for offset in ts.manifest.client.clock_offsets:
        by_worker.setdefault(offset.worker, []).append(offset)
    rows = []
    for worker, offsets in sorted(by_worker.items()):
        widest = max(offsets, key=lambda o: abs(o.offset_ns))
        rows.append(
            [
                str(worker),
                fmt_number(widest.offset_ns / NS_PER_MS, lang, digits=3),
                fmt_number(max(o.uncertainty_ns for o in offsets) / NS_PER_MS, lang, digits=3),
                str(len(offsets)),
            ]
        )
    note = tr(
        lang,
        "Each worker's clock against the driver's, measured by round trips before every level "
        "(the fastest kept; the true offset lies within the uncertainty of it). Send times are "
        "placed on the driver's clock with it; TTFT and every chunk gap are differences on the "
        "worker's own clock and do not depend on it.",
    )
    return [
        table(
            [
                tr(lang, "Worker"),
                tr(lang, "Clock offset (ms)"),
                tr(lang, "Uncertainty (ms)"),
                tr(lang, "Measures"),
            ],
            rows,
        ),
        f'<p class="sweeper-note">{html.escape(note)}</p>',
    ]


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


# ---------------------------------------------------------------------------------------------
# The workload in words (open loop, arrivals, datasets, lengths, sessions, replay)


def _varied(wl: Workload) -> bool:
    """Whether the workload is more than fixed-length random prompts in a closed loop: only
    then are the rows below written (a closed-loop page of before stays as it was)."""
    fields = (
        wl.dataset not in (None, "random"),
        wl.input_len_range,
        wl.output_len_range,
        wl.sessions,
        wl.turns,
        wl.trace_speedup,
        wl.max_concurrency,
    )
    return wl.open_loop or any(bool(f) for f in fields)


def workload_rows(wl: Workload, lang: str) -> list[list[str]]:
    """Rows of the workload table saying how the load was made, in ``lang`` (escaped)."""
    if not _varied(wl):
        return []
    rows = [[tr(lang, "Load"), esc(_load_words(wl, lang))]]
    if wl.open_loop:
        rows.append([tr(lang, "Arrivals"), esc(_arrival_words(wl, lang))])
        cap = (
            tr(lang, "at most {n} requests in flight (--max-concurrency)").format(
                n=fmt_number(wl.max_concurrency, lang, 0)
            )
            if wl.max_concurrency
            else tr(lang, "none: every request is sent on schedule")
        )
        rows.append([tr(lang, "Concurrency cap"), esc(cap)])
    if wl.duration_s:
        rows.append(
            [
                tr(lang, "Per level"),
                esc(tr(lang, "{s} s of arrivals").format(s=fmt_number(wl.duration_s, lang, 1))),
            ]
        )
    if wl.dataset:
        rows.append([tr(lang, "Dataset"), esc(_dataset_words(wl, lang))])
    for label, centre, spread in (
        (tr(lang, "Input lengths"), wl.input_len, wl.input_len_range),
        (tr(lang, "Output lengths"), wl.output_len, wl.output_len_range),
    ):
        if centre and spread:
            rows.append([label, esc(_range_words(centre, spread, lang))])
    if wl.sessions or wl.turns:
        rows.append([tr(lang, "Sessions"), esc(_session_words(wl, lang))])
    return rows


def _load_words(wl: Workload, lang: str) -> str:
    if wl.open_loop:
        return tr(
            lang,
            "open loop: requests are sent on a schedule of arrivals, whatever the server does; "
            "latency also counts from when the schedule said to send",
        )
    return tr(
        lang,
        "closed loop: C streams, each sending its next request when its answer ends",
    )


def _arrival_words(wl: Workload, lang: str) -> str:
    b = wl.burstiness
    if wl.arrival == "trace":
        speed = wl.trace_speedup or 1.0
        return tr(lang, "a trace replayed at its own timestamps, {x}× as fast").format(
            x=fmt_number(speed, lang, 2)
        )
    if wl.arrival == "constant":
        return tr(lang, "constant: evenly spaced")
    if wl.arrival == "gamma" and b is not None and b != 1:
        key = (
            N_("gamma, burstiness {b}: burstier than Poisson (gaps vary more)")
            if b < 1
            else N_("gamma, burstiness {b}: more regular than Poisson")
        )
        return tr(lang, key).format(b=fmt_number(b, lang, 2))
    return tr(lang, "Poisson: independent arrivals, exponential gaps (burstiness 1)")


def _dataset_words(wl: Workload, lang: str) -> str:
    kind, _, name = (wl.dataset or "").partition(":")
    kinds = {
        "random": tr(lang, "random tokens"),
        "sharegpt": tr(lang, "ShareGPT conversations (the first human turn as the prompt)"),
        "jsonl": tr(lang, "JSONL prompts"),
        "mooncake": tr(lang, "a Mooncake trace (shared prefix blocks by hash id)"),
    }
    text = kinds.get(kind, kind)
    if name:
        text += f" · {name}"
    if wl.dataset_sha256:
        text += f" · sha256 {wl.dataset_sha256[:12]}"
    return text


def _range_words(centre: int, spread: float, lang: str) -> str:
    low, high = round(centre * (1 - spread)), round(centre * (1 + spread))
    return tr(lang, "{low} to {high} tokens, uniform (±{pct}% around {centre})").format(
        low=fmt_number(low, lang, 0),
        high=fmt_number(high, lang, 0),
        pct=fmt_number(spread * 100, lang, 0),
        centre=fmt_number(centre, lang, 0),
    )


def _session_words(wl: Workload, lang: str) -> str:
    text = tr(lang, "{n} conversations of {k} turns, each turn resending the history").format(
        n=fmt_number(wl.sessions or 0, lang, 0) if wl.sessions else "?",
        k=fmt_number(wl.turns or 0, lang, 0) if wl.turns else "?",
    )
    if wl.think_time_ms:
        text += ("；" if lang == "zh" else "; ") + tr(
            lang, "{ms} ms of think time between an answer and the next turn"
        ).format(ms=fmt_number(wl.think_time_ms, lang, 0))
    return text


def _span(centre: int, spread: float | None, lang: str) -> str:
    if not spread:
        return fmt_number(centre, lang, 0)
    low, high = round(centre * (1 - spread)), round(centre * (1 + spread))
    return f"{fmt_number(low, lang, 0)}–{fmt_number(high, lang, 0)}"


def varied_lengths(wl: Workload, lang: str) -> str | None:
    """The lede's sentence on lengths where they vary (ranges, a dataset, sessions); None for
    fixed-length prompts (the lede says "Fixed N input / M output tokens")."""
    kind = (wl.dataset or "random").partition(":")[0]
    if wl.input_len_range or wl.output_len_range:
        if wl.input_len is None or wl.output_len is None:
            return None
        return tr(lang, "Lengths vary: {input} input / {output} output tokens.").format(
            input=_span(wl.input_len, wl.input_len_range, lang),
            output=_span(wl.output_len, wl.output_len_range, lang),
        )
    if kind != "random":
        return tr(lang, "Prompts from a dataset: lengths vary by request.")
    if wl.turns and wl.turns > 1:
        return tr(lang, "Multi-turn: each turn's prompt carries the conversation so far.")
    return None


def length_card(wl: Workload, lang: str) -> str:
    """The In / Out card: ``1,024 / 128 tok``, or the ranges (``512–1,536 / 128 tok``)."""
    assert wl.input_len is not None and wl.output_len is not None
    inp = _span(wl.input_len, wl.input_len_range, lang)
    out = _span(wl.output_len, wl.output_len_range, lang)
    return f"{inp} / {out} tok"
