"""``sweeper study run``: for each configuration, start its server, record its sweeps (and
``--find-max`` probes) with :func:`sweeper.record.record_sweep`, stop the server; then the next.

:func:`run_study` is the library call. Its :class:`StudyPlan` carries a :class:`RecordConfig` as
``sweeper record`` would build it (the record options); per run it is copied with the server's
base URL, the run id, the server log and the labels ``study`` / ``flags`` / ``repeat`` set.

What ends how:

- a server that does not start (a bad flag, a crash, no health in time): the configuration is
  ``failed`` with the log's last lines in ``error``, and the study goes on;
- a sweep stopped by ``--max-error-rate``: the run is ``aborted`` (a measurement: kept as it is);
  the server dying during a sweep fails the configuration with its log's tail;
- Ctrl-C, SIGTERM or SIGHUP: the run is marked incomplete (by the recorder), the server
  stopped, the study manifest written, and KeyboardInterrupt goes on up; ``--resume`` picks up
  there;
- the study process killed: see :mod:`sweeper.study.server`; ``--resume`` finds each run's
  manifest and resumes the unfinished one, skipping every finished run and configuration.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import shlex
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweeper.analysis.slo import SLO, parse_slos, slo_label
from sweeper.errors import ConfigError, ErrorRateExceeded, SweeperError
from sweeper.record import RecordConfig, RequestCount, record_sweep
from sweeper.record.progress import NullProgress, Progress
from sweeper.redact import PATTERNS, REDACTED, Redactor, redact, run_secrets
from sweeper.schema import MANIFEST_FILE
from sweeper.store import copy_redacted, load_trace_set, read_manifest
from sweeper.study.configs import probe_run_id, run_ids, sweep_run_id
from sweeper.study.model import (
    FINISHED,
    LOCK_FILE,
    LOGS_DIR,
    PID_FILE,
    Advice,
    FindMax,
    StudyConfiguration,
    StudyManifest,
    StudyRun,
    read_study,
    study_folder,
    write_study,
)
from sweeper.study.search import DEFAULT_TOLERANCE, bracket, level_means, meets_all
from sweeper.study.server import (
    DEFAULT_START_TIMEOUT_S,
    ServerProcess,
    ServerStartError,
    check_template,
    free_port,
    log_tail,
    reap_stale_server,
    server_command,
)

# Labels the study sets on each run (a --label of the same key would be replaced).
STUDY_LABELS = ("study", "flags", "repeat", "probe")
# Fields of RecordConfig the study sets for each run (never compared on --resume as the user's).
STUDY_FIELDS = frozenset({"base_url", "run_id", "server_log", "labels", "resume"})

Echo = Callable[[str], None]


@dataclass
class StudyPlan:
    """What ``sweeper study run`` was asked: the study, its server template and configurations
    (flag strings), the record options (``record``), repeats and the ``--find-max`` SLO."""

    study_id: str
    template: str | None
    configurations: list[str]
    record: RecordConfig = field(default_factory=RecordConfig)
    repeats: int = 1
    find_max: list[SLO] | None = None
    tolerance: float = DEFAULT_TOLERANCE
    resume: bool = False
    start_timeout_s: float = DEFAULT_START_TIMEOUT_S
    record_options: dict[str, Any] = field(default_factory=dict)
    advice: Advice | None = None  # --from-advice: the run whose proposals are the configurations


@contextlib.contextmanager
def study_lock(folder: Path) -> Iterator[None]:
    """One study process per study: a second one is refused (it would start a second server)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / LOCK_FILE, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(
                f"study {folder.name!r} is being run by another process (lock {folder / LOCK_FILE})"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        yield


def run_study(
    plan: StudyPlan,
    *,
    progress: Callable[[], Progress] | None = None,
    echo: Echo | None = None,
) -> StudyManifest:
    """Run (or resume) a study; return its manifest. Raises :class:`ConfigError` for a plan
    that cannot run; KeyboardInterrupt after stopping the server and saving where it stood."""
    say = echo or (lambda _text: None)
    folder = study_folder(plan.record.out, plan.study_id)
    _check_plan(plan)
    with interrupt_on_termination(), study_lock(folder):
        # A study killed with -9 left its server's log raw: masked before anything else.
        redactor = study_redactor(plan)
        for log in sorted((folder / LOGS_DIR).glob("*.log")):
            _redact_log(log, redactor)
        note = reap_stale_server(folder / PID_FILE)
        if note:
            say(note)
        manifest = _open_manifest(plan, folder)
        template = plan.template or manifest.template
        check_template(template)
        write_study(folder, manifest)
        for configuration in manifest.configurations:
            if configuration.status == "complete":
                say(f"{configuration.run_id}: complete, skipped")
                continue
            _run_configuration(plan, manifest, configuration, template, progress, say, redactor)
        return manifest


def study_redactor(plan: StudyPlan) -> Redactor:
    """The secrets a study knows: the record options' (API key, metrics URLs' user info) and the
    values of options named like keys in its template and configurations (``--api-key X``)."""
    secrets = run_secrets(api_key=plan.record.api_key, urls=plan.record.metrics_urls or ())
    for text in (plan.template or "", *plan.configurations):
        secrets += command_secrets(text)
    return Redactor(secrets)


def command_secrets(text: str) -> list[str]:
    """The values a command line's options named like keys hold (``--api-key X``: ``X``)."""
    try:
        words = shlex.split(text)
    except ValueError:
        return []
    out = []
    for word, masked in zip(words, PATTERNS.argv(words), strict=True):
        if word != masked and REDACTED in masked:
            head, _, tail = masked.partition(REDACTED)
            out.append(word[len(head) : len(word) - len(tail)])
    return [s for s in out if s]


TERMINATION_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def interrupt_on_termination() -> Iterator[None]:
    """While a study runs, SIGTERM and SIGHUP (``kill``, a closed terminal) do what Ctrl-C does:
    the SIGINT handler runs (KeyboardInterrupt in the main thread, or the event loop's
    cancellation while a sweep records), so the run is marked incomplete, the server stopped,
    its log masked and study.json saved. Only in the main thread (where signals are handled)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler):
            handler(signal.SIGINT, frame)
        else:  # SIGINT ignored or left to the system: as Python's own handler would
            raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, interrupt) for sig in TERMINATION_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _check_plan(plan: StudyPlan) -> None:
    if plan.repeats < 1:
        raise ConfigError(f"--repeats {plan.repeats} must be at least 1")
    if not 0 < plan.tolerance < 1:
        raise ConfigError(f"--tolerance {plan.tolerance:g} must be above 0 and below 1 (e.g. 0.1)")
    if plan.template is not None:
        check_template(plan.template)
    reserved = [key for key in STUDY_LABELS if key in plan.record.labels]
    if reserved:
        raise ConfigError(
            f"--label {', '.join(f'{k}=' for k in reserved)}: the study sets "
            f"{'this label' if len(reserved) == 1 else 'these labels'} on each run itself "
            f"({', '.join(f'{k}=' for k in STUDY_LABELS)}); pick another key"
        )


def _open_manifest(plan: StudyPlan, folder: Path) -> StudyManifest:
    """The study's manifest: a new one, or (``--resume``) the one on disk with any new
    configurations added at the end."""
    exists = (folder / "study.json").exists()
    if exists and not plan.resume:
        raise ConfigError(
            f"study {plan.study_id!r} already exists in {folder.parent}/; add --resume to finish "
            "it, or pick another STUDY_ID"
        )
    if not exists:
        if plan.resume:
            raise ConfigError(f"--resume: no study {plan.study_id!r} in {folder.parent}/")
        if plan.template is None:
            raise ConfigError(
                "--serve is required (e.g. --serve 'vllm serve M --port {port} {flags}')"
            )
        manifest = StudyManifest(
            study_id=plan.study_id,
            template=redact(plan.template),
            repeats=plan.repeats,
            record_options=plan.record_options,
            advice=plan.advice,
        )
    else:
        manifest = read_study(folder)
        if plan.template is None and "***" in manifest.template:
            raise ConfigError(
                "--resume: the stored server template has masked secrets; pass --serve again"
            )
        manifest.repeats = max(manifest.repeats, plan.repeats)
    if plan.find_max:
        manifest.find_max = {"slo": slo_label(plan.find_max), "tolerance": plan.tolerance}
    elif manifest.find_max:  # resumed without --find-max: the study's own search goes on
        plan.find_max = parse_slos(manifest.find_max["slo"])
        plan.tolerance = float(manifest.find_max["tolerance"])
    # A configuration given again is the stored one: matched on the masked form study.json
    # keeps (``--api-key ***``), and run with the flags as given (the real value).
    known = {redact(c.flags): c for c in manifest.configurations}
    given_again: set[int] = set()
    new: list[str] = []
    for flags in plan.configurations:
        stored = known.get(redact(flags))
        if stored is None:
            new.append(flags)
        else:
            stored.flags = flags
            given_again.add(stored.index)
    wanted = [c.flags for c in manifest.configurations] + new
    bases = run_ids(plan.study_id, wanted)
    for index in range(len(manifest.configurations), len(wanted)):
        manifest.configurations.append(
            StudyConfiguration(index=index + 1, flags=wanted[index], run_id=bases[index])
        )
    for configuration in manifest.configurations:
        _plan_runs(configuration, manifest.repeats, bool(plan.find_max))
    masked = [
        c
        for c in manifest.configurations
        if c.status != "complete" and c.index not in given_again and REDACTED in c.flags
    ]
    if masked:
        raise ConfigError(
            "--resume: study.json keeps the secrets of "
            + ", ".join(repr(c.flags) for c in masked)
            + " masked; give "
            + ("that configuration" if len(masked) == 1 else "those configurations")
            + " again with --config and the real value (it is the same configuration)"
        )
    return manifest


def _plan_runs(configuration: StudyConfiguration, repeats: int, find_max: bool) -> None:
    """The configuration's sweep runs, repeat 1..N: ``<base>`` alone, ``<base>-r1``... with
    repeats. A study resumed with more repeats adds ``-r<k>`` runs (its first keeps its id)."""
    sweeps = configuration.sweeps
    base = configuration.run_id.removesuffix("-r1")
    for repeat in range(len(sweeps) + 1, repeats + 1):
        run_id = sweep_run_id(base, repeat, repeats if repeat == 1 else max(repeats, 2))
        configuration.runs.append(StudyRun(run_id=run_id, repeat=repeat))
    configuration.run_id = configuration.sweeps[0].run_id
    unfinished = any(r.status not in FINISHED for r in configuration.sweeps)
    searching = find_max and not (configuration.find_max and configuration.find_max.done)
    if configuration.status == "complete" and (unfinished or searching):
        configuration.status = "incomplete"


@dataclass
class _Context:
    plan: StudyPlan
    manifest: StudyManifest
    configuration: StudyConfiguration
    server: ServerProcess
    folder: Path
    progress: Callable[[], Progress] | None
    say: Echo

    def save(self) -> None:
        write_study(self.folder, self.manifest)


def _run_configuration(
    plan: StudyPlan,
    manifest: StudyManifest,
    configuration: StudyConfiguration,
    template: str,
    progress: Callable[[], Progress] | None,
    say: Echo,
    redactor: Redactor = PATTERNS,
) -> None:
    folder = study_folder(plan.record.out, plan.study_id)
    log_rel = f"{LOGS_DIR}/{configuration.run_id}.log"
    configuration.server_log = log_rel
    port = free_port()
    argv, env = server_command(template, port, configuration.flags)
    server = ServerProcess(
        argv, env, port, folder / log_rel, folder / PID_FILE, start_timeout_s=plan.start_timeout_s
    )
    ctx = _Context(plan, manifest, configuration, server, folder, progress, say)
    configuration.status, configuration.error = "running", None
    ctx.save()
    say(
        f"{configuration.run_id}: starting the server ({redact(configuration.flags) or 'no flags'})"
    )
    try:
        server.start()
    except KeyboardInterrupt:
        configuration.status = "incomplete"
        ctx.save()
        raise
    except ServerStartError as exc:
        configuration.status = "failed"
        configuration.error = f"{exc}\n{exc.log_tail}".strip()
        ctx.save()
        say(f"{configuration.run_id}: failed: {exc}")
        _redact_log(server.log_path, redactor)
        return
    try:
        _record_configuration(ctx)
    finally:
        server.stop()
        _redact_log(server.log_path, redactor)
        ctx.save()


def _record_configuration(ctx: _Context) -> None:
    configuration = ctx.configuration
    try:
        for run in configuration.sweeps:
            if run.status in FINISHED:
                continue
            if not _record_run(ctx, run, {}):
                return
        if ctx.plan.find_max:
            _find_max(ctx, ctx.plan.find_max)
    except KeyboardInterrupt:
        configuration.status = "incomplete"
        raise
    configuration.status = "complete"


def _record_run(ctx: _Context, run: StudyRun, overrides: dict[str, Any]) -> bool:
    """Record (or resume) one run; False when the configuration cannot go on."""
    base, configuration = ctx.plan.record, ctx.configuration
    out = Path(base.out)
    resume = (out / run.run_id / MANIFEST_FILE).exists()
    labels = {**base.labels, "study": ctx.manifest.study_id, "flags": configuration.flags}
    if ctx.manifest.repeats > 1 or run.repeat > 1:
        labels["repeat"] = str(run.repeat)
    if run.kind == "probe":
        labels["probe"] = "find-max"
    overrides = {**flag_facts(configuration.flags), **overrides}
    given = None if base.given is None else base.given | STUDY_FIELDS | set(overrides)
    config = dataclasses.replace(
        base,
        base_url=ctx.server.base_url,
        run_id=run.run_id,
        server_log=ctx.server.log_path,
        labels=labels,
        resume=resume,
        given=given,
        **overrides,
    )
    run.status, run.error = "running", None
    ctx.save()
    ctx.say(f"{run.run_id}: {'resuming' if resume else 'recording'}")
    try:
        record_sweep(config, progress=(ctx.progress or NullProgress)())
    except KeyboardInterrupt:
        run.status = "incomplete"
        raise
    except ErrorRateExceeded as exc:
        run.status, run.error = "aborted", str(exc)
    except SweeperError as exc:
        run.status, run.error = "failed", str(exc)
    else:
        run.status = read_manifest(out / run.run_id).status
    ctx.save()
    if not ctx.server.alive():
        tail = log_tail(ctx.server.log_path)
        configuration.status = "failed"
        configuration.error = f"the server exited during run {run.run_id}; its log:\n{tail}"
        return False
    if run.status == "failed":
        configuration.status, configuration.error = "failed", run.error
        return False
    return True


def _find_max(ctx: _Context, slos: list[SLO]) -> None:
    configuration, base = ctx.configuration, ctx.plan.record
    state = configuration.find_max or FindMax(slo=slo_label(slos), tolerance=ctx.plan.tolerance)
    configuration.find_max = state
    rate = base.request_rate is not None
    while True:
        finished = [r for r in configuration.runs if r.status in FINISHED]
        trace_sets = [load_trace_set(Path(base.out) / r.run_id) for r in finished]
        judged = {v: meets_all(row, slos) for v, row in level_means(trace_sets, slos).items()}
        found = bracket(judged, tolerance=ctx.plan.tolerance, integer=not rate)
        state.meets, state.fails = found.meets, found.fails
        if found.next_probe is None:
            state.done = True
            ctx.save()
            return
        value = found.next_probe
        run_id = probe_run_id(configuration.sweeps[0].run_id, value, rate)
        run = configuration.run(run_id)
        if run is None:
            run = StudyRun(run_id=run_id, kind="probe", probe=value)
            configuration.runs.append(run)
            state.probes.append(value)
        if run.status in FINISHED:  # measured nothing usable at that level: stop searching
            state.done = True
            ctx.save()
            return
        ctx.say(f"{configuration.run_id}: --find-max probes {'rate' if rate else 'C='}{value:g}")
        if not _record_run(ctx, run, _probe_overrides(base, value, rate)):
            return


# Server flags that are facts a sweep's manifest records (``sweeper record --max-num-seqs``...):
# no endpoint says them, the configuration's flags do.
FLAG_FACTS = {
    "--max-num-seqs": "max_num_seqs",
    "--max-num-batched-tokens": "max_num_batched_tokens",
    "--tensor-parallel-size": "tp",
    "-tp": "tp",
    "--pipeline-parallel-size": "pp",
    "-pp": "pp",
    "--data-parallel-size": "dp",
    "-dp": "dp",
}


def flag_facts(flags: str) -> dict[str, int]:
    """The RecordConfig facts a configuration's flags state (``--max-num-seqs 64`` ->
    ``{"max_num_seqs": 64}``); a flag without a whole number is left to the server's log."""
    words = shlex.split(flags)
    out: dict[str, int] = {}
    for i, word in enumerate(words):
        name, sep, value = word.partition("=")
        if not sep:
            value = words[i + 1] if i + 1 < len(words) else ""
        field_name = FLAG_FACTS.get(name)
        if field_name and value.isdigit() and int(value) >= 1:
            out[field_name] = int(value)
    return out


def _probe_overrides(base: RecordConfig, value: float, rate: bool) -> dict[str, Any]:
    if rate:
        return {"request_rate": [value]}
    level = int(value)
    overrides: dict[str, Any] = {"concurrency": [level]}
    count = base.requests_per_level
    if count.fixed is not None and count.fixed < level:
        overrides["requests_per_level"] = RequestCount(fixed=level)
    return overrides


def _redact_log(path: Path, redactor: Redactor = PATTERNS) -> None:
    """The raw log, as the trace sets' copies are: credentials masked."""
    if path.is_file():
        with contextlib.suppress(OSError):
            copy_redacted(path, path, redactor)
