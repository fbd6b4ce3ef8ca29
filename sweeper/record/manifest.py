"""The run's manifest: built from the server probe and the user's options for a new run, or
found again (with its partial last lines trimmed) for ``--resume``."""

from __future__ import annotations

import platform
import socket
from datetime import datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from sweeper.errors import ConfigError
from sweeper.record.config import LIBRARIES, USER_SERVER_FACTS, RecordConfig
from sweeper.record.serverinfo import ServerInfo, server_facts, version_fact
from sweeper.record.workload import completion_body
from sweeper.redact import redact_argv
from sweeper.schema import (
    Client,
    ClockOrigin,
    Fact,
    LevelStatus,
    RunManifest,
    Source,
    Target,
    Workload,
)
from sweeper.store import discover_trace_sets, read_manifest
from sweeper.version import __version__


def trim_partial_line(path: Path) -> bool:
    """Cut a last line without its newline (a killed writer's): its request is sent again."""
    if not path.exists() or path.stat().st_size == 0:
        return False
    with path.open("rb+") as fh:
        data = fh.read()
        if data.endswith(b"\n"):
            return False
        fh.truncate(data.rfind(b"\n") + 1)
    return True


# ---------------------------------------------------------------------------------------------


def find_resumable(config: RecordConfig) -> tuple[Path, RunManifest]:
    out = Path(config.out)
    if config.run_id is not None:
        folder = out / config.run_id
        if not (folder / "manifest.json").exists():
            raise ConfigError(f"--resume: no trace set {config.run_id!r} under {out}/")
    else:
        candidates = [p for p in discover_trace_sets(out) if read_manifest(p).status != "complete"]
        if not candidates:
            raise ConfigError(f"--resume: no incomplete run under {out}/; pass --run-id")
        folder = max(candidates, key=lambda p: read_manifest(p).started_at)
    manifest = read_manifest(folder)
    if manifest.status == "complete":
        raise ConfigError(f"--resume: run {manifest.run_id!r} is already complete; nothing to do")
    if manifest.source.tool != "sweeper record":
        raise ConfigError(f"--resume: run {manifest.run_id!r} was imported, not recorded")
    return folder, manifest


def new_manifest(
    config: RecordConfig,
    info: ServerInfo,
    model: str,
    run_id: str,
    started: datetime,
    origin_ns: int,
) -> RunManifest:
    levels = config.level_keys()
    manifest = RunManifest(
        run_id=run_id,
        started_at=started,
        sweeper_version=__version__,
        source=Source(
            tool="sweeper record",
            version=__version__,
            command=redact_argv(config.command, config.api_key) if config.command else None,
        ),
        target=Target(
            base_url=info.root,
            endpoint=config.endpoint,
            model=model,
            served_model_name=model if model in info.model_ids else None,
        ),
        workload=new_workload(config),
        client=Client(
            host=socket.gethostname(),
            python=platform.python_version(),
            platform=platform.platform(),
            libraries=_library_versions(),
        ),
        clock=ClockOrigin(origin_monotonic_ns=origin_ns, origin_unix_ns=_unix_ns(started)),
        levels=[LevelStatus(concurrency=c) for c in levels],
        labels=dict(config.labels),
    )
    server = manifest.server
    server.engine = info.engine
    server.version = version_fact(info)
    for key, fact in server_facts(info).items():
        setattr(server.config, key, fact)
    apply_user_facts(manifest, config)
    return manifest


def new_workload(config: RecordConfig) -> Workload:
    """What a new run will send, as the manifest keeps it."""
    levels = config.level_keys()
    workload = Workload(
        input_len=config.input_len,
        output_len=config.output_len,
        concurrency_levels=list(levels),
        requests_per_level={str(c): config.requests_for(c) for c in levels},
        warmup_per_level=config.warmup if config.warmup is not None else 0,
        ignore_eos=config.ignore_eos,
        seed=config.seed,
        warmup_requests={str(c): config.warmup_for(c) for c in levels},
        unique_prefix=not config.shared_prefix,
        request_params=sent_params(config),
    )
    workload.dataset = "random"
    if config.sessions is not None:
        workload.sessions, workload.turns = config.sessions, config.turns
        workload.think_time_ms = config.think_time_ms
    workload.input_len_range = config.input_len_range or None
    workload.output_len_range = config.output_len_range or None
    if config.open_loop:
        workload.load = "rate"
        workload.request_rates = config.rates_by_key()
        workload.arrival = config.arrival
        workload.burstiness = config.burstiness if config.arrival != "constant" else None
        workload.max_concurrency = config.max_concurrency
        workload.duration_s = config.duration_s
    return workload


def _unix_ns(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000_000)


def _library_versions() -> dict[str, str]:
    out: dict[str, str] = {}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def apply_user_facts(manifest: RunManifest, config: RecordConfig) -> None:
    from sweeper.facts.hardware import gpu_facts, model_facts

    server_config = manifest.server.config
    for option, name in USER_SERVER_FACTS.items():
        value = getattr(config, option)
        if value is not None:
            setattr(
                server_config,
                name,
                Fact(value=value, source="user", detail=f"--{option.replace('_', '-')}"),
            )
    if config.gpu is not None:
        manifest.hardware = gpu_facts(config.gpu, config.gpu_count)
    elif config.gpu_count is not None:
        manifest.hardware.gpu_count = Fact(
            value=config.gpu_count, source="user", detail="--gpu-count"
        )
    if config.model_config is not None or manifest.target.model:
        facts = model_facts(manifest.target.model, config.model_config)
        if facts.name is None:
            facts.name = manifest.target.model
        manifest.model = facts


# ---------------------------------------------------------------------------------------------


def sent_params(config: RecordConfig) -> dict[str, Any]:
    """The parameters each request carries besides model and prompt (as first sent)."""
    body = completion_body(
        "", "", endpoint=config.endpoint, output_len=config.output_len, ignore_eos=config.ignore_eos
    )
    return {k: v for k, v in body.items() if k not in ("model", "prompt", "messages")}
