"""``sweeper study run`` against real server processes (the scripted server, one per
configuration): the study manifest, the runs' labels and logs, a configuration whose server does
not start, ``--resume`` that redoes nothing finished, and the flag sets."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from sweeper.errors import ConfigError
from sweeper.store import load_trace_set, read_manifest
from sweeper.study.configs import expand_configurations, flags_slug, read_study_file, run_ids
from sweeper.study.server import server_command
from tests.study.helpers import TEMPLATE, invoke, read_json, study_args


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("study")
    result = invoke(
        study_args(out, "s1", "--max-num-seqs 1", "--max-num-seqs 4", "--no-such-flag 1")
    )
    assert result.exit_code == 0, result.output
    assert "2 of 3 configuration(s) complete, 1 failed" in result.output
    return out


def test_manifest_names_each_configuration_and_its_run(study: Path) -> None:
    manifest = read_json(study / "s1" / "study.json")
    assert manifest["study_id"] == "s1"
    assert manifest["template"] == TEMPLATE
    flags = [c["flags"] for c in manifest["configurations"]]
    assert flags == ["--max-num-seqs 1", "--max-num-seqs 4", "--no-such-flag 1"]
    ok = manifest["configurations"][:2]
    assert [c["run_id"] for c in ok] == ["s1-max-num-seqs-1", "s1-max-num-seqs-4"]
    assert all(c["status"] == "complete" and c["error"] is None for c in ok)
    assert manifest["created_at"] <= manifest["updated_at"]
    assert manifest["record_options"]["concurrency"] == "1,2"
    assert not (study / "s1" / "server.pid").exists()  # every server stopped


def test_each_run_carries_the_study_and_its_flags(study: Path) -> None:
    for seqs in (1, 4):
        run = study / f"s1-max-num-seqs-{seqs}"
        manifest = read_manifest(run)
        assert manifest.status == "complete"
        assert manifest.labels == {"study": "s1", "flags": f"--max-num-seqs {seqs}"}
        # The flags are facts of the run, as `sweeper record --max-num-seqs` would give them.
        assert manifest.server.config.max_num_seqs is not None
        assert manifest.server.config.max_num_seqs.value == seqs
        assert [level.concurrency for level in manifest.levels] == [1, 2]
        # The server's log, captured by the study, is the run's server log.
        assert (run / "server.log").read_text().startswith("sweeper scripted server listening")
        assert (study / "s1" / "logs" / f"s1-max-num-seqs-{seqs}.log").is_file()
        assert len(load_trace_set(run).requests) == 8


def test_a_server_that_does_not_start_is_failed_with_its_log_and_the_study_goes_on(
    study: Path,
) -> None:
    failed = read_json(study / "s1" / "study.json")["configurations"][2]
    assert failed["status"] == "failed"
    assert "exited with code 2 while starting" in failed["error"]
    assert "No such option '--no-such-flag'" in failed["error"]  # the log's last lines
    assert failed["server_log"] == "logs/s1-no-such-flag-1.log"
    assert not (study / failed["run_id"]).exists()


def test_resume_redoes_nothing_finished(study: Path) -> None:
    requests = study / "s1-max-num-seqs-1" / "requests.jsonl"
    before = requests.stat().st_mtime_ns
    result = invoke(["study", "run", "s1", "--resume", "--out", str(study)])
    assert result.exit_code == 0, result.output
    assert "s1-max-num-seqs-1: complete, skipped" in result.output
    assert "s1-max-num-seqs-4: complete, skipped" in result.output
    assert requests.stat().st_mtime_ns == before
    # The failed one is tried again (a server may start now), and fails the same way.
    failed = read_json(study / "s1" / "study.json")["configurations"][2]
    assert failed["status"] == "failed"


def test_a_second_start_of_the_same_study_is_refused(study: Path) -> None:
    result = invoke(study_args(study, "s1", "--max-num-seqs 1"))
    assert result.exit_code == 1
    assert "already exists" in result.output and "--resume" in result.output


def test_template_must_name_port_and_flags(tmp_path: Path) -> None:
    result = invoke(["study", "run", "x", "--serve", "server --port 1", "--out", str(tmp_path)])
    assert result.exit_code == 1
    assert "lacks {port} and {flags}" in result.output


def test_grid_is_the_product_times_each_config() -> None:
    got = expand_configurations(
        ["--enforce-eager"], ["max-num-seqs=64,128", "enable-prefix-caching=true,false"]
    )
    assert got == [
        "--enforce-eager --max-num-seqs 64 --enable-prefix-caching",
        "--enforce-eager --max-num-seqs 64",
        "--enforce-eager --max-num-seqs 128 --enable-prefix-caching",
        "--enforce-eager --max-num-seqs 128",
    ]
    assert expand_configurations([], []) == [""]
    with pytest.raises(ConfigError, match="given twice"):
        expand_configurations(["--a 1", "--a  1"], [])
    with pytest.raises(ConfigError, match="name=v1,v2"):
        expand_configurations([], ["max-num-seqs"])


def test_run_ids_are_safe_and_unique() -> None:
    assert (
        flags_slug("--max-num-seqs 64 --kv-cache-dtype fp8") == "max-num-seqs-64-kv-cache-dtype-fp8"
    )
    assert flags_slug("") == "default"
    assert run_ids("s", ["--a 1", "--a=1"]) == ["s-a-1", "s-a-1-2"]


def test_template_words_and_environment() -> None:
    argv, env = server_command("VLLM_X=1 vllm serve m --port {port} {flags}", 8001, "--a 'b c'")
    assert argv == ["vllm", "serve", "m", "--port", "8001", "--a", "b c"]
    assert env == {"VLLM_X": "1"}


def test_study_file(tmp_path: Path) -> None:
    path = tmp_path / "study.yaml"
    path.write_text(
        "serve: srv --port {port} {flags}\nconfigs: ['--a 1']\ngrid:\n  b: [1, 2]\n"
        "repeats: 2\nrecord:\n  input-len: 100\n"
    )
    data = read_study_file(path)
    assert data["grid"] == ["b=1,2"] and data["configs"] == ["--a 1"]
    assert data["record"] == {"input_len": 100}
    path.write_text("servers: x\n")
    with pytest.raises(ConfigError, match="unknown key"):
        read_study_file(path)


def test_a_study_file_gives_the_template_configs_and_record_options(tmp_path: Path) -> None:
    path = tmp_path / "study.yaml"
    path.write_text(
        f"serve: {TEMPLATE}\ngrid:\n  max-num-seqs: [2]\n"
        "record:\n  concurrency: '1'\n  requests-per-level: 8\n  input-len: 12\n  output-len: 4\n"
        "  warmup: 0\n  quiet: true\n"
    )
    result = invoke(["study", "run", "f", "--study-file", str(path), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    manifest = read_manifest(tmp_path / "f-max-num-seqs-2")
    assert manifest.workload.input_len == 12 and manifest.workload.concurrency_levels == [1]
    stored = read_json(tmp_path / "f" / "study.json")["record_options"]
    assert stored["input_len"] == 12 and stored["requests_per_level"] == "8"


def test_secrets_in_the_template_are_masked_in_the_study(tmp_path: Path) -> None:
    template = "/nonexistent/server --api-key sk-study-secret-123 --port {port} {flags}"
    result = invoke(["study", "run", "sec", "--serve", template, "--out", str(tmp_path)])
    assert result.exit_code == 1  # nothing could start
    text = (tmp_path / "sec" / "study.json").read_text()
    assert "sk-study-secret-123" not in text
    manifest = read_json(tmp_path / "sec" / "study.json")
    assert manifest["template"] == "/nonexistent/server --api-key *** --port {port} {flags}"
    assert "cannot start '/nonexistent/server'" in manifest["configurations"][0]["error"]
    # Resuming needs the template again: the stored one lacks its secret.
    again = invoke(["study", "run", "sec", "--resume", "--out", str(tmp_path)])
    assert again.exit_code == 1 and "pass --serve again" in again.output


def test_a_server_that_never_answers_times_out_naming_its_last_log_line(tmp_path: Path) -> None:
    script = "import time; print('loading weights 3/7', flush=True); time.sleep(120)"
    template = f"{sys.executable} -c {shlex.quote(script)} {{port}} {{flags}}"
    result = invoke([
        "study", "run", "slow", "--serve", template, "--start-timeout", "1.5",
        "--out", str(tmp_path),
    ])  # fmt: skip
    assert result.exit_code == 1
    configuration = read_json(tmp_path / "slow" / "study.json")["configurations"][0]
    assert configuration["status"] == "failed"
    assert "did not answer /health or /v1/models within 1.5 s" in configuration["error"]
    assert "its last log line: loading weights 3/7" in configuration["error"]
    assert not (tmp_path / "slow" / "server.pid").exists()  # stopped, not left waiting


def test_slo_without_find_max_is_refused(tmp_path: Path) -> None:
    result = invoke(
        study_args(tmp_path, "slo", "--max-num-seqs 1", extra=("--slo", "ttft_p99<=2s"))
    )
    assert result.exit_code == 2
    assert "--slo is the service level --find-max searches for: add --find-max" in result.output
    assert not (tmp_path / "slo").exists()


@pytest.mark.parametrize("key", ["study", "flags", "repeat", "probe"])
def test_a_label_the_study_sets_is_refused(tmp_path: Path, key: str) -> None:
    result = invoke(study_args(tmp_path, "lab", extra=("--label", f"{key}=mine")))
    assert result.exit_code == 1
    assert f"--label {key}=: the study sets this label on each run itself" in result.output
    assert not (tmp_path / "lab").exists()
