"""The study manifest, ``<out>/<STUDY_ID>/study.json``: what a study runs (the server template,
its configurations, the record options) and where each configuration stands.

A study groups trace sets: each configuration's runs live beside the study folder, under
``<out>/<run-id>/``, as any ``sweeper record`` run does, and each carries the labels
``study=<id>`` and ``flags=<the configuration's flags>``. The study folder holds this manifest,
each configuration's server log (``logs/``), the pid file of the server running now
(``server.pid``) and a lock held while a study process works on it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sweeper.errors import ConfigError, TraceError
from sweeper.redact import redact
from sweeper.schema import check_run_id
from sweeper.store import atomic_write

STUDY_FILE = "study.json"
STUDY_VERSION = 1
LOGS_DIR = "logs"
PID_FILE = "server.pid"
LOCK_FILE = ".lock"

RunStatus = Literal["pending", "running", "complete", "incomplete", "aborted", "failed"]
ConfigStatus = Literal["pending", "running", "complete", "incomplete", "failed"]
# A run that needs nothing more: complete, or stopped by --max-error-rate (an aborted sweep is a
# measurement: the server failed too many requests at a level).
FINISHED = frozenset({"complete", "aborted"})


def now_utc() -> datetime:
    return datetime.now(UTC)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StudyRun(_Model):
    """One trace set of a configuration: a sweep (``repeat`` 1..N) or a ``--find-max`` probe
    (one level, ``probe`` its concurrency or rate)."""

    run_id: str
    kind: Literal["sweep", "probe"] = "sweep"
    repeat: int = 1
    probe: float | None = None
    status: RunStatus = "pending"
    error: str | None = None


class FindMax(_Model):
    """Where ``--find-max`` left a configuration: the highest level known to meet the SLO
    (``meets``), the lowest above it known to fail (``fails``), and whether the search ended
    within the tolerance (``done``). ``meets`` None: no level met it; ``fails`` None: even the
    highest grid level met it (the limit is above the grid)."""

    slo: str
    tolerance: float
    meets: float | None = None
    fails: float | None = None
    done: bool = False
    probes: list[float] = Field(default_factory=list)


class StudyConfiguration(_Model):
    """One set of server flags, its server log, its runs and its outcome."""

    index: int
    flags: str
    run_id: str = Field(description="The first sweep's run id (repeat 1).")
    status: ConfigStatus = "pending"
    error: str | None = Field(default=None, description="Why it failed; the log's last lines.")
    server_log: str | None = Field(default=None, description="Relative to the study folder.")
    runs: list[StudyRun] = Field(default_factory=list)
    find_max: FindMax | None = None

    def run(self, run_id: str) -> StudyRun | None:
        return next((r for r in self.runs if r.run_id == run_id), None)

    @property
    def sweeps(self) -> list[StudyRun]:
        return [r for r in self.runs if r.kind == "sweep"]


class AdvisedChange(_Model):
    """One flag change a run's findings propose (``Finding.proposals``), as a configuration:
    ``flags`` are the baseline's with ``flag`` set to ``value``."""

    finding: str
    flag: str
    value: int
    direction: str
    predicts: list[dict[str, Any]] = Field(default_factory=list)
    reason: str
    flags: str


class Advice(_Model):
    """``--from-advice RUN_ID``: the run whose advice is checked, the flags it ran with (the
    baseline, the study's first configuration) and the changes tried; ``not_tried`` the
    proposals without a value to try (only a direction)."""

    run_id: str
    baseline: str
    changes: list[AdvisedChange] = Field(default_factory=list)
    not_tried: list[dict[str, Any]] = Field(default_factory=list)


class StudyManifest(_Model):
    study_version: Literal[1] = 1
    study_id: str
    template: str = Field(description="The server command, secrets masked.")
    configurations: list[StudyConfiguration] = Field(default_factory=list)
    repeats: int = 1
    find_max: dict[str, Any] | None = Field(
        default=None, description="--find-max: {'slo': ..., 'tolerance': ...}."
    )
    record_options: dict[str, Any] = Field(
        default_factory=dict,
        description="The record options given (no API key), so --resume needs none of them.",
    )
    advice: Advice | None = Field(
        default=None, description="--from-advice: the run whose proposals the study checks."
    )
    created_at: datetime = Field(default_factory=now_utc)
    updated_at: datetime = Field(default_factory=now_utc)

    def configuration(self, flags: str) -> StudyConfiguration | None:
        return next((c for c in self.configurations if c.flags == flags), None)


def check_study_id(study_id: str) -> str:
    try:
        return check_run_id(study_id)
    except ValueError as exc:
        raise ConfigError(str(exc).replace("run id", "study id", 1)) from exc


def study_folder(out: Path | str, study_id: str) -> Path:
    return Path(out) / check_study_id(study_id)


def write_study(folder: Path, manifest: StudyManifest) -> None:
    """Replace ``study.json`` atomically, credentials masked, ``updated_at`` now."""
    folder.mkdir(parents=True, exist_ok=True)
    manifest.updated_at = now_utc()
    text = redact(manifest.model_dump_json(indent=2))
    with atomic_write(folder / STUDY_FILE) as fh:
        fh.write(text.encode() + b"\n")


def read_study(folder: Path) -> StudyManifest:
    """The study manifest in ``folder``; an error naming the file when it is missing or bad."""
    path = folder / STUDY_FILE
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(
            f"no study at {folder} ({STUDY_FILE} missing); start it with sweeper study run"
        ) from None
    except (OSError, ValueError) as exc:
        raise TraceError(f"not readable JSON: {exc}", path) from exc
    try:
        return StudyManifest.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(map(str, first["loc"]))
        raise TraceError(f"{where}: {first['msg']}", path) from None
