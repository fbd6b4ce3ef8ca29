"""The ``sweeper`` group imports a command's module only when that command runs: ``sweeper
summary`` does not load the site builder, altair or the recorder; every command is still listed,
and a misspelt one is still named with the choices."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from sweeper.cli import COMMANDS, cli

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "traces" / "small-vllm-cpu-default"


def test_summary_loads_only_its_own_modules() -> None:
    probe = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from sweeper.cli import cli\n"
        f"result = CliRunner().invoke(cli, ['summary', {str(SAMPLE)!r}, '--format', 'json'])\n"
        "assert result.exit_code == 0, result.output\n"
        "heavy = [m for m in ('altair', 'sweeper.report.site', 'sweeper.record.recorder',"
        " 'sweeper.study.runner') if m in sys.modules]\n"
        "print(','.join(heavy) or 'none')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "none"


def test_every_command_is_listed_and_a_wrong_one_is_named() -> None:
    result = CliRunner().invoke(cli, ["--help"], terminal_width=100)
    assert result.exit_code == 0
    for name in COMMANDS:
        assert f"  {name} " in result.output
    wrong = CliRunner().invoke(cli, ["sumary"])
    assert wrong.exit_code == 2
    assert "No such command 'sumary'" in wrong.output
    assert "summary" in wrong.output  # click's "Did you mean" names the close one
