"""The one writer and the one reader: round trip, and every way a trace set on disk can be bad."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from sweeper.errors import SchemaVersionError, TraceError, TraceFormatError
from sweeper.schema import (
    MANIFEST_FILE,
    METRICS_FILE,
    REQUESTS_FILE,
    MetricSample,
    RequestTrace,
    RunManifest,
    Series,
    Target,
)
from sweeper.store import (
    CACHE_DIR,
    TraceSetLock,
    TraceSetWriter,
    compact_trace_set,
    discover_trace_sets,
    load_trace_set,
    read_manifest,
    resolve_run,
    write_manifest,
    write_trace_set,
)
from sweeper.testing import (
    SyntheticLevel,
    synthetic_manifest,
    synthetic_requests,
    write_synthetic_run,
)

LEVELS = [
    SyntheticLevel(1, ttft_ms=20, itl_ms=15, requests=3),
    SyntheticLevel(4, ttft_ms=40, itl_ms=16, requests=6),
]


def _write_incremental(folder: Path) -> tuple[RunManifest, list[RequestTrace]]:
    manifest = synthetic_manifest("inc", LEVELS, output_len=8)
    requests = synthetic_requests(LEVELS, output_len=8)
    with TraceSetWriter(folder) as writer:
        writer.write_manifest(manifest)
        for trace in requests:
            writer.append_request(trace)
        writer.append_metrics(
            MetricSample(
                t_ns=5,
                url="http://127.0.0.1:8000/metrics",
                series=[
                    Series(name="vllm:num_requests_running", labels={"engine": "0"}, value=2.0)
                ],
            )
        )
    return manifest, requests


def test_round_trip_keeps_every_field(tmp_path: Path) -> None:
    manifest, requests = _write_incremental(tmp_path / "inc")
    ts = load_trace_set(tmp_path / "inc")
    assert ts.manifest == manifest
    assert sorted(ts.requests, key=lambda r: r.request_id) == sorted(
        requests, key=lambda r: r.request_id
    )
    assert ts.metrics[0].series[0].labels == {"engine": "0"}
    assert ts.problems == []


def test_gzip_round_trip(tmp_path: Path) -> None:
    folder = write_synthetic_run(tmp_path, "gz", LEVELS, output_len=8, compress=True)
    assert (folder / "requests.jsonl.gz").exists()
    assert not (folder / REQUESTS_FILE).exists()
    ts = load_trace_set(folder)
    assert len(ts.requests) == 9
    assert ts.requests[0].chunk_tokens == [1] * 8


def test_truncated_last_line_is_reported_and_skipped(tmp_path: Path) -> None:
    folder = tmp_path / "inc"
    _write_incremental(folder)
    path = folder / REQUESTS_FILE
    data = path.read_bytes()
    # What a kill -9 in the middle of a write leaves: the last line cut, no newline.
    path.write_bytes(data[: len(data) - 40])
    ts = load_trace_set(folder)
    assert len(ts.requests) == 8
    assert len(ts.problems) == 1
    assert "requests.jsonl:9" in ts.problems[0] and "truncated" in ts.problems[0]


def test_appending_after_a_truncated_line_keeps_new_records_readable(tmp_path: Path) -> None:
    folder = tmp_path / "inc"
    _, requests = _write_incremental(folder)
    path = folder / REQUESTS_FILE
    path.write_bytes(path.read_bytes()[:-40])
    with TraceSetWriter(folder) as writer:
        writer.append_request(requests[0].model_copy(update={"request_id": "resumed"}))
    with pytest.raises(TraceFormatError, match=r"requests.jsonl:9"):
        # The cut line is now in the middle: it is a real error, named by file and line.
        load_trace_set(folder)


def test_bad_line_in_the_middle_names_file_and_line(tmp_path: Path) -> None:
    folder = tmp_path / "inc"
    _write_incremental(folder)
    path = folder / REQUESTS_FILE
    lines = path.read_text().splitlines()
    record = json.loads(lines[2])
    record["chunk_tokens"] = record["chunk_tokens"][:-1]
    lines[2] = json.dumps(record)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceFormatError) as info:
        load_trace_set(folder)
    assert info.value.line == 3
    assert "requests.jsonl:3" in str(info.value)
    assert "same length" in str(info.value)


def test_not_json_line_names_file_and_line(tmp_path: Path) -> None:
    folder = tmp_path / "inc"
    _write_incremental(folder)
    with (folder / METRICS_FILE).open("a") as fh:
        fh.write("this is not json\n")
    with pytest.raises(TraceFormatError, match=r"server_metrics.jsonl:2"):
        load_trace_set(folder)


def test_unknown_schema_version_is_refused_with_supported_versions(tmp_path: Path) -> None:
    folder = tmp_path / "inc"
    _write_incremental(folder)
    raw = json.loads((folder / MANIFEST_FILE).read_text())
    raw["schema_version"] = 7
    (folder / MANIFEST_FILE).write_text(json.dumps(raw))
    with pytest.raises(SchemaVersionError, match=r"version 7 is not supported.*reads version 1"):
        read_manifest(folder)


def test_unknown_manifest_field_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "inc"
    _write_incremental(folder)
    raw = json.loads((folder / MANIFEST_FILE).read_text())
    raw["surprise"] = 1
    (folder / MANIFEST_FILE).write_text(json.dumps(raw))
    with pytest.raises(TraceFormatError, match="surprise"):
        read_manifest(folder)


def test_missing_manifest_says_how_to_get_one(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(TraceError, match="sweeper record"):
        load_trace_set(tmp_path / "empty")


def test_truncated_gzip_keeps_what_decompresses(tmp_path: Path) -> None:
    folder = write_synthetic_run(tmp_path, "gz", LEVELS, output_len=8, compress=True)
    path = folder / "requests.jsonl.gz"
    path.write_bytes(path.read_bytes()[:-20])
    ts = load_trace_set(folder)
    assert 0 < len(ts.requests) <= 9
    assert any("truncated" in p for p in ts.problems)


@pytest.mark.parametrize("bad", ["../x", "a/b", "..", ".hidden", "", "x" * 200, "a b"])
def test_unsafe_run_ids_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="not safe as a folder name"):
        synthetic_manifest(bad, LEVELS)


def test_credentials_never_reach_the_manifest() -> None:
    target = Target(base_url="https://user:sk-secret@api.example.com/v1")
    assert target.base_url == "https://api.example.com/v1"


def test_write_trace_set_is_atomic_and_refuses_to_overwrite(tmp_path: Path) -> None:
    manifest = synthetic_manifest("atomic", LEVELS)

    def broken():
        yield from synthetic_requests(LEVELS)[:2]
        raise RuntimeError("source broke half-way")

    with pytest.raises(RuntimeError):
        write_trace_set(tmp_path / "atomic", manifest, broken())
    assert list(tmp_path.iterdir()) == []  # nothing half-written
    write_synthetic_run(tmp_path, "atomic", LEVELS)
    with pytest.raises(TraceError, match="already exists"):
        write_synthetic_run(tmp_path, "atomic", LEVELS)


def test_discover_and_resolve(tmp_path: Path) -> None:
    write_synthetic_run(tmp_path, "b-run", LEVELS)
    write_synthetic_run(tmp_path, "a-run", LEVELS)
    (tmp_path / ".tmp").mkdir()
    (tmp_path / "not-a-run").mkdir()
    assert [p.name for p in discover_trace_sets(tmp_path)] == ["a-run", "b-run"]
    assert resolve_run("a-run", tmp_path) == tmp_path / "a-run"
    assert resolve_run(tmp_path / "b-run", tmp_path) == tmp_path / "b-run"
    with pytest.raises(TraceError, match=r"run ids there: a-run, b-run"):
        resolve_run("c-run", tmp_path)


def test_gzip_file_is_really_gzip(tmp_path: Path) -> None:
    folder = write_synthetic_run(tmp_path, "gz", LEVELS, output_len=8, compress=True)
    with gzip.open(folder / "requests.jsonl.gz", "rt") as fh:
        assert json.loads(fh.readline())["concurrency"] == 1


def test_compact_keeps_every_record_and_says_what_it_left_out(tmp_path: Path) -> None:
    folder = tmp_path / "inc"
    _write_incremental(folder)
    path = folder / REQUESTS_FILE
    path.write_bytes(path.read_bytes()[:-40])  # a killed writer's partial last line
    before = load_trace_set(folder)
    assert len(before.problems) == 1
    written = compact_trace_set(folder)
    assert [w.name for w in written] == [
        "requests.jsonl.gz",
        "server_metrics.jsonl.gz",
        f"{CACHE_DIR}/",  # the columnar cache, written last
    ]
    assert any("partial last line" in note for note in written[0].notes)
    assert written[0].after < written[0].before  # (one short metrics line does not shrink)
    assert sorted(p.name for p in folder.iterdir()) == [
        CACHE_DIR,  # the columnar cache compaction writes (tests/test_store_cache.py)
        MANIFEST_FILE,
        "requests.jsonl.gz",
        "server_metrics.jsonl.gz",
    ]
    after = load_trace_set(folder)
    assert after.requests == before.requests and after.metrics == before.metrics
    assert after.problems == []  # the partial line was noted when compacting instead ...
    assert any("partial last line" in w for w in after.manifest.warnings)  # ... and kept
    assert compact_trace_set(folder) == []  # nothing left to compact


def test_compact_refuses_a_run_being_recorded(tmp_path: Path) -> None:
    folder = tmp_path / "inc"
    manifest, _ = _write_incremental(folder)
    write_manifest(folder, manifest.model_copy(update={"status": "running"}))
    with pytest.raises(TraceError, match="still being recorded"):
        compact_trace_set(folder)
    assert (folder / REQUESTS_FILE).exists() and (folder / METRICS_FILE).exists()


def test_metrics_appended_after_a_compaction_are_read_with_it_in_time_order(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "inc"
    _write_incremental(folder)
    compact_trace_set(folder)
    with TraceSetWriter(folder) as writer:  # a resumed recording appends plain files again
        writer.append_metrics(MetricSample(t_ns=9, url="http://127.0.0.1:8000/metrics"))
        writer.append_metrics(MetricSample(t_ns=1, url="http://127.0.0.1:8000/metrics"))
    assert [m.t_ns for m in load_trace_set(folder).metrics] == [1, 5, 9]


def test_a_compaction_stopped_before_removing_its_sources_loses_and_doubles_nothing(
    tmp_path: Path,
) -> None:
    """Killed between renaming its file into place and removing the plain ones: every record
    is in both; the reader reads each once and says so, and compacting again finishes."""
    folder = tmp_path / "inc"
    _write_incremental(folder)
    before = load_trace_set(folder)
    plain = (folder / REQUESTS_FILE).read_bytes(), (folder / METRICS_FILE).read_bytes()
    compact_trace_set(folder)
    (folder / REQUESTS_FILE).write_bytes(plain[0])
    (folder / METRICS_FILE).write_bytes(plain[1])
    doubled = load_trace_set(folder)
    assert doubled.requests == before.requests and doubled.metrics == before.metrics
    assert any("appeared twice" in p for p in doubled.problems)
    compact_trace_set(folder)
    assert load_trace_set(folder).requests == before.requests


def test_a_damaged_compressed_file_is_not_compacted_over(tmp_path: Path) -> None:
    folder = tmp_path / "inc"
    _write_incremental(folder)
    compact_trace_set(folder)
    damaged = bytearray((folder / "requests.jsonl.gz").read_bytes())
    damaged[-6] ^= 0xFF  # the CRC in the trailer
    (folder / "requests.jsonl.gz").write_bytes(bytes(damaged))
    with TraceSetWriter(folder) as writer:  # resumed: a plain file beside it
        writer.append_request(synthetic_requests(LEVELS, output_len=8)[0])
    with pytest.raises(TraceError, match=r"damaged.*zcat requests\.jsonl\.gz"):
        compact_trace_set(folder)
    assert (folder / "requests.jsonl.gz").read_bytes() == bytes(damaged)
    assert (folder / REQUESTS_FILE).exists()


def test_compact_command_goes_on_past_a_run_it_cannot_compact(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from sweeper.cli import cli

    _write_incremental(tmp_path / "inc")
    result = CliRunner().invoke(cli, ["compact", "--traces", str(tmp_path), "nosuch", "inc"])
    assert result.exit_code == 1
    assert "no trace set named 'nosuch'" in result.output
    assert "1 of 2 runs not compacted" in result.output
    assert "requests.jsonl.gz" in result.output and (tmp_path / "inc/requests.jsonl.gz").exists()


def test_a_locked_trace_set_is_not_compacted(tmp_path: Path) -> None:
    folder = tmp_path / "inc"
    _write_incremental(folder)
    with TraceSetLock(folder, "record into it"):
        with pytest.raises(TraceError, match="in use by another sweeper process"):
            compact_trace_set(folder)
        assert (folder / REQUESTS_FILE).exists()
    assert compact_trace_set(folder)  # released when the holder let go
    assert sorted(p.name for p in folder.iterdir()) == [  # and no lock file left behind
        CACHE_DIR,
        MANIFEST_FILE,
        "requests.jsonl.gz",
        "server_metrics.jsonl.gz",
    ]
