"""Multi-turn conversations (``--sessions N --turns K``): each turn sends the conversation so
far (earlier user messages and the answers as they were received) and a new user message, so a
server with a prefix cache finds the history's blocks cached, as it would for a chat user.

Closed loop: C streams, each running one conversation at a time, turn after turn (with
``--think-time-ms`` between an answer and the next turn). Open loop: the conversations' first
turns arrive on the level's schedule; each later turn is due at the end of the previous one
plus the think time, and records that as its ``scheduled_ns`` (so a late start shows as client
queue). A failed turn leaves an empty answer in the history; the conversation goes on.

With ``--workers`` each conversation is run by one worker (its history is in that process).
A resumed level sends a conversation's missing turns; the history of turns recorded before the
resume is not in the trace set (it keeps no text), so those turns start from the turns sent
since.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from sweeper.record.client import RequestSpec
from sweeper.record.prompts import compose_turn, user_text
from sweeper.record.schedule import drive, sleep_until
from sweeper.schema import RequestTrace
from sweeper.units import NS_PER_MS

Send = Callable[[RequestSpec], Awaitable[tuple[RequestTrace, bool]]]
"""Send one spec: (its trace, whether to go on: False is the error-rate stop)."""


def conversations(specs: list[RequestSpec]) -> list[list[RequestSpec]]:
    """The specs grouped by conversation, turns in order (a spec without one stands alone)."""
    groups: list[list[RequestSpec]] = []
    by_session: dict[int, list[RequestSpec]] = {}
    for spec in specs:
        if spec.session is None:
            groups.append([spec])
        elif spec.session in by_session:
            by_session[spec.session].append(spec)
        else:
            by_session[spec.session] = [spec]
            groups.append(by_session[spec.session])
    for group in by_session.values():
        group.sort(key=lambda s: s.turn or 0)
    return groups


async def run_conversation(
    turns: list[RequestSpec],
    send: Send,
    *,
    clock: Callable[[], int],
    origin_ns: int,
    think_ms: float,
    first_due_ns: int | None = None,
    gate: asyncio.Semaphore | None = None,
) -> bool:
    """One conversation, turn after turn; False once ``send`` says stop. With ``first_due_ns``
    (open loop) each turn records when it was due: the first on the schedule, the next at the
    previous turn's end plus the think time."""
    history: list[tuple[str, str]] = []
    due = first_due_ns
    for spec in turns:
        if due is not None:
            await sleep_until(due, clock)
            spec.scheduled_ns = due - origin_ns
        elif history and think_ms:
            await asyncio.sleep(think_ms / 1000)
        user = user_text(spec)
        compose_turn(spec, history)
        if gate is None:
            trace, go_on = await send(spec)
        else:
            async with gate:
                trace, go_on = await send(spec)
        history.append((user, spec.answer or ""))
        spec.answer = None  # kept in the history only
        if not go_on:
            return False
        if due is not None:
            due = origin_ns + trace.send_ns + (trace.end_ns or 0) + round(think_ms * NS_PER_MS)
    return True


async def closed_conversations(
    groups: list[list[RequestSpec]],
    streams: int,
    send: Send,
    *,
    clock: Callable[[], int],
    origin_ns: int,
    think_ms: float,
) -> None:
    """C streams, each taking the next conversation when its last one ends."""
    todo = list(reversed(groups))

    async def stream() -> None:
        while todo:
            go_on = await run_conversation(
                todo.pop(), send, clock=clock, origin_ns=origin_ns, think_ms=think_ms
            )
            if not go_on:
                todo.clear()

    await asyncio.gather(*(stream() for _ in range(min(streams, len(groups)))))


async def open_conversations(
    groups: list[list[RequestSpec]],
    send: Send,
    *,
    clock: Callable[[], int],
    origin_ns: int,
    think_ms: float,
    cap: int | None = None,
) -> list[int]:
    """Each conversation starts when its first turn is due (``scheduled_ns`` set by the
    caller); returns the starts' lateness (:func:`~sweeper.record.schedule.drive`)."""
    gate = asyncio.Semaphore(cap) if cap else None
    stop = False

    async def launch(index: int, due: int) -> None:
        nonlocal stop
        go_on = await run_conversation(
            groups[index], send, clock=clock, origin_ns=origin_ns, think_ms=think_ms,
            first_due_ns=due, gate=gate,
        )  # fmt: skip
        stop = stop or not go_on

    groups.sort(key=lambda g: g[0].scheduled_ns or 0)
    due = [origin_ns + (g[0].scheduled_ns or 0) for g in groups]
    return await drive(due, launch, clock=clock, stopped=lambda: stop)
