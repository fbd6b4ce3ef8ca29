"""GuideLLM rate strategies (constant, poisson, throughput) as rate levels, in reports built in
GuideLLM's shape (scheduler/strategies.py: constant is start + i / rate, poisson start plus
exponential gaps, throughput every request at the start; the worker stamps
``info.timings.targeted_start`` with that time and ``request_start`` when it sent the request,
after waiting for a ``max_concurrency`` slot). A ``--profile sweep`` report holds synchronous,
throughput and a set of constant rates: imported as the rate levels, or the concurrency ones
with ``--load concurrency``, the others named in a note. Every time is the report's own."""

from __future__ import annotations

import itertools
import json
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sweeper.errors import ImportFormatError
from sweeper.importers import import_run
from sweeper.store import load_trace_set
from sweeper.units import NS_PER_S
from tests._peers import run_cli
from tests.importers.test_guidellm import T0, benchmark, distribution, request_stats

INF = math.inf


def rate_benchmark(
    strategy: dict[str, Any], start: float, seed: int, requests: int = 12
) -> dict[str, Any]:
    """One rate strategy's benchmark: targeted starts from the strategy, sends after a slot."""
    rng = np.random.default_rng(seed)
    draws = random.Random(strategy.get("random_seed", 42))
    kind, rate = strategy["type_"], strategy.get("rate")
    cap = strategy.get("max_concurrency")
    free = [start] * (cap or requests)
    offset = start
    items = []
    for i in range(requests):
        if kind == "constant":
            targeted = start + i / rate
        elif kind == "poisson":
            offset += draws.expovariate(rate)
            targeted = offset
        else:  # throughput
            targeted = start
        slot = int(np.argmin(free))
        sent = max(targeted, free[slot]) + 0.0004
        out = int(rng.integers(16, 48))
        stats = request_stats(
            i, sent, float(rng.uniform(0.05, 0.2)), out - 1, 0.012, out, targeted=targeted
        )
        items.append(stats)
        free[slot] = stats["info"]["timings"]["request_end"]
    bench = benchmark({"type_": "synchronous"}, 1, start, seed)  # GuideLLM's shape, then ours:
    bench["config"]["strategy"] = strategy
    bench["config"]["profile"] = {"type_": "sweep", "sweep_size": 5}
    bench["requests"]["successful"] = items
    ends = [r["info"]["timings"]["request_end"] for r in items]
    bench["duration"] = max(ends) - start
    for name in ("time_to_first_token_ms", "inter_token_latency_ms", "time_per_output_token_ms"):
        bench["metrics"][name] = {"successful": distribution([r[name] for r in items])}
    return bench


def sweep_report(tmp_path: Path, kind: str = "constant") -> tuple[Path, dict[str, Any]]:
    benches = [
        benchmark({"type_": "synchronous"}, 1, T0, 1),
        rate_benchmark({"type_": "throughput", "max_concurrency": 4}, T0 + 100, 2),
    ]
    for n, rate in enumerate((1.0, 3.0, 6.0)):
        benches.append(rate_benchmark({"type_": kind, "rate": rate}, T0 + 200 + 100 * n, 3 + n))
    data = {
        "metadata": {"version": 1, "guidellm_version": "0.7.1"},
        "args": {"model": "Qwen/Qwen2.5-7B-Instruct", "profile": "sweep"},
        "benchmarks": benches,
    }
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(data))
    return path, data


def import_report(tmp_path: Path, path: Path, *extra: str) -> tuple[str, Any]:
    out = tmp_path / "traces"
    printed = run_cli("import", "guidellm", str(path), "--out", str(out), "--run-id", "g", *extra)
    return printed, load_trace_set(out / "g")


def test_sweep_report_imports_its_rate_levels(tmp_path: Path) -> None:
    path, data = sweep_report(tmp_path)
    printed, ts = import_report(tmp_path, path)
    assert "at rates 1 req/s, 3 req/s, 6 req/s, all at once into" in printed
    assert f"Note: Left out: {path} benchmarks[0] (synchronous, C=1)" in printed
    assert any("benchmarks[0] (synchronous, C=1)" in w for w in ts.manifest.warnings)
    work = ts.manifest.workload
    assert work.load == "rate" and work.arrival == "constant"
    assert work.request_rates == {"1": 1.0, "2": 3.0, "3": 6.0, "4": INF}
    assert work.requests_per_level == {"1": 12, "2": 12, "3": 12, "4": 12}
    assert work.max_concurrency is None  # throughput had 4, the constant rates none
    assert ts.manifest.source.summaries["4"]["max_concurrency"] == 4
    # ... and the note says which levels had none in words, never "None" (it reaches the page)
    (caps,) = [w for w in ts.manifest.warnings if "max_concurrency differs" in w]
    assert "1 req/s: no cap" in caps and "all at once: 4" in caps and "None" not in caps
    benches = {1: data["benchmarks"][2], 2: data["benchmarks"][3], 3: data["benchmarks"][4]}
    benches[4] = data["benchmarks"][1]
    timings = [r["info"]["timings"] for b in benches.values() for r in b["requests"]["successful"]]
    origin = min(min(t["request_start"], t["targeted_start"]) for t in timings)
    assert ts.manifest.clock is not None
    assert ts.manifest.clock.origin_unix_ns == round(origin * NS_PER_S)
    for key, bench in benches.items():
        mine = [r for r in ts.requests if r.concurrency == key]
        theirs = bench["requests"]["successful"]
        assert len(mine) == len(theirs) == 12
        for trace, item in zip(mine, theirs, strict=True):
            t = item["info"]["timings"]
            assert trace.request_id == item["request_id"]
            assert trace.send_ns == round((t["request_start"] - origin) * NS_PER_S)
            assert trace.scheduled_ns == round((t["targeted_start"] - origin) * NS_PER_S)
            assert trace.ttft_ns == round((t["first_token_iteration"] - t["request_start"]) * 1e9)
        ttft = bench["metrics"]["time_to_first_token_ms"]["successful"]
        assert ts.manifest.source.summaries[str(key)]["ttft_ms_mean"] == ttft["mean"]
    # constant arrivals 1/3 s apart; throughput's all due at the start, four at a time
    third = [r.scheduled_ns or 0 for r in ts.requests if r.concurrency == 2]
    # (Unix seconds in a double: ~0.2 us of resolution)
    assert all(abs(b - a - NS_PER_S / 3) < 500 for a, b in itertools.pairwise(third))
    top = [r for r in ts.requests if r.concurrency == 4]
    assert len({r.scheduled_ns for r in top}) == 1
    assert max(r.send_ns - (r.scheduled_ns or 0) for r in top) > 0.2 * NS_PER_S


def test_load_concurrency_imports_the_closed_loop_benchmarks(tmp_path: Path) -> None:
    path, _ = sweep_report(tmp_path)
    printed, ts = import_report(tmp_path, path, "--load", "concurrency")
    assert "at concurrency 1 into" in printed
    assert ts.manifest.workload.load == "concurrency"
    assert all(r.scheduled_ns is None for r in ts.requests)  # a closed loop has no schedule
    note = next(w for w in ts.manifest.warnings if w.startswith("Left out:"))
    for where in ("benchmarks[1] (throughput, all at once)", "benchmarks[4] (constant, 6 req/s)"):
        assert where in note
    assert "--load rate" in note


def test_poisson_strategies(tmp_path: Path) -> None:
    path, _ = sweep_report(tmp_path, kind="poisson")
    _, ts = import_report(tmp_path, path)
    assert ts.manifest.workload.arrival == "poisson"
    assert ts.manifest.workload.burstiness == 1.0
    gaps = {
        b - a
        for a, b in itertools.pairwise(
            r.scheduled_ns or 0 for r in ts.requests if r.concurrency == 1
        )
    }
    assert len(gaps) > 1  # the report's own random arrivals


def test_older_guidellm_targeted_start_time(tmp_path: Path) -> None:
    """GuideLLM before 0.4: ``args.strategy``, flat times and ``scheduler_info``."""
    bench = rate_benchmark({"type_": "constant", "rate": 2.0}, T0, 7)
    bench["args"] = bench.pop("config")
    for item in bench["requests"]["successful"]:
        timings = item.pop("info")["timings"]
        item["start_time"] = timings["request_start"]
        item["first_token_time"] = timings["first_token_iteration"]
        item["last_token_time"] = timings["last_token_iteration"]
        item["end_time"] = timings["request_end"]
        item["scheduler_info"] = {"targeted_start_time": timings["targeted_start"]}
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps({"benchmarks": [bench]}))
    _, ts = import_report(tmp_path, path)
    assert [r.scheduled_ns for r in ts.requests] == [round(i * 0.5e9) for i in range(12)]


def test_a_strategy_of_another_kind_is_skipped_and_named(tmp_path: Path) -> None:
    path, data = sweep_report(tmp_path)
    data["benchmarks"][2]["config"]["strategy"] = {"type_": "replay", "time_scale": 1.0}
    path.write_text(json.dumps(data))
    printed, ts = import_report(tmp_path, path)
    assert "benchmarks[2]: strategy 'replay' has neither a fixed concurrency nor" in printed
    assert ts.manifest.workload.request_rates == {"1": 3.0, "2": 6.0, "3": INF}


@pytest.mark.parametrize("rate", [0, -1.0, "2", None])
def test_a_rate_strategy_without_a_rate_names_the_key(tmp_path: Path, rate: Any) -> None:
    path, data = sweep_report(tmp_path)
    data["benchmarks"][3]["config"]["strategy"]["rate"] = rate
    path.write_text(json.dumps(data))
    with pytest.raises(ImportFormatError) as info:
        import_run("guidellm", [path], out=tmp_path / "t")
    assert str(info.value).startswith(f"{path} (benchmarks[3].config.strategy.rate): constant")


def test_one_rate_twice_is_refused(tmp_path: Path) -> None:
    path, data = sweep_report(tmp_path)
    data["benchmarks"][3]["config"]["strategy"]["rate"] = 1.0
    path.write_text(json.dumps(data))
    with pytest.raises(ImportFormatError, match=r"rate 1 req/s appears twice \(benchmarks\[2\]"):
        import_run("guidellm", [path], out=tmp_path / "t")


def test_load_rate_without_rate_benchmarks(tmp_path: Path) -> None:
    path, data = sweep_report(tmp_path)
    data["benchmarks"] = data["benchmarks"][:1]
    path.write_text(json.dumps(data))
    with pytest.raises(ImportFormatError, match="--load rate: no rate-based benchmark"):
        import_run("guidellm", [path], out=tmp_path / "t", load="rate")
