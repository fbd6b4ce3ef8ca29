"""Hardware and model facts: built-in spec tables, forgiving name matching, config.json reading.

Two calls, used by the recorder and the importers to fill the manifest::

    gpu_facts("NVIDIA GeForce RTX 4090", 1)      # -> schema.Hardware (bandwidth, memory, TFLOPS)
    model_facts("Qwen/Qwen2.5-7B-Instruct")      # -> schema.ModelFacts (layers, KV heads, ...)
    model_facts(None, Path("model/config.json")) # the model's own config.json wins over the table

Every value is a :class:`~sweeper.schema.Fact` carrying its source: ``spec_table`` (the tables
below, each row citing where its figures come from), ``model_config`` (the model's config.json)
or ``user`` (what the caller gave). An unknown GPU yields only its name and count: sweeper never
invents a figure.

The findings use these for the memory-bandwidth roofline (ideal decode tok/s = bandwidth /
bytes read per token) and for the KV footprint of a request (KV bytes per token =
2 (K and V) x layers x KV heads x head dim x bytes per element).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweeper.errors import ConfigError
from sweeper.schema import Fact, Hardware, ModelFacts

# ---------------------------------------------------------------------------------------------
# GPUs


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model. ``pattern`` is matched against the squashed name (lowercase, vendor words
    and separators removed); the table is searched in order, so specific variants come first."""

    name: str
    pattern: str
    memory_bandwidth_gb_s: float
    memory_gb: float
    bf16_tflops: float | None  # dense (no sparsity); None where the GPU has no bf16 tensor path
    source: str


_NV_ADA = "NVIDIA Ada Lovelace architecture whitepaper v2.1, appendix A (GeForce RTX 4090)"
_NV_AMPERE_GA102 = (
    "NVIDIA Ampere GA102 GPU architecture whitepaper, table 9 (GeForce RTX 3090 / 3090 Ti)"
)
_NV_A100 = "NVIDIA A100 Tensor Core GPU datasheet (40GB / 80GB, PCIe / SXM4)"
_NV_H100 = "NVIDIA H100 Tensor Core GPU datasheet (SXM / PCIe / NVL)"
_NV_H200 = "NVIDIA H200 Tensor Core GPU datasheet (SXM / NVL)"
_NV_B200 = "NVIDIA HGX B200 specifications (per GPU: 8 TB/s, 180 GB, 2.25 PFLOPS dense FP16/BF16)"
_AMD_MI300 = "AMD Instinct MI300X / MI325X product pages (peak BF16 dense matrix)"
_AMD_MI350 = "AMD Instinct MI350X / MI355X product pages (288 GB HBM3E, 8 TB/s, BF16 dense matrix)"

GPU_SPECS: tuple[GpuSpec, ...] = (
    # GeForce / workstation
    GpuSpec(
        "RTX 5090",
        r"5090",
        1792,
        32,
        209.5,
        "NVIDIA RTX Blackwell GPU architecture whitepaper, GeForce RTX 5090",
    ),
    GpuSpec("RTX 4090", r"4090", 1008, 24, 165.2, _NV_ADA),
    GpuSpec("RTX 3090 Ti", r"3090ti", 1008, 24, 80.0, _NV_AMPERE_GA102),
    GpuSpec("RTX 3090", r"3090", 936, 24, 71.0, _NV_AMPERE_GA102),
    GpuSpec(
        "RTX 6000 Ada",
        r"6000ada|ada6000",
        960,
        48,
        364.2,
        "NVIDIA RTX 6000 Ada Generation datasheet",
    ),
    GpuSpec(
        "RTX A6000", r"a6000", 768, 48, 154.8, "NVIDIA RTX A6000 datasheet (309.7 TFLOPS sparse)"
    ),
    # Data centre, Ada / Ampere
    GpuSpec(
        "L40S", r"l40s", 864, 48, 362.1, "NVIDIA L40S datasheet (733 TFLOPS BF16 with sparsity)"
    ),
    GpuSpec(
        "L40", r"l40(?!s)", 864, 48, 181.0, "NVIDIA L40 datasheet (362 TFLOPS BF16 with sparsity)"
    ),
    GpuSpec(
        "L4", r"l4(?![0-9])", 300, 24, 121.0, "NVIDIA L4 datasheet (242 TFLOPS BF16 with sparsity)"
    ),
    GpuSpec(
        "A10G",
        r"a10g",
        600,
        24,
        70.0,
        "AWS EC2 G5 instance page (A10G: 24 GB, 600 GB/s); tensor rate per Baseten's A10 vs A10G spec comparison",
    ),
    GpuSpec("A10", r"a10(?![0-9g])", 600, 24, 125.0, "NVIDIA A10 Tensor Core GPU datasheet"),
    GpuSpec(
        "T4", r"(^|[^a-z])t4(?![0-9])", 320, 16, None, "NVIDIA T4 datasheet (FP16 only, no BF16)"
    ),
    GpuSpec("V100", r"v100", 900, 32, None, "NVIDIA V100 datasheet (SXM2 32GB; no BF16)"),
    GpuSpec("A100 PCIe 80GB", r"a100.*pcie.*80|a100.*80.*pcie", 1935, 80, 312.0, _NV_A100),
    GpuSpec("A100 PCIe 40GB", r"a100.*pcie", 1555, 40, 312.0, _NV_A100),
    GpuSpec("A100 SXM 40GB", r"a100.*40", 1555, 40, 312.0, _NV_A100),
    GpuSpec("A100 SXM 80GB", r"a100", 2039, 80, 312.0, _NV_A100),
    GpuSpec(
        "A800 PCIe 80GB",
        r"a800.*pcie",
        1935,
        80,
        312.0,
        "NVIDIA A800 datasheet (A100 silicon, NVLink 400 GB/s)",
    ),
    GpuSpec(
        "A800 SXM 80GB",
        r"a800",
        2039,
        80,
        312.0,
        "NVIDIA A800 datasheet (A100 silicon, NVLink 400 GB/s)",
    ),
    # Hopper
    GpuSpec("H100 PCIe", r"h100.*pcie", 2000, 80, 756.0, _NV_H100),
    GpuSpec("H100 NVL", r"h100.*nvl", 3900, 94, 835.0, _NV_H100),
    GpuSpec("H100 SXM", r"h100", 3350, 80, 989.0, _NV_H100),
    GpuSpec(
        "H800 PCIe",
        r"h800.*pcie",
        2000,
        80,
        756.0,
        "NVIDIA H800 datasheet (H100 silicon, NVLink 400 GB/s)",
    ),
    GpuSpec(
        "H800 SXM",
        r"h800",
        3350,
        80,
        989.0,
        "NVIDIA H800 datasheet (H100 silicon, NVLink 400 GB/s)",
    ),
    GpuSpec("H200 NVL", r"h200.*nvl", 4800, 141, 835.0, _NV_H200),
    GpuSpec("H200", r"h200", 4800, 141, 989.0, _NV_H200),
    GpuSpec(
        "H20",
        r"h20(?![0-9])",
        4000,
        96,
        148.0,
        "NVIDIA H20 specifications as published by server vendors",
    ),
    # Blackwell
    GpuSpec("GB200", r"gb200", 8000, 186, 2500.0, "NVIDIA GB200 NVL72 specifications (per GPU)"),
    GpuSpec("B200", r"b200", 8000, 180, 2250.0, _NV_B200),
    # AMD Instinct
    GpuSpec("MI355X", r"mi355", 8000, 288, 2516.6, _AMD_MI350),
    GpuSpec("MI350X", r"mi350", 8000, 288, 2306.9, _AMD_MI350),
    GpuSpec("MI325X", r"mi325", 6000, 256, 1307.4, _AMD_MI300),
    GpuSpec("MI300X", r"mi300x|mi300(?![a-z])", 5300, 192, 1307.4, _AMD_MI300),
    GpuSpec("MI250X", r"mi250", 3276.8, 128, 383.0, "AMD Instinct MI250X product page"),
)

# Words that name a vendor or a product line, not the GPU model: dropped before matching.
_VENDOR_WORDS = re.compile(
    r"nvidia|geforce|tesla|quadro|amd|instinct|radeon|graphics|tensor\s*core|gpu"
)


def squash_name(name: str) -> str:
    """``"NVIDIA GeForce RTX-4090"`` -> ``"rtx4090"``: lowercase, vendor words and separators gone."""
    lowered = _VENDOR_WORDS.sub(" ", name.lower())
    return re.sub(r"[^a-z0-9]+", "", lowered)


def find_gpu(name: str) -> GpuSpec | None:
    """The table row for a GPU name as people and tools write it, or None when unknown."""
    squashed = squash_name(name)
    if not squashed:
        return None
    for spec in GPU_SPECS:
        if re.search(spec.pattern, squashed):
            return spec
    return None


def gpu_facts(name: str, count: int | None = None) -> Hardware:
    """Hardware facts for ``count`` GPUs named ``name`` (as nvidia-smi, a tool or a person wrote it).

    The name and count are the caller's (source ``user``); bandwidth, memory and TFLOPS come
    from the spec table (source ``spec_table``, detail naming the row and its published source).
    An unknown GPU gives only the name and count.
    """
    if count is not None and count < 1:
        raise ConfigError(f"GPU count must be at least 1, got {count}")
    hw = Hardware(
        gpu_name=Fact(value=name, source="user"),
        gpu_count=Fact(value=count, source="user") if count is not None else None,
    )
    spec = find_gpu(name)
    if spec is None:
        return hw
    detail = f"{spec.name}: {spec.source}"
    hw.memory_bandwidth_gb_s = Fact(
        value=spec.memory_bandwidth_gb_s, source="spec_table", detail=detail
    )
    hw.memory_gb = Fact(value=spec.memory_gb, source="spec_table", detail=detail)
    if spec.bf16_tflops is not None:
        hw.bf16_tflops = Fact(value=spec.bf16_tflops, source="spec_table", detail=detail)
    return hw


# ---------------------------------------------------------------------------------------------
# Models


@dataclass(frozen=True)
class ModelSpec:
    """One model's shape. ``key`` is the squashed name (see :func:`squash_model_name`)."""

    name: str
    key: str
    parameters: float
    num_layers: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    active_parameters: float | None = None  # mixture-of-experts: parameters read per token
    default_dtype: str = "bfloat16"
    weight_bytes: float | None = None  # checkpoints whose bytes are not parameters x one dtype


_HF = "the model's config.json on Hugging Face (num_hidden_layers, num_key_value_heads, head_dim) and its model card"

# Figures: each model's config.json and model card on Hugging Face.
MODEL_SPECS: tuple[ModelSpec, ...] = (
    ModelSpec("Qwen2.5-0.5B", "qwen2505b", 0.49e9, 24, 2, 64, 896),
    ModelSpec("Qwen2.5-1.5B", "qwen2515b", 1.54e9, 28, 2, 128, 1536),
    ModelSpec("Qwen2.5-3B", "qwen253b", 3.09e9, 36, 2, 128, 2048),
    ModelSpec("Qwen2.5-7B", "qwen257b", 7.61e9, 28, 4, 128, 3584),
    ModelSpec("Qwen2.5-14B", "qwen2514b", 14.7e9, 48, 8, 128, 5120),
    ModelSpec("Qwen2.5-32B", "qwen2532b", 32.5e9, 64, 8, 128, 5120),
    ModelSpec("Qwen2.5-72B", "qwen2572b", 72.7e9, 80, 8, 128, 8192),
    ModelSpec("Qwen3-0.6B", "qwen306b", 0.6e9, 28, 8, 128, 1024),
    ModelSpec("Qwen3-1.7B", "qwen317b", 1.7e9, 28, 8, 128, 2048),
    ModelSpec("Qwen3-4B", "qwen34b", 4.0e9, 36, 8, 128, 2560),
    ModelSpec("Qwen3-8B", "qwen38b", 8.2e9, 36, 8, 128, 4096),
    ModelSpec("Qwen3-14B", "qwen314b", 14.8e9, 40, 8, 128, 5120),
    ModelSpec("Qwen3-32B", "qwen332b", 32.8e9, 64, 8, 128, 5120),
    ModelSpec("Qwen3-30B-A3B", "qwen330ba3b", 30.5e9, 48, 4, 128, 2048, active_parameters=3.3e9),
    ModelSpec("Qwen3-235B-A22B", "qwen3235ba22b", 235e9, 94, 4, 128, 4096, active_parameters=22e9),
    ModelSpec("Llama-3.2-1B", "llama321b", 1.24e9, 16, 8, 64, 2048),
    ModelSpec("Llama-3.2-3B", "llama323b", 3.21e9, 28, 8, 128, 3072),
    ModelSpec("Llama-3-8B", "llama38b", 8.03e9, 32, 8, 128, 4096),
    ModelSpec("Llama-3.1-8B", "llama318b", 8.03e9, 32, 8, 128, 4096),
    ModelSpec("Llama-3-70B", "llama370b", 70.6e9, 80, 8, 128, 8192),
    ModelSpec("Llama-3.1-70B", "llama3170b", 70.6e9, 80, 8, 128, 8192),
    ModelSpec("Llama-3.3-70B", "llama3370b", 70.6e9, 80, 8, 128, 8192),
    ModelSpec("Mistral-7B", "mistral7b", 7.25e9, 32, 8, 128, 4096),
    ModelSpec("Yi-1.5-34B", "yi1534b", 34.4e9, 60, 8, 128, 7168),
    ModelSpec("Yi-34B", "yi34b", 34.4e9, 60, 8, 128, 7168),
    # gpt-oss: MoE weights in MXFP4 (checkpoint 12.8 GiB / 60.8 GiB per the model card).
    ModelSpec(
        "gpt-oss-20b",
        "gptoss20b",
        20.9e9,
        24,
        8,
        64,
        2880,
        active_parameters=3.6e9,
        default_dtype="mxfp4",
        weight_bytes=13.8e9,
    ),
    ModelSpec(
        "gpt-oss-120b",
        "gptoss120b",
        116.8e9,
        36,
        8,
        64,
        2880,
        active_parameters=5.1e9,
        default_dtype="mxfp4",
        weight_bytes=65.3e9,
    ),
    # MiniMax-M2 / M2.5 (same architecture): 62 layers x 8 KV heads x 128 agrees with the vLLM
    # log of the MI355X peer data set: 56.86 GiB of fp8 KV cache = 480,800 tokens x 126,976 B.
    ModelSpec(
        "MiniMax-M2.5",
        "minimaxm25",
        229e9,
        62,
        8,
        128,
        3072,
        active_parameters=10e9,
        default_dtype="fp8",
    ),
    ModelSpec(
        "MiniMax-M2",
        "minimaxm2",
        229e9,
        62,
        8,
        128,
        3072,
        active_parameters=10e9,
        default_dtype="fp8",
    ),
)

# Bytes per stored element, by the dtype names vLLM, transformers and people use.
DTYPE_BYTES: dict[str, float] = {
    "float32": 4,
    "fp32": 4,
    "float": 4,
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "auto": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "float8": 1,
    "int8": 1,
    "w8a8": 1,
    "int4": 0.5,
    "awq": 0.5,
    "gptq": 0.5,
    "mxfp4": 0.5,
    "nvfp4": 0.5,
    "fp4": 0.5,
}

_MODEL_SUFFIXES = re.compile(r"(-|_)(instruct|chat|it|base|hf)(?=$|-|_)", re.IGNORECASE)


def squash_model_name(name: str) -> str:
    """``"Qwen/Qwen2.5-7B-Instruct"`` -> ``"qwen257b"``: no organisation, no chat suffix, no separators."""
    base = name.strip().rstrip("/").rsplit("/", 1)[-1]
    base = _MODEL_SUFFIXES.sub("", base)
    return re.sub(r"[^a-z0-9]+", "", base.lower())


def find_model(name: str) -> ModelSpec | None:
    """The table row whose key the model name contains (the longest such key), or None."""
    squashed = squash_model_name(name)
    if not squashed:
        return None
    hits = [spec for spec in MODEL_SPECS if spec.key in squashed]
    if not hits:
        return None
    return max(hits, key=lambda spec: len(spec.key))


def dtype_bytes(dtype: str) -> float:
    """Bytes per element of a dtype name (``"bfloat16"`` -> 2); a name sweeper does not know is
    an error naming the known ones."""
    key = dtype.lower().removeprefix("torch.")
    if key not in DTYPE_BYTES:
        raise ConfigError(
            f"unknown dtype {dtype!r}; sweeper knows {', '.join(sorted(DTYPE_BYTES))}"
        )
    return DTYPE_BYTES[key]


def kv_bytes_per_token(
    num_layers: int, num_kv_heads: int, head_dim: int, bytes_per_element: float
) -> int:
    """K and V of every layer for one token."""
    return round(2 * num_layers * num_kv_heads * head_dim * bytes_per_element)


def model_facts(
    name: str | None,
    config_json: Path | None = None,
    dtype: str | None = None,
    *,
    kv_dtype: str | None = None,
) -> ModelFacts:
    """Model facts from its ``config.json`` (source ``model_config``) or the built-in table
    (``spec_table``). The config.json wins over the table; ``dtype`` / ``kv_dtype`` (the
    caller's, source ``user``) win over both. ``kv_dtype`` defaults to the weight dtype.

    Weight bytes come from the checkpoint's own index (``model.safetensors.index.json``
    ``metadata.total_size``) or file sizes when the config.json sits in a checkpoint folder,
    else parameters x bytes per element.
    """
    spec = find_model(name) if name else None
    config: dict[str, Any] = _read_config(config_json) if config_json is not None else {}
    if config:
        text = config.get("text_config")
        if isinstance(text, dict):  # multimodal wrappers keep the language model's shape here
            config = {**config, **text}
    facts = ModelFacts(name=name or (spec.name if spec else None))
    cfg_detail = str(config_json) if config_json is not None else None
    table_detail = f"{spec.name}: {_HF}" if spec else None

    def pick(config_keys: tuple[str, ...], table_value: float | None) -> Fact | None:
        for key in config_keys:
            value = config.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                return Fact(value=value, source="model_config", detail=f"{cfg_detail}: {key}")
        if table_value is not None:
            return Fact(value=table_value, source="spec_table", detail=table_detail)
        return None

    facts.num_layers = pick(
        ("num_hidden_layers", "n_layer", "num_layers"), spec.num_layers if spec else None
    )
    facts.hidden_size = pick(
        ("hidden_size", "n_embd", "d_model"), spec.hidden_size if spec else None
    )
    heads = config.get("num_attention_heads")
    facts.num_kv_heads = pick(
        ("num_key_value_heads", "num_kv_heads"), spec.num_kv_heads if spec else None
    )
    if facts.num_kv_heads is None and isinstance(heads, int):
        facts.num_kv_heads = Fact(
            value=heads, source="model_config", detail=f"{cfg_detail}: num_attention_heads (no GQA)"
        )
    facts.head_dim = pick(("head_dim",), spec.head_dim if spec else None)
    if facts.head_dim is None and isinstance(heads, int) and facts.hidden_size is not None:
        hidden = facts.hidden_size.value
        if isinstance(hidden, int | float) and heads > 0:
            facts.head_dim = Fact(
                value=int(hidden) // heads,
                source="model_config",
                detail=f"{cfg_detail}: hidden_size / num_attention_heads",
            )

    # dtype of the weights: the caller's, else the config's quantisation or torch_dtype, else the table's.
    if dtype is not None:
        facts.dtype = Fact(value=dtype, source="user")
    elif (q := _config_quantization(config)) is not None:
        facts.dtype = Fact(
            value=q, source="model_config", detail=f"{cfg_detail}: quantization_config"
        )
    elif isinstance(config.get("torch_dtype") or config.get("dtype"), str):
        facts.dtype = Fact(
            value=str(config.get("torch_dtype") or config.get("dtype")),
            source="model_config",
            detail=f"{cfg_detail}: torch_dtype",
        )
    elif spec is not None:
        facts.dtype = Fact(value=spec.default_dtype, source="spec_table", detail=table_detail)
    weight_dtype = str(facts.dtype.value) if facts.dtype is not None else None

    # Parameters: the table (config.json does not say), else an estimate from the config's shapes.
    if spec is not None:
        facts.parameters = Fact(value=spec.parameters, source="spec_table", detail=table_detail)
        if spec.active_parameters is not None:
            facts.active_parameters = Fact(
                value=spec.active_parameters, source="spec_table", detail=table_detail
            )
    elif config:
        total, active = _estimate_parameters(config)
        if total is not None:
            facts.parameters = Fact(
                value=total,
                source="model_config",
                detail=f"{cfg_detail}: estimated from layer shapes",
            )
        if active is not None and total is not None and active < total:
            facts.active_parameters = Fact(
                value=active,
                source="model_config",
                detail=f"{cfg_detail}: estimated from layer shapes (experts per token)",
            )

    facts.weight_bytes = _weight_bytes(config_json, spec, facts, weight_dtype, dtype is not None)

    kv_name = kv_dtype or weight_dtype
    if kv_name is not None and kv_name.lower() in {
        "mxfp4",
        "nvfp4",
        "fp4",
        "int4",
        "awq",
        "gptq",
        "int8",
        "w8a8",
    }:
        kv_name = "bfloat16"  # weight-only quantisation: the KV cache stays in 16-bit unless told otherwise
    shape = (facts.num_layers, facts.num_kv_heads, facts.head_dim)
    if kv_name is not None and all(
        f is not None and isinstance(f.value, int | float) for f in shape
    ):
        layers, kv_heads, head_dim = (
            int(f.value) for f in shape if f is not None and isinstance(f.value, int | float)
        )
        source = "user" if kv_dtype is not None else ("model_config" if config else "spec_table")
        facts.kv_bytes_per_token = Fact(
            value=kv_bytes_per_token(layers, kv_heads, head_dim, dtype_bytes(kv_name)),
            source="derived",
            detail=f"2 x {layers} layers x {kv_heads} KV heads x {head_dim} head dim x "
            f"{dtype_bytes(kv_name):g} B ({kv_name}, {source})",
        )
    return facts


def _read_config(path: Path) -> dict[str, Any]:
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(
            f"model config {path} does not exist; point at the model's config.json"
        ) from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"model config {path} is not valid JSON (line {exc.lineno}: {exc.msg})"
        ) from exc
    if not isinstance(data, dict):
        raise ConfigError(f"model config {path} is not a JSON object")
    return data


def _config_quantization(config: dict[str, Any]) -> str | None:
    q = config.get("quantization_config")
    if not isinstance(q, dict):
        return None
    method = str(q.get("quant_method", "")).lower()
    if method in DTYPE_BYTES:
        return method
    bits = q.get("bits") or q.get("w_bit")
    if bits == 4:
        return "int4"
    if bits == 8:
        return "int8"
    return None


def _estimate_parameters(config: dict[str, Any]) -> tuple[float | None, float | None]:
    """Total and per-token parameters of a decoder from its shapes (embeddings, attention, MLP or
    experts); norms and biases are ignored (well under 0.1%)."""
    hidden = config.get("hidden_size")
    layers = config.get("num_hidden_layers")
    vocab = config.get("vocab_size")
    heads = config.get("num_attention_heads")
    if not all(isinstance(v, int) and v > 0 for v in (hidden, layers, vocab, heads)):
        return None, None
    assert (
        isinstance(hidden, int)
        and isinstance(layers, int)
        and isinstance(vocab, int)
        and isinstance(heads, int)
    )
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or hidden // heads
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    experts = (
        config.get("num_local_experts")
        or config.get("num_experts")
        or config.get("n_routed_experts")
    )
    per_token = config.get("num_experts_per_tok") or config.get("moe_topk")
    moe_inter = config.get("moe_intermediate_size") or config.get("intermediate_size")
    inter = config.get("intermediate_size") or 4 * hidden
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings") else 2)
    if isinstance(experts, int) and experts > 1 and isinstance(moe_inter, int):
        expert = 3 * hidden * moe_inter
        total = embeddings + layers * (attention + experts * expert)
        active = embeddings + layers * (attention + int(per_token or 1) * expert)
        return float(total), float(active)
    total = embeddings + layers * (attention + 3 * hidden * int(inter))
    return float(total), None


def _weight_bytes(
    config_json: Path | None,
    spec: ModelSpec | None,
    facts: ModelFacts,
    weight_dtype: str | None,
    user_dtype: bool,
) -> Fact | None:
    if config_json is not None and not user_dtype:
        folder = Path(config_json) if Path(config_json).is_dir() else Path(config_json).parent
        index = folder / "model.safetensors.index.json"
        if index.exists():
            try:
                total = (
                    json.loads(index.read_text(encoding="utf-8"))
                    .get("metadata", {})
                    .get("total_size")
                )
            except json.JSONDecodeError:
                total = None
            if isinstance(total, int | float) and total > 0:
                return Fact(
                    value=int(total), source="model_config", detail=f"{index}: metadata.total_size"
                )
        files = sorted(folder.glob("*.safetensors"))
        if files:
            return Fact(
                value=sum(f.stat().st_size for f in files),
                source="model_config",
                detail=f"{folder}: size of {len(files)} .safetensors file(s)",
            )
    if spec is not None and spec.weight_bytes is not None and not user_dtype:
        return Fact(
            value=spec.weight_bytes,
            source="spec_table",
            detail=f"{spec.name}: checkpoint size per its model card",
        )
    params = facts.parameters.value if facts.parameters is not None else None
    if isinstance(params, int | float) and weight_dtype is not None:
        size = dtype_bytes(weight_dtype)
        return Fact(
            value=int(params * size),
            source="derived",
            detail=f"{params:.4g} parameters x {size:g} B ({weight_dtype})",
        )
    return None
