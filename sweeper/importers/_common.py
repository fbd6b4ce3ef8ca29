"""What every importer shares: reading foreign files with errors that name the file and the key
or line, the :class:`Imported` result an importer returns, and :func:`write_imported`, which
turns it into a trace set with the one writer (atomically: nothing half-written on failure).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from sweeper.errors import ImportFormatError
from sweeper.redact import redact_argv
from sweeper.schema import (
    ClockOrigin,
    Fact,
    Hardware,
    LevelStatus,
    MetricSample,
    RequestTrace,
    RunManifest,
    Server,
    ServerConfig,
    Source,
    Target,
    Workload,
    check_run_id,
)
from sweeper.store import DEFAULT_TRACES_DIR, write_trace_set
from sweeper.units import NS_PER_MS, NS_PER_S
from sweeper.version import __version__

RUN_ID_MAX = 128
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")


@dataclass
class Imported:
    """One foreign result, read: requests on sweeper's clock plus what the tool said about the run."""

    tool: str
    version: str | None
    fidelity: Literal["per_chunk", "per_request", "summary"]
    requests: list[RequestTrace]
    name: str  # a readable stem for the default run id
    origin_unix_ns: int | None = None  # wall clock of send_ns == 0, when the tool gave one
    send_times: Literal["measured", "reconstructed"] = "measured"
    summaries: dict[str, dict[str, float | int | str | None]] = field(default_factory=dict)
    metrics: list[MetricSample] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    command: list[str] | None = None
    target: Target = field(default_factory=Target)
    server: Server = field(default_factory=Server)
    workload: Workload = field(default_factory=Workload)
    warnings: list[str] = field(default_factory=list)
    server_logs: list[tuple[int | None, Path]] = field(default_factory=list)
    levels: list[int] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# reading


def _read_text(path: Path, what: str) -> str:
    """The file as UTF-8 text; unreadable or binary is an ImportFormatError naming ``what``."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ImportFormatError(f"cannot read it ({exc.strerror})", path) from exc
    except UnicodeDecodeError as exc:
        raise ImportFormatError(f"not a text file; expected {what}", path) from exc


def read_json(path: Path, what: str) -> Any:
    """Parse a whole JSON file; a truncated or non-JSON file is an ImportFormatError."""
    text = _read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        cut = " (the file looks truncated)" if exc.pos >= len(text.rstrip()) - 1 else ""
        raise ImportFormatError(
            f"not valid JSON{cut}: {exc.msg}; expected {what}", path, f"line {exc.lineno}"
        ) from exc


def iter_json_lines(path: Path, what: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-empty line of a JSON-lines file."""
    text = _read_text(path, what)
    lines = text.split("\n")
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            last = number == len(lines) or all(not x.strip() for x in lines[number:])
            hint = " (the last line is cut short: was the file truncated?)" if last else ""
            raise ImportFormatError(
                f"not valid JSON{hint}: {exc.msg}; expected {what}", path, f"line {number}"
            ) from exc
        if not isinstance(obj, dict):
            raise ImportFormatError(
                f"expected a JSON object per line ({what})", path, f"line {number}"
            )
        yield number, obj


def need(obj: Mapping[str, Any], key: str, path: Path, where: str, what: str) -> Any:
    """``obj[key]``, or an ImportFormatError naming the file, the place and the missing key."""
    if not isinstance(obj, Mapping) or key not in obj:
        raise ImportFormatError(f"missing key {key!r}; expected {what}", path, where)
    return obj[key]


def need_number(obj: Mapping[str, Any], key: str, path: Path, where: str, what: str) -> float:
    value = need(obj, key, path, where, what)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ImportFormatError(
            f"key {key!r} is {value!r}, expected a number ({what})", path, where
        )
    return float(value)


def need_list(obj: Mapping[str, Any], key: str, path: Path, where: str, what: str) -> list[Any]:
    value = need(obj, key, path, where, what)
    if not isinstance(value, list):
        raise ImportFormatError(f"key {key!r} is not a list; expected {what}", path, where)
    return value


def level_from_name(name: str) -> int | None:
    """``conc8`` / ``c16`` / ``concurrency-4`` / ``8`` -> the number; None if none is in it."""
    found = re.search(r"(?:^|[^0-9])(\d+)$", name) or re.search(r"^(\d+)", name)
    return int(found.group(1)) if found else None


def spread_tokens(total: int, chunks: int) -> list[int]:
    """``total`` tokens over ``chunks`` chunks as evenly as integers allow (multi-token chunks
    spaced out, not bunched at one end). Used when a tool reports the count per request only."""
    if chunks <= 0:
        return []
    if total <= chunks:
        return [1] * chunks
    return [((i + 1) * total) // chunks - (i * total) // chunks for i in range(chunks)]


def chunk_offsets_ns(ttft_ms: float, gaps_ms: Sequence[float]) -> list[int]:
    """Absolute chunk arrivals (ns after send) from a TTFT and the gaps between chunks, summed
    in floating point first so rounding to ns never accumulates."""
    offsets = [ttft_ms]
    running = ttft_ms
    for gap in gaps_ms:
        running += gap
        offsets.append(running)
    return [round(t * NS_PER_MS) for t in offsets]


def closed_loop_sends(
    durations_ns: Sequence[int], concurrency: int, start_ns: int = 0
) -> list[int]:
    """Send times for requests run back to back by ``concurrency`` streams, in the given order:
    each request goes to the stream that frees up first. Used when the tool kept no send times."""
    free = [start_ns] * max(concurrency, 1)
    sends = []
    for duration in durations_ns:
        stream = min(range(len(free)), key=free.__getitem__)
        sends.append(free[stream])
        free[stream] += max(int(duration), 0)
    return sends


def default_run_id(kind: str, name: str, when: datetime | None) -> str:
    stamp = when.strftime("%Y%m%d-%H%M%S") if when else "imported"
    raw = f"{kind}-{name}-{stamp}"
    safe = _UNSAFE.sub("-", raw).strip("-.") or kind
    return safe[:RUN_ID_MAX]


# ---------------------------------------------------------------------------------------------
# writing


@dataclass
class ImportOptions:
    """What the user adds on the command line; each matches a ``sweeper import`` option."""

    run_id: str | None = None
    out: Path = DEFAULT_TRACES_DIR
    server_log: Path | None = None
    gpu: str | None = None
    gpu_count: int | None = None
    labels: dict[str, str] = field(default_factory=dict)
    compress: bool = False


def build_manifest(kind: str, imported: Imported, options: ImportOptions) -> RunManifest:
    origin = imported.origin_unix_ns
    started = datetime.fromtimestamp(origin / NS_PER_S, UTC) if origin else datetime.now(UTC)
    run_id = options.run_id or default_run_id(kind, imported.name, started if origin else None)
    try:
        check_run_id(run_id)
    except ValueError as exc:
        raise ImportFormatError(f"{exc} (pass --run-id)") from exc
    ended = None
    if origin is not None and imported.requests:
        last = max(
            r.send_ns + (r.end_ns or (r.chunk_ns[-1] if r.chunk_ns else 0))
            for r in imported.requests
        )
        ended = datetime.fromtimestamp((origin + last) / NS_PER_S, UTC)
    levels = sorted(set(imported.levels) | {r.concurrency for r in imported.requests})
    workload = imported.workload.model_copy(deep=True)
    if not workload.concurrency_levels:
        workload.concurrency_levels = levels
    level_status = []
    for c in levels:
        mine = [r for r in imported.requests if r.concurrency == c]
        start = min((r.send_ns for r in mine), default=None)
        end = max(
            (r.send_ns + (r.end_ns or (r.chunk_ns[-1] if r.chunk_ns else 0)) for r in mine),
            default=None,
        )
        level_status.append(
            LevelStatus(concurrency=c, status="complete", start_ns=start, end_ns=end)
        )
    return RunManifest(
        run_id=run_id,
        started_at=started,
        ended_at=ended,
        status="complete",
        sweeper_version=__version__,
        source=Source(
            tool=imported.tool,
            version=imported.version,
            fidelity=imported.fidelity,
            # Every tool's command line, as a safe one: no key, header or URL password in it.
            command=redact_argv(imported.command) if imported.command else None,
            files=imported.files,
            send_times=imported.send_times,
            summaries=imported.summaries,
        ),
        target=imported.target,
        server=imported.server,
        hardware=Hardware(),
        workload=workload,
        clock=None if origin is None else ClockOrigin(origin_monotonic_ns=0, origin_unix_ns=origin),
        levels=level_status,
        labels=dict(options.labels),
        warnings=list(imported.warnings),
    )


def write_imported(kind: str, imported: Imported, options: ImportOptions) -> Path:
    """Write the trace set (manifest, requests, metrics, server log) atomically; return its folder."""
    if not imported.requests and not imported.summaries:
        raise ImportFormatError(f"found no requests and no summary to import ({kind})")
    manifest = build_manifest(kind, imported, options)
    log_paths = [p for _, p in imported.server_logs]
    if options.server_log is not None:
        log_paths = [options.server_log]
    log_file = _apply_server_logs(manifest, imported, log_paths, options)
    if options.gpu is not None or options.gpu_count is not None:
        manifest.hardware = _gpu_facts(options.gpu, options.gpu_count)
    folder = options.out / manifest.run_id
    try:
        return write_trace_set(
            folder,
            manifest,
            imported.requests,
            imported.metrics,
            server_log=log_file,
            compress=options.compress,
        )
    finally:
        if log_file is not None and log_file not in log_paths:
            log_file.unlink(missing_ok=True)


def _apply_server_logs(
    manifest: RunManifest, imported: Imported, paths: list[Path], options: ImportOptions
) -> Path | None:
    """Parse the server log(s) into the manifest; return the one file to copy into the set.

    A sweep run against one fresh server per level (as AIPerf sweeps often are) has one log per
    level: they are joined into one ``server.log``, each part headed by a line naming its level.
    """
    if not paths:
        return None
    from sweeper.facts.serverlog import apply_server_log, parse_server_log

    texts = []
    for path in paths:
        try:
            texts.append(path.read_text(encoding="utf-8", errors="replace"))
        except OSError as exc:
            raise ImportFormatError(f"cannot read the server log ({exc.strerror})", path) from exc
    logs = [parse_server_log(text) for text in texts]
    for log in logs:
        apply_server_log(manifest, log)
    by_path = {p: c for c, p in imported.server_logs}
    levels = [by_path.get(path) for path in paths]
    if len(logs) > 1 and None not in levels:
        _keep_per_level(manifest, [c for c in levels if c is not None], logs, manifest.warnings)
    # A fact that differs per level (one server per level) stays per level: no one log speaks
    # for the whole sweep.
    config = manifest.server.config
    for name in list(config.extra):
        field_name = name.removesuffix("_per_level")
        if name.endswith("_per_level") and field_name in type(config).model_fields:
            setattr(config, field_name, None)
    if len(paths) == 1:
        return paths[0]
    import tempfile

    fd, name = tempfile.mkstemp(
        prefix=".server-log.", suffix=".tmp", dir=options.out if options.out.is_dir() else None
    )
    with open(fd, "w", encoding="utf-8") as fh:
        for path, text in zip(paths, texts, strict=True):
            level = by_path.get(path)
            fh.write(f"===== sweeper import: server log of concurrency {level} ({path}) =====\n")
            fh.write(text if text.endswith("\n") else text + "\n")
    return Path(name)


SAME_FACT_TOLERANCE = 0.05  # per-level facts within 5% are one fact (the smallest is kept)


def set_level_fact(
    config: ServerConfig, name: str, facts: Mapping[int, Fact], warnings: list[str]
) -> None:
    """One configuration fact seen at each level (levels run on separate servers), set once:
    the same value everywhere is the sweep's; values within 5% are one fact, the smallest; else
    it stays per level in ``extra`` (``<name>_per_level``: ``C=8: 8, C=16: 16``) with a warning,
    and no one level's value speaks for the sweep."""
    values = {f.value for f in facts.values()}
    first = next(iter(facts.values()))
    field_name = name in type(config).model_fields
    if len(values) == 1:
        if field_name:
            setattr(config, name, first)
        else:
            config.extra[name] = first
        return
    per_level = ", ".join(f"C={c}: {f.value}" for c, f in sorted(facts.items()))
    numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    if (
        field_name
        and len(numbers) == len(values)
        and min(numbers) > 0
        and (max(numbers) - min(numbers)) / min(numbers) <= SAME_FACT_TOLERANCE
    ):
        smallest = min(facts.values(), key=lambda f: f.value)  # type: ignore[arg-type, return-value]
        detail = f"{smallest.detail}; smallest of {per_level}" if smallest.detail else per_level
        setattr(config, name, smallest.model_copy(update={"detail": detail}))
        return
    config.extra[f"{name}_per_level"] = Fact(
        value=per_level, source=first.source, detail=first.detail
    )
    if field_name:
        setattr(config, name, None)
    warnings.append(f"{name} differs between levels ({per_level}); see server.config.extra")


def _keep_per_level(
    manifest: RunManifest, levels: list[int], logs: list[Any], warnings: list[str]
) -> None:
    """Levels that ran on their own servers, each with its log: a fact whose value differs
    between the logs (max_num_seqs set per level, a KV pool sized per server) is set by
    :func:`set_level_fact` instead of by whichever log came last."""
    config = manifest.server.config
    for name in type(config).model_fields:
        if name == "extra" or f"{name}_per_level" in config.extra:
            continue  # already kept per level (from the levels' commands), and said so
        facts = {
            c: f for c, log in zip(levels, logs, strict=True) if (f := getattr(log.config, name))
        }
        if len({f.value for f in facts.values()}) > 1:
            set_level_fact(config, name, facts, warnings)


def _gpu_facts(name: str | None, count: int | None) -> Hardware:
    from sweeper.facts.hardware import gpu_facts

    if name is None:
        from sweeper.schema import Fact

        return Hardware(gpu_count=Fact(value=count, source="user", detail="--gpu-count"))
    return gpu_facts(name, count)
