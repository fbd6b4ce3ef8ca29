"""A study's configurations: ``--config`` flag sets, ``--grid name=v1,v2`` products, the YAML
study file, and the run ids each configuration's trace sets get.

``--config '--max-num-seqs 64'`` is one configuration. ``--grid max-num-batched-tokens=2048,8192
--grid max-num-seqs=64,128`` is the product (four configurations); with ``--config`` too, each
configuration gets each grid combination. A grid value ``true`` is the bare flag, ``false``
leaves it out. Neither option: one configuration, the template as it is (no flags).
"""

from __future__ import annotations

import itertools
import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sweeper.errors import ConfigError
from sweeper.redact import redact

MAX_RUN_ID = 128
MAX_SLUG = 60
_UNSAFE = re.compile(r"[^A-Za-z0-9._+]+")


def parse_grid(items: Sequence[str]) -> list[tuple[str, list[str]]]:
    """``["max-num-seqs=64,128"]`` -> ``[("max-num-seqs", ["64", "128"])]``."""
    out = []
    for item in items:
        name, sep, values = item.partition("=")
        name = name.strip().lstrip("-")
        choices = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not name or not choices:
            raise ConfigError(
                f"--grid {item!r}: write name=v1,v2 (e.g. --grid max-num-seqs=64,128)"
            )
        out.append((name, choices))
    return out


def _grid_flags(name: str, value: str) -> str:
    if value.lower() == "true":
        return f"--{name}"
    if value.lower() == "false":
        return ""
    return f"--{name} {shlex.quote(value)}"


def expand_configurations(configs: Sequence[str], grid: Sequence[str]) -> list[str]:
    """Every configuration's flags, in order: each ``--config`` times each grid combination.
    The same flags twice is an error (they would be one configuration recorded twice: use
    ``--repeats``)."""
    axes = parse_grid(grid)
    bases = [normalize_flags(c) for c in configs] or [""]
    combos = itertools.product(*([_grid_flags(n, v) for v in vs] for n, vs in axes))
    grid_sets = [" ".join(f for f in combo if f) for combo in combos]
    out = []
    for base in bases:
        for extra in grid_sets:
            out.append(" ".join(part for part in (base, extra) if part))
    seen: set[str] = set()
    for flags in out:
        if flags in seen:
            raise ConfigError(
                f"configuration {flags or '(no flags)'!r} is given twice; each configuration "
                "is recorded once per repeat (use --repeats N for more)"
            )
        seen.add(flags)
    return out


def normalize_flags(flags: str) -> str:
    """One spelling of a flag set (shell words joined by one space), so ``--resume`` finds it."""
    try:
        return shlex.join(shlex.split(flags))
    except ValueError as exc:
        raise ConfigError(f"--config {flags!r}: {exc} (quote it as a shell would)") from exc


def flags_slug(flags: str) -> str:
    """A run-id-safe name of a flag set: ``--max-num-seqs 64`` -> ``max-num-seqs-64``; of its
    masked form, so no secret is in a run id (``--api-key sk-1 --x 1`` -> ``api-key-x-1``)."""
    slug = _UNSAFE.sub("-", redact(flags).replace("--", " ")).strip("-._")
    return slug[:MAX_SLUG].rstrip("-._") or "default"


def run_ids(study_id: str, configurations: Sequence[str]) -> list[str]:
    """Each configuration's base run id: ``<study>-<flags slug>``, made unique (``-2``) and
    short enough for repeat and probe suffixes; ``<study>-c<N>`` when the study id is long."""
    out: list[str] = []
    room = MAX_RUN_ID - len(study_id) - 16  # "-r99", "-max-c100000"
    for index, flags in enumerate(configurations, start=1):
        slug = flags_slug(flags)[: max(room, 0)].rstrip("-._")
        base = f"{study_id}-{slug}" if slug else f"{study_id}-c{index}"
        candidate, n = base, 2
        while candidate in out:
            candidate, n = f"{base}-{n}", n + 1
        out.append(candidate)
    return out


def sweep_run_id(base: str, repeat: int, repeats: int) -> str:
    return f"{base}-r{repeat}" if repeats > 1 else base


def probe_run_id(base: str, value: float, rate: bool) -> str:
    text = f"{value:g}".replace(".", "p")
    return f"{base}-max-{'rate' if rate else 'c'}{text}"


def read_study_file(path: Path) -> dict[str, Any]:
    """A YAML study file: ``serve`` (the template), ``configs`` (flag strings), ``grid`` (name:
    list of values), ``repeats``, ``find_max`` ({slo, tolerance}) and ``record`` (record options
    by their command-line names, e.g. ``input-len: 1000``). Every key is optional; the command
    line wins over the file."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise ConfigError(f"--study-file {path}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"--study-file {path}: not YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"--study-file {path}: expected a mapping (serve:, configs:, grid:)")
    known = {"serve", "configs", "grid", "repeats", "find_max", "record"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(
            f"--study-file {path}: unknown key(s) {', '.join(unknown)}; known: "
            f"{', '.join(sorted(known))}"
        )
    grid = data.get("grid") or {}
    if not isinstance(grid, dict):
        raise ConfigError(f"--study-file {path}: grid: expected name: [values]")
    data["grid"] = [
        f"{name}={','.join(str(v) for v in (vals if isinstance(vals, list) else [vals]))}"
        for name, vals in grid.items()
    ]
    configs = data.get("configs") or []
    if not isinstance(configs, list):
        raise ConfigError(f"--study-file {path}: configs: expected a list of flag strings")
    data["configs"] = [str(c) for c in configs]
    record = data.get("record") or {}
    if not isinstance(record, dict):
        raise ConfigError(f"--study-file {path}: record: expected option: value")
    data["record"] = {str(k).lstrip("-").replace("-", "_"): v for k, v in record.items()}
    return data
