"""``sweeper findings`` on sweeps recorded from a real vLLM: the cause of the ITL tail and the KV
ceiling must come out of the data, for a chunked-prefill configuration and a preemption one."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from tests.e2e.conftest import SWEEPER, Recorded
from tests.e2e.test_record_vllm import scraped

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def findings(recorded: Recorded) -> dict[str, dict[str, Any]]:
    done = subprocess.run(
        [str(SWEEPER), "findings", str(recorded.run_dir), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["run_id"] == recorded.trace.run_id
    by_id = {f["id"]: f for f in document["findings"]}
    for finding in by_id.values():
        assert finding["text"]["en"] and finding["text"]["zh"], finding["id"]
    return by_id


def test_chunked_prefill_is_the_cause(recorded_chunked: Recorded) -> None:
    trace = recorded_chunked.trace
    config = trace.manifest.server.config
    assert config.max_num_batched_tokens is not None
    assert config.max_num_batched_tokens.value == 256
    samples = [s for s in trace.metrics if s.error is None]
    preemptions = scraped(samples, "vllm:num_preemptions_total")
    assert preemptions[-1] == preemptions[0], "this configuration must not preempt"
    found = findings(recorded_chunked)
    assert found["itl_tail"]["numbers"].get("opens_at") is not None, found["itl_tail"]
    cause = found["tail_cause"]
    assert cause["numbers"]["cause"] == "chunked_prefill", cause


def test_preemption_is_the_cause(recorded_preemption: Recorded) -> None:
    cause = findings(recorded_preemption)["tail_cause"]
    assert cause["numbers"]["cause"] == "preemption", cause


@pytest.mark.parametrize("which", ["recorded_preemption", "recorded_chunked"])
def test_kv_ceiling_is_capacity_over_request_tokens(
    which: str, request: pytest.FixtureRequest
) -> None:
    recorded: Recorded = request.getfixturevalue(which)
    manifest = recorded.trace.manifest
    capacity = manifest.server.config.kv_cache_tokens
    assert capacity is not None and isinstance(capacity.value, int)
    ceiling = findings(recorded)["kv_ceiling"]["numbers"]
    assert ceiling["capacity_tokens"] == capacity.value
    # Prompts are exact (the server's /tokenize) and ignore_eos makes outputs exact.
    per_request = recorded.sweep.input_len + recorded.sweep.output_len
    assert ceiling["tokens_per_request"] == per_request
    # Whole requests that fit in the pool at once.
    assert ceiling["ceiling"] == capacity.value // per_request
