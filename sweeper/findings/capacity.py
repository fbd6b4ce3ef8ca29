"""Findings 6 and 7: the KV cache's real concurrency ceiling, and the memory left unused."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from sweeper.analysis.frames import lengths_vary
from sweeper.analysis.thresholds import Thresholds
from sweeper.findings._words import (
    Missing,
    Msg,
    Num,
    Pct,
    Text,
    gib,
    num,
    per_level,
    times,
    unknown,
)
from sweeper.findings.frames import RunFrames, request_lengths, streams
from sweeper.findings.model import Finding
from sweeper.i18n import N_
from sweeper.units import finite

# ---------------------------------------------------------------------------------------------
# 6. KV capacity: the real concurrency ceiling


def kv_capacity(data: RunFrames) -> tuple[float, str] | None:
    """KV cache capacity in tokens and where it came from; where each level had its own server
    and pool, the smallest (the ceiling every level's server can keep)."""
    tokens = data.fact("server.config.kv_cache_tokens")
    if finite(tokens) and tokens > 0:
        src = data.manifest.server.config.kv_cache_tokens
        return float(tokens), f"server.config.kv_cache_tokens ({src.source if src else '?'})"
    per_level = {c: v for c, v in data.level_facts("kv_cache_tokens").items() if v > 0}
    if per_level:
        return min(per_level.values()), "server.config.extra.kv_cache_tokens_per_level (smallest)"
    mem = data.fact("server.config.kv_cache_memory_bytes")
    per_token = data.fact("model.kv_bytes_per_token")
    if finite(mem) and finite(per_token) and per_token > 0:
        return float(mem) / float(per_token), "kv_cache_memory_bytes ÷ model.kv_bytes_per_token"
    return None


@dataclass(frozen=True, kw_only=True)
class _Pool:
    """The KV pool against one request's tokens."""

    capacity: float  # tokens
    inp: float
    out: float
    per_req: float  # tokens per request, in + out
    exact: float  # capacity ÷ per_req
    ceiling: int  # requests that fit at once


def _pool(capacity: float, inp: float, out: float) -> _Pool:
    per_req = inp + out
    exact = capacity / per_req
    return _Pool(
        capacity=capacity,
        inp=inp,
        out=out,
        per_req=per_req,
        exact=exact,
        ceiling=math.floor(exact),
    )


def kv_ceiling(data: RunFrames, th: Thresholds) -> Finding:
    cap = kv_capacity(data)
    inp, out = request_lengths(data)
    uses = ["workload input/output lengths"]
    missing = _ceiling_missing(cap, inp, out)
    if missing:
        text = Text().add(
            N_("The real concurrency ceiling cannot be computed: missing {missing}."),
            missing=Missing(missing),
        )
        return unknown("kv_ceiling", text, missing, uses)
    assert cap is not None and inp is not None and out is not None
    capacity, cap_source = cap
    uses.append(cap_source)
    pool = _pool(capacity, inp, out)
    # Each level against its own server's pool where the pools differed.
    pools = data.level_facts("kv_cache_tokens")
    # In flight: C in a closed loop, the measured mean in a rate run (its levels are rates).
    need = [streams(data, c) * pool.per_req for c in data.concurrencies]
    occupancy = [n / pools.get(c, capacity) for c, n in zip(data.concurrencies, need, strict=True)]
    observed = [data.server_value(c, "kv_usage_max") for c in data.concurrencies]
    if any(finite(v) for v in observed):
        uses.append("server KV usage per level")
    max_seqs = data.fact("server.config.max_num_seqs")
    seqs_by_level = data.level_facts("max_num_seqs")
    if max_seqs is None and seqs_by_level:
        # One server per level, each with its own cap: the top level's is the one to compare.
        max_seqs = seqs_by_level.get(data.concurrencies[-1])
    seqs_above = finite(max_seqs) and float(max_seqs) > pool.ceiling
    text = Text()
    _ceiling_words(text, pool, max_seqs, seqs_above=seqs_above)
    _measured_lengths_words(text, lengths_vary(data.manifest.workload))
    rate_run = data.manifest.workload.open_loop
    if finite(need[-1]):
        _top_level_words(text, data.concurrencies[-1], need[-1], occupancy[-1], observed[-1])
    full_at = _overcommit_words(text, pool, data.concurrencies, occupancy, rate_run=rate_run)
    if rate_run:
        _rate_need_words(text, need)
    hits = [data.server_value(c, "prefix_cache_hit_rate") for c in data.concurrencies]
    best_hits = _prefix_cache_words(text, data, pool, hits, th)
    if best_hits is not None:
        uses.append("server prefix-cache hits per level")
    close = [
        c
        for c, o in zip(data.concurrencies, occupancy, strict=True)
        if o >= th.kv_warning_occupancy
    ]
    return Finding(
        id="kv_ceiling",
        severity="warning" if close or seqs_above else "info",
        levels=close,
        numbers={
            "capacity_tokens": num(capacity, 0),
            "tokens_per_request": num(pool.per_req, 0),
            "ceiling": pool.ceiling,
            "ceiling_exact": num(pool.exact, 3),
            "occupancy": per_level(data, occupancy),
            "observed_kv_usage_max": per_level(data, observed),
            "full_at": full_at,
            "max_num_seqs": max_seqs,
            "prefix_cache_hit_rate": per_level(data, hits),
            "ceiling_is_lower_bound": best_hits is not None,
        },
        text=text.render(),
        data=uses,
    )


def _rate_need_words(text: Text, need: list[float]) -> None:
    """How a rate level's need is counted, or that it cannot be (no requests in flight known:
    an import whose send times are not the recording's own)."""
    if all(finite(n) for n in need):
        text.add(
            N_(
                "In this rate sweep a level's need is its requests in flight, measured from the "
                "trace (the time-weighted mean), times the tokens of one request."
            )
        )
    else:
        text.add(
            N_(
                "In this rate sweep a level's need is its requests in flight, and the trace does "
                "not say how many were in flight at some levels (their send times are not the "
                "recording's own): their occupancy is unknown."
            )
        )


def _prefix_cache_words(
    text: Text, data: RunFrames, pool: _Pool, hits: list[float], th: Thresholds
) -> float | None:
    """Requests whose prompts hit the prefix cache may share KV blocks (a prefix common to
    several requests is stored once): input + output is then an upper bound on each request's
    need. Say so, and where the hits fall away (the pool no longer holds what was cached).
    Returns the best hit rate when it matters, else None."""
    known = [(c, h) for c, h in zip(data.concurrencies, hits, strict=True) if finite(h)]
    if not known:
        return None
    best_c, best = max(known, key=lambda x: x[1])
    if best < th.prefix_cache_hit_share:
        return None
    text.add(
        N_(
            "The server's prefix cache served {hit} of the prompt tokens at C={c}: a prefix "
            "several requests share is stored once, so {per} tokens each is an upper bound on "
            "what they need, and the ceiling a lower bound."
        ),
        hit=Pct(best, 0),
        c=best_c,
        per=Num(pool.per_req, 0),
    )
    top_c, top = known[-1]
    if top_c != best_c and top < best * th.prefix_cache_collapse:
        text.add(
            N_(
                "By C={c} the hit rate is down to {hit}: the pool no longer holds what was "
                "cached, so each request prefills its whole prompt again."
            ),
            c=top_c,
            hit=Pct(top, 1),
        )
    return best


def _ceiling_missing(
    cap: tuple[float, str] | None, inp: float | None, out: float | None
) -> list[str]:
    missing = []
    if cap is None:
        missing.append(
            N_(
                "the KV cache capacity (--server-log with 'GPU KV cache size', or /metrics vllm:cache_config_info)"
            )
        )
    if inp is None or out is None:
        missing.append(N_("tokens per request (input and output lengths)"))
    return missing


def _ceiling_words(text: Text, pool: _Pool, max_seqs: Any, *, seqs_above: bool) -> None:
    """The ceiling itself, against --max-num-seqs."""
    sizes = {
        "ceiling": pool.ceiling,
        "cap": Num(pool.capacity, 0),
        "per": Num(pool.per_req, 0),
        "inp": Num(pool.inp, 0),
        "out": Num(pool.out, 0),
        "exact": Num(pool.exact, 1),
    }
    if seqs_above:
        text.add(
            N_(
                "The real concurrency ceiling is {ceiling}, not the {m} of --max-num-seqs: the KV cache holds "
                "{cap} tokens and each request needs {per} ({inp} in + {out} out); {cap} ÷ {per} = {exact}."
            ),
            m=Num(float(max_seqs), 0),
            **sizes,
        )
        return
    text.add(
        N_(
            "The KV cache holds {cap} tokens and each request needs {per} ({inp} in + {out} out): "
            "at most {ceiling} requests fit at once ({cap} ÷ {per} = {exact})."
        ),
        **sizes,
    )
    if finite(max_seqs):
        text.add(N_("--max-num-seqs {m} binds first."), m=Num(float(max_seqs), 0))


def _measured_lengths_words(text: Text, why: str | None) -> None:
    """Where one request's tokens are the measured means rather than the asked lengths, why."""
    if why == "turns":
        text.add(
            N_(
                "The tokens per request are the measured means (the prompt as the server counted "
                "it), not the asked lengths: each later turn of a conversation carries the whole "
                "history before it."
            )
        )
    elif why == "varied":
        text.add(
            N_(
                "The tokens per request are the measured means (the prompt as the server counted "
                "it): the lengths vary from request to request."
            )
        )


def _top_level_words(
    text: Text, top: int, need_top: float, occupancy_top: float, observed_top: float
) -> None:
    """What the top level asks of the pool, and what the server saw there."""
    if finite(observed_top):
        text.add(
            N_(
                "At C={c} the requests need {need} tokens, {occ} of the pool; the server's own peak KV usage "
                "there was {obs}."
            ),
            c=top,
            need=Num(need_top, 0),
            occ=Pct(occupancy_top),
            obs=Pct(observed_top),
        )
    else:
        text.add(
            N_("At C={c} the requests need {need} tokens, {occ} of the pool."),
            c=top,
            need=Num(need_top, 0),
            occ=Pct(occupancy_top),
        )


def _overcommit_words(
    text: Text, pool: _Pool, concurrencies: list[int], occupancy: list[float], *, rate_run: bool
) -> int | None:
    """From which level the pool is over-committed (returned), else whether twice the top level
    would be (a closed loop: twice the rate says nothing of the requests in flight)."""
    full_at = next((c for c, o in zip(concurrencies, occupancy, strict=True) if o >= 1.0), None)
    top = concurrencies[-1]
    if full_at is not None:
        text.add(
            N_(
                "From C={c} the pool is over-committed: requests beyond {ceiling} wait for KV room or are "
                "preempted."
            ),
            c=full_at,
            ceiling=pool.ceiling,
        )
    elif not rate_run and 2 * top > pool.exact:
        text.add(
            N_(
                "C={c} would need {need} tokens, {times} the pool: that many requests cannot run at once."
            ),
            c=2 * top,
            need=Num(2 * top * pool.per_req, 0),
            times=times(2 * top * pool.per_req / pool.capacity),
        )
    return full_at


# ---------------------------------------------------------------------------------------------
# 7. Memory headroom


@dataclass(frozen=True, kw_only=True)
class _MemoryAccounts:
    """The server log's memory accounting (bytes; each fact's value, or None)."""

    kv_mem: Any
    suggested: Any
    total: Any
    weights: Any
    non_torch: Any
    act: Any
    graphs: Any
    budget: Any
    util: Any


def _memory_accounts(data: RunFrames) -> _MemoryAccounts:
    value = data.fact
    return _MemoryAccounts(
        kv_mem=value("server.config.kv_cache_memory_bytes"),
        suggested=value("server.config.suggested_kv_cache_memory_bytes"),
        total=value("server.config.total_memory_bytes"),
        weights=value("server.config.weights_memory_bytes"),
        non_torch=value("server.config.non_torch_memory_bytes"),
        act=value("server.config.activation_peak_bytes"),
        graphs=value("server.config.cuda_graph_memory_bytes"),
        budget=value("server.config.memory_budget_bytes"),
        util=value("server.config.gpu_memory_utilization"),
    )


def memory_headroom(data: RunFrames, th: Thresholds) -> Finding:
    mem = _memory_accounts(data)
    uses = ["server log memory accounting"]
    cap = kv_capacity(data)
    inp, out = request_lengths(data)
    if not finite(mem.kv_mem) or cap is None:
        text = Text().add(
            N_(
                "The memory headroom cannot be computed: it needs the server log's memory accounting "
                "(KV cache memory and size)."
            )
        )
        return unknown(
            "memory_headroom",
            text,
            ["server log memory accounting (Available KV cache memory, GPU KV cache size)"],
            uses,
        )
    kv_mem = float(mem.kv_mem)
    capacity = cap[0]
    per_req = (inp or 0) + (out or 0)
    ceiling = int(capacity // per_req) if per_req else None
    text = Text()
    used = _memory_used_words(text, mem)
    resized = _resized_kv_memory(mem, used, th)
    if resized is None:
        text.add(
            N_(
                "Whether more memory could go to the KV cache cannot be told: the device's total memory or the "
                "server's --kv-cache-memory suggestion is missing."
            )
        )
        return Finding(
            id="memory_headroom",
            severity="unknown",
            text=text.render(),
            data=uses,
            numbers={"kv_cache_memory_bytes": num(mem.kv_mem, 0), "used_bytes": num(used, 0)},
            missing=["total device memory or the server's --kv-cache-memory suggestion"],
        )
    new_kv, source = resized
    extra = new_kv - kv_mem
    new_cap = capacity * new_kv / kv_mem
    new_ceiling = int(new_cap // per_req) if per_req else None
    if extra <= 0:
        text.add(
            N_("The KV cache already uses the memory there is: no headroom to lift the ceiling.")
        )
        severity = "info"
    else:
        _headroom_words(text, th, extra, source, new_kv, new_cap, (ceiling, new_ceiling))
        severity = "notice"
    uses.append("KV cache capacity")
    return Finding(
        id="memory_headroom",
        severity=severity,
        levels=[],
        numbers={
            "kv_cache_memory_bytes": num(mem.kv_mem, 0),
            "unused_bytes": num(max(extra, 0.0), 0),
            "suggested_kv_cache_memory_bytes": num(new_kv, 0),
            "source": source,
            "capacity_tokens": num(capacity, 0),
            "new_capacity_tokens": num(new_cap, 0),
            "ceiling": ceiling,
            "new_ceiling": new_ceiling,
            "used_bytes": num(used, 0),
            "total_memory_bytes": num(mem.total, 0),
            "budget_bytes": num(mem.budget, 0),
        },
        text=text.render(),
        data=uses,
    )


def _memory_used_words(text: Text, mem: _MemoryAccounts) -> float | None:
    """Where the memory goes (weights, activations, CUDA graphs, KV cache); returns the bytes in
    all, None when the accounting is incomplete."""
    parts = [mem.weights, mem.non_torch, mem.act, mem.graphs]
    if not (all(finite(p) or p is None for p in parts) and finite(mem.weights) and finite(mem.act)):
        return None
    graphs = float(mem.graphs) if finite(mem.graphs) else 0.0
    wn = float(mem.weights) + (float(mem.non_torch) if finite(mem.non_torch) else 0.0)
    used = wn + float(mem.act) + graphs + float(mem.kv_mem)
    budget_words = (
        Msg(
            N_(", against a budget of {b} GiB (gpu_memory_utilization {u})"),
            {"b": gib(float(mem.budget)), "u": Num(float(mem.util), 2)},
        )
        if finite(mem.budget) and finite(mem.util)
        else ""
    )
    total_words = (
        Msg(N_(" on a device of {t} GiB"), {"t": gib(float(mem.total))})
        if finite(mem.total)
        else ""
    )
    text.add(
        N_(
            "Memory: weights and non-torch {wn} GiB, peak activations {a} GiB, CUDA graphs {g} GiB and the "
            "KV cache {kv} GiB, {used} GiB in all{budget}{total}."
        ),
        wn=gib(wn),
        a=gib(float(mem.act)),
        g=gib(graphs),
        kv=gib(float(mem.kv_mem)),
        used=gib(used),
        budget=budget_words,
        total=total_words,
    )
    return used


def _resized_kv_memory(
    mem: _MemoryAccounts, used: float | None, th: Thresholds
) -> tuple[float, str] | None:
    """The KV cache memory the device allows, and where that figure comes from: the server's own
    suggestion, else the device's total less what the rest uses and a reserve."""
    if finite(mem.suggested) and float(mem.suggested) > 0:
        return float(mem.suggested), "server suggestion"
    if used is not None and finite(mem.total):
        new_kv = float(mem.total) - (used - float(mem.kv_mem)) - th.memory_reserve_bytes
        return new_kv, "estimate"
    return None


def _headroom_words(
    text: Text,
    th: Thresholds,
    extra: float,
    source: str,
    new_kv: float,
    new_cap: float,
    ceilings: tuple[int | None, int | None],
) -> None:
    """The memory left unused and what giving it to the KV cache would lift the ceiling to."""
    c0, c1 = (c if c is not None else "?" for c in ceilings)
    text.add(N_("{extra} GiB of GPU memory are not used for the KV cache."), extra=gib(extra))
    if source == "server suggestion":
        text.add(
            N_(
                "The server itself suggests --kv-cache-memory={b} ({g} GiB): that grows the pool to about "
                "{cap} tokens and lifts the concurrency ceiling from {c0} to {c1}, without touching "
                "gpu-memory-utilization."
            ),
            b=int(new_kv),
            g=gib(new_kv),
            cap=Num(round(new_cap, -2), 0),
            c0=c0,
            c1=c1,
        )
    else:
        text.add(
            N_(
                "Keeping {reserve} GiB free, the KV cache could grow to about {g} GiB (--kv-cache-memory={b}): "
                "about {cap} tokens, a concurrency ceiling of {c1} instead of {c0}."
            ),
            reserve=gib(th.memory_reserve_bytes),
            g=gib(new_kv),
            b=int(new_kv),
            cap=Num(round(new_cap, -2), 0),
            c0=c0,
            c1=c1,
        )
