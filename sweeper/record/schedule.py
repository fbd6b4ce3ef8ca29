"""Open-loop load (``--request-rate``): when each request of a rate level is due, and the driver
that sends it then, whatever the server does.

A closed loop sends a stream's next request when its last one ends, so a slow server slows the
offered load and the wait a real user would have had is never measured. An open loop draws the
arrival times first (:func:`arrival_offsets`: Poisson, constant or gamma gaps, seeded) and keeps
them: :func:`drive` wakes at each due time on the run's monotonic clock (absolute times, so no
sleep's lateness adds to the next one) and starts the request at once. A request that must wait
(``--max-concurrency``, a slot held by an earlier one) waits *after* its due time, so its
``send_ns - scheduled_ns`` is the client's queue, not hidden.

The driver's own lateness (how long after its due time a request was started, slot waits left
out) is returned for the recorder's self-check: a loop too busy to keep the schedule says so.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Literal

from sweeper.errors import ConfigError
from sweeper.record.client import RequestSpec
from sweeper.units import NS_PER_S

Arrival = Literal["poisson", "constant", "gamma"]
ARRIVALS: tuple[Arrival, ...] = ("poisson", "constant", "gamma")
MAX_RATE = 1_000_000.0  # requests/s: far past what one client can send
# Sleep until this close to a due time, then yield to the loop until it comes: the loop's timers
# fire up to a millisecond late (epoll and libuv count milliseconds), which a rate of hundreds of
# requests per second would notice.
SPIN_NS = 1_000_000

Launch = Callable[[int, int], Coroutine[Any, Any, None]]
"""``launch(index, due_ns)``: run job ``index``, due at ``due_ns`` on the clock."""


def parse_rates(text: str) -> list[float]:
    """``"1,2,4,inf"`` -> ``[1.0, 2.0, 4.0, inf]``: positive numbers of requests/s (``inf``: all
    at once), sorted ascending; ConfigError naming ``--request-rate`` and the fix otherwise."""
    rates: list[float] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            rate = float(part)
        except ValueError:
            rate = math.nan
        if math.isnan(rate) or rate <= 0:
            raise ConfigError(
                f"--request-rate {part!r} is not a positive number of requests per second "
                "(e.g. --request-rate 1,2,4,8,inf; inf sends a level's requests all at once)"
            )
        if rate != math.inf and rate > MAX_RATE:
            raise ConfigError(
                f"--request-rate {part} is above {MAX_RATE:,.0f} requests/s; use inf for all at once"
            )
        if rate in rates:
            raise ConfigError(f"--request-rate {part} is listed twice in {text!r}")
        rates.append(rate)
    if not rates:
        raise ConfigError(f"no rates in --request-rate {text!r} (e.g. --request-rate 1,2,4,inf)")
    return sorted(rates)


def check_burstiness(arrival: str, burstiness: float) -> None:
    """ConfigError for a gamma shape that is not positive, or one given to another arrival."""
    if arrival not in ARRIVALS:
        raise ConfigError(f"--arrival {arrival!r}: use one of {', '.join(ARRIVALS)}")
    if not burstiness > 0 or burstiness == math.inf:
        raise ConfigError(
            f"--burstiness {burstiness:g} must be a positive number: the gamma shape of the gaps "
            "between arrivals (1 = Poisson, below 1 burstier, above 1 steadier), e.g. "
            "--arrival gamma --burstiness 0.5"
        )
    if arrival != "gamma" and burstiness != 1.0:
        raise ConfigError(
            f"--burstiness {burstiness:g} shapes gamma arrivals: add --arrival gamma (Poisson "
            "is gamma with burstiness 1)"
        )


def arrival_offsets(
    count: int, rate: float, arrival: str, burstiness: float, rng: random.Random
) -> list[int]:
    """Due times (ns after the level's start) of ``count`` requests at ``rate`` requests/s: the
    first at 0, then gaps exponential (Poisson), equal (constant) or gamma with shape
    ``burstiness`` (coefficient of variation 1/sqrt(shape)). The gaps are scaled to span
    exactly (count - 1) / rate seconds, so a level sends at its offered rate however short it
    is: for Poisson arrivals this is the process given its count (uniform order statistics),
    for gamma ones the same Dirichlet conditioning. ``inf``: all at 0."""
    if rate == math.inf:
        return [0] * count
    mean_s = 1.0 / rate
    if arrival == "constant":
        gaps = [mean_s] * (count - 1)
    elif arrival == "gamma":
        gaps = [rng.gammavariate(burstiness, mean_s / burstiness) for _ in range(count - 1)]
    else:
        gaps = [rng.expovariate(rate) for _ in range(count - 1)]
    total = sum(gaps)
    scale = (count - 1) * mean_s / total if total > 0 else 1.0
    offsets = [0] * min(count, 1)
    t_s = 0.0
    for gap in gaps:
        t_s += gap * scale
        offsets.append(round(t_s * NS_PER_S))
    return offsets


def arrival_rng(seed: int, key: int, rate: float) -> random.Random:
    """The seeded generator of one level's arrivals: the same run draws the same schedule."""
    return random.Random(f"sweeper-arrivals-{seed}-{key}-{rate!r}")


async def sleep_until(due_ns: int, clock: Callable[[], int]) -> None:
    """Return at ``due_ns`` on ``clock`` (monotonic ns), not before; see :data:`SPIN_NS`."""
    while True:
        left = due_ns - clock()
        if left <= 0:
            return
        await asyncio.sleep((left - SPIN_NS) / NS_PER_S if left > SPIN_NS else 0)


async def drive(
    due_ns: list[int],
    launch: Launch,
    *,
    clock: Callable[[], int],
    stopped: Callable[[], bool] = lambda: False,
) -> list[int]:
    """Start job ``i`` at ``due_ns[i]`` (ascending, on ``clock``) as its own task, until the list
    ends or ``stopped()``; wait for every job started. Returns each start's lateness (ns after
    its due time). Cancelled (Ctrl-C), it cancels the jobs under way first."""
    tasks: set[asyncio.Task[None]] = set()
    late: list[int] = []

    async def start(index: int, due: int) -> None:
        # Measured when the task first runs: a loop busy with other streams delays that too.
        late.append(max(clock() - due, 0))
        await launch(index, due)

    try:
        for index, due in enumerate(due_ns):
            await sleep_until(due, clock)
            if stopped():
                break
            task = asyncio.create_task(start(index, due))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    return late


def resumed_offsets(offsets: list[int]) -> list[int]:
    """The due times of a resumed level's missing requests: their own offsets, shifted so the
    first of them is due at once (the gaps between them are kept)."""
    if not offsets:
        return []
    first = min(offsets)
    return [o - first for o in offsets]


async def send_on_schedule(
    specs: list[RequestSpec],
    send: Callable[[RequestSpec], Awaitable[bool]],
    *,
    origin_ns: int,
    clock: Callable[[], int],
    cap: int | None = None,
) -> list[int]:
    """Send each spec at its ``scheduled_ns`` (after ``origin_ns``; ascending), at most ``cap``
    in flight (a request due while all are busy waits for a slot: its client queue). ``send``
    returns False to stop starting requests (the error-rate stop). Returns :func:`drive`'s
    lateness."""
    gate = asyncio.Semaphore(cap) if cap else None
    stop = False

    async def launch(index: int, _due: int) -> None:
        nonlocal stop
        spec = specs[index]
        if gate is None:
            ok = await send(spec)
        else:
            async with gate:
                if stop:
                    return
                ok = await send(spec)
        stop = stop or not ok

    due = [origin_ns + (spec.scheduled_ns or 0) for spec in specs]
    return await drive(due, launch, clock=clock, stopped=lambda: stop)
