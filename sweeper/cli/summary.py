"""Placeholder: replaced by the module's owner."""

from __future__ import annotations

import click


@click.command("summary")
def summary_command() -> None:
    """Not written yet."""
    raise click.ClickException("not implemented yet")
