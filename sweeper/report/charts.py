"""One pure function per figure: a pandas frame + already-translated labels -> an altair Chart.

No I/O and no translation happen here: :mod:`sweeper.report.pages` aggregates the numbers (the frames of
:mod:`sweeper.analysis.frames`), translates the words and passes them in. Each function returns a chart
whose ``to_dict()`` is a complete Vega-Lite v6 spec (``$schema`` included, data inline), so it can
be embedded in a page, validated against the schema, or rendered offline by vl-convert.

Label keys each function reads are listed in :data:`LABEL_KEYS` (marked for extraction into
the ``pages`` catalog, translated by the caller); a missing key falls back to the
English word, so a caller can pass only what it translated.

Charts: :func:`chart_throughput_latency`, :func:`chart_scaling`, :func:`chart_marginal_gain`,
:func:`chart_itl_split`, :func:`chart_e2el_breakdown`, :func:`chart_kv_occupancy`,
:func:`chart_request_timeline`; for rate sweeps :func:`chart_rate_follow` (and the rate as the x
axis of the others: the page adds ``level_label`` and ``rate_x``, :func:`is_rate_frame`) and
:func:`chart_rate_latency`; for
multi-turn sessions :func:`chart_ttft_by_turn`; for comparisons of runs :func:`chart_compare_latency` and
:func:`chart_compare_per_gpu`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ParamSpec, TypeVar

import altair as alt
import numpy as np
import pandas as pd
from altair.utils.schemapi import debug_mode

from sweeper.analysis.thresholds import DEFAULT_SLO_TABLE
from sweeper.findings.model import parse_slos
from sweeper.i18n import N_

CHART_WIDTH_PX = 560
CHART_HEIGHT_PX = 300
# A request timeline shows at most this many requests (the first ones sent at that level), so a
# page stays light; the caption says how many are shown.
TIMELINE_MAX_REQUESTS = 64
# Service levels drawn as bands on the trade-off chart (p99 TTFT, ms): DESIGN.md "SLO table".
# The TTFT bands drawn: the TTFT terms of the SLO table every report has (finding 9).
DEFAULT_TTFT_SLOS_MS = tuple(
    term.bound_ms
    for text in DEFAULT_SLO_TABLE
    for term in parse_slos(text)
    if term.metric == "ttft"
)
# Colours of the series (a colour-blind-safe palette: Okabe-Ito).
_BLUE, _ORANGE, _GREEN, _VERMILION, _PURPLE, _GREY = (
    "#0072B2",
    "#E69F00",
    "#009E73",
    "#D55E00",
    "#CC79A7",
    "#999999",
)

LABEL_KEYS: dict[str, dict[str, str]] = {
    "ttft_by_turn": {
        "x": N_("Turn of the conversation"),
        "y": N_("p50 TTFT (ms)"),
        "level": N_("Level"),
        "p90": N_("p90 TTFT (ms)"),
        "requests": N_("Requests"),
    },
    "throughput_latency": {
        "x": N_("Output throughput (tok/s)"),
        "y": N_("TTFT (ms, log scale)"),
        "p50": N_("p50 TTFT"),
        "p99": N_("p99 TTFT"),
        "series": N_("Percentile"),
        "slo": N_("SLO"),
        "concurrency": N_("Concurrency"),
        "level": N_("Level"),
    },
    "scaling": {
        "x": N_("Concurrency (log scale)"),
        "y": N_("Output throughput (tok/s, log scale)"),
        "measured": N_("Measured"),
        "ideal": N_("Ideal linear"),
        "series": N_("Series"),
        "efficiency": N_("Efficiency"),
    },
    "marginal_gain": {
        "x": N_("Concurrency step"),
        "y": N_("Added tok/s per added slot"),
        "reference": N_("Single stream"),
    },
    "rate_follow": {
        "x": N_("Offered rate (req/s, log scale)"),
        "y": N_("Requests per second (log scale)"),
        "offered": N_("Offered"),
        "sent": N_("Sent"),
        "completed": N_("Completed"),
        "series": N_("Series"),
        "level": N_("Level"),
    },
    "rate_latency": {
        "x": N_("Offered rate (req/s, log scale)"),
        "y": N_("TTFT from the schedule (ms, log scale)"),
        "p50": N_("p50 TTFT"),
        "p99": N_("p99 TTFT"),
        "series": N_("Percentile"),
        "level": N_("Level"),
    },
    "itl_split": {
        "x": N_("Concurrency"),
        "x_rate": N_("Offered rate (req/s, log scale)"),
        "level": N_("Level"),
        "y": N_("ITL (ms, log scale)"),
        "series": N_("Statistic"),
        "p50": N_("p50"),
        "p90": N_("p90"),
        "p99": N_("p99"),
        "mean": N_("mean"),
        "band": N_("p50-p99"),
    },
    "e2el_breakdown": {
        "x": N_("Concurrency"),
        "x_rate": N_("Offered rate"),
        "y": N_("E2EL at p50 (ms)"),
        "ttft": N_("TTFT (first token)"),
        "decode": N_("Decode"),
        "part": N_("Part"),
    },
    "kv_occupancy": {
        "x": N_("Concurrency"),
        "x_rate": N_("Offered rate"),
        "y": N_("KV pool occupancy"),
        "needed": N_("Needed (C x tokens per request)"),
        "needed_rate": N_("Needed (requests in flight x tokens per request)"),
        "observed": N_("Observed peak"),
        "ceiling": N_("Pool capacity"),
        "series": N_("Series"),
    },
    "request_timeline": {
        "x": N_("Seconds since the level started"),
        "y": N_("Request (in send order)"),
        "wait": N_("Waiting for the first token"),
        "decode": N_("Decode"),
        "queue": N_("Waiting in the client (scheduled to sent)"),
        "first_token": N_("First token"),
        "part": N_("Part"),
    },
    "compare_latency": {
        "x": N_("Output throughput (tok/s)"),
        "y": N_("p99 TTFT (ms, log scale)"),
        "run": N_("Run"),
        "concurrency": N_("Concurrency"),
    },
    "compare_per_gpu": {
        "x": N_("Tokens/s per user (p50 generation speed)"),
        "y": N_("Output throughput per GPU (tok/s)"),
        "run": N_("Run"),
        "concurrency": N_("Concurrency"),
    },
}


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _unchecked(draw: Callable[_P, _R]) -> Callable[_P, _R]:
    """``draw`` with altair's debug mode off: altair checks each object against the Vega-Lite
    schema as it is made, which cost a third of drawing a page's charts; the finished specs are
    checked against the schema by the tests (tests/report/test_charts.py)."""

    @functools.wraps(draw)
    def drawn(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with debug_mode(False):
            return draw(*args, **kwargs)

    return drawn


def _labels(chart: str, given: Mapping[str, str] | None) -> dict[str, str]:
    out = dict(LABEL_KEYS[chart])
    if given:
        out.update({k: v for k, v in given.items() if k in out})
    return out


def _base(data: pd.DataFrame) -> alt.Chart:
    return alt.Chart(data).properties(width=CHART_WIDTH_PX, height=CHART_HEIGHT_PX)


# The config every chart gets from :func:`_finish` (altair's default view included): a run page
# leaves it out of its specs, and the site's script (assets/sweeper-charts.js, SHARED_CONFIG)
# puts it back; a test keeps the two equal.
SHARED_CONFIG: dict[str, Any] = {
    "view": {"continuousWidth": 300, "continuousHeight": 300},
    "axis": {"labelFontSize": 11, "titleFontSize": 12},
    "legend": {"labelFontSize": 11, "orient": "bottom", "titleFontSize": 11},
}


def _finish(chart: Any) -> Any:
    return chart.configure_axis(labelFontSize=11, titleFontSize=12).configure_legend(
        orient="bottom", labelFontSize=11, titleFontSize=11
    )


def _need(frame: pd.DataFrame, columns: Sequence[str], chart: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(
            f"{chart}: the frame has no column {', '.join(map(repr, missing))}; pass "
            "sweeper.analysis.frames.level_frame(ts) (or a frame with the same columns)"
        )


def _positive(values: pd.Series) -> pd.Series:
    """Log scales cannot show zero or negative values: those become missing (not drawn)."""
    return values.where(values > 0)


def _concurrency_scale() -> alt.Scale:
    return alt.Scale(type="log", base=2, nice=False)


# A rate run's levels: the page adds ``level_label`` (``4 req/s``, ``all at once``) and
# ``rate_x`` (the offered rate; all at once drawn at the right end: twice the highest finite rate).
RATE_LABEL = "level_label"
RATE_X = "rate_x"


def is_rate_frame(frame: pd.DataFrame) -> bool:
    """Whether a frame's levels are offered rates (it carries the page's ``level_label``)."""
    return RATE_LABEL in frame.columns and RATE_X in frame.columns


def rate_positions(rates: Sequence[float]) -> list[float]:
    """Where each offered rate is drawn on a log axis: itself, all at once (inf) at twice the
    highest finite rate (or 1 when there is none)."""
    finite_rates = [r for r in rates if np.isfinite(r) and r > 0]
    right = 2.0 * max(finite_rates) if finite_rates else 1.0
    return [float(r) if np.isfinite(r) and r > 0 else right for r in rates]


def _rate_x(frame: pd.DataFrame, title: str) -> alt.X:
    """The offered rate on a log axis, each level's tick labelled with its name."""
    ticks = frame[[RATE_X, RATE_LABEL]].drop_duplicates(subset=[RATE_X])
    expr = " : ".join(
        f"datum.value == {float(x)!r} ? {_js_string(str(label))}"
        for x, label in zip(ticks[RATE_X], ticks[RATE_LABEL], strict=True)
    )
    return alt.X(
        f"{RATE_X}:Q",
        title=title,
        scale=alt.Scale(type="log", nice=False),
        axis=alt.Axis(values=ticks[RATE_X].tolist(), labelExpr=f"{expr} : datum.label"),
    )


def _js_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


@_unchecked
def chart_throughput_latency(
    levels: pd.DataFrame,
    labels: Mapping[str, str] | None = None,
    *,
    slos_ms: Sequence[float] = DEFAULT_TTFT_SLOS_MS,
) -> alt.LayerChart:
    """Output throughput (x) against p50 and p99 TTFT (y, log), a point per level labelled C=n,
    with the service levels as horizontal bands."""
    lab = _labels("throughput_latency", labels)
    _need(
        levels,
        ["concurrency", "output_throughput_tok_s", "ttft_p50_ms", "ttft_p99_ms"],
        "throughput_latency",
    )
    rate = is_rate_frame(levels)
    long = levels.melt(
        id_vars=["concurrency", "output_throughput_tok_s", *([RATE_LABEL] if rate else [])],
        value_vars=["ttft_p50_ms", "ttft_p99_ms"],
        var_name="stat",
        value_name="ttft_ms",
    )
    long["series"] = long["stat"].map({"ttft_p50_ms": lab["p50"], "ttft_p99_ms": lab["p99"]})
    long["ttft_ms"] = _positive(long["ttft_ms"])
    if rate:
        long["point_label"] = long[RATE_LABEL]
    else:
        long["point_label"] = "C=" + long["concurrency"].astype(str)
    long = long.dropna(subset=["ttft_ms", "output_throughput_tok_s"])
    colour = alt.Color(
        "series:N",
        title=lab["series"],
        scale=alt.Scale(domain=[lab["p50"], lab["p99"]], range=[_BLUE, _VERMILION]),
    )
    x = alt.X("output_throughput_tok_s:Q", title=lab["x"], scale=alt.Scale(zero=True))
    y = alt.Y("ttft_ms:Q", title=lab["y"], scale=alt.Scale(type="log"))
    base = _base(long)
    level_tip = (
        alt.Tooltip("point_label:N", title=lab["level"])
        if rate
        else alt.Tooltip("concurrency:Q", title=lab["concurrency"])
    )
    tooltip = [
        level_tip,
        alt.Tooltip("series:N", title=lab["series"]),
        alt.Tooltip("output_throughput_tok_s:Q", title=lab["x"], format=",.1f"),
        alt.Tooltip("ttft_ms:Q", title=lab["y"], format=",.1f"),
    ]
    lines = base.mark_line(point=alt.OverlayMarkDef(size=50, filled=True)).encode(
        x=x, y=y, color=colour, order=alt.Order("concurrency:Q"), tooltip=tooltip
    )
    text = base.mark_text(dx=6, dy=-8, align="left", fontSize=10, color="#555").encode(
        x=x, y=y, text=alt.Text("point_label:N")
    )
    layers: list[Any] = []
    bands = [s for s in slos_ms if s > 0]
    if bands:
        slo = pd.DataFrame({"slo_ms": bands})
        slo["slo_label"] = [
            f"{lab['slo']} {v / 1000:g} s" if v >= 1000 else f"{lab['slo']} {v:g} ms" for v in bands
        ]
        rules = (
            alt.Chart(slo)
            .mark_rule(color=_GREY, strokeWidth=6, opacity=0.25)
            .encode(y=alt.Y("slo_ms:Q"))
        )
        rule_text = (
            alt.Chart(slo)
            .mark_text(align="right", baseline="bottom", dx=-2, dy=-4, color="#777", fontSize=10)
            .encode(y=alt.Y("slo_ms:Q"), x=alt.XValue(CHART_WIDTH_PX), text=alt.Text("slo_label:N"))
        )
        layers += [rules, rule_text]
    return _finish(alt.layer(*layers, lines, text))


@_unchecked
def chart_scaling(levels: pd.DataFrame, labels: Mapping[str, str] | None = None) -> alt.LayerChart:
    """Measured throughput against ideal linear scaling (C x single-stream), log-log; each measured
    point labelled with its scaling efficiency."""
    lab = _labels("scaling", labels)
    _need(levels, ["concurrency", "output_throughput_tok_s"], "scaling")
    frame = levels[["concurrency", "output_throughput_tok_s"]].dropna().sort_values("concurrency")
    frame = frame[frame["output_throughput_tok_s"] > 0]
    if frame.empty:
        raise ValueError("scaling: no level has a positive output throughput to draw")
    first = frame.iloc[0]
    per_stream = float(first["output_throughput_tok_s"]) / float(first["concurrency"])
    frame = frame.assign(
        ideal_tok_s=frame["concurrency"] * per_stream,
    )
    frame["efficiency"] = frame["output_throughput_tok_s"] / frame["ideal_tok_s"]
    long = frame.melt(
        id_vars=["concurrency", "efficiency"],
        value_vars=["output_throughput_tok_s", "ideal_tok_s"],
        var_name="kind",
        value_name="tok_s",
    )
    long["series"] = long["kind"].map(
        {"output_throughput_tok_s": lab["measured"], "ideal_tok_s": lab["ideal"]}
    )
    colour = alt.Color(
        "series:N",
        title=lab["series"],
        scale=alt.Scale(domain=[lab["measured"], lab["ideal"]], range=[_BLUE, _GREY]),
    )
    dash = alt.StrokeDash(
        "series:N",
        title=lab["series"],
        scale=alt.Scale(domain=[lab["measured"], lab["ideal"]], range=[[1, 0], [5, 4]]),
    )
    x = alt.X(
        "concurrency:Q",
        title=lab["x"],
        scale=_concurrency_scale(),
        axis=alt.Axis(values=frame["concurrency"].tolist()),
    )
    y = alt.Y("tok_s:Q", title=lab["y"], scale=alt.Scale(type="log"))
    lines = (
        _base(long)
        .mark_line(point=True)
        .encode(
            x=x,
            y=y,
            color=colour,
            strokeDash=dash,
            tooltip=[
                alt.Tooltip("concurrency:Q"),
                alt.Tooltip("series:N", title=lab["series"]),
                alt.Tooltip("tok_s:Q", format=",.1f"),
                alt.Tooltip("efficiency:Q", title=lab["efficiency"], format=".1%"),
            ],
        )
    )
    measured = long[long["kind"] == "output_throughput_tok_s"]
    text = (
        alt.Chart(measured)
        .mark_text(dy=14, fontSize=10, color=_BLUE)
        .encode(x=x, y=y, text=alt.Text("efficiency:Q", format=".0%"))
    )
    return _finish(alt.layer(lines, text))


@_unchecked
def chart_marginal_gain(
    levels: pd.DataFrame, labels: Mapping[str, str] | None = None
) -> alt.LayerChart:
    """Added throughput per added concurrency slot between consecutive levels (bars; the first bar
    goes from nothing to the first level), with the single-stream rate as a dashed reference."""
    lab = _labels("marginal_gain", labels)
    _need(levels, ["concurrency", "output_throughput_tok_s"], "marginal_gain")
    frame = levels[["concurrency", "output_throughput_tok_s"]].dropna().sort_values("concurrency")
    if frame.empty:
        raise ValueError("marginal_gain: no level has a throughput to draw")
    conc = frame["concurrency"].to_numpy(dtype=float)
    tput = frame["output_throughput_tok_s"].to_numpy(dtype=float)
    prev_c = np.concatenate([[0.0], conc[:-1]])
    prev_t = np.concatenate([[0.0], tput[:-1]])
    bars = pd.DataFrame(
        {
            "step": [f"{int(a)}→{int(b)}" for a, b in zip(prev_c, conc, strict=True)],
            "order": np.arange(len(conc)),
            "gain_tok_s_per_slot": (tput - prev_t) / (conc - prev_c),
        }
    )
    reference = float(tput[0] / conc[0])
    bar = (
        _base(bars)
        .mark_bar(color=_BLUE)
        .encode(
            x=alt.X(
                "step:N",
                title=lab["x"],
                sort=alt.EncodingSortField("order"),
                axis=alt.Axis(labelAngle=0),
            ),
            y=alt.Y("gain_tok_s_per_slot:Q", title=lab["y"]),
            tooltip=[
                alt.Tooltip("step:N", title=lab["x"]),
                alt.Tooltip("gain_tok_s_per_slot:Q", title=lab["y"], format=",.1f"),
            ],
        )
    )
    ref = pd.DataFrame(
        {"reference_tok_s": [reference], "label": [f"{lab['reference']} {reference:,.1f} tok/s"]}
    )
    rule = (
        alt.Chart(ref)
        .mark_rule(color=_VERMILION, strokeDash=[5, 4])
        .encode(y=alt.Y("reference_tok_s:Q"))
    )
    rule_text = (
        alt.Chart(ref)
        .mark_text(align="right", baseline="bottom", dy=-3, color=_VERMILION, fontSize=10)
        .encode(
            y=alt.Y("reference_tok_s:Q"), x=alt.XValue(CHART_WIDTH_PX), text=alt.Text("label:N")
        )
    )
    return _finish(alt.layer(bar, rule, rule_text))


@_unchecked
def chart_itl_split(
    levels: pd.DataFrame, labels: Mapping[str, str] | None = None
) -> alt.LayerChart:
    """ITL p50 / p90 / p99 / mean per level on a log axis, the p50-p99 span shaded."""
    lab = _labels("itl_split", labels)
    stats = ["itl_p50_ms", "itl_p90_ms", "itl_p99_ms", "itl_mean_ms"]
    _need(levels, ["concurrency", *stats], "itl_split")
    rate = is_rate_frame(levels)
    keep = ["concurrency", *([RATE_LABEL, RATE_X] if rate else []), *stats]
    frame = levels[keep].sort_values("concurrency").copy()
    for column in stats:
        frame[column] = _positive(frame[column])
    frame = frame.dropna(subset=["itl_p50_ms"])
    names = {
        "itl_p50_ms": lab["p50"],
        "itl_p90_ms": lab["p90"],
        "itl_p99_ms": lab["p99"],
        "itl_mean_ms": lab["mean"],
    }
    ids = ["concurrency", *([RATE_LABEL, RATE_X] if rate else [])]
    long = frame.melt(id_vars=ids, value_vars=stats, var_name="stat", value_name="itl_ms").dropna()
    long["series"] = long["stat"].map(names)
    domain = [names[s] for s in stats]
    level_tip = (
        alt.Tooltip(f"{RATE_LABEL}:N", title=lab["level"]) if rate else alt.Tooltip("concurrency:Q")
    )
    x = (
        _rate_x(frame, lab["x_rate"])
        if rate
        else alt.X(
            "concurrency:Q",
            title=lab["x"],
            scale=_concurrency_scale(),
            axis=alt.Axis(values=frame["concurrency"].tolist()),
        )
    )
    band = (
        _base(frame)
        .mark_area(opacity=0.15, color=_VERMILION)
        .encode(
            x=x,
            y=alt.Y("itl_p50_ms:Q", title=lab["y"], scale=alt.Scale(type="log")),
            y2=alt.Y2("itl_p99_ms:Q"),
            tooltip=[
                level_tip,
                alt.Tooltip("itl_p50_ms:Q", format=",.1f"),
                alt.Tooltip("itl_p99_ms:Q", format=",.1f"),
            ],
        )
    )
    lines = (
        alt.Chart(long)
        .mark_line(point=True)
        .encode(
            x=x,
            y=alt.Y("itl_ms:Q", title=lab["y"], scale=alt.Scale(type="log")),
            color=alt.Color(
                "series:N",
                title=lab["series"],
                scale=alt.Scale(domain=domain, range=[_BLUE, _ORANGE, _VERMILION, _GREEN]),
            ),
            strokeDash=alt.StrokeDash(
                "series:N",
                title=lab["series"],
                scale=alt.Scale(domain=domain, range=[[1, 0], [1, 0], [1, 0], [4, 3]]),
            ),
            tooltip=[
                level_tip,
                alt.Tooltip("series:N", title=lab["series"]),
                alt.Tooltip("itl_ms:Q", format=",.2f"),
            ],
        )
    )
    return _finish(alt.layer(band, lines))


@_unchecked
def chart_e2el_breakdown(
    levels: pd.DataFrame, labels: Mapping[str, str] | None = None
) -> alt.Chart:
    """p50 end-to-end latency per level, stacked as TTFT (waiting for the first token) + decode."""
    lab = _labels("e2el_breakdown", labels)
    _need(levels, ["concurrency", "ttft_p50_ms", "e2el_p50_ms"], "e2el_breakdown")
    rate = is_rate_frame(levels)
    extra = [RATE_LABEL] if rate else []
    frame = (
        levels[["concurrency", *extra, "ttft_p50_ms", "e2el_p50_ms"]]
        .dropna()
        .sort_values("concurrency")
    )
    frame = frame.assign(decode_ms=(frame["e2el_p50_ms"] - frame["ttft_p50_ms"]).clip(lower=0))
    long = frame.melt(
        id_vars=["concurrency", *extra],
        value_vars=["ttft_p50_ms", "decode_ms"],
        var_name="kind",
        value_name="ms",
    )
    long["part"] = long["kind"].map({"ttft_p50_ms": lab["ttft"], "decode_ms": lab["decode"]})
    long["stack_order"] = long["kind"].map({"ttft_p50_ms": 0, "decode_ms": 1})
    x = (
        alt.X(
            f"{RATE_LABEL}:O",
            title=lab["x_rate"],
            sort=frame[RATE_LABEL].tolist(),
            axis=alt.Axis(labelAngle=0),
        )
        if rate
        else alt.X("concurrency:O", title=lab["x"], axis=alt.Axis(labelAngle=0))
    )
    chart = (
        _base(long)
        .mark_bar()
        .encode(
            x=x,
            y=alt.Y("ms:Q", title=lab["y"], stack="zero"),
            color=alt.Color(
                "part:N",
                title=lab["part"],
                scale=alt.Scale(domain=[lab["ttft"], lab["decode"]], range=[_ORANGE, _BLUE]),
            ),
            order=alt.Order("stack_order:Q"),
            tooltip=[
                alt.Tooltip(f"{RATE_LABEL}:O") if rate else alt.Tooltip("concurrency:O"),
                alt.Tooltip("part:N", title=lab["part"]),
                alt.Tooltip("ms:Q", format=",.1f"),
            ],
        )
    )
    return _finish(chart)


@_unchecked
def chart_kv_occupancy(
    levels: pd.DataFrame,
    labels: Mapping[str, str] | None = None,
    *,
    capacity_tokens: float,
    tokens_per_request: float,
    observed: pd.DataFrame | None = None,
) -> alt.LayerChart:
    """The KV pool each level needs (C x tokens per request, as a share of the pool's capacity)
    as bars, the pool's capacity as a 100 % rule, and the observed peak usage per level as points
    when the server's metrics were scraped (``observed``: columns concurrency, kv_usage_max as a
    fraction)."""
    lab = _labels("kv_occupancy", labels)
    if not capacity_tokens or capacity_tokens <= 0:
        raise ValueError(f"kv_occupancy: capacity_tokens must be positive, got {capacity_tokens!r}")
    _need(levels, ["concurrency"], "kv_occupancy")
    rate = is_rate_frame(levels)
    if rate:
        # A rate level's requests in flight are measured (the time-weighted mean), not its key.
        _need(levels, ["inflight_mean"], "kv_occupancy")
        frame = levels[["concurrency", RATE_LABEL, "inflight_mean"]].sort_values("concurrency")
        frame = frame.dropna(subset=["inflight_mean"]).copy()
        frame["needed_tokens"] = frame["inflight_mean"] * tokens_per_request
        x = alt.X(
            f"{RATE_LABEL}:O",
            title=lab["x_rate"],
            sort=frame[RATE_LABEL].tolist(),
            axis=alt.Axis(labelAngle=0),
        )
        level_tip = alt.Tooltip(f"{RATE_LABEL}:O")
    else:
        frame = levels[["concurrency"]].sort_values("concurrency").copy()
        frame["needed_tokens"] = frame["concurrency"] * tokens_per_request
        x = alt.X("concurrency:O", title=lab["x"], axis=alt.Axis(labelAngle=0))
        level_tip = alt.Tooltip("concurrency:O")
    frame["occupancy"] = frame["needed_tokens"] / capacity_tokens
    y = alt.Y("occupancy:Q", title=lab["y"], axis=alt.Axis(format="%"))
    needed = lab["needed_rate"] if rate else lab["needed"]
    bars = (
        _base(frame)
        .mark_bar(color=_BLUE, opacity=0.8)
        .encode(
            x=x,
            y=y,
            tooltip=[
                level_tip,
                alt.Tooltip("needed_tokens:Q", title=needed, format=",.0f"),
                alt.Tooltip("occupancy:Q", title=lab["y"], format=".1%"),
            ],
        )
    )
    ceiling = pd.DataFrame(
        {"occupancy": [1.0], "label": [f"{lab['ceiling']} {capacity_tokens:,.0f} tok"]}
    )
    rule = (
        alt.Chart(ceiling)
        .mark_rule(color=_VERMILION, strokeDash=[5, 4], strokeWidth=2)
        .encode(y=alt.Y("occupancy:Q"))
    )
    rule_text = (
        alt.Chart(ceiling)
        .mark_text(align="left", baseline="bottom", dx=4, dy=-3, color=_VERMILION, fontSize=10)
        .encode(y=alt.Y("occupancy:Q"), x=alt.XValue(0), text=alt.Text("label:N"))
    )
    layers: list[Any] = [bars, rule, rule_text]
    if observed is not None and not observed.empty and "kv_usage_max" in observed.columns:
        obs = (
            observed[["concurrency", "kv_usage_max"]]
            .dropna()
            .rename(columns={"kv_usage_max": "occupancy"})
        )
        obs = obs[obs["concurrency"].isin(frame["concurrency"])]
        if rate:
            names = dict(zip(frame["concurrency"], frame[RATE_LABEL], strict=True))
            obs = obs.assign(**{RATE_LABEL: obs["concurrency"].map(names)})
        if not obs.empty:
            obs = obs.assign(series=lab["observed"])
            layers.append(
                alt.Chart(obs)
                .mark_point(shape="diamond", filled=True, size=90, color=_ORANGE)
                .encode(
                    x=x,
                    y=y,
                    tooltip=[
                        level_tip,
                        alt.Tooltip("occupancy:Q", title=lab["observed"], format=".1%"),
                    ],
                )
            )
    return _finish(alt.layer(*layers))


@_unchecked
def chart_rate_follow(
    rates: pd.DataFrame, labels: Mapping[str, str] | None = None
) -> alt.LayerChart:
    """A rate sweep: the requests per second the client sent and the server completed against
    the offered rate (log-log), the offered rate itself as the dashed diagonal; where the
    completed line leaves the diagonal, the server has saturated. ``rates``: columns
    concurrency, level_label, rate_x, offered_rps, sent_rps, completed_rps (NaN: unknown)."""
    lab = _labels("rate_follow", labels)
    _need(
        rates,
        ["concurrency", RATE_LABEL, RATE_X, "offered_rps", "sent_rps", "completed_rps"],
        "rate_follow",
    )
    frame = rates.sort_values("concurrency")
    names = {
        "offered_rps": lab["offered"],
        "sent_rps": lab["sent"],
        "completed_rps": lab["completed"],
    }
    long = frame.melt(
        id_vars=["concurrency", RATE_LABEL, RATE_X],
        value_vars=list(names),
        var_name="kind",
        value_name="rps",
    )
    long["rps"] = _positive(pd.to_numeric(long["rps"], errors="coerce"))
    long = long.dropna(subset=["rps"])
    if long.empty:
        raise ValueError("rate_follow: no level has a rate to draw")
    long["series"] = long["kind"].map(names)
    domain = list(names.values())
    # The offered diagonal is drawn last, over the lines that follow it.
    long["draw_order"] = long["kind"].map({"sent_rps": 0, "completed_rps": 1, "offered_rps": 2})
    long = long.sort_values(["draw_order", "concurrency"])
    chart = (
        _base(long)
        .mark_line(point=True)
        .encode(
            x=_rate_x(frame, lab["x"]),
            y=alt.Y("rps:Q", title=lab["y"], scale=alt.Scale(type="log")),
            detail=alt.Detail("draw_order:O"),
            color=alt.Color(
                "series:N",
                title=lab["series"],
                scale=alt.Scale(domain=domain, range=[_GREY, _ORANGE, _BLUE]),
            ),
            strokeDash=alt.StrokeDash(
                "series:N",
                title=lab["series"],
                scale=alt.Scale(domain=domain, range=[[5, 4], [1, 0], [1, 0]]),
            ),
            order=alt.Order("concurrency:Q"),
            tooltip=[
                alt.Tooltip(f"{RATE_LABEL}:N", title=lab["level"]),
                alt.Tooltip("series:N", title=lab["series"]),
                alt.Tooltip("rps:Q", format=",.2f"),
            ],
        )
    )
    return _finish(chart)


@_unchecked
def chart_rate_latency(levels: pd.DataFrame, labels: Mapping[str, str] | None = None) -> alt.Chart:
    """A rate sweep: p50 and p99 TTFT counted from the schedule (what a user waits: the client's
    queue included) against the offered rate, log-log: flat while the server keeps up, rising
    steeply past its saturation rate. ``levels``: the level frame with the page's
    ``level_label`` and ``rate_x``; TTFT from the send where the schedule is unknown."""
    lab = _labels("rate_latency", labels)
    _need(levels, ["concurrency", RATE_LABEL, RATE_X, "ttft_p50_ms", "ttft_p99_ms"], "rate_latency")
    frame = levels.sort_values("concurrency").copy()
    for stat in ("p50", "p99"):
        sched = f"ttft_sched_{stat}_ms"
        own = pd.to_numeric(frame[f"ttft_{stat}_ms"], errors="coerce")
        if sched in frame.columns:
            frame[stat] = pd.to_numeric(frame[sched], errors="coerce").fillna(own)
        else:
            frame[stat] = own
    long = frame.melt(
        id_vars=["concurrency", RATE_LABEL, RATE_X],
        value_vars=["p50", "p99"],
        var_name="stat",
        value_name="ttft_ms",
    )
    long["ttft_ms"] = _positive(long["ttft_ms"])
    long = long.dropna(subset=["ttft_ms"])
    if long.empty:
        raise ValueError("rate_latency: no level has a TTFT to draw")
    long["series"] = long["stat"].map({"p50": lab["p50"], "p99": lab["p99"]})
    chart = (
        _base(long)
        .mark_line(point=True)
        .encode(
            x=_rate_x(frame, lab["x"]),
            y=alt.Y("ttft_ms:Q", title=lab["y"], scale=alt.Scale(type="log")),
            color=alt.Color(
                "series:N",
                title=lab["series"],
                scale=alt.Scale(domain=[lab["p50"], lab["p99"]], range=[_BLUE, _VERMILION]),
            ),
            order=alt.Order("concurrency:Q"),
            tooltip=[
                alt.Tooltip(f"{RATE_LABEL}:N", title=lab["level"]),
                alt.Tooltip("series:N", title=lab["series"]),
                alt.Tooltip("ttft_ms:Q", title=lab["y"], format=",.1f"),
            ],
        )
    )
    return _finish(chart)


@_unchecked
def chart_ttft_by_turn(turns: pd.DataFrame, labels: Mapping[str, str] | None = None) -> alt.Chart:
    """Multi-turn sessions: p50 TTFT of each turn of a conversation, one line per level
    (:func:`sweeper.analysis.frames.turn_frame` plus a ``level_label`` column): later turns
    resend the history, so a prefix cache that keeps it shows as a later turn's lower TTFT."""
    lab = _labels("ttft_by_turn", labels)
    _need(turns, ["concurrency", "turn", "ttft_p50_ms", RATE_LABEL], "ttft_by_turn")
    frame = turns.dropna(subset=["ttft_p50_ms"]).sort_values(["concurrency", "turn"])
    if frame.empty:
        raise ValueError("ttft_by_turn: no turn has a TTFT to draw")
    order = list(dict.fromkeys(frame[RATE_LABEL]))
    palette = [_BLUE, _ORANGE, _GREEN, _VERMILION, _PURPLE, _GREY]
    tooltip = [
        alt.Tooltip(f"{RATE_LABEL}:N", title=lab["level"]),
        alt.Tooltip("turn:O", title=lab["x"]),
        alt.Tooltip("ttft_p50_ms:Q", title=lab["y"], format=",.1f"),
    ]
    if "ttft_p90_ms" in frame.columns:
        tooltip.append(alt.Tooltip("ttft_p90_ms:Q", title=lab["p90"], format=",.1f"))
    if "requests" in frame.columns:
        tooltip.append(alt.Tooltip("requests:Q", title=lab["requests"]))
    chart = (
        _base(frame)
        .mark_line(point=True)
        .encode(
            x=alt.X("turn:O", title=lab["x"], axis=alt.Axis(labelAngle=0)),
            y=alt.Y("ttft_p50_ms:Q", title=lab["y"], scale=alt.Scale(zero=True)),
            color=alt.Color(
                f"{RATE_LABEL}:N",
                title=lab["level"],
                sort=order,
                scale=alt.Scale(domain=order, range=palette[: len(order)] or [_BLUE]),
            ),
            tooltip=tooltip,
        )
    )
    return _finish(chart)


def _timeline_parts(level: pd.DataFrame, lab: Mapping[str, str]) -> tuple[pd.DataFrame, Any]:
    """Each request's parts as bars (from, to, part): waiting for the first token, decoding, and
    in an open loop first the wait in the client's queue (scheduled to sent) where there was one;
    and each request's first-token time."""
    scheduled = (
        pd.to_numeric(level["scheduled_s"], errors="coerce")
        if "scheduled_s" in level.columns
        else None
    )
    queued = scheduled is not None and bool((level["send_s"] - scheduled > 1e-6).any())
    origin = (
        float(scheduled.min()) if queued and scheduled is not None else float(level["send_s"].min())
    )
    start = level["send_s"] - origin
    first = start + level["ttft_ms"] / 1000.0
    end = start + level["e2el_ms"] / 1000.0
    order = np.arange(1, len(level) + 1)
    spans = [(start, first, lab["wait"], 0), (first, end, lab["decode"], 1)]
    if queued and scheduled is not None:
        spans.insert(0, (scheduled - origin, start, lab["queue"], -1))
    parts = pd.concat(
        [
            pd.DataFrame(
                {
                    "request": order,
                    "request_id": level["request_id"].to_numpy(),
                    "from_s": a.to_numpy(),
                    "to_s": b.to_numpy(),
                    "part": part,
                    "stack": stack,
                }
            )
            for a, b, part, stack in spans
        ],
        ignore_index=True,
    )
    return parts, first.to_numpy()


@_unchecked
def chart_request_timeline(
    requests: pd.DataFrame,
    concurrency: int,
    labels: Mapping[str, str] | None = None,
    *,
    max_requests: int = TIMELINE_MAX_REQUESTS,
) -> alt.LayerChart:
    """Each request of one level as a bar from its send time: waiting for the first token, then
    decoding; a tick marks the first token. In an open loop where requests waited in the client
    (sent after their scheduled time), each bar starts at its scheduled time with that wait.
    ``requests`` is :func:`sweeper.analysis.frames.request_frame`."""
    lab = _labels("request_timeline", labels)
    _need(
        requests,
        ["concurrency", "request_id", "send_s", "ttft_ms", "e2el_ms", "status"],
        "request_timeline",
    )
    level = requests[(requests["concurrency"] == concurrency) & (requests["status"] == "ok")]
    level = level.dropna(subset=["ttft_ms", "e2el_ms"]).sort_values("send_s").head(max_requests)
    if level.empty:
        raise ValueError(f"request_timeline: no successful request at concurrency {concurrency}")
    parts, first = _timeline_parts(level, lab)
    order = np.arange(1, len(level) + 1)
    domain = [lab["wait"], lab["decode"]]
    colours = [_ORANGE, _BLUE]
    if lab["queue"] in set(parts["part"]):
        domain, colours = [lab["queue"], *domain], [_GREY, *colours]
    height = max(CHART_HEIGHT_PX, min(6 * len(level), 600))
    y = alt.Y("request:O", title=lab["y"], axis=alt.Axis(labels=False, ticks=False))
    bars = (
        alt.Chart(parts)
        .mark_bar(height={"band": 0.8})
        .encode(
            x=alt.X("from_s:Q", title=lab["x"]),
            x2=alt.X2("to_s:Q"),
            y=y,
            color=alt.Color(
                "part:N",
                title=lab["part"],
                scale=alt.Scale(domain=domain, range=colours),
            ),
            tooltip=[
                alt.Tooltip("request_id:N"),
                alt.Tooltip("part:N", title=lab["part"]),
                alt.Tooltip("from_s:Q", format=",.3f"),
                alt.Tooltip("to_s:Q", format=",.3f"),
            ],
        )
        .properties(width=CHART_WIDTH_PX, height=height)
    )
    ticks = (
        alt.Chart(pd.DataFrame({"request": order, "first_token_s": first}))
        .mark_tick(color="#222", thickness=1.5)
        .encode(
            x=alt.X("first_token_s:Q"),
            y=y,
            tooltip=[alt.Tooltip("first_token_s:Q", title=lab["first_token"], format=",.3f")],
        )
    )
    return _finish(alt.layer(bars, ticks))


def _compare_frame(levels_by_run: pd.DataFrame, columns: Sequence[str], chart: str) -> pd.DataFrame:
    _need(levels_by_run, ["run", "concurrency", *columns], chart)
    # A rate sweep among the runs: its levels are named (``level_label``), not numbered.
    named = [RATE_LABEL] if RATE_LABEL in levels_by_run.columns else []
    frame = (
        levels_by_run[["run", "concurrency", *named, *columns]]
        .dropna()
        .sort_values(["run", "concurrency"])
    )
    if frame.empty:
        raise ValueError(f"{chart}: no run has the numbers to draw")
    return frame


def _compare_curves(
    frame: pd.DataFrame, x: str, y: str, lab: Mapping[str, str], *, log_y: bool
) -> alt.Chart:
    """One line per run (``run`` column) through its levels in concurrency order."""
    y_scale = alt.Scale(type="log") if log_y else alt.Undefined
    chart = (
        _base(frame)
        .mark_line(point=True)
        .encode(
            x=alt.X(f"{x}:Q", title=lab["x"]),
            y=alt.Y(f"{y}:Q", title=lab["y"], scale=y_scale),
            color=alt.Color("run:N", title=lab["run"]),
            order=alt.Order("concurrency:Q"),
            tooltip=[
                alt.Tooltip("run:N", title=lab["run"]),
                alt.Tooltip(f"{RATE_LABEL}:N", title=lab["concurrency"])
                if RATE_LABEL in frame.columns
                else alt.Tooltip("concurrency:Q", title=lab["concurrency"]),
                alt.Tooltip(f"{x}:Q", format=",.1f"),
                alt.Tooltip(f"{y}:Q", format=",.1f"),
            ],
        )
    )
    return _finish(chart)


@_unchecked
def chart_compare_latency(
    levels_by_run: pd.DataFrame, labels: Mapping[str, str] | None = None
) -> alt.Chart:
    """Several runs' throughput against p99 TTFT, one curve per run (``run`` column)."""
    lab = _labels("compare_latency", labels)
    frame = _compare_frame(
        levels_by_run, ["output_throughput_tok_s", "ttft_p99_ms"], "compare_latency"
    )
    frame = frame[frame["ttft_p99_ms"] > 0]
    return _compare_curves(frame, "output_throughput_tok_s", "ttft_p99_ms", lab, log_y=True)


@_unchecked
def chart_compare_per_gpu(
    levels_by_run: pd.DataFrame, labels: Mapping[str, str] | None = None
) -> alt.Chart:
    """Throughput per GPU (y) against what each user sees, tokens/s per request (x): the trade-off
    curve of each run; up and to the right is better."""
    lab = _labels("compare_per_gpu", labels)
    frame = _compare_frame(
        levels_by_run, ["gen_p50_tok_s", "output_throughput_per_gpu_tok_s"], "compare_per_gpu"
    )
    return _compare_curves(
        frame, "gen_p50_tok_s", "output_throughput_per_gpu_tok_s", lab, log_y=False
    )


RUN_CHARTS = (
    "throughput_latency",
    "scaling",
    "rate_follow",
    "rate_latency",
    "marginal_gain",
    "itl_split",
    "e2el_breakdown",
    "kv_occupancy",
    "request_timeline",
    "ttft_by_turn",
)
COMPARE_CHARTS = ("compare_latency", "compare_per_gpu")
