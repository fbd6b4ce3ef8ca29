"""A fast local OpenAI-compatible streaming server with a scripted timing model, fault injection
and ground truth: every chunk it writes is stamped with CLOCK_MONOTONIC.

Usage
-----
In-process (a background thread with its own event loop, uvloop when installed)::

    from sweeper.testing.server import run_server

    with run_server(ttft_ms=20, itl_ms=5, tokens_per_chunk=1) as server:
        base = server.base_url                      # "http://127.0.0.1:<free port>"
        ... POST {base}/v1/completions {"model": "tiny", "prompt": "a b c", "max_tokens": 16,
                 "stream": true, "stream_options": {"include_usage": true}}
        truth = server.truth("cmpl-00000001")       # or the X-Request-Id you sent
        truth["content_ns"]                         # monotonic ns of each content chunk's write

As a separate process (no shared GIL with the client under test)::

    python -m sweeper.testing.server --port 8011 --itl-ms 5 --ttft-ms 20
    python -m sweeper.testing.server --mode batching --max-num-seqs 4 --kv-capacity-tokens 2048 \\
        --max-num-batched-tokens 256 --step-base-ms 5
    # from Python: with spawn_server(itl_ms=5) as server: ... (same methods as run_server's)

Endpoints: ``POST /v1/completions``, ``POST /v1/chat/completions`` (stream or not; vLLM's chunk
shapes; ``stream_options.include_usage`` -> a last ``choices: []`` chunk with usage,
``continuous_usage_stats`` -> running usage in every chunk; chat streams start with a role-only
chunk; ``max_tokens``, ``ignore_eos``, ``min_tokens`` honoured; ``natural_len`` makes requests
without ``ignore_eos`` stop early with ``finish_reason: stop``), ``GET /v1/models`` (with
``max_model_len``), ``GET /version``, ``POST /tokenize`` (``{"count", "tokens",
"max_model_len"}``; the toy tokenizer counts one token per whitespace-separated word, so a prompt
of N words is N tokens, chat messages likewise with no template tokens), ``GET /health``,
``GET /metrics`` (vLLM names and labels, values from the timing model).

Ground truth: ``GET /_sweeper/truth?request_id=ID`` (one request) or ``GET /_sweeper/truth``
(all; ``since_ns`` / ``until_ns`` select by ``received_ns``), ``POST /_sweeper/reset`` (forget),
``GET /_sweeper/config``. A request's id is its
``X-Request-Id`` header when it sends one (echoed back in the response header and the body's
``id``), else ``cmpl-%08x`` / ``chatcmpl-%08x`` counting from 1. Truth fields: ``received_ns``,
``admitted_ns``, ``first_token_ns``, ``finished_ns`` (batching: when the engine freed the
sequence; schedule: after the last write), ``event_kind`` / ``event_ns`` /
``event_tokens`` (every write: headers, role, content, usage, done, error, malformed, comment,
body), ``content_ns`` / ``content_tokens`` (content events only), ``due_ns`` (schedule mode: the
nominal time of each content chunk), ``prompt_tokens``, ``completion_tokens``, ``finish_reason``,
``preemptions``, ``status`` (ok / fault / rejected / disconnected), ``faults``.
Each ``event_ns`` is ``time.monotonic_ns()`` just before the write: subtract it from a client's
``time.perf_counter_ns()`` / ``time.monotonic_ns()`` receive time (both CLOCK_MONOTONIC on Linux).

Faults: header ``X-Sweeper-Fault: cut=3`` (comma-separated list) per request, or rules for every
request (``faults=(FaultRule("http_500", probability=0.1),)``; CLI ``--fault 0.1:http_500`` or
``--fault 1/10:cut=3``). Names: reset, close, http=CODE / http_500 / http_429 / http_400,
retry_after=S, delay=MS, cut=N, malformed=N, error=N, stall=MS[@N], no_done, no_usage, comments,
split[=SEED], echo_auth, usage=nan|inf|many, timings_inf; see :mod:`sweeper.testing.faults`.
``metrics_nonfinite=True`` (``--metrics-nonfinite``): /metrics carries NaN and +Inf gauges.
``prefix_caching=True`` (``--prefix-caching``): ``vllm:prefix_cache_queries_total`` /
``vllm:prefix_cache_hits_total`` count, in tokens, the leading blocks of each prompt that an
earlier prompt or answer filled (truth ``cached_tokens``), as vLLM's automatic prefix caching. Connection refused: :func:`closed_port_url`.
``reject_params=("ignore_eos", "min_tokens")`` answers HTTP 400 (``reject_status``) naming them.

Timing models (:mod:`sweeper.testing.config`): ``schedule`` (first token ``ttft_ms`` after arrival,
then a chunk every ``itl_ms`` with ``tokens_per_chunk`` tokens; timers fire up to ~1 ms late, the
truth has the real write times) and ``batching`` (continuous batching: ``step_base_ms``,
``step_per_seq_ms``, ``step_per_prefill_token_ms``, ``max_num_seqs``, ``max_num_batched_tokens``,
``kv_capacity_tokens``, ``block_size``, ``preemption``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any, Literal, get_args

import click
import httpx

from sweeper.errors import ConfigError
from sweeper.testing.api import ScriptedServer
from sweeper.testing.config import FaultRule, ScriptedServerConfig

LoopKind = Literal["auto", "asyncio", "uvloop"]
READY_PREFIX = "sweeper scripted server listening on "
START_TIMEOUT_S = 30.0

__all__ = [
    "FaultRule",
    "ScriptedServer",
    "ScriptedServerConfig",
    "ServerProcess",
    "ServerThread",
    "closed_port_url",
    "run_server",
    "spawn_server",
]


def new_event_loop(kind: LoopKind = "auto") -> asyncio.AbstractEventLoop:
    """uvloop's loop when asked for (or installed, for ``auto``), else asyncio's."""
    if kind != "asyncio":
        try:
            import uvloop
        except ImportError:
            if kind == "uvloop":
                raise ConfigError(
                    "loop 'uvloop' asked for but uvloop is not installed: "
                    "pip install uvloop, or choose --loop asyncio (or auto)"
                ) from None
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def closed_port_url(host: str = "127.0.0.1") -> str:
    """A base URL on which nothing listens (connection refused): a port bound then released."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port = sock.getsockname()[1]
    return f"http://{host}:{port}"


def _build_config(
    config: ScriptedServerConfig | None, overrides: dict[str, Any]
) -> ScriptedServerConfig:
    base = config or ScriptedServerConfig()
    return base.replace(**overrides) if overrides else base


class ServerThread:
    """The server on a background thread with its own event loop. Thread-safe accessors."""

    def __init__(self, config: ScriptedServerConfig, loop: LoopKind = "auto") -> None:
        self.config = config
        self._loop_kind = loop
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server = ScriptedServer(config)
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def base_url(self) -> str:
        return self._server.base_url

    @property
    def server(self) -> ScriptedServer:
        """The server object (touch it only from its loop, e.g. via :meth:`call`)."""
        return self._server

    def start(self) -> ServerThread:
        self._thread = threading.Thread(
            target=self._run, name="sweeper-scripted-server", daemon=True
        )
        self._thread.start()
        self._ready.wait(START_TIMEOUT_S)
        if self._error is not None:
            raise self._error
        if not self._ready.is_set():
            raise RuntimeError(f"scripted server did not start within {START_TIMEOUT_S} s")
        return self

    def _run(self) -> None:
        loop = self._loop = new_event_loop(self._loop_kind)
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._server.start())
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(self._server.close())
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def call(self, fn: Any, *args: Any) -> Any:
        """Run ``fn(*args)`` on the server's loop and return its result."""
        assert self._loop is not None

        async def invoke() -> Any:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(invoke(), self._loop).result(START_TIMEOUT_S)

    def truth(self, request_id: str) -> dict[str, Any] | None:
        def get() -> dict[str, Any] | None:
            item = self._server.truths.get(request_id)
            return item.to_dict() if item is not None else None

        result: dict[str, Any] | None = self.call(get)
        return result

    def truths(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.call(
            lambda: [t.to_dict() for t in self._server.truths.all()]
        )
        return result

    def accepted_ns(self) -> list[int]:
        """When each connection was taken up (monotonic ns), in order."""
        return list(self.call(lambda: list(self._server.accepted_ns)))

    def reset(self) -> None:
        self.call(self._server.reset)

    def metrics_text(self) -> str:
        return str(self.call(lambda: self._server.metrics.render().decode()))

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(START_TIMEOUT_S)

    def __enter__(self) -> ServerThread:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def run_server(
    config: ScriptedServerConfig | None = None, *, loop: LoopKind = "auto", **overrides: Any
) -> Iterator[ServerThread]:
    """Run the server on a free loopback port in a background thread for the ``with`` block.
    ``overrides`` are :class:`ScriptedServerConfig` fields (``itl_ms=5``,
    ``mode="batching"``...)."""
    server = ServerThread(_build_config(config, overrides), loop=loop).start()
    try:
        yield server
    finally:
        server.stop()


# -- a separate process ----------------------------------------------------------------------

_FLAG_FIELDS = [
    f.name for f in dataclasses.fields(ScriptedServerConfig) if f.name not in ("extra",)
]


def config_to_args(config: ScriptedServerConfig) -> list[str]:
    """CLI arguments that rebuild ``config`` (fields left at their defaults are omitted)."""
    default = ScriptedServerConfig()
    args: list[str] = []
    for name in _FLAG_FIELDS:
        value = getattr(config, name)
        if value == getattr(default, name):
            continue
        flag = "--" + name.replace("_", "-")
        if name == "preemption":
            args.append("--preemption" if value else "--no-preemption")
        elif name == "metrics_nonfinite":
            args.append("--metrics-nonfinite" if value else "--no-metrics-nonfinite")
        elif name == "vocabulary":
            args += [flag, ",".join(value)]
        elif name == "reject_params":
            for param in value:
                args += ["--reject-param", param]
        elif name == "faults":
            for rule in value:
                rate = f"1/{rule.every}" if rule.every else f"{rule.probability:g}"
                args += ["--fault", f"{rate}:{rule.spec}"]
        elif name == "version":
            args += ["--server-version", str(value)]
        elif value is not None:
            args += [flag, str(value)]
    return args


class ServerProcess:
    """The server in a child process (``python -m sweeper.testing.server``); truth over HTTP."""

    def __init__(self, config: ScriptedServerConfig, loop: LoopKind = "auto") -> None:
        self.config = config
        self._loop_kind = loop
        self.process: subprocess.Popen[str] | None = None
        self.base_url = ""

    def start(self) -> ServerProcess:
        command = [
            sys.executable, "-m", "sweeper.testing.server",
            *config_to_args(self.config), "--port", str(self.config.port), "--loop", self._loop_kind,
        ]  # fmt: skip
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith(READY_PREFIX):
            self.stop()
            raise RuntimeError(f"scripted server failed to start: {line!r} from {command}")
        self.base_url = line[len(READY_PREFIX) :].strip()
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def truth(self, request_id: str) -> dict[str, Any] | None:
        response = httpx.get(f"{self.base_url}/_sweeper/truth", params={"request_id": request_id})
        if response.status_code == 404:
            return None
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    def truths(self, since_ns: int = 0, until_ns: int = 2**63) -> list[dict[str, Any]]:
        """Truth of the requests received in [since_ns, until_ns) (monotonic ns)."""
        params = {"since_ns": since_ns, "until_ns": until_ns}
        response = httpx.get(f"{self.base_url}/_sweeper/truth", params=params, timeout=120)
        response.raise_for_status()
        result: list[dict[str, Any]] = response.json()["requests"]
        return result

    def reset(self) -> None:
        httpx.post(f"{self.base_url}/_sweeper/reset").raise_for_status()

    def metrics_text(self) -> str:
        return httpx.get(f"{self.base_url}/metrics").text

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def spawn_server(
    config: ScriptedServerConfig | None = None, *, loop: LoopKind = "auto", **overrides: Any
) -> Iterator[ServerProcess]:
    """Like :func:`run_server`, in a child process."""
    server = ServerProcess(_build_config(config, overrides), loop=loop).start()
    try:
        yield server
    finally:
        server.stop()


# -- CLI -------------------------------------------------------------------------------------


def parse_fault_rule(text: str) -> FaultRule:
    """``0.05:http_500`` (probability) or ``1/10:cut=3`` (every 10th request)."""
    rate, sep, spec = text.partition(":")
    if not sep or not spec:
        raise ConfigError(f"--fault {text!r}: use RATE:SPEC, e.g. 0.05:http_500 or 1/10:cut=3")
    try:
        if rate.startswith("1/"):
            return FaultRule(spec, every=int(rate[2:]))
        return FaultRule(spec, probability=float(rate))
    except ValueError as exc:
        raise ConfigError(f"--fault {text!r}: bad rate {rate!r} ({exc})") from exc


async def _serve_forever(config: ScriptedServerConfig) -> None:
    server = ScriptedServer(config)
    await server.start()
    print(READY_PREFIX + server.base_url, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.close()


_D = ScriptedServerConfig()


@click.command(name="sweeper-scripted-server")
@click.option("--host", default=_D.host, show_default=True)
@click.option("--port", default=8011, show_default=True, help="0 picks a free port.")
@click.option("--model", default=_D.model, show_default=True)
@click.option("--max-model-len", default=_D.max_model_len, show_default=True)
@click.option("--server-version", default=_D.version, show_default=True, help="What /version says.")
@click.option(
    "--mode", type=click.Choice(["schedule", "batching"]), default=_D.mode, show_default=True
)
@click.option("--ttft-ms", default=_D.ttft_ms, show_default=True, help="schedule: first token.")
@click.option("--itl-ms", default=_D.itl_ms, show_default=True, help="schedule: chunk interval.")
@click.option("--tokens-per-chunk", default=_D.tokens_per_chunk, show_default=True)
@click.option("--step-base-ms", default=_D.step_base_ms, show_default=True, help="batching")
@click.option("--step-per-seq-ms", default=_D.step_per_seq_ms, show_default=True)
@click.option(
    "--step-per-prefill-token-ms", default=_D.step_per_prefill_token_ms, show_default=True
)
@click.option("--max-num-seqs", default=_D.max_num_seqs, show_default=True)
@click.option("--max-num-batched-tokens", default=_D.max_num_batched_tokens, show_default=True)
@click.option("--kv-capacity-tokens", default=_D.kv_capacity_tokens, show_default=True)
@click.option("--block-size", default=_D.block_size, show_default=True)
@click.option("--preemption/--no-preemption", default=_D.preemption, show_default=True)
@click.option("--natural-len", type=int, default=None, help="Stop early unless ignore_eos.")
@click.option(
    "--vocabulary", default=",".join(_D.vocabulary), help="Output words, comma-separated."
)
@click.option("--reject-param", "reject_params", multiple=True, help="e.g. ignore_eos (repeat).")
@click.option("--reject-status", default=_D.reject_status, show_default=True)
@click.option("--fault", "faults", multiple=True, help="RATE:SPEC, e.g. 0.05:http_500, 1/10:cut=3.")
@click.option("--seed", default=_D.seed, show_default=True)
@click.option("--split-delay-ms", default=_D.split_delay_ms, show_default=True)
@click.option("--truth-limit", default=_D.truth_limit, show_default=True, help="0: keep all.")
@click.option("--engine-label", default=_D.engine_label, show_default=True)
@click.option(
    "--metrics-nonfinite/--no-metrics-nonfinite",
    default=_D.metrics_nonfinite,
    show_default=True,
    help="/metrics carries NaN and +Inf gauges.",
)
@click.option(
    "--prefix-caching/--no-prefix-caching",
    default=_D.prefix_caching,
    show_default=True,
    help="Count prefix-cache hits (leading blocks an earlier prompt or answer filled).",
)
@click.option(
    "--loop",
    type=click.Choice(get_args(LoopKind)),
    default="auto",
    show_default=True,
    help="Event loop: auto = uvloop when installed, else asyncio.",
)
def main(
    server_version: str,
    vocabulary: str,
    reject_params: tuple[str, ...],
    faults: tuple[str, ...],
    loop: LoopKind,
    **fields: Any,
) -> None:
    """Run sweeper's scripted OpenAI-compatible server until SIGINT/SIGTERM."""
    try:
        config = ScriptedServerConfig(
            version=server_version,
            vocabulary=tuple(w for w in vocabulary.split(",") if w),
            reject_params=reject_params,
            faults=tuple(parse_fault_rule(f) for f in faults),
            **fields,
        )
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    event_loop = new_event_loop(loop)
    try:
        event_loop.run_until_complete(_serve_forever(config))
    finally:
        event_loop.close()


if __name__ == "__main__":
    main()
