"""Placeholder: replaced by the module's owner."""

from __future__ import annotations

import click


@click.command("findings")
def findings_command() -> None:
    """Not written yet."""
    raise click.ClickException("not implemented yet")
