"""The ``sweeper`` command: a click group; each command lives in its own module here and is one
library call a user could make from Python too. :class:`SweeperError` becomes a one-line
``Error: ...`` and exit status 1, never a traceback."""

from __future__ import annotations

import click

from sweeper.cli.build import build_command
from sweeper.cli.compact import compact_command
from sweeper.cli.findings import findings_command
from sweeper.cli.importing import import_command
from sweeper.cli.record import record_command
from sweeper.cli.study import study_command
from sweeper.cli.summary import summary_command
from sweeper.version import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
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


for _command in (
    record_command,
    import_command,
    summary_command,
    findings_command,
    build_command,
    compact_command,
    study_command,
):
    cli.add_command(_command)
