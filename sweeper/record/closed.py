"""A closed loop of C streams, each sending its next request the moment its last one ends.

The order matters at hundreds of streams: when a request ends, its stream sends the next one
first and only then does the bookkeeping of the one that ended (the trace's line written, the
level's figures, the progress). All of a level's streams tend to end together (they started
together), so bookkeeping done first would delay the k-th stream's next send by k requests'
bookkeeping: a gap the server sees as less load, and that the recorder's TTFT does not hold but
the level's throughput does (docs/fidelity.md, "Where a request's time goes").

A failed request is settled before the next send (the error rate may stop the level); a trace
not settled yet when the loop is cancelled (Ctrl-C) is settled on the way out, so no ended
request goes unrecorded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from sweeper.record.client import RequestSpec
from sweeper.schema import RequestTrace

Send = Callable[[RequestSpec, Callable[[], None] | None], Awaitable[RequestTrace]]
"""Send one request; call the given function once it is on its way (``stream_request``'s
``on_sent``)."""


async def closed_loop(
    specs: list[RequestSpec],
    streams: int,
    send: Send,
    settle: Callable[[RequestTrace], bool],
    go: Callable[[], bool] | None = None,
    on_gap: Callable[[int], None] | None = None,
) -> None:
    """Send ``specs`` in order over ``streams`` streams. ``settle`` takes each ended request
    (write it, count it) and returns False to stop sending; ``go`` is asked before each send;
    ``on_gap`` gets each stream's *send gap*: from the recorder reading a request's last bytes
    to its next request's send (ns)."""
    queue = list(reversed(specs))

    async def stream() -> None:
        pending: RequestTrace | None = None

        def flush() -> None:
            nonlocal pending
            if pending is not None:
                trace, pending = pending, None
                if not settle(trace):
                    queue.clear()  # stop sending

        try:
            last_read: int | None = None
            while queue and (go is None or go()):
                spec = queue.pop()
                trace = await send(spec, flush)
                flush()  # (already done when the request got sent)
                if on_gap is not None and last_read is not None:
                    on_gap(trace.send_ns - last_read)
                if spec.read_end_ns is not None:
                    last_read = trace.send_ns + spec.read_end_ns
                pending = trace
                if trace.status != "ok":
                    flush()
        finally:
            flush()

    await asyncio.gather(*(stream() for _ in range(min(streams, len(specs)))))
