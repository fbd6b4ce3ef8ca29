"""The server flag changes the findings advise, as data (``Finding.proposals``), on the CPU vLLM
samples: the 16-block pool proposes the pool that holds C=8 and --max-num-seqs at the ceiling;
the 256-token chunked-prefill budget proposes one that holds the 1,000-token prompt; the default
run, whose findings advise no server change, proposes nothing."""

from __future__ import annotations

import json
from pathlib import Path

from sweeper.findings import analyze_run, findings_json
from sweeper.store import load_trace_set

TRACES = Path(__file__).resolve().parents[2] / "traces"


def _proposals(run: str) -> dict[str, list[dict]]:
    found = analyze_run(load_trace_set(TRACES / run))
    doc = json.loads(json.dumps(findings_json(run, found), allow_nan=False))
    return {f["id"]: f["proposals"] for f in doc["findings"] if f["proposals"]}


def test_a_short_kv_pool_proposes_the_pool_for_the_top_level_and_fewer_seqs() -> None:
    found = _proposals("small-vllm-cpu-preemption")
    assert list(found) == ["tail_cause"]
    pool, seqs = found["tail_cause"]
    # 16 blocks of 128 tokens hold 3 requests of 640; C=8 needs 5,120 tokens: 40 blocks
    assert (pool["flag"], pool["value"], pool["direction"]) == (
        "--num-gpu-blocks-override",
        40,
        "larger",
    )
    assert pool["predicts"][0] == {
        "metric": "kv_ceiling",
        "level": None,
        "from": 3.0,
        "to": 8.0,
        "direction": "higher",
    }
    assert pool["predicts"][1]["metric"] == "preemptions" and pool["predicts"][1]["to"] == 0
    assert (seqs["flag"], seqs["value"], seqs["direction"]) == ("--max-num-seqs", 3, "smaller")


def test_a_chunked_prefill_tail_proposes_a_budget_that_holds_the_prompt() -> None:
    found = _proposals("small-vllm-cpu-chunked-prefill")
    (budget,) = found["tail_cause"]
    assert (budget["flag"], budget["value"]) == ("--max-num-batched-tokens", 1024)
    (itl,) = budget["predicts"]
    assert itl["metric"] == "itl_p99_ms" and itl["direction"] == "lower" and itl["from"] > 0
    assert itl["to"] is None


def test_no_advice_no_proposal() -> None:
    assert _proposals("small-vllm-cpu-default") == {}
