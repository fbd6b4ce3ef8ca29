"""Read what an inference server's own log says that no endpoint exposes.

vLLM and SGLang print their resolved configuration and memory accounting once at start-up and a
scheduler line every few seconds while serving. :func:`parse_server_log` turns such a log into a
:class:`ServerLog`: a :class:`~sweeper.schema.ServerConfig` whose every fact has ``source="log"``
and the log line it came from as ``detail``, the periodic "Running / Waiting / KV cache usage"
lines as :class:`LogStat` rows, a count of preemption lines and the log's warnings.
:func:`apply_server_log` fills the gaps of a manifest with it: what the user passed or an endpoint
or ``/metrics`` reported always wins over the log.

Lines understood (the formats of vLLM 0.6 to 0.32 and of SGLang; anything else is ignored)::

    vLLM API server version 0.6.3 / ... version 0.32.0 (banner) / Initializing a V1 LLM engine (v0.22.0)
    non-default args: {'max_num_seqs': 8, 'gpu_memory_utilization': 0.95, ...}
    Initializing a V1 LLM engine (...) with config: ..., dtype=torch.bfloat16, max_seq_len=2048, ...
    Chunked prefill is enabled with max_num_batched_tokens=8192.
    GPU KV cache size: 86,896 tokens            (CPU builds: "CPU KV cache size")
    Maximum concurrency for 2,048 tokens per request: 128.00x
    Available KV cache memory: 4.64 GiB         Explicitly set (0.25/9.21) GiB for KV cache on node 0.
    Model loading took 15.2 GiB memory and 3.1 seconds      Graph capturing finished in 3 secs, took 0.34 GiB
    ... total_gpu_memory (79.33GiB) x gpu_memory_utilization (0.90) = 71.39GiB
    model weights take 4.03GiB; non_torch_memory takes 1.39GiB; PyTorch activation peak memory
        takes 0.32GiB; the rest of the memory reserved for KV Cache is 65.65GiB.
    Free memory on device (../23.52 GiB) ... Desired GPU memory utilization is (0.9, 21.17 GiB).
        Actual usage is 15.49 GiB for consumed memory (weights + non-torch), 1.04 GiB for peak
        activation, and 0.34 GiB for CUDAGraph memory. ... `--kv-cache-memory=6569114112` ...
    Engine 000: Avg prompt throughput: 39.0 tokens/s, Avg generation throughput: 626.5 tokens/s,
        Running: 2 reqs, Waiting: 0 reqs, GPU KV cache usage: 80.0%, Prefix cache hit rate: 0.0%
    SGLang: server_args=ServerArgs(tp_size=1, mem_fraction_static=0.88, chunked_prefill_size=8192, ...)
            max_total_num_tokens=1033338, chunked_prefill_size=8192, max_running_requests=4097, ...
            KV Cache is allocated. #tokens: 1033338, K size: 47.30 GB, V size: 47.30 GB
            Decode batch. #running-req: 233, #token: 370959, token usage: 0.82, ..., #queue-req: 317
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from sweeper.redact import (  # one rule for secrets; their values in kept lines masked
    is_secret_name,
    redact,
)
from sweeper.schema import Fact, FactValue, RunManifest, ServerConfig
from sweeper.units import GIB, MIB

# vLLM and SGLang print memory as "GB" in some versions but always compute it as bytes / 2**30.
UNIT_BYTES = {"GiB": GIB, "GB": GIB, "MiB": MIB, "MB": MIB}
PERCENT = 100.0
AUTO = "auto"
DETAIL_MAX_CHARS = 400
MAX_WARNINGS = 100

# A terminal's escape sequences, all of them (a log captured from a terminal holds more than
# colours): OSC (``ESC ] ... BEL`` or ``ESC \\``: a window title, a link), CSI (``ESC [ ...``:
# colours, cursor moves), DCS / SOS / PM / APC strings, ``ESC ( B`` and the two-byte ``ESC x``,
# and their 8-bit forms; then the control characters but tab, newline and carriage return.
TERMINAL_ESCAPE = re.compile(
    r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"
    r"|\x1b[ -/]+[0-~]"
    r"|\x1b[@-Z\\-_]"
    r"|\x9b[0-?]*[ -/]*[@-~]"
    r"|\x9d[^\x07\x9c]*[\x07\x9c]?"
)
CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def strip_terminal(text: str) -> str:
    """``text`` without terminal escape sequences and control characters (tab, newline and
    carriage return kept): what a page or a manifest may hold of a log or a server's words."""
    return CONTROL_CHARS.sub("", TERMINAL_ESCAPE.sub("", text))


_NUM = r"([0-9][0-9,]*(?:\.[0-9]+)?)"
_VLLM_TIME = re.compile(r"\b(?:INFO|WARNING|DEBUG|ERROR)\s+(\d\d-\d\d \d\d:\d\d:\d\d)\b")
_SGLANG_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
_WARNING = re.compile(r"\bWARNING\b\s+(?:\d\d-\d\d \d\d:\d\d:\d\d\s+)?(?:\[[^\]]*\]\s*)?(.*)")

_VERSION_PATTERNS = (
    re.compile(r"vLLM API server version v?([0-9][\w.+-]*)"),
    re.compile(r"Initializing a V\d LLM engine \(v([0-9][\w.+-]*)\)"),
    re.compile(r"█\s+version\s+v?([0-9][\w.+-]*)"),
)
_SGLANG_VERSION = re.compile(r"\bsglang(?:\s+version|==|\s+v)\s*:?\s*v?([0-9][\w.+-]*)", re.I)
_SGLANG_MARK = re.compile(r"server_args=ServerArgs\(|#running-req|max_total_num_tokens=|sglang")
_VLLM_MARK = re.compile(r"\bvLLM\b|\bvllm\b|Engine 000:|\[loggers\.py")

# vLLM's scheduler line, every few seconds while requests run (v0 wording too).
_STAT_LINE = re.compile(r"Avg prompt throughput:.*Running:")
_STAT_FIELDS: dict[str, re.Pattern[str]] = {
    "prompt": re.compile(r"Avg prompt throughput:\s*" + _NUM),
    "gen": re.compile(r"Avg generation throughput:\s*" + _NUM),
    "running": re.compile(r"Running:\s*(\d+)"),
    "waiting": re.compile(r"(?:Waiting|Pending):\s*(\d+)"),
    "kv": re.compile(r"(?:GPU |CPU |XPU |TPU )?KV cache usage:\s*" + _NUM + "%"),
    "prefix": re.compile(r"Prefix cache hit rate:\s*" + _NUM + "%"),
}
_SGLANG_STAT = re.compile(r"(?:Decode|Prefill) batch[.,]")
_SGLANG_FIELDS: dict[str, re.Pattern[str]] = {
    "running": re.compile(r"#running-req:\s*(\d+)"),
    "waiting": re.compile(r"#queue-req:\s*(\d+)"),
    "kv": re.compile(r"token usage:\s*" + _NUM),
    "gen": re.compile(r"gen throughput \(token/s\):\s*" + _NUM),
    "prompt": re.compile(r"input throughput \(token/s\):\s*" + _NUM),
}
_PREEMPTION = re.compile(
    r"is preempted by|preempt(?:ed|ion)s? (?:happened|occurred)|Retract requests|"
    r"retracted|KV cache pool is full",
    re.IGNORECASE,
)


@dataclass
class LogStat:
    """One periodic scheduler line: the engine's own view of its queue and KV cache."""

    line: int
    running: int
    waiting: int
    kv_usage: float  # fraction 0..1
    prompt_tok_s: float | None
    gen_tok_s: float | None
    prefix_hit: float | None  # fraction 0..1
    time: str | None  # the log line's timestamp text, if it has one


@dataclass
class ServerLog:
    """Everything :func:`parse_server_log` found in one log."""

    engine: str | None = None
    version: str | None = None
    config: ServerConfig = field(default_factory=ServerConfig)
    stats: list[LogStat] = field(default_factory=list)
    preemption_lines: int = 0
    warnings: list[str] = field(default_factory=list)
    version_detail: str | None = None  # the line the version was read from


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _int(text: str) -> int:
    return int(_number(text))


def _bytes(amount: str, unit: str) -> int:
    return round(_number(amount) * UNIT_BYTES[unit])


def _detail(line: str) -> str:
    line = redact(line.strip())
    return line if len(line) <= DETAIL_MAX_CHARS else line[: DETAIL_MAX_CHARS - 1] + "…"


class _Collector:
    """Sets facts on a ServerConfig: the first value seen wins unless ``override`` is given."""

    def __init__(self) -> None:
        self.config = ServerConfig()

    def set(self, name: str, value: FactValue, line: str, *, override: bool = False) -> None:
        if value is None:
            return
        fact = Fact(value=value, source="log", detail=_detail(line))
        if name in ServerConfig.model_fields and name != "extra":
            current = getattr(self.config, name)
        else:
            current = self.config.extra.get(name)
        # "auto" is what was asked for, not what was resolved: a later concrete value replaces it.
        if not (override or current is None or current.value == AUTO):
            return
        if name in ServerConfig.model_fields and name != "extra":
            setattr(self.config, name, fact)
        else:
            self.config.extra[name] = fact


# Server option names (vLLM's non-default args, its engine config, SGLang's ServerArgs) that map
# to a ServerConfig field; anything else scalar lands in ``extra`` under its own name.
_OPTION_FIELDS = {
    "max_num_seqs": "max_num_seqs",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "enable_chunked_prefill": "enable_chunked_prefill",
    "enable_prefix_caching": "enable_prefix_caching",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "dtype": "dtype",
    "kv_cache_dtype": "kv_cache_dtype",
    "tensor_parallel_size": "tensor_parallel_size",
    "pipeline_parallel_size": "pipeline_parallel_size",
    "data_parallel_size": "data_parallel_size",
    "max_model_len": "max_model_len",
    "max_seq_len": "max_model_len",
    "block_size": "block_size",
    "kv_cache_memory_bytes": "kv_cache_memory_bytes",
    "kv_cache_memory": "kv_cache_memory_bytes",
    "num_gpu_blocks_override": "num_gpu_blocks",
    # SGLang
    "tp_size": "tensor_parallel_size",
    "pp_size": "pipeline_parallel_size",
    "dp_size": "data_parallel_size",
    "mem_fraction_static": "gpu_memory_utilization",
    "max_running_requests": "max_num_seqs",
    "chunked_prefill_size": "max_num_batched_tokens",
    "context_length": "max_model_len",
    "context_len": "max_model_len",
    "page_size": "block_size",
    "max_total_num_tokens": "kv_cache_tokens",
}
# Options that only say where the server listens or what it loads: not configuration facts.
_IGNORED_OPTIONS = {
    "host",
    "port",
    "model_tag",
    "model",
    "model_path",
    "tokenizer",
    "tokenizer_path",
}


def _scalar(value: object) -> FactValue:
    if isinstance(value, bool | int | float | str) or value is None:
        if isinstance(value, str) and value.startswith("torch."):
            return value.removeprefix("torch.")
        return value
    if isinstance(value, list | tuple) and all(isinstance(v, str | int | float) for v in value):
        return ",".join(str(v) for v in value)
    return None


def _set_option(out: _Collector, name: str, value: object, line: str, override: bool) -> None:
    if name in _IGNORED_OPTIONS or is_secret_name(name):  # a secret is never copied
        return
    scalar = _scalar(value)
    if scalar is None:
        return
    if name == "chunked_prefill_size" and isinstance(scalar, int):
        # SGLang disables chunked prefill with -1.
        out.set("enable_chunked_prefill", scalar > 0, line, override=override)
        if scalar <= 0:
            return
    if name == "kv_cache_memory" and isinstance(scalar, str):
        return  # vLLM accepts "6G"-style strings there; the byte count comes from other lines
    out.set(_OPTION_FIELDS.get(name, name), scalar, line, override=override)


def _literal(text: str) -> object:
    """A Python literal from its repr, or the text itself (``torch.float32``, ``auto``)."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text.strip("'\"")


def _parse_non_default_args(out: _Collector, line: str) -> None:
    text = line.split("non-default args:", 1)[1].strip()
    try:
        args = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        # A value without a literal repr: fall back to the simple key: value pairs.
        args = {
            m.group(1): _literal(m.group(2))
            for m in re.finditer(r"'(\w+)':\s*('[^']*'|[\w.+-]+)", text)
        }
    if isinstance(args, dict):
        for name, value in args.items():
            if isinstance(name, str):
                _set_option(out, name, value, line, override=False)


_TOP_LEVEL_KV = re.compile(r"(?:^|[,(]\s*)(\w+)=('[^']*'|[^,()\[\]{}]*?)(?=,\s*\w+=|\)?$|\))")


def _parse_engine_config(out: _Collector, line: str, names: set[str]) -> None:
    """``key=value`` pairs of a config repr (vLLM's engine config, SGLang's ServerArgs)."""
    body = line.split("with config:", 1)[-1] if "with config:" in line else line
    if "ServerArgs(" in body:
        body = body.split("ServerArgs(", 1)[1]
    for match in _TOP_LEVEL_KV.finditer(body):
        name, raw = match.group(1), match.group(2).strip()
        if name in names:
            _set_option(out, name, _literal(raw), line, override=False)


_ENGINE_CONFIG_NAMES = {
    "dtype",
    "max_seq_len",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "kv_cache_dtype",
    "enable_prefix_caching",
    "enable_chunked_prefill",
}
_SGLANG_ARG_NAMES = {
    "tp_size",
    "pp_size",
    "dp_size",
    "mem_fraction_static",
    "dtype",
    "kv_cache_dtype",
    "chunked_prefill_size",
    "max_running_requests",
    "context_length",
    "page_size",
    "max_total_tokens",
    "max_prefill_tokens",
    "schedule_policy",
    "disable_radix_cache",
    "stream_interval",
}

# One-line facts: pattern -> what to set from the match.
_Setter = Callable[[_Collector, re.Match[str], str], None]


def _kv_size(out: _Collector, m: re.Match[str], line: str) -> None:
    out.set("kv_cache_tokens", _int(m.group(1)), line, override=True)


def _max_concurrency(out: _Collector, m: re.Match[str], line: str) -> None:
    out.set("kv_cache_max_concurrency", _number(m.group(2)), line, override=True)
    out.set("kv_cache_max_concurrency_tokens_per_request", _int(m.group(1)), line, override=True)


def _available_kv(out: _Collector, m: re.Match[str], line: str) -> None:
    out.set("kv_cache_memory_bytes", _bytes(m.group(1), m.group(2)), line)


def _chunked(out: _Collector, m: re.Match[str], line: str) -> None:
    out.set("enable_chunked_prefill", True, line, override=True)
    out.set("max_num_batched_tokens", _int(m.group(1)), line, override=True)


def _weights(out: _Collector, m: re.Match[str], line: str) -> None:
    out.set("weights_memory_bytes", _bytes(m.group(1), m.group(2)), line)


def _graphs(out: _Collector, m: re.Match[str], line: str) -> None:
    out.set("cuda_graph_memory_bytes", _bytes(m.group(1), m.group(2)), line)


def _budget(out: _Collector, m: re.Match[str], line: str) -> None:
    out.set("total_memory_bytes", _bytes(m.group(1), "GiB"), line, override=True)
    out.set("gpu_memory_utilization", _number(m.group(2)), line)
    out.set("memory_budget_bytes", _bytes(m.group(3), "GiB"), line, override=True)


def _old_accounting(out: _Collector, m: re.Match[str], line: str) -> None:
    out.set("weights_memory_bytes", _bytes(m.group(1), "GiB"), line, override=True)
    out.set("non_torch_memory_bytes", _bytes(m.group(2), "GiB"), line, override=True)
    out.set("activation_peak_bytes", _bytes(m.group(3), "GiB"), line, override=True)
    out.set("kv_cache_memory_bytes", _bytes(m.group(4), "GiB"), line)


def _new_accounting(out: _Collector, m: re.Match[str], line: str) -> None:
    """vLLM >= 0.11's one-sentence memory summary with its ``--kv-cache-memory`` suggestion."""
    total = re.search(r"Free memory on device \(" + _NUM + r"/" + _NUM + r" GiB\)", line)
    if total:
        out.set("total_memory_bytes", _bytes(total.group(2), "GiB"), line, override=True)
        out.set("free_memory_at_start_bytes", _bytes(total.group(1), "GiB"), line, override=True)
    desired = re.search(r"utilization is \(" + _NUM + r", " + _NUM + r" GiB\)", line)
    if desired:
        out.set("gpu_memory_utilization", _number(desired.group(1)), line)
        out.set("memory_budget_bytes", _bytes(desired.group(2), "GiB"), line, override=True)
    consumed = re.search(_NUM + r" GiB for consumed memory", line)
    if consumed:
        out.set("consumed_memory_bytes", _bytes(consumed.group(1), "GiB"), line, override=True)
    peak = re.search(_NUM + r" GiB for peak activation", line)
    if peak:
        out.set("activation_peak_bytes", _bytes(peak.group(1), "GiB"), line, override=True)
    graphs = re.search(_NUM + r" GiB for CUDAGraph memory", line)
    if graphs:
        out.set("cuda_graph_memory_bytes", _bytes(graphs.group(1), "GiB"), line, override=True)
    suggestions = re.findall(r"--kv-cache-memory=(\d+)", line)
    if suggestions:
        # The first fits the requested budget; the second would use the whole device.
        out.set("suggested_kv_cache_memory_bytes", int(suggestions[0]), line, override=True)
    if len(suggestions) > 1:
        out.set("kv_cache_memory_bytes_full_device", int(suggestions[1]), line, override=True)
    in_use = re.search(r"kv cache memory in use is " + _NUM + r" GiB", line)
    if in_use:
        out.set("kv_cache_memory_bytes", _bytes(in_use.group(1), "GiB"), line)


def _old_blocks(out: _Collector, m: re.Match[str], line: str) -> None:
    out.set("num_gpu_blocks", _int(m.group(1)), line, override=True)


def _sglang_capacity(out: _Collector, m: re.Match[str], line: str) -> None:
    out.set("kv_cache_tokens", _int(m.group(1)), line, override=True)
    for name in ("chunked_prefill_size", "max_running_requests", "context_len"):
        found = re.search(name + r"=(-?\d+)", line)
        if found:
            _set_option(out, name, int(found.group(1)), line, override=True)


def _sglang_kv_alloc(out: _Collector, m: re.Match[str], line: str) -> None:
    out.set("kv_cache_tokens", _int(m.group(1)), line)
    total = _bytes(m.group(2), m.group(3)) + _bytes(m.group(4), m.group(5))
    out.set("kv_cache_memory_bytes", total, line, override=True)


def _sglang_weights(out: _Collector, m: re.Match[str], line: str) -> None:
    out.set("weights_memory_bytes", _bytes(m.group(1), m.group(2)), line, override=True)
    dtype = re.search(r"dtype=(?:torch\.)?(\w+)", line)
    if dtype:
        out.set("dtype", dtype.group(1), line)


_UNIT = r"\s*(GiB|GB|MiB|MB)"
_LINE_FACTS: list[tuple[re.Pattern[str], _Setter]] = [
    (re.compile(r"(?:GPU|CPU|XPU|TPU)? ?KV cache size:\s*" + _NUM + r" tokens"), _kv_size),
    (
        re.compile(r"Maximum concurrency for " + _NUM + r" tokens per request:\s*" + _NUM + "x"),
        _max_concurrency,
    ),
    (re.compile(r"Available KV cache memory:\s*" + _NUM + _UNIT), _available_kv),
    (re.compile(r"Explicitly set \(" + _NUM + r"/[0-9.]+\)\s*(GiB) for KV cache"), _available_kv),
    (re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)"), _chunked),
    (re.compile(r"(?:Model loading|Loading model weights) took\s*" + _NUM + _UNIT), _weights),
    (re.compile(r"Graph capturing finished in .*?took\s*" + _NUM + _UNIT), _graphs),
    (
        re.compile(
            r"total_gpu_memory \("
            + _NUM
            + r"GiB\) x gpu_memory_utilization \("
            + _NUM
            + r"\) = "
            + _NUM
            + "GiB"
        ),
        _budget,
    ),
    (
        re.compile(
            r"model weights take "
            + _NUM
            + r"GiB; non_torch_memory takes "
            + _NUM
            + r"GiB; PyTorch activation peak memory takes "
            + _NUM
            + r"GiB; the rest of the memory reserved for KV Cache is "
            + _NUM
            + "GiB"
        ),
        _old_accounting,
    ),
    (re.compile(r"Free memory on device \(.*--kv-cache-memory="), _new_accounting),
    (re.compile(r"# (?:GPU|cuda|CUDA) blocks:\s*(\d+)"), _old_blocks),
    (re.compile(r"max_total_num_tokens=(\d+)"), _sglang_capacity),
    (
        re.compile(
            r"KV Cache is allocated\. #tokens:\s*(\d+), K size:\s*"
            + _NUM
            + _UNIT
            + r", V size:\s*"
            + _NUM
            + _UNIT
        ),
        _sglang_kv_alloc,
    ),
    (re.compile(r"Load weight end\..*mem usage=\s*" + _NUM + _UNIT), _sglang_weights),
]


def _line_time(line: str) -> str | None:
    found = _VLLM_TIME.search(line) or _SGLANG_TIME.search(line)
    return found.group(1) if found else None


def _vllm_stat(number: int, line: str) -> LogStat | None:
    values = {k: p.search(line) for k, p in _STAT_FIELDS.items()}
    running, waiting, kv = values["running"], values["waiting"], values["kv"]
    if running is None or waiting is None or kv is None:
        return None
    prompt, gen, prefix = values["prompt"], values["gen"], values["prefix"]
    return LogStat(
        line=number,
        running=int(running.group(1)),
        waiting=int(waiting.group(1)),
        kv_usage=_number(kv.group(1)) / PERCENT,
        prompt_tok_s=_number(prompt.group(1)) if prompt else None,
        gen_tok_s=_number(gen.group(1)) if gen else None,
        prefix_hit=_number(prefix.group(1)) / PERCENT if prefix else None,
        time=_line_time(line),
    )


def _sglang_stat(number: int, line: str) -> LogStat | None:
    values = {k: p.search(line) for k, p in _SGLANG_FIELDS.items()}
    running, waiting, kv = values["running"], values["waiting"], values["kv"]
    if running is None or waiting is None or kv is None:
        return None
    gen, prompt = values["gen"], values["prompt"]
    return LogStat(
        line=number,
        running=int(running.group(1)),
        waiting=int(waiting.group(1)),
        kv_usage=_number(kv.group(1)),
        prompt_tok_s=_number(prompt.group(1)) if prompt else None,
        gen_tok_s=_number(gen.group(1)) if gen else None,
        prefix_hit=None,
        time=_line_time(line),
    )


def parse_server_log(text: str) -> ServerLog:
    """Parse a vLLM or SGLang log (any version this module knows; other lines are skipped)."""
    out = _Collector()
    result = ServerLog()
    seen_warnings: set[str] = set()
    vllm_marks = sglang_marks = 0
    # split("\n"), not splitlines(): progress bars redraw with "\r" and line numbers must match
    # what an editor shows.
    for number, raw in enumerate(text.split("\n"), start=1):
        line = strip_terminal(raw).rstrip()
        if not line:
            continue
        if _VLLM_MARK.search(line):
            vllm_marks += 1
        if _SGLANG_MARK.search(line):
            sglang_marks += 1
        if result.version is None:
            for pattern in (*_VERSION_PATTERNS, _SGLANG_VERSION):
                found = pattern.search(line)
                if found:
                    result.version = found.group(1)
                    result.version_detail = _detail(line)
                    break
        if _STAT_LINE.search(line):
            stat = _vllm_stat(number, line)
            if stat is not None:
                result.stats.append(stat)
            continue
        if _SGLANG_STAT.search(line):
            stat = _sglang_stat(number, line)
            if stat is not None:
                result.stats.append(stat)
            continue
        if "non-default args:" in line:
            _parse_non_default_args(out, line)
        elif "LLM engine" in line and "with config:" in line:
            _parse_engine_config(out, line, _ENGINE_CONFIG_NAMES)
        elif "server_args=ServerArgs(" in line:
            _parse_engine_config(out, line, _SGLANG_ARG_NAMES)
        for pattern, setter in _LINE_FACTS:
            found = pattern.search(line)
            if found:
                setter(out, found, line)
        if _PREEMPTION.search(line):
            result.preemption_lines += 1
        warning = _WARNING.search(line)
        if warning and len(result.warnings) < MAX_WARNINGS:
            message = redact(warning.group(1).strip())
            if message and message not in seen_warnings:
                seen_warnings.add(message)
                result.warnings.append(message)
    _derive(out)
    result.config = out.config
    if vllm_marks or sglang_marks:
        result.engine = "sglang" if sglang_marks > vllm_marks else "vllm"
    return result


def _derive(out: _Collector) -> None:
    """Facts the log gives only as a sum: non-torch memory = consumed - weights (vLLM >= 0.11)."""
    config = out.config
    consumed = config.extra.get("consumed_memory_bytes")
    weights = config.weights_memory_bytes
    if (
        config.non_torch_memory_bytes is None
        and consumed is not None
        and weights is not None
        and isinstance(consumed.value, int)
        and isinstance(weights.value, int)
        and consumed.value >= weights.value
    ):
        config.non_torch_memory_bytes = Fact(
            value=consumed.value - weights.value,
            source="log",
            detail="consumed memory (weights + non-torch) minus model loading memory: "
            f"{consumed.detail}",
        )


def apply_server_log(manifest: RunManifest, log: ServerLog) -> None:
    """Fill the manifest's unknown server facts from the log; known facts are never replaced.

    Whatever the user passed or an endpoint or ``/metrics`` reported is already in the manifest and
    wins; the log only fills the gaps (and the engine name and version when still unknown).
    """
    server = manifest.server
    if server.engine is None and log.engine is not None:
        server.engine = log.engine
    if server.version is None and log.version is not None:
        server.version = Fact(value=log.version, source="log", detail=log.version_detail)
    config = server.config
    for name in ServerConfig.model_fields:
        if name == "extra":
            continue
        found = getattr(log.config, name)
        if found is not None and getattr(config, name) is None:
            setattr(config, name, found.model_copy())
    for name, found in log.config.extra.items():
        config.extra.setdefault(name, found.model_copy())
