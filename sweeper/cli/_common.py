"""Helpers shared by the CLI commands: error translation, option parsing, the RUN argument."""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from sweeper.errors import SweeperError
from sweeper.store import DEFAULT_TRACES_DIR, TraceSet, load_trace_set, resolve_run

F = TypeVar("F", bound=Callable[..., Any])


def friendly_errors(func: F) -> F:
    """Turn a :class:`SweeperError` into click's one-line error, exit status 1."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except SweeperError as exc:
            raise click.ClickException(str(exc)) from exc

    return wrapper  # type: ignore[return-value]


def check_writable_folder(path: Path, option: str = "--out") -> None:
    """A one-line error (click's, exit 1) when ``path`` cannot be a folder this process writes
    into: a file stands at it or above it, or the nearest folder that exists refuses a new file
    (permissions, a read-only or virtual file system). Nothing is left behind."""
    probe = Path(path)
    while not probe.exists() and not probe.is_symlink() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        where = "is a file" if probe == Path(path) else f"is under {probe}, a file"
        raise click.ClickException(f"{option} {path} {where}, not a folder")
    try:
        with tempfile.TemporaryFile(dir=probe, prefix=".sweeper-write-check-"):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        shown = "" if probe == Path(path) else f" (in {probe})"
        raise click.ClickException(
            f"{option} {path}: cannot write there{shown}: {reason}"
        ) from None


def parse_labels(values: tuple[str, ...]) -> dict[str, str]:
    """``("gpu=h100", "note=x")`` -> dict; a value without ``=`` is a usage error naming it."""
    labels: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(
                f"{item!r} is not key=value (e.g. --label flags=default)", param_hint="--label"
            )
        labels[key.strip()] = value
    return labels


def traces_option(help_text: str = "Where run ids are looked up.") -> Callable[[F], F]:
    """The ``--traces`` folder option (parameter ``traces_dir``, default ``traces/``)."""
    return click.option(
        "--traces",
        "traces_dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=DEFAULT_TRACES_DIR,
        show_default=True,
        help=help_text,
    )


def load_run(run: str, traces_dir: Path) -> TraceSet:
    """The trace set a RUN argument names: a trace-set folder, or a run id under ``traces_dir``."""
    return load_trace_set(resolve_run(run, traces_dir))
