"""One server per configuration: started from the study's template in a process group of its
own, its output captured to a log file, healthy before the sweep starts, stopped after it.

A server must never outlive the study. Three guards, for the three ways a study ends:

- the study stops on its own, on an error or on Ctrl-C: :meth:`ServerProcess.stop` runs in a
  ``finally`` (SIGTERM to the process group, SIGKILL after :data:`STOP_GRACE_S`);
- the study process is killed (``kill -9``, the OOM killer): the server was started with
  ``PR_SET_PDEATHSIG`` (Linux ``prctl``), so the kernel sends it SIGTERM when the study dies;
- whatever that leaves (a server that ignores SIGTERM, its children): the pid file in the study
  folder names the process group, and the next ``sweeper study run`` on the study (``--resume``
  or not) ends it before anything else (:func:`reap_stale_server`), after checking the process
  is still the one it started: the pid file holds its pid, its process group and its start time
  (``/proc/<pid>/stat`` field 22), never its command line (which may hold a secret).

The template is split into words (shell quoting) with ``{port}`` and ``{flags}`` replaced; it is
run without a shell, so a signal reaches the server itself. Leading ``NAME=value`` words set
environment variables, as in a shell.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from sweeper.errors import ConfigError, ServerError

HOST = "127.0.0.1"
DEFAULT_START_TIMEOUT_S = 600.0
STOP_GRACE_S = 20.0
HEALTH_POLL_S = 0.25
LOG_TAIL_LINES = 20
HEALTH_PATHS = ("/health", "/v1/models")
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_ENV_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


class ServerStartError(ServerError):
    """The configuration's server exited or was not healthy in time; carries its log's tail."""

    def __init__(self, message: str, log_tail: str) -> None:
        super().__init__(message)
        self.log_tail = log_tail


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def check_template(template: str) -> None:
    """A template must name ``{port}`` (the study picks a free one per server) and ``{flags}``
    (where each configuration's flags go)."""
    missing = [name for name in ("{port}", "{flags}") if name not in template]
    if missing:
        raise ConfigError(
            f"--serve {template!r} lacks {' and '.join(missing)}: write the server command with "
            "both, e.g. --serve 'vllm serve Qwen/Qwen2.5-7B --port {port} {flags}'"
        )
    try:
        shlex.split(template)
    except ValueError as exc:
        raise ConfigError(f"--serve {template!r}: {exc} (quote it as a shell would)") from exc


def server_command(template: str, port: int, flags: str) -> tuple[list[str], dict[str, str]]:
    """(argv, environment additions) of the template for one server."""
    check_template(template)
    words: list[str] = []
    for word in shlex.split(template):
        if word == "{flags}":
            words.extend(shlex.split(flags))
        else:
            words.append(word.replace("{port}", str(port)).replace("{flags}", flags))
    env: dict[str, str] = {}
    while words and _ENV_WORD.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    if not words:
        raise ConfigError(f"--serve {template!r} names no command")
    return words, env


def parent_death_signal() -> None:
    """Ask the kernel to send this process SIGTERM when its parent dies, however it dies (Linux
    ``prctl``; elsewhere nothing). For children sweeper starts: servers, Zensical, render workers."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _die_with_parent(parent: int) -> Callable[[], None]:
    """In the child, before exec: SIGTERM when the study process dies (however it dies); and if
    it died already, between the fork and this call, exit at once."""

    def arm() -> None:
        parent_death_signal()
        if os.getppid() != parent:
            os._exit(1)

    return arm


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    kept = [line for line in text.splitlines() if line.strip()]
    return "\n".join(kept[-lines:])


@dataclass
class ServerProcess:
    """A configuration's server: ``start()`` returns once it answers, ``stop()`` ends it."""

    argv: list[str]
    env: dict[str, str]
    port: int
    log_path: Path
    pid_file: Path
    start_timeout_s: float = DEFAULT_START_TIMEOUT_S
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> ServerProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            try:
                self.process = subprocess.Popen(
                    self.argv,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env={**os.environ, **self.env},
                    start_new_session=True,  # its own process group: stopped as one
                    preexec_fn=_die_with_parent(os.getpid()),
                )
            except OSError as exc:
                message = f"cannot start {self.argv[0]!r}: {exc.strerror or exc}"
                log.write((message + "\n").encode())
                raise ServerStartError(message, message) from exc
        try:
            write_pid_file(self.pid_file, self.process.pid)
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + self.start_timeout_s
        with httpx.Client(timeout=2.0, trust_env=False) as client:
            while True:
                code = self.process.poll()
                if code is not None:
                    tail = log_tail(self.log_path)
                    raise ServerStartError(
                        f"the server exited with code {code} while starting; its last log "
                        f"line: {_last_line(tail)} (log: {self.log_path})",
                        tail,
                    )
                if _healthy(client, self.base_url):
                    return
                if time.monotonic() > deadline:
                    tail = log_tail(self.log_path)
                    raise ServerStartError(
                        f"the server did not answer {' or '.join(HEALTH_PATHS)} within "
                        f"{self.start_timeout_s:g} s; its last log line: {_last_line(tail)} "
                        f"(log: {self.log_path}; more time: --start-timeout)",
                        tail,
                    )
                time.sleep(HEALTH_POLL_S)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        """SIGTERM to the process group, SIGKILL to what is left after the grace period."""
        process, self.process = self.process, None
        if process is not None:
            stop_group(process.pid, process)
        self.pid_file.unlink(missing_ok=True)


def _last_line(tail: str) -> str:
    return tail.splitlines()[-1] if tail else "(the log is empty)"


def _healthy(client: httpx.Client, base_url: str) -> bool:
    for path in HEALTH_PATHS:
        try:
            response = client.get(base_url + path)
        except httpx.HTTPError:
            return False  # not listening yet
        if response.status_code == 200:
            return True
    return False


def stop_group(pgid: int, process: subprocess.Popen[bytes] | None = None) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    while time.monotonic() < deadline and _group_alive(pgid, process):
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    if process is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=STOP_GRACE_S)


def _group_alive(pgid: int, process: subprocess.Popen[bytes] | None) -> bool:
    if process is not None and process.poll() is None:
        return True
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def write_pid_file(path: Path, pid: int) -> None:
    """The pid file: the server's pid, its process group (its own: the same number) and its start
    time (clock ticks after boot), by which a later study knows the pid is still that process."""
    data = {"pid": pid, "pgid": pid, "start_time": process_start_time(pid)}
    path.write_text(json.dumps(data) + "\n")


def process_start_time(pid: int) -> int | None:
    """Field 22 of ``/proc/<pid>/stat`` (when the process started, in clock ticks after boot),
    read after the ``)`` that ends the command name (which may hold spaces and parentheses);
    None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    try:
        return int(fields[19])  # fields 3.. follow the ")": field 22 is the 20th
    except (IndexError, ValueError):
        return None


def reap_stale_server(pid_file: Path) -> str | None:
    """End the server a killed study left (its pid file), if that pid is still the process it
    started (the same start time): SIGTERM, then SIGKILL, to its process group; remove the pid
    file. Returns what was done, or None."""
    try:
        data = json.loads(pid_file.read_text())
        pid, pgid, started = int(data["pid"]), int(data["pgid"]), data["start_time"]
    except (OSError, ValueError, KeyError, TypeError):
        pid_file.unlink(missing_ok=True)
        return None
    running = process_start_time(pid)
    note = None
    if running is not None and started is not None and running == started:
        stop_group(pgid)
        note = f"stopped the server a previous study process left running (pid {pid})"
    elif running is None and _group_alive(pgid, None):
        # The leader is gone (PDEATHSIG) but its children linger in its group (Linux reuses no
        # pid that still names a process group, so the group is still the server's).
        stop_group(pgid)
        note = f"stopped what was left of a previous study's server (process group {pgid})"
    pid_file.unlink(missing_ok=True)
    return note
