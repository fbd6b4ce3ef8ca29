"""The writer and the reader against hostile data (issue 16): every writer masks secrets;
non-finite numbers are written and read back; lines that cannot be true are named and left
out, never averaged in; a bad version, encoding or gzip file is one line naming the file; two
folders of one run id are refused with both names."""

from __future__ import annotations

import gzip
import json
import math
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from sweeper.analysis.summary import summarize
from sweeper.cli import cli
from sweeper.errors import SchemaVersionError, TraceError, TraceFormatError
from sweeper.redact import Redactor
from sweeper.schema import (
    MANIFEST_FILE,
    METRICS_FILE,
    REQUESTS_FILE,
    SERVER_LOG_FILE,
    Fact,
    MetricSample,
    RequestError,
    RequestTrace,
    Series,
    Source,
)
from sweeper.store import (
    TraceSetWriter,
    compact_trace_set,
    discover_trace_sets,
    duplicate_run_ids,
    load_trace_set,
    read_manifest,
    write_trace_set,
)
from sweeper.testing import (
    SyntheticLevel,
    synthetic_manifest,
    synthetic_requests,
    write_synthetic_run,
)

LEVELS = [
    SyntheticLevel(1, ttft_ms=20, itl_ms=15, requests=8),
    SyntheticLevel(4, ttft_ms=40, itl_ms=16, requests=8),
]
KEY = "sk-test-9f8e7d6c5b4a3210"
URL_PASSWORD = "m3trics-pa55word"
NAN, INF = math.nan, math.inf


def _all_bytes(folder: Path) -> bytes:
    data = b""
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            raw = path.read_bytes()
            data += gzip.decompress(raw) if path.suffix == ".gz" else raw
    return data


# ---------------------------------------------------------------------------------------------
# secrets: every writer


def test_every_writer_masks_what_it_knows_and_recognizes(tmp_path: Path) -> None:
    url = f"http://scraper:{URL_PASSWORD}@127.0.0.1:8000/metrics"
    manifest = synthetic_manifest("sec", LEVELS, output_len=8)
    manifest.warnings.append(f"cannot scrape {url}: HTTP 401")
    manifest.source.command = ["sweeper", "record", "--api-key", KEY, "--metrics-url", url]
    echoed = RequestError(kind="http", http_status=401, message=f"bad key (Bearer {KEY})")
    failed = RequestTrace(
        concurrency=1, request_id="c1-99999", send_ns=1, end_ns=5, status="error", error=echoed
    )
    log = tmp_path / "vllm.log"
    log.write_text(f"INFO non-default args: {{'api_key': ['{KEY}'], 'max_num_seqs': 4}}\n")
    redactor = Redactor.for_run(api_key=KEY, urls=[url])
    folder = tmp_path / "sec"
    with TraceSetWriter(folder, redactor=redactor) as writer:
        writer.write_manifest(manifest)
        writer.append_request(failed)
        writer.append_metrics(MetricSample(t_ns=1, url=url, error=f"401 for {KEY}"))
        writer.copy_server_log(log)
    whole = write_trace_set(
        tmp_path / "whole",
        manifest,
        [failed],
        [MetricSample(t_ns=1, url=url)],
        server_log=log,
        redactor=redactor,
    )
    for written in (folder, whole):
        data = _all_bytes(written)
        assert KEY.encode() not in data and URL_PASSWORD.encode() not in data, written
        assert b"***" in data
        ts = load_trace_set(written)  # still valid, and what is not secret kept
        assert ts.metrics[0].url == "http://127.0.0.1:8000/metrics"
        assert ts.requests[0].error is not None and ts.requests[0].error.http_status == 401
        assert "'max_num_seqs': 4" in (ts.server_log or "")


def test_without_known_secrets_the_writer_still_masks_what_it_recognizes(tmp_path: Path) -> None:
    manifest = synthetic_manifest("rec", LEVELS, output_len=8)
    manifest.source.command = ["aiperf", "-H", f"Authorization: Bearer {KEY}", "--api-key", KEY]
    folder = write_synthetic_run(tmp_path, "plain", LEVELS, output_len=8)
    with TraceSetWriter(folder) as writer:
        writer.write_manifest(manifest)
        writer.append_metrics(MetricSample(t_ns=1, url=f"http://u:{URL_PASSWORD}@h/metrics"))
    data = _all_bytes(folder)
    assert KEY.encode() not in data and URL_PASSWORD.encode() not in data


def test_reading_and_compacting_an_old_trace_set_masks_its_secrets(tmp_path: Path) -> None:
    """A trace set written before the redaction layer: its pages never show the secrets, and
    ``sweeper compact`` (the step before committing one) removes them from disk."""
    folder = write_synthetic_run(tmp_path, "old", LEVELS, output_len=8)
    raw = json.loads((folder / MANIFEST_FILE).read_text())
    raw["source"]["command"] = ["sweeper", "record", "--api-key", KEY]
    (folder / MANIFEST_FILE).write_text(json.dumps(raw))
    line = MetricSample(t_ns=1, url=f"http://u:{URL_PASSWORD}@h/metrics").model_dump_json()
    (folder / METRICS_FILE).write_text(line + "\n")
    (folder / SERVER_LOG_FILE).write_text(f"vllm serve m --api-key {KEY}\n")
    assert read_manifest(folder).source.command == ["sweeper", "record", "--api-key", "***"]
    compact_trace_set(folder)
    data = _all_bytes(folder)
    assert KEY.encode() not in data and URL_PASSWORD.encode() not in data
    assert len(load_trace_set(folder).requests) == len(synthetic_requests(LEVELS, output_len=8))


# ---------------------------------------------------------------------------------------------
# non-finite numbers


def test_nan_and_infinity_are_written_and_read_back(tmp_path: Path) -> None:
    folder = write_synthetic_run(tmp_path, "nf", LEVELS, output_len=8)
    timing = {"prompt_ms": 0.0, "prompt_per_second": INF, "predicted_per_second": -INF}
    trace = RequestTrace(concurrency=1, request_id="c1-77777", send_ns=1, server_timing=timing)
    series = [
        Series(name="vllm:spec_decode_draft_acceptance_rate", value=NAN),
        Series(name="vllm:spec_decode_mean_acceptance_length", value=INF),
        Series(name="vllm:x", value=-INF),
    ]
    with TraceSetWriter(folder) as writer:
        writer.append_request(trace)
        writer.append_metrics(MetricSample(t_ns=1, url="http://h/metrics", series=series))
    text = (folder / METRICS_FILE).read_text()
    assert '"NaN"' in text and '"Infinity"' in text and '"-Infinity"' in text
    ts = load_trace_set(folder)
    values = [s.value for s in ts.metrics[0].series]
    assert math.isnan(values[0]) and values[1:] == [INF, -INF]
    read = next(r for r in ts.requests if r.request_id == "c1-77777")
    assert read.server_timing == timing
    summarize(ts)  # the analysis reads it too


def test_files_of_the_old_writer_with_null_still_read(tmp_path: Path) -> None:
    folder = write_synthetic_run(tmp_path, "old", LEVELS, output_len=8)
    (folder / METRICS_FILE).write_text(
        '{"t_ns":1,"url":"u","series":[{"name":"a","labels":{},"value":null}]}\n'
    )
    with (folder / REQUESTS_FILE).open("a") as fh:
        fh.write(
            '{"concurrency":1,"request_id":"c1-88888","send_ns":1,'
            '"server_timing":{"prompt_per_second":null,"prompt_ms":1.5}}\n'
        )
    ts = load_trace_set(folder)
    assert math.isnan(ts.metrics[0].series[0].value)
    timing = next(r for r in ts.requests if r.request_id == "c1-88888").server_timing
    assert timing is not None and math.isnan(timing["prompt_per_second"])
    assert timing["prompt_ms"] == 1.5


def test_a_fact_or_tool_summary_that_is_not_finite_is_unknown() -> None:
    assert Fact(value=NAN, source="metrics").value is None
    assert Fact(value=INF, source="metrics").value is None
    source = Source(tool="aiperf", summaries={"1": {"ttft_ms_mean": NAN, "n": 3}})
    assert source.summaries == {"1": {"ttft_ms_mean": None, "n": 3}}
    assert json.loads(source.model_dump_json())["summaries"]["1"]["ttft_ms_mean"] is None


# ---------------------------------------------------------------------------------------------
# lines that cannot be true


def _append(folder: Path, *traces: RequestTrace) -> None:
    with (folder / REQUESTS_FILE).open("a") as fh:
        for trace in traces:
            fh.write(trace.model_dump_json(exclude_none=True) + "\n")


def _line_of(folder: Path, request_id: str, nth: int = 1) -> int:
    lines = (folder / REQUESTS_FILE).read_text().splitlines()
    hits = [i for i, line in enumerate(lines, 1) if f'"request_id":"{request_id}"' in line]
    return hits[nth - 1]


def test_a_request_id_twice_in_a_level_is_counted_once(tmp_path: Path) -> None:
    folder = write_synthetic_run(tmp_path, "dup", LEVELS, output_len=8)
    clean = summarize(load_trace_set(folder))
    c1 = [r for r in synthetic_requests(LEVELS, output_len=8) if r.concurrency == 1]
    # The copies sent later (another send time): not a compaction's exact repeat.
    _append(folder, *[r.model_copy(update={"send_ns": r.send_ns + 10**9}) for r in c1[:4]])
    ts = load_trace_set(folder)
    assert len(ts.requests) == 16
    repeats = [p for p in ts.problems if "appears again" in p]
    assert len(repeats) == 4
    first, again = _line_of(folder, c1[0].request_id), _line_of(folder, c1[0].request_id, 2)
    assert repeats[0] == (
        f"requests.jsonl:{again}: request id {c1[0].request_id!r} appears again at C=1 "
        f"(first at requests.jsonl:{first}); this copy left out"
    )
    got = summarize(ts)
    assert got["levels"] == clean["levels"]  # the numbers of the clean run, nothing averaged in


def test_a_cancelled_request_sent_again_on_resume_is_not_a_repeat(tmp_path: Path) -> None:
    folder = write_synthetic_run(tmp_path, "res", LEVELS, output_len=8)
    first = synthetic_requests(LEVELS, output_len=8)[0]
    _append(folder, first.model_copy(update={"status": "cancelled", "send_ns": 1}))
    ts = load_trace_set(folder)
    assert ts.problems == [] and len(ts.requests) == 17


@pytest.mark.parametrize(
    ("change", "what"),
    [
        ({"chunk_ns": [-5, 10, 20]}, "chunk 0 arrives -5 ns, before its request was sent"),
        ({"chunk_ns": [10, 30, 20]}, "chunk times go back: chunk 2 at 20 ns after chunk 1 at 30 ns"),
        ({"end_ns": -1}, "end_ns is -1, before its request was sent"),
        ({"ttft_ns": -3, "e2el_ns": 9}, "ttft_ns is -3, before its request was sent"),
        ({"ttft_ns": 9, "e2el_ns": 3}, "ttft_ns 9 is after e2el_ns 3 (the end)"),
    ],
)  # fmt: skip
def test_impossible_times_are_named_and_left_out(
    tmp_path: Path, change: dict[str, object], what: str
) -> None:
    folder = write_synthetic_run(tmp_path, "bad", LEVELS, output_len=8)
    clean = summarize(load_trace_set(folder))
    victim = synthetic_requests(LEVELS, output_len=8)[3].model_dump()
    chunks = change.get("chunk_ns", victim["chunk_ns"])
    victim.update(change, request_id="c1-bad00", chunk_tokens=[1] * len(chunks))  # type: ignore[arg-type]
    _append(folder, RequestTrace.model_validate(victim))
    ts = load_trace_set(folder)
    line = _line_of(folder, "c1-bad00")
    assert ts.problems == [f"requests.jsonl:{line}: request 'c1-bad00' (C=1): {what}; left out"]
    assert all(r.request_id != "c1-bad00" for r in ts.requests)
    assert summarize(ts)["levels"] == clean["levels"]


def test_many_bad_lines_are_counted_past_the_first_twenty(tmp_path: Path) -> None:
    folder = write_synthetic_run(tmp_path, "many", LEVELS, output_len=8)
    base = synthetic_requests(LEVELS, output_len=8)[0]
    _append(
        folder,
        *[base.model_copy(update={"request_id": f"c1-x{i:04d}", "end_ns": -1}) for i in range(50)],
    )
    problems = load_trace_set(folder).problems
    assert len(problems) == 21 and problems[-1] == "... and 30 more lines like these"


# ---------------------------------------------------------------------------------------------
# versions, encodings, gzip


@pytest.mark.parametrize(
    ("version", "message"),
    [
        (True, "trace schema version true is a boolean, not a number; this sweeper reads "
         'version 1, written as a JSON number ("schema_version": 1)'),
        ("1", 'trace schema version "1" is a string, not a number; this sweeper reads version 1'),
        (None, "trace schema version null is missing (or null), not a number"),
        (1.5, "trace schema version 1.5 is not supported; this sweeper reads version 1"),
        (2, "trace schema version 2 is not supported; this sweeper reads version 1 (upgrade"),
    ],
)  # fmt: skip
def test_schema_version_must_be_the_number_1(tmp_path: Path, version: object, message: str) -> None:
    folder = write_synthetic_run(tmp_path, "v", LEVELS, output_len=8)
    raw = json.loads((folder / MANIFEST_FILE).read_text())
    raw["schema_version"] = version
    if version is None:
        del raw["schema_version"]
    (folder / MANIFEST_FILE).write_text(json.dumps(raw))
    with pytest.raises(SchemaVersionError) as info:
        load_trace_set(folder)
    assert message in str(info.value) and str(folder / MANIFEST_FILE) in str(info.value)


def test_a_manifest_in_utf16_or_binary_names_the_encoding_expected(tmp_path: Path) -> None:
    folder = write_synthetic_run(tmp_path, "enc", LEVELS, output_len=8)
    text = (folder / MANIFEST_FILE).read_text()
    for data, found in (
        (text.encode("utf-16"), "UTF-16 text"),  # with its byte-order mark
        (text.encode("utf-16-le"), "UTF-16 text"),  # without
        (os.urandom(64) + b"\x00", "binary data"),
        (b"\xff\xd8\xff\xe0 not json", "not UTF-8"),
    ):
        (folder / MANIFEST_FILE).write_bytes(data)
        with pytest.raises(TraceFormatError) as info:
            load_trace_set(folder)
        message = str(info.value)
        assert found in message and "a manifest must be UTF-8 JSON" in message, message
        assert str(folder / MANIFEST_FILE) in message and "\n" not in message
    (folder / MANIFEST_FILE).write_bytes(b"\xef\xbb\xbf" + text.encode())  # a UTF-8 BOM reads
    assert read_manifest(folder).run_id == "enc"


def test_random_bytes_in_a_gz_file_are_not_called_truncated(tmp_path: Path) -> None:
    folder = write_synthetic_run(tmp_path, "gz", LEVELS, output_len=8, compress=True)
    path = folder / "requests.jsonl.gz"
    good = path.read_bytes()
    path.write_bytes(os.urandom(4096))
    with pytest.raises(TraceError) as info:
        load_trace_set(folder)
    assert "is not a gzip file" in str(info.value) and "truncated" not in str(info.value)
    assert str(path) in str(info.value)
    # A gzip header, then damage in the compressed data: corrupt, not cut short.
    path.write_bytes(good[:20] + bytes(b ^ 0x5A for b in good[20:-8]) + good[-8:])
    with pytest.raises(TraceError) as info:
        load_trace_set(folder)
    assert "is a corrupt gzip file" in str(info.value) and "truncated" not in str(info.value)
    path.write_bytes(good[:-20])  # cut short: what decompresses is kept, as before
    ts = load_trace_set(folder)
    assert ts.requests and any("truncated" in p for p in ts.problems)


# ---------------------------------------------------------------------------------------------
# two folders of one run


def test_two_folders_with_one_run_id_refuse_the_second_naming_both(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    first = write_synthetic_run(traces, "run-a", LEVELS, output_len=8)
    copy = traces / "run-a-copy"
    shutil.copytree(first, copy)
    raw = json.loads((copy / MANIFEST_FILE).read_text())
    raw["labels"] = {"which": "the-copy"}
    (copy / MANIFEST_FILE).write_text(json.dumps(raw))
    write_synthetic_run(traces, "run-b", LEVELS, output_len=8)
    why = (
        f"run id 'run-a' is already the run id of {first}; left out (two trace sets of one run "
        "id would share one page: give one of them another run_id in its manifest.json, or "
        "remove the copy)"
    )
    problems: list[str] = []
    assert [p.name for p in discover_trace_sets(traces, problems)] == ["run-a", "run-b"]
    assert problems == [f"{copy}: {why}"]
    assert duplicate_run_ids([first, copy]) == {copy: why}
    assert duplicate_run_ids([first, traces / "run-b"]) == {}
    # The site: one page for run-a, and a build that says it left the copy out (exit 1).
    pages = tmp_path / "pages"
    result = CliRunner().invoke(cli, ["build", "--traces", str(traces), "--out", str(pages)])
    assert result.exit_code == 1
    assert f"{copy}: left out of the site: {why}" in result.output
    run_pages = [p.name for p in (pages / "runs").iterdir() if p.is_dir() and p.name != "groups"]
    assert sorted(run_pages) == ["run-a", "run-b"]  # (runs/groups/: the model-and-GPU pages)
    assert "the-copy" not in (pages / "runs" / "run-a" / "index.md").read_text()  # not overwritten
    index = (pages / "runs" / "index.md").read_text()
    assert (
        index.count('href="run-a/"') == 1 and "is already the run id of" in index
    )  # the copy named
