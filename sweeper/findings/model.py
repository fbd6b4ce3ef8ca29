"""What a finding is, and the service levels findings are judged against.

:class:`Finding` is the typed result of every rule (its JSON form is the contract of
docs/findings.md); :class:`SLO` is one term of a user's service level (``ttft_p99<=2s``),
defined in :mod:`sweeper.analysis.slo` (goodput is computed below the findings) and re-exported
here with :func:`parse_slos` and :func:`slo_label`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from sweeper.analysis.slo import SLO as SLO
from sweeper.analysis.slo import parse_slos as parse_slos
from sweeper.analysis.slo import slo_label as slo_label
from sweeper.units import json_safe

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
    "lone_stream",
    "none",
    "unknown",
)


class Prediction(BaseModel):
    """What a proposal predicts for one metric: ``from`` (this run's value) to ``to`` (a number
    where the finding can compute one, else None: only the ``direction`` is predicted)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    metric: Literal["kv_ceiling", "preemptions", "itl_p99_ms", "ttft_p99_ms"]
    level: int | None = Field(
        default=None, description="The concurrency it concerns; None: the run."
    )
    from_: float | None = Field(default=None, alias="from")
    to: float | None = None
    direction: Literal["higher", "lower"]


class Proposal(BaseModel):
    """A server flag change a finding advises: ``flag`` set to ``value`` (None: only the
    ``direction`` is known), with what it predicts and a short reason."""

    model_config = ConfigDict(extra="forbid")

    flag: str
    value: int | None = None
    direction: Literal["larger", "smaller"]
    predicts: list[Prediction] = Field(default_factory=list)
    reason: str


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
    proposals: list[Proposal] = Field(
        default_factory=list, description="The server flag changes it advises, as data."
    )


def findings_json(run_id: str, findings: Sequence[Finding]) -> dict[str, Any]:
    """The JSON contract: ``{"run_id", "findings": [{"id", "severity", "levels", "numbers",
    "text": {"en", "zh"}, "data", "missing", "proposals"}]}`` with NaN written as null."""
    return {
        "run_id": run_id,
        "findings": [json_safe(f.model_dump(by_alias=True)) for f in findings],
    }


def finding(findings: Sequence[Finding], fid: str) -> Finding:
    """The finding with this id (every analysis has each id exactly once)."""
    for f in findings:
        if f.id == fid:
            return f
    raise KeyError(f"no finding {fid!r}; ids are {', '.join(FINDING_IDS)}")
