"""Intervals across repeats: the mean of N runs' values and its 95% Student t-interval, and
whether two such means can be told apart (Welch's interval of their difference excludes 0).

Each repeat is one sample (a level's p99 TTFT of one run is one number), so the interval says
how much the level's statistic moves from one recording to the next on the same server: the noise
a comparison between levels or configurations must beat. No bootstrap over requests: a run's
requests are not independent of each other (they share the batch), its repeats are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

INTERVAL = "t95_across_repeats"
INTERVAL_TEXT = "95% Student t-interval of the mean across repeats (each repeat one sample)"
# Two-sided 95% quantiles of Student's t, degrees of freedom 1..30 (beyond: Cornish-Fisher).
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
_Z95 = 1.959964


def t95(df: float) -> float:
    """The two-sided 95% quantile of Student's t with ``df`` degrees of freedom (a fractional
    df, Welch's, rounds down: the wider interval)."""
    whole = max(1, math.floor(df))
    if whole <= len(_T95):
        return _T95[whole - 1]
    z = _Z95
    return z + (z**3 + z) / (4 * whole) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * whole**2)


def _clean(values: Sequence[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def mean_interval(values: Sequence[float | None]) -> dict[str, float | int | None]:
    """``{"n", "mean", "low", "high", "sd"}``: low / high null under two values."""
    xs = _clean(values)
    n = len(xs)
    if n == 0:
        return {"n": 0, "mean": None, "low": None, "high": None, "sd": None}
    mean = sum(xs) / n
    if n < 2:
        return {"n": n, "mean": mean, "low": None, "high": None, "sd": None}
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = t95(n - 1) * sd / math.sqrt(n)
    return {"n": n, "mean": mean, "low": mean - half, "high": mean + half, "sd": sd}


def difference_interval(
    a: Sequence[float | None], b: Sequence[float | None]
) -> tuple[float, float, float] | None:
    """(mean b - mean a, low, high): Welch's 95% interval; None under two values on a side."""
    xa, xb = _clean(a), _clean(b)
    if len(xa) < 2 or len(xb) < 2:
        return None
    ma, mb = sum(xa) / len(xa), sum(xb) / len(xb)
    va = sum((x - ma) ** 2 for x in xa) / (len(xa) - 1) / len(xa)
    vb = sum((x - mb) ** 2 for x in xb) / (len(xb) - 1) / len(xb)
    se = math.sqrt(va + vb)
    diff = mb - ma
    if se == 0:
        return diff, diff, diff
    df = (va + vb) ** 2 / (va**2 / (len(xa) - 1) + vb**2 / (len(xb) - 1))
    half = t95(df) * se
    return diff, diff - half, diff + half


def indistinguishable(a: Sequence[float | None], b: Sequence[float | None]) -> bool | None:
    """True when the difference's interval holds 0; None when there are too few repeats."""
    found = difference_interval(a, b)
    if found is None:
        return None
    _, low, high = found
    return low <= 0 <= high
