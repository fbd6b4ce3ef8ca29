"""Placeholder: replaced by the module's owner."""

from __future__ import annotations

import click


@click.command("record")
def record_command() -> None:
    """Not written yet."""
    raise click.ClickException("not implemented yet")
