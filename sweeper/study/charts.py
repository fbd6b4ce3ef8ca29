"""The study page's charts, one pure function each (summary in, altair chart out, no I/O):

- :func:`chart_study_curves`: every configuration's curve on one chart, output tok/s against a
  latency statistic (p99 TTFT by default, log scale), with the 95% interval across repeats as
  error bars where there are repeats;
- :func:`chart_study_pareto`: every configuration x level as a point, output tok/s per GPU
  against p99 TTFT, the Pareto frontier drawn as a line through its points.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import altair as alt
import pandas as pd

from sweeper.report.charts import CHART_HEIGHT_PX, CHART_WIDTH_PX

CURVE_LABELS = {
    "x": "Output tokens/s",
    "y": "p99 TTFT (ms, log)",
    "config": "Configuration",
}
PARETO_LABELS = {
    "x": "p99 TTFT (ms, log)",
    "y": "Output tokens/s per GPU",
    "config": "Configuration",
    "front": "Pareto frontier",
}


def _level_name(point: dict[str, Any]) -> str:
    if point.get("concurrency") is not None:
        return f"C={point['concurrency']}"
    rate = point.get("request_rate")
    return "all at once" if rate == "inf" else f"{rate:g} req/s"


def _interval_of(summary: dict[str, Any], point: dict[str, Any], path: str) -> tuple[Any, Any]:
    for config in summary["configs"]:
        if config["flags"] != point["flags"]:
            continue
        for item in config.get("intervals", []):
            if (item.get("concurrency"), item.get("request_rate")) == (
                point.get("concurrency"),
                point.get("request_rate"),
            ):
                found: Any = item
                for part in path.split("."):
                    found = found.get(part) if isinstance(found, dict) else None
                if isinstance(found, dict):
                    return found.get("low"), found.get("high")
    return None, None


def study_frame(summary: dict[str, Any], y: str = "ttft_p99_ms") -> pd.DataFrame:
    """One row per point: configuration, level, throughput, the y statistic and its interval."""
    path = {"ttft_p99_ms": "ttft_ms.p99", "itl_p99_ms": "itl_ms.p99", "e2el_p99_ms": "e2el_ms.p99",
            "itl_p50_ms": "itl_ms.p50", "ttft_p50_ms": "ttft_ms.p50"}.get(y, y)  # fmt: skip
    rows = []
    for order, point in enumerate(summary["points"]):
        low, high = _interval_of(summary, point, path)
        rows.append({
            "config": point["flags"] or "(no flags)", "level": _level_name(point), "order": order,
            "x": point.get("output_throughput_tok_s"), "y": point.get(y),
            "per_gpu": point.get("output_throughput_per_gpu_tok_s"),
            "ttft_p99_ms": point.get("ttft_p99_ms"), "low": low, "high": high,
        })  # fmt: skip
    frame = pd.DataFrame(rows, columns=["config", "level", "order", "x", "y", "per_gpu",
                                        "ttft_p99_ms", "low", "high"])  # fmt: skip
    return frame


def chart_study_curves(
    summary: dict[str, Any], labels: Mapping[str, str] | None = None, *, y: str = "ttft_p99_ms"
) -> alt.LayerChart:
    """Each configuration's throughput (x) against a latency statistic (y, log), one line per
    configuration through its levels, error bars for the 95% interval across repeats."""
    lab = {**CURVE_LABELS, **(labels or {})}
    frame = study_frame(summary, y)
    frame = frame[(frame["y"] > 0) & frame["x"].notna()]
    colour = alt.Color("config:N", title=lab["config"])
    base = alt.Chart(frame)
    line = base.mark_line(point=True).encode(
        x=alt.X("x:Q", title=lab["x"]),
        y=alt.Y("y:Q", title=lab["y"], scale=alt.Scale(type="log")),
        color=colour,
        order="order:O",
        tooltip=[
            "config:N",
            "level:N",
            alt.Tooltip("x:Q", format=",.1f"),
            alt.Tooltip("y:Q", format=",.1f"),
        ],
    )
    bars = (
        alt.Chart(frame.dropna(subset=["low", "high"]))
        .transform_filter("datum.low > 0")
        .mark_errorbar()
        .encode(
            x="x:Q",
            y=alt.Y("low:Q", title=lab["y"], scale=alt.Scale(type="log")),
            y2="high:Q",
            color=colour,
        )
    )
    return alt.LayerChart(layer=[line, bars], width=CHART_WIDTH_PX, height=CHART_HEIGHT_PX)


def chart_study_pareto(
    summary: dict[str, Any], labels: Mapping[str, str] | None = None
) -> alt.LayerChart:
    """Every configuration x level: output tok/s per GPU (y) against p99 TTFT (x, log); the
    frontier (no point both faster to the first token and higher) as a line."""
    lab = {**PARETO_LABELS, **(labels or {})}
    frame = study_frame(summary)
    frame = frame[(frame["ttft_p99_ms"] > 0) & frame["per_gpu"].notna()]
    front_keys = {
        (p["flags"] or "(no flags)", _level_name(p)) for p in summary["pareto"][0]["points"]
    }
    front = frame[
        [(c, lv) in front_keys for c, lv in zip(frame["config"], frame["level"], strict=True)]
    ]
    x = alt.X("ttft_p99_ms:Q", title=lab["x"], scale=alt.Scale(type="log"))
    points = (
        alt.Chart(frame)
        .mark_point(filled=True, size=60)
        .encode(
            x=x,
            y=alt.Y("per_gpu:Q", title=lab["y"]),
            color=alt.Color("config:N", title=lab["config"]),
            tooltip=[
                "config:N",
                "level:N",
                alt.Tooltip("ttft_p99_ms:Q", format=",.1f"),
                alt.Tooltip("per_gpu:Q", format=",.1f"),
            ],
        )
    )
    line = (
        alt.Chart(front.assign(series=lab["front"]))
        .mark_line(strokeDash=[4, 3], color="#555")
        .encode(x=x, y="per_gpu:Q", order="ttft_p99_ms:Q", detail="series:N")
    )
    return alt.LayerChart(layer=[line, points], width=CHART_WIDTH_PX, height=CHART_HEIGHT_PX)
