"""AIPerf's side files about the server: ``server_metrics_export.csv`` (a summary of the
server's ``/metrics`` over one level) and ``vllm_command.txt``; and merging per-level server
facts into one manifest. Used by :mod:`sweeper.importers.aiperf`."""

from __future__ import annotations

import csv
import io
import shlex
from pathlib import Path
from typing import Any

from sweeper.errors import ImportFormatError
from sweeper.importers._common import set_level_fact
from sweeper.schema import (
    Fact,
    MetricSample,
    RequestTrace,
    Series,
    Server,
    ServerConfig,
    Target,
)

SERVER_METRICS_FILE = "server_metrics_export.csv"
SERVER_LOG_FILE = "server.log"

# vLLM serve flags -> ServerConfig fields
_VLLM_FLAGS = {
    "--max-num-seqs": "max_num_seqs",
    "--max-num-batched-tokens": "max_num_batched_tokens",
    "--tensor-parallel-size": "tensor_parallel_size",
    "-tp": "tensor_parallel_size",
    "--pipeline-parallel-size": "pipeline_parallel_size",
    "--data-parallel-size": "data_parallel_size",
    "--gpu-memory-utilization": "gpu_memory_utilization",
    "--kv-cache-dtype": "kv_cache_dtype",
    "--block-size": "block_size",
    "--max-model-len": "max_model_len",
    "--dtype": "dtype",
    # Tokens per streamed chunk (vLLM >= 0.11): not a ServerConfig field, kept in ``extra``.
    "--stream-interval": "stream_interval",
}
# vllm:cache_config_info keys -> ServerConfig fields
_CACHE_INFO = {
    "block_size": "block_size",
    "num_gpu_blocks": "num_gpu_blocks",
    "cache_dtype": "kv_cache_dtype",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "enable_prefix_caching": "enable_prefix_caching",
}


class LevelFiles:
    """What one AIPerf artifact folder (one concurrency level) holds, as read."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.records: list[dict[str, Any]] = []
        self.summary: dict[str, float | int | str | None] = {}
        self.version: str | None = None
        self.command: list[str] | None = None
        self.target = Target()
        self.output_len: int | None = None
        self.ignore_eos: bool | None = None
        self.seed: int | None = None
        self.config: dict[str, Fact] = {}
        self.server_metrics: list[dict[str, str]] | None = None
        self.has_log = (folder / SERVER_LOG_FILE).is_file()
        self.spread = False
        self.concurrency = 0
        # AIPerf's own first send and last answer (unix ns, from its summary): where a level has
        # no per-request records, the only account of when it ran.
        self.window_unix_ns: tuple[int, int] | None = None

    @property
    def summary_only(self) -> bool:
        """Only AIPerf's summary of this level survived, not its per-request records."""
        return not self.records


def with_scheme(url: str) -> str:
    return url if "://" in url else f"http://{url}"


# ---------------------------------------------------------------------------------------------
# server_metrics_export.csv

_STAT_COLUMNS = frozenset(
    {
        "avg",
        "min",
        "max",
        "std",
        "total",
        "rate",
        "rate_avg",
        "rate_min",
        "rate_max",
        "rate_std",
        "count",
        "count_rate",
        "sum",
        "sum_rate",
        "buckets",
        "Key",
        "Value",
        "Description",
    }
    | {f"p{p}" for p in (1, 5, 10, 25, 50, 75, 90, 95, 99)}
    | {f"p{p}_estimate" for p in (1, 5, 10, 25, 50, 75, 90, 95, 99)}
)
_ID_COLUMNS = frozenset({"Endpoint", "Type", "Metric", "Unit"})
_GAUGE_STATS = ("avg", "max", "p50", "p99")


def read_server_metrics(path: Path, level: LevelFiles) -> list[dict[str, str]]:
    """Rows of every section (gauge, counter, histogram, info), each a dict by its header."""
    text = path.read_text(encoding="utf-8", errors="replace")
    rows: list[dict[str, str]] = []
    header: list[str] | None = None
    for number, fields in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not fields or not any(f.strip() for f in fields):
            header = None
            continue
        if fields[0].startswith("#"):
            continue
        if fields[0] == "Endpoint":
            header = fields
            continue
        if header is None:
            raise ImportFormatError(
                "a data row before any 'Endpoint,...' header; expected AIPerf's "
                "server_metrics_export.csv",
                path,
                f"line {number}",
            )
        row = dict(zip(header, fields, strict=False))
        rows.append(row)
        if row.get("Metric") == "vllm:cache_config_info" and row.get("Key") in _CACHE_INFO:
            _cache_fact(row, level)
    for row in rows:
        if row.get("Type") == "gauge":
            labels = _labels(row)
            suffix = "".join(f"[{k}={v}]" for k, v in sorted(labels.items()) if k != "engine")
            for stat in _GAUGE_STATS:
                value = _float(row.get(stat))
                if value is not None:
                    level.summary[f"server.{row['Metric']}{suffix}.{stat}"] = value
    return rows


def _labels(row: dict[str, str]) -> dict[str, str]:
    return {
        k: v
        for k, v in row.items()
        if k not in _STAT_COLUMNS and k not in _ID_COLUMNS and v not in ("", None)
    }


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


def _cache_fact(row: dict[str, str], level: LevelFiles) -> None:
    raw = row.get("Value", "")
    value: int | float | bool | str | None
    if raw in ("True", "False"):
        value = raw == "True"
    elif raw in ("None", ""):
        return
    else:
        value = _number_or_text(raw)
    level.config[_CACHE_INFO[row["Key"]]] = Fact(
        value=value,
        source="metrics",
        detail=f"vllm:cache_config_info {row['Key']} (AIPerf {SERVER_METRICS_FILE})",
    )


def bracket_samples(
    level: LevelFiles, requests: list[RequestTrace], origin_unix_ns: int
) -> list[MetricSample]:
    """Two samples per level: zero at its first send, AIPerf's increase at its last end (from
    the requests, else from AIPerf's summary of the level)."""
    if level.server_metrics is None:
        return []
    if requests:
        start = min(r.send_ns for r in requests)
        end = max(r.send_ns + (r.chunk_ns[-1] if r.chunk_ns else (r.end_ns or 0)) for r in requests)
    elif level.window_unix_ns is not None:
        start, end = (t - origin_unix_ns for t in level.window_unix_ns)
    else:
        return []
    by_url: dict[str, tuple[list[Series], list[Series]]] = {}
    for row in level.server_metrics:
        kind = row.get("Type")
        if kind not in ("counter", "histogram"):
            continue
        url = with_scheme(row.get("Endpoint", "server")) + "/metrics"
        zero, final = by_url.setdefault(url, ([], []))
        labels = _labels(row)
        name = row["Metric"]
        if kind == "counter":
            total = _float(row.get("total"))
            if total is None:
                continue
            zero.append(Series(name=f"{name}_total", labels=labels, value=0.0))
            final.append(Series(name=f"{name}_total", labels=labels, value=total))
            continue
        for bound, count in _buckets(row.get("buckets", "")):
            bucket_labels = {**labels, "le": bound}
            zero.append(Series(name=f"{name}_bucket", labels=bucket_labels, value=0.0))
            final.append(Series(name=f"{name}_bucket", labels=bucket_labels, value=count))
        for suffix in ("sum", "count"):
            value = _float(row.get(suffix))
            if value is not None:
                zero.append(Series(name=f"{name}_{suffix}", labels=labels, value=0.0))
                final.append(Series(name=f"{name}_{suffix}", labels=labels, value=value))
    samples = []
    for url, (zero, final) in by_url.items():
        samples.append(MetricSample(t_ns=start, url=url, series=zero))
        samples.append(MetricSample(t_ns=end, url=url, series=final))
    return samples


def _buckets(text: str) -> list[tuple[str, float]]:
    out = []
    for part in text.split(";"):
        bound, sep, count = part.partition("=")
        value = _float(count)
        if sep and value is not None:
            out.append((bound.strip(), value))
    return out


def read_vllm_command(path: Path, level: LevelFiles) -> None:
    try:
        argv = shlex.split(path.read_text(encoding="utf-8", errors="replace"))
    except ValueError:
        return
    for i, arg in enumerate(argv):
        flag, eq, inline = arg.partition("=")
        field = _VLLM_FLAGS.get(flag)
        if field is None:
            continue
        raw = inline if eq else (argv[i + 1] if i + 1 < len(argv) else "")
        value = _number_or_text(raw)
        level.config.setdefault(
            field, Fact(value=value, source="user", detail=f"{flag} in {path.name}")
        )


def merge_server(levels: list[LevelFiles], warnings: list[str]) -> Server:
    """One ServerConfig for the sweep; a fact that differs between levels is kept once if the
    values are within 5% (the smallest), else listed per level in ``extra`` with a warning."""
    config = ServerConfig()
    names = sorted({name for lv in levels for name in lv.config})
    for name in names:
        facts = {lv.concurrency: lv.config[name] for lv in levels if name in lv.config}
        set_level_fact(config, name, facts, warnings)
    blocks, size = config.num_gpu_blocks, config.block_size
    if (
        config.kv_cache_tokens is None
        and blocks is not None
        and size is not None
        and isinstance(blocks.value, int)
        and isinstance(size.value, int)
    ):
        config.kv_cache_tokens = Fact(
            value=blocks.value * size.value,
            source="derived",
            detail="num_gpu_blocks x block_size (vllm:cache_config_info)",
        )
    engine = (
        "vllm"
        if any(
            name in _VLLM_FLAGS.values() or lv.server_metrics for lv in levels for name in lv.config
        )
        else None
    )
    return Server(engine=engine, config=config)


def _number_or_text(raw: str) -> int | float | str:
    """``"8"`` -> 8, ``"0.9"`` -> 0.9, anything else stays text."""
    try:
        return int(raw)
    except ValueError:
        try:
            return float(raw)
        except ValueError:
            return raw
