"""Service levels: the terms a user's latency must meet (``--slo 'ttft_p99<=2s,itl_p50<=25ms'``).

An :class:`SLO` term bounds one statistic of one latency. It is read two ways:

- per level (the findings' recommended point and SLO table): the level's statistic,
  ``level_frame[slo.column_for(row)]``, is within the bound (:meth:`SLO.met`): ``ttft_p99_ms``
  in a closed loop, ``ttft_sched_p99_ms`` (from the schedule) for a ttft / e2el term of an
  open-loop level;
- per request (goodput, DistServe's definition: completed requests per second that meet every
  term; :func:`requests_meeting`): a ttft / tpot / e2el term bounds the request's own value
  whatever the term's stat (in an open loop TTFT and E2EL count from when the schedule said to
  send: the user waited from then); an itl term bounds the term's stat of the request's own gaps
  (``itl_p99<=50ms``: the p99 of that request's gaps). A request with nothing to judge (one
  output token: no TPOT, no gap) meets that term, as in ``vllm bench serve --goodput``; a failed
  request never counts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict

from sweeper.errors import ConfigError
from sweeper.units import MS_PER_S

_SLO_TERM = re.compile(
    r"^(?P<metric>ttft|tpot|itl|e2el)_(?P<stat>mean|p50|p90|p95|p99)\s*(?P<op><=|<)\s*"
    r"(?P<value>[0-9]+(?:\.[0-9]+)?)\s*(?P<unit>ms|s|us)?$"
)
_UNIT_MS = {"ms": 1.0, "s": 1e3, "us": 1e-3, None: 1.0}
_STAT_PERCENT = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0}


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

    @property
    def sched_column(self) -> str | None:
        """The level_frame column of the statistic counted from the schedule
        (``ttft_sched_p99_ms``), for a ttft / e2el term; None for tpot / itl."""
        if self.metric in ("ttft", "e2el"):
            return f"{self.metric}_sched_{self.stat}_ms"
        return None

    def column_for(self, row: pd.Series | Mapping[str, object]) -> str:
        """The column that judges this level: in an open loop (the row's
        ``<metric>_sched_<stat>_ms`` is finite) a ttft / e2el term counts from when the
        schedule said to send, as the user waited from then; else :attr:`column`."""
        sched = self.sched_column
        if sched is not None:
            value = row.get(sched)
            if isinstance(value, int | float | np.number) and bool(np.isfinite(value)):
                return sched
        return self.column

    def met(self, row: pd.Series) -> bool:
        """Whether a level (a row of level_frame) meets this term (judged on
        :meth:`column_for`: from the schedule in an open loop)."""
        value = row.get(self.column_for(row))
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
    """The terms as one ``--slo`` value (``ttft_p99<=2s,itl_p50<=25ms``)."""
    return ",".join(s.label for s in slos)


def as_slos(slos: Sequence[SLO] | Mapping[str, float] | None) -> list[SLO]:
    """SLO terms from either form: a list of :class:`SLO`, or the older mapping of per-request
    bounds by request-frame column (``{"ttft_ms": 500, "tpot_ms": 50}``)."""
    if not slos:
        return []
    if isinstance(slos, Mapping):
        out = []
        for column, bound in slos.items():
            metric = column.removesuffix("_ms")
            if metric not in ("ttft", "tpot", "itl", "e2el"):
                raise ConfigError(
                    f"bad SLO bound {column!r}: name one of ttft_ms, tpot_ms, itl_ms, e2el_ms"
                )
            out.append(SLO(metric=metric, stat="mean", bound_ms=float(bound)))
        return out
    return list(slos)


def gap_stat(owner: np.ndarray, itl_ms: np.ndarray, n: int, stat: str) -> np.ndarray:
    """One statistic of each request's own gaps: ``owner[i]`` (0..n-1) is the request of gap i.
    Percentiles interpolate linearly (numpy's default), all requests at once; NaN without gaps."""
    owner = np.asarray(owner, dtype=np.int64)
    values = np.asarray(itl_ms, dtype=float)
    keep = np.isfinite(values) & (owner >= 0)
    owner, values = owner[keep], values[keep]
    counts = np.bincount(owner, minlength=n).astype(np.int64)
    out = np.full(n, np.nan)
    has = counts > 0
    if stat == "mean":
        sums = np.bincount(owner, weights=values, minlength=n)
        out[has] = sums[has] / counts[has]
        return out
    order = np.lexsort((values, owner))
    ordered = values[order]
    starts = np.cumsum(counts) - counts
    pos = (counts[has] - 1) * (_STAT_PERCENT[stat] / 100.0)
    lo = np.floor(pos).astype(np.int64)
    hi = np.ceil(pos).astype(np.int64)
    base = starts[has]
    low, high = ordered[base + lo], ordered[base + hi]
    out[has] = low + (high - low) * (pos - lo)
    return out


def requests_meeting(
    requests: pd.DataFrame,
    slos: Sequence[SLO],
    *,
    gap_owner: np.ndarray | None = None,
    gap_itl_ms: np.ndarray | None = None,
) -> np.ndarray:
    """Which requests (rows of a request frame) meet every term (see the module docstring).

    ``gap_owner`` / ``gap_itl_ms``: the gaps of these requests (``gap_owner[i]`` the row of gap i),
    needed for itl terms. Rows not ``ok`` never meet."""
    n = len(requests)
    good = (requests["status"] == "ok").to_numpy(dtype=bool, copy=True)
    scheduled = _column(requests, "scheduled_s")
    from_schedule = np.isfinite(scheduled)
    for slo in slos:
        if slo.metric in ("ttft", "e2el"):
            own = _column(requests, f"{slo.metric}_ms")
            sched = _column(requests, f"{slo.metric}_sched_ms")
            value = np.where(from_schedule, sched, own)
            good &= value <= slo.bound_ms
        elif slo.metric == "tpot":
            value = _column(requests, "tpot_ms")
            single = _column(requests, "output_tokens") <= 1  # no decode step to judge
            good &= (value <= slo.bound_ms) | single
        else:
            owner = np.zeros(0, dtype=np.int64) if gap_owner is None else gap_owner
            itl = np.zeros(0) if gap_itl_ms is None else gap_itl_ms
            value = gap_stat(owner, itl, n, slo.stat)
            # One chunk: nothing between tokens. No chunk at all (an import of per-request times)
            # is not known to meet: the caller reports no goodput where a level has no gaps.
            no_gap = _column(requests, "chunks") == 1
            good &= (value <= slo.bound_ms) | no_gap
    return good


def _column(frame: pd.DataFrame, name: str) -> np.ndarray:
    if name not in frame.columns:
        return np.full(len(frame), np.nan)
    return pd.to_numeric(frame[name], errors="coerce").to_numpy(dtype=float)
