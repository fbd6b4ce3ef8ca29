"""``sweeper record``: options -> :class:`~sweeper.record.RecordConfig` -> ``record_sweep``."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import click

from sweeper.cli._common import check_writable_folder, friendly_errors, parse_labels
from sweeper.errors import ConfigError
from sweeper.record import RecordConfig, RequestCount, parse_levels, record_sweep
from sweeper.record.config import (
    DEFAULT_INPUT_LEN,
    DEFAULT_MAX_ERROR_RATE,
    DEFAULT_OUTPUT_LEN,
    DEFAULT_RATE_REQUESTS,
    DEFAULT_RATE_WARMUP,
    DEFAULT_TIMEOUT_S,
)
from sweeper.record.progress import default_progress
from sweeper.record.schedule import parse_rates
from sweeper.record.scrape import DEFAULT_SCRAPE_INTERVAL_S
from sweeper.record.workload import DEFAULT_LEVELS
from sweeper.redact import redact_argv
from sweeper.schema import MANIFEST_FILE
from sweeper.store import DEFAULT_TRACES_DIR

DEFAULT_LEVELS_TEXT = ",".join(map(str, DEFAULT_LEVELS))
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it


# Options whose RecordConfig field has another name.
_FIELD_OF_OPTION = {
    "no_metrics": "metrics_urls",
    "scrape_interval": "scrape_interval_s",
    "duration": "duration_s",
}


def given_fields(ctx: click.Context | None, options: dict[str, Any]) -> frozenset[str] | None:
    """The RecordConfig fields of the options given on the command line or from the environment
    (what ``--resume`` compares with the run); None without a click context."""
    if ctx is None:
        return None
    sources = (click.core.ParameterSource.COMMANDLINE, click.core.ParameterSource.ENVIRONMENT)
    return frozenset(
        _FIELD_OF_OPTION.get(name, name)
        for name in options
        if ctx.get_parameter_source(name) in sources
    )


def record_config(
    options: dict[str, Any], given_options: frozenset[str] | None = None
) -> RecordConfig:
    """The :class:`RecordConfig` of ``sweeper record``'s options (click's mapping of them): an
    option named like a field passes through as it is; the others are parsed into theirs here."""
    given = dict(options)
    no_metrics, metrics_urls = given.pop("no_metrics"), given.pop("metrics_urls")
    parsed = {
        "endpoint": "chat" if given.pop("endpoint") == "chat" else "completions",
        "concurrency": parse_levels(given.pop("concurrency") or DEFAULT_LEVELS_TEXT),
        "request_rate": _rates(given.pop("request_rate")),
        "duration_s": given.pop("duration"),
        "requests_per_level": RequestCount.parse(given.pop("requests_per_level")),
        "warmup": _warmup(given.pop("warmup")),
        "metrics_urls": [] if no_metrics else (list(metrics_urls) or None),
        "scrape_interval_s": given.pop("scrape_interval"),
        "labels": parse_labels(given.pop("labels")),
        "api_key": given.pop("api_key") or None,
        "http_client": "httpx" if given.pop("http_client") == "httpx" else "raw",
        "command": redact_argv(["sweeper", *sys.argv[1:]]),
        "given": given_options,
    }
    return RecordConfig(**given, **parsed)


def _rates(value: str | None) -> list[float] | None:
    return None if value is None else parse_rates(value)


def _warmup(value: str) -> int | None:
    if value.strip().lower() in ("auto", "stream", "per-stream"):
        return None
    if value.isdigit():
        return int(value)
    raise click.BadParameter(
        f"{value!r} is neither a count (e.g. 0, 8) nor 'auto'", param_hint="--warmup"
    )


@click.command("record", context_settings={"show_default": True})
@click.option(
    "--base-url",
    metavar="URL",
    help="The server, e.g. http://127.0.0.1:8000 (a trailing /v1 is fine). Required unless --resume.",
)
@click.option(
    "--model", metavar="NAME", help="Model name to send.  [default: the first id from /v1/models]"
)
@click.option(
    "--endpoint",
    type=click.Choice(["completions", "chat"]),
    default="completions",
    help="/v1/completions or /v1/chat/completions.",
)
@click.option(
    "--input-len",
    type=click.IntRange(min=1),
    default=DEFAULT_INPUT_LEN,
    metavar="TOKENS",
    help="Prompt length in tokens, exact via the server's /tokenize or --tokenizer (chat: template included).",
)
@click.option(
    "--output-len",
    type=click.IntRange(min=1),
    default=DEFAULT_OUTPUT_LEN,
    metavar="TOKENS",
    help="Output tokens per request (max_tokens; with ignore_eos and min_tokens unless --no-ignore-eos).",
)
@click.option(
    "--input-len-range",
    type=float,
    metavar="R",
    help="Vary prompt lengths: each request's uniform in [L(1-R), L(1+R)] around --input-len, "
    "0 <= R < 1; e.g. 0.5.",
)
@click.option(
    "--output-len-range",
    type=float,
    metavar="R",
    help="Vary output lengths likewise around --output-len; e.g. 0.5.",
)
@click.option(
    "--dataset",
    default="random",
    metavar="KIND[:FILE]",
    help="Where prompts come from: random (seeded, --input-len tokens), sharegpt:FILE.json "
    "(the first human turn; output length = its answer's, unless --output-len is given), "
    "jsonl:FILE (prompt or messages a line, optional output_len) or mooncake:FILE.jsonl (a "
    "trace replayed at its timestamps, prompts sharing its hash-id blocks).",
)
@click.option(
    "--trace-speedup",
    type=float,
    default=1.0,
    metavar="X",
    help="Replay (--dataset mooncake:...) X times as fast as the trace's timestamps.",
)
@click.option(
    "--sessions",
    type=click.IntRange(min=1),
    metavar="N",
    help="Multi-turn: N conversations per level, each of --turns turns whose history grows "
    "(earlier messages and answers as received, then a new --input-len message).",
)
@click.option(
    "--turns",
    type=click.IntRange(min=1),
    metavar="K",
    help="Multi-turn: turns per conversation (with --sessions).",
)
@click.option(
    "--think-time-ms",
    type=click.FloatRange(min=0),
    default=0.0,
    metavar="MS",
    help="Multi-turn: pause between an answer and the conversation's next turn.",
)
@click.option(
    "--concurrency",
    metavar="LIST",
    help="Concurrency levels (closed loop), comma-separated, swept in this order; e.g. 1,4,16.  "
    f"[default: {DEFAULT_LEVELS_TEXT}]",
)
@click.option(
    "--request-rate",
    metavar="LIST",
    help="Request-rate levels (open loop) instead of --concurrency: requests/s, comma-separated, "
    "swept slowest first; inf sends a level's requests all at once; e.g. 1,2,4,8,inf.",
)
@click.option(
    "--arrival",
    type=click.Choice(["poisson", "constant", "gamma"]),
    default="poisson",
    help="How a rate level's arrivals are spaced: poisson (random, exponential gaps), constant "
    "(equal gaps) or gamma (with --burstiness).",
)
@click.option(
    "--burstiness",
    type=float,
    default=1.0,
    metavar="B",
    help="Gamma shape of the gaps with --arrival gamma: 1 = Poisson, below 1 burstier, above 1 "
    "steadier.",
)
@click.option(
    "--max-concurrency",
    type=click.IntRange(min=1),
    metavar="N",
    help="With --request-rate (or a --dataset mooncake: replay) only: at most N requests in "
    "flight; one due while N are busy waits, and the wait is recorded as client queue.  "
    "[default: no cap]",
)
@click.option(
    "--requests-per-level",
    default="4x",
    metavar="N|Kx",
    help="Measured requests per level: a count, at least the largest level (e.g. 100), or K "
    "times the level (at least 8); the 4x default is for concurrency levels. Rate levels "
    f"(--request-rate): a count, default {DEFAULT_RATE_REQUESTS}.",
)
@click.option(
    "--duration",
    type=click.FloatRange(min=0, min_open=True),
    metavar="SECONDS",
    help="With --request-rate only: seconds of arrivals per level (rate x SECONDS requests; an "
    "inf level sends as many as the fastest finite level) instead of --requests-per-level.",
)
@click.option(
    "--warmup",
    default="auto",
    metavar="N|auto",
    help="Warm-up requests per level, sent first and stored as phase 'warmup'; auto = one per "
    f"stream (the level), or {DEFAULT_RATE_WARMUP} before a rate level's schedule starts.",
)
@click.option(
    "--metrics-url",
    "metrics_urls",
    multiple=True,
    metavar="URL",
    help="Prometheus endpoint to scrape for the whole run; repeatable (e.g. a GPU exporter too).  [default: <base-url>/metrics]",
)
@click.option("--no-metrics", is_flag=True, help="Scrape no metrics endpoint.")
@click.option(
    "--scrape-interval",
    type=click.FloatRange(min=0.05),
    default=DEFAULT_SCRAPE_INTERVAL_S,
    metavar="SECONDS",
    help="Seconds between scrapes of each --metrics-url.",
)
@click.option(
    "--server-log",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    metavar="PATH",
    help="The server's log file: copied into the trace set at the end and parsed for KV cache size, memory, chunked-prefill budget.",
)
@click.option(
    "--gpu",
    metavar="NAME",
    help="GPU model, e.g. 'H100 SXM' or 'RTX 4090' (bandwidth and memory from the built-in table).",
)
@click.option("--gpu-count", type=click.IntRange(min=1), metavar="N", help="GPUs the server uses.")
@click.option(
    "--tp",
    type=click.IntRange(min=1),
    metavar="N",
    help="Tensor-parallel size the server was started with.",
)
@click.option(
    "--pp",
    type=click.IntRange(min=1),
    metavar="N",
    help="Pipeline-parallel size the server was started with.",
)
@click.option(
    "--dp",
    type=click.IntRange(min=1),
    metavar="N",
    help="Data-parallel size the server was started with.",
)
@click.option(
    "--max-num-seqs",
    type=click.IntRange(min=1),
    metavar="N",
    help="The server's --max-num-seqs (no endpoint exposes it).",
)
@click.option(
    "--max-num-batched-tokens",
    type=click.IntRange(min=1),
    metavar="TOKENS",
    help="The server's chunked-prefill budget, --max-num-batched-tokens.",
)
@click.option(
    "--model-config",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    metavar="PATH",
    help="The model's config.json (parameters, KV bytes per token).",
)
@click.option(
    "--tokenizer",
    metavar="NAME|PATH",
    help="Hugging Face tokenizer for exact prompt lengths when the server has no /tokenize (needs transformers).",
)
@click.option(
    "--label",
    "labels",
    multiple=True,
    metavar="KEY=VALUE",
    help="Free-form label stored in the manifest; repeatable, e.g. --label flags=default.",
)
@click.option(
    "--api-key",
    envvar="OPENAI_API_KEY",
    show_envvar=True,
    metavar="KEY",
    help="Bearer key for the server; never written to disk.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_TRACES_DIR,
    metavar="DIR",
    help="Folder that holds trace sets; the run goes to DIR/<run-id>/.",
)
@click.option(
    "--run-id",
    metavar="ID",
    help="Name of the trace set (letters, digits, . _ + -).  [default: <model>-<UTC date-time>]",
)
@click.option(
    "--resume",
    is_flag=True,
    help="Finish an incomplete run (--run-id, or the latest incomplete one in --out): only requests it lacks are sent.",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0, min_open=True),
    default=DEFAULT_TIMEOUT_S,
    metavar="SECONDS",
    help="Per-request limit, send to last byte; a request past it is recorded as a 'timeout' error.",
)
@click.option(
    "--max-error-rate",
    type=click.FloatRange(0.0, 1.0),
    default=DEFAULT_MAX_ERROR_RATE,
    metavar="FRACTION",
    help="Stop the sweep (exit 1) when a level's failed share of measured requests passes this; 1 never stops.",
)
@click.option(
    "--seed",
    type=int,
    default=0,
    help="Seed of everything drawn at random: the prompt text, a rate level's arrival times, a "
    "dataset's prompt order and the lengths of --input-len-range / --output-len-range.",
)
@click.option(
    "--ignore-eos/--no-ignore-eos",
    default=True,
    help="Ask for exactly --output-len tokens (ignore_eos, min_tokens); dropped with a warning if the server rejects them.",
)
@click.option(
    "--shared-prefix",
    is_flag=True,
    help="Give every request the same prompt (prefix-cache hits); by default each request has a unique prefix.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=1,
    metavar="N",
    help="Recorder processes to spread each level's streams over (one event loop each), for "
    "hundreds of streams or more; e.g. --workers 4. With --ray: the Ray actors, spread over "
    "the cluster's nodes.",
)
@click.option(
    "--ray",
    "ray",
    metavar="ADDRESS|auto",
    default=None,
    help="Run the --workers as Ray actors over a cluster's nodes (pip install 'sweeper[ray]' "
    "on each): ADDRESS joins a running cluster (e.g. 10.0.0.1:6379, left running after); auto "
    "joins the one this host belongs to, or starts a local one and stops it at the end. The "
    "requests come back to this process, which writes the trace set (docs/record.md, 'Past "
    "one machine').",
)
@click.option(
    "--worker-cpus",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    metavar="CPUS",
    help="CPUs each --ray worker reserves on its node (the placement group's bundle).",
)
@click.option(
    "--http-client",
    type=click.Choice(["raw", "httpx"]),
    default="raw",
    show_default=True,
    help="What streams the requests: raw (sweeper's lean HTTP/1.1 client, one keep-alive "
    "connection per stream; over http:// on Linux each chunk carries the kernel's receive time, "
    "which a busy recorder cannot delay) or httpx (one shared httpx client, stamped when read, "
    "which falls behind from about 64 streams: see docs/fidelity.md). Probes and /metrics "
    "scrapes always use httpx.",
)
@click.option("--quiet", is_flag=True, help="No progress display.")
@friendly_errors
def record_command(**options: Any) -> None:
    """Sweep concurrency levels or request rates against an OpenAI-compatible server and record
    every token's arrival time into a trace set (traces/<run-id>/).

    By default each level keeps C streams busy (a closed loop: a stream sends its next request
    when the last one ends). With --request-rate each level is an open loop instead: requests are
    sent on a seeded schedule of arrivals whatever the server does, and each records when it was
    due and when it was sent (the difference is the client's queue, which a closed loop hides).
    Prompts are random of --input-len tokens, or come from --dataset; --sessions makes them
    multi-turn conversations. Each request is appended to requests.jsonl as it ends; the
    server's /metrics is scraped all along into server_metrics.jsonl; manifest.json says what
    ran, on what. Ctrl-C keeps what was recorded and marks the run incomplete: finish it with
    --resume.

    \b
    Examples:
      sweeper record --base-url http://127.0.0.1:8000 --input-len 1024 --output-len 256
      sweeper record --base-url http://gpu-box:8000/v1 --endpoint chat --concurrency 1,8,32,64 \\
          --gpu "H100 SXM" --tp 2 --server-log vllm.log --label flags=default
      # a Poisson rate sweep, 100 requests per rate, at most 64 in flight
      sweeper record --base-url http://127.0.0.1:8000 --request-rate 1,2,4,8,inf --max-concurrency 64
      # ShareGPT prompts (output lengths the answers'); then random lengths varied +-50%
      sweeper record --base-url http://127.0.0.1:8000 --endpoint chat \\
          --dataset sharegpt:ShareGPT_V3_unfiltered_cleaned_split.json --request-rate 2,8
      sweeper record --base-url http://127.0.0.1:8000 --input-len-range 0.5 --output-len-range 0.5
      # 16 conversations of 4 turns per level (prefix-cache hits on the history)
      sweeper record --base-url http://127.0.0.1:8000 --endpoint chat --concurrency 4,16 \\
          --sessions 16 --turns 4 --think-time-ms 1000
      # replay a Mooncake trace at twice its speed
      sweeper record --base-url http://127.0.0.1:8000 --dataset mooncake:trace.jsonl --trace-speedup 2
      sweeper record --resume --run-id qwen2.5-7b-20260101-120000 --base-url http://127.0.0.1:8000
    """
    quiet = options.pop("quiet")
    try:
        config = record_config(
            options, given_fields(click.get_current_context(silent=True), options)
        )
        config.check()
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    check_writable_folder(config.out)
    try:
        folder = record_sweep(config, progress=default_progress(quiet=quiet))
    except KeyboardInterrupt:
        click.echo(interrupted_message(config), err=True)
        sys.exit(EXIT_INTERRUPTED)
    click.echo(f"recorded {folder}")


def interrupted_message(config: RecordConfig) -> str:
    """What Ctrl-C leaves: the command that finishes the run, or, when it came before the run
    had a trace set (during the server probe), that there is nothing to resume."""
    folder = Path(config.out) / config.run_id if config.run_id else None
    if folder is None or not (folder / MANIFEST_FILE).exists():
        return "interrupted before anything was recorded: there is no run to resume"
    command = shlex.join(
        ["sweeper", "record", "--resume", "--run-id", config.run_id or "", "--out", str(config.out)]
    )
    return (
        "interrupted: what was recorded is kept and the run is marked incomplete; finish it "
        f"with: {command}"
    )
