"""The columnar cache (sweeper.store.cache): written by ``sweeper compact`` and by the first load
of a large trace set, read by the next, never trusted when it does not match its JSONL or its own
recorded hashes (rebuilt instead), never written into a folder nobody may write; and the memory
check that refuses a trace set too large to load before reading it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

import numpy as np
import pytest

from sweeper.analysis.summary import summarize
from sweeper.errors import ConfigError, TraceError
from sweeper.schema import REQUESTS_FILE
from sweeper.store import CACHE_DIR, compact_trace_set, load_trace_set, memory
from sweeper.store import cache as cache_module
from sweeper.store import loading as store_loading
from sweeper.store.cache import cache_dirs
from sweeper.store.files import TraceSetLock, read_manifest, write_manifest
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
    assert _rebuilt(folder, want).startswith(f"{folder / CACHE_DIR}: Expecting property name")
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
    edited_id = json.loads(edited.split("\n", 1)[0])["request_id"]
    cols = load_trace_set(folder, cache="always").columns
    assert cols.send_ns[cols.text["request_id"].index(edited_id)] == 7


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
        # `sweeper compact` needs what a first load as columns needs: refused here too, so
        # the fix is a machine with that much (named), not compacting here.
        compact = memory.columns_need(memory.measure([folder / REQUESTS_FILE]), parse=True)
        assert (
            f"`sweeper compact` it (which writes the columnar cache) on a machine with at least "
            f"{memory.gib(compact)} available" in message
        )
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


# ---------------------------------------------------------------------------------------------
# review findings: each test failed before its fix


def test_the_cache_key_is_hashed_from_the_bytes_parsed_not_a_second_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recorder appending a line between the key's read and the parse's read made a cache
    whose key described fewer requests than it held; the next load trusted it."""
    folder = _run(tmp_path)
    load_trace_set(folder, cache="always")
    path = folder / REQUESTS_FILE
    original = path.read_bytes()
    path.write_bytes(original + b"\n")  # the cache no longer matches: the next load parses
    last = json.loads(original.splitlines()[-1])
    last["request_id"] = "appended-while-loading"
    real_read = store_loading.read_cache

    def recorder_appends(*args: object, **kwargs: object) -> object:
        found = real_read(*args, **kwargs)  # type: ignore[arg-type]
        with path.open("ab") as fh:  # after the key was hashed, before the parse
            fh.write((json.dumps(last) + "\n").encode())
        return found

    monkeypatch.setattr(store_loading, "read_cache", recorder_appends)
    first = load_trace_set(folder, cache="always")
    monkeypatch.undo()
    monkeypatch.setenv("SWEEPER_CACHE_DIR", str(tmp_path / "user-cache"))
    assert first.cache.written == folder / CACHE_DIR
    assert "appended-while-loading" in first.columns.text["request_id"]
    meta = json.loads((folder / CACHE_DIR / "meta.json").read_text())
    grown = path.read_bytes()
    assert meta["files"] == [
        {"name": REQUESTS_FILE, "bytes": len(grown), "sha256": hashlib.sha256(grown).hexdigest()}
    ]
    path.write_bytes(original)  # back to fewer requests: the cache must not be trusted
    again = load_trace_set(folder, cache="always")
    assert again.cache.read is None and "key differs" in " ".join(again.cache.why)
    assert "appended-while-loading" not in again.columns.text["request_id"]
    assert again.count == load_trace_set(folder, cache="off").count


@pytest.mark.parametrize("how", ["status running", "lock held"])
def test_no_cache_is_written_into_a_trace_set_still_being_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, _own_user_cache: Path, how: str
) -> None:
    folder = _run(tmp_path)
    want = _summary(folder, cache="off")
    monkeypatch.setattr(store_loading, "CACHE_MIN_BYTES", 1)  # stands for a large recording
    lock = None
    if how == "status running":
        manifest = read_manifest(folder)
        manifest.status = "running"
        write_manifest(folder, manifest)
        want = _summary(folder, cache="off")
    else:
        lock = TraceSetLock(folder, "record it")
    try:
        ts = load_trace_set(folder)
    finally:
        if lock is not None:
            lock.release()
    assert ts.cache.written is None and not ts.has_objects  # still columns, in memory
    assert any("still being recorded" in why for why in ts.cache.why), ts.cache.why
    assert json.dumps(summarize(ts), sort_keys=True) == want
    assert not (folder / CACHE_DIR).exists() and not _own_user_cache.exists()


def test_in_place_edits_of_the_request_list_are_seen_by_the_columns(tmp_path: Path) -> None:
    folder = _run(tmp_path)
    ts = load_trace_set(folder)
    assert ts.has_objects
    _ = ts.columns
    ts.requests[0] = ts.requests[0].model_copy(update={"concurrency": 99})  # same id, same len
    assert 99 in ts.columns.concurrency.tolist()
    ts.requests.reverse()
    assert ts.columns.text["request_id"] == [r.request_id for r in ts.requests]
    ts.requests = [r.model_copy(update={"status": "error"}) for r in ts.requests]
    assert set(ts.columns.text["status"]) == {"error"}
    # A cached load: the objects made from the columns do not make the columns again.
    compact_trace_set(folder)
    cached = load_trace_set(folder)
    before = cached.columns
    _ = cached.requests
    assert cached.columns is before


def test_the_cache_redacts_secrets_and_keeps_the_request_files_mode(tmp_path: Path) -> None:
    folder = _run(tmp_path)
    path = folder / REQUESTS_FILE
    line = json.loads(path.read_text().splitlines()[-1])
    line.update(
        request_id="x",
        status="error",
        chunk_ns=[],
        chunk_tokens=[],
        error={
            "kind": "http",
            "http_status": 401,
            "message": "401 for https://bob:hunter2@gpu-box:8000/v1 api_key=sk-live-123",
        },
    )
    with path.open("a") as fh:  # a line from an older sweeper or another tool
        fh.write(json.dumps(line) + "\n")
    path.chmod(0o600)
    load_trace_set(folder, cache="always")
    place = folder / CACHE_DIR
    for written in place.iterdir():
        data = written.read_bytes()
        assert b"hunter2" not in data and b"sk-live-123" not in data, written.name
        assert stat.S_IMODE(written.stat().st_mode) == 0o600, written.name
    assert stat.S_IMODE(place.stat().st_mode) == 0o700
    cols = load_trace_set(folder).columns
    error = cols.text["error"][cols.text["request_id"].index("x")]
    assert error["message"] == "401 for https://gpu-box:8000/v1 api_key=***"


def test_two_writers_colliding_leave_no_old_copy_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _run(tmp_path)
    load_trace_set(folder, cache="always")
    with (folder / REQUESTS_FILE).open("a") as fh:
        fh.write("\n")  # the files changed: the cache is rewritten
    real = os.replace
    calls = []

    def racing(src: str | Path, dst: str | Path) -> None:
        real(src, dst)
        calls.append(dst)
        if len(calls) == 1:  # another writer's rename lands between our two
            shutil.copytree(Path(dst), Path(src))

    monkeypatch.setattr(cache_module.os, "replace", racing)
    ts = load_trace_set(folder, cache="always")
    monkeypatch.setattr(cache_module.os, "replace", real)
    assert f"{folder / CACHE_DIR}: cannot write (Directory not empty)" in ts.cache.why
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) == [CACHE_DIR]
    # What an interrupted write leaves is cleaned when the caches are removed.
    (folder / f"{CACHE_DIR}.old-1").mkdir()
    (folder / f"{CACHE_DIR}.x.tmp").mkdir()
    cache_module.remove_caches(folder)
    assert not [p.name for p in folder.iterdir() if p.name.startswith(CACHE_DIR)]


def test_a_change_to_the_readers_code_rebuilds_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _run(tmp_path)
    want = _summary(folder, cache="off")
    compact_trace_set(folder)
    meta = json.loads((folder / CACHE_DIR / "meta.json").read_text())
    assert meta["reader"] == cache_module.reader_fingerprint()
    monkeypatch.setattr(cache_module, "reader_fingerprint", lambda: "another reader")
    assert "written by another version of sweeper's reader" in _rebuilt(folder, want)


def test_the_reader_fingerprint_is_of_the_store_and_schema_sources() -> None:
    import sweeper.schema
    import sweeper.store

    here = Path(sweeper.store.__file__).parent
    digest = hashlib.sha256()
    for path in [*sorted(here.glob("*.py")), Path(sweeper.schema.__file__)]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    assert cache_module.reader_fingerprint() == digest.hexdigest()


def _cgroups(tmp_path: Path, proc_cgroup: str, files: dict[str, str]) -> tuple[Path, Path]:
    proc, root = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text(proc_cgroup)
    (proc / "meminfo").write_text("MemTotal: 99999999 kB\nMemAvailable: 8388608 kB\n")  # 8 GiB
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return proc, root


def test_the_memory_left_reads_this_process_cgroup_v2_less_its_reclaimable_cache(
    tmp_path: Path,
) -> None:
    proc, root = _cgroups(
        tmp_path,
        "0::/user.slice/job\n",
        {
            "user.slice/job/memory.max": f"{4 << 30}\n",
            "user.slice/job/memory.current": f"{3 << 30}\n",
            "user.slice/job/memory.stat": f"anon 1\ninactive_file {2 << 30}\nactive_file 5\n",
            "memory.max": "max\n",  # the root: no limit
        },
    )
    # 4 GiB limit, 3 GiB used of which 2 GiB reclaimable page cache: 3 GiB left (< 8 GiB).
    assert memory.available_bytes(proc=proc, cgroup_root=root) == 3 << 30
    assert memory.cgroup_room(proc=proc, cgroup_root=root) == 3 << 30


def test_the_memory_left_reads_this_process_cgroup_v1(tmp_path: Path) -> None:
    proc, root = _cgroups(
        tmp_path,
        "5:devices:/\n4:memory:/process_api/abc\n0::/\n",
        {
            "memory/process_api/abc/memory.limit_in_bytes": f"{2 << 30}\n",
            "memory/process_api/abc/memory.usage_in_bytes": f"{1 << 30}\n",
            "memory/process_api/abc/memory.stat": f"cache 9\ntotal_inactive_file {1 << 29}\n",
            "memory/memory.limit_in_bytes": "9223372036854771712\n",  # v1's "no limit"
            "memory/memory.usage_in_bytes": "123\n",
        },
    )
    assert memory.available_bytes(proc=proc, cgroup_root=root) == (2 << 30) - (1 << 29)
    # No limit anywhere: MemAvailable.
    (root / "memory/process_api/abc/memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert memory.available_bytes(proc=proc, cgroup_root=root) == 8 << 30


def test_sweeper_memory_bytes_reads_suffixes_and_names_a_bad_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for text, value in (("4G", 4 << 30), ("512MiB", 512 << 20), ("2e9", 2_000_000_000)):
        monkeypatch.setenv("SWEEPER_MEMORY_BYTES", text)
        assert memory.available_bytes() == value
    monkeypatch.setenv("SWEEPER_MEMORY_BYTES", "lots")
    with pytest.raises(ConfigError, match=r"SWEEPER_MEMORY_BYTES='lots' is not an amount"):
        memory.available_bytes()


def test_a_first_load_is_not_refused_for_a_summary_it_does_not_make(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parse estimate is what parsing holds (measured: docs/trace-schema.md), with no term
    for summarizing a level, which loading does not do."""
    folder = _run(tmp_path)
    size = memory.measure([folder / REQUESTS_FILE])
    parse = memory.columns_need(size, parse=True)
    assert memory.columns_need(size, parse=True, summarize=True) == (
        parse + size.chunks * memory.LEVEL_BYTES_PER_CHUNK
    )
    monkeypatch.setenv("SWEEPER_MEMORY_BYTES", str(parse))
    assert load_trace_set(folder, cache="always").count > 0
    monkeypatch.setenv("SWEEPER_MEMORY_BYTES", str(parse - 1))
    remove = folder / CACHE_DIR
    shutil.rmtree(remove)
    with pytest.raises(TraceError, match="too large to load here"):
        load_trace_set(folder, cache="always")
