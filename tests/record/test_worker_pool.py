"""The driver's side of the workers (:class:`WorkerPool`) over an in-memory transport: what a
worker lost mid-level leaves (its requests in flight fail as ``worker_lost``, the rest go to the
others, a conversation it had begun fails whole), and the clock offset from round trips. The
real transports are tested end to end (tests/record/test_ray.py, test_recorder.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sweeper.errors import SweeperError
from sweeper.record.client import RequestSpec
from sweeper.record.ray_pool import _Sample, best_offset
from sweeper.record.workers import LevelJob, Message, WorkerLost, WorkerPool
from sweeper.schema import RequestTrace


def test_the_fastest_round_trip_gives_the_offset() -> None:
    samples = [
        _Sample(before_ns=1_000, worker_ns=5_900, after_ns=3_000),  # 2 us round trip
        _Sample(before_ns=10_000, worker_ns=15_250, after_ns=10_400),  # 0.4 us: kept
        _Sample(before_ns=20_000, worker_ns=26_000, after_ns=21_000),
    ]
    assert best_offset(samples) == (15_250 - 10_200, 200)


class FakeTransport:
    """Workers that finish their jobs' first ``finish`` requests each, then (worker 0) die."""

    workers_write = False
    lead_ns = 0

    def __init__(self, count: int, finish: int, lose: int | None) -> None:
        self.count = count
        self.finish = finish
        self.lose = lose
        self.jobs: list[tuple[int, LevelJob]] = []
        self.queue: list[Message] = []
        self.lost_once = False

    async def start(self) -> None:
        pass

    async def origins(self, key: int) -> list[int]:
        return [0] * self.count

    def submit(self, index: int, job: LevelJob) -> None:
        self.jobs.append((index, job))
        if not job.specs:  # a level's connections opened ahead: never lost here
            self.queue.append(("job_done", index, job.job_id, [9.9], _state(), []))
            return
        done = job.specs if index != self.lose or self.lost_once else job.specs[: self.finish]
        for spec in done:
            trace = RequestTrace(concurrency=spec.concurrency, request_id=spec.request_id,
                                 send_ns=1, end_ns=2, worker=index)  # fmt: skip
            self.queue.append(("trace", index, trace.model_dump_json(), spec.request_id))
        if index != self.lose or self.lost_once:
            self.queue.append(("job_done", index, job.job_id, [], _state(), []))

    def stop_sending(self, stop: bool) -> None:
        pass

    def where(self, index: int) -> str:
        return f"node n{index}"

    async def receive(self) -> list[Message]:
        if self.queue:
            out, self.queue = self.queue, []
            return out
        if self.lose is not None and not self.lost_once:
            self.lost_once = True
            mine = next(job for i, job in self.jobs if i == self.lose and job.specs)
            in_flight = {s.request_id: 5 for s in mine.specs[self.finish : self.finish + 2]}
            raise WorkerLost(self.lose, self.where(self.lose), "killed", in_flight=in_flight)
        await asyncio.sleep(0)
        raise AssertionError("the pool waits on a transport with nothing left to say")

    def close(self, *, cancel: bool) -> None:
        pass


def _state() -> Any:
    from sweeper.record.stamps import StampStats

    return StampStats().state()


def _specs(n: int, level: int = 4, sessions: int | None = None) -> list[RequestSpec]:
    out = []
    for i in range(n):
        spec = RequestSpec(f"c{level}-{i:05d}", level, "measured", {})
        if sessions:
            spec.session, spec.turn = i % sessions, i // sessions + 1
        out.append(spec)
    return out


async def test_a_lost_worker_fails_what_it_had_in_flight_and_hands_on_the_rest() -> None:
    transport = FakeTransport(count=2, finish=3, lose=0)
    warnings: list[str] = []
    written: list[RequestTrace] = []
    pool = WorkerPool(transport, warnings.append, write=written.append)
    seen: list[RequestTrace] = []
    specs = _specs(20)
    await pool.run_level("u", "completions", 4, specs, lambda t: seen.append(t) or True)
    ids = [t.request_id for t in seen]
    assert sorted(ids) == sorted(s.request_id for s in specs) and len(ids) == len(set(ids))
    lost = [t for t in seen if t.status == "error"]
    assert len(lost) == 2 and all(t.error and t.error.kind == "worker_lost" for t in lost)
    assert all(t.worker == 0 and t.send_ns == 5 for t in lost)
    assert all("node n0" in (t.error.message if t.error else "") for t in lost)
    # The rest of worker 0's share (10 - 3 done - 2 in flight) went to worker 1, streams too.
    handed = [job for index, job in transport.jobs if job.job_id > 3]  # 0-1 connect, 2-3 deal
    assert [(job.streams, len(job.specs)) for job in handed] == [(2, 5)]
    assert written == seen and pool.lost and "5 requests not sent yet" in warnings[0]


async def test_every_worker_opens_its_connections_before_any_sends() -> None:
    """A closed level first asks each worker to open the connections its share will use (one
    per stream, or per conversation where fewer) and deals the requests only once all have;
    the connecting does not count in the level's figures. A rate level opens on demand."""
    transport = FakeTransport(count=2, finish=0, lose=None)
    pool = WorkerPool(transport, lambda _: None)
    result = await pool.run_level("u", "completions", 5, _specs(20), lambda _: True)
    kinds = [(index, job.connections, len(job.specs)) for index, job in transport.jobs]
    assert kinds == [(0, 3, 0), (1, 2, 0), (0, 0, 12), (1, 0, 8)]
    assert 9.9 not in result.lag_ms and len(result.stamps) == 2
    transport.jobs.clear()
    await pool.run_level("u", "chat", 4, _specs(6, sessions=3), lambda _: True, think_ms=0.0)
    assert [job.connections for _, job in transport.jobs if not job.specs] == [2, 1]
    transport.jobs.clear()
    await pool.run_level("u", "completions", 1, _specs(4), lambda _: True, open_loop=True)
    assert all(job.specs and job.connections == 0 for _, job in transport.jobs)


async def test_a_conversation_begun_on_a_lost_worker_fails_whole() -> None:
    transport = FakeTransport(count=2, finish=1, lose=0)
    pool = WorkerPool(transport, lambda _: None)
    seen: list[RequestTrace] = []
    specs = _specs(16, sessions=4)  # conversations 0-3, 4 turns each
    await pool.run_level("u", "chat", 2, specs, lambda t: seen.append(t) or True, think_ms=0.0)
    assert len(seen) == len({t.request_id for t in seen}) == 16
    failed = {t.session for t in seen if t.status == "error"}
    assert failed and all(t.status == "error" for t in seen if t.session in failed), (
        "a conversation went on elsewhere without its earlier turns"
    )


async def test_no_worker_left_is_an_error_naming_the_loss() -> None:
    transport = FakeTransport(count=1, finish=0, lose=0)
    pool = WorkerPool(transport, lambda _: None)
    with pytest.raises(SweeperError, match="no recorder worker is left"):
        await pool.run_level("u", "completions", 2, _specs(4), lambda _: True)


def test_ray_missing_is_a_config_error_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from sweeper.errors import ConfigError
    from sweeper.record.ray_pool import _ray

    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    with pytest.raises(ConfigError, match=r"pip install 'sweeper\[ray\]'"):
        _ray()
