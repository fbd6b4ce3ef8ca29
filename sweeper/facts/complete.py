"""The completion of a run's facts: GPU and model figures the manifest lacks, from sweeper's spec
tables (:mod:`sweeper.facts.hardware`), each marked with its source."""

from __future__ import annotations

from sweeper.errors import ConfigError
from sweeper.facts.hardware import gpu_facts, model_facts
from sweeper.schema import RunManifest, fact_value


def complete_facts(manifest: RunManifest) -> RunManifest:
    """A copy of the manifest whose missing GPU and model figures are filled from sweeper's spec
    tables (source ``spec_table``) by the GPU and model names it has; facts it has are kept."""
    out = manifest.model_copy(deep=True)
    hw = out.hardware
    gpu = fact_value(hw.gpu_name)
    if isinstance(gpu, str) and hw.memory_bandwidth_gb_s is None:
        table = gpu_facts(gpu)
        hw.memory_bandwidth_gb_s = table.memory_bandwidth_gb_s
        hw.memory_gb = hw.memory_gb or table.memory_gb
        hw.bf16_tflops = hw.bf16_tflops or table.bf16_tflops
    model = out.model
    name = model.name or out.target.served_model_name or out.target.model
    if name and (model.weight_bytes is None or model.kv_bytes_per_token is None):
        kv_dtype = fact_value(out.server.config.kv_cache_dtype)
        dtype = fact_value(model.dtype)
        try:
            table_model = model_facts(
                name,
                dtype=dtype if isinstance(dtype, str) else None,
                kv_dtype=kv_dtype if isinstance(kv_dtype, str) and kv_dtype != "auto" else None,
            )
        except ConfigError:  # a dtype name the table does not know: keep what there is
            return out
        for key in type(model).model_fields:
            if key != "name" and getattr(model, key) is None:
                setattr(model, key, getattr(table_model, key))
    return out
