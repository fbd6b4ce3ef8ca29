"""Findings: why the curve bends, each a typed object with its numbers and a sentence in en and zh.

Entry points::

    analyze_run(ts, slos=parse_slos("ttft_p99<=2s,itl_p50<=25ms"))  # a TraceSet
    analyze(RunData(manifest, levels, server, requests, gaps))       # frames (tests, notebooks)

Each finding of DESIGN.md "Findings" 1-11 has a stable id (``roofline``, ``scaling``, ``knee``,
``itl_tail``, ``tail_cause``, ``kv_ceiling``, ``memory_headroom``, ``recommended``, ``slo_table``,
``long_input``, ``client_health``), a severity, the levels it concerns, its ``numbers`` (the JSON
contract documented in docs/findings.md), the data it rests on and what is missing. A finding the
data cannot support has severity ``unknown`` and says what is missing; no number is invented.
Thresholds are data (:mod:`sweeper.analysis.thresholds`). Sentences are gettext messages (domain
``findings``; Chinese in ``sweeper/locale/zh/LC_MESSAGES/findings.po``); numbers are formatted
per language by Babel.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from sweeper.analysis.frames import gap_frame, level_frame, request_frame
from sweeper.analysis.server_frames import server_level_frame
from sweeper.analysis.tail_signature import StallSignature, stall_signature
from sweeper.analysis.thresholds import DEFAULT_SLO_TABLE, DEFAULT_THRESHOLDS, Thresholds
from sweeper.errors import ConfigError
from sweeper.i18n import LANGUAGES, N_, fmt_number, fmt_percent, gettext
from sweeper.schema import RunManifest, fact_value
from sweeper.store import TraceSet
from sweeper.units import MS_PER_S

DOMAIN = "findings"
GIB = 1 << 30
GB = 1e9
Severity = Literal["info", "notice", "warning", "critical", "unknown"]
FINDING_IDS = (
    "roofline",
    "scaling",
    "knee",
    "itl_tail",
    "tail_cause",
    "kv_ceiling",
    "memory_headroom",
    "recommended",
    "slo_table",
    "long_input",
    "client_health",
)
TAIL_CAUSES = (
    "chunked_prefill",
    "preemption",
    "kv_admission",
    "max_num_seqs",
    "client_overload",
    "none",
    "unknown",
)


class Finding(BaseModel):
    """One finding: what the data says, with the numbers that say it, in both languages."""

    model_config = ConfigDict(extra="forbid")

    id: str
    severity: Severity
    levels: list[int] = Field(default_factory=list)
    numbers: dict[str, Any] = Field(default_factory=dict)
    text: dict[str, str] = Field(description="The finding's sentences, by language (en, zh).")
    data: list[str] = Field(default_factory=list, description="What data it rests on.")
    missing: list[str] = Field(default_factory=list, description="What it would need and lacks.")


# ---------------------------------------------------------------------------------------------
# Service levels


_SLO_TERM = re.compile(
    r"^(?P<metric>ttft|tpot|itl|e2el)_(?P<stat>mean|p50|p90|p95|p99)\s*(?P<op><=|<)\s*"
    r"(?P<value>[0-9]+(?:\.[0-9]+)?)\s*(?P<unit>ms|s|us)?$"
)
_UNIT_MS = {"ms": 1.0, "s": 1e3, "us": 1e-3, None: 1.0}


class SLO(BaseModel):
    """One service-level term: ``<metric>_<stat> <= bound`` (``ttft_p99<=2s``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: Literal["ttft", "tpot", "itl", "e2el"]
    stat: Literal["mean", "p50", "p90", "p95", "p99"]
    bound_ms: float

    @property
    def column(self) -> str:
        """The level_frame column it bounds (``ttft_ms_p99``)."""
        return f"{self.metric}_ms_{self.stat}"

    @property
    def label(self) -> str:
        if self.bound_ms >= MS_PER_S:
            return f"{self.metric}_{self.stat}<={self.bound_ms / MS_PER_S:g}s"
        return f"{self.metric}_{self.stat}<={self.bound_ms:g}ms"

    def met(self, row: pd.Series) -> bool:
        value = row.get(self.column)
        return value is not None and bool(np.isfinite(value)) and float(value) <= self.bound_ms


def parse_slos(text: str | Sequence[str]) -> list[SLO]:
    """``"ttft_p99<=2s,itl_p50<=25ms"`` -> two :class:`SLO` terms (all must hold together).
    Units: ``ms`` (default), ``s``, ``us``. A bad term is an error naming it and the form."""
    items = [text] if isinstance(text, str) else list(text)
    terms = [t.strip() for item in items for t in item.split(",") if t.strip()]
    if not terms:
        raise ConfigError("empty --slo; write terms like ttft_p99<=2s,itl_p50<=25ms")
    out = []
    for term in terms:
        m = _SLO_TERM.match(term.lower().replace(" ", ""))
        if not m:
            raise ConfigError(
                f"bad SLO term {term!r}: write <metric>_<stat><=<value><unit> with metric "
                "ttft/tpot/itl/e2el, stat mean/p50/p90/p95/p99 and unit ms/s/us, "
                "e.g. ttft_p99<=2s,itl_p50<=25ms"
            )
        out.append(
            SLO(
                metric=m["metric"],
                stat=m["stat"],
                bound_ms=float(m["value"]) * _UNIT_MS[m["unit"]],
            )
        )
    return out


def slo_label(slos: Sequence[SLO]) -> str:
    return ",".join(s.label for s in slos)


# ---------------------------------------------------------------------------------------------
# Words and numbers in each language


class _V:
    """A value rendered per language."""

    def render(self, lang: str) -> str:
        raise NotImplementedError


@dataclass
class _Num(_V):
    value: float
    digits: int = 1
    suffix: str = ""

    def render(self, lang: str) -> str:
        return fmt_number(self.value, lang, self.digits) + self.suffix


@dataclass
class _Pct(_V):
    fraction: float
    digits: int = 1

    def render(self, lang: str) -> str:
        return fmt_percent(self.fraction, lang, self.digits)


@dataclass
class _Ms(_V):
    """A duration: ms below 1 s, else seconds (``17.4 ms``, ``1.39 s`` / ``1.39 秒``)."""

    ms: float

    def render(self, lang: str) -> str:
        if abs(self.ms) >= MS_PER_S:
            unit = " 秒" if lang == "zh" else " s"
            return fmt_number(self.ms / MS_PER_S, lang, 2) + unit
        digits = 1 if abs(self.ms) >= 1 else 2
        return fmt_number(self.ms, lang, digits) + " ms"


@dataclass
class _Msg(_V):
    """A nested message (translated, then formatted)."""

    msgid: str
    values: dict[str, Any] = field(default_factory=dict)

    def render(self, lang: str) -> str:
        return _format(lang, self.msgid, self.values)


class _Missing(_V):
    """What a finding lacks, each item a message of its own: ``a; b`` / ``a；b``."""

    def __init__(self, items: Sequence[str]) -> None:
        self.items = list(items)

    def render(self, lang: str) -> str:
        sep = "；" if lang == "zh" else "; "
        return sep.join(gettext(lang, DOMAIN, item) for item in self.items) or "?"


class _Levels(_V):
    """``C=8, C=16`` / ``C=8、C=16``."""

    def __init__(self, levels: Sequence[int]) -> None:
        self.levels = list(levels)

    def render(self, lang: str) -> str:
        sep = "、" if lang == "zh" else ", "
        return sep.join(f"C={c}" for c in self.levels)


@dataclass
class _Times(_V):
    """A ratio: ``11.1×`` / ``11.1 倍``."""

    value: float

    def render(self, lang: str) -> str:
        return fmt_number(self.value, lang, 1) + (" 倍" if lang == "zh" else "×")


def _times(value: float) -> _Times:
    return _Times(value)


def _tok_s(value: float) -> _Num:
    return _Num(value, 1 if value < 100 else 0)


def _gib(n_bytes: float) -> _Num:
    return _Num(n_bytes / GIB, 2)


def _format(lang: str, msgid: str, values: dict[str, Any]) -> str:
    rendered = {k: v.render(lang) if isinstance(v, _V) else str(v) for k, v in values.items()}
    return gettext(lang, DOMAIN, msgid).format(**rendered)


class _Text:
    """Sentences collected in both languages (English joined by spaces, Chinese without)."""

    def __init__(self) -> None:
        self.parts: list[tuple[str, dict[str, Any]]] = []

    def add(self, msgid: str, **values: Any) -> _Text:
        self.parts.append((msgid, values))
        return self

    def render(self) -> dict[str, str]:
        out = {}
        for lang in LANGUAGES:
            sep = "" if lang == "zh" else " "
            out[lang] = sep.join(_format(lang, m, v) for m, v in self.parts)
        return out


def _slo_words(slos: Sequence[SLO]) -> _V:
    """``p99 TTFT ≤ 2 s and p50 ITL ≤ 50 ms`` / ``p99 TTFT ≤ 2 秒且 p50 ITL ≤ 50 ms``."""

    class _Words(_V):
        def render(self, lang: str) -> str:
            joiner = gettext(lang, DOMAIN, N_(" and "))
            return joiner.join(
                f"{s.stat} {s.metric.upper()} ≤ {_Ms(s.bound_ms).render(lang)}" for s in slos
            )

    return _Words()


# ---------------------------------------------------------------------------------------------
# Inputs


def _level_cell(frame: pd.DataFrame | None, concurrency: int, name: str) -> float:
    """``frame[name]`` at one concurrency level as a float; NaN when the frame, the column, the
    level or the number is missing."""
    if frame is None or frame.empty or name not in frame.columns:
        return math.nan
    row = frame[frame["concurrency"] == concurrency]
    if row.empty:
        return math.nan
    v = pd.to_numeric(row[name], errors="coerce").iloc[0]
    return float(v) if pd.notna(v) else math.nan


@dataclass
class RunData:
    """What the findings read: the manifest and the frames of :mod:`sweeper.analysis.frames` and
    :mod:`sweeper.analysis.server_frames`. Frames may be partial (a per-level table typed in by hand):
    missing columns or frames make the findings that need them ``unknown``."""

    manifest: RunManifest
    levels: pd.DataFrame
    server: pd.DataFrame | None = None
    requests: pd.DataFrame | None = None
    gaps: pd.DataFrame | None = None
    server_log_stats: int = 0  # periodic stat lines found in the server log (0: none / no log)

    def __post_init__(self) -> None:
        self.levels = self.levels.sort_values("concurrency").reset_index(drop=True)

    def col(self, name: str) -> pd.Series | None:
        if name not in self.levels.columns:
            return None
        series = pd.to_numeric(self.levels[name], errors="coerce")
        return series if series.notna().any() else None

    def value(self, concurrency: int, name: str) -> float:
        return _level_cell(self.levels, concurrency, name)

    def server_value(self, concurrency: int, name: str) -> float:
        return _level_cell(self.server, concurrency, name)

    @property
    def concurrencies(self) -> list[int]:
        return [int(c) for c in self.levels["concurrency"]]

    def fact(self, path: str) -> Any:
        """A manifest fact's value by dotted path (``server.config.max_num_seqs``), or None."""
        obj: Any = self.manifest
        for part in path.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                return None
        return fact_value(obj) if hasattr(obj, "source") else obj


def _finite(x: Any) -> bool:
    try:
        return x is not None and math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def _num(x: Any, digits: int = 4) -> float | int | None:
    """A JSON-safe number (NaN -> None); ``digits=0`` gives an int (counts, tokens, bytes)."""
    if not _finite(x):
        return None
    if digits == 0:
        return round(float(x))
    return round(float(x), digits)


def _per_level(
    data: RunData, values: pd.Series | Sequence[float] | None, digits: int = 4
) -> dict[str, float | None]:
    if values is None:
        return {}
    return {str(c): _num(v, digits) for c, v in zip(data.concurrencies, list(values), strict=True)}


def _unknown(fid: str, text: _Text, missing: list[str], data: list[str] | None = None) -> Finding:
    return Finding(id=fid, severity="unknown", text=text.render(), missing=missing, data=data or [])


# ---------------------------------------------------------------------------------------------
# The baseline: a single stream


@dataclass(frozen=True)
class _Base:
    concurrency: int
    tok_s: float  # per stream


def _base(data: RunData) -> _Base | None:
    tput = data.col("output_throughput_tok_s")
    if tput is None:
        return None
    for c, t in zip(data.concurrencies, tput, strict=True):
        if _finite(t) and t > 0:
            return _Base(c, float(t) / c)
    return None


def analyze(
    data: RunData, *, slos: Sequence[SLO] | None = None, thresholds: Thresholds = DEFAULT_THRESHOLDS
) -> list[Finding]:
    """Every finding, in the order of DESIGN.md (1-11)."""
    # The rule modules import this module's helpers, so they are imported here, not at the top.
    from sweeper.findings import capacity as cap
    from sweeper.findings import cause, choice
    from sweeper.findings import scaling as perf

    out: list[Finding] = []
    builders: list[tuple[str, Callable[[], Finding]]] = [
        ("roofline", lambda: perf.roofline(data, thresholds)),
        ("scaling", lambda: perf.scaling(data, thresholds)),
        ("knee", lambda: perf.knee(data, thresholds)),
        ("itl_tail", lambda: perf.itl_tail(data, thresholds)),
        ("tail_cause", lambda: cause.tail_cause(data, thresholds)),
        ("kv_ceiling", lambda: cap.kv_ceiling(data, thresholds)),
        ("memory_headroom", lambda: cap.memory_headroom(data, thresholds)),
        ("recommended", lambda: choice.recommended(data, thresholds, slos)),
        ("slo_table", lambda: choice.slo_table(data, thresholds, slos)),
        ("long_input", lambda: choice.long_input(data, thresholds, _cause(out))),
        ("client_health", lambda: cause.client_health(data, thresholds)),
    ]
    for fid, build in builders:
        try:
            out.append(build())
        except (ValueError, KeyError, TypeError, ZeroDivisionError, IndexError) as exc:
            # One finding that trips on odd data must not take the report down: say so instead.
            text = _Text().add(
                N_("This finding could not be computed from this data ({error})."), error=exc
            )
            out.append(_unknown(fid, text, [f"{type(exc).__name__}: {exc}"]))
    return out


def _cause(found: Sequence[Finding]) -> str | None:
    for f in found:
        if f.id == "tail_cause":
            return str(f.numbers.get("cause"))
    return None


def run_data(ts: TraceSet) -> RunData:
    """The frames the findings read, from a trace set."""
    requests = request_frame(ts)
    gaps = gap_frame(ts)
    levels = level_frame(ts, requests=requests, gaps=gaps)
    server = server_level_frame(ts, requests=requests) if len(levels) else None
    log_stats = 0
    if ts.server_log:
        from sweeper.facts.serverlog import parse_server_log

        log_stats = len(parse_server_log(ts.server_log).stats)
    return RunData(complete_facts(ts.manifest), levels, server, requests, gaps, log_stats)


def complete_facts(manifest: RunManifest) -> RunManifest:
    """A copy of the manifest whose missing GPU and model figures are filled from sweeper's spec
    tables (source ``spec_table``) by the GPU and model names it has; facts it has are kept."""
    from sweeper.facts.hardware import gpu_facts, model_facts

    out = manifest.model_copy(deep=True)
    hw = out.hardware
    gpu = fact_value(hw.gpu_name)
    if isinstance(gpu, str) and hw.memory_bandwidth_gb_s is None:
        table = gpu_facts(gpu)
        hw.memory_bandwidth_gb_s = table.memory_bandwidth_gb_s
        hw.memory_gb = hw.memory_gb or table.memory_gb
        hw.bf16_tflops = hw.bf16_tflops or table.bf16_tflops
    model = out.model
    name = model.name or out.target.served_model_name or out.target.model
    if name and (model.weight_bytes is None or model.kv_bytes_per_token is None):
        kv_dtype = fact_value(out.server.config.kv_cache_dtype)
        dtype = fact_value(model.dtype)
        try:
            table_model = model_facts(
                name,
                dtype=dtype if isinstance(dtype, str) else None,
                kv_dtype=kv_dtype if isinstance(kv_dtype, str) and kv_dtype != "auto" else None,
            )
        except ConfigError:  # a dtype name the table does not know: keep what there is
            return out
        for key in type(model).model_fields:
            if key != "name" and getattr(model, key) is None:
                setattr(model, key, getattr(table_model, key))
    return out


def analyze_run(
    ts: TraceSet, *, slos: Sequence[SLO] | None = None, thresholds: Thresholds = DEFAULT_THRESHOLDS
) -> list[Finding]:
    """Every finding for one trace set (``slos``: the user's service level, all terms together)."""
    return analyze_run_data(run_data(ts), slos=slos, thresholds=thresholds)


def analyze_run_data(
    data: RunData, *, slos: Sequence[SLO] | None = None, thresholds: Thresholds = DEFAULT_THRESHOLDS
) -> list[Finding]:
    """:func:`analyze_run` on frames already computed by :func:`run_data` (the site reuses them)."""
    if data.levels.empty:
        text = _Text().add(
            N_("No measured request in this trace set: there is nothing to analyse.")
        )
        return [_unknown(fid, text, ["measured requests"]) for fid in FINDING_IDS]
    return analyze(data, slos=slos, thresholds=thresholds)


def findings_json(run_id: str, findings: Sequence[Finding]) -> dict[str, Any]:
    """The JSON contract: ``{"run_id", "findings": [{"id", "severity", "levels", "numbers",
    "text": {"en", "zh"}, "data", "missing"}]}`` with NaN written as null."""
    return {"run_id": run_id, "findings": [_json_safe(f.model_dump()) for f in findings]}


def _json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def finding(findings: Sequence[Finding], fid: str) -> Finding:
    """The finding with this id (every analysis has each id exactly once)."""
    for f in findings:
        if f.id == fid:
            return f
    raise KeyError(f"no finding {fid!r}; ids are {', '.join(FINDING_IDS)}")


__all__ = [
    "DEFAULT_SLO_TABLE",
    "FINDING_IDS",
    "SLO",
    "TAIL_CAUSES",
    "Finding",
    "RunData",
    "StallSignature",
    "analyze",
    "analyze_run",
    "finding",
    "findings_json",
    "parse_slos",
    "stall_signature",
]
