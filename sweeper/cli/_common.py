"""Helpers shared by the CLI commands: error translation and option parsing."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import click

from sweeper.errors import SweeperError

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
