"""``--resume``: what a resumed run takes from the run it finishes, what it refuses, and the
level attempts it closes.

A resumed run keeps what it measures. An option given again with a value other than the run's
own, where that value shapes what is measured or how it is labelled (the workload, the target,
the labels, the facts about the server), is refused: :func:`check_resume` raises one
:class:`ConfigError` listing each difference (option, recorded value, given value). Options
about how the server is reached and how the recording goes (``--base-url``, ``--timeout``,
``--max-error-rate``, ``--metrics-url``...) are applied to the rest of the run, and each change
is said (a warning in the manifest); those not given again are the run's own (its recorded
command line), and so is ``--tokenizer``.

A level's attempts (``LevelStatus.attempts``) are the stretches it was recorded in; one left
open by a recorder that was killed is closed by :func:`close_killed_attempts` at the end of the
last request that attempt wrote.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from sweeper.errors import ConfigError
from sweeper.record.config import USER_SERVER_FACTS, RecordConfig
from sweeper.record.serverinfo import api_roots
from sweeper.record.workload import level_name, short_levels
from sweeper.schema import (
    Fact,
    LevelAttempt,
    LevelStatus,
    RequestTrace,
    RunManifest,
    Workload,
    fact_value,
    strip_credentials,
)

# Fields that name the run rather than set it: never compared.
IDENTITY = frozenset({"run_id", "out", "resume", "command", "given"})
TOKENIZER_SOURCE = "tokenizer "

Shown = Callable[[RecordConfig], str]


def given_options(config: RecordConfig) -> frozenset[str]:
    """The fields the user set: ``config.given`` (the CLI fills it from click), else every field
    whose value differs from :class:`RecordConfig`'s default (library use)."""
    if config.given is not None:
        return config.given - IDENTITY
    default = RecordConfig()
    return frozenset(
        f.name
        for f in dataclasses.fields(RecordConfig)
        if f.name not in IDENTITY and getattr(config, f.name) != getattr(default, f.name)
    )


def _flag(name: str) -> str:
    return "--" + {
        "scrape_interval_s": "scrape-interval",
        "timeout_s": "timeout",
        "metrics_urls": "metrics-url",
        "labels": "label",
        "duration_s": "duration",
    }.get(name, name.replace("_", "-"))


def _levels(values: Iterable[int]) -> str:
    return ",".join(map(str, values))


def _per_level(counts: dict[str, int], levels: list[int], workload: Workload) -> str:
    shown = (counts.get(str(c)) for c in levels)
    return ", ".join(
        f"{level_name(workload, c)}: {'none' if n is None else n}"
        for c, n in zip(levels, shown, strict=True)
    )


def _rates(rates: list[float] | None) -> str:
    return "(none)" if not rates else ",".join(f"{r:g}" for r in rates)


def _optional(value: Any) -> str:
    return "(none)" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def _labels(labels: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) or "(none)"


def _bool(value: bool | None, yes: str, no: str) -> str:
    return "(unknown)" if value is None else yes if value else no


def _recorded_tokenizer(manifest: RunManifest) -> str | None:
    source = manifest.workload.prompt_source or ""
    return source[len(TOKENIZER_SOURCE) :] if source.startswith(TOKENIZER_SOURCE) else None


def _workload_differences(
    config: RecordConfig, manifest: RunManifest, given: frozenset[str]
) -> list[tuple[str, str, str]]:
    """(option, recorded, given) for each measured-shaping option given with another value."""
    workload, target = manifest.workload, manifest.target
    levels = list(workload.concurrency_levels)
    recorded_rates = (
        [workload.request_rates[str(k)] for k in levels] if workload.open_loop else None
    )
    # The counts a rate run plans are a rate level's (the run's rates, unless given again).
    planned = config
    if recorded_rates is not None and "request_rate" not in given:
        planned = dataclasses.replace(config, request_rate=recorded_rates, concurrency=[1])
    planned_levels = planned.level_keys() if {"concurrency", "request_rate"} & given else levels
    checks: dict[str, tuple[Any, Any, Callable[[Any], str]]] = {
        "endpoint": (target.endpoint, config.endpoint, str),
        "model": (target.model, config.model, str),
        "input_len": (workload.input_len, config.input_len, str),
        "output_len": (workload.output_len, config.output_len, str),
        "concurrency": (levels, config.concurrency, _levels),
        "request_rate": (recorded_rates, config.request_rate, _rates),
        "dataset": (workload.dataset or "random", config.dataset, str),
        "trace_speedup": (workload.trace_speedup, config.trace_speedup, _optional),
        "sessions": (workload.sessions, config.sessions, _optional),
        "turns": (workload.turns, config.turns, _optional),
        "think_time_ms": (workload.think_time_ms, config.think_time_ms, _optional),
        "arrival": (workload.arrival, config.arrival, _optional),
        "burstiness": (workload.burstiness, config.burstiness, _optional),
        "max_concurrency": (workload.max_concurrency, config.max_concurrency, _optional),
        "duration_s": (workload.duration_s, config.duration_s, _optional),
        "input_len_range": (workload.input_len_range, config.input_len_range or None, _optional),
        "output_len_range": (
            workload.output_len_range,
            config.output_len_range or None,
            _optional,
        ),
        "requests_per_level": (
            {str(c): workload.requests_per_level.get(str(c)) for c in planned_levels},
            {str(c): planned.requests_for(c) for c in planned_levels},
            lambda counts: _per_level(counts, planned_levels, workload),
        ),
        "warmup": (
            {str(c): workload.warmup_requests.get(str(c)) for c in planned_levels},
            {str(c): planned.warmup_for(c) for c in planned_levels},
            lambda counts: _per_level(counts, planned_levels, workload),
        ),
        "seed": (workload.seed, config.seed, str),
        "ignore_eos": (
            workload.ignore_eos,
            config.ignore_eos,
            lambda v: _bool(v, "--ignore-eos", "--no-ignore-eos"),
        ),
        "shared_prefix": (
            None if workload.unique_prefix is None else not workload.unique_prefix,
            config.shared_prefix,
            lambda v: _bool(v, "shared", "unique per request"),
        ),
        "labels": (dict(manifest.labels), dict(config.labels), _labels),
        "tokenizer": (_recorded_tokenizer(manifest), config.tokenizer, lambda v: v or "(none)"),
    }
    out: list[tuple[str, str, str]] = []
    for name, (recorded, wanted, show) in checks.items():
        if name in given and recorded != wanted:
            out.append((_flag(name), show(recorded), show(wanted)))
    return out


def _fact_differences(
    config: RecordConfig, manifest: RunManifest, given: frozenset[str]
) -> tuple[list[tuple[str, str, str]], list[str]]:
    """Facts about the server and its hardware given again: (differences, facts added)."""
    differences: list[tuple[str, str, str]] = []
    added: list[str] = []

    def compare(option: str, recorded: Fact | None, value: Any) -> None:
        if recorded is None or recorded.value is None:
            added.append(f"{option} {value}")
        elif recorded.value != value:
            differences.append((option, str(recorded.value), str(value)))

    server_config = manifest.server.config
    for option, field_name in USER_SERVER_FACTS.items():
        if option in given and getattr(config, option) is not None:
            compare(_flag(option), getattr(server_config, field_name), getattr(config, option))
    hardware = manifest.hardware
    if "gpu" in given and config.gpu is not None:
        from sweeper.facts.hardware import gpu_facts

        name = gpu_facts(config.gpu, config.gpu_count).gpu_name
        compare("--gpu", hardware.gpu_name, name.value if name is not None else config.gpu)
    if "gpu_count" in given and config.gpu_count is not None:
        compare("--gpu-count", hardware.gpu_count, config.gpu_count)
    if "model_config" in given and config.model_config is not None:
        from sweeper.facts.hardware import model_facts

        facts = model_facts(manifest.target.model, config.model_config)
        for key in ("parameters", "kv_bytes_per_token"):
            got = getattr(facts, key)
            if got is not None:
                compare(f"--model-config ({key})", getattr(manifest.model, key), got.value)
    return differences, added


# How the server is reached and how the recording goes, applied to the rest of a resumed run:
# field -> its value as the command line writes it.
APPLIED: dict[str, Shown] = {
    "metrics_urls": lambda c: (
        "none" if c.metrics_urls == [] else ",".join(map(strip_credentials, c.metrics_urls or []))
    ),
    "scrape_interval_s": lambda c: f"{c.scrape_interval_s:g}",
    "server_log": lambda c: str(c.server_log),
    "timeout_s": lambda c: f"{c.timeout_s:g}",
    "max_error_rate": lambda c: f"{c.max_error_rate:g}",
    "workers": lambda c: str(c.workers),
    "ray": lambda c: strip_credentials(str(c.ray)),
    "worker_cpus": lambda c: f"{c.worker_cpus:g}",
    "http_client": lambda c: c.http_client,
}


def _command_values(command: list[str], flag: str) -> list[str]:
    """Every value of ``flag`` on a recorded command line (``--flag V`` or ``--flag=V``)."""
    values: list[str] = []
    for i, arg in enumerate(command):
        if arg == flag and i + 1 < len(command):
            values.append(command[i + 1])
        elif arg.startswith(flag + "="):
            values.append(arg[len(flag) + 1 :])
    return values


def _recorded_setting(manifest: RunManifest, name: str) -> str | None:
    """What the run's own command line gave for a setting (its default if it gave none), as
    :data:`APPLIED` writes it; None when the run has no command line (a library call)."""
    command = manifest.source.command
    if command is None:
        return None
    if name == "metrics_urls":
        if "--no-metrics" in command:
            return "none"
        return ",".join(_command_values(command, "--metrics-url"))
    values = _command_values(command, _flag(name))
    if not values:
        return APPLIED[name](RecordConfig())
    if name in ("scrape_interval_s", "timeout_s", "max_error_rate"):
        try:
            return f"{float(values[-1]):g}"
        except ValueError:
            return values[-1]
    return values[-1]


def check_resume(config: RecordConfig, manifest: RunManifest) -> list[str]:
    """Refuse a resume whose options would change what the run measures (one ConfigError listing
    every difference: option, recorded value, given value). Otherwise fill ``config.tokenizer``
    from the run where not given, add the server facts given that the run lacked, and return the
    notes of what was applied to the rest of the run."""
    given = given_options(config)
    differences = _workload_differences(config, manifest, given)
    facts, added = _fact_differences(config, manifest, given)
    differences += facts
    if differences:
        width = max(len(option) for option, _, _ in differences)
        rows = "\n".join(
            f"  {option:<{width}}  recorded {recorded!s}, given {wanted!s}"
            for option, recorded, wanted in differences
        )
        raise ConfigError(
            f"--resume: {len(differences)} option(s) differ from run {manifest.run_id!r}, and a "
            "resumed run keeps what it measures; give the recorded values or leave them out "
            f"(or record a new run with --run-id):\n{rows}"
        )
    workload = manifest.workload
    unfinished = {
        c: workload.requests_per_level.get(str(c), 0)
        for c in workload.concurrency_levels
        if (level := manifest.level(c)) is None or level.status != "complete"
    }
    short = None if workload.open_loop else short_levels(unfinished)
    if short is not None:
        raise ConfigError(
            f"--resume: run {manifest.run_id!r} plans fewer measured requests than streams at "
            f"{short}, so those levels would never reach their concurrency; record a new run"
        )
    if "tokenizer" not in given:
        config.tokenizer = _recorded_tokenizer(manifest)
    _inherit_settings(config, manifest, given)
    _add_facts(config, manifest, given)
    notes = [f"resumed with {fact} (the run had no such fact): added" for fact in added]
    for name in ("base_url", *APPLIED):
        if name not in given:
            continue
        if name == "base_url":
            root = api_roots(config.base_url or "")[0]
            if strip_credentials(root) == manifest.target.base_url:
                continue
            notes.append(
                f"resumed against {strip_credentials(root)} (recorded: "
                f"{manifest.target.base_url}): the rest of the run is sent there"
            )
            continue
        value, recorded = APPLIED[name](config), _recorded_setting(manifest, name)
        if value == recorded:
            continue
        flag = "--metrics-url" if name == "metrics_urls" else _flag(name)
        was = f" (the run's first part: {recorded or 'default'})" if recorded is not None else ""
        notes.append(f"resumed with {flag} {value}{was}: applied to the requests sent from now on")
    return notes


def _inherit_settings(config: RecordConfig, manifest: RunManifest, given: frozenset[str]) -> None:
    """The settings the run's own command line gave and this resume does not: the run's."""
    command = manifest.source.command
    if command is None:
        return
    for name in APPLIED:
        if name in given:
            continue
        if name == "metrics_urls":
            urls = _command_values(command, "--metrics-url")
            if "--no-metrics" in command or urls:
                config.metrics_urls = [] if "--no-metrics" in command else urls
            continue
        values = _command_values(command, _flag(name))
        if not values:
            continue
        with contextlib.suppress(ValueError):
            if name == "server_log":
                if Path(values[-1]).is_file():
                    config.server_log = Path(values[-1])
            elif name == "workers":
                config.workers = int(values[-1])
            elif name == "ray":
                config.ray = values[-1]
            elif name == "http_client":
                config.http_client = "httpx" if values[-1] == "httpx" else "raw"
            else:
                setattr(config, name, float(values[-1]))


def _add_facts(config: RecordConfig, manifest: RunManifest, given: frozenset[str]) -> None:
    """Record the facts about the server a resume gave that the run lacked (the others match)."""
    from sweeper.facts.hardware import gpu_facts, model_facts

    server_config, hardware = manifest.server.config, manifest.hardware
    for option, field_name in USER_SERVER_FACTS.items():
        value = getattr(config, option)
        if (
            option in given
            and value is not None
            and fact_value(getattr(server_config, field_name)) is None
        ):
            setattr(
                server_config, field_name, Fact(value=value, source="user", detail=_flag(option))
            )
    if "gpu" in given and config.gpu is not None and fact_value(hardware.gpu_name) is None:
        count = config.gpu_count or fact_value(hardware.gpu_count)
        manifest.hardware = gpu_facts(config.gpu, count if isinstance(count, int) else None)
    elif (
        "gpu_count" in given
        and config.gpu_count is not None
        and fact_value(hardware.gpu_count) is None
    ):
        hardware.gpu_count = Fact(value=config.gpu_count, source="user", detail="--gpu-count")
    if (
        "model_config" in given
        and config.model_config is not None
        and manifest.model.parameters is None
    ):
        facts = model_facts(manifest.target.model, config.model_config)
        facts.name = facts.name or manifest.target.model
        manifest.model = facts


def close_killed_attempts(manifest: RunManifest, requests: Iterable[RequestTrace]) -> None:
    """Close each level's attempt a killed recorder left open (end: the end of the last request
    it wrote; outcome ``killed``), and give a level recorded before attempts were kept its one
    attempt (from its start and end)."""
    ends: dict[int, list[int]] = {}
    for trace in requests:
        if trace.status != "cancelled":
            ends.setdefault(trace.concurrency, []).append(trace.send_ns + (trace.end_ns or 0))
    for level in manifest.levels:
        if not level.attempts and level.start_ns is not None:
            level.attempts.append(LevelAttempt(start_ns=level.start_ns))
            if level.status in ("complete", "aborted", "interrupted") and level.end_ns is not None:
                level.attempts[-1].end_ns = level.end_ns
                level.attempts[-1].outcome = level.status
        _close_last(level, ends.get(level.concurrency, []))


def _close_last(level: LevelStatus, ends: list[int]) -> None:
    if not level.attempts or level.attempts[-1].end_ns is not None:
        return
    attempt = level.attempts[-1]
    after = [end for end in ends if end >= attempt.start_ns]
    attempt.end_ns = max(after, default=attempt.start_ns)
    attempt.outcome = "killed"
    if level.end_ns is None or level.end_ns < attempt.end_ns:
        level.end_ns = attempt.end_ns
