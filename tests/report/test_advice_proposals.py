"""A finding proposes a flag change (``Finding.proposals``) only where the report's "What to
change next" advises it: on every committed sample run, each proposing finding has its advice
line, in both languages."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweeper.report.advice import next_steps
from sweeper.report.run_report import collect_run
from sweeper.store import discover_trace_sets, load_trace_set

TRACES = Path(__file__).resolve().parents[2] / "traces"
SAMPLES = ["small-vllm-cpu-chunked-prefill", "small-vllm-cpu-default", "small-vllm-cpu-preemption"]
# The words of each advice line a proposal rests on (English).
ADVICE = {
    ("tail_cause", "chunked_prefill"): "a larger --max-num-batched-tokens",
    ("tail_cause", "preemption"): "give the KV cache more memory",
    ("tail_cause", "kv_admission"): "give the KV cache more memory",
    ("tail_cause", "max_num_seqs"): "Requests queue behind --max-num-seqs",
    ("memory_headroom", None): "Start the server with --kv-cache-memory=",
}


@pytest.mark.parametrize("name", SAMPLES)
def test_every_proposal_has_its_advice_line(name: str) -> None:
    assert (TRACES / name) in discover_trace_sets(TRACES)
    run = collect_run(load_trace_set(TRACES / name))
    lines = {lang: next_steps(run, lang) for lang in ("en", "zh")}
    proposing = [f for f in run.findings.values() if f.proposals]
    for f in proposing:
        key = (f.id, f.numbers.get("cause") if f.id == "tail_cause" else None)
        assert any(ADVICE[key] in line for line in lines["en"]), (key, lines["en"])
        assert len(lines["zh"]) == len(lines["en"])
    if name == "small-vllm-cpu-default":
        assert proposing == []
    else:
        assert proposing, name
