"""A secret among a configuration's flags (``--config '--api-key sk-...'``): masked in every file
of the study, and ``--resume`` refuses a masked configuration unless it is given again, which is
the same configuration, its server started with the real value."""

from __future__ import annotations

from pathlib import Path

from tests.study.helpers import KEY, invoke, keyed_template, read_json, study_args

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
