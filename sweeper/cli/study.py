"""``sweeper study``: ``run`` (a server per configuration, a sweep each, the study manifest) and
``summary`` (the configurations side by side, the Pareto frontier, the best per SLO).

``study run`` takes every option of ``sweeper record`` but those the study sets per run
(``--base-url``, ``--run-id``, ``--resume``, ``--server-log``): the same click parameters, so
names, defaults and checks cannot drift, and the :class:`RecordConfig` is built by the same
:func:`~sweeper.cli.record.record_config`.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import shlex
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from sweeper.analysis.slo import parse_slos
from sweeper.cli._common import check_writable_folder, friendly_errors, load_run
from sweeper.cli.record import EXIT_INTERRUPTED, given_fields, record_command, record_config
from sweeper.errors import ConfigError
from sweeper.record.progress import default_progress
from sweeper.store import DEFAULT_TRACES_DIR
from sweeper.study import (
    DEFAULT_TOLERANCE,
    StudyPlan,
    expand_configurations,
    read_study,
    read_study_file,
    render_study_summary,
    run_study,
    study_csv,
    study_folder,
    summarize_study,
)
from sweeper.study.advice import advice_from_run, run_flags, workload_options
from sweeper.study.model import Advice
from sweeper.study.server import DEFAULT_START_TIMEOUT_S

# The record options a study sets itself for each run.
STUDY_SET = frozenset({"base_url", "run_id", "resume", "server_log"})


def _for_study(param: click.Parameter) -> click.Parameter:
    """A record option as ``study run`` shows it: --label's example is one the study allows."""
    if param.name == "labels" and isinstance(param, click.Option):
        param = copy.copy(param)
        param.help = (
            "Free-form label stored in each run's manifest; repeatable, e.g. --label gpu=h100. "
            "The study sets study=, flags=, repeat= and probe= itself (refused here)."
        )
    return param


RECORD_PARAMS = [_for_study(p) for p in record_command.params if p.name not in STUDY_SET]
_SOURCES = (click.core.ParameterSource.COMMANDLINE, click.core.ParameterSource.ENVIRONMENT)


@click.group("study")
def study_command() -> None:
    """Studies: the same sweep against a server started once per configuration of its flags.

    \b
    Examples:
      sweeper study run s1 --serve 'vllm serve M --port {port} {flags}' \\
          --config '--max-num-batched-tokens 2048' --config '--max-num-batched-tokens 8192' \\
          --input-len 1000 --output-len 64 --concurrency 1,4,16
      sweeper study summary s1 --slo 'ttft_p99<=2s'
    """


def _jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    return value


def _record_options(
    ctx: click.Context, options: dict[str, Any], defaults: dict[str, Any]
) -> tuple[dict[str, Any], set[str]]:
    """The record options: those given on the command line (or environment) win, then those of
    the study file or of the stored study (``defaults``, by parameter name), then click's
    defaults. Returns (options, the names given either way)."""
    given = {name for name in options if ctx.get_parameter_source(name) in _SOURCES}
    params = {p.name: p for p in RECORD_PARAMS}
    unknown = sorted(set(defaults) - set(params) - {"api_key"})
    if unknown:
        raise ConfigError(
            f"unknown record option(s) {', '.join(unknown)} in the study file or study.json"
        )
    for name, value in defaults.items():
        if name in given or name == "api_key":
            continue
        options[name] = params[name].type_cast_value(ctx, value)
        given.add(name)
        # Given, as if on the command line: --resume compares it with the run's own.
        ctx.set_parameter_source(name, click.core.ParameterSource.COMMANDLINE)
    return options, given


def _stored(options: dict[str, Any], given: set[str]) -> dict[str, Any]:
    """What study.json keeps of the record options: those given, never the API key."""
    return {
        name: _jsonable(options[name]) for name in sorted(given) if name not in ("api_key", "out")
    }


@study_command.command("run", context_settings={"show_default": True})
@click.argument("study_id")
@click.option(
    "--serve",
    "template",
    metavar="TEMPLATE",
    help="The server command, with {port} and {flags}, e.g. 'vllm serve M --port {port} {flags}'. "
    "Leading NAME=value words set environment variables. Required unless --resume.",
)
@click.option(
    "--config",
    "configs",
    multiple=True,
    metavar="FLAGS",
    help="One configuration: the flags put at {flags}; repeatable, e.g. --config '--max-num-seqs 64'.",
)
@click.option(
    "--grid",
    multiple=True,
    metavar="NAME=V1,V2",
    help="Each value of a flag (the product over --grid options, times each --config); "
    "true: the bare flag, false: left out; e.g. --grid max-num-batched-tokens=2048,8192.",
)
@click.option(
    "--from-advice",
    metavar="RUN_ID",
    help="Check RUN_ID's advice: its findings' proposed flag changes, each a configuration "
    "beside its own flags (its label flags=, else the one --config), on its workload.",
)
@click.option(
    "--study-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    metavar="PATH",
    help="YAML: serve, configs, grid, repeats, find_max {slo, tolerance}, record {option: value}; "
    "the command line wins.",
)
@click.option(
    "--repeats",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Record each configuration's sweep N times (runs <id>-r1..rN), for intervals.  [default: 1]",
)
@click.option(
    "--find-max",
    is_flag=True,
    help="After the sweep, bisect between the highest level meeting --slo and the lowest "
    "failing it, each probe a run of one level, until the limit is known within --tolerance.",
)
@click.option(
    "--slo",
    metavar="TERMS",
    help="The service level --find-max searches for, all terms together, e.g. 'ttft_p99<=2s'; "
    "only with --find-max (sweeper study summary --slo judges a finished study).",
)
@click.option(
    "--tolerance",
    type=float,
    default=None,
    metavar="FRACTION",
    help=f"--find-max stops when the failing level is within this fraction above the meeting "
    f"one.  [default: {DEFAULT_TOLERANCE:g}]",
)
@click.option(
    "--start-timeout",
    "start_timeout_s",
    type=click.FloatRange(min=0, min_open=True),
    default=DEFAULT_START_TIMEOUT_S,
    metavar="SECONDS",
    help="How long a server may take to answer /health (or /v1/models).",
)
@click.option(
    "--resume",
    "resume_study",
    is_flag=True,
    help="Go on with the study: finished runs are skipped, the unfinished one resumed, the "
    "options not given again are the study's own.",
)
@friendly_errors
def study_run_command(**options: Any) -> None:
    """Start the server once per configuration, record the same sweep against each, stop it.

    Each configuration's server runs in its own process group on a free port, its log in
    <out>/STUDY_ID/logs/ (handed to the run as --server-log); it is stopped after its sweep, on
    Ctrl-C, on an error, and (PR_SET_PDEATHSIG, the pid file) when the study is killed. A server
    that does not start is recorded as failed with its log's last lines, and the study goes on.
    Every option of `sweeper record` applies to each sweep, except those the study sets.

    \b
    Examples:
      sweeper study run chunk --serve 'vllm serve Qwen/Qwen2.5-7B --port {port} {flags}' \\
          --grid max-num-batched-tokens=512,2048,8192 --input-len 1000 --output-len 64 \\
          --concurrency 1,4,16,64
      sweeper study run chunk --resume
      sweeper study run check --from-advice qwen7b-4090-20261129 \\
          --serve 'vllm serve M --port {port} {flags}' --config '--max-num-seqs 128'
    """
    ctx = click.get_current_context()
    study = {k: options.pop(k) for k in list(options) if k not in {p.name for p in RECORD_PARAMS}}
    file = read_study_file(study["study_file"]) if study["study_file"] else {}
    out = options["out"]
    stored: dict[str, Any] = {}
    folder = study_folder(out, study["study_id"])
    if study["resume_study"] and (folder / "study.json").exists():
        stored = read_study(folder).record_options
    advice, workload = _from_advice(study, out)
    options, given = _record_options(ctx, options, {**workload, **stored, **file.get("record", {})})
    quiet = options.pop("quiet")
    given.discard("quiet")
    plan = _plan(study, file, options, given)
    plan.advice = advice
    check_writable_folder(plan.record.out)
    try:
        manifest = run_study(
            plan,
            progress=lambda: default_progress(quiet=quiet),
            echo=lambda text: click.echo(text, err=True),
        )
    except KeyboardInterrupt:
        command = shlex.join(
            ["sweeper", "study", "run", plan.study_id, "--resume", "--out", str(out)]
        )
        click.echo(
            f"interrupted: the server is stopped and what was recorded is kept; go on with: {command}",
            err=True,
        )
        sys.exit(EXIT_INTERRUPTED)
    failed = [c for c in manifest.configurations if c.status == "failed"]
    done = sum(c.status == "complete" for c in manifest.configurations)
    click.echo(
        f"study {manifest.study_id}: {done} of {len(manifest.configurations)} configuration(s) "
        f"complete{f', {len(failed)} failed' if failed else ''} "
        f"({study_folder(out, manifest.study_id) / 'study.json'})"
    )
    if failed and done == 0:
        sys.exit(1)


def _from_advice(study: dict[str, Any], out: Path) -> tuple[Advice | None, dict[str, Any]]:
    """``--from-advice RUN_ID``: the run's proposals as configurations beside its own flags
    (``study["configs"]`` replaced), and its workload as the record options' defaults."""
    run_id = study.pop("from_advice")
    if not run_id:
        return None, {}
    if study["grid"] or len(study["configs"]) > 1:
        raise click.UsageError(
            "--from-advice takes at most one --config (the run's own flags) and no --grid"
        )
    ts = load_run(run_id, out)
    labelled = run_flags(ts.manifest)
    baseline = study["configs"][0] if study["configs"] else (labelled or "")
    advice = advice_from_run(ts, baseline)
    not_tried = "; ".join(
        f"{n['flag']} {n['direction']} ({n['finding']})" for n in advice.not_tried
    )
    if not advice.changes:
        raise click.UsageError(
            f"the findings of {ts.run_id} propose no flag change with a value to try"
            + (f" (only directions: {not_tried})" if not_tried else "")
        )
    source = "its label flags=" if labelled is not None and not study["configs"] else "--config"
    click.echo(
        f"advice of {ts.run_id}: baseline {advice.baseline or '(no flags)'!r} ({source}); "
        + ", ".join(f"{c.flag} {c.value} ({c.finding})" for c in advice.changes)
        + (f"; not tried (no value): {not_tried}" if not_tried else ""),
        err=True,
    )
    study["configs"] = (advice.baseline, *(c.flags for c in advice.changes))
    return advice, workload_options(ts.manifest)


def _plan(
    study: dict[str, Any], file: dict[str, Any], options: dict[str, Any], given: set[str]
) -> StudyPlan:
    try:
        config = record_config(options, given_fields(click.get_current_context(), options))
        dataclasses.replace(config, base_url="http://127.0.0.1:1").check()
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    find = file.get("find_max") or {}
    slo_text = study["slo"] or find.get("slo")
    find_max = study["find_max"] or bool(find)
    if find_max and not slo_text:
        raise click.UsageError("--find-max needs --slo (e.g. --slo 'ttft_p99<=2s')")
    if study["slo"] and not find_max:
        raise click.UsageError(
            "--slo is the service level --find-max searches for: add --find-max, or leave --slo "
            "out (sweeper study summary --slo judges a finished study)"
        )
    configurations = expand_configurations(
        [*file.get("configs", []), *study["configs"]], [*file.get("grid", []), *study["grid"]]
    )
    if study["resume_study"] and not (study["configs"] or study["grid"] or file):
        configurations = []
    tolerance = study["tolerance"] or find.get("tolerance") or DEFAULT_TOLERANCE
    return StudyPlan(
        study_id=study["study_id"],
        template=study["template"] or file.get("serve"),
        configurations=configurations,
        record=config,
        repeats=study["repeats"] or int(file.get("repeats") or 1),
        find_max=parse_slos(slo_text) if find_max and slo_text else None,
        tolerance=float(tolerance),
        resume=study["resume_study"],
        start_timeout_s=study["start_timeout_s"],
        record_options=_stored(options, given),
    )


@study_command.command("summary")
@click.argument("study_id")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_TRACES_DIR,
    show_default=True,
    metavar="DIR",
    help="The traces folder the study and its runs live in.",
)
@click.option(
    "--slo",
    "slos",
    multiple=True,
    metavar="TERMS",
    help="A service level (all terms together), repeatable: `best` names, for each, the "
    "configuration and level with the most goodput meeting it.  [default: p99 TTFT <= 0.5 / 1 / "
    "2 s, p50 ITL <= 20 / 50 ms]",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "csv"]),
    default="table",
    show_default=True,
    help="table: the terminal; json: the contract in docs/study.md; csv: one row per "
    "configuration and level.",
)
@friendly_errors
def study_summary_command(study_id: str, out: Path, slos: tuple[str, ...], fmt: str) -> None:
    """The configurations of STUDY_ID side by side: per level numbers, the Pareto frontier
    (output tok/s per GPU against p99 TTFT and against tok/s per user) and the best per SLO.

    \b
    Examples:
      sweeper study summary chunk
      sweeper study summary chunk --slo 'ttft_p99<=1s' --slo 'itl_p99<=50ms' --format json
    """
    summary = summarize_study(study_id, out, slos=list(slos) or None)
    if fmt == "json":
        click.echo(json.dumps(summary, indent=2, allow_nan=False))
    elif fmt == "csv":
        click.echo(study_csv(summary), nl=False)
    else:
        render_study_summary(summary, Console(width=max(Console().width, 120)))


# Every option of `sweeper record` but those the study sets, after the study's own.
study_run_command.params.extend(RECORD_PARAMS)
