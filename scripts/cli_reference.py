"""The generated part of docs/cli.md and docs/cli.zh.md: for each ``sweeper`` command, a heading
and its ``--help`` word for word in a ``text`` block, written by cog (PyPI ``cogapp``) between the
pages' ``[[[cog ...]]]`` and ``[[[end]]]`` markers. Regenerate both pages after changing a
command, an option or a help text:

    .venv/bin/cog -r docs/cli.md docs/cli.zh.md

tests/test_cli_reference.py fails until the pages match what this module writes now.

The help is taken from the click group itself (``sweeper.cli:cli``) through click's
``CliRunner``, at a fixed terminal width, so it is the same on every machine whatever the
terminal. Trailing spaces are cut from each line (click leaves some on blank lines of a
``\\b`` paragraph; editors strip them, which would read as drift). Everything outside the
markers is hand-written prose and is left alone.

The markers sit in Markdown link-reference lines (``[//]: # ([[[cog ...]]])``), which
Python-Markdown consumes without a trace, so the built site carries none of them, not even as
an HTML comment. The first block of each page puts this folder on ``sys.path`` and imports
:func:`section`; every later block is ``cog.out(section("<command>"))``.
"""

from __future__ import annotations

from click.testing import CliRunner

from sweeper.cli import COMMANDS, cli

REGENERATE = ".venv/bin/cog -r docs/cli.md docs/cli.zh.md"
PAGES = ("docs/cli.md", "docs/cli.zh.md")
# The width click lays the help out in; the group's max_content_width (100) caps it anyway.
TERMINAL_WIDTH = 100


def command_names() -> list[str]:
    """The group's commands in the order sweeper/cli/__init__.py names them (``COMMANDS``),
    which is the order of the pages: record, import, summary, findings, build, compact, study."""
    return list(COMMANDS)


def help_text(name: str) -> str:
    """``sweeper NAME --help`` as a user sees it in a 100-column terminal."""
    if name not in COMMANDS:
        raise KeyError(f"sweeper has no command {name!r}; it has {', '.join(command_names())}")
    result = CliRunner().invoke(
        cli, [name, "--help"], prog_name="sweeper", terminal_width=TERMINAL_WIDTH, color=False
    )
    if result.exit_code != 0:
        raise RuntimeError(f"`sweeper {name} --help` exited {result.exit_code}:\n{result.output}")
    return "\n".join(line.rstrip() for line in result.output.strip("\n").splitlines())


def heading(name: str) -> str:
    """The section heading of a command; its anchor is ``#sweeper-<name>`` on both pages."""
    return f"## `sweeper {name}`"


def section(name: str) -> str:
    """The Markdown cog writes for one command: its heading, then its help in a fence longer
    than any run of backticks in it. Ends with a blank line, so the end marker that follows is a
    block of its own."""
    text = help_text(name)
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{heading(name)}\n\n{fence}text\n{text}\n{fence}\n\n"
