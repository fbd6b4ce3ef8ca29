"""The GPU and model spec tables, name matching, config.json reading and user precedence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sweeper.errors import ConfigError
from sweeper.facts.hardware import (
    GPU_SPECS,
    MODEL_SPECS,
    dtype_bytes,
    find_gpu,
    find_model,
    gpu_facts,
    kv_bytes_per_token,
    model_facts,
)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("4090", "RTX 4090"),
        ("rtx-4090", "RTX 4090"),
        ("NVIDIA GeForce RTX 3090", "RTX 3090"),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB"),
        ("NVIDIA A100-SXM4-40GB", "A100 SXM 40GB"),
        ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB"),
        ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA H800", "H800 SXM"),
        ("NVIDIA H20", "H20"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA A10", "A10"),
        ("Tesla T4", "T4"),
        ("AMD Instinct MI300X", "MI300X"),
        ("AMD Instinct MI325X", "MI325X"),
        ("AMD Instinct MI355X", "MI355X"),
        ("mi355x", "MI355X"),
    ],
)
def test_gpu_names_match_forgivingly(name: str, expected: str) -> None:
    spec = find_gpu(name)
    assert spec is not None, name
    assert spec.name == expected


def test_rtx_4090_figures_and_sources() -> None:
    hw = gpu_facts("NVIDIA GeForce RTX 4090", 1)
    assert hw.gpu_name is not None and hw.gpu_name.source == "user"
    assert hw.gpu_count is not None and hw.gpu_count.value == 1
    assert hw.memory_bandwidth_gb_s is not None and hw.memory_bandwidth_gb_s.value == 1008
    assert hw.memory_bandwidth_gb_s.source == "spec_table"
    assert "whitepaper" in (hw.memory_bandwidth_gb_s.detail or "")
    assert hw.memory_gb is not None and hw.memory_gb.value == 24
    assert hw.bf16_tflops is not None and round(float(hw.bf16_tflops.value or 0)) == 165


def test_unknown_gpu_gives_name_and_count_only() -> None:
    hw = gpu_facts("Imaginary Accelerator 9000", 2)
    assert hw.gpu_name is not None and hw.gpu_name.value == "Imaginary Accelerator 9000"
    assert hw.gpu_count is not None and hw.gpu_count.value == 2
    assert hw.memory_bandwidth_gb_s is None and hw.memory_gb is None and hw.bf16_tflops is None


def test_bad_gpu_count_is_refused() -> None:
    with pytest.raises(ConfigError, match="at least 1"):
        gpu_facts("4090", 0)


def test_every_table_row_is_reachable_by_its_own_name() -> None:
    for spec in GPU_SPECS:
        found = find_gpu(spec.name)
        assert found is not None and found.name == spec.name, spec.name
    for mspec in MODEL_SPECS:
        model = find_model(mspec.name)
        assert model is not None and model.name == mspec.name, mspec.name


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("Qwen/Qwen2.5-7B-Instruct", "Qwen2.5-7B"),
        ("Qwen2.5-72B", "Qwen2.5-72B"),
        ("qwen2.5-32b-instruct-awq", "Qwen2.5-32B"),
        ("meta-llama/Meta-Llama-3.1-8B-Instruct", "Llama-3.1-8B"),
        ("meta-llama/Llama-3.1-70B-Instruct", "Llama-3.1-70B"),
        ("Qwen/Qwen3-30B-A3B", "Qwen3-30B-A3B"),
        ("01-ai/Yi-1.5-34B-Chat", "Yi-1.5-34B"),
        ("openai/gpt-oss-20b", "gpt-oss-20b"),
        ("MiniMaxAI/MiniMax-M2.5", "MiniMax-M2.5"),
    ],
)
def test_model_names_match(name: str, expected: str) -> None:
    spec = find_model(name)
    assert spec is not None and spec.name == expected


def test_qwen25_7b_bf16_matches_the_reference_report() -> None:
    # The reference report: Qwen2.5-7B bf16 weighs 15.2 GB; 1008 GB/s / 15.2 GB = 66.3 tok/s.
    facts = model_facts("Qwen/Qwen2.5-7B-Instruct")
    assert facts.weight_bytes is not None
    assert float(facts.weight_bytes.value or 0) == pytest.approx(15.2e9, rel=0.01)
    # 2 x 28 layers x 4 KV heads x 128 x 2 bytes
    assert facts.kv_bytes_per_token is not None and facts.kv_bytes_per_token.value == 57_344
    assert facts.num_layers is not None and facts.num_layers.source == "spec_table"


def test_minimax_kv_bytes_agree_with_the_peer_vllm_log() -> None:
    # The MI355X peer log: 56.86 GiB of fp8 KV cache holds 480,800 tokens.
    facts = model_facts("MiniMaxAI/MiniMax-M2.5", kv_dtype="fp8")
    assert facts.kv_bytes_per_token is not None
    per_token = float(facts.kv_bytes_per_token.value or 0)
    assert 56.86 * 2**30 / per_token == pytest.approx(480_800, rel=0.001)


def test_config_json_wins_over_the_table_and_user_dtype_wins_over_both(tmp_path: Path) -> None:
    config = {
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "vocab_size": 1000,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    # The name says Qwen2.5-7B, but the user's own config.json describes another shape: it wins.
    facts = model_facts("Qwen2.5-7B", path)
    assert facts.num_layers is not None and facts.num_layers.value == 4
    assert facts.num_layers.source == "model_config"
    assert facts.kv_bytes_per_token is not None
    assert facts.kv_bytes_per_token.value == 2 * 4 * 2 * 64 * 4  # float32
    user = model_facts(None, path, dtype="bfloat16")
    assert user.dtype is not None and user.dtype.source == "user"
    assert (
        user.kv_bytes_per_token is not None and user.kv_bytes_per_token.value == 2 * 4 * 2 * 64 * 2
    )
    # Without a table row the parameters are estimated from the shapes.
    assert user.parameters is not None
    expected = 2 * 1000 * 256 + 4 * (256 * 4 * 64 * 2 + 256 * 2 * 64 * 2 + 3 * 256 * 512)
    assert user.parameters.value == expected


def test_checkpoint_size_gives_weight_bytes(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(
        json.dumps(
            {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "vocab_size": 10}
        )
    )
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 4096)
    facts = model_facts("tiny", tmp_path / "config.json")
    assert facts.weight_bytes is not None and facts.weight_bytes.value == 4096
    assert facts.num_kv_heads is not None and facts.num_kv_heads.value == 2  # no GQA: = heads
    assert facts.head_dim is not None and facts.head_dim.value == 32


def test_bad_config_and_dtype_errors_name_the_value(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        model_facts(None, tmp_path / "missing.json")
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        model_facts(None, bad)
    with pytest.raises(ConfigError, match="'fp7'"):
        dtype_bytes("fp7")


def test_unknown_model_without_config_has_no_invented_numbers() -> None:
    facts = model_facts("some-private-model")
    assert facts.name == "some-private-model"
    assert (
        facts.parameters is None and facts.kv_bytes_per_token is None and facts.weight_bytes is None
    )


def test_kv_bytes_formula() -> None:
    assert kv_bytes_per_token(28, 4, 128, 2) == 57_344
