"""Every chart is a valid Vega-Lite v6 spec with the encodings it promises, and draws offline."""

from __future__ import annotations

import json
from pathlib import Path

import altair as alt
import jsonschema
import pandas as pd
import pytest
import vl_convert

from sweeper.analysis.frames import level_frame, request_frame
from sweeper.report import charts
from sweeper.store import load_trace_set
from tests.report.site_helpers import RUN_A, RUN_B

SCHEMA = json.loads(
    (Path(alt.__file__).parent / "vegalite" / "v6" / "schema" / "vega-lite-schema.json").read_text()
)


@pytest.fixture(scope="module")
def frames(site_traces: Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    ts = load_trace_set(site_traces / RUN_A)
    other = load_trace_set(site_traces / RUN_B)
    levels = level_frame(ts)
    both = pd.concat(
        [levels.assign(run=RUN_A), level_frame(other).assign(run=RUN_B)], ignore_index=True
    )
    return levels, request_frame(ts), both


def _build(name: str, frames: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]) -> alt.TopLevelMixin:
    levels, requests, both = frames
    if name == "kv_occupancy":
        observed = pd.DataFrame({"concurrency": [1, 8], "kv_usage_max": [0.06, 0.41]})
        return charts.chart_kv_occupancy(
            levels, capacity_tokens=20_000, tokens_per_request=1088, observed=observed
        )
    if name == "request_timeline":
        return charts.chart_request_timeline(requests, 4)
    if name == "rate_follow":
        return charts.chart_rate_follow(RATE_FRAME)
    if name == "rate_latency":
        return charts.chart_rate_latency(
            RATE_FRAME.assign(
                ttft_p50_ms=[50.0, 55.0, 400.0, 900.0],
                ttft_p99_ms=[60.0, 80.0, 900.0, 2000.0],
                ttft_sched_p50_ms=[50.0, 55.0, float("nan"), 950.0],
            )
        )
    if name == "ttft_by_turn":
        return charts.chart_ttft_by_turn(TURN_FRAME)
    if name in charts.COMPARE_CHARTS:
        return getattr(charts, f"chart_{name}")(both)
    return getattr(charts, f"chart_{name}")(levels)


# A rate sweep's levels as the page passes them (offered rates 1, 4, 16 req/s and all at once).
RATE_FRAME = pd.DataFrame(
    {
        "concurrency": [1, 2, 3, 4],
        "level_label": ["1 req/s", "4 req/s", "16 req/s", "all at once"],
        "rate_x": charts.rate_positions([1.0, 4.0, 16.0, float("inf")]),
        "offered_rps": [1.0, 4.0, 16.0, float("nan")],
        "sent_rps": [1.0, 4.0, 15.8, float("nan")],
        "completed_rps": [1.0, 3.9, 9.5, 9.8],
    }
)
TURN_FRAME = pd.DataFrame(
    {
        "concurrency": [1, 1, 1, 2, 2, 2],
        "turn": [1, 2, 3, 1, 2, 3],
        "requests": [4] * 6,
        "ttft_p50_ms": [50.0, 15.0, 16.0, 60.0, 20.0, 22.0],
        "ttft_p90_ms": [55.0, 18.0, 19.0, 70.0, 25.0, 26.0],
        "level_label": ["1 req/s"] * 3 + ["2 req/s"] * 3,
    }
)


def test_rate_follow_draws_all_at_once_at_the_right_end_labelled() -> None:
    spec = charts.chart_rate_follow(RATE_FRAME).to_dict()
    x = spec["encoding"]["x"]
    assert x["scale"]["type"] == "log" and x["field"] == "rate_x"
    assert x["axis"]["values"] == [1.0, 4.0, 16.0, 32.0]  # inf at twice the highest rate
    assert "'all at once'" in x["axis"]["labelExpr"] and "'16 req/s'" in x["axis"]["labelExpr"]
    rows = _data_rows(spec)
    assert {r["series"] for r in rows} == {"Offered", "Sent", "Completed"}
    # the offered diagonal has no point for all at once (it has no rate), completed has
    assert not [r for r in rows if r["series"] == "Offered" and r["rate_x"] == 32.0]
    assert [r for r in rows if r["series"] == "Completed" and r["rate_x"] == 32.0]


def test_ttft_by_turn_is_a_line_per_level() -> None:
    spec = charts.chart_ttft_by_turn(TURN_FRAME, {"level": "档位"}).to_dict()
    assert spec["encoding"]["x"]["field"] == "turn"
    assert spec["encoding"]["color"]["field"] == "level_label"
    assert spec["encoding"]["color"]["title"] == "档位"
    assert spec["encoding"]["color"]["scale"]["domain"] == ["1 req/s", "2 req/s"]


def test_rate_levels_name_the_x_axis_of_the_level_charts() -> None:
    levels = RATE_FRAME.assign(
        itl_p50_ms=[10.0, 10.5, 12.0, 13.0],
        itl_p90_ms=[11.0, 12.0, 20.0, 25.0],
        itl_p99_ms=[12.0, 14.0, 40.0, 60.0],
        itl_mean_ms=[10.2, 10.8, 14.0, 16.0],
        ttft_p50_ms=[50.0, 55.0, 400.0, 900.0],
        e2el_p50_ms=[400.0, 420.0, 900.0, 1500.0],
        inflight_mean=[0.4, 1.6, 9.0, 20.0],
    )
    itl = charts.chart_itl_split(levels).to_dict()
    assert "'all at once'" in _layers(itl)[0]["encoding"]["x"]["axis"]["labelExpr"]
    e2el = charts.chart_e2el_breakdown(levels).to_dict()
    assert e2el["encoding"]["x"]["field"] == "level_label"
    kv = charts.chart_kv_occupancy(levels, capacity_tokens=1000, tokens_per_request=100)
    needed = [r["needed_tokens"] for r in _data_rows(kv.to_dict()) if "needed_tokens" in r]
    assert needed == pytest.approx([40.0, 160.0, 900.0, 2000.0])  # in flight, not the key
    for spec in (itl, e2el, kv.to_dict()):
        jsonschema.validate(spec, SCHEMA)
        # the axis' label expression compiles and draws, offline
        assert vl_convert.vegalite_to_svg(spec, allowed_base_urls=[]).startswith("<svg")


def _layers(spec: dict) -> list[dict]:
    return spec.get("layer", [spec])


def _fields(spec: dict) -> set[str]:
    out = set()
    for layer in _layers(spec):
        for channel in layer.get("encoding", {}).values():
            if isinstance(channel, dict) and "field" in channel:
                out.add(channel["field"])
    return out


def _data_rows(spec: dict) -> list[dict]:
    datasets = spec.get("datasets", {})
    return [row for rows in datasets.values() for row in rows]


@pytest.mark.parametrize("name", charts.RUN_CHARTS + charts.COMPARE_CHARTS)
def test_chart_is_valid_vega_lite_and_draws_offline(name: str, frames) -> None:
    spec = _build(name, frames).to_dict()
    assert spec["$schema"].startswith("https://vega.github.io/schema/vega-lite/v6")
    jsonschema.validate(spec, SCHEMA)
    # Data is inline: nothing to fetch. allowed_base_urls=[] makes any URL an error.
    assert "url" not in json.dumps(spec.get("data", {}))
    svg = vl_convert.vegalite_to_svg(spec, allowed_base_urls=[])
    assert svg.startswith("<svg") and ("<path" in svg or "<line" in svg)


@pytest.mark.parametrize("name", charts.RUN_CHARTS + charts.COMPARE_CHARTS)
def test_chart_is_drawn_without_altairs_costly_paths(
    name: str, frames, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Drawing a chart builds no schema lookup (a shorthand string or ``alt.value`` channel
    makes altair hash its ~600 schema classes, ~5 ms a channel) and checks nothing against the
    schema as objects are made (the test above checks the finished spec): together they were
    half of a run page's cost."""
    from altair.utils import schemapi

    built: list[str] = []
    lookup = schemapi._FromDict.__init__
    checked = schemapi.SchemaBase.validate

    def counted_lookup(self, *args, **kwargs):
        built.append("schema lookup")
        lookup(self, *args, **kwargs)

    def counted_check(cls, *args, **kwargs):
        built.append("schema check")
        return checked.__func__(cls, *args, **kwargs)

    monkeypatch.setattr(schemapi._FromDict, "__init__", counted_lookup)
    monkeypatch.setattr(schemapi.SchemaBase, "validate", classmethod(counted_check))
    chart = _build(name, frames)
    assert built == []
    chart.to_dict()  # the same counters do see altair's own work
    assert "schema check" in built


def test_throughput_latency_encodes_log_ttft_against_throughput_with_slo_bands(frames) -> None:
    levels = frames[0]
    spec = charts.chart_throughput_latency(
        levels, {"p99": "p99 首字"}, slos_ms=(500, 2000)
    ).to_dict()
    lines = next(lay for lay in _layers(spec) if lay.get("mark", {}).get("type") == "line")
    assert lines["encoding"]["x"]["field"] == "output_throughput_tok_s"
    assert lines["encoding"]["y"]["scale"]["type"] == "log"
    assert lines["encoding"]["color"]["scale"]["domain"] == ["p50 TTFT", "p99 首字"]
    rows = _data_rows(spec)
    assert sorted({r["slo_ms"] for r in rows if "slo_ms" in r}) == [500, 2000]
    # a point per level and percentile
    assert len([r for r in rows if "ttft_ms" in r]) == 2 * len(levels)


def test_scaling_is_log_log_with_ideal_line_from_the_lowest_level(frames) -> None:
    levels = frames[0]
    spec = charts.chart_scaling(levels).to_dict()
    line = _layers(spec)[0]
    assert line["encoding"]["x"]["scale"]["type"] == "log"
    assert line["encoding"]["y"]["scale"]["type"] == "log"
    rows = [r for r in _data_rows(spec) if r.get("kind") == "ideal_tok_s"]
    per_stream = levels["output_throughput_tok_s"].iloc[0] / levels["concurrency"].iloc[0]
    for row in rows:
        assert row["tok_s"] == pytest.approx(row["concurrency"] * per_stream)
    assert "efficiency" in _fields(spec)


def test_marginal_gain_bars_match_throughput_differences(frames) -> None:
    levels = frames[0]
    spec = charts.chart_marginal_gain(levels).to_dict()
    bars = {r["step"]: r["gain_tok_s_per_slot"] for r in _data_rows(spec) if "step" in r}
    tput = levels.set_index("concurrency")["output_throughput_tok_s"]
    assert bars["0→1"] == pytest.approx(tput[1])
    assert bars["4→8"] == pytest.approx((tput[8] - tput[4]) / 4)
    reference = [r["reference_tok_s"] for r in _data_rows(spec) if "reference_tok_s" in r]
    assert reference == [pytest.approx(tput[1])]


def test_itl_split_has_four_statistics_and_a_p50_p99_band(frames) -> None:
    spec = charts.chart_itl_split(frames[0]).to_dict()
    band, lines = _layers(spec)
    assert band["mark"]["type"] == "area" and band["encoding"]["y2"]["field"] == "itl_p99_ms"
    assert lines["encoding"]["color"]["scale"]["domain"] == ["p50", "p90", "p99", "mean"]
    assert lines["encoding"]["y"]["scale"]["type"] == "log"


def test_e2el_breakdown_stacks_ttft_and_decode_to_the_p50_e2el(frames) -> None:
    levels = frames[0]
    spec = charts.chart_e2el_breakdown(levels).to_dict()
    rows = _data_rows(spec)
    for c, e2el in levels.set_index("concurrency")["e2el_p50_ms"].items():
        assert sum(r["ms"] for r in rows if r["concurrency"] == c) == pytest.approx(e2el)
    assert spec["encoding"]["y"]["stack"] == "zero"


def test_kv_occupancy_uses_the_real_capacity_and_refuses_an_unknown_one(frames) -> None:
    levels = frames[0]
    spec = charts.chart_kv_occupancy(
        levels, capacity_tokens=20_000, tokens_per_request=1088
    ).to_dict()
    occupancy = {r["concurrency"]: r["occupancy"] for r in _data_rows(spec) if "needed_tokens" in r}
    assert occupancy[8] == pytest.approx(8 * 1088 / 20_000)
    with pytest.raises(ValueError, match="capacity_tokens must be positive"):
        charts.chart_kv_occupancy(levels, capacity_tokens=0, tokens_per_request=1088)


def test_request_timeline_has_a_wait_and_a_decode_bar_per_request(frames) -> None:
    requests = frames[1]
    spec = charts.chart_request_timeline(requests, 4).to_dict()
    rows = [r for r in _data_rows(spec) if "part" in r]
    n = int(((requests["concurrency"] == 4) & (requests["status"] == "ok")).sum())
    assert len(rows) == 2 * min(n, charts.TIMELINE_MAX_REQUESTS)
    with pytest.raises(ValueError, match="no successful request at concurrency 3"):
        charts.chart_request_timeline(requests, 3)


def test_a_frame_without_the_columns_is_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match="level_frame"):
        charts.chart_itl_split(pd.DataFrame({"concurrency": [1]}))


def test_rate_latency_counts_ttft_from_the_schedule() -> None:
    levels = RATE_FRAME.assign(
        ttft_p50_ms=[50.0, 55.0, 400.0, 900.0],
        ttft_p99_ms=[60.0, 80.0, 900.0, 2000.0],
        ttft_sched_p50_ms=[50.0, 55.0, float("nan"), 950.0],
    )
    spec = charts.chart_rate_latency(levels).to_dict()
    p50 = {r["rate_x"]: r["ttft_ms"] for r in _data_rows(spec) if r["series"] == "p50 TTFT"}
    assert p50 == {1.0: 50.0, 4.0: 55.0, 16.0: 400.0, 32.0: 950.0}  # from the send where unknown
    assert spec["encoding"]["y"]["scale"]["type"] == "log"
