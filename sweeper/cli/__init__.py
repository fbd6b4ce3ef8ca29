"""The ``sweeper`` command: a click group; each command lives in its own module here and is one
library call a user could make from Python too. :class:`SweeperError` becomes a one-line
``Error: ...`` and exit status 1, never a traceback."""

from __future__ import annotations

import importlib

import click

from sweeper.version import __version__

# Each command's module, imported when the command runs (or its help is shown): `sweeper summary`
# does not pay for the site builder, altair and the recorder it never uses (~0.4 s a command).
COMMANDS = {
    "record": "sweeper.cli.record:record_command",
    "import": "sweeper.cli.importing:import_command",
    "summary": "sweeper.cli.summary:summary_command",
    "findings": "sweeper.cli.findings:findings_command",
    "build": "sweeper.cli.build:build_command",
    "compact": "sweeper.cli.compact:compact_command",
    "study": "sweeper.cli.study:study_command",
}


class LazyGroup(click.Group):
    """A group whose subcommands are named up front and imported on first use."""

    def __init__(self, *args: object, lazy: dict[str, str], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands or cmd_name not in self.lazy:
            return super().get_command(ctx, cmd_name)
        module_name, attr = self.lazy[cmd_name].split(":")
        command = getattr(importlib.import_module(module_name), attr)
        if not isinstance(command, click.Command) or command.name != cmd_name:
            raise TypeError(f"{self.lazy[cmd_name]} is not the click command {cmd_name!r}")
        self.add_command(command)
        return command


@click.group(
    cls=LazyGroup,
    lazy=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, prog_name="sweeper")
def cli() -> None:
    """Sweep an LLM inference server's concurrency, record per-token timestamps, and publish
    bilingual reports that say how much concurrency to run, what it costs, and why.

    \b
    Typical flow:
      sweeper record --base-url http://127.0.0.1:8000 --input-len 1024 --output-len 256
      sweeper summary <run-id>
      sweeper findings <run-id> --lang zh
      mkdocs serve            # every trace set in traces/ as a report page (en + zh)
    """
