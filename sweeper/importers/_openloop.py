"""Open-loop levels of an imported run: one level per offered request rate.

A rate level's key is its 1-based position among the sorted rates (``inf``, everything sent at
once, last), as for ``sweeper record --request-rate`` (docs/trace-schema.md). This module turns a
tool's rates into those keys and the workload fields, and, where the tool kept no send times,
lays the requests out on the offered schedule when that schedule can be known without guessing.

::

    keys = rate_keys([4.0, 1.0, inf])           # {1.0: 1, 4.0: 2, inf: 3}
    arrivals = known_arrivals_ns(24, 4.0, "constant")   # 0, 250 ms, 500 ms ...
    sends = capped_sends_ns(arrivals, durations, cap=8)  # each waits for one of 8 slots
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Literal

from sweeper.schema import Workload
from sweeper.units import NS_PER_S

INF = math.inf
Load = Literal["concurrency", "rate"]
Arrival = Literal["poisson", "constant", "gamma"]


def rate_keys(rates: Sequence[float]) -> dict[float, int]:
    """Each distinct rate's level key: its 1-based position in ascending order, ``inf`` last."""
    return {rate: key for key, rate in enumerate(sorted(set(rates)), start=1)}


def arrival_of(burstiness: float | None) -> Arrival | None:
    """vLLM's arrival process from its ``--burstiness``: 1 is Poisson, infinity a constant gap
    (vLLM's own limit case), any other positive value gamma-distributed gaps."""
    if burstiness is None:
        return None
    if burstiness == 1:
        return "poisson"
    if math.isinf(burstiness):
        return "constant"
    return "gamma"


def known_arrivals_ns(count: int, rate: float, arrival: Arrival | None) -> list[int] | None:
    """When each of ``count`` requests was due, ns after the level's first arrival, where the
    schedule is fixed by the rate alone: all at once (``inf``) or evenly spaced (constant).
    None for random arrivals (Poisson, gamma): their draws were never saved."""
    if math.isinf(rate):
        return [0] * count
    if arrival == "constant":
        return [round(i * NS_PER_S / rate) for i in range(count)]
    return None


def mean_arrivals_ns(count: int, rate: float) -> list[int]:
    """Evenly spaced at the offered rate: the mean of a random schedule, used only to lay out
    requests whose real arrivals are unknown (and said so)."""
    return [round(i * NS_PER_S / rate) for i in range(count)]


def capped_sends_ns(
    arrivals_ns: Sequence[int], durations_ns: Sequence[int], cap: int | None
) -> list[int]:
    """Send times of requests that arrive at ``arrivals_ns`` (in order) and are sent at once,
    or, under a cap of ``cap`` requests in flight, when the earliest of the busy slots frees up
    (first come, first served, as a semaphore does)."""
    if cap is None:
        return list(arrivals_ns)
    free = [0] * max(cap, 1)  # when each slot is next free
    sends = []
    for arrival, duration in zip(arrivals_ns, durations_ns, strict=True):
        slot = min(range(len(free)), key=free.__getitem__)
        send = max(arrival, free[slot])
        sends.append(send)
        free[slot] = send + max(int(duration), 0)
    return sends


def rate_workload(
    rates: Mapping[int, float],
    requests: Mapping[int, int],
    *,
    arrival: Arrival | None,
    burstiness: float | None,
    max_concurrency: int | None,
    prompt_source: str | None,
) -> Workload:
    """The workload of an imported rate sweep: ``rates`` and ``requests`` keyed by level key."""
    keys = sorted(rates)
    return Workload(
        load="rate",
        concurrency_levels=keys,
        request_rates={str(k): float(rates[k]) for k in keys},
        requests_per_level={str(k): int(requests[k]) for k in keys if k in requests},
        arrival=arrival,
        burstiness=burstiness,
        max_concurrency=max_concurrency,
        prompt_source=prompt_source,
    )


def rate_words(rate: float) -> str:
    """A rate as the notes say it: ``4 req/s``, ``all at once``."""
    return "all at once" if math.isinf(rate) else f"{rate:g} req/s"


def cap_words(cap: int | None) -> str:
    """A level's --max-concurrency as the notes say it: ``64``, ``no cap``."""
    return "no cap" if cap is None else str(cap)


def one_value(values: Sequence[float | int | None]) -> tuple[bool, float | int | None]:
    """(True, the value) when every level gave the same one, else (False, None)."""
    distinct = set(values)
    if len(distinct) == 1:
        return True, next(iter(distinct))
    return False, None
