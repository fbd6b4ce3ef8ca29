"""The columnar cache (sweeper.store.cache): written by ``sweeper compact`` and by the first load
of a large trace set, read by the next, never trusted when it does not match its JSONL or its own
recorded hashes (rebuilt instead), never written into a folder nobody may write; and the memory
check that refuses a trace set too large to load before reading it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from sweeper.analysis.summary import summarize
from sweeper.errors import TraceError
from sweeper.schema import REQUESTS_FILE
from sweeper.store import CACHE_DIR, compact_trace_set, load_trace_set
from sweeper.store import loading as store_loading
from sweeper.store.cache import cache_dirs
from sweeper.testing import SyntheticLevel, write_synthetic_run

LEVELS = [
    SyntheticLevel(1, 40, 10, requests=6),
    SyntheticLevel(4, 60, 12, requests=12, stall_every=5, stall_ms=80),
]


@pytest.fixture(autouse=True)
def _own_user_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Caches that cannot go beside a trace set go here, never into the user's home."""
    where = tmp_path / "user-cache"
    monkeypatch.setenv("SWEEPER_CACHE_DIR", str(where))
    monkeypatch.delenv("SWEEPER_CACHE", raising=False)
    monkeypatch.delenv("SWEEPER_MEMORY_BYTES", raising=False)
    return where


def _run(tmp_path: Path, name: str = "run") -> Path:
    return write_synthetic_run(tmp_path, name, LEVELS, output_len=16)


def _summary(folder: Path, **kwargs: object) -> str:
    return json.dumps(summarize(load_trace_set(folder, **kwargs)), sort_keys=True)  # type: ignore[arg-type]


def test_a_small_trace_set_gets_no_cache_unless_compacted(tmp_path: Path) -> None:
    folder = _run(tmp_path)
    files = sorted(p.name for p in folder.iterdir())
    ts = load_trace_set(folder)
    assert ts.has_objects and ts.cache.read is None and ts.cache.written is None
    assert sorted(p.name for p in folder.iterdir()) == files  # nothing written
    compact_trace_set(folder)
    assert (folder / CACHE_DIR / "meta.json").exists()
    again = load_trace_set(folder)  # a cache exists: it is read, whatever the size
    assert again.cache.read == folder / CACHE_DIR and not again.has_objects


def test_a_large_trace_set_writes_its_cache_on_first_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _run(tmp_path)
    want = _summary(folder, cache="off")
    monkeypatch.setattr(store_loading, "CACHE_MIN_BYTES", 1)
    first = load_trace_set(folder)
    assert first.cache.written == folder / CACHE_DIR and first.cache.read is None
    second = load_trace_set(folder)
    assert second.cache.read == folder / CACHE_DIR and second.cache.written is None
    assert json.dumps(summarize(second), sort_keys=True) == want


def _rebuilt(folder: Path, want: str) -> str:
    """Load once (must rebuild: say why), then again (must read what was rebuilt)."""
    ts = load_trace_set(folder, cache="always")
    assert ts.cache.read is None and ts.cache.written is not None, ts.cache
    assert json.dumps(summarize(ts), sort_keys=True) == want
    assert load_trace_set(folder, cache="always").cache.read is not None
    return " ".join(ts.cache.why)


def test_a_truncated_cache_file_is_rebuilt(tmp_path: Path) -> None:
    folder = _run(tmp_path)
    want = _summary(folder, cache="off")
    compact_trace_set(folder)
    path = folder / CACHE_DIR / "chunk_ns.npy"
    path.write_bytes(path.read_bytes()[:-40])
    assert "chunk_ns.npy does not match its recorded size and SHA-256" in _rebuilt(folder, want)


def test_a_changed_byte_in_the_cache_is_rebuilt(tmp_path: Path) -> None:
    folder = _run(tmp_path)
    want = _summary(folder, cache="off")
    compact_trace_set(folder)
    path = folder / CACHE_DIR / "chunk_ns.npy"
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x01  # one chunk time, a few ns off: the size is the same
    stat = path.stat()
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert "chunk_ns.npy does not match" in _rebuilt(folder, want)
    # A cache whose meta.json is not JSON, or of another version, is rebuilt too.
    (folder / CACHE_DIR / "meta.json").write_text("{")
    assert _rebuilt(folder, want)
    meta = json.loads((folder / CACHE_DIR / "meta.json").read_text())
    meta["cache_version"] = 0
    (folder / CACHE_DIR / "meta.json").write_text(json.dumps(meta))
    assert "cache version 0" in _rebuilt(folder, want)


def test_a_changed_byte_in_the_jsonl_rebuilds_the_cache_even_with_its_time_put_back(
    tmp_path: Path,
) -> None:
    folder = _run(tmp_path)
    load_trace_set(folder, cache="always")
    path = folder / REQUESTS_FILE
    stat = path.stat()
    text = path.read_text()
    edited = text.replace('"send_ns":0,', '"send_ns":7,', 1)  # the same size
    assert edited != text and len(edited) == len(text)
    path.write_text(edited)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    want = _summary(folder, cache="off")
    assert "key differs" in _rebuilt(folder, want)
    assert load_trace_set(folder, cache="always").columns.send_ns.min() == 7 or "7" in want


def test_lines_appended_to_the_jsonl_rebuild_the_cache(tmp_path: Path) -> None:
    folder = _run(tmp_path)
    load_trace_set(folder, cache="always")
    path = folder / REQUESTS_FILE
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-3]))  # fewer requests: a different key
    want = _summary(folder, cache="off")
    assert "key differs" in _rebuilt(folder, want)
    assert load_trace_set(folder).count == len(lines) - 3


def test_a_folder_nobody_may_write_is_never_written(tmp_path: Path, _own_user_cache: Path) -> None:
    """Shared data mounted read-only (r-x for all) stays untouched even for root: the cache goes
    to the user's cache folder, and with that one read-only too, nowhere."""
    folder = _run(tmp_path)
    want = _summary(folder, cache="off")
    before = sorted(p.name for p in folder.iterdir())
    folder.chmod(0o555)
    try:
        ts = load_trace_set(folder, cache="always")
        assert sorted(p.name for p in folder.iterdir()) == before
        assert ts.cache.written == cache_dirs(folder)[1]
        assert str(ts.cache.written).startswith(str(_own_user_cache))
        assert load_trace_set(folder, cache="always").cache.read == cache_dirs(folder)[1]
        assert json.dumps(summarize(ts), sort_keys=True) == want
        # No place at all: loaded from the JSONL, nothing written, the same numbers.
        for place in _own_user_cache.iterdir():
            for f in place.iterdir():
                f.unlink()
            place.rmdir()
        _own_user_cache.chmod(0o555)
        bare = load_trace_set(folder, cache="always")
        assert bare.cache.written is None and bare.cache.read is None
        assert any("not writable" in why for why in bare.cache.why)
        assert json.dumps(summarize(bare), sort_keys=True) == want
        assert list(_own_user_cache.iterdir()) == []
    finally:
        folder.chmod(0o755)
        _own_user_cache.chmod(0o755)


def test_sweeper_cache_off_reads_and_writes_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _run(tmp_path)
    monkeypatch.setenv("SWEEPER_CACHE", "off")
    ts = load_trace_set(folder, cache="always")
    assert not (folder / CACHE_DIR).exists() and ts.cache.why == ["SWEEPER_CACHE=off"]
    monkeypatch.delenv("SWEEPER_CACHE")
    assert json.dumps(summarize(ts), sort_keys=True) == _summary(folder, cache="off")


def test_a_trace_set_too_large_for_memory_is_refused_before_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _run(tmp_path)
    with (folder / REQUESTS_FILE).open("a") as fh:
        fh.write('{"not": "a request"}\n')  # were it read, this line would be the error
    monkeypatch.setenv("SWEEPER_MEMORY_BYTES", "2000")
    for policy in ("off", "always"):
        with pytest.raises(TraceError) as refused:
            load_trace_set(folder, cache=policy)  # type: ignore[arg-type]
        message = str(refused.value)
        assert "too large to load here" in message and "nothing was read" in message
        assert "chunks in" in message and "needs about" in message and "is available" in message
        assert "sweeper compact" in message and "more memory" in message
    assert not (folder / CACHE_DIR).exists()


def test_making_the_objects_of_a_large_trace_set_is_refused_not_half_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _run(tmp_path)
    ts = load_trace_set(folder, cache="always")
    assert not ts.has_objects
    summary = summarize(ts)  # the columns need little
    monkeypatch.setenv("SWEEPER_MEMORY_BYTES", "1000")
    with pytest.raises(TraceError, match=r"Python objects needs about .* read them as columns"):
        _ = ts.requests
    assert not ts.has_objects
    monkeypatch.delenv("SWEEPER_MEMORY_BYTES")
    assert len(ts.requests) == ts.count == sum(lv["requests"] for lv in summary["levels"])


def test_columns_round_trip_every_field(tmp_path: Path) -> None:
    """Errors, server timings, schedules, turns: the objects made from the cache are the ones
    parsed from the JSONL, and the requests without chunks carry every other field."""
    from sweeper.schema import RequestError, RequestTrace
    from sweeper.store import write_trace_set
    from sweeper.testing import synthetic_manifest

    requests = [
        RequestTrace(
            concurrency=2,
            request_id="a",
            send_ns=5,
            end_ns=90,
            chunk_ns=[10, 20, 20],
            chunk_tokens=[1, 3, 1],
            prompt_tokens=7,
            completion_tokens=5,
            finish_reason="stop",
            server_timing={"prompt_ms": 1.5, "predicted_n": float("nan")},
            scheduled_ns=1,
            session=3,
            turn=2,
            asked_input_tokens=7,
            asked_output_tokens=5,
            worker=1,
        ),
        RequestTrace(
            concurrency=2,
            request_id="b",
            send_ns=9,
            end_ns=4,
            status="error",
            error=RequestError(kind="http", http_status=429, message="Too Many Requests ✗"),
        ),
        RequestTrace(
            concurrency=2, request_id="c", send_ns=1, phase="warmup", ttft_ns=3, e2el_ns=9
        ),
    ]
    folder = write_trace_set(
        tmp_path / "rt", synthetic_manifest("rt", [SyntheticLevel(2, 1, 1)]), requests
    )
    old = load_trace_set(folder, cache="off")
    load_trace_set(folder, cache="always")
    new = load_trace_set(folder, cache="always")
    assert new.cache.read is not None
    heads = new.without_chunks().requests
    got = new.requests
    for a, b, h in zip(old.requests, got, heads, strict=True):
        timing_a, timing_b = a.server_timing or {}, b.server_timing or {}
        assert a.model_copy(update={"server_timing": None}) == b.model_copy(
            update={"server_timing": None}
        )
        assert list(timing_a) == list(timing_b)
        assert np.allclose(list(timing_a.values()), list(timing_b.values()), equal_nan=True)
        assert h.chunk_ns == [] and h.request_id == a.request_id and h.error == a.error
        assert h.model_copy(update={"server_timing": None}) == a.model_copy(
            update={"server_timing": None, "chunk_ns": [], "chunk_tokens": []}
        )


def test_what_the_reader_leaves_out_is_left_out_and_said_the_same_from_the_cache(
    tmp_path: Path,
) -> None:
    """Repeats, impossible times, a request id twice in a level, per-worker files, a compacted
    file beside a plain one and a truncated last line: the same requests, the same problems
    (same words, same order) with the cache as without, when it is written and when it is read."""
    folder = _run(tmp_path)
    path = folder / REQUESTS_FILE
    lines = path.read_text().splitlines(keepends=True)
    bad_times = json.loads(lines[2])
    bad_times["request_id"], bad_times["chunk_ns"] = "x-bad", [5, 3] + [9] * 14
    again = json.loads(lines[3])
    again["send_ns"] += 1  # the same id in the same level: a copy, left out
    worker = folder / "requests.w1.jsonl"
    worker.write_text(lines[4] + json.dumps(bad_times) + "\n" + json.dumps(again) + "\n")
    compact_trace_set(folder)  # requests.jsonl.gz, holding everything so far
    # More impossible lines than are named one by one, a repeat, a truncated last line.
    extra = [json.dumps({**bad_times, "request_id": f"x-{i}"}) + "\n" for i in range(25)]
    path.write_text(lines[0] + "".join(extra) + lines[1][:-20])
    old = load_trace_set(folder, cache="off")
    assert len(old.problems) >= 4 and any("truncated" in p for p in old.problems)
    assert any("appeared twice" in p for p in old.problems)
    assert any("more lines like these" in p for p in old.problems)
    for _ in range(2):
        new = load_trace_set(folder, cache="always")
        assert new.problems == old.problems
        assert new.requests == old.requests
    assert new.cache.read is not None
