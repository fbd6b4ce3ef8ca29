"""What the study tests share: the scripted server as a study's server template, a small sweep,
and whether a process still runs (a zombie left to a non-reaping init counts as gone)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from click.testing import CliRunner, Result

from sweeper.cli import cli

# The scripted server (continuous batching) as a real server process per configuration.
TEMPLATE = f"{sys.executable} -m sweeper.testing.server --port {{port}} --mode batching {{flags}}"
SMALL = [
    "--concurrency", "1,2", "--requests-per-level", "4", "--warmup", "0",
    "--input-len", "16", "--output-len", "8", "--scrape-interval", "0.5", "--quiet",
]  # fmt: skip
SWEEPER = [str(Path(sys.executable).parent / "sweeper")]


# A server that takes an API key as vLLM does (``--api-key KEY`` among its flags) and refuses any
# other key (a masked ``***`` included); with ECHO_ARGS=1 it logs its arguments, key and all, as
# vLLM logs its non-default args. Then it is the scripted server.
KEY = "sk-study-flag-secret-4711"
KEYED_SERVER = f"""#!{sys.executable}
import os, sys
args = sys.argv[1:]
at = args.index("--api-key")
key = args[at + 1]
del args[at : at + 2]
if os.environ.get("ECHO_ARGS"):
    print("args:", sys.argv[1:], flush=True)
if key != {KEY!r}:
    print("wrong API key", flush=True)
    sys.exit(3)
os.execv(sys.executable, [sys.executable, "-m", "sweeper.testing.server", *args])
"""


def keyed_template(folder: Path, env: str = "") -> str:
    """A --serve template of :data:`KEYED_SERVER` (a script in ``folder``)."""
    script = folder / "keyed-server"
    script.write_text(KEYED_SERVER)
    script.chmod(0o755)
    return f"{env} {script} --port {{port}} --mode batching {{flags}}".strip()


def study_args(
    out: Path,
    study_id: str,
    *configs: str,
    extra: tuple[str, ...] = (),
    template: str = TEMPLATE,
) -> list[str]:
    args = ["study", "run", study_id, "--serve", template, "--out", str(out), *SMALL, *extra]
    for flags in configs:
        args += ["--config", flags]
    return args


def invoke(args: list[str]) -> Result:
    return CliRunner().invoke(cli, args, catch_exceptions=False)


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def wait_for(predicate, timeout_s: float = 30.0, poll_s: float = 0.05) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(poll_s)
    return bool(predicate())
