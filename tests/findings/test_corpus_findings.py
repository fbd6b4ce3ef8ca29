"""The findings on real GPU sweeps recorded by others (../shared/data: the AIPerf 0.8 peer sweep
and the corpus), checked against the servers' own numbers: a cause is named only for the share of
the tail it explains, and each level's preemptions are its own server's."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

from sweeper.findings import Finding, analyze_run, finding
from sweeper.store import load_trace_set
from tests._peers import AIPERF_08, KIMI, QWEN35, corpus, peer, run_cli

SWEEPS = {
    "minimax": lambda: peer(AIPERF_08),
    "kimi": lambda: corpus(KIMI),
    "qwen35": lambda: corpus(QWEN35),
}


@pytest.fixture(scope="module", params=sorted(SWEEPS))
def sweep(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    folder = SWEEPS[request.param]()
    out = tmp_path_factory.mktemp(request.param)
    run_cli("import", "aiperf", str(folder), "--out", str(out), "--run-id", request.param)
    found = analyze_run(load_trace_set(out / request.param))
    return folder, {f.id: f for f in found}


def _server_preemptions(level_folder: Path) -> float | None:
    """vllm:num_preemptions over the level, as AIPerf summarised that level's own server."""
    path = level_folder / "server_metrics_export.csv"
    if not path.is_file():
        return None
    header: list[str] = []
    for row in csv.reader(path.read_text().splitlines()):
        if row and row[0] == "Endpoint":
            header = row  # each section (gauges, counters, histograms) has its own columns
        elif len(row) > 4 and row[1] == "counter" and row[2] == "vllm:num_preemptions":
            return float(dict(zip(header, row, strict=False))["total"])
    return None


def _level_folder(folder: Path, concurrency: int) -> Path:
    return folder / f"conc{concurrency}"


def test_each_levels_preemptions_are_its_own_servers(sweep: Any) -> None:
    folder, found = sweep
    attribution = found["tail_cause"].numbers["attribution"]
    assert attribution is not None and attribution["long_gaps"] > 0
    for level, numbers in attribution["levels"].items():
        counted = _server_preemptions(_level_folder(folder, int(level)))
        assert numbers["preemptions"] == (int(counted) if counted is not None else 0), level
        # a preemption explains its own stall and the recompute's, never more than its count of
        # stalls of the preempted streams
        assert numbers["gaps"]["preemption"] <= max(1, numbers["preemptions"]) * int(level)


def test_the_named_cause_explains_most_of_the_tail(sweep: Any) -> None:
    _, found = sweep
    cause: Finding = found["tail_cause"]
    shares = cause.numbers["attribution"]["time_share"]
    named = {"chunked_prefill": "prefill", "preemption": "preemption"}[cause.numbers["cause"]]
    assert shares[named] >= 0.5, cause.text["en"]
    if cause.numbers["cause"] != "preemption":
        assert "It is preemption" not in cause.text["en"]
    if cause.numbers["preemptions_delta"]:
        # counted preemptions are stated with the share they explain, not left out
        assert "preemptions, counted at" in cause.text["en"]
        assert "次抢占" in cause.text["zh"]


def test_tail_levels_without_per_chunk_times_are_said_to_be_unattributed(sweep: Any) -> None:
    folder, found = sweep
    cause = found["tail_cause"]
    attributed = {int(c) for c in cause.numbers["attribution"]["levels"]}
    summary_only = [
        c
        for c in cause.levels
        if c not in attributed and not (_level_folder(folder, c) / "profile_export.jsonl").is_file()
    ]
    if summary_only:
        assert "measured but not attributed" in cause.text["en"]


def test_long_input_splits_the_stalls_by_the_same_attribution(sweep: Any) -> None:
    _, found = sweep
    parts = finding(list(found.values()), "long_input").numbers["attribution"]
    stalls = {
        k: v for k, v in parts.items() if k.endswith("_stalls") or k == "prefill_interference"
    }
    assert stalls, parts
    tail = found["tail_cause"].numbers["attribution"]["time_share"]
    if tail["prefill"] > tail["preemption"]:
        assert parts.get("prefill_interference", 0) >= parts.get("preemption_stalls", 0)


def test_the_ceiling_uses_each_levels_own_server(sweep: Any) -> None:
    folder, found = sweep
    ceiling = found["kv_ceiling"]
    assert ceiling.severity != "unknown", ceiling.text["en"]
    # the per-level servers' pools: the ceiling rests on the smallest a level's server had
    pools = [
        int(row[3]) * int(block[3])
        for level in folder.iterdir()
        if (level / "server_metrics_export.csv").is_file()
        for rows in [
            list(csv.reader((level / "server_metrics_export.csv").read_text().splitlines()))
        ]
        for row in rows
        if len(row) > 3 and row[1] == "vllm:cache_config_info" and row[2] == "num_gpu_blocks"
        for block in rows
        if len(block) > 3 and block[1] == "vllm:cache_config_info" and block[2] == "block_size"
    ]
    if pools:
        assert ceiling.numbers["capacity_tokens"] == min(pools)


def test_a_prefix_cache_makes_the_ceiling_a_lower_bound(sweep: Any) -> None:
    _, found = sweep
    ceiling = found["kv_ceiling"]
    hits = [v for v in ceiling.numbers["prefix_cache_hit_rate"].values() if v is not None]
    if hits and max(hits) >= 0.2:
        assert ceiling.numbers["ceiling_is_lower_bound"] is True
        assert "upper bound on what they need" in ceiling.text["en"]
        assert "上界" in ceiling.text["zh"]
        if hits[-1] < 0.5 * max(hits):
            assert "the pool no longer holds what was cached" in ceiling.text["en"]


# The advice each proposal's flag comes from: (finding, what its numbers say) -> flags it may propose.
ADVISED_FLAGS = {
    ("tail_cause", "chunked_prefill"): {"--max-num-batched-tokens"},
    ("tail_cause", "preemption"): {
        "--max-num-seqs",
        "--kv-cache-memory-bytes",
        "--num-gpu-blocks-override",
    },
    ("tail_cause", "kv_admission"): {"--kv-cache-memory-bytes", "--num-gpu-blocks-override"},
    ("tail_cause", "max_num_seqs"): {"--max-num-seqs"},
    ("memory_headroom", "notice"): {"--kv-cache-memory-bytes"},
}


def test_proposals_only_where_the_finding_advises_the_change(sweep: Any) -> None:
    _, found = sweep
    for f in found.values():
        if not f.proposals:
            continue
        key = (f.id, f.numbers.get("cause") if f.id == "tail_cause" else f.severity)
        assert key in ADVISED_FLAGS, (f.id, f.proposals)
        for p in f.proposals:
            assert p.flag in ADVISED_FLAGS[key], (key, p)
            assert p.value is None or p.value > 0
            for pred in p.predicts:
                # a predicted number is never below where it starts for "higher" and so on
                if pred.to is not None and pred.from_ is not None:
                    assert (pred.to > pred.from_) == (pred.direction == "higher"), pred
    cause = found["tail_cause"]
    if cause.numbers["cause"] == "chunked_prefill":
        assert [p.flag for p in cause.proposals] == ["--max-num-batched-tokens"]
    headroom = found["memory_headroom"]
    if headroom.severity == "notice":
        (p,) = headroom.proposals
        assert p.value == int(headroom.numbers["suggested_kv_cache_memory_bytes"])
        assert p.predicts[0].to == headroom.numbers["new_ceiling"]
