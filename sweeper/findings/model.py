"""What a finding is, and the service levels findings are judged against.

:class:`Finding` is the typed result of every rule (its JSON form is the contract of
docs/findings.md); :class:`SLO` is one term of a user's service level (``ttft_p99<=2s``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from sweeper.errors import ConfigError
from sweeper.units import MS_PER_S, json_safe

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
        """The level_frame column it bounds (``ttft_p99_ms``)."""
        return f"{self.metric}_{self.stat}_ms"

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


def findings_json(run_id: str, findings: Sequence[Finding]) -> dict[str, Any]:
    """The JSON contract: ``{"run_id", "findings": [{"id", "severity", "levels", "numbers",
    "text": {"en", "zh"}, "data", "missing"}]}`` with NaN written as null."""
    return {"run_id": run_id, "findings": [json_safe(f.model_dump()) for f in findings]}


def finding(findings: Sequence[Finding], fid: str) -> Finding:
    """The finding with this id (every analysis has each id exactly once)."""
    for f in findings:
        if f.id == fid:
            return f
    raise KeyError(f"no finding {fid!r}; ids are {', '.join(FINDING_IDS)}")
