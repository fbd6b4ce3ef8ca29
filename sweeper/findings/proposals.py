"""The server flag changes the findings advise, as data (``Finding.proposals``).

Each proposal is the advice a finding already gives ("What to change next"), made concrete
enough to try: a flag, a value where the data gives one, and what it predicts (the KV ceiling
from 3 to 8, no preemptions, a shorter p99 ITL at C=8). ``sweeper study run --from-advice``
records them beside the original flags and checks each prediction. A finding that does not
advise a change proposes nothing; no value is invented (``value`` None: only the direction).

- ``memory_headroom`` (notice): ``--kv-cache-memory-bytes`` at the server's suggestion (or the
  estimate), the ceiling from N to M;
- ``tail_cause`` ``preemption`` / ``kv_admission``: a KV pool that holds the top level
  (``--num-gpu-blocks-override`` where the pool was set that way, else
  ``--kv-cache-memory-bytes``), unless the memory finding says there is no memory for it; and
  for preemption, ``--max-num-seqs`` at the KV ceiling where it is above it;
- ``tail_cause`` ``chunked_prefill``: a larger ``--max-num-batched-tokens`` (where a prompt is
  longer than the budget: twice the budget, at least the prompt rounded up to a power of two;
  else no value), p99 ITL lower at the top tail level;
- ``tail_cause`` ``max_num_seqs``: ``--max-num-seqs`` up to the KV ceiling (or the top level),
  p99 TTFT lower there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from sweeper.findings.frames import RunFrames, request_lengths, streams
from sweeper.findings.model import Finding, Prediction, Proposal
from sweeper.units import finite

MIB = 1024 * 1024


def attach_proposals(data: RunFrames, found: Sequence[Finding]) -> None:
    """Set ``proposals`` on the findings that advise a server change (in place)."""
    by_id = {f.id: f for f in found}
    headroom = by_id.get("memory_headroom")
    if headroom is not None:
        headroom.proposals = _headroom_proposals(headroom)
    cause = by_id.get("tail_cause")
    ceiling = by_id.get("kv_ceiling")
    if cause is not None and ceiling is not None and ceiling.severity != "unknown":
        cause.proposals = _cause_proposals(data, cause, ceiling, headroom)


def _ceiling_prediction(before: Any, after: Any) -> Prediction:
    return Prediction(
        metric="kv_ceiling",
        from_=float(before) if finite(before) else None,
        to=float(after) if finite(after) else None,
        direction="higher",
    )


def _headroom_proposals(f: Finding) -> list[Proposal]:
    n = f.numbers
    suggested, extra = n.get("suggested_kv_cache_memory_bytes"), n.get("unused_bytes")
    if f.severity != "notice" or not (finite(suggested) and finite(extra) and extra > 0):
        return []
    return [
        Proposal(
            flag="--kv-cache-memory-bytes",
            value=int(suggested),
            direction="larger",
            predicts=[_ceiling_prediction(n.get("ceiling"), n.get("new_ceiling"))],
            reason=f"memory_headroom: {int(extra)} bytes of device memory are not used for the "
            f"KV cache ({n.get('source')})",
        )
    ]


def _cause_proposals(
    data: RunFrames, cause: Finding, ceiling: Finding, headroom: Finding | None
) -> list[Proposal]:
    key = cause.numbers.get("cause")
    if key in ("preemption", "kv_admission"):
        out = _kv_pool_proposals(data, cause, ceiling, headroom)
        if key == "preemption":
            out += _fewer_seqs_proposals(cause, ceiling)
        return out
    if key == "chunked_prefill":
        return _budget_proposals(data, cause)
    if key == "max_num_seqs":
        return _more_seqs_proposals(data, cause, ceiling)
    return []


def _top_need(data: RunFrames) -> int | None:
    """Requests in flight at the top level: C in a closed loop, the measured mean in a rate run."""
    if not data.concurrencies:
        return None
    top = streams(data, data.concurrencies[-1])
    return math.ceil(top) if finite(top) and top >= 1 else None


def _kv_pool_proposals(
    data: RunFrames, cause: Finding, ceiling: Finding, headroom: Finding | None
) -> list[Proposal]:
    """A KV pool that holds the top level's requests."""
    n = ceiling.numbers
    per_req, capacity, limit = (
        n.get("tokens_per_request"),
        n.get("capacity_tokens"),
        n.get("ceiling"),
    )
    need = _top_need(data)
    if not (finite(per_req) and finite(capacity) and finite(limit) and need) or need <= limit:
        return []
    tokens = need * float(per_req)
    override = data.manifest.server.config.extra.get("num_gpu_blocks_override")
    blocks = override.value if override is not None else None
    block_size = data.fact("server.config.block_size")
    preempted = cause.numbers.get("preemptions_delta")
    predicts = []
    if finite(blocks) and finite(block_size) and block_size > 0:
        value = math.ceil(tokens / float(block_size))
        new_ceiling = math.floor(value * float(block_size) / float(per_req))
        flag = "--num-gpu-blocks-override"
    else:
        if headroom is not None and headroom.severity == "info":
            return []  # the KV cache already has the device's memory
        mem = data.fact("server.config.kv_cache_memory_bytes")
        if not finite(mem):
            return []
        value = math.ceil(float(mem) * tokens / float(capacity) / MIB) * MIB
        new_ceiling = math.floor(float(capacity) * value / float(mem) / float(per_req))
        flag = "--kv-cache-memory-bytes"
    predicts.append(_ceiling_prediction(limit, new_ceiling))
    if cause.numbers.get("cause") == "preemption" and finite(preempted) and preempted > 0:
        predicts.append(
            Prediction(metric="preemptions", from_=float(preempted), to=0.0, direction="lower")
        )
    return [
        Proposal(
            flag=flag,
            value=value,
            direction="larger",
            predicts=predicts,
            reason=f"tail_cause {cause.numbers.get('cause')}: the KV pool holds {int(limit)} "
            f"requests of {int(per_req)} tokens, the top level needs {need}",
        )
    ]


def _fewer_seqs_proposals(cause: Finding, ceiling: Finding) -> list[Proposal]:
    """--max-num-seqs at the KV ceiling, so the server never admits more than the pool holds."""
    limit, max_seqs = ceiling.numbers.get("ceiling"), ceiling.numbers.get("max_num_seqs")
    preempted = cause.numbers.get("preemptions_delta")
    if not (finite(limit) and finite(max_seqs) and 1 <= limit < max_seqs):
        return []
    predicts = []
    if finite(preempted) and preempted > 0:
        predicts.append(
            Prediction(metric="preemptions", from_=float(preempted), to=0.0, direction="lower")
        )
    return [
        Proposal(
            flag="--max-num-seqs",
            value=int(limit),
            direction="smaller",
            predicts=predicts,
            reason=f"tail_cause preemption: --max-num-seqs {int(max_seqs)} admits more requests "
            f"than the KV cache holds ({int(limit)})",
        )
    ]


def _tail_top(data: RunFrames, cause: Finding) -> int | None:
    levels = cause.levels or [c for c in data.concurrencies]
    return max(levels) if levels else None


def _budget_proposals(data: RunFrames, cause: Finding) -> list[Proposal]:
    """A larger --max-num-batched-tokens: prompts cut into fewer chunks."""
    budget = cause.numbers.get("max_num_batched_tokens")
    if not finite(budget):
        budget = data.fact("server.config.max_num_batched_tokens")
    inp, _ = request_lengths(data)
    value = None
    if finite(budget) and budget > 0 and finite(inp) and inp and inp > budget:
        # the prompt is cut into chunks: one that holds it (a power of two), at least twice the budget
        value = int(max(2 * float(budget), 2 ** math.ceil(math.log2(inp))))
    top = _tail_top(data, cause)
    predicts = []
    if top is not None:
        before = data.value(top, "itl_p99_ms")
        predicts.append(
            Prediction(
                metric="itl_p99_ms",
                level=top,
                from_=float(before) if finite(before) else None,
                direction="lower",
            )
        )
    return [
        Proposal(
            flag="--max-num-batched-tokens",
            value=value,
            direction="larger",
            predicts=predicts,
            reason="tail_cause chunked_prefill: decode steps stall behind prefill chunks; a "
            "larger budget cuts a prompt into fewer chunks",
        )
    ]


def _more_seqs_proposals(data: RunFrames, cause: Finding, ceiling: Finding) -> list[Proposal]:
    """--max-num-seqs up to what the KV cache holds (advised only where it has room)."""
    max_seqs, limit = cause.numbers.get("max_num_seqs"), ceiling.numbers.get("ceiling")
    need = _top_need(data)
    if not (finite(max_seqs) and finite(limit) and need and limit > max_seqs and need > max_seqs):
        return []
    top = _tail_top(data, cause)
    before = data.value(top, "ttft_p99_ms") if top is not None else None
    return [
        Proposal(
            flag="--max-num-seqs",
            value=int(min(limit, need)),
            direction="larger",
            predicts=[
                Prediction(
                    metric="ttft_p99_ms",
                    level=top,
                    from_=float(before) if finite(before) else None,
                    direction="lower",
                )
            ],
            reason=f"tail_cause max_num_seqs: requests queue behind --max-num-seqs "
            f"{int(max_seqs)} while the KV cache holds {int(limit)}",
        )
    ]
