"""Hardware and model facts: built-in spec tables, forgiving name matching, config.json reading.

Two calls, used by the recorder and the importers to fill the manifest::

    gpu_facts("NVIDIA GeForce RTX 4090", 1)      # -> schema.Hardware (bandwidth, memory, TFLOPS)
    model_facts("Qwen/Qwen2.5-7B-Instruct")      # -> schema.ModelFacts (layers, KV heads, ...)
    model_facts(None, Path("model/config.json")) # the model's own config.json wins over the table

Every value is a :class:`~sweeper.schema.Fact` carrying its source: ``spec_table`` (the tables
``sweeper/facts/data/gpus.csv`` and ``models.csv``, each row citing where its figures come from), ``model_config`` (the model's config.json)
or ``user`` (what the caller gave). An unknown GPU yields only its name and count: sweeper never
invents a figure.

The findings use these for the memory-bandwidth roofline (ideal decode tok/s = bandwidth /
bytes read per token) and for the KV footprint of a request (KV bytes per token =
2 (K and V) x layers x KV heads x head dim x bytes per element).
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweeper.errors import ConfigError
from sweeper.schema import Fact, FactValue, Hardware, ModelFacts

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


DATA_DIR = Path(__file__).parent / "data"
GPU_TABLE = DATA_DIR / "gpus.csv"
MODEL_TABLE = DATA_DIR / "models.csv"


def _optional_float(text: str) -> float | None:
    return float(text) if text.strip() else None


def _read_table(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def load_gpu_specs(path: Path = GPU_TABLE) -> tuple[GpuSpec, ...]:
    """The GPU table (``sweeper/facts/data/gpus.csv``: one row per GPU, its figures and their source).
    Rows are matched in order, so specific variants (``A100 PCIe 80GB``) come before general
    ones (``A100``)."""
    return tuple(
        GpuSpec(
            name=row["name"],
            pattern=row["pattern"],
            memory_bandwidth_gb_s=float(row["memory_bandwidth_gb_s"]),
            memory_gb=float(row["memory_gb"]),
            bf16_tflops=_optional_float(row["bf16_tflops"]),
            source=row["source"],
        )
        for row in _read_table(path)
    )


GPU_SPECS: tuple[GpuSpec, ...] = load_gpu_specs()

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
    source: str = "the model's config.json and model card on Hugging Face"


def load_model_specs(path: Path = MODEL_TABLE) -> tuple[ModelSpec, ...]:
    """The model table (``sweeper/facts/data/models.csv``: shapes from each model's config.json)."""
    return tuple(
        ModelSpec(
            name=row["name"],
            key=row["key"],
            parameters=float(row["parameters"]),
            num_layers=int(row["num_layers"]),
            num_kv_heads=int(row["num_kv_heads"]),
            head_dim=int(row["head_dim"]),
            hidden_size=int(row["hidden_size"]),
            active_parameters=_optional_float(row["active_parameters"]),
            default_dtype=row["default_dtype"],
            weight_bytes=_optional_float(row["weight_bytes"]),
            source=row["source"],
        )
        for row in _read_table(path)
    )


MODEL_SPECS: tuple[ModelSpec, ...] = load_model_specs()

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
    sources = _FactSources(config=_language_config(config_json), path=config_json, spec=spec)
    facts = ModelFacts(name=name or (spec.name if spec else None))
    _set_shape(facts, sources)
    # dtype and KV bytes are set only when known (unknown ones stay unset, not set to None)
    if (weight := _weight_dtype(dtype, sources)) is not None:
        facts.dtype = weight
    weight_dtype = str(weight.value) if weight is not None else None
    _set_parameters(facts, sources)
    facts.weight_bytes = _weight_bytes(config_json, spec, facts, weight_dtype, dtype is not None)
    if (kv := _kv_bytes(facts, kv_dtype, weight_dtype, sources)) is not None:
        facts.kv_bytes_per_token = kv
    return facts


# Weight-only quantisations: their KV cache stays in 16-bit unless the caller says otherwise.
_WEIGHT_ONLY_DTYPES = frozenset({"mxfp4", "nvfp4", "fp4", "int4", "awq", "gptq", "int8", "w8a8"})


@dataclass(frozen=True)
class _FactSources:
    """Where a model's facts come from: its config.json (``config``, read from ``path``; empty
    when none was given) and its table row (``spec``, None when the name matched none)."""

    config: dict[str, Any]
    path: Path | None
    spec: ModelSpec | None

    def from_config(self, value: FactValue, what: str) -> Fact:
        """A fact read (or worked out) from the config.json; ``what`` names the keys."""
        return Fact(value=value, source="model_config", detail=f"{self.path}: {what}")

    def from_table(self, value: FactValue) -> Fact:
        """A fact from the model table, citing the row and its source."""
        detail = f"{self.spec.name}: {self.spec.source}" if self.spec else None
        return Fact(value=value, source="spec_table", detail=detail)

    def pick(self, config_keys: tuple[str, ...], table_value: float | None) -> Fact | None:
        """The first numeric config.json value among ``config_keys``, else the table's value."""
        for key in config_keys:
            value = self.config.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                return self.from_config(value, key)
        if table_value is not None:
            return self.from_table(table_value)
        return None


def _language_config(config_json: Path | None) -> dict[str, Any]:
    """The config.json as a dict (empty without one); a multimodal wrapper's ``text_config``
    (the language model's shape) is laid over the top level."""
    config: dict[str, Any] = _read_config(config_json) if config_json is not None else {}
    text = config.get("text_config")
    if isinstance(text, dict):
        config = {**config, **text}
    return config


def _set_shape(facts: ModelFacts, sources: _FactSources) -> None:
    """Layers, hidden size, KV heads and head dim: the config.json's, else the table's; KV heads
    fall back to the attention heads (no GQA), head dim to hidden size / attention heads."""
    spec = sources.spec
    facts.num_layers = sources.pick(
        ("num_hidden_layers", "n_layer", "num_layers"), spec.num_layers if spec else None
    )
    facts.hidden_size = sources.pick(
        ("hidden_size", "n_embd", "d_model"), spec.hidden_size if spec else None
    )
    heads = sources.config.get("num_attention_heads")
    facts.num_kv_heads = sources.pick(
        ("num_key_value_heads", "num_kv_heads"), spec.num_kv_heads if spec else None
    )
    if facts.num_kv_heads is None and isinstance(heads, int):
        facts.num_kv_heads = sources.from_config(heads, "num_attention_heads (no GQA)")
    facts.head_dim = sources.pick(("head_dim",), spec.head_dim if spec else None)
    if facts.head_dim is None and isinstance(heads, int) and facts.hidden_size is not None:
        hidden = facts.hidden_size.value
        if isinstance(hidden, int | float) and heads > 0:
            facts.head_dim = sources.from_config(
                int(hidden) // heads, "hidden_size / num_attention_heads"
            )


def _weight_dtype(dtype: str | None, sources: _FactSources) -> Fact | None:
    """The weights' dtype: the caller's, else the config.json's quantisation or torch_dtype,
    else the table's."""
    config = sources.config
    if dtype is not None:
        return Fact(value=dtype, source="user")
    if (quantization := _config_quantization(config)) is not None:
        return sources.from_config(quantization, "quantization_config")
    torch_dtype = config.get("torch_dtype") or config.get("dtype")
    if isinstance(torch_dtype, str):
        return sources.from_config(torch_dtype, "torch_dtype")
    if sources.spec is not None:
        return sources.from_table(sources.spec.default_dtype)
    return None


def _set_parameters(facts: ModelFacts, sources: _FactSources) -> None:
    """Total and active parameters: the table's (a config.json does not say), else an estimate
    from the config.json's layer shapes."""
    spec = sources.spec
    if spec is not None:
        facts.parameters = sources.from_table(spec.parameters)
        if spec.active_parameters is not None:
            facts.active_parameters = sources.from_table(spec.active_parameters)
        return
    if not sources.config:
        return
    total, active = _estimate_parameters(sources.config)
    if total is not None:
        facts.parameters = sources.from_config(total, "estimated from layer shapes")
    if active is not None and total is not None and active < total:
        facts.active_parameters = sources.from_config(
            active, "estimated from layer shapes (experts per token)"
        )


def _kv_bytes(
    facts: ModelFacts, kv_dtype: str | None, weight_dtype: str | None, sources: _FactSources
) -> Fact | None:
    """KV bytes per token from the shape facts and the KV dtype (the caller's ``kv_dtype``, else
    the weights' dtype; 16-bit for a weight-only quantisation); None when either is unknown."""
    kv_name = kv_dtype or weight_dtype
    if kv_name is not None and kv_name.lower() in _WEIGHT_ONLY_DTYPES:
        kv_name = "bfloat16"
    shape = (facts.num_layers, facts.num_kv_heads, facts.head_dim)
    numbers = [int(f.value) for f in shape if f is not None and isinstance(f.value, int | float)]
    if kv_name is None or len(numbers) < len(shape):
        return None
    layers, kv_heads, head_dim = numbers
    source = (
        "user" if kv_dtype is not None else ("model_config" if sources.config else "spec_table")
    )
    size = dtype_bytes(kv_name)
    return Fact(
        value=kv_bytes_per_token(layers, kv_heads, head_dim, size),
        source="derived",
        detail=f"2 x {layers} layers x {kv_heads} KV heads x {head_dim} head dim x "
        f"{size:g} B ({kv_name}, {source})",
    )


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
