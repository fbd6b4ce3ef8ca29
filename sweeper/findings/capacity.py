"""Findings 6 and 7: the KV cache's real concurrency ceiling, and the memory left unused."""

from __future__ import annotations

import math

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
from sweeper.findings.frames import RunFrames, request_lengths
from sweeper.findings.model import Finding
from sweeper.i18n import N_
from sweeper.units import finite

# ---------------------------------------------------------------------------------------------
# 6. KV capacity: the real concurrency ceiling


def kv_capacity(data: RunFrames) -> tuple[float, str] | None:
    """KV cache capacity in tokens and where it came from."""
    tokens = data.fact("server.config.kv_cache_tokens")
    if finite(tokens) and tokens > 0:
        src = data.manifest.server.config.kv_cache_tokens
        return float(tokens), f"server.config.kv_cache_tokens ({src.source if src else '?'})"
    mem = data.fact("server.config.kv_cache_memory_bytes")
    per_token = data.fact("model.kv_bytes_per_token")
    if finite(mem) and finite(per_token) and per_token > 0:
        return float(mem) / float(per_token), "kv_cache_memory_bytes ÷ model.kv_bytes_per_token"
    return None


def kv_ceiling(data: RunFrames, th: Thresholds) -> Finding:
    cap = kv_capacity(data)
    inp, out = request_lengths(data)
    uses = ["workload input/output lengths"]
    missing = []
    if cap is None:
        missing.append(
            N_(
                "the KV cache capacity (--server-log with 'GPU KV cache size', or /metrics vllm:cache_config_info)"
            )
        )
    if inp is None or out is None:
        missing.append(N_("tokens per request (input and output lengths)"))
    if missing:
        text = Text().add(
            N_("The real concurrency ceiling cannot be computed: missing {missing}."),
            missing=Missing(missing),
        )
        return unknown("kv_ceiling", text, missing, uses)
    assert cap is not None and inp is not None and out is not None
    capacity, cap_source = cap
    uses.append(cap_source)
    per_req = inp + out
    exact = capacity / per_req
    ceiling = math.floor(exact)
    occupancy = [c * per_req / capacity for c in data.concurrencies]
    observed = [data.server_value(c, "kv_usage_max") for c in data.concurrencies]
    if any(finite(v) for v in observed):
        uses.append("server KV usage per level")
    max_seqs = data.fact("server.config.max_num_seqs")
    top = data.concurrencies[-1]
    text = Text()
    if finite(max_seqs) and float(max_seqs) > ceiling:
        text.add(
            N_(
                "The real concurrency ceiling is {ceiling}, not the {m} of --max-num-seqs: the KV cache holds "
                "{cap} tokens and each request needs {per} ({inp} in + {out} out); {cap} ÷ {per} = {exact}."
            ),
            ceiling=ceiling,
            m=Num(float(max_seqs), 0),
            cap=Num(capacity, 0),
            per=Num(per_req, 0),
            inp=Num(inp, 0),
            out=Num(out, 0),
            exact=Num(exact, 1),
        )
    else:
        text.add(
            N_(
                "The KV cache holds {cap} tokens and each request needs {per} ({inp} in + {out} out): "
                "at most {ceiling} requests fit at once ({cap} ÷ {per} = {exact})."
            ),
            ceiling=ceiling,
            cap=Num(capacity, 0),
            per=Num(per_req, 0),
            inp=Num(inp, 0),
            out=Num(out, 0),
            exact=Num(exact, 1),
        )
        if finite(max_seqs):
            text.add(N_("--max-num-seqs {m} binds first."), m=Num(float(max_seqs), 0))
    obs_top = observed[-1]
    if finite(obs_top):
        text.add(
            N_(
                "At C={c} the requests need {need} tokens, {occ} of the pool; the server's own peak KV usage "
                "there was {obs}."
            ),
            c=top,
            need=Num(top * per_req, 0),
            occ=Pct(occupancy[-1]),
            obs=Pct(obs_top),
        )
    else:
        text.add(
            N_("At C={c} the requests need {need} tokens, {occ} of the pool."),
            c=top,
            need=Num(top * per_req, 0),
            occ=Pct(occupancy[-1]),
        )
    full_at = next(
        (c for c, o in zip(data.concurrencies, occupancy, strict=True) if o >= 1.0), None
    )
    if full_at is not None:
        text.add(
            N_(
                "From C={c} the pool is over-committed: requests beyond {ceiling} wait for KV room or are "
                "preempted."
            ),
            c=full_at,
            ceiling=ceiling,
        )
    elif 2 * top > exact:
        text.add(
            N_(
                "C={c} would need {need} tokens, {times} the pool: that many requests cannot run at once."
            ),
            c=2 * top,
            need=Num(2 * top * per_req, 0),
            times=times(2 * top * per_req / capacity),
        )
    close = [
        c
        for c, o in zip(data.concurrencies, occupancy, strict=True)
        if o >= th.kv_warning_occupancy
    ]
    severity = "warning" if close or (finite(max_seqs) and float(max_seqs) > ceiling) else "info"
    return Finding(
        id="kv_ceiling",
        severity=severity,
        levels=close,
        numbers={
            "capacity_tokens": num(capacity, 0),
            "tokens_per_request": num(per_req, 0),
            "ceiling": ceiling,
            "ceiling_exact": num(exact, 3),
            "occupancy": per_level(data, occupancy),
            "observed_kv_usage_max": per_level(data, observed),
            "full_at": full_at,
            "max_num_seqs": max_seqs,
        },
        text=text.render(),
        data=uses,
    )


# ---------------------------------------------------------------------------------------------
# 7. Memory headroom


def memory_headroom(data: RunFrames, th: Thresholds) -> Finding:
    cfg = data.manifest.server.config
    value = data.fact
    kv_mem = value("server.config.kv_cache_memory_bytes")
    suggested = value("server.config.suggested_kv_cache_memory_bytes")
    total = value("server.config.total_memory_bytes")
    weights = value("server.config.weights_memory_bytes")
    non_torch = value("server.config.non_torch_memory_bytes")
    act = value("server.config.activation_peak_bytes")
    graphs = value("server.config.cuda_graph_memory_bytes")
    budget = value("server.config.memory_budget_bytes")
    util = value("server.config.gpu_memory_utilization")
    uses = ["server log memory accounting"]
    cap = kv_capacity(data)
    inp, out = request_lengths(data)
    if not finite(kv_mem) or cap is None:
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
    capacity = cap[0]
    per_req = (inp or 0) + (out or 0)
    ceiling = int(capacity // per_req) if per_req else None
    parts = [weights, non_torch, act, graphs]
    text = Text()
    used = None
    if all(finite(p) or p is None for p in parts) and finite(weights) and finite(act):
        wn = float(weights) + (float(non_torch) if finite(non_torch) else 0.0)
        used = wn + float(act) + (float(graphs) if finite(graphs) else 0.0) + float(kv_mem)
        budget_words = (
            Msg(
                N_(", against a budget of {b} GiB (gpu_memory_utilization {u})"),
                {"b": gib(float(budget)), "u": Num(float(util), 2)},
            )
            if finite(budget) and finite(util)
            else ""
        )
        total_words = (
            Msg(N_(" on a device of {t} GiB"), {"t": gib(float(total))}) if finite(total) else ""
        )
        text.add(
            N_(
                "Memory: weights and non-torch {wn} GiB, peak activations {a} GiB, CUDA graphs {g} GiB and the "
                "KV cache {kv} GiB, {used} GiB in all{budget}{total}."
            ),
            wn=gib(wn),
            a=gib(float(act)),
            g=gib(float(graphs) if finite(graphs) else 0.0),
            kv=gib(float(kv_mem)),
            used=gib(used),
            budget=budget_words,
            total=total_words,
        )
    source = None
    if finite(suggested) and float(suggested) > 0:
        new_kv = float(suggested)
        source = "server suggestion"
    elif used is not None and finite(total):
        new_kv = float(total) - (used - float(kv_mem)) - th.memory_reserve_bytes
        source = "estimate"
    else:
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
            numbers={"kv_cache_memory_bytes": num(kv_mem, 0), "used_bytes": num(used, 0)},
            missing=["total device memory or the server's --kv-cache-memory suggestion"],
        )
    extra = new_kv - float(kv_mem)
    new_cap = capacity * new_kv / float(kv_mem)
    new_ceiling = int(new_cap // per_req) if per_req else None
    if extra <= 0:
        text.add(
            N_("The KV cache already uses the memory there is: no headroom to lift the ceiling.")
        )
        severity = "info"
    else:
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
                c0=ceiling if ceiling is not None else "?",
                c1=new_ceiling if new_ceiling is not None else "?",
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
                c0=ceiling if ceiling is not None else "?",
                c1=new_ceiling if new_ceiling is not None else "?",
            )
        severity = "notice"
    uses.append("KV cache capacity")
    _ = cfg
    return Finding(
        id="memory_headroom",
        severity=severity,
        levels=[],
        numbers={
            "kv_cache_memory_bytes": num(kv_mem, 0),
            "unused_bytes": num(max(extra, 0.0), 0),
            "suggested_kv_cache_memory_bytes": num(new_kv, 0),
            "source": source,
            "capacity_tokens": num(capacity, 0),
            "new_capacity_tokens": num(new_cap, 0),
            "ceiling": ceiling,
            "new_ceiling": new_ceiling,
            "used_bytes": num(used, 0),
            "total_memory_bytes": num(total, 0),
            "budget_bytes": num(budget, 0),
        },
        text=text.render(),
        data=uses,
    )
