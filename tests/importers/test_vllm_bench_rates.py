"""`vllm bench serve --request-rate R` result files (open loop), built here the way vLLM builds
them (vllm/benchmarks/serve.py): gamma-distributed gaps rescaled so the last request is due at
N / R (burstiness 1: Poisson; inf: a constant gap), ``request_rate`` "inf" for all at once, an
optional ``--max-concurrency`` semaphore in front of each request; ``start_times`` are the
sends, ``queue_times`` the wait for a slot after the schedule released the request. Imported
through the real CLI, each file becomes one rate level whose times are the file's own."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sweeper.errors import ConfigError, ImportFormatError
from sweeper.importers import import_run
from sweeper.store import load_trace_set
from sweeper.units import NS_PER_S
from tests._peers import run_cli

BASE = 500.0  # perf_counter seconds at the benchmark's start
INF = math.inf


def rate_result(
    rate: float,
    *,
    requests: int = 16,
    cap: int | None = None,
    burstiness: float = 1.0,
    seed: int = 0,
    start_times: bool = True,
    queue_times: bool = True,
    detailed: bool = True,
) -> dict[str, Any]:
    """One open-loop run as `vllm bench serve --save-result --save-detailed` writes it."""
    rng = np.random.default_rng(seed + int(rate if math.isfinite(rate) else 997))
    if math.isinf(rate):
        delays = np.zeros(requests)
    elif math.isinf(burstiness):
        delays = np.cumsum(np.full(requests, 1.0 / rate))
    else:
        delays = np.cumsum(rng.gamma(burstiness, 1.0 / (rate * burstiness), size=requests))
        delays *= (requests / rate) / delays[-1]  # vLLM's rescaling to N / rate
    free = [BASE] * (cap or requests)  # when each semaphore slot is next free
    ttfts, itls, lats, starts, queues, outs, errors = [], [], [], [], [], [], []
    for i in range(requests):
        release = BASE + float(delays[i])
        slot = int(np.argmin(free))
        start = max(release, free[slot]) + 0.0002
        n_out = int(rng.integers(8, 20))
        ttft = float(rng.uniform(0.03, 0.12))
        gaps = [float(g) for g in rng.uniform(0.008, 0.014, size=n_out - 1)]
        failed = i == 3
        ttfts.append(0.0 if failed else ttft)
        itls.append([] if failed else gaps)
        latency = 0.0 if failed else ttft + sum(gaps)
        lats.append(latency)
        starts.append(start)
        queues.append(start - release)
        outs.append(0 if failed else n_out)
        errors.append("Internal Server Error" if failed else "")
        free[slot] = start + (0.005 if failed else latency)
    ok = [i for i, e in enumerate(errors) if not e]
    duration = max(s + lat for s, lat in zip(starts, lats, strict=True)) - BASE + 0.02
    total_out = sum(outs[i] for i in ok)
    result: dict[str, Any] = {
        "date": "20261201-100000",
        "endpoint_type": "openai",
        "backend": "openai",
        "label": None,
        "model_id": "Qwen/Qwen2.5-0.5B-Instruct",
        "tokenizer_id": "Qwen/Qwen2.5-0.5B-Instruct",
        "num_prompts": requests,
        "request_rate": rate if math.isfinite(rate) else "inf",
        "burstiness": burstiness,
        "max_concurrency": cap,
        "duration": duration,
        "completed": len(ok),
        "failed": requests - len(ok),
        "total_input_tokens": 128 * len(ok),
        "total_output_tokens": total_out,
        "request_throughput": len(ok) / duration,
        "request_goodput": None,
        "output_throughput": total_out / duration,
        "total_token_throughput": (total_out + 128 * len(ok)) / duration,
        "input_lens": [128] * requests,
        "output_lens": outs,
        "ttfts": ttfts,
        "itls": itls,
        "latencies": lats,
        "start_times": starts,
        "queue_times": queues,
        "generated_texts": ["x" * n for n in outs],
        "errors": errors,
        "max_output_tokens_per_s": 0.0,
        "max_concurrent_requests": cap or requests,
        "rtfx": 0.0,
    }
    ttft_ms = [ttfts[i] * 1000 for i in ok]
    result["mean_ttft_ms"] = float(np.mean(ttft_ms))
    result["median_ttft_ms"] = float(np.median(ttft_ms))
    result["p99_ttft_ms"] = float(np.percentile(ttft_ms, 99))
    if not queue_times:
        del result["queue_times"]  # vLLM before queue_times
    if not start_times:
        del result["start_times"], result["latencies"], result["queue_times"]
    if not detailed:  # what vLLM drops without --save-detailed
        for key in ("input_lens", "output_lens", "start_times", "ttfts", "itls", "errors"):
            result.pop(key, None)
        result.pop("generated_texts")
    return result


def write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(json.dumps(data))  # json writes inf as Infinity, as vLLM's json.dump does
    return path


def import_files(tmp_path: Path, *files: Path, extra: tuple[str, ...] = ()) -> tuple[str, Any]:
    out = tmp_path / "traces"
    printed = run_cli(
        "import", "vllm-bench", *map(str, files), "--out", str(out), "--run-id", "r", *extra
    )
    return printed, load_trace_set(out / "r")


def test_rate_sweep_is_one_sweep_of_rate_levels(tmp_path: Path) -> None:
    results = {rate: rate_result(rate) for rate in (4.0, 1.0, INF)}
    files = [write(tmp_path / f"openai-{r}qps.json", d) for r, d in results.items()]
    printed, ts = import_files(tmp_path, *files)
    assert "at rates 1 req/s, 4 req/s, all at once into" in printed
    assert "fidelity per_chunk" in printed
    work = ts.manifest.workload
    assert work.load == "rate"
    assert work.concurrency_levels == [1, 2, 3]
    assert work.request_rates == {"1": 1.0, "2": 4.0, "3": INF}
    assert work.arrival == "poisson" and work.burstiness == 1.0 and work.max_concurrency is None
    assert work.requests_per_level == {"1": 16, "2": 16, "3": 16}
    assert ts.manifest.source.send_times == "measured"
    # the clock starts at the earliest release by the schedule (send less its wait for a slot)
    origin = min(
        s - q
        for d in results.values()
        for s, q in zip(d["start_times"], d["queue_times"], strict=True)
    )
    for key, rate in ((1, 1.0), (2, 4.0), (3, INF)):
        result = results[rate]
        mine = [r for r in ts.requests if r.concurrency == key]
        assert [r.request_id for r in mine] == [f"r{key}-{i:05d}" for i in range(16)]
        for trace, start, queue, ttft, gaps in zip(
            mine,
            result["start_times"],
            result["queue_times"],
            result["ttfts"],
            result["itls"],
            strict=True,
        ):
            assert trace.send_ns == round((start - origin) * NS_PER_S)
            assert trace.scheduled_ns == round((start - queue - origin) * NS_PER_S)
            if trace.status == "ok":
                assert trace.chunk_ns[0] == round(ttft * 1e9)
                assert trace.chunk_ns[-1] == pytest.approx((ttft + sum(gaps)) * 1e9, abs=1)
        summary = ts.manifest.source.summaries[str(key)]
        assert summary["request_throughput_rps"] == result["request_throughput"]
        assert summary["completed"] == result["completed"] == 15
        assert summary["ttft_ms_p50"] == result["median_ttft_ms"]
    # the Poisson arrivals are the file's own: their spacing is not even
    first = [r.scheduled_ns for r in ts.requests if r.concurrency == 2]
    assert len({(b or 0) - (a or 0) for a, b in itertools.pairwise(first)}) > 1


def test_capped_rate_level_keeps_the_client_queue(tmp_path: Path) -> None:
    result = rate_result(40.0, cap=2, requests=20)
    _, ts = import_files(tmp_path, write(tmp_path / "r.json", result))
    assert ts.manifest.workload.max_concurrency == 2
    queues = [r.send_ns - (r.scheduled_ns or 0) for r in ts.requests]
    for mine, theirs in zip(queues, result["queue_times"], strict=True):
        assert mine == pytest.approx(theirs * NS_PER_S, abs=2)
    assert max(result["queue_times"]) > 0.1  # 40 req/s into 2 slots: the client queue grows


def test_inf_with_the_rate_runs_cap_is_their_top_level(tmp_path: Path) -> None:
    files = [write(tmp_path / f"{r}.json", rate_result(r, cap=8)) for r in (2.0, 8.0, INF)]
    printed, ts = import_files(tmp_path, *files)
    assert ts.manifest.workload.request_rates == {"1": 2.0, "2": 8.0, "3": INF}
    assert ts.manifest.workload.max_concurrency == 8
    assert "at rates 2 req/s, 8 req/s, all at once" in printed


def test_older_vllm_without_queue_times(tmp_path: Path) -> None:
    """start_times only: the schedule is the send without a cap, fixed by the rate for constant
    arrivals, and unknown for capped Poisson arrivals (said so)."""
    free = rate_result(2.0, queue_times=False, seed=1)
    constant = rate_result(5.0, cap=1, burstiness=INF, queue_times=False, seed=2)
    poisson = rate_result(9.0, cap=1, queue_times=False, seed=3)
    files = [write(tmp_path / f"{i}.json", d) for i, d in enumerate((free, constant, poisson))]
    printed, ts = import_files(tmp_path, *files)
    by_key = {k: [r for r in ts.requests if r.concurrency == k] for k in (1, 2, 3)}
    assert all(r.scheduled_ns == r.send_ns for r in by_key[1])
    sends = [r.send_ns for r in by_key[2]]
    assert [r.scheduled_ns for r in by_key[2]] == [sends[0] + round(i * 0.2e9) for i in range(16)]
    assert all(r.scheduled_ns is None for r in by_key[3])
    assert "9 req/s: this vllm bench serve version kept no queue_times" in printed
    assert ts.manifest.workload.arrival is None  # burstiness differs: kept per level
    assert ts.manifest.source.summaries["2"]["burstiness"] == "inf"


def test_oldest_vllm_without_start_times_lays_out_the_schedule(tmp_path: Path) -> None:
    constant = rate_result(4.0, burstiness=INF, start_times=False)
    capped = rate_result(2.0, cap=2, burstiness=INF, start_times=False, seed=5)
    files = [write(tmp_path / "a.json", constant), write(tmp_path / "b.json", capped)]
    printed, ts = import_files(tmp_path, *files)
    assert ts.manifest.source.send_times == "reconstructed"
    fast = [r for r in ts.requests if r.concurrency == 2]  # 4 req/s is the second rate
    sends = [r.send_ns - fast[0].send_ns for r in fast]
    assert sends == [round(i * 0.25e9) for i in range(16)]  # no cap: sent on schedule
    assert all(r.scheduled_ns == r.send_ns for r in fast)
    assert "laid out on its offered schedule" in printed


def test_oldest_vllm_poisson_without_start_times_says_so(tmp_path: Path) -> None:
    result = rate_result(3.0, start_times=False)
    printed, ts = import_files(tmp_path, write(tmp_path / "p.json", result))
    assert all(r.scheduled_ns is None for r in ts.requests)
    assert "3 req/s: vLLM drew random arrival gaps and did not save them" in printed
    assert any("laid out evenly at the offered rate" in w for w in ts.manifest.warnings)


def test_a_timed_trace_replay_saved_as_inf_is_named(tmp_path: Path) -> None:
    """vLLM's timed_trace dataset schedules by the trace and saves request_rate "inf": the
    releases spread over seconds say so."""
    result = rate_result(INF, queue_times=False)
    result["start_times"] = [BASE + 0.5 * i for i in range(16)]
    printed, ts = import_files(tmp_path, write(tmp_path / "trace.json", result))
    assert "request_rate is inf, yet its requests were released over 7.5 s" in printed
    assert ts.manifest.workload.request_rates == {"1": INF}


def test_summary_only_rate_files(tmp_path: Path) -> None:
    results = [rate_result(r, detailed=False) for r in (1.0, 2.0)]
    files = [write(tmp_path / f"{i}.json", d) for i, d in enumerate(results)]
    _, ts = import_files(tmp_path, *files)
    assert ts.requests == [] and ts.manifest.source.fidelity == "summary"
    assert ts.manifest.workload.request_rates == {"1": 1.0, "2": 2.0}
    assert ts.manifest.source.summaries["2"]["duration_s"] == results[1]["duration"]


def closed_loop_file(tmp_path: Path) -> Path:
    result = rate_result(INF, cap=4, seed=9)
    return write(tmp_path / "c4.json", result)


def test_concurrency_and_rate_files_are_refused_together(tmp_path: Path) -> None:
    rate = write(tmp_path / "r2.json", rate_result(2.0))
    closed = closed_loop_file(tmp_path)
    with pytest.raises(ImportFormatError) as info:
        import_run("vllm-bench", [rate, closed], out=tmp_path / "t")
    message = str(info.value)
    assert str(closed) in message and str(rate) in message and "--load" in message


def test_load_concurrency_takes_the_closed_loop_files_and_names_the_others(
    tmp_path: Path,
) -> None:
    rate = write(tmp_path / "r2.json", rate_result(2.0))
    closed = closed_loop_file(tmp_path)
    printed, ts = import_files(tmp_path, rate, closed, extra=("--load", "concurrency"))
    assert ts.manifest.workload.load == "concurrency"
    assert ts.manifest.workload.concurrency_levels == [4]
    assert (
        f"Note: Left out (--load concurrency): {rate} (2 req/s, max_concurrency None)." in printed
    )
    assert ts.manifest.source.files == [str(closed)]
    assert all(r.scheduled_ns is None for r in ts.requests)


def test_load_rate_takes_every_file_as_a_rate_level(tmp_path: Path) -> None:
    rate = write(tmp_path / "r2.json", rate_result(2.0))
    closed = closed_loop_file(tmp_path)
    printed, ts = import_files(tmp_path, rate, closed, extra=("--load", "rate"))
    work = ts.manifest.workload
    assert work.request_rates == {"1": 2.0, "2": INF}
    assert work.max_concurrency is None  # 2 req/s had no cap, all at once had 4
    assert ts.manifest.source.summaries["2"]["max_concurrency"] == 4
    assert "max_concurrency differs between levels" in printed
    result = json.loads(closed.read_text())
    capped = [r for r in ts.requests if r.concurrency == 2]
    for trace, queue in zip(capped, result["queue_times"], strict=True):
        assert (trace.send_ns - (trace.scheduled_ns or 0)) == pytest.approx(queue * 1e9, abs=2)


def test_load_is_refused_for_other_tools(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--load"):
        import_run("llmperf", [tmp_path], out=tmp_path / "t", load="rate")


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"request_rate": "fast"}, "key request_rate"),
        ({"request_rate": 0}, "key request_rate"),
        ({"burstiness": -1.0}, "key burstiness"),
        ({"max_concurrency": 0}, "key max_concurrency"),
        (
            {"ramp_up_strategy": "linear", "ramp_up_start_rps": 1, "ramp_up_end_rps": 8},
            "key ramp_up_strategy",
        ),
    ],
)
def test_bad_settings_name_file_and_key(tmp_path: Path, change: dict[str, Any], key: str) -> None:
    path = write(tmp_path / "bad.json", {**rate_result(2.0), **change})
    with pytest.raises(ImportFormatError) as info:
        import_run("vllm-bench", [path], out=tmp_path / "t")
    assert str(info.value).startswith(f"{path} ({key}): ")


def test_bad_queue_time_names_the_list(tmp_path: Path) -> None:
    result = rate_result(2.0)
    result["queue_times"][5] = "soon"
    path = write(tmp_path / "bad.json", result)
    with pytest.raises(ImportFormatError, match=r"\(key queue_times\): queue_times\[5\] is 'soon'"):
        import_run("vllm-bench", [path], out=tmp_path / "t")


def test_two_files_of_one_rate_are_refused(tmp_path: Path) -> None:
    a = write(tmp_path / "a.json", rate_result(2.0))
    b = write(tmp_path / "b.json", rate_result(2.0, seed=4))
    with pytest.raises(ImportFormatError, match=rf"request_rate 2 req/s is also in {a}"):
        import_run("vllm-bench", [a, b], out=tmp_path / "t")
