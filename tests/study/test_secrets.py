"""A secret among a configuration's flags (``--config '--api-key sk-...'``): masked in every file
of the study, and ``--resume`` refuses a masked configuration unless it is given again, which is
the same configuration, its server started with the real value."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.study.helpers import (
    KEY,
    SWEEPER,
    alive,
    invoke,
    keyed_template,
    read_json,
    study_args,
    wait_for,
)

FLAGS = f"--api-key {KEY} --max-num-seqs 2"


def test_resume_needs_a_masked_configuration_again_and_runs_it_with_the_real_value(
    tmp_path: Path,
) -> None:
    template = keyed_template(tmp_path)
    result = invoke(study_args(tmp_path, "key", FLAGS, template=template))
    assert result.exit_code == 0, result.output
    assert KEY not in result.output
    configuration = read_json(tmp_path / "key" / "study.json")["configurations"][0]
    assert configuration["flags"] == "--api-key *** --max-num-seqs 2"
    assert configuration["run_id"] == "key-api-key-max-num-seqs-2"  # no secret in a run id
    # More repeats: the configuration's server must start again, and its key is masked.
    resume = ["study", "run", "key", "--resume", "--repeats", "2", "--out", str(tmp_path)]
    refused = invoke(resume)
    assert refused.exit_code == 1
    assert "'--api-key *** --max-num-seqs 2'" in refused.output
    assert "again with --config" in refused.output
    # Given again, it is the same configuration, started with the real key.
    again = invoke([*resume, "--config", FLAGS])
    assert again.exit_code == 0, again.output
    manifest = read_json(tmp_path / "key" / "study.json")
    assert len(manifest["configurations"]) == 1
    configuration = manifest["configurations"][0]
    assert configuration["status"] == "complete", configuration["error"]
    assert [r["status"] for r in configuration["runs"]] == ["complete", "complete"]
    assert configuration["flags"] == "--api-key *** --max-num-seqs 2"


def _start(out: Path, study_id: str, template: str) -> subprocess.Popen[bytes]:
    args = study_args(out, study_id, SLOW, template=template, extra=("--output-len", "60"))
    with open(out / f"{study_id}.out", "wb") as output:
        return subprocess.Popen([*SWEEPER, *args], stdout=output, stderr=subprocess.STDOUT)


def _files_holding_the_key(folder: Path) -> list[str]:
    """Every path under ``folder`` whose name or content holds the key (a temporary file that
    is renamed while this reads it is read under its new name)."""
    found = []
    for path in folder.rglob("*"):
        try:
            content = path.read_bytes() if path.is_file() else b""
        except FileNotFoundError:
            continue
        if KEY in str(path) or KEY.encode() in content:
            found.append(str(path))
    return found


def _wait_recording(out: Path, study_id: str) -> None:
    assert wait_for(
        lambda: (
            (out / study_id / "server.pid").exists()
            and (
                out / f"{study_id}-api-key-max-num-seqs-2-step-base-ms-10" / "requests.jsonl"
            ).exists()
        ),
        timeout_s=60,
    ), (out / f"{study_id}.out").read_text()


SLOW = f"{FLAGS} --step-base-ms 10"


def test_no_file_of_the_study_holds_the_key_while_its_server_runs(tmp_path: Path) -> None:
    study = _start(tmp_path, "live", keyed_template(tmp_path))
    try:
        _wait_recording(tmp_path, "live")
        server = int(read_json(tmp_path / "live" / "server.pid")["pid"])
        assert alive(server)
        assert _files_holding_the_key(tmp_path / "live") == []
    finally:
        study.kill()
        study.wait(timeout=10)


def test_a_log_a_killed_study_left_raw_is_masked_when_the_study_is_run_again(
    tmp_path: Path,
) -> None:
    study = _start(tmp_path, "k9", keyed_template(tmp_path, env="ECHO_ARGS=1"))
    try:
        _wait_recording(tmp_path, "k9")
        server = int(read_json(tmp_path / "k9" / "server.pid")["pid"])
        study.kill()
        study.wait(timeout=10)
        assert wait_for(lambda: not alive(server), timeout_s=10)
    finally:
        if study.poll() is None:
            study.kill()
    log = tmp_path / "k9" / "logs" / "k9-api-key-max-num-seqs-2-step-base-ms-10.log"
    assert KEY in log.read_text()  # the server logged its arguments, and no one masked them
    # Resumed without the configuration: refused (its key is masked), the log masked first.
    refused = invoke(["study", "run", "k9", "--resume", "--out", str(tmp_path)])
    assert refused.exit_code == 1 and "again with --config" in refused.output
    assert _files_holding_the_key(tmp_path / "k9") == []
    assert "'--api-key', '***'" in log.read_text()
